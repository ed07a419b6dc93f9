//! The tokio driver against the real in-process store, on the real clock.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use leasehold_core::{
    Floor, LeaseConfig, LeaseGate, LeaseManager, LeaseState, LossCause, Memory, PoolName, PoolSpec,
    Release, StaticSlot, Strategy,
};

fn config(pool: &str, size: u32, ttl_ms: u64) -> leasehold_core::LeaseConfigBuilder {
    LeaseConfig::builder(pool)
        .pool_size(size)
        .ttl(Duration::from_millis(ttl_ms))
        .renew_interval(Duration::from_millis(ttl_ms / 4))
        .safety_margin(Duration::from_millis(ttl_ms / 5))
        .backoff_initial(Duration::from_millis(10))
        .acquire_timeout(Duration::from_secs(5))
}

async fn wait_for(
    rx: &mut tokio::sync::watch::Receiver<LeaseState>,
    what: impl Fn(&LeaseState) -> bool + Send + Sync,
) {
    tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|s| what(s)))
        .await
        .expect("state not reached within 10 s")
        .expect("driver gone");
}

/// Rule 5: the gate closes at the local deadline even when the driver cannot
/// run at all (here: the only runtime thread is blocked).
#[test]
fn gate_closes_at_the_deadline_with_the_driver_starved() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // A TTL long enough that the first check below cannot miss the
        // lease however loaded the machine is.
        let manager =
            LeaseManager::start(Memory::new(), config("starved", 4, 5_000).build().unwrap())
                .await
                .unwrap();
        let gate = manager.gate();
        let deadline = gate.deadline();
        assert!(gate.check(deadline - Duration::from_millis(1)).is_ok());
        // Block the runtime's only thread past the deadline: no timer can fire,
        // no renewal can run.
        let now = leasehold_core::MonoTime::now();
        std::thread::sleep(deadline.saturating_since(now) + Duration::from_millis(50));
        assert!(leasehold_core::MonoTime::now() > deadline);
        assert!(
            gate.check_now().is_err(),
            "gate still open past its deadline with the driver starved"
        );
        assert!(
            gate.view().open,
            "nobody closed it explicitly: it closed by itself"
        );
        drop(manager);
    });
}

/// Rule 4: the loss callback runs after generation has stopped; a dynamic
/// strategy then re-acquires and the gate re-opens with a new epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callback_runs_after_the_gate_closed_then_reacquires() {
    let store = Memory::new();
    let gate_cell: Arc<OnceLock<LeaseGate>> = Arc::default();
    let closed_in_callback = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU32::new(0));
    let cfg = {
        let (gate_cell, closed, calls) =
            (gate_cell.clone(), closed_in_callback.clone(), calls.clone());
        // A long TTL and frequent renewals: the revocation is the only way
        // this lease can end, however slow the machine.
        config("lost", 2, 30_000)
            .renew_interval(Duration::from_millis(100))
            .on_lost(move |ev| {
                let gate = gate_cell.get().expect("gate set");
                closed.store(gate.check_now().is_err(), Ordering::SeqCst);
                assert!(matches!(ev.cause, LossCause::Rejected(_)));
                calls.fetch_add(1, Ordering::SeqCst);
            })
            .build()
            .unwrap()
    };
    let manager = LeaseManager::start(store.clone(), cfg).await.unwrap();
    let gate = manager.gate();
    gate_cell.set(gate.clone()).unwrap();
    let before = gate.view();
    store.forget("lost", before.slot);
    let mut rx = manager.subscribe();
    wait_for(&mut rx, |s| {
        matches!(s, LeaseState::Lost(_) | LeaseState::Acquiring)
    })
    .await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(
        closed_in_callback.load(Ordering::SeqCst),
        "callback ran while generation was still on"
    );
    wait_for(&mut rx, |s| matches!(s, LeaseState::Held { .. })).await;
    let after = gate.view();
    assert!(after.epoch > before.epoch);
    assert!(gate.check_now().is_ok());
    manager.shutdown().await;
}

/// Shutdown closes the gate, then releases: the slot is free at once.
#[tokio::test]
async fn shutdown_closes_then_releases() {
    let store = Memory::new();
    let manager = LeaseManager::start(store.clone(), config("bye", 1, 10_000).build().unwrap())
        .await
        .unwrap();
    let gate = manager.gate();
    assert_eq!(manager.shutdown().await, Some(Release::Released));
    assert!(gate.check_now().is_err());
    let pool = PoolSpec::new(PoolName::new("bye").unwrap(), 1, Duration::from_secs(10)).unwrap();
    assert!(
        store.acquire(&pool, Floor::NONE).await.is_ok(),
        "slot not released"
    );
}

