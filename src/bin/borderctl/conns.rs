//! `borderctl conns`: the live connections border-dp's workers hold
//! (ListConnections), filtered by VIP, backend and client prefix; a table,
//! or with --json one object per line as they come.

use std::process::ExitCode;

use mgmt::pb;
use serde::Serialize;

use crate::cli::{ConnsArgs, Target};
use crate::conn::{runtime, status_failure, Res};
use crate::output::{self, human_bytes, plural, Render, Table, Text};

pub fn run(target: &Target, args: &ConnsArgs, json: bool) -> Res {
    let rt = runtime()?;
    rt.block_on(async {
        let mut api = target.connect().await?;
        let shown = api.shown.clone();
        let req = pb::ListConnectionsRequest {
            vip: args.vip.clone().unwrap_or_default(),
            backend: args.backend.clone().unwrap_or_default(),
            client: args.client.clone().unwrap_or_default(),
            limit: args.limit.unwrap_or(0),
        };
        let mut stream = api
            .call(|mut c| async move { c.list_connections(req).await })
            .await?;
        let mut listed = Vec::new();
        loop {
            match stream.message().await {
                Ok(Some(c)) => {
                    let view = ConnView::from(c);
                    if json {
                        output::print_line(&view, true)?;
                    } else {
                        listed.push(view);
                    }
                }
                Ok(None) => break,
                Err(st) => return Err(status_failure(&shown, &st)),
            }
        }
        if !json {
            output::print(&ConnsView(listed), false)?;
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// One connection, as ListConnections gives it.
#[derive(Debug, Serialize)]
pub struct ConnView {
    pub worker: u32,
    pub conn_id: u64,
    pub protocol: String,
    pub client: String,
    pub vip: String,
    pub backend: String,
    pub local: String,
    pub mode: String,
    pub state: String,
    pub age_ms: u64,
    pub idle_ms: u64,
    pub expires_in_ms: u64,
    /// Packets and bytes are counted (`[records]` is configured); else
    /// they are null.
    pub metered: bool,
    pub packets_to_backend: Option<u64>,
    pub packets_to_client: Option<u64>,
    pub bytes_to_backend: Option<u64>,
    pub bytes_to_client: Option<u64>,
    pub proxy: String,
}

impl From<pb::Connection> for ConnView {
    fn from(c: pb::Connection) -> ConnView {
        let m = |v: u64| c.metered.then_some(v);
        ConnView {
            worker: c.worker,
            conn_id: c.conn_id,
            packets_to_backend: m(c.packets_to_backend),
            packets_to_client: m(c.packets_to_client),
            bytes_to_backend: m(c.bytes_to_backend),
            bytes_to_client: m(c.bytes_to_client),
            protocol: c.protocol,
            client: c.client,
            vip: c.vip,
            backend: c.backend,
            local: c.local,
            mode: c.mode,
            state: c.state,
            age_ms: c.age_ms,
            idle_ms: c.idle_ms,
            expires_in_ms: c.expires_in_ms,
            metered: c.metered,
            proxy: c.proxy,
        }
    }
}

impl Render for ConnView {
    /// Only --json prints connections one by one; a line of text if not.
    fn render(&self) -> Text {
        let mut t = Text::default();
        t.line(format!(
            "{} {} -> {} -> {}",
            self.protocol, self.client, self.vip, self.backend
        ));
        t
    }
}

/// Every connection listed, as one table.
#[derive(Serialize)]
struct ConnsView(Vec<ConnView>);

/// `1.2s`, `3m04s`, `2h05m`: an age at a glance.
fn age(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{}.{}s", s, ms % 1000 / 100),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

impl Render for ConnsView {
    fn render(&self) -> Text {
        let mut t = Table::new(&[
            ("CLIENT", false),
            ("VIP", false),
            ("BACKEND", false),
            ("LOCAL", false),
            ("PROTO", false),
            ("MODE", false),
            ("STATE", false),
            ("AGE", true),
            ("IDLE", true),
            ("PKTS>", true),
            ("PKTS<", true),
            ("BYTES>", true),
            ("BYTES<", true),
            ("PROXY", false),
            ("WORKER", true),
        ]);
        let n = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        let b = |v: Option<u64>| v.map_or("-".to_string(), human_bytes);
        for c in &self.0 {
            t.row(vec![
                c.client.clone(),
                c.vip.clone(),
                c.backend.clone(),
                c.local.clone(),
                c.protocol.clone(),
                c.mode.clone(),
                c.state.clone(),
                age(c.age_ms),
                age(c.idle_ms),
                n(c.packets_to_backend),
                n(c.packets_to_client),
                b(c.bytes_to_backend),
                b(c.bytes_to_client),
                c.proxy.clone(),
                c.worker.to_string(),
            ]);
        }
        let mut out = Text::default();
        out.table(&t);
        let k = self.0.len();
        let unmetered = self.0.iter().any(|c| !c.metered);
        out.line(format!(
            "{k} connection{}{}",
            plural(k),
            if unmetered && k > 0 {
                " (packets and bytes are counted only with [records] configured)"
            } else {
                ""
            }
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_at_a_glance() {
        assert_eq!(age(1_234), "1.2s");
        assert_eq!(age(184_000), "3m04s");
        assert_eq!(age(7_500_000), "2h05m");
    }
}
