//! `border.v1.BorderAdmin`: SetLogLevel, the log level of border-mgmt or
//! border-dp by API. Either daemon gets the real-time signal of the level
//! ([`conf::os::log_level`]); border-dp by the pid its state region records
//! (no channel of its own to border-dp, whose workers must not be
//! disturbed: the signal reaches its logging thread only).

use std::sync::Arc;

use conf::os::log_level::{self, LEVELS};
use tonic::{Request, Response, Status};

use crate::pb::{self, border_admin_server};
use crate::Manager;

/// Implements `border.v1.BorderAdmin` over the manager.
#[derive(Debug, Clone)]
pub struct AdminService {
    m: Arc<Manager>,
}

impl AdminService {
    /// A service over `m`.
    pub fn new(m: Arc<Manager>) -> AdminService {
        AdminService { m }
    }

    /// The tonic server with the API's message size limits.
    pub fn into_server(self) -> border_admin_server::BorderAdminServer<AdminService> {
        border_admin_server::BorderAdminServer::new(self)
            .max_decoding_message_size(crate::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(crate::MAX_MESSAGE_BYTES)
    }
}

#[tonic::async_trait]
impl border_admin_server::BorderAdmin for AdminService {
    async fn set_log_level(
        &self,
        req: Request<pb::SetLogLevelRequest>,
    ) -> Result<Response<pb::SetLogLevelResponse>, Status> {
        let req = req.into_inner();
        let level = req.level.trim().to_ascii_lowercase();
        if !LEVELS.contains(&level.as_str()) {
            return Err(Status::invalid_argument(format!(
                "unknown log level {:?}: one of {}",
                req.level,
                LEVELS.join(", ")
            )));
        }
        let (daemon, pid) = match pb::Daemon::try_from(req.daemon) {
            Ok(pb::Daemon::Mgmt) if !log_level::handled() => {
                return Err(Status::failed_precondition(
                    "this border-mgmt does not handle log-level signals (its logging is not border's)",
                ))
            }
            Ok(pb::Daemon::Mgmt) => ("border-mgmt", std::process::id()),
            Ok(pb::Daemon::Dp) => {
                let m = self.m.clone();
                let status = tokio::task::spawn_blocking(move || m.status())
                    .await
                    .map_err(|e| Status::internal(e.to_string()))?;
                if !status.dataplane_running() {
                    return Err(Status::failed_precondition(
                        "border-dp is not running (no state region, not marked running, or its process gone)",
                    ));
                }
                ("border-dp", status.dataplane.pid)
            }
            Err(_) => {
                return Err(Status::invalid_argument(format!(
                    "unknown daemon {}: 0 (border-mgmt) or 1 (border-dp)",
                    req.daemon
                )))
            }
        };
        log_level::send(pid, &level)
            .map_err(|e| Status::internal(format!("cannot signal {daemon} (pid {pid}): {e}")))?;
        tracing::info!(daemon, pid, level = %level, "SetLogLevel");
        Ok(Response::new(pb::SetLogLevelResponse {
            level,
            daemon: daemon.to_owned(),
            pid,
        }))
    }
}
