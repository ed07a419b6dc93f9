//! The per-thread block path (96- and 128-bit layouts): values reserved in
//! blocks of the one shared state keep every rule of the one-value path
//! (DESIGN.md, rules 5, 8 and 9): no duplicates across threads, clones and
//! leases; a new lease discards the blocks of the old one; the floor; and
//! what the gate reports as issued covers every value handed out.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use leasehold_core::testing::GateControl;
use leasehold_core::{Fence, Floor, LeaseGate, MonoTime, Opening};
use leasehold_nonce::*;

fn open_gate(slot: u32) -> LeaseGate {
    let gate = LeaseGate::new();
    gate.open(slot, Fence(1), MonoTime::now() + Duration::from_secs(600));
    gate
}

/// `threads` threads share one generator (clones), `per` values each;
/// returns every value.
fn run<G: Clone + Send + 'static>(
    g: &G,
    threads: usize,
    per: usize,
    next: fn(&G) -> u128,
) -> Vec<u128> {
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (g, barrier) = (g.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                (0..per).map(|_| next(&g)).collect::<Vec<_>>()
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect()
}

fn assert_unique(values: &[u128], what: &str) {
    let mut seen = HashSet::with_capacity(values.len());
    let dups = values.iter().filter(|v| !seen.insert(**v)).count();
    assert_eq!(dups, 0, "{what}: {dups} duplicates among {}", values.len());
}

#[test]
fn many_threads_never_share_a_value() {
    let c128 = Counter128::new(open_gate(1)).unwrap();
    assert_unique(
        &run(&c128, 8, 100_000, |g| g.next().unwrap().0),
        "counter128",
    );
    let s128 = Sortable128::new(open_gate(2)).unwrap();
    assert_unique(
        &run(&s128, 8, 100_000, |g| g.next().unwrap().0),
        "sortable128",
    );
    let c96 = Counter96::new(open_gate(3)).unwrap();
    assert_unique(
        &run(&c96, 8, 100_000, |g| g.next().unwrap().to_u128()),
        "counter96",
    );
    let s96 = Sortable96::new(open_gate(4)).unwrap();
    assert_unique(
        &run(&s96, 8, 100_000, |g| g.next().unwrap().to_u128()),
        "sortable96",
    );
    // Encrypted and UUIDv7 forms go through the same blocks.
    let key = BaseKey::new(&[9; 32]).unwrap();
    let e128 = Encrypted::new(Counter128::new(open_gate(5)).unwrap(), &key);
    assert_unique(
        &run(&e128, 8, 50_000, |g| g.next().unwrap().0),
        "encrypted128",
    );
    let u7 = Sortable128::new(open_gate(6)).unwrap();
    assert_unique(
        &run(&u7, 8, 50_000, |g| g.next_uuid7().unwrap().to_u128()),
        "uuid7",
    );
}

/// Sortable blocks carry the creation time: a value's timestamp is never
/// behind the millisecond in which an earlier call on its thread returned.
#[test]
fn sortable_blocks_follow_the_clock() {
    let t = ManualTime::new();
    // Time moves while a generator waits (for the first millisecond after
    // the lease was observed).
    t.auto_advance(Duration::from_micros(10));
    let gate = LeaseGate::new();
    gate.open(1, Fence(1), t.mono() + Duration::from_secs(3600));
    let g = Sortable128::with_time(gate, Layout::default128(), t.clone()).unwrap();
    let mut last = 0;
    for i in 0..10_000u64 {
        if i % 7 == 0 {
            t.advance(Duration::from_micros(300));
        }
        let millis = g.decode(g.next().unwrap()).millis;
        let now = (t.wall().as_millis() as u64).saturating_sub(DEFAULT_EPOCH_UNIX_MS);
        assert!(millis >= last, "went backwards");
        assert!(millis <= now, "{millis} ahead of the clock {now}");
        assert!(millis + 1 >= now, "{millis} lags the clock {now}");
        last = millis;
    }
}

/// A new lease (new epoch) discards every thread's block: values after the
/// reopening carry the new slot and start after everything issued before,
/// and nothing repeats across the leases. What the gate reports after each
/// close covers every value any thread was handed.
#[test]
fn a_new_lease_discards_the_blocks_and_issued_covers_them() {
    fn check<G: Clone + Send + Sync + 'static>(
        gate: &LeaseGate,
        g: &G,
        next: fn(&G) -> Result<u128, GenerateError>,
        decode: fn(&G, u128) -> Parts,
    ) {
        const PER_LEASE: usize = 50;
        let stop = Arc::new(AtomicBool::new(false));
        let made = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (g, stop, made) = (g.clone(), stop.clone(), made.clone());
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok(v) = next(&g) {
                            got.push(v);
                            made.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    got
                })
            })
            .collect();
        let mut reported = Vec::new();
        for round in 0..30u32 {
            let slot = 1 + round % 3;
            let before = made.load(Ordering::Relaxed);
            gate.open(
                slot,
                Fence(u64::from(round)),
                MonoTime::now() + Duration::from_secs(600),
            );
            // Open for a varying while, and until the threads have made
            // values under this lease: on a loaded machine they may not run
            // at all in a few hundred microseconds.
            std::thread::sleep(Duration::from_micros(300 + u64::from(round) * 50));
            let waiting = std::time::Instant::now();
            while made.load(Ordering::Relaxed) < before + PER_LEASE
                && waiting.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_micros(100));
            }
            gate.close();
            let issued = gate.issued().unwrap().0;
            reported.push((gate.view().epoch, slot, issued));
            std::thread::sleep(Duration::from_micros(100));
        }
        stop.store(true, Ordering::Relaxed);
        let values: Vec<u128> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        assert!(
            values.len() >= 30 * PER_LEASE,
            "only {} values: the threads made fewer than {PER_LEASE} under some lease in a \
             minute",
            values.len()
        );
        assert_unique(&values, "across 30 leases");
        // Every value belongs to one of the leases; the lease is the one
        // whose report is the first at or above its timestamp (each lease
        // starts strictly after the previous one's report), and its slot
        // is that lease's.
        for v in values {
            let p = decode(g, v);
            let unix = p.millis + DEFAULT_EPOCH_UNIX_MS;
            let lease = reported
                .iter()
                .find(|(_, _, issued)| unix <= *issued)
                .unwrap_or_else(|| panic!("{unix} ms handed out, past every report {reported:?}"));
            assert_eq!(
                p.slot, lease.1,
                "a value of lease {lease:?} with another slot"
            );
        }
    }
    let gate = LeaseGate::new();
    let c = Counter128::new(gate.clone()).unwrap();
    check(
        &gate,
        &c,
        |g| g.next().map(|n| n.0),
        |g, v| g.decode(Nonce128(v)),
    );
    let gate = LeaseGate::new();
    let s = Sortable128::new(gate.clone()).unwrap();
    check(
        &gate,
        &s,
        |g| g.next().map(|n| n.0),
        |g, v| g.decode(Nonce128(v)),
    );
}

