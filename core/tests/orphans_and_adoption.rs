//! Leases left behind and taken up again: a start abandoned after the store
//! answered, a grant adopted by a successor with another pool, an elector
//! restarted in the same process. Each would let two holders share a slot or
//! a fence if it went wrong.

use std::time::Duration;

use leasehold_core::{
    AcquireError, Floor, LeaseConfig, LeaseManager, Memory, PoolName, PoolSpec, Strategy,
};

fn config(pool: &str) -> LeaseConfig {
    LeaseConfig::builder(pool)
        .pool_size(1)
        .ttl(Duration::from_millis(600))
        .renew_interval(Duration::from_millis(100))
        .safety_margin(Duration::from_millis(100))
        .backoff_initial(Duration::from_millis(10))
        .backoff_max(Duration::from_millis(50))
        .acquire_timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn poll_once<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> Option<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

/// Finding 4 (robustness, leader pools): `start` is dropped after its driver
/// has sent the lease on the `started` channel but before `start` was polled
/// again to build the `LeaseManager` (a `tokio::time::timeout` or a
/// `select!` branch that loses the race — `Leader::campaign`'s run loop
/// selects `start` against its stop signal). The send succeeded, so the
/// driver does not take the "cancelled start gives its lease back" path;
/// no `LeaseManager` exists, so nothing can shut it down or abort it (the
/// `JoinHandle` was dropped, which detaches). The driver renews the slot for
/// as long as the process lives: a pool of one (a leader) is never free
/// again. DESIGN.md: "A cancelled `start` gives its lease back."
// One thread: the driver `start` spawns cannot run, and answer, before the
// first poll of `start` returns (on two threads it sometimes did, and the
// scenario was never set up).
#[tokio::test(flavor = "current_thread")]
async fn a_start_dropped_after_the_answer_leaves_a_driver_holding_the_slot_forever() {
    let memory = Memory::new();
    let pool = PoolSpec::new(
        PoolName::new("review-zombie").unwrap(),
        1,
        Duration::from_millis(600),
    )
    .unwrap();
    let mut start = Box::pin(LeaseManager::start(memory.clone(), config("review-zombie")));
    assert!(poll_once(start.as_mut()).is_none());
    // The driver acquires, opens its gate and answers `start`.
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let held = memory
            .inspect(&pool)
            .await
            .unwrap()
            .iter()
            .any(|s| s.holder.is_some());
        if held {
            break;
        }
        assert!(std::time::Instant::now() < give_up, "never acquired");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The caller gives up on `start` (its answer is ready but unread).
    drop(start);
    // Nobody can use this lease or release it. Five TTLs later it must be
    // gone (released, or at least left to expire).
    tokio::time::sleep(Duration::from_secs(3)).await;
    match memory.acquire(&pool, Floor::NONE).await {
        Ok(_) => {}
        Err(AcquireError::PoolExhausted { .. }) => panic!(
            "5 TTLs after `start` was dropped, the only slot is still held (renewed by a driver \
             no handle can reach)"
        ),
        Err(e) => panic!("{e}"),
    }
}

/// Finding 6 (robustness): the lease cache is keyed by store identity, pool
/// name and holder, not by the pool's size. A successor with a smaller pool
/// adopts its predecessor's grant even when that slot is outside its pool, and
/// holds (and generates under) a slot its own configuration says does not
/// exist: every generator whose layout is sized for the new pool then fails
/// with `SlotOutOfRange`, and the slot is outside what the operator reserved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adopted_grant_can_lie_outside_the_successors_pool() {
    let memory = Memory::new();
    let pool2 = PoolSpec::new(
        PoolName::new("review-size").unwrap(),
        2,
        Duration::from_millis(600),
    )
    .unwrap();
    // Someone else holds slot 0, so the first manager gets slot 1.
    let other = memory.acquire(&pool2, Floor::NONE).await.unwrap();
    assert_eq!(other.slot, 0);
    let sized = |size: u32| {
        LeaseConfig::builder("review-size")
            .pool_size(size)
            .holder("replica-a")
            .ttl(Duration::from_secs(30))
            .build()
            .unwrap()
    };
    let first = LeaseManager::start(memory.clone(), sized(2)).await.unwrap();
    assert_eq!(first.gate().view().slot, 1);
    drop(first); // a restart without shutdown: the grant stays in the lease cache
    let second = LeaseManager::start(memory.clone(), sized(1)).await.unwrap();
    let slot = second.gate().view().slot;
    assert!(
        slot < second.pool().size(),
        "a manager of a 1-slot pool holds slot {slot}"
    );
    second.shutdown().await;
}

/// Storage that checks fences (DESIGN.md, rule 7): a write with a smaller
/// fence than one seen is refused; the holder's own repeated writes pass.
#[derive(Default)]
struct Fenced {
    seen: leasehold_core::Fence,
    log: Vec<(&'static str, leasehold_core::Fence, bool)>,
}

impl Fenced {
    fn write(&mut self, who: &'static str, fence: leasehold_core::Fence) {
        let ok = fence >= self.seen;
        if ok {
            self.seen = fence;
        }
        self.log.push((who, fence, ok));
    }
}

/// Finding 7 (fencing, leader): an elector restarted in the same process
/// with the same holder identity (a supervisor restarting the election task:
/// the case the lease cache is for) adopts its predecessor's grant through
/// the lease cache, so its term has the predecessor's fence. Dropping an
/// `Elector` aborts its run loop but not the term's future (a detached
/// `JoinHandle`), and a write that future had in flight lands after the new
/// term's first write with the same fence: storage that checks fences accepts
/// it. With a fresh grant (a bigger fence) it would be refused. DESIGN.md,
/// rule 7: "The fence of a slot grows every time the slot changes hands".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_elector_leads_with_its_predecessors_fence() {
    use leasehold_core::{Elector, Leader};
    use std::sync::{Arc, Mutex};

    let store = Memory::new();
    let storage = Arc::new(Mutex::new(Fenced::default()));
    let config = || {
        leasehold_core::LeaderConfig::builder("review-leader")
            .holder("scheduler")
            .ttl(Duration::from_secs(5))
            .renew_interval(Duration::from_millis(200))
            .safety_margin(Duration::from_millis(500))
            .acquire_timeout(Duration::from_secs(10))
            .build()
            .unwrap()
    };
    // Each term: read the fence, do a slow call, write with the fence.
    let campaign = |who: &'static str, call: Duration| -> Elector {
        let storage = storage.clone();
        Leader::campaign(store.clone(), config(), move |leadership| {
            let storage = storage.clone();
            async move {
                while leadership.is_leading() {
                    let fence = leadership.fence();
                    tokio::time::sleep(call).await;
                    storage.lock().unwrap().write(who, fence);
                }
            }
        })
    };
    let first = campaign("first", Duration::from_millis(1_000));
    first.wait_leading().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The first term's future is now inside its slow call. The election
    // task is restarted.
    drop(first);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = campaign("second", Duration::from_millis(50));
    second.wait_leading().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let log = storage.lock().unwrap().log.clone();
    let first_write_of_second = log.iter().position(|(w, _, _)| *w == "second");
    let accepted_after = first_write_of_second.and_then(|i| {
        log[i..]
            .iter()
            .find(|(w, _, ok)| *w == "first" && *ok)
            .cloned()
    });
    assert!(
        accepted_after.is_none(),
        "the replaced term's write {accepted_after:?} was accepted after the new term wrote; \
         log: {log:?}"
    );
    second.shutdown().await;
}
