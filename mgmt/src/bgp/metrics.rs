//! The BGP families of the Prometheus exporter, rendered from the status's
//! BGP report (nothing without `[mgmt.bgp]`).

use std::fmt::Write as _;

use super::BgpReport;

fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(o: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {help}");
    let _ = writeln!(o, "# TYPE {name} {kind}");
}

/// The text of every BGP family.
pub fn render(bgp: Option<&BgpReport>) -> String {
    let mut o = String::new();
    let Some(r) = bgp else {
        return o;
    };
    let b = &r.view;
    family(
        &mut o,
        "border_bgp_gobgpd_up",
        "gauge",
        "1 while the last call to gobgpd's API succeeded",
    );
    let _ = writeln!(
        o,
        "border_bgp_gobgpd_up{{api=\"{}\"}} {}",
        esc(&b.api),
        u8::from(b.connected)
    );
    family(
        &mut o,
        "border_bgp_gobgpd_errors_total",
        "counter",
        "calls to gobgpd that failed (unreachable, refused, garbage)",
    );
    let _ = writeln!(o, "border_bgp_gobgpd_errors_total {}", b.errors);
    family(
        &mut o,
        "border_bgp_maintenance",
        "gauge",
        "1 while borderctl maintenance is on (every VIP withdrawn)",
    );
    let _ = writeln!(o, "border_bgp_maintenance {}", u8::from(r.maintenance));
    family(
        &mut o,
        "border_bgp_neighbour_established",
        "gauge",
        "1 while the BGP session with the neighbour is established; state label: its session state",
    );
    for n in &b.neighbours {
        let _ = writeln!(
            o,
            "border_bgp_neighbour_established{{neighbour=\"{}\",state=\"{}\"}} {}",
            esc(&n.address),
            esc(&n.state),
            u8::from(n.state == "established")
        );
    }
    family(
        &mut o,
        "border_bgp_vip_announced",
        "gauge",
        "1 while gobgpd holds the VIP's host route; reason label: why (not)",
    );
    for v in &b.vips {
        let _ = writeln!(
            o,
            "border_bgp_vip_announced{{vip=\"{}\",prefix=\"{}\",reason=\"{}\"}} {}",
            esc(&v.name),
            esc(&v.prefix),
            esc(&v.reason),
            u8::from(v.announced)
        );
    }
    o
}
