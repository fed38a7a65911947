//! `borderctl maintenance on|off`: withdraws every VIP route from BGP (or
//! lets them back) through SetMaintenance; established flows keep going.

use std::process::ExitCode;

use mgmt::pb;
use serde::Serialize;

use crate::cli::{OnOff, Target};
use crate::conn::{runtime, Res};
use crate::output::{self, Render, Text};

pub fn run(target: &Target, state: OnOff, json: bool) -> Res {
    let on = matches!(state, OnOff::On);
    let rt = runtime()?;
    let out = rt.block_on(async {
        let mut api = target.connect().await?;
        api.call_bgp(
            |mut c| async move { c.set_maintenance(pb::SetMaintenanceRequest { on }).await },
        )
        .await
    })?;
    let view = MaintenanceView {
        maintenance: out.maintenance,
        changed: out.changed,
    };
    output::print(&view, json)?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Serialize)]
pub struct MaintenanceView {
    pub maintenance: bool,
    pub changed: bool,
}

impl Render for MaintenanceView {
    fn render(&self) -> Text {
        let mut t = Text::default();
        let state = if self.maintenance {
            "on: every VIP route is withdrawn; established connections go on (see `borderctl status`)"
        } else {
            "off: VIP routes are announced again once their conditions hold"
        };
        let already = if self.changed { "" } else { " (already)" };
        t.line(format!("maintenance {state}{already}"));
        t
    }
}
