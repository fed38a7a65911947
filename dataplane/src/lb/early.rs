//! A new flow's pick, started in the express lane's passes: a SYN to a
//! VIP is parsed and hashed in the first pass anyway (its index bucket
//! starts loading there), so the same pass also takes the Maglev hash and
//! starts loading the ring's slot; the second pass reads the slot, guesses
//! the local tuple [`LocalPorts::next`] will hand out, and starts loading
//! the reply key's index bucket. Those loads then overlap with the rest of
//! the burst's instead of waiting on the new flow's critical path.
//!
//! What the passes find goes into an [`Early`] of its own, in an array of
//! the worker's beside the preparations of the burst
//! ([`super::Prepared`]), which only SYNs write and only their run reads:
//! an established packet's preparation and its passes stay as they are.
//!
//! Nothing here changes what a new flow gets: the general path picks as
//! it always does, and only takes a hash or a pick from here when the key
//! it has is the one the passes had (same tables: the passes and the run
//! of a burst are in one poll iteration).
//!
//! [`LocalPorts::next`]: crate::local_ports::LocalPorts::next

use std::cell::Cell;

use conf::{Mode, SynProxy};

use super::classify::syn_only;
use super::tables::Adopted;
use super::Lb;
use crate::conntrack::{FlowKey, KeyHash};
use crate::io::BURST;
use crate::local_ports::SetId;
use crate::wire::ip_proto;

/// What the lane's passes made of a SYN to a VIP, carried to the general
/// path with its frame ([`Lb::early_carry`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Early {
    /// The client's key and its index hash (first pass).
    key: FlowKey,
    hash: KeyHash,
    /// The VIP (index in the tables).
    vi: u32,
    /// The Maglev flow hash (first pass), then the backend's index in the
    /// VIP's backends (second pass, [`EARLY_PICKED`]).
    pick: u64,
    /// The reply key the second pass expects, and its index hash.
    reply: FlowKey,
    reply_hash: KeyHash,
    /// The tuple set the guess counted in ([`EARLY_GUESSED`]).
    set: SetId,
    /// [`EARLY_PICKED`], [`EARLY_REPLY`], [`EARLY_GUESSED`].
    bits: u8,
}

/// `pick` holds the backend's index.
const EARLY_PICKED: u8 = 1;
/// `reply` and `reply_hash` hold the expected reply key.
const EARLY_REPLY: u8 = 2;
/// A local tuple was guessed: one more is expected of `set`.
const EARLY_GUESSED: u8 = 4;

/// How many guessed tuples of a set the general path has yet to take,
/// for sets `0..GUESS_SETS` (others are not guessed). A burst is prepared
/// before the previous one ran, so the guesses run ahead of the cursor.
pub(super) const GUESS_SETS: usize = 8;

pub(super) type Ahead = [Cell<u32>; GUESS_SETS];

/// The new flows' picks of one burst, by frame, and which frames have one
/// (bit i: frame i). Written by the lane's first pass for SYNs only
/// ([`EarlyOut`]), read by their second pass and their run.
#[derive(Clone, Copy, Debug)]
pub struct NewFlows {
    marks: u32,
    picks: [Early; BURST],
}

impl Default for NewFlows {
    fn default() -> Self {
        NewFlows {
            marks: 0,
            picks: [Early::default(); BURST],
        }
    }
}

impl NewFlows {
    /// Before the first pass over a burst: no frame has a pick yet.
    #[inline(always)]
    pub fn clear(&mut self) {
        self.marks = 0;
    }

    /// Which frames have a pick (bit i: frame i).
    #[inline(always)]
    pub fn marks(&self) -> u32 {
        self.marks
    }

    /// Frame `i`'s pick, if the first pass started one.
    #[inline(always)]
    pub fn get(&self, i: usize) -> Option<&Early> {
        if i < BURST && self.marks >> i & 1 != 0 {
            self.picks.get(i)
        } else {
            None
        }
    }

    /// [`NewFlows::get`], to be completed by the second pass.
    #[inline(always)]
    pub fn get_mut(&mut self, i: usize) -> Option<&mut Early> {
        if i < BURST && self.marks >> i & 1 != 0 {
            self.picks.get_mut(i)
        } else {
            None
        }
    }
}

/// Where the lane's first pass notes a SYN whose new flow's pick it
/// started: frame `at` of the burst's [`NewFlows`]. Only the SYN's branch
/// touches them, so an established packet's pass is as it was.
pub struct EarlyOut<'a> {
    pub flows: &'a mut NewFlows,
    pub at: usize,
}

impl EarlyOut<'_> {
    /// Frame `at`'s pick, to be started (marked by [`EarlyOut::started`]).
    #[inline(always)]
    pub(super) fn slot(&mut self) -> Option<&mut Early> {
        self.flows.picks.get_mut(self.at)
    }

    /// The pick of frame `at` was started.
    #[inline(always)]
    pub(super) fn started(&mut self) {
        if self.at < BURST {
            self.flows.marks |= 1 << self.at;
        }
    }
}

impl Early {
    /// The backend the passes picked for a new flow of `key` to VIP `vi`.
    #[inline(always)]
    pub(super) fn picked(&self, vi: u32, key: &FlowKey) -> Option<u32> {
        (self.bits & EARLY_PICKED != 0 && self.vi == vi && self.key == *key)
            .then_some(self.pick as u32)
    }

