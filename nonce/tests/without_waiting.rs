//! `try_next`: generation that answers how long it would wait instead of
//! waiting on the calling thread. The refusals are `next`'s, the floor
//! (DESIGN.md rule 8) and the deadline (rule 5) hold as for `next`, and a
//! caller that tries again at once takes nothing from the state. Virtual
//! clock (`ManualTime`) throughout: nothing here sleeps.

use std::collections::HashSet;
use std::time::Duration;

use leasehold_core::testing::GateControl;
use leasehold_core::{Fence, Floor, LeaseGate, Opening};
use leasehold_nonce::*;

/// A gate opened by hand with a grant's floor and clock skew, open until
/// `for_` after the manual time's now.
fn gate_with(t: &ManualTime, floor: Floor, skew: Duration, for_: Duration) -> LeaseGate {
    let gate = LeaseGate::new();
    gate.open_with(
        Opening::new(3, Fence(1), t.mono() + for_)
            .with_floor(floor, Floor(u64::MAX))
            .with_max_clock_skew(skew),
    );
    gate
}

/// The manual wall clock, in Unix milliseconds.
fn wall_ms(t: &ManualTime) -> u64 {
    t.wall().as_millis() as u64
}

/// One generator of each kind that can wait, on its own gate made by
/// `gate`, as a `try_next` answering the value's Unix-ms timestamp.
type Try = Box<dyn Fn() -> Result<u64, TryNextError>>;

fn every_kind(t: &ManualTime, gate: impl Fn() -> LeaseGate) -> Vec<(&'static str, Try)> {
    let epoch = DEFAULT_EPOCH_UNIX_MS;
    let key = BaseKey::new(&[0x5a; 32]).unwrap();
    let c64 = Counter64::with_time(gate(), Layout::default64(), t.clone()).unwrap();
    let c128 = Counter128::with_time(gate(), Layout::default128(), t.clone()).unwrap();
    let s64 = Sortable64::with_time(gate(), Layout::default64(), t.clone()).unwrap();
    let s96 = Sortable96::with_time(gate(), Layout::default96(), t.clone()).unwrap();
    let u7 = Sortable128::with_time(gate(), Layout::default128(), t.clone()).unwrap();
    let e64 = Encrypted::new(
        Sortable64::with_time(gate(), Layout::default64(), t.clone()).unwrap(),
        &key,
    );
    vec![
        (
            "Counter64",
            Box::new(move || c64.try_next().map(|n| c64.decode(n).millis + epoch)),
        ),
        (
            "Counter128 (blocks)",
            Box::new(move || c128.try_next().map(|n| c128.decode(n).millis + epoch)),
        ),
        (
            "Sortable64",
            Box::new(move || s64.try_next().map(|n| s64.decode(n).millis + epoch)),
        ),
        (
            "Sortable96 (blocks)",
            Box::new(move || s96.try_next().map(|n| s96.decode(n).millis + epoch)),
        ),
        (
            "Uuid7",
            Box::new(move || u7.try_next_uuid7().map(|u| u.unix_millis())),
        ),
        (
            "Encrypted<Sortable64>",
            Box::new(move || e64.try_next().map(|n| e64.decode(n).millis + epoch)),
        ),
    ]
}

/// No lease, no value, and no wait either: a closed gate is refused as
/// `next` refuses it (`Closed`), for every kind.
#[test]
fn a_closed_gate_is_refused_never_a_wait() {
    let t = ManualTime::new();
    for (kind, try_next) in every_kind(&t, LeaseGate::new) {
        assert_eq!(
            try_next(),
            Err(TryNextError::Refused(GenerateError::Closed)),
            "{kind}"
        );
    }
}

/// Rule 8 without waiting: after a new lease whose floor is ahead of this
/// host's clock (by less than `max_clock_skew`), `try_next` answers how
/// long until the clock passes the floor, and hands out nothing until it
/// has; then the first value is strictly after the floor and not ahead of
/// the clock.
#[test]
fn no_value_before_the_clock_passes_the_floor() {
    let t = ManualTime::new();
    let floor = wall_ms(&t) + 300;
    let kinds = every_kind(&t, || {
        gate_with(
            &t,
            Floor(floor),
            Duration::from_secs(1),
            Duration::from_secs(3600),
        )
    });
    for (kind, try_next) in &kinds {
        match try_next() {
            Err(TryNextError::WouldWait { retry_in, why }) => {
                assert_eq!(why, WaitReason::Floor, "{kind}");
                assert!(
                    retry_in > Duration::from_millis(250) && retry_in <= Duration::from_millis(302),
                    "{kind}: {retry_in:?} for a floor 300 ms ahead"
                );
            }
            other => panic!("{kind}: {other:?} while the clock is 300 ms behind the floor"),
        }
    }
    // Still behind the floor, by a millisecond: still nothing.
    t.advance(Duration::from_millis(299));
    for (kind, try_next) in &kinds {
        let r = try_next();
        assert!(
            matches!(r, Err(TryNextError::WouldWait { .. })),
            "{kind}: {r:?} at {} ms with the floor at {floor} ms",
            wall_ms(&t)
        );
    }
    t.advance(Duration::from_millis(2));
    for (kind, try_next) in &kinds {
        let at = try_next().unwrap_or_else(|e| panic!("{kind}: {e:?} past the floor"));
        assert!(
            at > floor,
            "{kind}: a value at {at} ms, not after the floor {floor}"
        );
        assert!(
            at <= wall_ms(&t),
            "{kind}: a value at {at} ms, ahead of the clock at {} ms",
            wall_ms(&t)
        );
    }
}

