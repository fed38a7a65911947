//! A budget of request bytes buffered at once (docs/security.md): every
//! data frame of a request body is charged to it as it arrives, and the
//! charge is given back when the request is done with. A frame that does
//! not fit is refused (`RESOURCE_EXHAUSTED`) at once instead of waiting:
//! the memory requests take is bounded whatever the callers send, and a
//! caller that holds its part without finishing (no END_STREAM) only
//! takes what it already sent.
//!
//! Operators keep a reserve: readers and peers together take at most the
//! budget less `operator_reserve`, so they cannot starve an operator's
//! call. border-mgmt wraps every request body ([`BudgetLayer`]); border-gw
//! charges the bodies it reads ([`Charge`]).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use conf::ClientRole;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::codegen::http;
use tonic::Status;

/// Which part of the budget was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    /// All of it.
    Total,
    /// All that readers and peers may take (the budget less the operators'
    /// reserve).
    Shared,
}

/// The budget of one server.
#[derive(Debug)]
pub struct ByteBudget {
    total: Arc<Semaphore>,
    shared: Arc<Semaphore>,
    total_bytes: usize,
    shared_bytes: usize,
}

const MIB: usize = 1 << 20;

impl ByteBudget {
    /// `total_mib` for all callers, of which `operator_reserve_mib` only
    /// for operators.
    pub fn new(total_mib: u32, operator_reserve_mib: u32) -> ByteBudget {
        let total_bytes = total_mib as usize * MIB;
        let shared_bytes = total_mib.saturating_sub(operator_reserve_mib) as usize * MIB;
        ByteBudget {
            total: Arc::new(Semaphore::new(total_bytes)),
            shared: Arc::new(Semaphore::new(shared_bytes)),
            total_bytes,
            shared_bytes,
        }
    }

    /// An empty charge for one request of a caller with `role` (`None`:
    /// unknown, charged as a reader).
    pub fn charge(&self, role: Option<ClientRole>) -> Charge {
        let shared = (role != Some(ClientRole::Operator)).then(|| self.shared.clone());
        Charge {
            total: self.total.clone(),
            shared,
            held_total: None,
            held_shared: None,
        }
    }

    /// Bytes charged now, all callers.
    pub fn in_use(&self) -> usize {
        self.total_bytes - self.total.available_permits()
    }

    /// Bytes charged now by readers and peers.
    pub fn shared_in_use(&self) -> usize {
        self.shared_bytes - self.shared.available_permits()
    }
}

/// What one request holds of the budget; given back on drop.
#[derive(Debug)]
pub struct Charge {
    total: Arc<Semaphore>,
    shared: Option<Arc<Semaphore>>,
    held_total: Option<OwnedSemaphorePermit>,
    held_shared: Option<OwnedSemaphorePermit>,
}

fn merge(held: &mut Option<OwnedSemaphorePermit>, more: OwnedSemaphorePermit) {
    match held {
        Some(h) => h.merge(more),
        None => *held = Some(more),
    }
}

impl Charge {
    /// Charges `n` more bytes, or says which part of the budget is taken
    /// (then nothing more is charged).
    pub fn take(&mut self, n: usize) -> Result<(), Exceeded> {
        if n == 0 {
            return Ok(());
        }
        let n = u32::try_from(n).map_err(|_| Exceeded::Total)?;
        let shared = match &self.shared {
            Some(s) => Some(
                s.clone()
                    .try_acquire_many_owned(n)
                    .map_err(|_| Exceeded::Shared)?,
            ),
            None => None,
        };
        // On failure the shared permit just taken drops with `shared`.
        let total = self
            .total
            .clone()
            .try_acquire_many_owned(n)
            .map_err(|_| Exceeded::Total)?;
        merge(&mut self.held_total, total);
        if let Some(s) = shared {
            merge(&mut self.held_shared, s);
        }
        Ok(())
    }

    /// Bytes charged.
    pub fn bytes(&self) -> usize {
        self.held_total.as_ref().map_or(0, |p| p.num_permits())
    }
}

/// Called once per refused request with the part of the budget that was taken.
pub type OnExceeded = Arc<dyn Fn(Exceeded) + Send + Sync>;

/// The status a caller gets when its request does not fit.
pub fn exceeded_status(who: &str, e: Exceeded) -> Status {
    let what = match e {
        Exceeded::Total => "the budget of request bytes buffered at once (request_memory_mib) is taken",
        Exceeded::Shared => "the part of the request memory budget readers and peers may take (request_memory_mib less operator_reserve_mib) is taken",
    };
    Status::resource_exhausted(format!("{who}: {what}: retry later"))
}

/// A request body charged frame by frame; the charge goes when it drops.
pub struct Budgeted<B> {
    inner: B,
    charge: Charge,
    on_exceeded: OnExceeded,
    refused: bool,
}

impl<B> std::fmt::Debug for Budgeted<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Budgeted({} bytes)", self.charge.bytes())
    }
}

