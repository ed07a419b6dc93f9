//! The ways a value could be minted twice, one test each (DESIGN.md, timing
//! rules 8 and 9): several generators on one lease, a successor whose clock
//! is behind, a forward clock step, a value racing the release, a coarse
//! clock that stalls near the deadline.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use leasehold_core::testing::GateControl;
use leasehold_core::{
    AttachError, Fence, Floor, LeaseConfig, LeaseGate, LeaseManager, Memory, MonoTime, Opening,
};
use leasehold_nonce::*;

fn open_gate(slot: u32) -> LeaseGate {
    let gate = LeaseGate::new();
    gate.open(slot, Fence(1), MonoTime::now() + Duration::from_secs(600));
    gate
}

/// A boxed `next` returning the plain value.
type Next = Box<dyn Fn() -> u128 + Send + Sync>;

fn counter<W: Width>(gate: &LeaseGate) -> Result<(Next, Next), BuildError>
where
    u128: From<W::Nonce>,
{
    let g = Counter::<W>::new(gate.clone())?;
    let c = g.clone();
    Ok((
        Box::new(move || u128::from(g.next().unwrap())),
        Box::new(move || u128::from(c.next().unwrap())),
    ))
}

fn sortable<W: Width>(gate: &LeaseGate) -> Result<(Next, Next), BuildError>
where
    u128: From<W::Nonce>,
{
    let g = Sortable::<W>::new(gate.clone())?;
    let c = g.clone();
    Ok((
        Box::new(move || u128::from(g.next().unwrap())),
        Box::new(move || u128::from(c.next().unwrap())),
    ))
}

type Make = fn(&LeaseGate) -> Result<(Next, Next), BuildError>;

/// Any number of generators built from one gate (same or
/// different kind, same width) never produce the same value. A second
/// generator is refused with an error that says to clone the first (same
/// kind) or to take another lease (another kind); whoever follows that
/// advice gets distinct values. (On the code before the fix, the
/// second was built and 200,000 interleaved calls each gave 191,808
/// duplicates.)
#[test]
fn generators_on_one_gate_never_share_a_value() {
    let makers: [(&str, Make, Make); 6] = [
        ("64", counter::<W64>, sortable::<W64>),
        ("96", counter::<W96>, sortable::<W96>),
        ("128", counter::<W128>, sortable::<W128>),
        ("64", sortable::<W64>, counter::<W64>),
        ("64", counter::<W64>, counter::<W64>),
        ("128", sortable::<W128>, sortable::<W128>),
    ];
    for (width, first, second) in makers {
        let gate = open_gate(5);
        let (a, clone_of_a) = first(&gate).unwrap();
        let b = match second(&gate) {
            Ok((b, _)) => b,
            Err(BuildError::Gate(e @ AttachError::InUse { .. })) => {
                assert!(e.to_string().contains("clone"), "{e}");
                clone_of_a
            }
            // Another kind is sent to a lease of its own: on this one, only
            // the first generator's values are made.
            Err(BuildError::Gate(e @ AttachError::OtherKind { .. })) => {
                assert!(e.to_string().contains("lease of its own"), "{e}");
                clone_of_a
            }
            Err(e) => panic!("{e}"),
        };
        let mut seen = HashSet::new();
        let mut dups = 0;
        for _ in 0..200_000 {
            dups += usize::from(!seen.insert(a()));
            dups += usize::from(!seen.insert(b()));
        }
        assert_eq!(dups, 0, "{width}-bit: {dups} duplicates among 400,000");
    }
}

#[test]
fn a_second_generator_is_refused_while_the_first_lives() {
    let gate = open_gate(1);
    let first = Counter64::new(gate.clone()).unwrap();
    let e = Counter64::new(gate.clone()).unwrap_err();
    assert!(matches!(
        e,
        BuildError::Gate(AttachError::InUse {
            existing: "Counter64"
        })
    ));
    let msg = e.to_string();
    assert!(msg.contains("Counter64") && msg.contains("clone"), "{msg}");
    // Clones are the way: they share the state.
    let clone = first.clone();
    assert_ne!(first.next().unwrap(), clone.next().unwrap());
    // Wrapped in encryption it is still the same state.
    let key = BaseKey::new(&[7; 32]).unwrap();
    let enc = Encrypted::new(first.clone(), &key);
    let plain = enc.decrypt(enc.next().unwrap());
    assert!(first.next().unwrap() > plain);
}

