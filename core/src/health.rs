//! Readiness and liveness, as a plain value any HTTP framework can turn into
//! a response: [`LeaseManager::health`](crate::LeaseManager::health) (feature
//! `tokio`) and [`LeaseGate::health`].
//!
//! **Ready** means generation would succeed now: a lease is held (the gate
//! is open on the clock now) and this host's clock has passed the grant's
//! floor. **Live** means the lease manager can still get there by itself:
//! its driver runs (it has not panicked or been shut down) and, for a fixed
//! slot, the slot was not lost for good. Kubernetes' readiness probe takes
//! [`Health::status`] (200 or 503, with [`Health::retry_after_secs`] as
//! `Retry-After`); its liveness probe takes [`Health::live_status`].

use std::fmt;
use std::time::Duration;

use crate::clock::{MonoTime, SystemClock};
use crate::events::WaitCause;
use crate::gate::{GateView, LeaseGate};
use crate::loss::LossCause;
use crate::strategy::Fence;

/// What a health probe answers (see the module docs).
///
/// ```
/// use leasehold_core::{Condition, LeaseGate};
/// let health = LeaseGate::new().health(); // no lease held
/// assert!(!health.ready && health.live);
/// assert_eq!(health.status, 503);
/// assert_eq!(health.retry_after_secs(), Some(1));
/// assert!(matches!(health.condition, Condition::NotHeld { .. }));
/// assert!(health.reason.contains("no lease held"), "{}", health.reason);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// Generation would succeed now.
    pub ready: bool,
    /// The lease manager can still become ready by itself.
    pub live: bool,
    /// The readiness answer as an HTTP status: 200 when ready, 503 when not.
    pub status: u16,
    /// When not ready but live: how long until it may be ready, as far as
    /// is known (the floor, the store's restart guard, the next attempt to
    /// acquire), at least a second. `None` when ready, or when not live.
    pub retry_after: Option<Duration>,
    /// What is the matter and what happens next, for a person.
    pub reason: String,
    /// The same, as data.
    pub condition: Condition,
}

/// Where a lease stands, as [`Health::condition`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Condition {
    /// A lease is held and generation can go on.
    Ready {
        /// The slot.
        slot: u32,
        /// Its fence.
        fence: Fence,
    },
    /// Generation waits until `until`, for `cause`: the store's restart
    /// guard (no lease held), or the floor of the lease held.
    Waiting {
        /// When it may go on (on [`MonoTime`]).
        until: MonoTime,
        /// Why it waits.
        cause: WaitCause,
    },
    /// A lease is held, but this host's wall clock stepped forward further
    /// than the process follows at once, and generation refuses until the
    /// step is corrected or has lasted
    /// [`UnixOffset::SETTLE`](crate::UnixOffset::SETTLE) (DESIGN.md, rule 10).
    ClockStepped {
        /// How far the wall clock is ahead of the time the process keeps.
        ahead: Duration,
    },
    /// No lease is held; the manager is acquiring one.
    NotHeld {
        /// Since when (`None` when not known: a gate on its own).
        since: Option<MonoTime>,
        /// The loss this began with, if it began with one.
        lost: Option<LossCause>,
    },
    /// A fixed slot was lost; it is never acquired again (not live).
    LostForGood {
        /// When.
        since: MonoTime,
        /// Why.
        cause: LossCause,
    },
    /// The lease manager's task has stopped (shut down, or it panicked), or
    /// the gate was retired: nothing will acquire a lease again (not live).
    Stopped,
}

/// The smallest `Retry-After` a 503 carries.
const MIN_RETRY: Duration = Duration::from_secs(1);

impl Health {
    /// The readiness answer as an HTTP status: 200 when ready, 503 when not.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The liveness answer as an HTTP status: 200 while live, 503 when not
    /// (restart the process).
    pub fn live_status(&self) -> u16 {
        if self.live { 200 } else { 503 }
    }

    /// [`Health::retry_after`] in whole seconds, rounded up: the value of a
    /// `Retry-After` header.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after
            .map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0))
    }

    fn new(condition: Condition, live: bool, wait: Option<Duration>, now: MonoTime) -> Self {
        let ready = matches!(condition, Condition::Ready { .. });
        let retry_after = (!ready && live).then(|| wait.unwrap_or(MIN_RETRY).max(MIN_RETRY));
        Self {
            ready,
            live,
            status: if ready { 200 } else { 503 },
            retry_after,
            reason: describe(&condition, now),
            condition,
        }
    }
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

