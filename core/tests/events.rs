//! Lease events and health, from the tokio driver against the real
//! in-process store (`Memory`) on the real clock. Nothing waits for a fixed
//! time: every wait polls a condition to a generous deadline.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use leasehold_core::events::{Acquired, SUBSCRIPTION_CAPACITY, Waiting};
use leasehold_core::{
    Clock, Condition, Leader, LeaderConfig, LeaseConfig, LeaseEvent, LeaseGate, LeaseManager,
    LossCause, Memory, MonoTime, SystemClock, WaitCause,
};
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

const PATIENCE: Duration = Duration::from_secs(30);

fn config(pool: &str, size: u32, ttl_ms: u64) -> leasehold_core::LeaseConfigBuilder {
    LeaseConfig::builder(pool)
        .pool_size(size)
        .ttl(Duration::from_millis(ttl_ms))
        .renew_interval(Duration::from_millis(100))
        .safety_margin(Duration::from_millis(ttl_ms / 5))
        .backoff_initial(Duration::from_millis(10))
        .acquire_timeout(Duration::from_secs(10))
}

/// The next event, within `PATIENCE`.
async fn next(events: &mut Receiver<LeaseEvent>) -> LeaseEvent {
    tokio::time::timeout(PATIENCE, events.recv())
        .await
        .expect("no event within the patience")
        .expect("the event channel failed")
}

