//! `next_async`: where `next` would wait on the calling thread (the next
//! millisecond, a new lease's floor), it sleeps on the runtime's timer and
//! lets the thread run other tasks; it never waits for a lease, refuses as
//! `next` refuses, and every value it hands out passed the gate at a fresh
//! reading (DESIGN.md rules 5 and 8). The generators' clock is virtual
//! (`ManualTime`), so a value can come only once a test moves it; tokio's
//! timer runs on the real clock. The last test races tasks on the real
//! clocks.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use leasehold_core::testing::GateControl;
use leasehold_core::{Fence, Floor, LeaseGate, MonoTime, Opening, SystemClock};
use leasehold_nonce::*;

fn gate_with(t: &ManualTime, floor: Floor, for_: Duration) -> LeaseGate {
    let gate = LeaseGate::new();
    gate.open_with(
        Opening::new(4, Fence(1), t.mono() + for_)
            .with_floor(floor, Floor(u64::MAX))
            .with_max_clock_skew(Duration::from_secs(1)),
    );
    gate
}

fn wall_ms(t: &ManualTime) -> u64 {
    t.wall().as_millis() as u64
}

/// Polls `fut` once, outside any runtime.
fn poll_once<F: Future>(fut: F) -> Poll<F::Output> {
    let mut fut = std::pin::pin!(fut);
    fut.as_mut().poll(&mut Context::from_waker(Waker::noop()))
}

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

/// No lease: refused at the first poll, with no timer involved, as `next`
/// refuses. Behind the floor by more than the skew allows: the same.
#[test]
fn refusals_come_at_the_first_poll_never_a_wait() {
    let t = ManualTime::new();
    let g = Sortable64::with_time(LeaseGate::new(), Layout::default64(), t.clone()).unwrap();
    assert_eq!(
        poll_once(g.next_async()),
        Poll::Ready(Err(GenerateError::Closed))
    );
    let behind = Counter128::with_time(
        gate_with(&t, Floor(wall_ms(&t) + 5_000), Duration::from_secs(3600)),
        Layout::default128(),
        t.clone(),
    )
    .unwrap();
    assert!(matches!(
        poll_once(behind.next_async()),
        Poll::Ready(Err(GenerateError::ClockBehind { .. }))
    ));
}

/// Rule 8: after a new lease whose floor is 300 ms ahead of this host's
/// clock, `next_async` hands out nothing while the clock is behind the
/// floor, however long the runtime's clock runs, and the runtime's only
/// thread runs other tasks meanwhile; once the clock has passed the floor
/// the value is strictly after it and not ahead of the clock.
#[tokio::test(flavor = "current_thread")]
async fn it_waits_for_the_floor_without_blocking_the_thread() {
    let t = ManualTime::new();
    let floor = wall_ms(&t) + 300;
    let gate = gate_with(&t, Floor(floor), Duration::from_secs(3600));
    let s64 = Sortable64::with_time(gate, Layout::default64(), t.clone()).unwrap();
    let c128 = Counter128::with_time(
        gate_with(&t, Floor(floor), Duration::from_secs(3600)),
        Layout::default128(),
        t.clone(),
    )
    .unwrap();
    let u7 = Sortable128::with_time(
        gate_with(&t, Floor(floor), Duration::from_secs(3600)),
        Layout::default128(),
        t.clone(),
    )
    .unwrap();
    let ticks = ticker();
    tokio::task::yield_now().await;
    let before = ticks.load(Ordering::SeqCst);
    let mut a = tokio::spawn({
        let g = s64.clone();
        async move { g.next_async().await.map(|n| g.decode(n).millis) }
    });
    let mut b = tokio::spawn({
        let g = c128.clone();
        async move { g.next_async().await.map(|n| g.decode(n).millis) }
    });
    let mut c = tokio::spawn({
        let g = u7.clone();
        async move { g.next_uuid7_async().await.map(|u| u.unix_millis()) }
    });
    // However long the runtime waits: the host's (virtual) clock has not
    // moved, so no value may come.
    for handle in [&mut a, &mut b, &mut c] {
        assert!(
            tokio::time::timeout(Duration::from_millis(400), &mut *handle)
                .await
                .is_err(),
            "a value came while this host's clock was behind the floor"
        );
    }
    assert!(
        ticks.load(Ordering::SeqCst) > before,
        "other tasks did not run while next_async waited"
    );
    t.advance(Duration::from_millis(301));
    let epoch = DEFAULT_EPOCH_UNIX_MS;
    for (kind, at) in [
        ("Sortable64", a.await.unwrap().unwrap() + epoch),
        ("Counter128", b.await.unwrap().unwrap() + epoch),
        ("Uuid7", c.await.unwrap().unwrap()),
    ] {
        assert!(at > floor, "{kind}: {at} ms, not after the floor {floor}");
        assert!(at <= wall_ms(&t), "{kind}: {at} ms, ahead of the clock");
    }
}

/// Rule 5: a lease whose deadline passes while `next_async` waits for the
/// floor gives no value when the wait ends, though nobody closed the gate:
/// the value comes from a fresh call that checks the gate again.
#[tokio::test(flavor = "current_thread")]
async fn a_deadline_that_passes_during_the_wait_ends_it_with_closed() {
    let t = ManualTime::new();
    let floor = wall_ms(&t) + 300;
    let s64 = Sortable64::with_time(
        gate_with(&t, Floor(floor), Duration::from_millis(100)),
        Layout::default64(),
        t.clone(),
    )
    .unwrap();
    let c128 = Counter128::with_time(
        gate_with(&t, Floor(floor), Duration::from_millis(100)),
        Layout::default128(),
        t.clone(),
    )
    .unwrap();
    let mut a = tokio::spawn({
        let g = s64.clone();
        async move { g.next_async().await }
    });
    let mut b = tokio::spawn({
        let g = c128.clone();
        async move { g.next_async().await.map(|_| ()) }
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(400), &mut a)
            .await
            .is_err()
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(400), &mut b)
            .await
            .is_err()
    );
    t.advance(Duration::from_millis(400));
    assert_eq!(a.await.unwrap(), Err(GenerateError::Closed));
    assert_eq!(b.await.unwrap(), Err(GenerateError::Closed));
}

/// Many tasks on a two-thread runtime share one 64-bit sortable generator
/// (2^13 values a millisecond, so they wait for the next millisecond
/// often) on the real clocks: every value is distinct and none is ahead of
/// the clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_on_one_generator_never_share_a_value() {
    let gate = LeaseGate::new();
    gate.open(6, Fence(1), MonoTime::now() + Duration::from_secs(3600));
    let g = Sortable64::new(gate).unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let g = g.clone();
            tokio::spawn(async move {
                let mut out = Vec::with_capacity(20_000);
                for _ in 0..20_000 {
                    let v = g.next_async().await.unwrap();
                    let clock = SystemClock::unix_millis_at(MonoTime::now());
                    let at = g.decode(v).millis + DEFAULT_EPOCH_UNIX_MS;
                    assert!(at <= clock, "a value at {at} ms with the clock at {clock}");
                    out.push(v);
                }
                out
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let distinct: HashSet<_> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "a value was handed out twice");
}
