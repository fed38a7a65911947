//! `borderctl log-level LEVEL [--daemon mgmt|dp]`: the log level of
//! border-mgmt or border-dp through SetLogLevel.

use std::process::ExitCode;

use mgmt::pb;
use serde::Serialize;

use crate::cli::{DaemonArg, LogLevelArg, Target};
use crate::conn::{runtime, Res};
use crate::output::{self, Render, Text};

pub fn run(target: &Target, level: LogLevelArg, daemon: DaemonArg, json: bool) -> Res {
    let daemon = match daemon {
        DaemonArg::Mgmt => pb::Daemon::Mgmt,
        DaemonArg::Dp => pb::Daemon::Dp,
    };
    let rt = runtime()?;
    let out = rt.block_on(async {
        let mut api = target.connect().await?;
        api.call_set_log_level(pb::SetLogLevelRequest {
            level: level.as_str().to_owned(),
            daemon: daemon as i32,
        })
        .await
    })?;
    let view = LogLevelView {
        daemon: out.daemon,
        pid: out.pid,
        level: out.level,
    };
    output::print(&view, json)?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Serialize)]
pub struct LogLevelView {
    pub daemon: String,
    pub pid: u32,
    pub level: String,
}

impl Render for LogLevelView {
    fn render(&self) -> Text {
        let mut t = Text::default();
        t.line(format!(
            "{} (pid {}): border's log level set to {}",
            self.daemon, self.pid, self.level
        ));
        t
    }
}