fn describe(condition: &Condition, now: MonoTime) -> String {
    match condition {
        Condition::Ready { slot, fence } => {
            format!("ready: slot {slot} is held (fence {fence}) and generation can go on")
        }
        Condition::Waiting {
            until,
            cause: cause @ WaitCause::Floor,
        } => format!(
            "not ready: a lease is held, but {cause}; generation waits {:?} more (it refuses \
             beyond the lease's max_clock_skew: check the clock synchronisation, NTP)",
            until.saturating_since(now)
        ),
        Condition::Waiting { until, cause } => format!(
            "not ready: no lease held: {cause}, for {:?} more; the lease manager keeps asking",
            until.saturating_since(now)
        ),
        Condition::ClockStepped { ahead } => format!(
            "not ready: a lease is held, but this host's wall clock stepped {ahead:?} ahead of \
             the time this process keeps, and generation refuses until the step is corrected \
             or has lasted {:?}; check the clock synchronisation (NTP)",
            crate::UnixOffset::SETTLE
        ),
        Condition::NotHeld { since, lost } => {
            let mut s = String::from("not ready: no lease held");
            if let Some(since) = since {
                s.push_str(&format!(" for {:?}", now.saturating_since(*since)));
            }
            if let Some(cause) = lost {
                s.push_str(&format!(", since the lease was lost ({cause})"));
            }
            s.push_str(
                "; generation is refused until the lease manager acquires a slot again, which \
                 it keeps trying",
            );
            s
        }
        Condition::LostForGood { since, cause } => format!(
            "not ready and not live: the fixed slot was lost {:?} ago ({cause}) and is never \
             acquired again: restart the process",
            now.saturating_since(*since)
        ),
        Condition::Stopped => "not ready and not live: the lease manager has stopped (shut down, \
                               or its driver panicked) and will not acquire a lease again: \
                               restart the process"
            .to_owned(),
    }
}

/// What the lease manager's task knows beyond the gate, for [`assess`].
#[derive(Clone, Debug, Default)]
pub(crate) struct Track {
    /// No lease held since then (`None` while one is held).
    pub(crate) since: Option<MonoTime>,
    /// The loss the time without a lease began with.
    pub(crate) lost: Option<LossCause>,
    /// The store's restart guard holds grants back until then.
    pub(crate) guard_until: Option<MonoTime>,
    /// The next attempt to acquire.
    pub(crate) next_attempt: Option<MonoTime>,
    /// A fixed slot was lost: it is never acquired again.
    pub(crate) for_good: bool,
    /// The driver stopped.
    pub(crate) stopped: bool,
}

/// Readiness and liveness at `now`, from the gate's `view`, what the
/// driver knows (`track`, `None` for a gate on its own), whether the driver
/// runs (`alive`), the Unix offset of the lease's wall clock and a pending
/// wall-clock step. Pure: the tests drive it with a virtual clock.
pub(crate) fn assess(
    view: &GateView,
    track: Option<&Track>,
    alive: bool,
    unix_offset: u64,
    step: Option<Duration>,
    now: MonoTime,
) -> Health {
    let track = track.cloned().unwrap_or_default();
    if !alive || track.stopped {
        return Health::new(Condition::Stopped, false, None, now);
    }
    if view.is_open_at(now) {
        // Generation starts strictly after the floor, at a timestamp real
        // time has reached: ready once the clock is past the floor.
        let ready_at_unix_ns = (view.floor.0 + 1).saturating_mul(1_000_000);
        let ready_at = MonoTime::from_nanos(ready_at_unix_ns.saturating_sub(unix_offset));
        if now < ready_at {
            let condition = Condition::Waiting {
                until: ready_at,
                cause: WaitCause::Floor,
            };
            return Health::new(condition, true, Some(ready_at.saturating_since(now)), now);
        }
        if let Some(ahead) = step {
            return Health::new(Condition::ClockStepped { ahead }, true, None, now);
        }
        let condition = Condition::Ready {
            slot: view.slot,
            fence: view.fence,
        };
        return Health::new(condition, true, None, now);
    }
    if track.for_good {
        let condition = Condition::LostForGood {
            since: track.since.unwrap_or(now),
            cause: track
                .lost
                .unwrap_or(LossCause::DeadlinePassed { last_retry: None }),
        };
        return Health::new(condition, false, None, now);
    }
    if let Some(until) = track.guard_until.filter(|u| *u > now) {
        let condition = Condition::Waiting {
            until,
            cause: WaitCause::StoreRestarted,
        };
        return Health::new(condition, true, Some(until.saturating_since(now)), now);
    }
    let wait = track
        .next_attempt
        .filter(|t| *t > now)
        .map(|t| t.saturating_since(now));
    let condition = Condition::NotHeld {
        since: track.since,
        lost: track.lost,
    };
    Health::new(condition, true, wait, now)
}

