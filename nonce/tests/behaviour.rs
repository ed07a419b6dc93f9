//! Lease gating, time behaviour, encryption and UUIDv7: one behaviour per test.

use std::sync::mpsc;
use std::time::Duration;

use leasehold_core::testing::GateControl;
use leasehold_core::{AttachError, Fence, LeaseGate, MonoTime, SystemClock};
use leasehold_nonce::*;

fn open_gate(slot: u32) -> LeaseGate {
    let gate = LeaseGate::new();
    gate.open(slot, Fence(1), MonoTime::now() + Duration::from_secs(600));
    gate
}

/// A gate open until `for_` after the manual time's now.
fn manual_gate(t: &ManualTime, slot: u32, for_: Duration) -> LeaseGate {
    let gate = LeaseGate::new();
    gate.open(slot, Fence(1), t.mono() + for_);
    gate
}

/// The current timestamp field value of the default layouts under `t`.
fn manual_millis(t: &ManualTime) -> u64 {
    (t.wall().as_millis() as u64) - DEFAULT_EPOCH_UNIX_MS
}

/// The Unix-ms timestamp a generator on the system clocks may give a value
/// read at `mono`: `(mono + offset) / 10⁶`, with the process-wide offset
/// (which only grows) read before (lower bound) or after (upper bound).
fn unix_ms(mono: MonoTime, offset: u64) -> u64 {
    (mono.as_nanos() + offset) / 1_000_000
}

#[test]
fn closed_gate_refuses() {
    let g = Counter128::new(LeaseGate::new()).unwrap();
    assert_eq!(g.next(), Err(GenerateError::Closed));
    let e = g.next().unwrap_err().to_string();
    assert!(e.contains("no lease is held") && e.contains("retry"), "{e}");
}

#[test]
fn refused_once_the_deadline_passes_without_a_close() {
    let t = ManualTime::new();
    t.auto_advance(Duration::from_micros(100));
    let gate = manual_gate(&t, 1, Duration::from_millis(50));
    let gate2 = manual_gate(&t, 2, Duration::from_millis(50));
    let counter = Counter128::with_time(gate.clone(), Layout::default128(), t.clone()).unwrap();
    let sortable = Sortable64::with_time(gate2.clone(), Layout::default64(), t.clone()).unwrap();
    assert!(counter.next().is_ok());
    assert!(sortable.next().is_ok());
    t.advance(Duration::from_millis(50));
    // Nobody closed the gates: they still say open, but the deadline has passed.
    assert!(gate.view().open && gate2.view().open);
    assert_eq!(counter.next(), Err(GenerateError::Closed));
    assert_eq!(sortable.next(), Err(GenerateError::Closed));
}

#[test]
fn real_clock_never_generates_after_the_deadline() {
    let gate = LeaseGate::new();
    let deadline = MonoTime::now() + Duration::from_millis(30);
    gate.open(1, Fence(1), deadline);
    let g = Counter64::new(gate).unwrap();
    let give_up = MonoTime::now() + Duration::from_secs(10);
    loop {
        let called = MonoTime::now();
        match g.next() {
            Ok(_) => assert!(
                called < deadline,
                "a nonce from a call made after the deadline"
            ),
            Err(e) => {
                assert_eq!(e, GenerateError::Closed);
                break;
            }
        }
        assert!(MonoTime::now() < give_up, "the gate never closed by itself");
    }
    // Refused for good, not just once.
    assert!(g.next().is_err());
}

