//! One test per timing rule of DESIGN.md, driving the pure state machine with a
//! virtual clock. No test here sleeps or reads a real clock.

use std::time::Duration;

use leasehold_core::machine::{Action, Input, Machine};
use leasehold_core::{
    AcquireError, Fence, Floor, Grant, LeaseConfig, LossCause, MonoTime, Opening, Reason,
    StartError, Timing, Token,
};

const S: Duration = Duration::from_secs(1);

fn timing() -> Timing {
    LeaseConfig::builder("p")
        .ttl(10 * S)
        .renew_interval(3 * S)
        .safety_margin(S)
        .acquire_timeout(20 * S)
        .backoff_initial(Duration::from_millis(100))
        .backoff_max(2 * S)
        .build()
        .unwrap()
        .timing()
        .clone()
}

fn grant(slot: u32) -> Grant {
    Grant::new(slot, Token::random(), Fence(u64::from(slot) + 1), 10 * S).with_floor(Floor(500))
}

/// The ceiling a driver would report for a request sent at `sent_at`.
fn ceiling(sent_at: MonoTime) -> Floor {
    Floor(sent_at.as_nanos() / 1_000_000 + 9_000)
}

fn t(secs_millis: u64) -> MonoTime {
    MonoTime::from_nanos(1_000_000_000_000 + secs_millis * 1_000_000)
}

/// A machine holding slot 3, acquired by a request sent at t(0) answered at t(0).
fn held(deterministic: bool) -> (Machine, Grant) {
    let mut m = Machine::new(timing(), deterministic, 7);
    assert_eq!(
        m.handle(Input::Start, t(0)),
        vec![Action::Acquire { until: t(20_000) }]
    );
    let g = grant(3);
    let acts = m.handle(
        Input::Acquired {
            grant: g.clone(),
            sent_at: t(0),
            ceiling: ceiling(t(0)),
        },
        t(0),
    );
    assert!(matches!(acts[..], [Action::Open(Opening { slot: 3, .. })]));
    (m, g)
}

fn first_renew(m: &mut Machine) -> MonoTime {
    let at = m.next_wakeup().unwrap();
    let acts = m.handle(Input::Tick, at);
    assert!(matches!(acts[..], [Action::Renew { .. }]), "{acts:?}");
    at
}

#[test]
fn rule2_deadline_counts_from_send_time_not_answer_time() {
    let mut m = Machine::new(timing(), false, 1);
    m.handle(Input::Start, t(0));
    // The answer takes 3 s to arrive: the lease is good for ttl − margin from t(0).
    let acts = m.handle(
        Input::Acquired {
            grant: grant(1),
            sent_at: t(0),
            ceiling: ceiling(t(0)),
        },
        t(3000),
    );
    assert_eq!(
        acts,
        vec![Action::Open(
            Opening::new(1, Fence(2), t(9000))
                .with_floor(Floor(500), ceiling(t(0)))
                .with_max_clock_skew(S)
        )]
    );
    // Renewal sent at t(4000), answered at t(6000): deadline from t(4000).
    let sent = first_renew(&mut m);
    assert_eq!(
        sent,
        t(3000),
        "first renewal one renew_interval after the send time"
    );
    let acts = m.handle(
        Input::Renewed {
            ttl: 10 * S,
            sent_at: t(4000),
            ceiling: ceiling(t(4000)),
            store_time: None,
        },
        t(6000),
    );
    assert_eq!(
        acts,
        vec![Action::Extend {
            deadline: t(13_000),
            ceiling: ceiling(t(4000)),
        }]
    );
}

#[test]
fn rule2_an_answer_arriving_after_its_own_deadline_is_not_used() {
    let mut m = Machine::new(timing(), false, 1);
    m.handle(Input::Start, t(0));
    let g = grant(1);
    let acts = m.handle(
        Input::Acquired {
            grant: g.clone(),
            sent_at: t(0),
            ceiling: ceiling(t(0)),
        },
        t(9500),
    );
    assert_eq!(
        acts,
        vec![Action::Release {
            grant: g,
            until: t(19_500)
        }],
        "too-late grant must be handed back, not opened"
    );
    assert!(m.held().is_none());
}