impl<B> Budgeted<B> {
    /// `inner`, charged to `charge`.
    pub fn new(inner: B, charge: Charge, on_exceeded: OnExceeded) -> Budgeted<B> {
        Budgeted {
            inner,
            charge,
            on_exceeded,
            refused: false,
        }
    }
}

impl<B> hyper::body::Body for Budgeted<B>
where
    B: hyper::body::Body<Data = Bytes, Error = Status> + Unpin,
{
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Status>>> {
        if self.refused {
            return Poll::Ready(None);
        }
        let frame = std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if let Some(Ok(f)) = &frame {
            if let Some(d) = f.data_ref() {
                if let Err(e) = self.charge.take(d.len()) {
                    self.refused = true;
                    (self.on_exceeded)(e);
                    return Poll::Ready(Some(Err(exceeded_status("border-mgmt", e))));
                }
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.refused || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// The tower layer charging every request body of a tonic server to one
/// [`ByteBudget`], by the role of the connection's caller
/// ([`crate::authz::Caller`]).
#[derive(Clone)]
pub struct BudgetLayer {
    budget: Arc<ByteBudget>,
    on_exceeded: OnExceeded,
}

impl std::fmt::Debug for BudgetLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BudgetLayer")
            .field("budget", &self.budget)
            .finish()
    }
}

impl BudgetLayer {
    /// Charging `budget`; each refusal reported to `on_exceeded`.
    pub fn new(budget: Arc<ByteBudget>, on_exceeded: OnExceeded) -> BudgetLayer {
        BudgetLayer {
            budget,
            on_exceeded,
        }
    }
}

impl<S> tower::Layer<S> for BudgetLayer {
    type Service = BudgetService<S>;

    fn layer(&self, inner: S) -> BudgetService<S> {
        BudgetService {
            inner,
            layer: self.clone(),
        }
    }
}

/// [`BudgetLayer`]'s service.
#[derive(Clone)]
pub struct BudgetService<S> {
    inner: S,
    layer: BudgetLayer,
}

impl<S> std::fmt::Debug for BudgetService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BudgetService")
    }
}

impl<S> tower::Service<http::Request<tonic::body::Body>> for BudgetService<S>
where
    S: tower::Service<http::Request<tonic::body::Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> S::Future {
        let role = req
            .extensions()
            .get::<crate::authz::Caller>()
            .and_then(|c| c.role());
        let charge = self.layer.budget.charge(role);
        let on = self.layer.on_exceeded.clone();
        let req = req.map(|b| tonic::body::Body::new(Budgeted::new(b, charge, on)));
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_stop_at_the_shared_part_operators_at_the_whole() {
        let b = ByteBudget::new(8, 2);
        let mut reader = b.charge(Some(ClientRole::Reader));
        reader.take(5 * MIB).unwrap();
        let mut peer = b.charge(Some(ClientRole::Peer));
        assert_eq!(peer.take(2 * MIB), Err(Exceeded::Shared));
        peer.take(MIB).unwrap();
        assert_eq!(b.shared_in_use(), 6 * MIB);
        let mut op = b.charge(Some(ClientRole::Operator));
        op.take(2 * MIB).unwrap();
        assert_eq!(op.take(1), Err(Exceeded::Total));
        assert_eq!(b.in_use(), 8 * MIB);
        drop(reader);
        assert_eq!(b.in_use(), 3 * MIB);
        assert_eq!(b.shared_in_use(), MIB);
        op.take(5 * MIB).unwrap();
        // A refused take left nothing charged in the shared part.
        assert_eq!(peer.take(MIB), Err(Exceeded::Total));
        assert_eq!(b.shared_in_use(), MIB);
        drop((op, peer));
        assert_eq!(b.in_use(), 0);
    }

    #[tokio::test]
    async fn a_body_past_the_budget_ends_with_resource_exhausted_and_gives_back() {
        use http_body_util::BodyExt;
        let b = Arc::new(ByteBudget::new(8, 0));
        let refused = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let r = refused.clone();
        let on: OnExceeded = Arc::new(move |_| {
            r.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        let big = http_body_util::Full::new(Bytes::from(vec![0u8; 9 * MIB]))
            .map_err(|never: std::convert::Infallible| -> Status { match never {} });
        let mut body = Budgeted::new(big, b.charge(None), on.clone());
        let st = body.frame().await.unwrap().unwrap_err();
        assert_eq!(st.code(), tonic::Code::ResourceExhausted);
        assert!(body.frame().await.is_none());
        assert_eq!(refused.load(std::sync::atomic::Ordering::Relaxed), 1);
        let small = http_body_util::Full::new(Bytes::from_static(b"hello"))
            .map_err(|never: std::convert::Infallible| -> Status { match never {} });
        let mut body = Budgeted::new(small, b.charge(None), on);
        assert_eq!(
            body.frame().await.unwrap().unwrap().into_data().unwrap(),
            "hello"
        );
        assert_eq!(b.in_use(), 5);
        drop(body);
        assert_eq!(b.in_use(), 0);
    }
}
