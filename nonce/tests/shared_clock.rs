//! A generator's wall clock and the lease manager's (DESIGN.md, timing
//! rule 8): the ceilings the manager reports and the timestamps generators
//! stamp must come from one clock. The clock here is a virtual host clock an
//! hour ahead of the system's: monotonic time is the gate's, the Unix offset
//! is the system's plus an hour, so nothing depends on how fast the test
//! runs (an hour against a TTL of 10 s).

use std::time::Duration;

use leasehold_core::{
    DEFAULT_MAX_CLOCK_SKEW, Floor, LeaseConfig, LeaseManager, Memory, MonoTime, Strategy,
};
use leasehold_nonce::*;

const HOUR: Duration = Duration::from_secs(3600);

/// A host whose wall clock is `.0` ahead of the system's.
#[derive(Clone, Copy, Debug)]
struct Ahead(Duration);

impl TimeSource for Ahead {
    fn now(&self) -> Reading {
        PreciseClock.now()
    }
    fn precise(&self) -> MonoTime {
        MonoTime::now()
    }
    fn unix_offset(&self, fresh: bool) -> u64 {
        PreciseClock.unix_offset(fresh) + self.0.as_nanos() as u64
    }
}

fn config(clock: Option<Ahead>) -> LeaseConfig {
    let b = LeaseConfig::builder("shared-clock")
        .pool_size(1)
        .ttl(Duration::from_secs(10));
    match clock {
        Some(c) => b.clock(AsClock(c)),
        None => b,
    }
    .build()
    .unwrap()
}

/// How it fails without the shared clock: the manager reports ceilings on
/// the system clock, about a TTL ahead of now, and the generator stamps an
/// hour ahead of now, past every ceiling: refused, never issued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generator_clock_ahead_of_the_managers_stamps_past_the_ceiling() {
    let manager = LeaseManager::start(Memory::new(), config(None))
        .await
        .unwrap();
    let ids = Sortable64::with_time(manager.gate(), Layout::default64(), Ahead(HOUR)).unwrap();
    match ids.next() {
        Err(GenerateError::PastCeiling {
            timestamp_unix_ms,
            ceiling_unix_ms,
        }) => {
            assert!(ceiling_unix_ms <= manager.gate().ceiling().0);
            let past = timestamp_unix_ms - ceiling_unix_ms;
            assert!(
                past >= (HOUR - Duration::from_secs(10)).as_millis() as u64,
                "{past}"
            );
        }
        other => panic!("expected PastCeiling, got {other:?}"),
    }
    drop(ids);
    manager.shutdown().await;
}

/// With the generator's clock given to the manager, its ceilings are on that
/// clock: the generator issues, and every value is within the ceiling the
/// store recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_shared_clock_the_ceiling_covers_the_generators_timestamps() {
    let time = Ahead(HOUR);
    let manager = LeaseManager::start(Memory::new(), config(Some(time)))
        .await
        .unwrap();
    let ids = Sortable64::with_time(manager.gate(), Layout::default64(), time).unwrap();
    for _ in 0..10_000 {
        let v = ids.next().unwrap();
        let unix = ids.decode(v).millis + DEFAULT_EPOCH_UNIX_MS;
        assert!(unix <= manager.gate().ceiling().0);
    }
    drop(ids);
    manager.shutdown().await;
}

/// The floor rules with a shared clock ahead of the next holder's: the floor
/// the first holder leaves covers everything it issued, the store's floor
/// never goes back when the next holder reports lower ceilings, and the next
/// holder never issues at or below it: its clock is an hour behind the
/// floor, so its first timestamp, just past the floor, is past its own
/// ceilings and more than `max_clock_skew` ahead of its clock: it refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_floor_a_shared_clock_leaves_holds_back_the_next_holder() {
    let store = Memory::new();
    let time = Ahead(HOUR);
    let first = LeaseManager::start(store.clone(), config(Some(time)))
        .await
        .unwrap();
    let a = Sortable64::with_time(first.gate(), Layout::default64(), time).unwrap();
    let mut a_max = 0;
    for _ in 0..10_000 {
        let v = a.next().unwrap();
        a_max = a_max.max(a.decode(v).millis + DEFAULT_EPOCH_UNIX_MS);
    }
    drop(a);
    first.shutdown().await;
    let pool = config(None).pool().clone();
    let floor = |slots: Vec<leasehold_core::SlotInfo>| slots[0].floor;
    let left = floor(store.inspect(&pool).await.unwrap());
    assert!(left >= Floor(a_max), "floor {left:?} below issued {a_max}");

    let second = LeaseManager::start(store.clone(), config(None))
        .await
        .unwrap();
    assert!(second.gate().view().floor >= Floor(a_max));
    let after = floor(store.inspect(&pool).await.unwrap());
    assert!(
        after >= left,
        "the slot's floor went back: {after:?} < {left:?}"
    );
    let b = Sortable64::with_time(second.gate(), Layout::default64(), PreciseClock).unwrap();
    // Its first timestamp is past the floor, an hour ahead of its clock:
    // past its own ceilings too, or too far ahead to wait for.
    match b.next() {
        Err(GenerateError::PastCeiling {
            timestamp_unix_ms, ..
        }) => assert!(timestamp_unix_ms > a_max),
        Err(GenerateError::ClockBehind { max_clock_skew, .. }) => {
            assert_eq!(max_clock_skew, DEFAULT_MAX_CLOCK_SKEW);
        }
        other => panic!("the next holder must refuse, got {other:?}"),
    }
    drop(b);
    second.shutdown().await;
}
