//! `borderctl backend add|remove` and `borderctl vip add|remove`: one
//! change to the running config through AddBackend, RemoveBackend, AddVip
//! and RemoveVip (validated and saved as `apply` is, atomic).
//! `backend disable|enable` are operator overrides ([`crate::backend`]).

use std::path::PathBuf;
use std::process::ExitCode;

use mgmt::pb;
use serde::Serialize;

use crate::backend::Change;
use crate::cli::{BackendCmd, Target, VipCmd};
use crate::conn::{runtime, Failure, Res};
use crate::output::{self, Render, Text};

/// One request, and the change in words.
enum Request {
    AddBackend(pb::AddBackendRequest),
    RemoveBackend(pb::RemoveBackendRequest),
    AddVip(pb::AddVipRequest),
    RemoveVip(pb::RemoveVipRequest),
}

pub fn backend(target: &Target, cmd: BackendCmd, json: bool) -> Res {
    let (req, what, dry_run) = match cmd {
        BackendCmd::Disable { backend, kill } => {
            let change = if kill { Change::Kill } else { Change::Drain };
            return crate::backend::run(target, backend, change, json);
        }
        BackendCmd::Enable(backend) => {
            return crate::backend::run(target, backend, Change::Enable, json);
        }
        BackendCmd::Add {
            vip,
            backend,
            weight,
            zone,
            max_connections,
            dry_run,
        } => {
            let what = format!("{vip}: backend {backend} added");
            let req = pb::AddBackendRequest {
                vip,
                backend,
                weight,
                zone,
                max_connections,
                dry_run,
            };
            (Request::AddBackend(req), what, dry_run)
        }
        BackendCmd::Remove {
            vip,
            backend,
            dry_run,
        } => {
            let what = format!("{vip}: backend {backend} removed");
            let req = pb::RemoveBackendRequest {
                vip,
                backend,
                dry_run,
            };
            (Request::RemoveBackend(req), what, dry_run)
        }
    };
    send(target, req, what, dry_run, json)
}

pub fn vip(target: &Target, cmd: VipCmd, json: bool) -> Res {
    let (req, what, dry_run) = match cmd {
        VipCmd::Add { file, dry_run } => {
            let vip_toml = read(&file)?;
            let what = format!("{}: VIP added", file.display());
            let req = pb::AddVipRequest { vip_toml, dry_run };
            (Request::AddVip(req), what, dry_run)
        }
        VipCmd::Remove { vip, dry_run } => {
            let what = format!("VIP {vip} removed");
            (
                Request::RemoveVip(pb::RemoveVipRequest { vip, dry_run }),
                what,
                dry_run,
            )
        }
    };
    send(target, req, what, dry_run, json)
}

fn read(file: &PathBuf) -> Result<String, Failure> {
    std::fs::read_to_string(file)
        .map_err(|e| Failure::Other(format!("{}: cannot read: {e}", file.display())))
}

fn send(target: &Target, req: Request, what: String, dry_run: bool, json: bool) -> Res {
    let rt = runtime()?;
    let out = rt
        .block_on(async {
            let mut api = target.connect().await?;
            api.call(|mut c| async move {
                match req {
                    Request::AddBackend(r) => c.add_backend(r).await,
                    Request::RemoveBackend(r) => c.remove_backend(r).await,
                    Request::AddVip(r) => c.add_vip(r).await,
                    Request::RemoveVip(r) => c.remove_vip(r).await,
                }
            })
            .await
        })
        .map_err(name_the_text)?;
    let view = EditView {
        change: what,
        dry_run,
        generation: out.generation,
        changed: out.changed,
        pending: out.pending,
    };
    output::print(&view, json)?;
    Ok(ExitCode::SUCCESS)
}

/// The server names the config it validated `<api>`: here that is the
/// running config with this change made.
fn name_the_text(e: Failure) -> Failure {
    let Failure::Other(m) = e else {
        return e;
    };
    match m
        .strip_prefix(mgmt::service::API_ORIGIN)
        .and_then(|r| r.strip_prefix(':'))
    {
        Some(rest) => Failure::Other(format!("the running config with this change:{rest}")),
        None => Failure::Other(m),
    }
}

/// The answer to one change.
#[derive(Debug, Serialize)]
pub struct EditView {
    pub change: String,
    pub dry_run: bool,
    pub generation: u64,
    pub changed: bool,
    pub pending: String,
}

impl Render for EditView {
    fn render(&self) -> Text {
        let c = &self.change;
        let line = if self.dry_run {
            format!("{c}: valid (dry run: nothing applied)")
        } else {
            output::published(
                c,
                &format!("{c}: the config is the same:"),
                &self.pending,
                self.changed,
                self.generation,
            )
        };
        let mut t = Text::default();
        t.line(line);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_errors_name_the_changed_config() {
        let e = name_the_text(Failure::Other(format!(
            "{}:31:11: vip[0].backend[1].address: 10.2.0.11:8080 is listed twice",
            mgmt::service::API_ORIGIN
        )));
        assert_eq!(
            e.to_string(),
            "the running config with this change:31:11: vip[0].backend[1].address: 10.2.0.11:8080 is listed twice"
        );
        let e = name_the_text(Failure::Other("no VIP `x` in the running config".into()));
        assert_eq!(e.to_string(), "no VIP `x` in the running config");
    }

    #[test]
    fn a_change_says_what_was_published() {
        let mut v = EditView {
            change: "web: backend 10.2.0.12:8080 added".into(),
            dry_run: false,
            generation: 7,
            changed: true,
            pending: String::new(),
        };
        assert_eq!(
            v.render().to_string(),
            "web: backend 10.2.0.12:8080 added: generation 7 published"
        );
        v.dry_run = true;
        assert_eq!(
            v.render().to_string(),
            "web: backend 10.2.0.12:8080 added: valid (dry run: nothing applied)"
        );
    }
}