#[test]
fn new_lease_restarts_after_every_used_timestamp() {
    let gate = open_gate(1);
    let gate_c = open_gate(1);
    let g = Sortable64::new(gate.clone()).unwrap();
    let c = Counter64::new(gate_c.clone()).unwrap();
    let before: Vec<_> = (0..10_000).map(|_| g.next().unwrap()).collect();
    let before_c: Vec<_> = (0..10_000).map(|_| c.next().unwrap()).collect();
    let last = g.decode(*before.last().unwrap()).millis;
    let last_c = c.decode(*before_c.last().unwrap()).millis;

    gate.close();
    gate_c.close();
    assert_eq!(g.next(), Err(GenerateError::Closed));
    gate.open(2, Fence(2), MonoTime::now() + Duration::from_secs(600));
    gate_c.open(2, Fence(2), MonoTime::now() + Duration::from_secs(600));
    let after = g.next().unwrap();
    let after_c = c.next().unwrap();
    assert_eq!(g.decode(after).slot, 2);
    assert_eq!(c.decode(after_c).slot, 2);
    assert!(g.decode(after).millis > last);
    assert!(c.decode(after_c).millis > last_c);
    assert_eq!(c.decode(after_c).counter, 0);

    // The same slot again (a re-acquired lease): still strictly later.
    let last = g.decode(g.next().unwrap()).millis;
    gate.open(2, Fence(3), MonoTime::now() + Duration::from_secs(600));
    let again = g.next().unwrap();
    assert!(g.decode(again).millis > last);
}

#[test]
fn slot_outside_the_layout_is_refused() {
    let g = Counter64::new(open_gate(512)).unwrap(); // 9 slot bits: 0..=511
    let e = g.next().unwrap_err();
    assert_eq!(
        e,
        GenerateError::SlotOutOfRange {
            slot: 512,
            slot_bits: 9
        }
    );
    assert!(e.to_string().contains("at most 512 slots"), "{e}");
}

/// Sortable values increase, and each carries the time of its call: the
/// Unix-ms mapping (process-wide offset) of a monotonic reading taken inside
/// the call; for the fast clock, no earlier than a coarse reading taken before
/// the call (the coarse clock's own lag can exceed a tick on a loaded VM).
/// The bounds come from readings taken around the call, so load cannot break
/// them.
#[test]
fn sortable_order_and_timestamp_accuracy() {
    let offset_before = SystemClock::unix_offset();
    let g = Sortable128::with_time(open_gate(3), Layout::default128(), PreciseClock).unwrap();
    let fast = Sortable64::new(open_gate(3)).unwrap();
    let coarse = FastClock::new();
    let span = coarse.resolution();
    let ms = |n: u128, layout: &Layout| layout.decode(n).millis + DEFAULT_EPOCH_UNIX_MS;
    let mut prev = None;
    for i in 0..200_000 {
        let coarse_before = coarse.now();
        let before = MonoTime::now();
        let n = g.next().unwrap();
        let f = fast.next().unwrap();
        let after = MonoTime::now();
        if let Some(p) = prev {
            assert!(n > p);
        }
        prev = Some(n);
        if i % 1000 == 0 {
            let offset_after = SystemClock::unix_offset();
            let t = ms(n.0, g.layout());
            assert!(
                t <= unix_ms(after, offset_after),
                "timestamp after the call returned"
            );
            assert!(t >= unix_ms(before, offset_before), "timestamp too early");
            // The fast clock lags as the coarse clock does: its timestamp is
            // no earlier than a coarse reading before the call (less the
            // reading's width, which covers two mapping measurements).
            let t = ms(u128::from(f.0), fast.layout());
            assert!(t <= unix_ms(after, offset_after));
            assert!(
                t >= unix_ms(coarse_before.earliest - span, offset_before),
                "fast timestamp too early"
            );
        }
    }
}