#[test]
fn rule3_retry_continues_until_the_deadline_then_the_lease_is_lost() {
    let (mut m, _) = held(false);
    first_renew(&mut m);
    let mut now = t(3000);
    let mut renewals = 1;
    loop {
        let acts = m.handle(Input::RenewRetry(Reason::new("timeout")), now);
        assert!(
            acts.is_empty(),
            "a Retry before the deadline must not close: {acts:?}"
        );
        let wake = m.next_wakeup().unwrap();
        assert!(wake > now);
        now = wake;
        let acts = m.handle(Input::Tick, now);
        if now >= t(9000) {
            assert_eq!(acts[0], Action::Close);
            match &acts[1] {
                Action::NotifyLost(ev) => {
                    assert_eq!(
                        ev.cause,
                        LossCause::DeadlinePassed {
                            last_retry: Some(Reason::new("timeout"))
                        }
                    );
                    assert!(ev.reacquiring);
                }
                other => panic!("expected NotifyLost, got {other:?}"),
            }
            break;
        }
        assert!(
            matches!(acts[..], [Action::Renew { until, .. }] if until == t(9000)),
            "a renewal is bounded by the local deadline: {acts:?}"
        );
        renewals += 1;
    }
    assert_eq!(now, t(9000), "loss happens exactly at the local deadline");
    assert!(
        renewals >= 4,
        "only {renewals} renewal attempts in 6 s of retries"
    );
}

#[test]
fn rule3_a_confirmed_renewal_resets_the_retry_backoff() {
    let (mut m, _) = held(false);
    first_renew(&mut m);
    m.handle(Input::RenewRetry(Reason::new("x")), t(3000));
    let retry_at = m.next_wakeup().unwrap();
    m.handle(Input::Tick, retry_at);
    let acts = m.handle(
        Input::Renewed {
            ttl: 10 * S,
            sent_at: retry_at,
            ceiling: ceiling(retry_at),
            store_time: None,
        },
        retry_at,
    );
    assert!(matches!(acts[..], [Action::Extend { .. }]));
    assert_eq!(m.next_wakeup(), Some(retry_at + 3 * S));
}

#[test]
fn rule4_generation_closes_before_the_callback_on_rejection() {
    let (mut m, g) = held(false);
    first_renew(&mut m);
    let acts = m.handle(Input::RenewLost(Reason::new("taken")), t(3100));
    assert_eq!(acts.len(), 2, "{acts:?}");
    assert_eq!(acts[0], Action::Close, "generation must stop first");
    match &acts[1] {
        Action::NotifyLost(ev) => {
            assert_eq!((ev.slot, ev.fence), (g.slot, g.fence));
            assert_eq!(ev.cause, LossCause::Rejected(Reason::new("taken")));
        }
        other => panic!("expected NotifyLost, got {other:?}"),
    }
    // Then re-acquisition starts, with backoff, each attempt bounded by one TTL.
    let wake = m.next_wakeup().unwrap();
    assert!(wake > t(3100));
    assert_eq!(
        m.handle(Input::Tick, wake),
        vec![Action::Acquire {
            until: wake + 10 * S
        }]
    );
}

#[test]
fn rule4_deterministic_strategies_are_not_reacquired() {
    let (mut m, _) = held(true);
    first_renew(&mut m);
    let acts = m.handle(Input::RenewLost(Reason::new("gone")), t(3100));
    assert_eq!(acts[0], Action::Close);
    assert!(matches!(&acts[1], Action::NotifyLost(ev) if !ev.reacquiring));
    assert_eq!(
        m.next_wakeup(),
        None,
        "nothing scheduled after a deterministic loss"
    );
    for ms in [4000, 60_000, 600_000] {
        assert!(m.handle(Input::Tick, t(ms)).is_empty());
    }
}

#[test]
fn rule5_the_deadline_tick_closes_even_with_a_renewal_in_flight() {
    let (mut m, _) = held(false);
    first_renew(&mut m);
    // The renewal never answers: the machine still wakes at the deadline.
    assert_eq!(m.next_wakeup(), Some(t(9000)));
    let acts = m.handle(Input::Tick, t(9000));
    assert_eq!(acts[0], Action::Close);
    // A late answer is ignored once the lease is gone.
    let late = m.handle(
        Input::Renewed {
            ttl: 10 * S,
            sent_at: t(3000),
            ceiling: ceiling(t(3000)),
            store_time: None,
        },
        t(9001),
    );
    assert!(late.is_empty(), "{late:?}");
}