/// Beyond `max_clock_skew` behind the floor it is a refusal
/// (`ClockBehind`), exactly as `next` answers, not a wait.
#[test]
fn further_behind_the_floor_than_the_skew_allows_is_refused() {
    let t = ManualTime::new();
    let floor = wall_ms(&t) + 5_000;
    for (kind, try_next) in every_kind(&t, || {
        gate_with(
            &t,
            Floor(floor),
            Duration::from_secs(1),
            Duration::from_secs(3600),
        )
    }) {
        let r = try_next();
        assert!(
            matches!(
                r,
                Err(TryNextError::Refused(GenerateError::ClockBehind { .. }))
            ),
            "{kind}: {r:?}"
        );
    }
}

/// Rule 5 without waiting: a lease whose deadline passes while its
/// holder's clock is still behind the floor gives no value once the clock
/// is past the floor, though nobody closed the gate.
#[test]
fn a_deadline_that_passes_during_the_wait_refuses_the_value() {
    let t = ManualTime::new();
    let floor = wall_ms(&t) + 300;
    let kinds = every_kind(&t, || {
        gate_with(
            &t,
            Floor(floor),
            Duration::from_secs(1),
            Duration::from_millis(100),
        )
    });
    for (kind, try_next) in &kinds {
        assert!(
            matches!(try_next(), Err(TryNextError::WouldWait { .. })),
            "{kind}"
        );
    }
    t.advance(Duration::from_millis(400));
    for (kind, try_next) in &kinds {
        assert_eq!(
            try_next(),
            Err(TryNextError::Refused(GenerateError::Closed)),
            "{kind}: past the deadline"
        );
    }
}

/// A caller that tries again at once while it would wait takes nothing
/// from the state: the wait it is told does not grow, what the gate
/// reports as issued (the floor the next holder inherits) does not move,
/// and once the clock gets there the values follow on without a gap.
#[test]
fn trying_again_at_once_takes_nothing_from_the_state() {
    let t = ManualTime::new();
    let gate = gate_with(
        &t,
        Floor::NONE,
        Duration::from_secs(1),
        Duration::from_secs(3600),
    );
    let g = Sortable64::with_time(gate.clone(), Layout::default64(), t.clone()).unwrap();
    // A new lease starts a millisecond after the one it was seen in.
    let fresh = g.try_next().unwrap_err();
    t.advance(fresh.retry_in().unwrap());
    // Use up that millisecond (2^13 values) on a frozen clock.
    let mut seen = HashSet::new();
    let first = loop {
        match g.try_next() {
            Ok(v) => assert!(seen.insert(v)),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(
            first,
            TryNextError::WouldWait {
                why: WaitReason::NextMillisecond,
                ..
            }
        ),
        "{first:?}"
    );
    let told = first.retry_in().unwrap();
    assert!(told <= Duration::from_millis(1), "{told:?}");
    assert_eq!(seen.len(), 1 << 13);
    let issued = gate.issued();
    for _ in 0..100_000 {
        let again = g.try_next().unwrap_err();
        assert!(again.retry_in().is_some_and(|r| r <= told), "{again:?}");
    }
    assert_eq!(gate.issued(), issued, "tries that waited moved the state");
    t.advance(told);
    let next = g.try_next().unwrap();
    let (before, after) = (g.decode(*seen.iter().max().unwrap()), g.decode(next));
    assert_eq!(after.millis, before.millis + 1);
    assert!(
        after.counter <= 1,
        "the next millisecond begins at {}: values were taken by the tries",
        after.counter
    );
}

/// Threads mixing `try_next` (spinning while told to wait) and `next` on
/// clones of one generator, on the real clock, never share a value and
/// never get one ahead of the clock.
#[test]
fn threads_mixing_try_next_and_next_never_share_a_value() {
    let gate = LeaseGate::new();
    gate.open(
        5,
        Fence(1),
        leasehold_core::MonoTime::now() + Duration::from_secs(3600),
    );
    let g = Sortable64::new(gate).unwrap();
    let per_thread = 40_000;
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let g = g.clone();
            std::thread::spawn(move || {
                let mut out = Vec::with_capacity(per_thread);
                while out.len() < per_thread {
                    let v = if i % 2 == 0 {
                        match g.try_next() {
                            Ok(v) => v,
                            Err(TryNextError::WouldWait { .. }) => continue,
                            Err(e) => panic!("{e}"),
                        }
                    } else {
                        g.next().unwrap()
                    };
                    let clock = leasehold_core::SystemClock::unix_millis_at(
                        leasehold_core::MonoTime::now(),
                    );
                    let at = g.decode(v).millis + DEFAULT_EPOCH_UNIX_MS;
                    assert!(at <= clock, "a value at {at} ms with the clock at {clock}");
                    out.push(v);
                }
                out
            })
        })
        .collect();
    let all: Vec<_> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let distinct: HashSet<_> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "a value was handed out twice");
}
