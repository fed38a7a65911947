//! The gRPC service `border.v1.Border` over a [`Manager`]: requests and
//! answers converted by [`crate::proto`], errors mapped to gRPC codes.

use std::sync::Arc;

use tokio::sync::{broadcast, mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::authz::{ApiCounters, Caller, Limit};
use crate::edit::{ConfigEdit, EditError};
use crate::manager::{ApplyError, EditConfigError, Manager, SetError};
use crate::pb::{self, border_server::Border};
use crate::store::{BackendAction, SetBackendError};

/// The origin named in errors of configs applied over the API.
pub const API_ORIGIN: &str = "<api>";

/// Implements `border.v1.Border`.
#[derive(Debug, Clone)]
pub struct BorderService {
    m: Arc<Manager>,
    shutdown: watch::Receiver<bool>,
    limits: conf::MgmtLimits,
    /// Slots of WatchEvents streams over all connections.
    watch_slots: Arc<Semaphore>,
    counters: Arc<ApiCounters>,
    /// Walks of border-dp's live connections (ListConnections).
    walker: Arc<crate::conns::Walker>,
}

impl BorderService {
    /// A service over `m` with its `[mgmt.limits]`, counting refusals in
    /// `counters`; event streams end when `shutdown` turns true.
    pub fn new(
        m: Arc<Manager>,
        shutdown: watch::Receiver<bool>,
        counters: Arc<ApiCounters>,
    ) -> BorderService {
        let limits = m.config().mgmt.limits;
        let walker = Arc::new(crate::conns::Walker::new(m.options().paths.conns.clone()));
        BorderService {
            m,
            shutdown,
            limits,
            watch_slots: Arc::new(Semaphore::new(limits.watch_streams as usize)),
            counters,
            walker,
        }
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

impl BorderService {
    /// One change to the running config, answered as ApplyConfig is.
    async fn edit(
        &self,
        edit: ConfigEdit,
        dry_run: bool,
    ) -> Result<Response<pb::ApplyConfigResponse>, Status> {
        self.call(move |m| {
            m.edit_config(&edit, API_ORIGIN, dry_run)
                .map_err(edit_status)
        })
        .await
    }
}

/// A WatchEvents stream's places in its connection's and in the total
/// limit, held until the stream ends.
struct WatchSlot {
    _total: OwnedSemaphorePermit,
    _connection: Option<OwnedSemaphorePermit>,
    counters: Arc<ApiCounters>,
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        self.counters.watch_stream_ended();
    }
}

impl BorderService {
    /// A place for one more WatchEvents stream from `caller`, or
    /// `RESOURCE_EXHAUSTED` naming the limit (counted).
    #[allow(clippy::result_large_err)]
    fn watch_slot(&self, caller: Option<&Caller>) -> Result<WatchSlot, Status> {
        let refuse = |limit: Limit, n: u32| {
            self.counters.count(limit);
            let key = limit.as_str();
            tracing::warn!(
                limit = key,
                "api: WatchEvents refused: {key} = {n} streams are open"
            );
            Status::resource_exhausted(format!(
                "border-mgmt: too many WatchEvents streams: mgmt.limits.{key} = {n} are open; close one or raise the limit"
            ))
        };
        let connection = match caller {
            Some(c) => Some(c.try_watch_slot().ok_or_else(|| {
                refuse(
                    Limit::WatchStreamsPerConnection,
                    self.limits.watch_streams_per_connection,
                )
            })?),
            None => None,
        };
        let total = self
            .watch_slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| refuse(Limit::WatchStreams, self.limits.watch_streams))?;
        self.counters.watch_stream_started();
        Ok(WatchSlot {
            _total: total,
            _connection: connection,
            counters: self.counters.clone(),
        })
    }
}

fn apply_status(e: ApplyError) -> Status {
    match e {
        ApplyError::Invalid(e) => Status::invalid_argument(e.to_string()),
        e @ ApplyError::NotReloadable { .. } => Status::failed_precondition(e.to_string()),
        e @ ApplyError::NoFile => Status::failed_precondition(e.to_string()),
        e @ ApplyError::LocalPorts(_) => Status::failed_precondition(e.to_string()),
        // No room for the tables (a full /dev/shm): nothing changed.
        ApplyError::Publish(p) if p.is_out_of_space() => {
            Status::resource_exhausted(ApplyError::Publish(p).to_string())
        }
        e @ ApplyError::Publish(_) => Status::internal(e.to_string()),
        // The state directory is full or read-only: the operator's to fix.
        e @ ApplyError::Save(_) => Status::failed_precondition(e.to_string()),
        e @ ApplyError::Raced => Status::aborted(e.to_string()),
    }
}

fn edit_status(e: EditConfigError) -> Status {
    match e {
        EditConfigError::Edit(e @ (EditError::NoVip(_) | EditError::NoBackend { .. })) => {
            Status::not_found(e.to_string())
        }
        EditConfigError::Edit(e @ (EditError::BadAddress(_) | EditError::BadVip(_))) => {
            Status::invalid_argument(e.to_string())
        }
        EditConfigError::Edit(e @ EditError::Running(_)) => Status::internal(e.to_string()),
        EditConfigError::Apply(e) => apply_status(e),
    }
}

fn set_status(e: SetError) -> Status {
    match e {
        e @ SetError::BadAddress(_) => Status::invalid_argument(e.to_string()),
        SetError::Store(e @ (SetBackendError::NoVip(_) | SetBackendError::NoBackend { .. })) => {
            Status::not_found(e.to_string())
        }
        SetError::Store(e @ SetBackendError::Weight(_)) => Status::invalid_argument(e.to_string()),
        SetError::Publish(p) if p.is_out_of_space() => {
            Status::resource_exhausted(SetError::Publish(p).to_string())
        }
        e @ SetError::Publish(_) => Status::internal(e.to_string()),
        e @ SetError::Save(_) => Status::failed_precondition(e.to_string()),
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
        let max = self.limits.note_max_bytes;
        if r.note.len() > max as usize {
            self.counters.count(Limit::NoteMaxBytes);
            return Err(Status::invalid_argument(format!(
                "note is {} bytes, over mgmt.limits.note_max_bytes = {max}",
                r.note.len()
            )));
        }
        let action: BackendAction = match r.action {
            Some(a) => a.into(),
            None => {
                return Err(Status::invalid_argument(
                    "no action: set one of weight, drain, kill, undrain, reset_weight",
                ))
            }
        };
        self.call(move |m| {
            m.set_backend(&r.vip, &r.backend, action, &r.note)
                .map_err(set_status)
        })
        .await
    }

    async fn add_backend(
        &self,
        req: Request<pb::AddBackendRequest>,
    ) -> Result<Response<pb::ApplyConfigResponse>, Status> {
        let r = req.into_inner();
        let edit = ConfigEdit::AddBackend {
            vip: r.vip,
            backend: r.backend,
            weight: r.weight,
            zone: r.zone,
            max_connections: r.max_connections,
        };
        self.edit(edit, r.dry_run).await
    }

    async fn remove_backend(
        &self,
        req: Request<pb::RemoveBackendRequest>,
    ) -> Result<Response<pb::ApplyConfigResponse>, Status> {
        let r = req.into_inner();
        let edit = ConfigEdit::RemoveBackend {
            vip: r.vip,
            backend: r.backend,
        };
        self.edit(edit, r.dry_run).await
    }

    async fn add_vip(
        &self,
        req: Request<pb::AddVipRequest>,
    ) -> Result<Response<pb::ApplyConfigResponse>, Status> {
        let r = req.into_inner();
        self.edit(ConfigEdit::AddVip { toml: r.vip_toml }, r.dry_run)
            .await
    }

    async fn remove_vip(
        &self,
        req: Request<pb::RemoveVipRequest>,
    ) -> Result<Response<pb::ApplyConfigResponse>, Status> {
        let r = req.into_inner();
        self.edit(ConfigEdit::RemoveVip { vip: r.vip }, r.dry_run)
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
        req: Request<pb::WatchEventsRequest>,
    ) -> Result<Response<Self::WatchEventsStream>, Status> {
        let slot = self.watch_slot(req.extensions().get::<Caller>())?;
        let mut rx = self.m.subscribe();
        let mut shutdown = self.shutdown.clone();
        let (tx, out) = mpsc::channel(64);
        tokio::spawn(async move {
            let _slot = slot;
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

    type ListConnectionsStream = ReceiverStream<Result<pb::Connection, Status>>;

    async fn list_connections(
        &self,
        req: Request<pb::ListConnectionsRequest>,
    ) -> Result<Response<Self::ListConnectionsStream>, Status> {
        let r = req.into_inner();
        let filter = crate::conns::Filter::parse(&r.vip, &r.backend, &r.client)
            .map_err(Status::invalid_argument)?;
        let limit = if r.limit == 0 { u64::MAX } else { r.limit };
        // The region is border-dp's, made with the operators' group.
        let group = self.m.config().mgmt.operators_group;
        let access = conf::os::files::Access::for_group_name(group.as_deref())
            .unwrap_or(conf::os::files::Access::PRIVATE);
        let walker = self.walker.clone();
        let (tx, out) = mpsc::channel(256);
        tokio::task::spawn_blocking(move || {
            let mut sent = 0u64;
            let walked = walker.walk(access, &filter, |c| {
                sent += 1;
                // A full channel waits for the client; a closed one (the
                // client went away) ends the walk.
                tx.blocking_send(Ok(c.into())).is_ok() && sent < limit
            });
            if let Err(e) = walked {
                let _ = tx.blocking_send(Err(Status::failed_precondition(e.to_string())));
            }
        });
        Ok(Response::new(ReceiverStream::new(out)))
    }
}
