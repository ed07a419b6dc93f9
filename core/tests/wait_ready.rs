//! `LeaseGate::wait_ready`: async code waits for generation to be able to go
//! on (a lease held, the clock past the grant's floor) without blocking the
//! runtime's thread, and gives up after its timeout saying what is missing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use leasehold_core::testing::GateControl;
use leasehold_core::{
    Fence, Floor, LeaseConfig, LeaseGate, LeaseManager, Memory, MonoTime, Opening, SystemClock,
};

/// A task that counts while the runtime's one thread is free.
fn ticker() -> Arc<AtomicU64> {
    let ticks = Arc::new(AtomicU64::new(0));
    let t = ticks.clone();
    tokio::spawn(async move {
        loop {
            t.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    ticks
}

/// On a closed gate it gives up after its timeout (`behind_floor: None`),
/// and the runtime's only thread went on running other tasks meanwhile.
#[tokio::test(flavor = "current_thread")]
async fn without_a_lease_it_gives_up_after_its_timeout_without_blocking_the_thread() {
    let gate = LeaseGate::new();
    let ticks = ticker();
    tokio::task::yield_now().await;
    let before = ticks.load(Ordering::SeqCst);
    let err = gate
        .wait_ready(Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(err.waited >= Duration::from_millis(100), "{err:?}");
    assert_eq!(err.behind_floor, None);
    assert!(err.to_string().contains("Retry-After"), "{err}");
    assert!(
        ticks.load(Ordering::SeqCst) > before,
        "no other task ran while waiting: the thread was blocked"
    );
}

/// It returns once the gate opens, and not before the clock has passed the
/// grant's floor; with a timeout shorter than that it says how far behind
/// the floor the clock is.
#[tokio::test(flavor = "current_thread")]
async fn it_returns_once_a_lease_is_held_and_the_clock_has_passed_the_floor() {
    let gate = LeaseGate::new();
    let ticks = ticker();
    let floor = SystemClock::unix_millis_at(MonoTime::now()) + 300;
    let opener = gate.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let deadline = MonoTime::now() + Duration::from_secs(60);
        opener.open_with(
            Opening::new(0, Fence(1), deadline).with_floor(Floor(floor), Floor(u64::MAX)),
        );
    });
    // Opened, but the clock is behind the floor: not yet.
    let err = loop {
        match gate.wait_ready(Duration::from_millis(20)).await {
            Err(e) if e.behind_floor.is_some() => break e,
            Err(_) => {}
            Ok(()) => panic!("ready before the clock passed the floor {floor}"),
        }
    };
    assert!(err.to_string().contains("behind the slot's floor"), "{err}");
    let before = ticks.load(Ordering::SeqCst);
    gate.wait_ready(Duration::from_secs(30)).await.unwrap();
    let now = SystemClock::unix_millis_at(MonoTime::now());
    assert!(now >= floor, "ready at {now}, before the floor {floor}");
    assert!(gate.check_now().is_ok());
    assert!(
        ticks.load(Ordering::SeqCst) > before,
        "the thread was blocked"
    );
}

/// With a real driver: after the lease is revoked the gate closes, and
/// `wait_ready` returns once the driver holds a lease again (a new grant).
#[tokio::test(flavor = "current_thread")]
async fn after_a_loss_it_returns_when_the_driver_holds_a_lease_again() {
    let store = Memory::new();
    let config = LeaseConfig::builder("wait-ready")
        .pool_size(1)
        .ttl(Duration::from_millis(600))
        .renew_interval(Duration::from_millis(50))
        .safety_margin(Duration::from_millis(150))
        .backoff_initial(Duration::from_millis(10))
        .backoff_max(Duration::from_millis(50))
        .build()
        .unwrap();
    let manager = LeaseManager::start(store.clone(), config).await.unwrap();
    let gate = manager.gate();
    gate.wait_ready(Duration::ZERO).await.unwrap();
    let first = gate.view().epoch;
    assert!(store.revoke("wait-ready", 0));
    let give_up = Instant::now() + Duration::from_secs(20);
    while gate.check_now().is_ok() {
        assert!(Instant::now() < give_up, "the revoked lease was never lost");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    gate.wait_ready(Duration::from_secs(20)).await.unwrap();
    assert!(gate.check_now().is_ok());
    assert!(gate.view().epoch > first, "ready on the old grant");
    manager.shutdown().await;
}
