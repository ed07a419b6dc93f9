//! The pure lease state machine: no I/O, no clock reads.
//!
//! It takes [`Input`]s stamped with the caller's `now` and returns [`Action`]s.
//! The driver performs them against a real strategy and clock; tests drive it
//! with a virtual clock, one test per timing rule of DESIGN.md.

use std::time::Duration;

use crate::clock::MonoTime;
use crate::config::Timing;
use crate::error::{AcquireError, Reason, StartError};
use crate::gate::Opening;
use crate::loss::{LossCause, LossEvent};
use crate::plant::{Plant, active};
use crate::rand::SplitMix;
use crate::strategy::{Floor, Grant};

/// What a local deadline counts from: the time the request was sent
/// (DESIGN.md, rule 2), or, with that rule broken on purpose, the time its
/// answer arrived.
#[inline]
fn counted_from(sent_at: MonoTime, arrived: MonoTime) -> MonoTime {
    if active(Plant::DeadlineFromArrival) {
        arrived
    } else {
        sent_at
    }
}

/// An event fed to the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Input {
    /// Begin: acquire the first lease.
    Start,
    /// An acquisition sent at `sent_at` succeeded. A cached grant confirmed by a
    /// renewal is fed as `Acquired` too.
    Acquired {
        /// The grant.
        grant: Grant,
        /// When the request was sent (the deadline counts from here).
        sent_at: MonoTime,
        /// The ceiling reported with the request: generation may not use a
        /// later timestamp under this grant until a renewal raises it.
        ceiling: Floor,
    },
    /// An acquisition failed.
    AcquireFailed(AcquireError),
    /// A renewal sent at `sent_at` was confirmed for `ttl`.
    Renewed {
        /// The TTL granted.
        ttl: Duration,
        /// When the request was sent.
        sent_at: MonoTime,
        /// The ceiling reported with the renewal.
        ceiling: Floor,
        /// The store's clock when it renewed, if it said.
        store_time: Option<Duration>,
    },
    /// The store positively rejected a renewal.
    RenewLost(Reason),
    /// A renewal's outcome is uncertain.
    RenewRetry(Reason),
    /// Time has passed; act on due timers.
    Tick,
    /// Graceful shutdown.
    Shutdown,
}

/// What the driver must do, in order.
///
/// Every call carries its bound, `until`: an answer still pending then is fed
/// back as a failure (`AcquireFailed(Unreachable)`, `RenewRetry`), and a
/// release still pending is abandoned (the lease expires by itself).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Call `Strategy::acquire` now and feed the outcome back.
    Acquire {
        /// The acquire timeout for the first lease, one TTL after a loss.
        until: MonoTime,
    },
    /// Call `Strategy::renew` for this grant now and feed the outcome back.
    Renew {
        /// The grant.
        grant: Grant,
        /// The local deadline.
        until: MonoTime,
    },
    /// Enable generation with a new grant.
    Open(Opening),
    /// Move the local deadline and the ceiling of the current grant.
    Extend {
        /// The new local deadline.
        deadline: MonoTime,
        /// The ceiling reported with the renewal.
        ceiling: Floor,
    },
    /// Disable generation. Always comes before `NotifyLost` and `Release`.
    Close,
    /// Run the loss callback.
    NotifyLost(LossEvent),
    /// Call `Strategy::release` for this grant (best effort).
    Release {
        /// The grant.
        grant: Grant,
        /// One TTL from now.
        until: MonoTime,
    },
    /// Startup failed; stop.
    Fail(StartError),
    /// The machine has stopped.
    Stop,
}