/// A restarted driver in the same process does not leak the lease its
/// dropped predecessor still held: the orphan is released (its floor handed
/// on) and the restart acquires anew, so the pool keeps every slot and a
/// re-granted slot carries a higher fence. A second live driver never shares
/// a slot.
#[tokio::test]
async fn an_orphaned_lease_is_released_on_a_driver_restart() {
    let store = Memory::new();
    let first = LeaseManager::start(store.clone(), config("cache", 4, 10_000).build().unwrap())
        .await
        .unwrap();
    let v1 = first.gate().view();
    let concurrent =
        LeaseManager::start(store.clone(), config("cache", 4, 10_000).build().unwrap())
            .await
            .unwrap();
    assert_ne!(
        concurrent.gate().view().slot,
        v1.slot,
        "two live managers shared a slot"
    );
    drop(first);
    let restarted = LeaseManager::start(store.clone(), config("cache", 4, 10_000).build().unwrap())
        .await
        .unwrap();
    let v2 = restarted.gate().view();
    assert_ne!(v2.slot, concurrent.gate().view().slot);
    if v2.slot == v1.slot {
        assert!(v2.fence > v1.fence, "a re-granted slot kept its fence");
    }
    // Two of the four slots are held; the orphan's was not leaked.
    let pool = PoolSpec::new(PoolName::new("cache").unwrap(), 4, Duration::from_secs(10)).unwrap();
    for _ in 0..2 {
        assert!(
            store.acquire(&pool, Floor::NONE).await.is_ok(),
            "the orphaned lease was leaked"
        );
    }
    assert!(store.acquire(&pool, Floor::NONE).await.is_err());
    restarted.shutdown().await;
    concurrent.shutdown().await;
}

/// Rule 6 with a real store: a full pool makes `start` wait, then time out
/// with the last error; a final error is reported at once.
#[tokio::test]
async fn start_times_out_on_a_full_pool() {
    let store = Memory::new();
    let holder = LeaseManager::start(store.clone(), config("full", 1, 10_000).build().unwrap())
        .await
        .unwrap();
    let err = LeaseManager::start(
        store.clone(),
        config("full", 1, 10_000)
            .acquire_timeout(Duration::from_secs(1))
            .build()
            .unwrap(),
    )
    .await
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("acquire_timeout") && msg.contains("exhausted"),
        "{msg}"
    );
    holder.shutdown().await;

    let err = LeaseManager::start(
        StaticSlot::new(9),
        config("static", 4, 10_000).build().unwrap(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("raise the pool size"), "{err}");
}

/// Deterministic strategies hold their fixed slot and report it.
#[tokio::test]
async fn static_slot_is_held_and_renewed() {
    let manager = LeaseManager::start(
        StaticSlot::new(2),
        config("static-ok", 4, 30_000)
            .renew_interval(Duration::from_millis(100))
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(manager.gate().view().slot, 2);
    // Renewals move the deadline (polled, however slow the machine).
    let first = manager.gate().deadline();
    let mut rx = manager.subscribe();
    wait_for(
        &mut rx,
        |s| matches!(s, LeaseState::Held { deadline, .. } if *deadline > first),
    )
    .await;
    assert_eq!(manager.gate().view().slot, 2);
    manager.shutdown().await;
}

/// A loss reported by a store watch closes the gate at once (before the driver
/// even runs), then goes through the normal loss path; a report for an older
/// epoch is ignored.
#[tokio::test]
async fn reported_loss_closes_at_once_and_stale_reports_are_ignored() {
    let causes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let cfg = {
        let causes = causes.clone();
        config("signal", 2, 10_000)
            .on_lost(move |ev| causes.lock().unwrap().push(ev.cause.clone()))
            .build()
            .unwrap()
    };
    let manager = LeaseManager::start(Memory::new(), cfg).await.unwrap();
    let gate = manager.gate();
    let before = gate.view();
    let signal = manager.loss_signal();
    signal.report(before.epoch + 7, leasehold_core::Reason::new("stale"));
    assert!(
        gate.check_now().is_ok(),
        "a report for another epoch closed the gate"
    );
    signal.report(before.epoch, leasehold_core::Reason::new("key deleted"));
    // Single-threaded runtime, no await since the report: only `report` can have closed it.
    assert!(
        gate.check_now().is_err(),
        "the reported loss did not close the gate at once"
    );
    let mut rx = manager.subscribe();
    wait_for(&mut rx, |s| {
        matches!(s, LeaseState::Held { .. }) && gate.view().epoch > before.epoch
    })
    .await;
    let causes = causes.lock().unwrap().clone();
    assert_eq!(
        causes,
        vec![LossCause::Rejected(leasehold_core::Reason::new(
            "key deleted"
        ))],
        "exactly one loss, the current one"
    );
    manager.shutdown().await;
}
