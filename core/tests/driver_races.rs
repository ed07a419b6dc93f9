//! Driver races that could mint duplicates, each provoked deterministically: a strategy
//! around the in-process store parks the driver's thread at the exact point
//! where the race happens, while the test does the other half.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use leasehold_core::{
    AcquireError, Capabilities, Floor, Grant, LeaseConfig, LeaseManager, LeaseState, Memory,
    PoolName, PoolSpec, Release, Renewal, StartError, Strategy,
};

/// A rendezvous: the driver's thread parks in `pause` until the test has done
/// its half between `reached` and `resume`.
#[derive(Default)]
struct Park {
    armed: AtomicBool,
    barriers: Mutex<Option<(Arc<Barrier>, Arc<Barrier>)>>,
}

impl Park {
    fn arm(&self) -> (Arc<Barrier>, Arc<Barrier>) {
        let pair = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
        *self.barriers.lock().unwrap() = Some(pair.clone());
        self.armed.store(true, Ordering::SeqCst);
        pair
    }

    /// Parks the calling (driver) thread once, if armed. Blocking a runtime
    /// worker on purpose: the test runs on another thread.
    fn pause(&self) {
        if self.armed.swap(false, Ordering::SeqCst) {
            let (reached, resume) = self.barriers.lock().unwrap().take().unwrap();
            reached.wait();
            resume.wait();
        }
    }
}

#[derive(Clone)]
struct Hooked {
    store: Memory,
    /// Parks after the store granted, before the answer reaches the driver.
    after_acquire: Arc<Park>,
    /// Parks before a release reaches the store.
    before_release: Arc<Park>,
    /// Parks before a renewal reaches the store.
    before_renew: Arc<Park>,
    panic_on_acquire: bool,
    caps: Capabilities,
}

impl Hooked {
    fn new(store: Memory) -> Self {
        let caps = store.capabilities();
        Self {
            store,
            after_acquire: Arc::default(),
            before_release: Arc::default(),
            before_renew: Arc::default(),
            panic_on_acquire: false,
            caps,
        }
    }
}

impl Strategy for Hooked {
    async fn acquire(&self, pool: &PoolSpec, ceiling: Floor) -> Result<Grant, AcquireError> {
        assert!(!self.panic_on_acquire, "a strategy bug");
        let grant = self.store.acquire(pool, ceiling).await;
        self.after_acquire.pause();
        grant
    }
    async fn renew(&self, pool: &PoolSpec, grant: &Grant, ceiling: Floor) -> Renewal {
        self.before_renew.pause();
        self.store.renew(pool, grant, ceiling).await
    }
    async fn release(&self, pool: &PoolSpec, grant: &Grant, issued: Floor) -> Release {
        self.before_release.pause();
        self.store.release(pool, grant, issued).await
    }
    fn capabilities(&self) -> Capabilities {
        self.caps.clone()
    }
    fn identity(&self) -> String {
        self.store.identity()
    }
}

/// A TTL no stall of a loaded machine reaches: such leases end only when the
/// test ends them.
const LONG: Duration = Duration::from_secs(30);

fn config(pool: &str, size: u32) -> LeaseConfig {
    config_ttl(pool, size, Duration::from_millis(600))
}