/// Polls `f` every few milliseconds until it is true, within `PATIENCE`.
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let give_up = tokio::time::Instant::now() + PATIENCE;
    while !f() {
        assert!(tokio::time::Instant::now() < give_up, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Rule 4 for events: on a loss the gate is closed before any callback
/// runs and before a subscriber can receive `Lost`; a dynamic strategy then
/// acquires again, and `Acquired` comes once the gate is open with the new
/// grant. The first subscription starts with the lease `start` waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_closes_the_gate_before_any_event_then_a_new_grant_is_announced() {
    let store = Memory::new();
    let gate_cell: Arc<OnceLock<LeaseGate>> = Arc::default();
    let open_at_loss: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let acquired: Arc<Mutex<Vec<Acquired>>> = Arc::default();
    let cfg = {
        let (g1, g2, open1, open2, acq) = (
            gate_cell.clone(),
            gate_cell.clone(),
            open_at_loss.clone(),
            open_at_loss.clone(),
            acquired.clone(),
        );
        // A long TTL: the store forgetting the lease is the only way it ends.
        config("events-loss", 2, 30_000)
            .on_lost(move |_| {
                if g1.get().expect("gate set").check_now().is_ok() {
                    open1.lock().unwrap().push("on_lost");
                }
            })
            .on_event(move |e| {
                if matches!(e, LeaseEvent::Lost(_))
                    && g2.get().expect("gate set").check_now().is_ok()
                {
                    open2.lock().unwrap().push("on_event");
                }
            })
            .on_acquired(move |a| acq.lock().unwrap().push(*a))
            .build()
            .unwrap()
    };
    let manager = LeaseManager::start(store.clone(), cfg).await.unwrap();
    let gate = manager.gate();
    gate_cell.set(gate.clone()).unwrap();
    let mut events = manager.events();
    let first = gate.view();
    match next(&mut events).await {
        LeaseEvent::Acquired(a) => {
            assert_eq!(
                (a.slot, a.fence, a.epoch),
                (first.slot, first.fence, first.epoch)
            );
        }
        other => panic!("the first event was {other:?}, not the first lease"),
    }
    assert_eq!(
        acquired.lock().unwrap().len(),
        1,
        "on_acquired before start returned"
    );
    store.forget("events-loss", first.slot);
    let lost = next(&mut events).await;
    // Received: the gate was closed when it was sent (it may already be
    // open again with a newer grant, never with the lost one).
    assert!(
        gate.check_now().is_err() || gate.view().epoch > first.epoch,
        "a subscriber received Lost while the lost lease's gate was open"
    );
    match lost {
        LeaseEvent::Lost(loss) => {
            assert!(matches!(loss.cause, LossCause::Rejected(_)), "{loss:?}");
            assert!(loss.reacquiring);
            assert_eq!(loss.slot, first.slot);
        }
        other => panic!("{other:?} instead of the loss"),
    }
    assert!(
        open_at_loss.lock().unwrap().is_empty(),
        "callbacks ran while generation was still on: {:?}",
        open_at_loss.lock().unwrap()
    );
    match next(&mut events).await {
        LeaseEvent::Acquired(a) => {
            assert!(a.epoch > first.epoch);
            assert!(gate.view().epoch >= a.epoch);
        }
        other => panic!("{other:?} instead of the new grant"),
    }
    assert_eq!(acquired.lock().unwrap().len(), 2);
    manager.shutdown().await;
    // The store kept the forgotten lease's floor (its ceiling, about a TTL
    // ahead): the new grant waits for it. Then nothing until the channel
    // closes with the manager.
    loop {
        match events.recv().await {
            Ok(LeaseEvent::Waiting(w)) => assert_eq!(w.cause, WaitCause::Floor),
            Err(RecvError::Closed) => break,
            other => panic!("{other:?} after shutdown"),
        }
    }
}

/// Renewals are events only when asked for: a manager renewing every
/// 100 ms sends none by default, and one `Renewed` per renewal with
/// `report_renewals(true)`.
#[tokio::test]
async fn renewals_are_reported_only_when_asked_for() {
    let quiet = LeaseManager::start(Memory::new(), config("quiet", 1, 5_000).build().unwrap())
        .await
        .unwrap();
    let loud = LeaseManager::start(
        Memory::new(),
        config("loud", 1, 5_000)
            .report_renewals(true)
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let (mut quiet_events, mut loud_events) = (quiet.events(), loud.events());
    assert!(matches!(
        next(&mut quiet_events).await,
        LeaseEvent::Acquired(_)
    ));
    assert!(matches!(
        next(&mut loud_events).await,
        LeaseEvent::Acquired(_)
    ));
    // Three renewals of the quiet one, seen on its state.
    let mut states = quiet.subscribe();
    for _ in 0..3 {
        tokio::time::timeout(PATIENCE, states.changed())
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(quiet_events.try_recv(), Err(TryRecvError::Empty));
    for _ in 0..3 {
        match next(&mut loud_events).await {
            LeaseEvent::Renewed(r) => {
                assert_eq!(r.slot, loud.gate().view().slot);
                assert!(r.deadline <= loud.gate().deadline());
            }
            other => panic!("{other:?} instead of a renewal"),
        }
    }
    quiet.shutdown().await;
    loud.shutdown().await;
}

/// A subscriber that does not read never holds the driver back: it loses
/// the oldest events, is told how many, and goes on with the newest.
#[tokio::test]
async fn a_slow_subscriber_loses_the_oldest_events_and_is_told_how_many() {
    let renewals = Arc::new(AtomicU32::new(0));
    let cfg = {
        let renewals = renewals.clone();
        config("slow", 1, 1_000)
            .renew_interval(Duration::from_millis(10))
            .report_renewals(true)
            .on_event(move |e| {
                if matches!(e, LeaseEvent::Renewed(_)) {
                    renewals.fetch_add(1, Ordering::SeqCst);
                }
            })
            .build()
            .unwrap()
    };
    let manager = LeaseManager::start(Memory::new(), cfg).await.unwrap();
    let mut events = manager.events();
    let beyond = u32::try_from(SUBSCRIPTION_CAPACITY).unwrap() + 10;
    until("the driver renews past a full subscription", || {
        renewals.load(Ordering::SeqCst) > beyond
    })
    .await;
    match events.recv().await {
        Err(RecvError::Lagged(lost)) => assert!(lost > 0),
        other => panic!("{other:?}: the subscriber was not told what it lost"),
    }
    assert!(matches!(next(&mut events).await, LeaseEvent::Renewed(_)));
    manager.shutdown().await;
}

/// A callback that panics does not stop the driver: events go on, the
/// lease is acquired again after a loss, and the other callbacks still run.
#[tokio::test]
async fn a_panicking_event_callback_does_not_stop_the_driver() {
    let store = Memory::new();
    let seen = Arc::new(AtomicU32::new(0));
    let cfg = {
        let seen = seen.clone();
        config("panics", 1, 30_000)
            .on_acquired(|_| panic!("on_acquired fails on purpose"))
            .on_event(|_| panic!("on_event fails on purpose"))
            .on_event(move |_| {
                seen.fetch_add(1, Ordering::SeqCst);
            })
            .build()
            .unwrap()
    };
    let manager = LeaseManager::start(store.clone(), cfg).await.unwrap();
    let mut events = manager.events();
    assert!(matches!(next(&mut events).await, LeaseEvent::Acquired(_)));
    let before = manager.gate().view();
    store.forget("panics", before.slot);
    assert!(matches!(next(&mut events).await, LeaseEvent::Lost(_)));
    assert!(matches!(next(&mut events).await, LeaseEvent::Acquired(_)));
    assert!(manager.gate().view().epoch > before.epoch);
    // Acquired, lost, acquired (and waiting for the forgotten lease's floor).
    assert!(
        seen.load(Ordering::SeqCst) >= 3,
        "the callback after the panicking ones did not run"
    );
    assert!(manager.health().live);
    manager.shutdown().await;
}

/// A wall clock this far ahead of the process's.
struct Ahead(Duration);

impl Clock for Ahead {
    fn now(&self) -> MonoTime {
        MonoTime::now()
    }
    fn unix_offset(&self, fresh: bool) -> u64 {
        let system = if fresh {
            SystemClock::resync_unix_offset()
        } else {
            SystemClock::unix_offset()
        };
        system + u64::try_from(self.0.as_nanos()).unwrap()
    }
}

/// Rule 8 in events and health: the previous holder of the slot ran on a
/// wall clock 5 s ahead of this one, so the slot's floor is ahead of this
/// host's clock. The new holder announces `Acquired`, then `Waiting` for the
/// floor until its clock passes it; meanwhile health says not ready with a
/// `Retry-After`; once the clock is past the floor, ready.
#[tokio::test]
async fn a_floor_ahead_of_the_clock_is_announced_and_not_ready_until_passed() {
    let store = Memory::new();
    let ahead = Duration::from_secs(5);
    let previous = LeaseManager::start(
        store.clone(),
        config("floor", 1, 5_000)
            .max_clock_skew(ahead)
            .clock(Ahead(ahead))
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    // Gives the slot back, leaving a floor on its (fast) clock.
    previous.shutdown().await;
    let waits: Arc<Mutex<Vec<Waiting>>> = Arc::default();
    let cfg = {
        let waits = waits.clone();
        config("floor", 1, 5_000)
            .max_clock_skew(ahead)
            .on_waiting(move |w| waits.lock().unwrap().push(*w))
            .build()
            .unwrap()
    };
    let manager = LeaseManager::start(store.clone(), cfg).await.unwrap();
    let health = manager.health();
    let mut events = manager.events();
    let acquired = match next(&mut events).await {
        LeaseEvent::Acquired(a) => a,
        other => panic!("{other:?}"),
    };
    let wait = match next(&mut events).await {
        LeaseEvent::Waiting(w) => w,
        other => panic!("{other:?} instead of waiting for the floor"),
    };
    assert_eq!(wait.cause, WaitCause::Floor);
    assert_eq!(waits.lock().unwrap().as_slice(), &[wait], "on_waiting");
    let floor_passed_at =
        MonoTime::from_nanos((acquired.floor.0 + 1) * 1_000_000 - SystemClock::unix_offset());
    assert_eq!(wait.until, floor_passed_at);
    // Read right after start, unless the machine stalled past the floor.
    if MonoTime::now() < wait.until {
        assert!(
            !health.ready && health.live && health.status == 503,
            "{health:?}"
        );
        assert_eq!(
            health.condition,
            Condition::Waiting {
                until: wait.until,
                cause: WaitCause::Floor
            }
        );
        assert!(
            health
                .retry_after_secs()
                .is_some_and(|s| (1..=10).contains(&s))
        );
    }
    until("ready once the clock passes the floor", || {
        manager.health().ready
    })
    .await;
    assert!(
        MonoTime::now() >= wait.until,
        "ready before the clock passed the floor"
    );
    manager.shutdown().await;
}

/// Health across a loss: right after a revoked lease is lost (the slot
/// stays taken until the revoked lease would have ended), not ready, since
/// when and why, live, with a Retry-After; after shutdown, not live.
#[tokio::test]
async fn health_after_a_loss_says_since_when_and_why() {
    let store = Memory::new();
    let manager = LeaseManager::start(store.clone(), config("health", 1, 30_000).build().unwrap())
        .await
        .unwrap();
    let h = manager.health();
    assert!(h.ready && h.live && h.status == 200, "{h:?}");
    let mut events = manager.events();
    assert!(matches!(next(&mut events).await, LeaseEvent::Acquired(_)));
    let lost_at = MonoTime::now();
    assert!(store.revoke("health", 0));
    assert!(matches!(next(&mut events).await, LeaseEvent::Lost(_)));
    let h = manager.health();
    assert!(!h.ready && h.live && h.status == 503, "{h:?}");
    match &h.condition {
        Condition::NotHeld {
            since: Some(since),
            lost: Some(LossCause::Rejected(_)),
        } => assert!(*since >= lost_at),
        other => panic!("{other:?}"),
    }
    assert!(h.retry_after_secs().is_some_and(|s| s >= 1), "{h:?}");
    assert!(
        h.reason.contains("no lease held") && h.reason.contains("lost"),
        "{}",
        h.reason
    );
    let gate = manager.gate();
    manager.shutdown().await;
    assert!(!gate.health().ready);
}

/// An elector whose leader returns stands back for a TTL, and says so: its
/// events are the lease's `Acquired`, then `SteppedBack` with when it
/// campaigns again, to the subscription and to `on_event`.
#[tokio::test]
async fn an_elector_that_stands_back_says_until_when() {
    let config = LeaderConfig::builder("stand-back")
        .ttl(Duration::from_millis(600))
        .renew_interval(Duration::from_millis(100))
        .safety_margin(Duration::from_millis(120))
        .backoff_initial(Duration::from_millis(10))
        .build()
        .unwrap();
    let stepped = Arc::new(AtomicBool::new(false));
    let elector = {
        let stepped = stepped.clone();
        Leader::builder(Memory::new(), config)
            .on_event(move |e| {
                if matches!(e, LeaseEvent::SteppedBack(_)) {
                    stepped.store(true, Ordering::SeqCst);
                }
            })
            .campaign(|_leadership| async {})
    };
    let mut events = elector.events();
    let acquired = match next(&mut events).await {
        LeaseEvent::Acquired(a) => a,
        other => panic!("{other:?}"),
    };
    match next(&mut events).await {
        LeaseEvent::SteppedBack(s) => {
            assert_eq!((s.slot, s.fence), (acquired.slot, acquired.fence));
            // A TTL after the release, which came after the grant's local
            // deadline was set (its send time plus less than a TTL).
            assert!(s.until > acquired.deadline, "{s:?} {acquired:?}");
        }
        other => panic!("{other:?} instead of standing back"),
    }
    assert!(stepped.load(Ordering::SeqCst), "on_event did not see it");
    // It campaigns again after the TTL: a new term.
    match next(&mut events).await {
        LeaseEvent::Acquired(a) => assert!(a.fence > acquired.fence),
        other => panic!("{other:?}"),
    }
    elector.shutdown().await;
}