/// One thread, the same slot again: the block reserved under the first
/// lease is not used under the second (its values would repeat what the
/// next state hands out after the floor).
#[test]
fn a_block_is_not_carried_into_the_next_lease() {
    let t = ManualTime::new();
    t.auto_advance(Duration::from_micros(10));
    let gate = LeaseGate::new();
    gate.open(4, Fence(1), t.mono() + Duration::from_secs(3600));
    let g = Counter128::with_time(gate.clone(), Layout::default128(), t.clone()).unwrap();
    let a = g.decode(g.next().unwrap());
    let a2 = g.decode(g.next().unwrap());
    assert_eq!((a.millis, a.counter + 1), (a2.millis, a2.counter));
    gate.close();
    let issued = gate.issued().unwrap().0;
    gate.open(4, Fence(2), t.mono() + Duration::from_secs(3600));
    let b = g.decode(g.next().unwrap());
    assert!(
        b.millis + DEFAULT_EPOCH_UNIX_MS > issued,
        "{b:?} not after {issued}"
    );
    assert_eq!(b.counter, 0, "the new lease starts its own counter");
}

/// Blocks belong to one generator: a thread that used a generator on one
/// gate and then one on another never hands the first one's values out
/// through the second (even when the first is gone and its memory reused).
#[test]
fn blocks_are_per_generator() {
    let mut seen = HashSet::new();
    for slot in 0..50u32 {
        let g = Counter128::new(open_gate(slot)).unwrap();
        for _ in 0..3 {
            let v = g.next().unwrap();
            assert_eq!(g.decode(v).slot, slot);
            assert!(seen.insert(v.0));
        }
        drop(g);
    }
    // Two live generators on one thread, alternating.
    let a = Sortable128::new(open_gate(1)).unwrap();
    let b = Sortable128::new(open_gate(2)).unwrap();
    for _ in 0..10_000 {
        assert_eq!(a.decode(a.next().unwrap()).slot, 1);
        assert_eq!(b.decode(b.next().unwrap()).slot, 2);
    }
}

