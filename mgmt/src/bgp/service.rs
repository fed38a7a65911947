//! `border.v1.BorderBgp`: the BGP view and the maintenance switch.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::BgpEvent;
use crate::model::EventKind;
use crate::pb::{self, border_bgp_server};
use crate::Manager;

/// Implements `border.v1.BorderBgp` over the manager's BGP state.
#[derive(Debug, Clone)]
pub struct BgpService {
    m: Arc<Manager>,
}

impl BgpService {
    /// A service over `m`.
    pub fn new(m: Arc<Manager>) -> BgpService {
        BgpService { m }
    }

    /// The tonic server with the API's message size limits.
    pub fn into_server(self) -> border_bgp_server::BorderBgpServer<BgpService> {
        border_bgp_server::BorderBgpServer::new(self)
            .max_decoding_message_size(crate::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(crate::MAX_MESSAGE_BYTES)
    }
}

#[tonic::async_trait]
impl border_bgp_server::BorderBgp for BgpService {
    async fn get_bgp(
        &self,
        _: Request<pb::GetBgpRequest>,
    ) -> Result<Response<pb::BgpStatus>, Status> {
        let m = self.m.clone();
        tokio::task::spawn_blocking(move || super::report(&m))
            .await
            .map(|r| Response::new(r.map(Into::into).unwrap_or_default()))
            .map_err(|e| Status::internal(e.to_string()))
    }

    async fn set_maintenance(
        &self,
        req: Request<pb::SetMaintenanceRequest>,
    ) -> Result<Response<pb::SetMaintenanceResponse>, Status> {
        let shared = self.m.bgp();
        if !shared.configured() {
            return Err(Status::failed_precondition(
                "BGP is not configured: maintenance withdraws VIP routes and needs [mgmt.bgp]",
            ));
        }
        let on = req.into_inner().on;
        let changed = shared.set_maintenance(on);
        if changed {
            let state = if on { "on" } else { "off" };
            tracing::info!(maintenance = state, "BGP: maintenance");
            self.m.emit(EventKind::Bgp(BgpEvent {
                what: "maintenance".into(),
                subject: String::new(),
                state: state.into(),
                reason: String::new(),
            }));
        }
        Ok(Response::new(pb::SetMaintenanceResponse {
            maintenance: on,
            changed,
        }))
    }
}