#[derive(Clone, Debug)]
enum Phase {
    Idle,
    Acquiring {
        next_at: MonoTime,
        attempt: u32,
        /// Set for the first acquisition only (the acquire timeout, moved
        /// out by a restart guard the store announced).
        give_up_at: Option<MonoTime>,
        /// When this acquisition began.
        since: MonoTime,
        last_error: Option<AcquireError>,
        in_flight: bool,
    },
    Held {
        grant: Grant,
        deadline: MonoTime,
        renew_at: MonoTime,
        attempt: u32,
        last_retry: Option<Reason>,
        in_flight: bool,
        /// The store's clock at the last confirmed operation, and when that
        /// request was sent (no earlier than the store applied it).
        store_mark: Option<(Duration, MonoTime)>,
    },
    /// A deterministic slot was lost: it is never re-acquired.
    LostForGood,
    Stopped,
}

/// The lease state machine. See the module docs.
#[derive(Clone, Debug)]
pub struct Machine {
    timing: Timing,
    deterministic: bool,
    /// The store's time resolution (see `Capabilities::time_resolution`).
    store_resolution: Duration,
    phase: Phase,
    rng: SplitMix,
}

impl Machine {
    /// A machine with `timing`; `deterministic` strategies are never re-acquired;
    /// `seed` drives the backoff jitter.
    pub fn new(timing: Timing, deterministic: bool, seed: u64) -> Self {
        Self {
            timing,
            deterministic,
            store_resolution: Duration::ZERO,
            phase: Phase::Idle,
            rng: SplitMix::new(seed),
        }
    }

    /// Sets the store's time resolution, used to tell a jump of the store's
    /// clock from rounding.
    pub fn with_store_resolution(mut self, resolution: Duration) -> Self {
        self.store_resolution = resolution;
        self
    }

    /// How far the store's clock may run ahead of the local elapsed time
    /// between two confirmed operations before the lease counts as lost: the
    /// part of the safety margin the minimum does not need. A larger forward
    /// jump would let the store expire the lease before the local deadline.
    pub fn store_jump_tolerance(&self) -> Duration {
        let min = crate::config::min_safety_margin(self.timing.ttl(), self.store_resolution);
        self.timing.safety_margin().saturating_sub(min)
    }

    /// A forward jump of the store's clock since the last confirmed operation
    /// larger than [`Machine::store_jump_tolerance`]: `store_elapsed −
    /// local_max × (1 + rate bound) − 2 × resolution`, where `local_max` is
    /// the most real time that can have passed between the two store events
    /// (from the earlier request's send to this answer's arrival).
    fn store_jumped(&self, store_now: Option<Duration>, now: MonoTime) -> Option<Duration> {
        let Phase::Held {
            store_mark: Some((store_then, sent_then)),
            ..
        } = &self.phase
        else {
            return None;
        };
        let store_elapsed = store_now?.saturating_sub(*store_then);
        let local_max = now.saturating_since(*sent_then);
        let ppm = u32::try_from(crate::config::CLOCK_RATE_BOUND_PPM).unwrap_or(u32::MAX);
        let allowed = local_max + local_max / 1_000_000 * ppm + self.store_resolution * 2;
        let jump = store_elapsed.saturating_sub(allowed);
        // (Rule 11 broken on purpose by the campaign's and the simulator's
        // planted bugs; a constant false otherwise.)
        let planted = crate::plant::active(crate::plant::Plant::NoStoreClockCheck);
        (jump > self.store_jump_tolerance() && !planted).then_some(jump)
    }

    /// The timings.
    pub fn timing(&self) -> &Timing {
        &self.timing
    }

    /// When the driver must feed [`Input::Tick`] next, if ever.
    pub fn next_wakeup(&self) -> Option<MonoTime> {
        match &self.phase {
            Phase::Acquiring {
                next_at,
                give_up_at,
                in_flight,
                ..
            } => {
                let limit = give_up_at.unwrap_or(MonoTime::MAX);
                Some(if *in_flight {
                    limit
                } else {
                    (*next_at).min(limit)
                })
                .filter(|t| *t != MonoTime::MAX)
            }
            Phase::Held {
                renew_at,
                in_flight,
                ..
            } if active(Plant::NoStopAtDeadline) => (!*in_flight).then_some(*renew_at),
            Phase::Held {
                deadline,
                renew_at,
                in_flight,
                ..
            } => Some(if *in_flight {
                *deadline
            } else {
                (*renew_at).min(*deadline)
            }),
            _ => None,
        }
    }

