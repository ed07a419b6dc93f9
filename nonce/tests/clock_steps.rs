//! Steps of the wall clock on a holder (DESIGN.md, rules 8 and 10): a
//! forward step is not stamped into values until it has settled, so one
//! corrected a minute later leaves no trace in the slot's floor; and across
//! a step, its correction, and a step that settles, no value repeats and no
//! timestamp goes backwards.

use std::time::Duration;

use leasehold_core::testing::GateControl;
use leasehold_core::{DEFAULT_MAX_CLOCK_SKEW, Fence, Floor, LeaseGate, Opening};
use leasehold_nonce::*;

const HOUR: Duration = Duration::from_secs(3600);

/// A gate opened by hand for two hours, with the grant's floor.
fn gate(t: &ManualTime, slot: u32, floor: Floor) -> LeaseGate {
    let gate = LeaseGate::new();
    gate.open_with(
        Opening::new(slot, Fence(1), t.mono() + 2 * HOUR).with_floor(floor, Floor(u64::MAX)),
    );
    gate
}

/// The true Unix time (ms) of a virtual clock whose wall clock was right at
/// `(mono0, wall0)`: what its wall clock would say without the steps.
fn true_ms(t: &ManualTime, mono0: leasehold_core::MonoTime, wall0: Duration) -> u64 {
    (wall0 + t.mono().saturating_since(mono0)).as_millis() as u64
}

/// A holder's wall clock steps an hour forward and is put right a minute
/// later. The holder must not stamp that hour into its values: what it
/// reports as issued becomes the slot's floor, and a floor an hour ahead of
/// every clock makes the next holder of the slot refuse (`ClockBehind`) for
/// an hour.
#[test]
fn a_forward_step_corrected_a_minute_later_does_not_hold_back_the_next_holder() {
    let ta = ManualTime::new();
    ta.auto_advance(Duration::from_micros(10));
    let (mono0, wall0) = (ta.mono(), ta.wall());
    let gate_a = gate(&ta, 3, Floor::NONE);
    let a = Sortable64::with_time(gate_a.clone(), Layout::default64(), ta.clone()).unwrap();
    let skew = DEFAULT_MAX_CLOCK_SKEW.as_millis() as u64;
    let mut a_max = 0;
    let mut take = |a: &Sortable64<ManualTime>, ta: &ManualTime| {
        if let Ok(v) = a.next() {
            let unix = a.decode(v).millis + DEFAULT_EPOCH_UNIX_MS;
            let real = true_ms(ta, mono0, wall0);
            assert!(
                unix <= real + skew,
                "stamped {} ms ahead of the true time",
                unix - real
            );
            a_max = a_max.max(unix);
        }
    };
    for _ in 0..100 {
        ta.advance(Duration::from_millis(10));
        take(&a, &ta);
    }
    ta.set_wall(ta.wall() + HOUR);
    for _ in 0..600 {
        ta.advance(Duration::from_millis(100));
        take(&a, &ta);
    }
    ta.set_wall(ta.wall() - HOUR);
    for _ in 0..300 {
        ta.advance(Duration::from_millis(10));
        take(&a, &ta);
    }
    assert!(
        a.next().is_ok(),
        "the holder did not resume after the correction"
    );
    gate_a.close();
    let floor = gate_a.issued().unwrap();
    assert!(floor.0 >= a_max);

    // The next holder of slot 3, whose clock is right.
    let tb = ManualTime::new();
    tb.set_wall(ta.wall());
    tb.auto_advance(Duration::from_micros(10));
    let b = Sortable64::with_time(gate(&tb, 3, floor), Layout::default64(), tb.clone()).unwrap();
    match b.next() {
        Ok(v) => assert!(b.decode(v).millis + DEFAULT_EPOCH_UNIX_MS > floor.0),
        Err(e) => panic!("the next holder of the slot cannot generate: {e}"),
    }
}

/// One value: the plain value and its timestamp (Unix ms).
type Next = Box<dyn Fn() -> Result<(u128, u64), GenerateError>>;