/// The floor: a lease whose floor is ahead of this host's clock (within
/// max_clock_skew) starts strictly after it on every thread.
#[test]
fn every_thread_starts_after_the_floor() {
    let t = ManualTime::new();
    t.auto_advance(Duration::from_micros(5));
    let now_ms = t.wall().as_millis() as u64;
    let floor = now_ms + 30;
    let gate = LeaseGate::new();
    gate.open_with(
        Opening::new(2, Fence(1), t.mono() + Duration::from_secs(3600))
            .with_floor(Floor(floor), Floor(u64::MAX)),
    );
    let c = Counter128::with_time(gate.clone(), Layout::default128(), t.clone()).unwrap();
    let values = run(&c, 4, 20_000, |g| g.next().unwrap().0);
    assert_unique(&values, "counter128 after a floor");
    for v in &values {
        let unix = c.decode(Nonce128(*v)).millis + DEFAULT_EPOCH_UNIX_MS;
        assert!(unix > floor, "{unix} at or below the floor {floor}");
    }
    drop(c);
    let gate = LeaseGate::new();
    let floor = t.wall().as_millis() as u64 + 30;
    gate.open_with(
        Opening::new(2, Fence(1), t.mono() + Duration::from_secs(3600))
            .with_floor(Floor(floor), Floor(u64::MAX)),
    );
    let s = Sortable128::with_time(gate, Layout::default128(), t.clone()).unwrap();
    let values = run(&s, 4, 20_000, |g| g.next().unwrap().0);
    assert_unique(&values, "sortable128 after a floor");
    for v in &values {
        let unix = s.decode(Nonce128(*v)).millis + DEFAULT_EPOCH_UNIX_MS;
        assert!(unix > floor, "{unix} at or below the floor {floor}");
    }
}

/// The ceiling holds for values from a block, and a refusal does not use the
/// value up: the next value after the renewal is the one refused.
#[test]
fn the_ceiling_holds_for_block_values() {
    let t = ManualTime::new();
    let now_ms = t.wall().as_millis() as u64;
    let gate = LeaseGate::new();
    gate.open_with(
        Opening::new(1, Fence(1), t.mono() + Duration::from_secs(3600))
            .with_floor(Floor::NONE, Floor(now_ms + 1_300)),
    );
    let g = Sortable128::with_time(gate.clone(), Layout::default128(), t.clone()).unwrap();
    t.auto_advance(Duration::from_micros(50));
    let first = g.next().unwrap();
    // A forward step the offset follows at once (within a second), past the
    // ceiling; real time is still before it.
    t.set_wall(t.wall() + Duration::from_millis(900));
    t.advance(Duration::from_millis(1_100));
    for _ in 0..1_000 {
        assert!(matches!(g.next(), Err(GenerateError::PastCeiling { .. })));
    }
    gate.extend(
        t.mono() + Duration::from_secs(3600),
        Floor(now_ms + 120_000),
    );
    let v = g.next().unwrap();
    assert!(v > first);
    assert!(g.decode(v).millis + DEFAULT_EPOCH_UNIX_MS <= now_ms + 120_000);
}

/// Many threads race a close: the highest timestamp any thread was handed
/// never passes what the gate reports once closed (sortable128: its
/// timestamps move with the clock, so a stale report would show).
#[test]
fn issued_after_close_covers_block_values() {
    for round in 0..40u32 {
        let gate = open_gate(6);
        let g = Sortable128::new(gate.clone()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let max_seen = Arc::new(AtomicU64::new(0));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (g, stop, max_seen) = (g.clone(), stop.clone(), max_seen.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok(v) = g.next() {
                            let unix = g.decode(v).millis + DEFAULT_EPOCH_UNIX_MS;
                            max_seen.fetch_max(unix, Ordering::SeqCst);
                        }
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_micros(500 + u64::from(round) * 97));
        gate.close();
        let issued = gate.issued().unwrap();
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.join().unwrap();
        }
        let max = max_seen.load(Ordering::SeqCst);
        assert!(
            max <= issued.0,
            "round {round}: {max} handed out, {issued:?} reported"
        );
    }
}

/// A block never runs into the next timestamp step: with 20 counter bits
/// (the smallest counter that uses blocks) a counter crosses a step every
/// 2^20 values, and a block that would straddle one ends at it. A block
/// that did not would hand out counters that overflow into the slot field.
#[test]
fn blocks_end_at_a_timestamp_step() {
    let layout = Layout::builder(64)
        .timestamp_bits(38)
        .slot_bits(6)
        .counter_bits(20)
        .build()
        .unwrap();
    let g = Counter64::with_layout(open_gate(5), layout).unwrap();
    let values = run(&g, 4, 400_000, |g| u128::from(g.next().unwrap().0));
    assert_unique(&values, "counter64 with 20 counter bits");
    let steps: HashSet<u64> = values
        .iter()
        .map(|v| {
            let parts = g.decode(Nonce64(*v as u64));
            assert_eq!(parts.slot, 5, "{parts:?}: the counter ran into the slot");
            parts.millis
        })
        .collect();
    assert!(steps.len() >= 2, "never crossed a step: {steps:?}");
}