/// Renewing every 100 ms; the lease survives a stall of nearly `ttl`.
fn config_ttl(pool: &str, size: u32, ttl: Duration) -> LeaseConfig {
    LeaseConfig::builder(pool)
        .pool_size(size)
        .ttl(ttl)
        .renew_interval(Duration::from_millis(100))
        .safety_margin(Duration::from_millis(100).max(ttl / 10))
        .backoff_initial(Duration::from_millis(10))
        .backoff_max(Duration::from_millis(50))
        .acquire_timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Waits at `barrier` on a blocking thread; a rendezvous that does not happen
/// within 10 s fails the test instead of hanging it.
async fn meet(barrier: Arc<Barrier>) {
    tokio::time::timeout(
        Duration::from_secs(10),
        tokio::task::spawn_blocking(move || barrier.wait()),
    )
    .await
    .expect("the driver did not reach the rendezvous within 10 s")
    .unwrap();
}

async fn wait_until(what: &str, f: impl Fn() -> bool) {
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(
            std::time::Instant::now() < give_up,
            "{what}: not within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// 6(a): the manager is dropped while its driver, on another thread, is about
/// to open the gate with a new grant. The retired gate stays closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_racing_a_new_grant_never_reopens_the_gate() {
    let memory = Memory::new();
    let hooked = Hooked::new(memory.clone());
    let manager = LeaseManager::start(hooked.clone(), config("race-a", 2))
        .await
        .unwrap();
    let gate = manager.gate();
    let slot = gate.view().slot;
    // Take the lease away; the driver re-acquires and parks with the new grant.
    let (reached, resume) = hooked.after_acquire.arm();
    memory.forget("race-a", slot);
    meet(reached).await;
    drop(manager);
    meet(resume).await;
    // The driver goes on to open the gate before its abort takes effect.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        gate.check_now().is_err() && !gate.view().open,
        "a dropped manager's gate was reopened: {gate:?}"
    );
}

/// 6(b): `start` is cancelled while the driver holds a fresh grant. The grant
/// must not be handed to a successor through the lease cache while the old
/// driver releases it, or the successor would hold a slot the store has freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_start_never_releases_a_successors_slot() {
    let memory = Memory::new();
    let hooked = Hooked::new(memory.clone());
    let (reached, resume) = hooked.after_acquire.arm();
    let (release_reached, release_resume) = hooked.before_release.arm();
    let cancelled = tokio::spawn({
        let hooked = hooked.clone();
        async move { LeaseManager::start(hooked, config_ttl("race-b", 2, LONG)).await }
    });
    meet(reached).await;
    cancelled.abort(); // drops the `start` future: nobody will use this grant
    assert!(cancelled.await.unwrap_err().is_cancelled());
    meet(resume).await;
    // The old driver is about to release its grant: start a successor now.
    meet(release_reached).await;
    let successor = LeaseManager::start(hooked.clone(), config_ttl("race-b", 2, LONG))
        .await
        .unwrap();
    meet(release_resume).await;
    let held = successor.gate().view().slot;
    // Whatever the old driver released, the successor's slot stays its own.
    let pool = PoolSpec::new(PoolName::new("race-b").unwrap(), 2, LONG).unwrap();
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    let rival = loop {
        match memory.acquire(&pool, Floor::NONE).await {
            Ok(g) => break g,
            Err(e) => assert!(std::time::Instant::now() < give_up, "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_ne!(rival.slot, held, "a rival got the successor's slot");
    assert!(successor.gate().check_now().is_ok());
    successor.shutdown().await;
}

/// 6(b), shutdown: a `shutdown` whose future is dropped lets the manager go
/// while its driver is still running. A successor in this process then finds
/// the orphaned grant in the lease cache, gives it back and acquires the slot
/// anew; the old driver, finishing the shutdown, must not release the grant
/// the successor now holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_shutdown_never_releases_a_successors_slot() {
    let memory = Memory::new();
    let hooked = Hooked::new(memory.clone());
    // A long TTL: nothing but a released slot can end these leases in the test.
    let config = || config_ttl("race-s", 1, LONG);
    let manager = LeaseManager::start(hooked.clone(), config()).await.unwrap();
    let before = manager.gate().view();
    // The driver parks inside its next renewal.
    let (reached, resume) = hooked.before_renew.arm();
    meet(reached).await;
    // Shutdown, polled once, then dropped: the manager is gone, its driver not.
    let mut shutdown = Box::pin(manager.shutdown());
    assert!(futures_poll_once(shutdown.as_mut()).is_none());
    drop(shutdown);
    let successor = LeaseManager::start(hooked.clone(), config()).await.unwrap();
    let after = successor.gate().view();
    // Let the parked driver go before asserting anything, so a failed
    // assertion fails the test instead of hanging it on the barrier.
    meet(resume).await;
    // The successor released the orphaned grant and acquired the slot anew.
    assert_eq!(after.slot, before.slot);
    assert!(
        after.fence > before.fence,
        "the successor kept the orphan's fence"
    );
    // Give the old driver time to finish its shutdown, and the successor
    // several renewals.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let now = successor.gate().view();
    assert_eq!(
        now.epoch, after.epoch,
        "the successor lost its grant (its slot was released under it)"
    );
    assert!(successor.gate().check_now().is_ok());
    let pool = PoolSpec::new(PoolName::new("race-s").unwrap(), 1, LONG).unwrap();
    match memory.acquire(&pool, Floor::NONE).await {
        Err(AcquireError::PoolExhausted { .. }) => {}
        other => panic!("the successor's slot is free: {other:?}"),
    }
    successor.shutdown().await;
}

/// Polls a future once with a waker that does nothing.
fn futures_poll_once<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> Option<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

/// 6(d): a loss callback that panics does not kill the driver: the loss is
/// reported and a new lease acquired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_loss_callback_does_not_stop_the_driver() {
    let memory = Memory::new();
    let calls = Arc::new(AtomicU32::new(0));
    let cfg = {
        let calls = calls.clone();
        LeaseConfig::builder("race-d")
            .pool_size(2)
            .ttl(LONG)
            .renew_interval(Duration::from_millis(100))
            .safety_margin(LONG / 10)
            .backoff_initial(Duration::from_millis(10))
            .on_lost(move |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                panic!("a callback bug");
            })
            .build()
            .unwrap()
    };
    let manager = LeaseManager::start(memory.clone(), cfg).await.unwrap();
    let before = manager.gate().view();
    memory.forget("race-d", before.slot);
    let gate = manager.gate();
    wait_until("a new lease after the panicking callback", || {
        gate.view().epoch > before.epoch && gate.check_now().is_ok()
    })
    .await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(matches!(manager.state(), LeaseState::Held { .. }));
    manager.shutdown().await;
}

/// 6(e): a driver that panics before the first lease is reported as a panic,
/// at once, not as a timeout after the acquire timeout.
#[tokio::test]
async fn a_driver_panic_during_start_is_reported_as_such() {
    let mut hooked = Hooked::new(Memory::new());
    hooked.panic_on_acquire = true;
    let err = LeaseManager::start(hooked, config("race-e", 1))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StartError::Panicked(m) if m.contains("a strategy bug")),
        "{err:?}"
    );
    // A start that waited for its acquire timeout would report a timeout, not
    // the panic: the variant is the proof, no reading of the clock needed.
    assert!(err.to_string().contains("panicked"), "{err}");
}

/// A margin below the minimum for the store's time
/// resolution, or a pool beyond what the store supports, is refused at start
/// with a message that names the minimum.
#[tokio::test]
async fn start_checks_the_config_against_the_store() {
    let mut coarse = Hooked::new(Memory::new());
    coarse.caps = coarse.caps.with_time_resolution(Duration::from_secs(1));
    let err = LeaseManager::start(coarse, config("coarse", 1))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, StartError::Config(ref c) if c.field() == "safety_margin"),
        "{err:?}"
    );
    assert!(msg.contains("1.") && msg.contains("resolution"), "{msg}");

    let mut small = Hooked::new(Memory::new());
    small.caps = small.caps.with_max_pool_size(4);
    let err = LeaseManager::start(small, config("small", 8))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StartError::Config(ref c) if c.field() == "pool_size"),
        "{err:?}"
    );
}