/// A kind of generator: its name, a constructor, and whether its timestamps
/// follow the clock (counters count on from the lease's start instead).
type Kind = (&'static str, fn(&ManualTime) -> Next, bool);

fn sortable64(t: &ManualTime) -> Next {
    let g = Sortable64::with_time(gate(t, 1, Floor::NONE), Layout::default64(), t.clone()).unwrap();
    Box::new(move || {
        g.next()
            .map(|v| (u128::from(v.0), g.decode(v).millis + DEFAULT_EPOCH_UNIX_MS))
    })
}

fn counter64(t: &ManualTime) -> Next {
    let g = Counter64::with_time(gate(t, 1, Floor::NONE), Layout::default64(), t.clone()).unwrap();
    Box::new(move || {
        g.next()
            .map(|v| (u128::from(v.0), g.decode(v).millis + DEFAULT_EPOCH_UNIX_MS))
    })
}

fn sortable128(t: &ManualTime) -> Next {
    let g =
        Sortable128::with_time(gate(t, 1, Floor::NONE), Layout::default128(), t.clone()).unwrap();
    Box::new(move || {
        g.next()
            .map(|v| (u128::from(v), g.decode(v).millis + DEFAULT_EPOCH_UNIX_MS))
    })
}

fn counter128(t: &ManualTime) -> Next {
    let g =
        Counter128::with_time(gate(t, 1, Floor::NONE), Layout::default128(), t.clone()).unwrap();
    Box::new(move || {
        g.next()
            .map(|v| (u128::from(v), g.decode(v).millis + DEFAULT_EPOCH_UNIX_MS))
    })
}

/// For every kind of generator (the 64-bit one-value path and the 128-bit
/// per-thread blocks): across a forward step of an hour, its correction a
/// minute later, a second step that lasts until it is followed, and that
/// step's correction, every value handed out is larger than the one before
/// (so none repeats) and no timestamp goes backwards. While a step is not
/// followed, generation refuses with `ClockStepped`; after a followed step
/// is corrected, generation goes on (ahead of the wall clock) instead of
/// stopping for an hour.
#[test]
fn no_timestamp_repeats_or_goes_backwards_across_steps_and_corrections() {
    let kinds: [Kind; 4] = [
        ("Sortable64", sortable64, true),
        ("Counter64", counter64, false),
        ("Sortable128", sortable128, true),
        ("Counter128", counter128, false),
    ];
    for (kind, make, sortable) in kinds {
        let t = ManualTime::new();
        t.auto_advance(Duration::from_micros(10));
        let next = make(&t);
        // The last value handed out and its timestamp.
        let last = std::cell::Cell::new((0u128, 0u64));
        let run = |t: &ManualTime, n: u32, every: Duration| -> (u32, u32) {
            let (mut ok, mut stepped) = (0, 0);
            for _ in 0..n {
                t.advance(every);
                match next() {
                    Ok((v, ms)) => {
                        let (before, before_ms) = last.get();
                        assert!(v > before, "{kind}: {v:#x} after {before:#x}");
                        assert!(ms >= before_ms, "{kind}: timestamp {ms} after {before_ms}");
                        last.set((v, ms));
                        ok += 1;
                    }
                    Err(GenerateError::ClockStepped { ahead, settle }) => {
                        assert!(ahead >= HOUR - Duration::from_secs(1), "{kind}: {ahead:?}");
                        assert_eq!(settle, leasehold_core::UnixOffset::SETTLE);
                        stepped += 1;
                    }
                    Err(e) => panic!("{kind}: {e}"),
                }
            }
            (ok, stepped)
        };
        assert_eq!(run(&t, 100, Duration::from_millis(10)), (100, 0), "{kind}");
        // An hour forward, corrected a minute later: refused within a
        // second (the offset is re-read once a second), until corrected.
        t.set_wall(t.wall() + HOUR);
        let (ok, stepped) = run(&t, 600, Duration::from_millis(100));
        assert!(
            ok <= 10 && stepped >= 590,
            "{kind}: {ok} handed out, {stepped} refused"
        );
        t.set_wall(t.wall() - HOUR);
        let (ok, _) = run(&t, 300, Duration::from_millis(10));
        assert!(ok >= 200, "{kind}: only {ok} after the correction");
        let wall = t.wall().as_millis() as u64;
        assert!(last.get().1 <= wall, "{kind}: the step was stamped");
        // An hour forward again, lasting: followed once it has settled.
        t.set_wall(t.wall() + HOUR);
        let steps = (leasehold_core::UnixOffset::SETTLE.as_millis() / 100) as u32 + 30;
        let (ok, stepped) = run(&t, steps, Duration::from_millis(100));
        assert!(
            ok >= 10 && stepped >= steps - 40,
            "{kind}: {ok} handed out, {stepped} refused"
        );
        let stepped_ms = t.wall().as_millis() as u64;
        if sortable {
            assert!(
                last.get().1 + 5_000 >= stepped_ms,
                "{kind}: the settled step was not followed"
            );
        }
        // Corrected after it was followed: timestamps stay ahead, never back.
        t.set_wall(t.wall() - HOUR);
        let (ok, stepped) = run(&t, 300, Duration::from_millis(10));
        assert_eq!((ok, stepped), (300, 0), "{kind}");
        if sortable {
            assert!(last.get().1 > stepped_ms, "{kind}");
        }
    }
}