#[test]
fn counter64_never_passes_real_time() {
    let t = ManualTime::new();
    let gate = manual_gate(&t, 7, Duration::from_secs(3600));
    let g = Counter64::with_time(gate, Layout::default64(), t.clone()).unwrap();

    // The first value waits for the millisecond after the grant was seen.
    t.auto_advance(Duration::from_micros(50));
    let first = g.next().unwrap();
    t.auto_advance(Duration::ZERO);
    let start = g.decode(first).millis;
    assert!(start <= manual_millis(&t));

    // Idle for 10 ms: a burst may spend those milliseconds, no more.
    t.advance(Duration::from_millis(10));
    let now = manual_millis(&t);
    let budget = (now - start + 1) * 8192 - 1;
    for _ in 0..budget {
        let n = g.next().unwrap();
        assert!(g.decode(n).millis <= now, "counter passed real time");
    }

    // Spent: the next one waits until real time moves.
    let (tx, rx) = mpsc::channel();
    let g2 = g.clone();
    let waiter = std::thread::spawn(move || tx.send(g2.next()).unwrap());
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "handed out a value ahead of real time"
    );
    t.advance(Duration::from_millis(1));
    let n = rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(g.decode(n).millis, now + 1);
    waiter.join().unwrap();
}

#[test]
fn wall_clock_going_backwards_never_repeats_a_timestamp() {
    let t = ManualTime::new();
    t.auto_advance(Duration::from_micros(100));
    let gate = manual_gate(&t, 4, Duration::from_secs(3600));
    let gate_c = manual_gate(&t, 4, Duration::from_secs(3600));
    let s = Sortable64::with_time(gate.clone(), Layout::default64(), t.clone()).unwrap();
    let c = Counter96::with_time(gate_c.clone(), Layout::default96(), t.clone()).unwrap();
    let mut last_s = s.next().unwrap();
    let mut last_c = c.next().unwrap();
    t.advance(Duration::from_millis(20));
    let before_step = s.decode(s.next().unwrap()).millis;

    // The wall clock steps back 10 s; re-anchoring (once a second) sees it.
    t.set_wall(t.wall() - Duration::from_secs(10));
    t.advance(Duration::from_millis(1500));
    for _ in 0..50_000 {
        let n = s.next().unwrap();
        let m = c.next().unwrap();
        assert!(n > last_s && m > last_c);
        last_s = n;
        last_c = m;
    }
    assert!(
        s.decode(last_s).millis > before_step,
        "timestamps went back"
    );

    // A new lease for the same slot after the step: still later than all used.
    gate.open(4, Fence(2), t.mono() + Duration::from_secs(3600));
    gate_c.open(4, Fence(2), t.mono() + Duration::from_secs(3600));
    let n = s.next().unwrap();
    assert!(n > last_s);
    assert!(s.decode(n).millis > s.decode(last_s).millis);
    assert!(c.next().unwrap() > last_c);
}

#[test]
fn sortable64_waits_for_the_next_millisecond() {
    let t = ManualTime::new();
    t.auto_advance(Duration::from_micros(100));
    let gate = manual_gate(&t, 1, Duration::from_secs(3600));
    let s = Sortable64::with_time(gate, Layout::default64(), t.clone()).unwrap();
    let first = s.next().unwrap();
    t.auto_advance(Duration::ZERO);
    let ms = s.decode(first).millis;
    // The rest of the millisecond's 8192 values, without time moving.
    for i in 1..8192 {
        let p = s.decode(s.next().unwrap());
        assert_eq!((p.millis, p.counter), (ms, i as u128));
    }
    t.auto_advance(Duration::from_micros(100));
    let next = s.decode(s.next().unwrap());
    assert_eq!((next.millis, next.counter), (ms + 1, 0));
    assert!(next.millis <= manual_millis(&t));
}

#[test]
fn encryption_round_trips_and_hides_the_counter() {
    let key = BaseKey::new(&[0x42; 48]).unwrap();
    let other = BaseKey::new(&[0x43; 32]).unwrap();
    let e64 = Encrypted::new(Counter64::new(open_gate(9)).unwrap(), &key);
    let e96 = Encrypted::new(Counter96::new(open_gate(9)).unwrap(), &key);
    let e128 = Encrypted::new(Counter128::new(open_gate(9)).unwrap(), &key);
    // Another key over the same generator (clones share its state).
    let o128 = Encrypted::new(e128.inner().clone(), &other);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..10_000 {
        let a = e64.next().unwrap();
        let plain = e64.decrypt(a);
        assert_ne!(a, plain);
        assert_eq!(e64.decode(a).slot, 9);
        assert!(seen.insert(a));

        let b = e96.next().unwrap();
        assert_eq!(e96.decode(b).slot, 9);
        assert!(b.to_u128() >> 96 == 0);

        let c = e128.next().unwrap();
        assert_eq!(e128.decode(c).slot, 9);
        // Under another key the same nonce decrypts to another plain value.
        let p = e128.decrypt(c);
        assert_ne!(o128.decrypt(c), p);
        assert_eq!(e128.layout().decode(p).slot, 9);
    }
    // Consecutive encrypted values share no obvious structure.
    let x = e128.next().unwrap().0;
    let y = e128.next().unwrap().0;
    assert!((x ^ y).count_ones() > 20);
}