    /// The held grant and its local deadline, if any.
    pub fn held(&self) -> Option<(&Grant, MonoTime)> {
        match &self.phase {
            Phase::Held {
                grant, deadline, ..
            } => Some((grant, *deadline)),
            _ => None,
        }
    }

    /// True once the machine has stopped.
    pub fn is_stopped(&self) -> bool {
        matches!(self.phase, Phase::Stopped)
    }

    /// Exponential backoff with "equal jitter": half the delay is fixed, half is
    /// random, so retries spread out but never collapse to zero.
    pub fn backoff(&mut self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(30);
        let base = self
            .timing
            .backoff_initial()
            .saturating_mul(1u32 << exp)
            .min(self.timing.backoff_max());
        let half = base / 2;
        let half_nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        let jitter = if half_nanos == 0 {
            0
        } else {
            self.rng.next_u64() % (half_nanos + 1)
        };
        half + Duration::from_nanos(jitter)
    }

    fn renew_every(&self, ttl: Duration) -> Duration {
        let usable = ttl.saturating_sub(self.timing.safety_margin());
        if active(Plant::RenewAtTheDeadline) {
            return usable
                .saturating_sub(Duration::from_millis(1))
                .max(Duration::from_millis(1));
        }
        self.timing
            .renew_interval()
            .min(usable / 2)
            .max(Duration::from_millis(1))
    }

    /// Feeds one input at `now`; returns the actions to perform, in order.
    pub fn handle(&mut self, input: Input, now: MonoTime) -> Vec<Action> {
        let mut out = Vec::new();
        match input {
            Input::Start => self.on_start(now, &mut out),
            Input::Acquired {
                grant,
                sent_at,
                ceiling,
            } => self.on_acquired(grant, sent_at, ceiling, now, &mut out),
            Input::AcquireFailed(error) => self.on_acquire_failed(error, now, &mut out),
            Input::Renewed {
                ttl,
                sent_at,
                ceiling,
                store_time,
            } => self.on_renewed(ttl, sent_at, ceiling, store_time, now, &mut out),
            Input::RenewLost(reason) => {
                if matches!(self.phase, Phase::Held { .. }) {
                    self.lose(LossCause::Rejected(reason), now, &mut out);
                }
            }
            Input::RenewRetry(reason) => self.on_renew_retry(reason, now, &mut out),
            Input::Tick => self.on_tick(now, &mut out),
            Input::Shutdown => self.on_shutdown(now, &mut out),
        }
        out
    }

    /// The first acquisition, bounded by the acquire timeout.
    fn on_start(&mut self, now: MonoTime, out: &mut Vec<Action>) {
        if matches!(self.phase, Phase::Idle) {
            let give_up_at = now + self.timing.acquire_timeout();
            self.phase = Phase::Acquiring {
                next_at: now,
                attempt: 0,
                give_up_at: Some(give_up_at),
                since: now,
                last_error: None,
                in_flight: true,
            };
            out.push(Action::Acquire { until: give_up_at });
        }
    }

