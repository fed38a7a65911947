//! What border-mgmt wants gobgpd to announce, and the calls that get it
//! there. Pure (sans-IO): the caller supplies what it observed and the
//! clock, runs the [`Op`]s against gobgpd and reports each success back.
//!
//! A VIP's host route is wanted when (docs/bgp.md):
//! - `announce = "healthy"`: border-dp is alive, has adopted the current
//!   generation, and the VIP has an eligible backend (a VIP in fail-open
//!   has none: another appliance may still serve it);
//! - `announce = "always"`: border-dp is alive;
//! - and the appliance is not in maintenance, and the condition has held
//!   for the VIP's health `rise` (damping: a flapping appliance does not
//!   flap the routers). Withdrawing is never delayed.
//!
//! Several VIPs may share an address (one per port and protocol): their
//! address is announced while any of them wants it.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use conf::Announce;

/// One host route as border announces it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Route {
    /// The VIP address: a /32 or /128.
    pub prefix: IpAddr,
    /// The appliance's own address on the VIP's port.
    pub next_hop: IpAddr,
    /// Standard communities (`asn << 16 | value`).
    pub communities: Vec<u32>,
}

impl Route {
    /// `addr/32` or `addr/128`.
    pub fn prefix_string(&self) -> String {
        let len = if self.prefix.is_ipv4() { 32 } else { 128 };
        format!("{}/{len}", self.prefix)
    }
}

/// Why a VIP is (not) wanted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// Every condition holds.
    Announce,
    /// `announce = "never"`.
    Never,
    /// border-dp's heartbeats stopped, or it is not running.
    DataplaneDown,
    /// border-dp has not adopted the published generation yet (`healthy`).
    GenerationNotAdopted,
    /// No eligible backend, or fail-open (`healthy`).
    NoEligibleBackend,
    /// `borderctl maintenance on`.
    Maintenance,
    /// The condition holds again, but not yet for the VIP's `rise`.
    Rising,
    /// border-mgmt is stopping (SIGTERM): everything is withdrawn.
    ShuttingDown,
}

impl Why {
    /// The reason in words (status, metrics, events).
    pub fn as_str(self) -> &'static str {
        match self {
            Why::Announce => "announced",
            Why::Never => "announce = never",
            Why::DataplaneDown => "dataplane down",
            Why::GenerationNotAdopted => "generation not adopted",
            Why::NoEligibleBackend => "no eligible backend",
            Why::Maintenance => "maintenance",
            Why::Rising => "rising",
            Why::ShuttingDown => "shutting down",
        }
    }
}

/// One VIP as observed.
#[derive(Clone, Debug)]
pub struct VipRouteInput {
    /// Its name.
    pub name: String,
    /// Its host route.
    pub route: Route,
    /// `vip.announce`.
    pub announce: Announce,
    /// At least one eligible backend and not fail-open.
    pub eligible: bool,
    /// How long the condition must hold before (re-)announcing: the health
    /// `rise` probes' time (zero without health checks).
    pub rise: Duration,
}

/// Everything the decision depends on, at one look.
#[derive(Clone, Debug)]
pub struct Inputs {
    /// border-dp runs and every worker's heartbeat moves.
    pub dataplane_alive: bool,
    /// Every worker has adopted the published generation.
    pub generation_adopted: bool,
    /// `borderctl maintenance on`.
    pub maintenance: bool,
    /// Every configured VIP, in config order.
    pub vips: Vec<VipRouteInput>,
}

/// The decision for one VIP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// VIP name.
    pub name: String,
    /// Its host route.
    pub route: Route,
    /// Why it is (not) wanted; wanted exactly when [`Why::Announce`].
    pub why: Why,
}

impl Verdict {
    /// Whether the VIP wants its route announced.
    pub fn wanted(&self) -> bool {
        self.why == Why::Announce
    }
}

/// A call to make to gobgpd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// AddPath.
    Add(Route),
    /// DeletePath.
    Delete(Route),
}

/// The decision state: when each VIP's condition started to hold, and what
/// gobgpd holds of ours.
#[derive(Debug, Default)]
pub struct Reconciler {
    /// VIP name -> since when its condition holds (for `rise`).
    holding_since: HashMap<String, Instant>,
    /// Not decided yet: the first look announces without waiting for
    /// `rise` (a fresh start is not a flap).
    started: bool,
    /// Routes gobgpd holds (each AddPath answered OK, no DeletePath since).
    installed: BTreeSet<Route>,
    /// Routes gobgpd may hold: ours before a lost connection or restart.
    /// Each is deleted unless wanted (then added again).
    uncertain: BTreeSet<Route>,
}

