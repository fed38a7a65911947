//! `[mgmt.limits]` and the ring-memory budget (docs/security.md).

use toml::Spanned as S;

use super::super::raw::{RawLimits, RawVip};
use super::super::{Config, MgmtLimits, Vip, MAX_RING_MEMORY_MIB, RING_SLOT_BYTES};
use super::{at, or, pos, Validator};

/// Each key of `[mgmt.limits]`: name, lowest and highest value, unit.
const RANGES: [(&str, u32, u32, &str); 10] = [
    ("watch_streams", 1, 65_536, ""),
    ("watch_streams_per_connection", 1, 65_536, ""),
    ("tls_handshakes", 1, 65_536, ""),
    ("tls_handshake_timeout_ms", 100, 600_000, " ms"),
    ("metrics_connections", 1, 65_536, ""),
    ("note_max_bytes", 1, 1 << 20, " bytes"),
    ("ring_memory_mib", 1, MAX_RING_MEMORY_MIB, " MiB"),
    ("streams_per_connection", 1, 10_000, ""),
    // At least two of the largest messages (4 MiB).
    ("request_memory_mib", 8, 16_384, " MiB"),
    ("operator_reserve_mib", 0, 16_384, " MiB"),
];

const MIB: u64 = 1 << 20;

/// How many of the largest rings an over-budget error names.
const NAMED_RINGS: usize = 3;

impl Validator {
    pub(super) fn limits(&mut self, sl: Option<&S<RawLimits>>) -> MgmtLimits {
        let d = MgmtLimits::default();
        let Some(sl) = sl else { return d };
        let l = sl.get_ref();
        let fields = [
            &l.watch_streams,
            &l.watch_streams_per_connection,
            &l.tls_handshakes,
            &l.tls_handshake_timeout_ms,
            &l.metrics_connections,
            &l.note_max_bytes,
            &l.ring_memory_mib,
            &l.streams_per_connection,
            &l.request_memory_mib,
            &l.operator_reserve_mib,
        ];
        for (f, (name, lo, hi, unit)) in fields.iter().zip(RANGES) {
            if let Some(s) = f {
                let n = *s.get_ref();
                if !(lo..=hi).contains(&n) {
                    self.err(
                        at(s),
                        format!("mgmt.limits.{name}"),
                        format!("{n} is out of range (expected {lo}..={hi}{unit})"),
                    );
                }
            }
        }
        let limits = MgmtLimits {
            watch_streams: or(&l.watch_streams, d.watch_streams),
            watch_streams_per_connection: or(
                &l.watch_streams_per_connection,
                d.watch_streams_per_connection,
            ),
            tls_handshakes: or(&l.tls_handshakes, d.tls_handshakes),
            tls_handshake_timeout_ms: or(&l.tls_handshake_timeout_ms, d.tls_handshake_timeout_ms),
            metrics_connections: or(&l.metrics_connections, d.metrics_connections),
            note_max_bytes: or(&l.note_max_bytes, d.note_max_bytes),
            ring_memory_mib: or(&l.ring_memory_mib, d.ring_memory_mib),
            streams_per_connection: or(&l.streams_per_connection, d.streams_per_connection),
            request_memory_mib: or(&l.request_memory_mib, d.request_memory_mib),
            operator_reserve_mib: or(&l.operator_reserve_mib, d.operator_reserve_mib),
        };
        let reserve_or_budget = l
            .operator_reserve_mib
            .as_ref()
            .map(|s| (s, "operator_reserve_mib"));
        let reserve_or_budget = reserve_or_budget.or(l
            .request_memory_mib
            .as_ref()
            .map(|s| (s, "request_memory_mib")));
        if let Some((s, key)) = reserve_or_budget {
            if limits.operator_reserve_mib >= limits.request_memory_mib {
                self.err(
                    at(s),
                    format!("mgmt.limits.{key}"),
                    format!(
                        "operator_reserve_mib ({} MiB) leaves readers and peers nothing of request_memory_mib ({} MiB)",
                        limits.operator_reserve_mib, limits.request_memory_mib
                    ),
                );
            }
        }
        limits
    }

    /// The Maglev rings of all VIPs fit `mgmt.limits.ring_memory_mib`;
    /// otherwise one error at the VIP whose ring crosses the budget, naming
    /// the budget and the largest rings. `vips` are `raw`'s, validated.
    pub(super) fn ring_budget(&mut self, raw: &[S<RawVip>], vips: &[Vip], budget_mib: u32) {
        let Some(crossing) = crossing_vip(vips, budget_mib) else {
            return;
        };
        let Some(sv) = raw.get(crossing) else { return };
        let at = pos(&sv.get_ref().maglev_table_size, at(sv));
        self.err(
            at,
            format!("vip[{crossing}].maglev_table_size"),
            over_budget_message(vips, budget_mib),
        );
    }
}

/// The index of the VIP whose ring takes the total past the budget.
fn crossing_vip(vips: &[Vip], budget_mib: u32) -> Option<usize> {
    let budget = u64::from(budget_mib) * MIB;
    let mut total = 0u64;
    vips.iter().position(|v| {
        total += RING_SLOT_BYTES * u64::from(v.maglev_table_size);
        total > budget
    })
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB as f64)
}

fn over_budget_message(vips: &[Vip], budget_mib: u32) -> String {
    let total: u64 = vips
        .iter()
        .map(|v| RING_SLOT_BYTES * u64::from(v.maglev_table_size))
        .sum();
    let mut biggest: Vec<&Vip> = vips.iter().collect();
    biggest.sort_by_key(|v| std::cmp::Reverse(v.maglev_table_size));
    let named: Vec<String> = biggest
        .iter()
        .take(NAMED_RINGS)
        .map(|v| {
            format!(
                "{:?} {} slots ({})",
                v.name,
                v.maglev_table_size,
                mib(RING_SLOT_BYTES * u64::from(v.maglev_table_size))
            )
        })
        .collect();
    let rest = vips.len().saturating_sub(NAMED_RINGS);
    let more = if rest > 0 {
        format!(" and {rest} more VIPs")
    } else {
        String::new()
    };
    format!(
        "the Maglev rings of {} VIPs need {}, over the ring memory budget mgmt.limits.ring_memory_mib = {budget_mib} MiB ({RING_SLOT_BYTES} bytes a slot per table generation); largest: {}{more}; lower maglev_table_size or raise mgmt.limits.ring_memory_mib",
        vips.len(),
        mib(total),
        named.join(", ")
    )
}

/// Whether `config`'s rings fit its budget (for the reparse fast path,
/// which leaves any other case to the full validation and its error).
pub(in super::super) fn rings_fit(config: &Config) -> bool {
    crossing_vip(&config.vips, config.mgmt.limits.ring_memory_mib).is_none()
}