#[test]
fn uuid7_is_accepted_by_the_uuid_crate() {
    let offset = SystemClock::unix_offset();
    let coarse = FastClock::new();
    let span = coarse.resolution();
    let g = Sortable128::new(open_gate(300)).unwrap();
    let mut prev: Option<uuid::Uuid> = None;
    for _ in 0..10_000 {
        let before = coarse.now().earliest;
        let id = g.next_uuid7().unwrap();
        let u = uuid::Uuid::parse_str(&id.to_string()).unwrap();
        assert_eq!(u.get_version(), Some(uuid::Version::SortRand));
        assert_eq!(u.get_variant(), uuid::Variant::RFC4122);
        assert_eq!(u.as_bytes(), &id.to_bytes());
        let (secs, nanos) = u.get_timestamp().unwrap().to_unix();
        let ms = secs * 1000 + u64::from(nanos) / 1_000_000;
        assert_eq!(ms, id.unix_millis());
        assert!(ms >= unix_ms(before - span, offset), "timestamp too early");
        assert_eq!(id.slot(g.layout()), 300);
        assert_eq!(id.to_string().parse::<Uuid7>().unwrap(), id);
        if let Some(p) = prev {
            assert!(u > p, "UUIDs not time-ordered");
        }
        prev = Some(u);
        // Back to the nonce and again.
        let n = id.to_nonce(g.layout());
        assert_eq!(Uuid7::from_nonce(g.layout(), n), Some(id));
    }
    assert!(
        "00000000-0000-4000-8000-000000000000"
            .parse::<Uuid7>()
            .is_err()
    );
}

/// A lease claimed for one ID format (the lease manager declares the
/// configured `id_format` on its gate, and the store refuses processes of
/// another) cannot be used by a generator of another layout or epoch: its
/// values could equal those of the pool's other processes.
#[test]
fn a_generator_of_another_layout_than_the_declared_format_is_refused() {
    let layout = Layout::default64();
    let gate = open_gate(1);
    assert!(gate.declare_form(layout.id_format().code()));
    let other_epoch = Layout::builder(64)
        .epoch_unix_ms(DEFAULT_EPOCH_UNIX_MS + 1)
        .build()
        .unwrap();
    assert_ne!(other_epoch.id_format(), layout.id_format());
    let e = Sortable64::with_layout(gate.clone(), other_epoch).unwrap_err();
    assert!(
        matches!(e, BuildError::Gate(AttachError::OtherForm { .. })),
        "{e:?}"
    );
    assert!(Sortable64::with_layout(gate, layout).is_ok());
}

#[test]
fn layout_mismatch_is_an_error_at_construction() {
    let e = Counter64::with_layout(open_gate(1), Layout::default128()).unwrap_err();
    assert!(
        matches!(e, BuildError::Layout(ref l) if l.field == "bits"),
        "{e:?}"
    );
    let t = ManualTime::new();
    t.set_wall(Duration::from_millis(DEFAULT_EPOCH_UNIX_MS - 1));
    let e = Counter64::with_time(open_gate(1), Layout::default64(), t).unwrap_err();
    assert!(
        matches!(e, BuildError::Layout(ref l) if l.field == "epoch"),
        "{e:?}"
    );
}