#[test]
fn rule6_start_blocks_until_acquired_and_gives_up_at_the_acquire_timeout() {
    let mut m = Machine::new(timing(), false, 3);
    m.handle(Input::Start, t(0));
    let mut now = t(0);
    let mut attempts = 1;
    loop {
        let acts = m.handle(
            Input::AcquireFailed(AcquireError::Contention(Reason::new("busy"))),
            now,
        );
        assert!(acts.is_empty());
        now = m.next_wakeup().unwrap();
        let acts = m.handle(Input::Tick, now);
        match &acts[..] {
            [Action::Acquire { until }] => {
                assert_eq!(*until, t(20_000), "bounded by the acquire timeout");
                attempts += 1;
            }
            [Action::Fail(StartError::Timeout { waited, last })] => {
                assert_eq!(*waited, 20 * S);
                assert!(matches!(last, Some(AcquireError::Contention(_))));
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(now, t(20_000));
    assert!(attempts > 5);
}

#[test]
fn rule6_a_final_error_stops_startup_at_once() {
    let mut m = Machine::new(timing(), false, 3);
    m.handle(Input::Start, t(0));
    let err = AcquireError::MissingSchema {
        what: "table leases is missing".into(),
        fix: "call ensure_pool".into(),
    };
    let acts = m.handle(Input::AcquireFailed(err.clone()), t(5));
    assert_eq!(acts, vec![Action::Fail(StartError::Acquire(err))]);
    assert!(m.is_stopped());
}

#[test]
fn shutdown_closes_generation_then_releases() {
    let (mut m, g) = held(false);
    let acts = m.handle(Input::Shutdown, t(1000));
    assert_eq!(
        acts,
        vec![
            Action::Close,
            Action::Release {
                grant: g,
                until: t(11_000)
            },
            Action::Stop
        ],
        "the release is bounded by one TTL"
    );
    assert!(m.handle(Input::Tick, t(2000)).is_empty());
}

#[test]
fn backoff_grows_and_jitters() {
    let mut m = Machine::new(timing(), false, 42);
    let mut prev_mean = Duration::ZERO;
    for attempt in 1..=6u32 {
        let full = (Duration::from_millis(100) * 2u32.pow(attempt - 1)).min(2 * S);
        let samples: Vec<Duration> = (0..200).map(|_| m.backoff(attempt)).collect();
        for d in &samples {
            assert!(
                *d >= full / 2 && *d <= full,
                "attempt {attempt}: {d:?} outside [{:?}, {full:?}]",
                full / 2
            );
        }
        let distinct: std::collections::HashSet<_> = samples.iter().collect();
        assert!(
            distinct.len() > 100,
            "attempt {attempt}: no jitter ({} distinct)",
            distinct.len()
        );
        let mean = samples.iter().sum::<Duration>() / 200;
        if full < 2 * S {
            assert!(mean > prev_mean, "attempt {attempt}: backoff did not grow");
        }
        prev_mean = mean;
    }
}

/// Rule 8: a grant opens the gate with the store's floor and the ceiling the
/// holder reported; a renewal moves the ceiling with the deadline.
#[test]
fn rule8_floor_and_ceiling_reach_the_gate() {
    let (mut m, g) = held(false);
    assert_eq!(g.floor, Floor(500));
    let at = first_renew(&mut m);
    let acts = m.handle(
        Input::Renewed {
            ttl: 10 * S,
            sent_at: at,
            ceiling: Floor(77_000),
            store_time: None,
        },
        at,
    );
    assert_eq!(
        acts,
        vec![Action::Extend {
            deadline: at + 9 * S,
            ceiling: Floor(77_000)
        }]
    );
}

/// Rule 11: the store's clock decides expiry, so a forward jump of it ends the
/// lease early on the store's side. Between two confirmed operations the
/// store's clock may run ahead of the local one by rate and resolution
/// allowances plus the unused part of the margin; beyond, the lease is lost
/// (generation stops first).
#[test]
fn rule11_a_store_clock_jump_beyond_the_margin_is_a_loss() {
    let store_at = |ms: u64| Some(Duration::from_millis(1_000_000 + ms));
    let acquire = |m: &mut Machine| {
        m.handle(Input::Start, t(0));
        let g = grant(1).with_store_time(store_at(0).unwrap());
        m.handle(
            Input::Acquired {
                grant: g,
                sent_at: t(0),
                ceiling: ceiling(t(0)),
            },
            t(10),
        );
    };
    // Margin 1 s, minimum for a 10 s TTL 30 ms: 970 ms of tolerance.
    let mut m = Machine::new(timing(), false, 1);
    assert_eq!(m.store_jump_tolerance(), Duration::from_millis(970));
    acquire(&mut m);
    let at = first_renew(&mut m);
    // 3 s passed locally (send at 0 → answer at 3 s), the store says 3.9 s:
    // within the tolerance.
    let acts = m.handle(
        Input::Renewed {
            ttl: 10 * S,
            sent_at: at,
            ceiling: ceiling(at),
            store_time: store_at(3_900),
        },
        at,
    );
    assert!(matches!(acts[..], [Action::Extend { .. }]), "{acts:?}");
    // The next renewal: 3 s locally again, the store jumped 2 s ahead.
    let at2 = first_renew(&mut m);
    let acts = m.handle(
        Input::Renewed {
            ttl: 10 * S,
            sent_at: at2,
            ceiling: ceiling(at2),
            store_time: store_at(3_900 + 5_000),
        },
        at2,
    );
    assert_eq!(acts[0], Action::Close, "generation stops first: {acts:?}");
    match &acts[1] {
        Action::NotifyLost(ev) => {
            assert!(
                matches!(ev.cause, LossCause::StoreClockJumped { by } if by > Duration::from_millis(1_900)),
                "{ev:?}"
            );
        }
        other => panic!("expected NotifyLost, got {other:?}"),
    }
    // A store that tells no time is never judged.
    let mut m = Machine::new(timing(), false, 1);
    acquire(&mut m);
    let at = first_renew(&mut m);
    let acts = m.handle(
        Input::Renewed {
            ttl: 10 * S,
            sent_at: at,
            ceiling: ceiling(at),
            store_time: None,
        },
        at,
    );
    assert!(matches!(acts[..], [Action::Extend { .. }]), "{acts:?}");
}

/// Rule 6 beside rule 12: with the default timings the restart span (TTL plus
/// twice the clock skew, 32 s) is longer than the acquire timeout (30 s). A
/// store that says when its restart guard opens has answered: startup waits
/// the guard out and takes the lease then, instead of failing at the timeout,
/// which after every store restart would stop each process that starts inside
/// the guard (a crash loop across a fleet).
#[test]
fn rule6_startup_waits_out_a_restart_guard_longer_than_the_acquire_timeout() {
    let config = LeaseConfig::builder("p").build().unwrap();
    let span = config.pool().restart_span();
    let timing = config.timing().clone();
    assert!(
        span > timing.acquire_timeout(),
        "the case under test: the default span {span:?} outlasts the default acquire timeout"
    );
    let mut m = Machine::new(timing.clone(), false, 9);
    m.handle(Input::Start, t(0));
    // The store restarted just before: its guard opens one span from now.
    let opens = t(0) + span;
    let mut now = t(40);
    let mut attempts = 1;
    while now < opens {
        let acts = m.handle(
            Input::AcquireFailed(AcquireError::StoreRestarted {
                resume_in: opens.saturating_since(now),
            }),
            now,
        );
        assert!(acts.is_empty(), "{acts:?}");
        now = m.next_wakeup().unwrap();
        match &m.handle(Input::Tick, now)[..] {
            [Action::Acquire { until }] => {
                assert!(
                    *until >= opens + timing.acquire_timeout(),
                    "the attempt's bound counts the timeout from the guard's opening"
                );
                attempts += 1;
            }
            other => panic!("at {now:?}, before the guard opened at {opens:?}: {other:?}"),
        }
    }
    assert!(
        attempts <= 3,
        "the next attempt waits for the guard instead of polling ({attempts} attempts)"
    );
    let acts = m.handle(
        Input::Acquired {
            grant: grant(4),
            sent_at: now,
            ceiling: ceiling(now),
        },
        now,
    );
    assert!(
        matches!(acts[..], [Action::Open(Opening { slot: 4, .. })]),
        "{acts:?}"
    );
}

/// The timeout still holds for every other refusal after a guard: a store
/// that opened its guard and then only answers "unreachable" is given up on
/// one acquire timeout after the guard opened, and the error says how long
/// startup waited in all.
#[test]
fn rule6_after_a_restart_guard_the_acquire_timeout_still_ends_startup() {
    let mut m = Machine::new(timing(), false, 11);
    m.handle(Input::Start, t(0));
    let guard = 30 * S;
    m.handle(
        Input::AcquireFailed(AcquireError::StoreRestarted { resume_in: guard }),
        t(1_000),
    );
    let opens = t(1_000) + guard;
    let mut now;
    loop {
        now = m.next_wakeup().unwrap();
        match &m.handle(Input::Tick, now)[..] {
            [Action::Acquire { .. }] => {
                assert!(
                    now >= opens,
                    "an attempt before the guard opened, at {now:?}"
                );
                m.handle(
                    Input::AcquireFailed(AcquireError::Unreachable(Reason::new("down"))),
                    now,
                );
            }
            [Action::Fail(StartError::Timeout { waited, last })] => {
                assert_eq!(
                    now,
                    opens + 20 * S,
                    "one acquire timeout after the guard opened"
                );
                assert_eq!(
                    *waited,
                    51 * S,
                    "from start: 1 s, the 30 s guard, the 20 s timeout"
                );
                assert!(matches!(last, Some(AcquireError::Unreachable(_))));
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