impl Reconciler {
    /// A reconciler that knows nothing of gobgpd's table; `known` are the
    /// routes an earlier border-mgmt may have left there.
    pub fn new(known: impl IntoIterator<Item = Route>) -> Reconciler {
        Reconciler {
            uncertain: known.into_iter().collect(),
            ..Reconciler::default()
        }
    }

    /// Decides every VIP at `now`.
    pub fn decide(&mut self, inputs: &Inputs, now: Instant) -> Vec<Verdict> {
        let first = !self.started;
        self.started = true;
        let mut verdicts = Vec::with_capacity(inputs.vips.len());
        let mut holding = HashMap::with_capacity(inputs.vips.len());
        for v in &inputs.vips {
            let why = match condition(inputs, v) {
                Some(why) => why,
                None => {
                    let since = match self.holding_since.get(&v.name) {
                        Some(&t) => t,
                        None if first => now.checked_sub(v.rise).unwrap_or(now),
                        None => now,
                    };
                    holding.insert(v.name.clone(), since);
                    if now.saturating_duration_since(since) >= v.rise {
                        Why::Announce
                    } else {
                        Why::Rising
                    }
                }
            };
            verdicts.push(Verdict {
                name: v.name.clone(),
                route: v.route.clone(),
                why,
            });
        }
        self.holding_since = holding;
        verdicts
    }

    /// The calls that bring gobgpd to `verdicts`: deletions first (a
    /// withdraw is the urgent direction), then additions.
    pub fn plan(&self, verdicts: &[Verdict]) -> Vec<Op> {
        let wanted: BTreeSet<&Route> = verdicts
            .iter()
            .filter(|v| v.wanted())
            .map(|v| &v.route)
            .collect();
        let deletes = self
            .installed
            .iter()
            .chain(self.uncertain.iter())
            .filter(|r| !wanted.contains(r))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(|r| Op::Delete(r.clone()));
        let adds = wanted
            .into_iter()
            .filter(|r| !self.installed.contains(*r))
            .map(|r| Op::Add(r.clone()));
        deletes.chain(adds).collect()
    }

    /// Every call that withdraws what is or may be in gobgpd (shutdown).
    pub fn withdraw_all(&self) -> Vec<Op> {
        self.plan(&[])
    }

    /// gobgpd answered OK to `op`.
    pub fn done(&mut self, op: &Op) {
        match op {
            Op::Add(r) => {
                self.uncertain.remove(r);
                self.installed.insert(r.clone());
            }
            Op::Delete(r) => {
                self.uncertain.remove(r);
                self.installed.remove(r);
            }
        }
    }

    /// The connection to gobgpd broke (or gobgpd restarted): what it holds
    /// of ours is no longer known.
    pub fn lost_gobgpd(&mut self) {
        let installed = std::mem::take(&mut self.installed);
        self.uncertain.extend(installed);
    }

    /// Whether gobgpd holds `route` as far as border knows.
    pub fn is_installed(&self, route: &Route) -> bool {
        self.installed.contains(route)
    }

    /// Routes gobgpd holds, as far as border knows.
    pub fn installed(&self) -> impl Iterator<Item = &Route> {
        self.installed.iter()
    }
}

/// `None` when the VIP's announce condition holds, else the first reason
/// it does not.
fn condition(inputs: &Inputs, v: &VipRouteInput) -> Option<Why> {
    match v.announce {
        Announce::Never => return Some(Why::Never),
        Announce::Always | Announce::Healthy if !inputs.dataplane_alive => {
            return Some(Why::DataplaneDown)
        }
        Announce::Always | Announce::Healthy if inputs.maintenance => {
            return Some(Why::Maintenance)
        }
        Announce::Always => return None,
        Announce::Healthy => {}
    }
    if !inputs.generation_adopted {
        Some(Why::GenerationNotAdopted)
    } else if !v.eligible {
        Some(Why::NoEligibleBackend)
    } else {
        None
    }
}

/// A VIP's state as the operator sees it: announced (gobgpd holds its
/// route) or not, and why in words. `gobgpd_up`: the last call succeeded.
pub fn shown(v: &Verdict, installed: bool, gobgpd_up: bool) -> (bool, &'static str) {
    match (v.wanted(), installed) {
        (true, true) => (true, Why::Announce.as_str()),
        (true, false) if !gobgpd_up => (false, "gobgpd unreachable"),
        (true, false) => (false, "announcing"),
        (false, true) if !gobgpd_up => (true, "gobgpd unreachable"),
        // Still held by gobgpd: the withdraw is under way, for this reason.
        (false, installed) => (installed, v.why.as_str()),
    }
}

#[cfg(test)]
mod tests;