    /// A renewal answered: move the deadline, or lose the lease when the
    /// answer cannot be trusted to extend it.
    fn on_renewed(
        &mut self,
        ttl: Duration,
        sent_at: MonoTime,
        ceiling: Floor,
        store_time: Option<Duration>,
        now: MonoTime,
        out: &mut Vec<Action>,
    ) {
        if !matches!(
            self.phase,
            Phase::Held {
                in_flight: true,
                ..
            }
        ) {
            return;
        }
        if let Some(by) = self.store_jumped(store_time, now) {
            // Rule 11: the store's clock jumped forward; its expiry may
            // come before the local deadline.
            self.lose(LossCause::StoreClockJumped { by }, now, out);
            return;
        }
        // Rule 2: from the send time, never from the answer's arrival.
        let new_deadline = self.timing.deadline(counted_from(sent_at, now), ttl);
        if new_deadline <= now {
            self.lose(LossCause::DeadlinePassed { last_retry: None }, now, out);
            return;
        }
        let every = self.renew_every(ttl);
        if let Phase::Held {
            deadline,
            renew_at,
            attempt,
            last_retry,
            in_flight,
            store_mark,
            ..
        } = &mut self.phase
        {
            *deadline = new_deadline;
            *renew_at = sent_at + every;
            *attempt = 0;
            *last_retry = None;
            *in_flight = false;
            if let Some(t) = store_time {
                *store_mark = Some((t, sent_at));
            }
        }
        out.push(Action::Extend {
            deadline: new_deadline,
            ceiling,
        });
    }

    /// A renewal may succeed later: back off, unless the deadline has passed.
    fn on_renew_retry(&mut self, reason: Reason, now: MonoTime, out: &mut Vec<Action>) {
        let attempt = match &self.phase {
            Phase::Held { attempt, .. } => attempt + 1,
            _ => return,
        };
        let delay = self.backoff(attempt);
        if let Phase::Held {
            renew_at,
            attempt: a,
            last_retry,
            in_flight,
            deadline,
            ..
        } = &mut self.phase
        {
            *a = attempt;
            *renew_at = now + delay;
            *last_retry = Some(reason);
            *in_flight = false;
            if now >= *deadline && !active(Plant::NoStopAtDeadline) {
                let last_retry = last_retry.take();
                self.lose(LossCause::DeadlinePassed { last_retry }, now, out);
            }
        }
    }

    /// Stops for good, giving back a lease it holds.
    fn on_shutdown(&mut self, now: MonoTime, out: &mut Vec<Action>) {
        match std::mem::replace(&mut self.phase, Phase::Stopped) {
            Phase::Held { grant, .. } => {
                // Close first, then release: nothing generated after the slot is freed.
                out.push(Action::Close);
                out.push(self.release(grant, now));
            }
            Phase::Stopped => return,
            _ => {}
        }
        out.push(Action::Stop);
    }

    fn release(&self, grant: Grant, now: MonoTime) -> Action {
        Action::Release {
            grant,
            until: now + self.timing.ttl(),
        }
    }

    fn on_acquired(
        &mut self,
        grant: Grant,
        sent_at: MonoTime,
        ceiling: Floor,
        now: MonoTime,
        out: &mut Vec<Action>,
    ) {
        let Phase::Acquiring {
            in_flight: true,
            attempt,
            ..
        } = self.phase
        else {
            // Not waiting for one (stopped meanwhile): give it back.
            out.push(self.release(grant, now));
            return;
        };
        let deadline = self.timing.deadline(counted_from(sent_at, now), grant.ttl);
        if deadline <= now {
            // The answer came too late to use any of it: hand it back and try again.
            out.push(self.release(grant, now));
            self.schedule_acquire(attempt + 1, None, now);
            return;
        }
        out.push(Action::Open(
            Opening::new(grant.slot, grant.fence, deadline)
                .with_floor(grant.floor, ceiling)
                .with_max_clock_skew(self.timing.max_clock_skew()),
        ));
        let renew_at = sent_at + self.renew_every(grant.ttl);
        let store_mark = grant.store_time.map(|t| (t, sent_at));
        self.phase = Phase::Held {
            grant,
            deadline,
            renew_at,
            attempt: 0,
            last_retry: None,
            in_flight: false,
            store_mark,
        };
    }