/// The fast path checks the deadline on every call (rule 5): with the real
/// clock, no thread is handed a value from a call it made at or after the
/// deadline, though every thread has a block with values left.
#[test]
fn block_values_stop_at_the_deadline_on_every_thread() {
    fn check<G: Clone + Send + 'static>(
        make: fn(LeaseGate) -> G,
        next: fn(&G) -> Result<u128, GenerateError>,
    ) {
        let gate = LeaseGate::new();
        let deadline = MonoTime::now() + Duration::from_millis(80);
        gate.open(1, Fence(1), deadline);
        let g = make(gate);
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let g = g.clone();
                std::thread::spawn(move || {
                    let give_up = MonoTime::now() + Duration::from_secs(30);
                    let mut handed = 0u64;
                    loop {
                        let called = MonoTime::now();
                        match next(&g) {
                            Ok(_) => {
                                assert!(
                                    called < deadline,
                                    "a value from a call after the deadline"
                                );
                                handed += 1;
                            }
                            Err(e) => {
                                assert_eq!(e, GenerateError::Closed);
                                assert!(MonoTime::now() >= deadline - FastClock::GUARD);
                                break;
                            }
                        }
                        assert!(MonoTime::now() < give_up, "the gate never closed by itself");
                    }
                    // Refused for good, not just once.
                    assert_eq!(next(&g).err(), Some(GenerateError::Closed));
                    handed
                })
            })
            .collect();
        let handed: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(handed > 0);
    }
    check(
        |gate| Counter128::new(gate).unwrap(),
        |g| g.next().map(|v| v.0),
    );
    check(
        |gate| Sortable128::new(gate).unwrap(),
        |g| g.next().map(|v| v.0),
    );
    check(
        |gate| Counter96::new(gate).unwrap(),
        |g| g.next().map(|v| v.to_u128()),
    );
}

/// A renewal (same grant, later deadline and ceiling) keeps the thread's
/// block: values go on one after the other. A new grant on the same slot,
/// opened while the block still has values and with no close in between,
/// discards it: the next value starts the new grant's counter, after the
/// new floor.
#[test]
fn a_renewal_keeps_the_block_and_a_new_grant_discards_it() {
    let t = ManualTime::new();
    t.auto_advance(Duration::from_micros(10));
    let now_ms = t.wall().as_millis() as u64;
    let gate = LeaseGate::new();
    gate.open_with(
        Opening::new(3, Fence(1), t.mono() + Duration::from_secs(10))
            .with_floor(Floor::NONE, Floor(now_ms + 10_000)),
    );
    let g = Counter128::with_time(gate.clone(), Layout::default128(), t.clone()).unwrap();
    let a = g.decode(g.next().unwrap());
    gate.extend(t.mono() + Duration::from_secs(20), Floor(now_ms + 20_000));
    let b = g.decode(g.next().unwrap());
    assert_eq!((b.millis, b.counter), (a.millis, a.counter + 1));
    let floor = t.wall().as_millis() as u64 + 20;
    gate.open_with(
        Opening::new(3, Fence(2), t.mono() + Duration::from_secs(20))
            .with_floor(Floor(floor), Floor(floor + 20_000)),
    );
    let c = g.decode(g.next().unwrap());
    assert_eq!(c.counter, 0, "{c:?}: the old grant's block was used");
    assert!(
        c.millis + DEFAULT_EPOCH_UNIX_MS > floor,
        "{c:?} not after the floor {floor}"
    );
}

/// Rule 10 on the block path: a forward wall-clock step within the step
/// the offset follows at once reaches sortable values within about a second
/// (generators re-read the Unix offset once a second), though each thread
/// keeps a block.
#[test]
fn a_forward_wall_step_reaches_sortable_block_values_within_a_second() {
    let t = ManualTime::new();
    t.auto_advance(Duration::from_micros(10));
    let gate = LeaseGate::new();
    gate.open(1, Fence(1), t.mono() + Duration::from_secs(3600));
    let g = Sortable128::with_time(gate, Layout::default128(), t.clone()).unwrap();
    g.next().unwrap();
    t.set_wall(t.wall() + Duration::from_millis(900));
    for _ in 0..1_200 {
        t.advance(Duration::from_millis(1));
        g.next().unwrap();
    }
    let unix = g.decode(g.next().unwrap()).millis + DEFAULT_EPOCH_UNIX_MS;
    let wall = t.wall().as_millis() as u64;
    assert!(
        unix + 2 >= wall,
        "{unix} still {} ms behind the stepped clock",
        wall - unix
    );
    assert!(unix <= wall);
}