    /// The index hash of `key` if it is the client's key the passes hashed.
    #[inline(always)]
    pub(super) fn hash_of(&self, key: &FlowKey) -> Option<KeyHash> {
        (self.key == *key).then_some(self.hash)
    }

    /// The index hash of `reply` if the passes hashed that key.
    #[inline(always)]
    pub(super) fn reply_hash(&self, reply: &FlowKey) -> Option<KeyHash> {
        (self.bits & EARLY_REPLY != 0 && self.reply == *reply).then_some(self.reply_hash)
    }
}

impl Lb {
    /// [`Early::reply_hash`] of what is carried, else the hash of `reply`.
    #[inline(always)]
    pub(super) fn reply_hash_of(&self, reply: &FlowKey) -> KeyHash {
        match self.carry.as_ref().and_then(|c| c.reply_hash(reply)) {
            Some(h) => {
                #[cfg(test)]
                {
                    let (p, r) = self.early_used.get();
                    self.early_used.set((p, r + 1));
                }
                h
            }
            None => self.conntrack.hash_of(reply),
        }
    }

    /// First pass, for a frame to a VIP of the key `key` (index hash
    /// `hash`) and TCP flags `flags` that the lane declined: if it is a SYN
    /// (no other flag but PSH, ECE, CWR, URG), takes the Maglev hash and
    /// starts loading its ring slot, into `out`. False: not a SYN, or the
    /// VIP picks another way (persistence, SYN proxy, no backend), and
    /// the general path does it all. Changes nothing. Out of line: the
    /// lane's first pass, inlined into the worker loop, stays as it was
    /// for the established packets it is for.
    #[inline(never)]
    pub(super) fn early_pick(
        &self,
        tables: &Adopted<'_>,
        (key, hash): (&FlowKey, KeyHash),
        flags: u8,
        out: &mut Early,
    ) -> bool {
        if key.proto != ip_proto::TCP || !syn_only(flags) {
            return false;
        }
        // Looked up again here rather than carried out of the first
        // pass's lookup, which established packets share.
        let Some(vi) = tables.vip_at(&key.dst, key.v6, key.dport, key.proto) else {
            return false;
        };
        let Some(vip) = tables.vips.get(vi as usize) else {
            return false;
        };
        if vip.ring.is_empty() || vip.persist_ms != 0 || vip.syn_proxy != SynProxy::Off {
            return false;
        }
        let h = tables.flow_hash(vip, key);
        vip.ring.prefetch(h);
        out.key = *key;
        out.hash = hash;
        out.vi = vi;
        out.pick = h;
        out.bits = 0;
        true
    }

    /// Second pass, for a frame [`Lb::early_pick`] took: reads the ring
    /// slot (loaded since), makes the reply key the new flow will most
    /// likely get, and starts loading its index bucket. Changes nothing but
    /// `early` and the count of guessed tuples.
    #[inline(never)]
    pub(crate) fn early_reply(&self, early: &mut Early) {
        let Some(tables) = self.tables.as_ref() else {
            return;
        };
        let Some(vip) = tables.vips.get(early.vi as usize) else {
            return;
        };
        let Some(bi) = vip.ring.pick(early.pick) else {
            return;
        };
        early.pick = u64::from(bi);
        early.bits |= EARLY_PICKED;
        let Some(b) = vip.backends.get(bi as usize) else {
            return;
        };
        let key = &early.key;
        let reply = match vip.mode {
            Mode::Dnat | Mode::Dsr(_) => FlowKey {
                src: b.addr16,
                dst: key.src,
                sport: b.port,
                dport: key.sport,
                proto: key.proto,
                v6: b.addr.is_ipv6() || key.v6,
            },
            Mode::FullNat => {
                let Some(set) = b.local_set else {
                    return;
                };
                let Some(ahead) = self.early_ahead.get(usize::from(set)) else {
                    return;
                };
                let Some((addr16, port)) = self.local_ports.peek(set, ahead.get()) else {
                    return;
                };
                ahead.set(ahead.get() + 1);
                early.set = set;
                early.bits |= EARLY_GUESSED;
                FlowKey {
                    src: b.addr16,
                    dst: addr16,
                    sport: b.port,
                    dport: port,
                    proto: key.proto,
                    v6: b.addr.is_ipv6(),
                }
            }
        };
        early.reply_hash = self.conntrack.hash_of(&reply);
        early.reply = reply;
        early.bits |= EARLY_REPLY;
        self.conntrack.prefetch_bucket(early.reply_hash);
    }

    /// Before the general path runs a frame the passes took as a new flow
    /// (in this poll iteration: same tables, frame unchanged since): what
    /// they found, for [`Lb::client_packet`] and [`Lb::new_flow`].
    #[inline(always)]
    pub(crate) fn early_carry(&mut self, early: &Early) {
        self.carry = Some(*early);
    }

    /// After it: nothing is carried to the next frame, and its guessed
    /// tuple is no longer ahead of the cursor (taken or not: the next
    /// guess starts from where the cursor is).
    #[inline(always)]
    pub(crate) fn early_done(&mut self, early: &Early) {
        self.carry = None;
        if early.bits & EARLY_GUESSED != 0 {
            if let Some(a) = self.early_ahead.get(usize::from(early.set)) {
                a.set(a.get().saturating_sub(1));
            }
        }
    }
}