/// A clone of a counter generator cannot make sortable IDs, so the refusal of
/// a generator of another kind says what can: a lease of its own.
#[test]
fn a_generator_of_another_kind_is_told_to_take_its_own_lease() {
    let gate = open_gate(1);
    let _first = Sortable64::new(gate.clone()).unwrap();
    let e = Counter64::new(gate.clone()).unwrap_err();
    assert!(
        matches!(
            e,
            BuildError::Gate(AttachError::OtherKind {
                existing: "Sortable64",
                requested: "Counter64"
            })
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("Sortable64")
            && msg.contains("Counter64")
            && msg.contains("lease of its own")
            && msg.contains("second lease manager")
            && !msg.contains("clone"),
        "{msg}"
    );
    // Another lease takes it.
    assert!(Counter64::new(open_gate(2)).is_ok());
}

/// A generator that went away hands its history to the next one on the gate.
#[test]
fn a_dropped_generator_hands_its_history_to_the_next() {
    let gate = open_gate(2);
    let g = Sortable64::new(gate.clone()).unwrap();
    let mut last = 0;
    for _ in 0..50_000 {
        last = g.decode(g.next().unwrap()).millis;
    }
    drop(g);
    let c = Counter64::new(gate.clone()).unwrap();
    let first = c.decode(c.next().unwrap()).millis;
    assert!(first > last, "{first} after {last}");
}

/// A gate opened by hand with a grant's floor and ceiling.
fn gate_with(t: &ManualTime, slot: u32, floor: Floor, ceiling: Floor) -> LeaseGate {
    let gate = LeaseGate::new();
    gate.open_with(
        Opening::new(slot, Fence(1), t.mono() + Duration::from_secs(3600))
            .with_floor(floor, ceiling),
    );
    gate
}

/// A successor whose clock is behind the previous holder's
/// starts strictly after the floor the previous holder left (waiting for its
/// clock, within max_clock_skew), never at its own clock. Without the floor
/// its first 5 ms of values would repeat the previous holder's.
#[test]
fn a_successor_with_a_slow_clock_starts_after_the_floor() {
    let ta = ManualTime::new();
    ta.auto_advance(Duration::from_micros(20));
    let gate_a = gate_with(&ta, 3, Floor::NONE, Floor(u64::MAX));
    let a = Sortable64::with_time(gate_a.clone(), Layout::default64(), ta.clone()).unwrap();
    let mut values = HashSet::new();
    for _ in 0..20_000 {
        assert!(values.insert(a.next().unwrap()));
    }
    let a_max = values.iter().map(|v| a.decode(*v).millis).max().unwrap();
    gate_a.close();
    let floor = gate_a.issued().unwrap();
    assert!(
        floor.0 >= a_max + DEFAULT_EPOCH_UNIX_MS,
        "{floor:?} below {a_max}"
    );

    // The successor's wall clock is 5 ms behind A's.
    let tb = ManualTime::new();
    tb.set_wall(ta.wall() - Duration::from_millis(5));
    tb.auto_advance(Duration::from_micros(20));
    let gate_b = gate_with(&tb, 3, floor, Floor(u64::MAX));
    let b = Sortable64::with_time(gate_b, Layout::default64(), tb.clone()).unwrap();
    for _ in 0..20_000 {
        let v = b.next().unwrap();
        assert!(b.decode(v).millis > a_max, "a value at or below the floor");
        assert!(values.insert(v), "duplicate {v}");
    }
}

/// Past max_clock_skew behind the floor, generation refuses with an error
/// that names the skew, and resumes once the clock passes the floor.
#[test]
fn a_clock_too_far_behind_the_floor_is_refused() {
    let t = ManualTime::new();
    let now_ms = t.wall().as_millis() as u64;
    let gate = gate_with(&t, 1, Floor(now_ms + 3_000), Floor(u64::MAX));
    let g = Counter128::with_time(gate, Layout::default128(), t.clone()).unwrap();
    match g.next() {
        Err(e @ GenerateError::ClockBehind { behind, .. }) => {
            assert!(behind >= Duration::from_millis(2_900), "{behind:?}");
            let msg = e.to_string();
            assert!(
                msg.contains("behind") && msg.contains("max_clock_skew"),
                "{msg}"
            );
        }
        other => panic!("expected ClockBehind, got {other:?}"),
    }
    t.advance(Duration::from_millis(3_100));
    let v = g.next().unwrap();
    assert!(g.decode(v).millis + DEFAULT_EPOCH_UNIX_MS > now_ms + 3_000);
}

/// No value carries a timestamp past the ceiling the holder recorded in the
/// store; after a forward clock step, generation waits for a renewal.
#[test]
fn the_ceiling_stops_generation_after_a_forward_clock_step() {
    let t = ManualTime::new();
    let now_ms = t.wall().as_millis() as u64;
    let gate = gate_with(&t, 1, Floor::NONE, Floor(now_ms + 1_300));
    let g = Sortable64::with_time(gate.clone(), Layout::default64(), t.clone()).unwrap();
    t.auto_advance(Duration::from_micros(50));
    assert!(g.next().is_ok());
    // The wall clock steps 900 ms forward (within the step the offset
    // follows at once); the offset is re-read within a second. Real time is
    // still before the ceiling, the stepped clock past it.
    t.set_wall(t.wall() + Duration::from_millis(900));
    t.advance(Duration::from_millis(1_100));
    match g.next() {
        Err(e @ GenerateError::PastCeiling { .. }) => {
            assert!(e.to_string().contains("renewal"), "{e}");
        }
        other => panic!("expected PastCeiling, got {other:?}"),
    }
    // A renewal records a later ceiling.
    gate.extend(
        t.mono() + Duration::from_secs(3600),
        Floor(now_ms + 120_000),
    );
    let v = g.next().unwrap();
    assert!(g.decode(v).millis + DEFAULT_EPOCH_UNIX_MS <= now_ms + 120_000);
}

/// Once the gate is closed, what the gate reports as issued covers every
/// value any thread was handed, including values racing the close.
#[test]
fn issued_after_close_covers_every_value_handed_out() {
    for round in 0..40u32 {
        let gate = open_gate(6);
        let g = Sortable64::new(gate.clone()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let max_seen = Arc::new(AtomicU64::new(0));
        let handles: Vec<_> = (0..3)
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
        std::thread::sleep(Duration::from_micros(200 + u64::from(round) * 97));
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

/// A coarse clock whose ticks stalled: `now()` lags the true time by `lag`,
/// `precise()` is right.
#[derive(Clone)]
struct Stalled {
    time: ManualTime,
    lag: Duration,
}

impl TimeSource for Stalled {
    fn now(&self) -> Reading {
        Reading::exact(self.time.mono() - self.lag)
    }
    fn precise(&self) -> MonoTime {
        self.time.precise()
    }
    fn unix_offset(&self, fresh: bool) -> u64 {
        self.time.unix_offset(fresh)
    }
    fn wall_clock_step(&self) -> Option<Duration> {
        self.time.wall_clock_step()
    }
    fn guard(&self) -> Duration {
        Duration::from_millis(50)
    }
}

/// Near the deadline a coarse reading is not trusted; the
/// deadline is checked with the precise clock.
#[test]
fn a_stalled_coarse_clock_is_not_trusted_near_the_deadline() {
    let time = ManualTime::new();
    let gate = LeaseGate::new();
    let deadline = time.mono() + Duration::from_millis(100);
    gate.open(1, Fence(1), deadline);
    let clock = Stalled {
        time: time.clone(),
        lag: Duration::from_millis(30),
    };
    let g = Counter128::with_time(gate, Layout::default128(), clock).unwrap();
    time.auto_advance(Duration::from_micros(10));
    assert!(g.next().is_ok());
    // 10 ms past the deadline, the stalled clock still reads 20 ms before it.
    time.advance(Duration::from_millis(110));
    assert_eq!(g.next(), Err(GenerateError::Closed));
}

/// The same on a lease manager: a release hands the slot over at once, and a
/// successor whose clock is 50 ms behind still starts after every value the
/// first holder issued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_hands_the_floor_to_a_successor_with_a_slow_clock() {
    #[derive(Clone)]
    struct Behind(Duration);
    impl TimeSource for Behind {
        fn now(&self) -> Reading {
            PreciseClock.now()
        }
        fn precise(&self) -> MonoTime {
            MonoTime::now()
        }
        fn unix_offset(&self, fresh: bool) -> u64 {
            PreciseClock.unix_offset(fresh) - self.0.as_nanos() as u64
        }
    }
    let store = Memory::new();
    let config = || {
        LeaseConfig::builder("handover")
            .pool_size(1)
            .ttl(Duration::from_secs(10))
            .build()
            .unwrap()
    };
    let first = LeaseManager::start(store.clone(), config()).await.unwrap();
    let a = Sortable64::with_time(first.gate(), Layout::default64(), PreciseClock).unwrap();
    let mut values = HashSet::new();
    let until = MonoTime::now() + Duration::from_millis(30);
    while MonoTime::now() < until {
        assert!(values.insert(a.next().unwrap()));
    }
    let a_max = values.iter().map(|v| a.decode(*v).millis).max().unwrap();
    first.shutdown().await;

    let second = LeaseManager::start(store.clone(), config()).await.unwrap();
    assert!(second.gate().view().floor.0 >= a_max + DEFAULT_EPOCH_UNIX_MS);
    let b = Sortable64::with_time(
        second.gate(),
        Layout::default64(),
        Behind(Duration::from_millis(50)),
    )
    .unwrap();
    let b = tokio::task::spawn_blocking(move || {
        for _ in 0..20_000 {
            assert!(values.insert(b.next().unwrap()), "duplicate");
        }
        b
    })
    .await
    .unwrap();
    drop(b);
    second.shutdown().await;
}
