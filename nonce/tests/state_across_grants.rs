//! One generation state across refusals, grants and its own ceiling: refused
//! calls do not let generation resume behind them, a later grant on the same
//! gate does not re-issue values, and no value passes its grant's ceiling.

use std::collections::HashSet;
use std::time::Duration;

use leasehold_core::testing::GateControl;
use leasehold_core::{Fence, Floor, LeaseGate, Opening};
use leasehold_nonce::*;

/// A gate opened by hand with a grant's floor, ceiling and clock skew.
fn gate_with(t: &ManualTime, slot: u32, floor: Floor, skew: Duration) -> LeaseGate {
    let gate = LeaseGate::new();
    gate.open_with(
        Opening::new(slot, Fence(1), t.mono() + Duration::from_secs(3600))
            .with_floor(floor, Floor(u64::MAX))
            .with_max_clock_skew(skew),
    );
    gate
}

/// Finding 2 (robustness): every refused call still consumes a value
/// (`fetch_add` comes before the `ClockBehind` / `PastCeiling` checks), so a
/// caller that retries pushes the state further ahead of real time: 2^13
/// refusals move a 64-bit counter one millisecond. `GenerateError::ClockBehind`
/// promises "generation resumes once the clock passes the floor"; after a
/// retry loop it does not, and what the gate then reports as issued (the
/// floor the next holder of the slot inherits on release) is in the future
/// too, although nothing was handed out.
#[test]
fn refused_calls_push_the_state_ahead_so_generation_does_not_resume() {
    let t = ManualTime::new();
    let now_ms = t.wall().as_millis() as u64;
    // This host's clock is 20 ms behind the slot's floor; 10 ms are allowed.
    let floor = now_ms + 20;
    let gate = gate_with(&t, 1, Floor(floor), Duration::from_millis(10));
    let g = Counter64::with_time(gate.clone(), Layout::default64(), t.clone()).unwrap();
    // An application retrying (as the error says it may: "nothing was handed
    // out; retrying later is safe"). 400,000 retries take well under a second
    // on one core in a release build, i.e. faster than 2^13 per ms.
    for _ in 0..400_000 {
        assert!(matches!(g.next(), Err(GenerateError::ClockBehind { .. })));
    }
    // The clock catches up and passes the floor by 5 ms.
    t.advance(Duration::from_millis(25));
    t.auto_advance(Duration::from_micros(10));
    assert!(
        t.wall().as_millis() as u64 > floor,
        "the clock is past the floor now"
    );
    let after = g.next();
    gate.close();
    let issued = gate.issued().unwrap();
    assert!(
        after.is_ok(),
        "the clock passed the floor by 5 ms, yet: {after:?}; the gate reports {} ms issued, \
         {} ms past the floor, with nothing handed out",
        issued.0,
        issued.0.saturating_sub(floor)
    );
}

/// Finding 3 (duplicate ID possible on a layout change): the history a gate
/// hands from one generation state to the next (and the floor a store hands
/// from one holder to the next) is a Unix time, but whether two values are
/// equal depends on the layout. A generator on the same gate and slot with a
/// later layout epoch starts "strictly after" the history in time, yet its
/// timestamp *field* lags by the epoch difference and re-mints the previous
/// state's values. The same holds between holders of a slot in a store.
#[test]
fn a_later_epoch_on_the_same_gate_reissues_values() {
    let t = ManualTime::new();
    t.auto_advance(Duration::from_micros(10));
    let gate = gate_with(&t, 7, Floor::NONE, Duration::from_secs(1));
    let a = Counter64::with_time(gate.clone(), Layout::default64(), t.clone()).unwrap();
    let mut seen = HashSet::new();
    for _ in 0..8192 * 5 {
        assert!(seen.insert(a.next().unwrap()));
    }
    drop(a);
    // Same width, same slot, same gate; the epoch is 3 ms later (any later
    // epoch does it: the last `d` ms of the old values come back).
    let layout = Layout::builder(64)
        .timestamp_bits(42)
        .slot_bits(9)
        .counter_bits(13)
        .epoch_unix_ms(DEFAULT_EPOCH_UNIX_MS + 3)
        .build()
        .unwrap();
    // The gate refuses the other layout (before the fix it was built and
    // minted 16,384 values twice).
    match Counter64::with_time(gate.clone(), layout, t.clone()) {
        Err(BuildError::Gate(e)) => assert!(e.to_string().contains("layout"), "{e}"),
        Ok(b) => {
            let mut dups = 0;
            for _ in 0..8192 * 5 {
                dups += usize::from(!seen.insert(b.next().unwrap()));
            }
            assert_eq!(dups, 0, "{dups} values minted twice on one gate");
        }
        Err(e) => panic!("{e}"),
    }
    // The same layout again is fine, and starts after everything issued.
    let c = Counter64::with_time(gate.clone(), Layout::default64(), t.clone()).unwrap();
    for _ in 0..8192 * 2 {
        assert!(seen.insert(c.next().unwrap()));
    }
}

/// Finding 1 again, without hooks (the deterministic version is the unit test
/// `engine::tests::a_value_is_checked_against_the_next_grants_ceiling`):
/// real threads, real clock. Grant "odd" holds slot 1 with a ceiling already
/// in the past (as after a forward wall-clock step, or a granted TTL longer
/// than the one the ceiling was computed for), so no slot-1 value may ever be
/// handed out; grant "even" holds slot 2 with no ceiling. A thread switches
/// between them the way a driver does after a loss. Any slot-1 value is a
/// value past what the store recorded for slot 1: the next holder of slot 1
/// starts right after that and can mint it again. Needs the generator thread
/// to be preempted between its re-check and its ceiling load while the gate
/// changes hands, which a loaded machine does within seconds.
#[test]
fn stress_no_value_passes_its_own_grants_ceiling() {
    use leasehold_core::MonoTime;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    let gate = LeaseGate::new();
    let stop = Arc::new(AtomicBool::new(false));
    let bad = Arc::new(AtomicU64::new(0));
    let g = Counter128::with_time(gate.clone(), Layout::default128(), PreciseClock).unwrap();
    let unix_now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    let open = |slot: u32, ceiling: u64| {
        gate.open_with(
            Opening::new(slot, Fence(1), MonoTime::now() + Duration::from_secs(3600))
                .with_floor(Floor::NONE, Floor(ceiling)),
        )
    };
    open(2, u64::MAX);
    let generators: Vec<_> = (0..2)
        .map(|_| {
            let (g, stop, bad) = (g.clone(), stop.clone(), bad.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(v) = g.next()
                        && g.decode(v).slot == 1
                    {
                        bad.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    let started = std::time::Instant::now();
    let mut flips = 0u64;
    while started.elapsed() < Duration::from_secs(5) && bad.load(Ordering::SeqCst) == 0 {
        open(1, unix_now() - 10_000);
        std::thread::sleep(Duration::from_millis(3));
        open(2, u64::MAX);
        std::thread::sleep(Duration::from_micros(200));
        flips += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for h in generators {
        h.join().unwrap();
    }
    let bad = bad.load(Ordering::SeqCst);
    assert_eq!(
        bad,
        0,
        "{bad} slot-1 values handed out past slot 1's ceiling (after {flips} hand-overs, {:?})",
        started.elapsed()
    );
}
