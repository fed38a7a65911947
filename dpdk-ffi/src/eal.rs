//! EAL lifetime: initialised at most once per process, cleaned up when the
//! last handle goes.

use std::ffi::{c_char, c_int, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::error::DpdkError;
use crate::lcore;
use crate::sys;

/// Where the process stands with EAL. DPDK cannot initialise EAL twice, nor
/// again after cleanup or after a failed attempt, so neither do we.
enum State {
    Fresh,
    Failed,
    Live(Weak<EalInner>),
}

static STATE: Mutex<State> = Mutex::new(State::Fresh);

/// Set once `rte_eal_init` succeeded; never cleared. Before that, EAL's
/// static config claims every lcore is enabled, so lcore helpers check this.
static INITIALISED: AtomicBool = AtomicBool::new(false);

/// Whether `rte_eal_init` has succeeded in this process (even if EAL has
/// since been cleaned up).
pub(crate) fn initialised() -> bool {
    INITIALISED.load(Ordering::Acquire)
}

fn state() -> MutexGuard<'static, State> {
    // A panic while holding this lock cannot leave State half-written (every
    // write is a single assignment), so a poisoned lock is still valid.
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A handle on the initialised EAL. Cheap to clone; every `Mempool` and
/// `Port` holds one, so EAL is cleaned up only after all of them are gone.
///
/// Dropping the last handle waits for every worker lcore to return (so tell
/// your workers to stop first) and then runs `rte_eal_cleanup`. If the last
/// handle is dropped on a worker lcore, cleanup is skipped (a worker cannot
/// wait for itself); the OS reclaims everything at exit.
#[derive(Clone)]
pub struct Eal {
    inner: Arc<EalInner>,
}

pub(crate) struct EalInner {
    /// EAL keeps copies of what it needs, but the argv it parsed must at
    /// least outlive the call; keeping it for the process is free.
    _args: Vec<CString>,
    claimed_ports: Mutex<Vec<bool>>,
}

impl std::fmt::Debug for Eal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Eal").finish_non_exhaustive()
    }
}

impl Eal {
    /// Initialises EAL with `args` (EAL options only, without a program
    /// name: one is supplied), e.g. `["-l", "0,1", "--no-huge", "-m", "256",
    /// "--no-pci", "--no-shconf", "--file-prefix=x", "--vdev=net_null0"]`.
    ///
    /// The calling thread becomes the main lcore. Only one call per process
    /// can succeed: any later call (after success, failure or cleanup)
    /// returns an error. Arguments after `--` are left to the application.
    pub fn init(args: &[String]) -> Result<Eal, DpdkError> {
        let mut st = state();
        match &*st {
            State::Fresh => {}
            State::Failed => {
                return Err(DpdkError::with_detail(
                    "EAL init",
                    libc::EALREADY,
                    "an earlier attempt failed in this process",
                )
                .hint("EAL can start only once per process"))
            }
            State::Live(_) => {
                return Err(DpdkError::with_detail(
                    "EAL init",
                    libc::EALREADY,
                    "already initialised in this process",
                )
                .hint("EAL can start only once per process"))
            }
        }
        // Anything from here on consumes the one chance.
        *st = State::Failed;

        let mut cargs = Vec::with_capacity(args.len() + 1);
        cargs.push(CString::from(c"border"));
        for a in args {
            let c = CString::new(a.as_str()).map_err(|_| {
                DpdkError::with_detail(
                    "EAL init",
                    libc::EINVAL,
                    format!("argument {a:?} contains a NUL byte"),
                )
            })?;
            cargs.push(c);
        }
        // getopt permutes argv, so EAL gets its own pointer array.
        let mut argv: Vec<*mut c_char> = cargs.iter().map(|c| c.as_ptr().cast_mut()).collect();
        let argc = c_int::try_from(argv.len())
            .map_err(|_| DpdkError::with_detail("EAL init", libc::E2BIG, "too many arguments"))?;

        // SAFETY: argv holds argc pointers to NUL-terminated strings owned by
        // `cargs`, which outlives the call (it is kept in EalInner). EAL may
        // permute the pointer array, which is ours to lose. STATE guarantees
        // this is the process's only call.
        let ret = unsafe { sys::rte_eal_init(argc, argv.as_mut_ptr()) };
        if ret < 0 {
            return Err(DpdkError::from_rte_errno("EAL init").hint("check eal_args/devargs"));
        }

        let inner = Arc::new(EalInner {
            _args: cargs,
            claimed_ports: Mutex::new(vec![false; sys::RTE_MAX_ETHPORTS as usize]),
        });
        *st = State::Live(Arc::downgrade(&inner));
        INITIALISED.store(true, Ordering::Release);
        Ok(Eal { inner })
    }

    /// The live EAL, for constructors that need to keep it alive.
    pub fn current() -> Result<Eal, DpdkError> {
        match &*state() {
            State::Live(weak) => weak.upgrade().map(|inner| Eal { inner }).ok_or_else(|| {
                DpdkError::with_detail("EAL lookup", libc::ESHUTDOWN, "EAL was cleaned up")
            }),
            State::Fresh | State::Failed => Err(DpdkError::with_detail(
                "EAL lookup",
                sys::E_RTE_NO_CONFIG as i32,
                "EAL is not initialised (call Eal::init first)",
            )),
        }
    }

    /// Marks `port_id` as owned by one `Port` value; false if already owned.
    pub(crate) fn claim_port(&self, port_id: u16) -> bool {
        let mut claimed = self
            .inner
            .claimed_ports
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match claimed.get_mut(usize::from(port_id)) {
            Some(slot) if !*slot => {
                *slot = true;
                true
            }
            _ => false,
        }
    }

    pub(crate) fn release_port(&self, port_id: u16) {
        let mut claimed = self
            .inner
            .claimed_ports
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = claimed.get_mut(usize::from(port_id)) {
            *slot = false;
        }
    }
}

impl Drop for EalInner {
    fn drop(&mut self) {
        let me = lcore::lcore_id();
        if me != sys::LCORE_ID_ANY && me != lcore::main_lcore() {
            eprintln!(
                "border dpdk-ffi: last EAL handle dropped on worker lcore {me}; rte_eal_cleanup is left to the process exit"
            );
            return;
        }
        lcore::wait_all();
        // SAFETY: every Mempool/Port holds an Eal handle, so none is left;
        // worker lcores have returned (wait_all above); STATE's Weak can no
        // longer be upgraded, so no new DPDK object can be created.
        let ret = unsafe { sys::rte_eal_cleanup() };
        if ret < 0 {
            eprintln!(
                "border dpdk-ffi: {}",
                DpdkError::from_rte_errno("EAL cleanup")
            );
        }
    }
}
