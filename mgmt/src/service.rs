//! The gRPC service `border.v1.Border` over a [`Manager`]: requests and
//! answers converted by [`crate::proto`], errors mapped to gRPC codes.

use std::sync::Arc;

use tokio::sync::{broadcast, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::manager::{ApplyError, Manager, SetError};
use crate::pb::{self, border_server::Border};
use crate::store::{BackendAction, SetBackendError};

/// The origin named in errors of configs applied over the API.
pub const API_ORIGIN: &str = "<api>";

/// Implements `border.v1.Border`.
#[derive(Debug, Clone)]
pub struct BorderService {
    m: Arc<Manager>,
    shutdown: watch::Receiver<bool>,
}

impl BorderService {
    /// A service over `m`; event streams end when `shutdown` turns true.
    pub fn new(m: Arc<Manager>, shutdown: watch::Receiver<bool>) -> BorderService {
        BorderService { m, shutdown }
    }

    /// The tonic server with the message size limits
    /// ([`crate::MAX_MESSAGE_BYTES`] each way).
    pub fn into_server(self) -> pb::border_server::BorderServer<BorderService> {
        pb::border_server::BorderServer::new(self)
            .max_decoding_message_size(crate::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(crate::MAX_MESSAGE_BYTES)
    }
}

impl BorderService {
    /// Runs `f` on the manager off the async threads (its methods block)
    /// and answers with what it returns, converted to protobuf.
    async fn call<T, P>(
        &self,
        f: impl FnOnce(&Manager) -> Result<T, Status> + Send + 'static,
    ) -> Result<Response<P>, Status>
    where
        T: Send + 'static,
        P: From<T>,
    {
        let m = self.m.clone();
        let out = tokio::task::spawn_blocking(move || f(&m))
            .await
            .map_err(|e| Status::internal(format!("internal error: {e}")))??;
        Ok(Response::new(out.into()))
    }
}

fn apply_status(e: ApplyError) -> Status {
    match e {
        ApplyError::Invalid(e) => Status::invalid_argument(e.to_string()),
        e @ ApplyError::NotReloadable { .. } => Status::failed_precondition(e.to_string()),
        e @ ApplyError::NoFile => Status::failed_precondition(e.to_string()),
        e @ ApplyError::Publish(_) => Status::internal(e.to_string()),
    }
}

fn set_status(e: SetError) -> Status {
    match e {
        e @ SetError::BadAddress(_) => Status::invalid_argument(e.to_string()),
        SetError::Store(e @ (SetBackendError::NoVip(_) | SetBackendError::NoBackend { .. })) => {
            Status::not_found(e.to_string())
        }
        SetError::Store(e @ SetBackendError::Weight(_)) => Status::invalid_argument(e.to_string()),
        e @ SetError::Publish(_) => Status::internal(e.to_string()),
    }
}

#[tonic::async_trait]
impl Border for BorderService {
    async fn apply_config(
        &self,
        req: Request<pb::ApplyConfigRequest>,
    ) -> Result<Response<pb::ApplyConfigResponse>, Status> {
        let r = req.into_inner();
        self.call(move |m| {
            m.apply_config(&r.config_toml, API_ORIGIN, r.dry_run)
                .map_err(apply_status)
        })
        .await
    }

    async fn get_config(
        &self,
        _req: Request<pb::GetConfigRequest>,
    ) -> Result<Response<pb::GetConfigResponse>, Status> {
        self.call(|m| Ok(m.running_config())).await
    }

    async fn set_backend(
        &self,
        req: Request<pb::SetBackendRequest>,
    ) -> Result<Response<pb::SetBackendResponse>, Status> {
        let r = req.into_inner();
        let action: BackendAction = match r.action {
            Some(a) => a.into(),
            None => {
                return Err(Status::invalid_argument(
                    "no action: set one of weight, drain, undrain, reset_weight",
                ))
            }
        };
        self.call(move |m| {
            m.set_backend(&r.vip, &r.backend, action, &r.note)
                .map_err(set_status)
        })
        .await
    }

    async fn get_status(
        &self,
        _req: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::GetStatusResponse>, Status> {
        self.call(|m| Ok(m.status())).await
    }

    async fn get_stats(
        &self,
        _req: Request<pb::GetStatsRequest>,
    ) -> Result<Response<pb::GetStatsResponse>, Status> {
        self.call(|m| Ok(m.stats())).await
    }

    type WatchEventsStream = ReceiverStream<Result<pb::Event, Status>>;

    async fn watch_events(
        &self,
        _req: Request<pb::WatchEventsRequest>,
    ) -> Result<Response<Self::WatchEventsStream>, Status> {
        let mut rx = self.m.subscribe();
        let mut shutdown = self.shutdown.clone();
        let (tx, out) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                if *shutdown.borrow() {
                    break;
                }
                tokio::select! {
                    r = shutdown.changed() => if r.is_err() { break },
                    _ = tx.closed() => break,
                    r = rx.recv() => {
                        let ev = match r {
                            Ok(ev) => ev.into(),
                            Err(broadcast::error::RecvError::Lagged(missed)) => {
                                crate::proto::lagged(missed, crate::store::now_unix_ms())
                            }
                            Err(broadcast::error::RecvError::Closed) => break,
                        };
                        if tx.send(Ok(ev)).await.is_err() {
                            break;
                        }
                    }
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(out)))
    }
}