    fn on_acquire_failed(&mut self, error: AcquireError, now: MonoTime, out: &mut Vec<Action>) {
        let Phase::Acquiring {
            attempt,
            give_up_at,
            in_flight: true,
            ..
        } = self.phase
        else {
            return;
        };
        if !error.is_retryable() && give_up_at.is_some() {
            // Rule: misconfiguration is reported at startup, not retried.
            self.phase = Phase::Stopped;
            out.push(Action::Fail(StartError::Acquire(error)));
            return;
        }
        if let AcquireError::StoreRestarted { resume_in } = error {
            // The store answered, and said when it will grant again: the
            // guard's wait is known, not a failure to reach the store, so it
            // does not count against the acquire timeout. The timeout starts
            // over from when the guard opens, and the next attempt is made
            // then instead of polling a store that has said no until then.
            let opens = now + resume_in;
            if let Phase::Acquiring { give_up_at, .. } = &mut self.phase {
                *give_up_at = give_up_at.map(|t| t.max(opens + self.timing.acquire_timeout()));
            }
            let at = opens + self.backoff(1);
            self.schedule_acquire_at(attempt + 1, Some(error), at);
            return;
        }
        self.schedule_acquire(attempt + 1, Some(error), now);
    }

    fn schedule_acquire(&mut self, attempt: u32, error: Option<AcquireError>, now: MonoTime) {
        let at = now + self.backoff(attempt);
        self.schedule_acquire_at(attempt, error, at);
    }

    fn schedule_acquire_at(&mut self, attempt: u32, error: Option<AcquireError>, at: MonoTime) {
        if let Phase::Acquiring {
            next_at,
            attempt: a,
            last_error,
            in_flight,
            ..
        } = &mut self.phase
        {
            *next_at = at;
            *a = attempt;
            if error.is_some() {
                *last_error = error;
            }
            *in_flight = false;
        }
    }

    fn on_tick(&mut self, now: MonoTime, out: &mut Vec<Action>) {
        match &mut self.phase {
            Phase::Held {
                deadline,
                renew_at,
                in_flight,
                last_retry,
                grant,
                ..
            } => {
                let planted = active(Plant::NoStopAtDeadline);
                if now >= *deadline && !planted {
                    let last_retry = last_retry.take();
                    self.lose(LossCause::DeadlinePassed { last_retry }, now, out);
                } else if !*in_flight && now >= *renew_at {
                    *in_flight = true;
                    out.push(Action::Renew {
                        grant: grant.clone(),
                        until: if planted {
                            (*deadline).max(now + self.timing.ttl())
                        } else {
                            *deadline
                        },
                    });
                }
            }
            Phase::Acquiring {
                next_at,
                give_up_at,
                since,
                last_error,
                in_flight,
                ..
            } => {
                if let Some(limit) = give_up_at.filter(|t| now >= *t) {
                    let error = StartError::Timeout {
                        waited: limit.saturating_since(*since),
                        last: last_error.take(),
                    };
                    self.phase = Phase::Stopped;
                    out.push(Action::Fail(error));
                } else if !*in_flight && now >= *next_at {
                    *in_flight = true;
                    out.push(Action::Acquire {
                        until: give_up_at.unwrap_or(now + self.timing.ttl()),
                    });
                }
            }
            _ => {}
        }
    }

    /// Rule 4: generation stops first, then the callback, then re-acquisition.
    fn lose(&mut self, cause: LossCause, now: MonoTime, out: &mut Vec<Action>) {
        let Phase::Held { grant, .. } = std::mem::replace(&mut self.phase, Phase::LostForGood)
        else {
            return;
        };
        out.push(Action::Close);
        out.push(Action::NotifyLost(LossEvent {
            slot: grant.slot,
            fence: grant.fence,
            cause,
            reacquiring: !self.deterministic,
        }));
        if !self.deterministic {
            let delay = self.backoff(1);
            self.phase = Phase::Acquiring {
                next_at: now + delay,
                attempt: 1,
                give_up_at: None,
                since: now,
                last_error: None,
                in_flight: false,
            };
        }
    }
}