impl LeaseGate {
    /// Readiness and liveness from this gate alone (see [`Health`]): ready
    /// when a lease is held and this host's clock (the process's
    /// [`SystemClock`]) has passed the grant's floor; live unless the gate
    /// was retired (its lease manager was dropped). A gate does not know
    /// since when no lease is held, nor the store's restart guard:
    /// [`LeaseManager::health`](crate::LeaseManager::health) does.
    pub fn health(&self) -> Health {
        let now = MonoTime::now();
        assess(
            &self.view(),
            None,
            !self.is_retired(),
            SystemClock::unix_offset(),
            SystemClock::wall_clock_step(),
            now,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::Opening;
    use crate::strategy::Floor;

    const OFFSET: u64 = 1_700_000_000_000_000_000;

    fn t(ms: u64) -> MonoTime {
        MonoTime::from_nanos(5_000_000_000 + ms * 1_000_000)
    }

    /// The Unix ms of `t(ms)` with `OFFSET`.
    fn unix_ms(ms: u64) -> u64 {
        (t(ms).as_nanos() + OFFSET) / 1_000_000
    }

    fn open(floor: Floor, deadline: MonoTime) -> GateView {
        let gate = LeaseGate::new();
        gate.open_with(Opening::new(2, Fence(9), deadline).with_floor(floor, Floor(u64::MAX)));
        gate.view()
    }

    /// Held and past the floor: ready, 200, no Retry-After.
    #[test]
    fn a_held_lease_past_its_floor_is_ready() {
        let view = open(Floor(unix_ms(0) - 10), t(30_000));
        let h = assess(&view, Some(&Track::default()), true, OFFSET, None, t(0));
        assert_eq!(
            (h.ready, h.live, h.status, h.retry_after),
            (true, true, 200, None)
        );
        assert_eq!(
            h.condition,
            Condition::Ready {
                slot: 2,
                fence: Fence(9)
            }
        );
    }

    /// Rule 8: held, but the clock is behind the floor: not ready until the
    /// clock passes it, and Retry-After says about when.
    #[test]
    fn behind_the_floor_it_is_not_ready_until_the_clock_passes_it() {
        let view = open(Floor(unix_ms(0) + 1_500), t(30_000));
        let h = assess(&view, None, true, OFFSET, None, t(0));
        assert!(!h.ready && h.live && h.status == 503, "{h:?}");
        assert!(matches!(
            h.condition,
            Condition::Waiting {
                cause: WaitCause::Floor,
                ..
            }
        ));
        assert_eq!(h.retry_after_secs(), Some(2), "{h:?}");
        assert!(h.reason.contains("floor"), "{}", h.reason);
        assert!(!assess(&view, None, true, OFFSET, None, t(1_500)).ready);
        assert!(assess(&view, None, true, OFFSET, None, t(1_501)).ready);
    }

    /// Rule 5: past the deadline the gate is not open, whatever it says.
    #[test]
    fn past_the_deadline_it_is_not_ready() {
        let view = open(Floor::NONE, t(1_000));
        assert!(assess(&view, None, true, OFFSET, None, t(999)).ready);
        let h = assess(&view, None, true, OFFSET, None, t(1_000));
        assert!(!h.ready && h.live, "{h:?}");
        assert!(h.reason.contains("no lease held"), "{}", h.reason);
    }

    /// Not held: since when, the loss it began with, and the store's
    /// restart guard until when; a fixed slot lost for good and a stopped
    /// driver are not live.
    #[test]
    fn without_a_lease_it_says_since_when_and_until_when() {
        let closed = LeaseGate::new().view();
        let lost = LossCause::DeadlinePassed { last_retry: None };
        let mut track = Track {
            since: Some(t(0)),
            lost: Some(lost.clone()),
            next_attempt: Some(t(2_200)),
            ..Track::default()
        };
        let h = assess(&closed, Some(&track), true, OFFSET, None, t(2_000));
        assert_eq!(
            h.condition,
            Condition::NotHeld {
                since: Some(t(0)),
                lost: Some(lost.clone())
            }
        );
        assert_eq!(h.retry_after, Some(MIN_RETRY));
        assert!(h.reason.contains("for 2s"), "{}", h.reason);
        track.guard_until = Some(t(9_000));
        let h = assess(&closed, Some(&track), true, OFFSET, None, t(2_000));
        assert_eq!(
            h.condition,
            Condition::Waiting {
                until: t(9_000),
                cause: WaitCause::StoreRestarted
            }
        );
        assert_eq!(h.retry_after_secs(), Some(7));
        // Once the guard's time has passed, back to acquiring.
        let h = assess(&closed, Some(&track), true, OFFSET, None, t(9_000));
        assert!(matches!(h.condition, Condition::NotHeld { .. }));
        track.for_good = true;
        let h = assess(&closed, Some(&track), true, OFFSET, None, t(9_000));
        assert!(
            !h.live && h.live_status() == 503 && h.retry_after.is_none(),
            "{h:?}"
        );
        let h = assess(&closed, Some(&Track::default()), false, OFFSET, None, t(0));
        assert_eq!((h.condition, h.live), (Condition::Stopped, false));
    }

    /// A pending wall-clock step makes generators refuse: not ready.
    #[test]
    fn a_pending_wall_clock_step_is_not_ready() {
        let view = open(Floor::NONE, t(30_000));
        let ahead = Duration::from_secs(3600);
        let h = assess(&view, None, true, OFFSET, Some(ahead), t(0));
        assert_eq!(h.condition, Condition::ClockStepped { ahead });
        assert!(!h.ready && h.live);
    }
}
