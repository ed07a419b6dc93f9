//! A virtual-clock run of the library's own lease state machine
//! (`leasehold_core::machine::Machine`) against its in-process store
//! (`Memory` on a `ManualClock`): the times the pictures draw are the times
//! the machine asked for, and the fences, floors and expiries are the store's.
//!
//! What the run adds is only the scenario: a one-way network delay, a link
//! that stops answering, a paused process, a host clock that is behind, a
//! store that restarts without what it had acknowledged (and the restart
//! guard a backend applies then: no grant until the pool's restart span has
//! passed since the store came back, `PoolSpec::restart_span`).

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use leasehold_core::machine::{Action, Input, Machine};
use leasehold_core::{
    AcquireError, Clock, Fence, Floor, Grant, LeaseConfig, LossCause, ManualClock, Memory,
    MonoTime, PoolSpec, Reason, Renewal, Strategy,
};

/// The one-way network delay between a holder and the store.
pub(super) const ONE_WAY: Duration = Duration::from_millis(250);

/// How long a call over a broken link takes to fail (the client's own
/// connect or read timeout), unless its bound comes first.
pub(super) const FAIL_AFTER: Duration = Duration::from_millis(600);

/// Polls a future of the in-process store, which answers without waiting.
fn ready<F: Future>(f: F) -> Result<F::Output, String> {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => Ok(v),
        Poll::Pending => Err("the in-process store did not answer at once".into()),
    }
}

/// Seconds since the run's origin, for drawing.
pub(super) fn secs(origin: MonoTime, t: MonoTime) -> f64 {
    t.saturating_since(origin).as_secs_f64()
}

/// The store: `Memory` on the run's clock, which can crash, come back empty
/// and then hold every grant back for the pool's restart span.
pub(super) struct Store {
    clock: ManualClock,
    mem: Memory,
    pool: PoolSpec,
    /// Down from the first time until the second; empty when it came back.
    down: Option<(MonoTime, MonoTime)>,
    /// When the store came back from its last restart, if it did.
    pub(super) up_since: Option<MonoTime>,
}

impl Store {
    pub(super) fn new(clock: &ManualClock, config: &LeaseConfig) -> Self {
        Self {
            clock: clock.clone(),
            mem: Memory::with_clock(clock.clone()),
            pool: config.pool().clone(),
            down: None,
            up_since: None,
        }
    }

    /// The store crashes at `at` and comes back at `up` without anything it
    /// had acknowledged (a store that can forget).
    pub(super) fn restart(&mut self, at: MonoTime, up: MonoTime) {
        self.down = Some((at, up));
        self.up_since = Some(up);
    }

    /// When the restart guard lets grants through again.
    pub(super) fn guard_until(&self) -> Option<MonoTime> {
        self.up_since.map(|up| up + self.pool.restart_span())
    }

    fn at(&mut self, t: MonoTime) -> bool {
        let now = self.clock.now();
        if t > now {
            self.clock.advance(t.saturating_since(now));
        }
        if let Some((_, up)) = self.down
            && t >= up
        {
            // It came back with nothing it had acknowledged.
            self.mem = Memory::with_clock(self.clock.clone());
            self.down = None;
        }
        self.down.is_none_or(|(from, _)| t < from)
    }

    /// When the store will expire `slot`'s lease, by its own clock.
    fn expiry(&self, slot: u32) -> Result<Option<MonoTime>, String> {
        let now = self.clock.now();
        let slots = ready(self.mem.inspect(&self.pool))?.map_err(|e| e.to_string())?;
        Ok(slots
            .iter()
            .find(|s| s.slot == slot && s.holder.is_some())
            .and_then(|s| s.expires_in)
            .map(|left| now + left))
    }

    /// The slot's floor as the store keeps it.
    fn floor(&self, slot: u32) -> Result<Floor, String> {
        let slots = ready(self.mem.inspect(&self.pool))?.map_err(|e| e.to_string())?;
        Ok(slots
            .iter()
            .find(|s| s.slot == slot)
            .map_or(Floor::NONE, |s| s.floor))
    }
}

/// What a call came to, as drawn.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Outcome {
    Granted { fence: Fence, floor: Floor },
    Renewed,
    Refused(String),
    Lost,
    Unanswered,
    Released,
}

/// Something a holder did, in its order.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Event {
    /// A call to the store: sent, applied there (if it got there), answered
    /// (or given up), and the store's expiry and floor after it.
    Call {
        kind: &'static str,
        sent: MonoTime,
        at_store: Option<MonoTime>,
        answered: MonoTime,
        outcome: Outcome,
        expiry: Option<MonoTime>,
        ceiling: Floor,
        floor_after: Option<Floor>,
    },
    /// The gate opened with a grant.
    Open {
        at: MonoTime,
        deadline: MonoTime,
        fence: Fence,
        floor: Floor,
    },
    /// A renewal moved the deadline.
    Extend { at: MonoTime, deadline: MonoTime },
    /// The gate closed; why, when the lease was lost.
    Close {
        at: MonoTime,
        cause: Option<LossCause>,
    },
}

enum Kind {
    Acquire,
    Renew(Grant),
    Release(Grant),
}

struct Call {
    kind: Kind,
    sent: MonoTime,
    until: MonoTime,
    ceiling: Floor,
    /// When the reply arrives and what it says, once the store has seen it.
    reply: Option<(MonoTime, Reply)>,
    at_store: Option<MonoTime>,
}

enum Reply {
    Acquired(Result<Grant, AcquireError>),
    Renewal(Renewal),
    Released,
    Unanswered,
}

/// One process holding (or wanting) a lease.
pub(super) struct Holder {
    machine: Machine,
    ttl: Duration,
    /// Unix ms minus the run's clock in ms: a host whose clock is behind has
    /// a smaller one.
    unix_offset_ms: i64,
    start: MonoTime,
    /// The process is frozen (GC pause, SIGSTOP) over this span.
    pub(super) pause: Option<(MonoTime, MonoTime)>,
    /// From this time on no call of this holder reaches the store.
    pub(super) cut_from: Option<MonoTime>,
    /// Shut down (close the gate, release) at this time.
    pub(super) shutdown_at: Option<MonoTime>,
    started: bool,
    stopped: bool,
    call: Option<Call>,
    opened: Option<MonoTime>,
    pub(super) log: Vec<Event>,
}

impl Holder {
    pub(super) fn new(config: &LeaseConfig, start: MonoTime, unix_offset_ms: i64) -> Self {
        Self {
            machine: Machine::new(config.timing().clone(), false, 7),
            ttl: config.timing().ttl(),
            unix_offset_ms,
            start,
            pause: None,
            cut_from: None,
            shutdown_at: None,
            started: false,
            stopped: false,
            call: None,
            opened: None,
            log: Vec::new(),
        }
    }

    /// Unix milliseconds of `t` on this host's wall clock.
    pub(super) fn unix_ms(&self, t: MonoTime) -> u64 {
        let ms = i64::try_from(t.as_nanos() / 1_000_000).unwrap_or(i64::MAX);
        u64::try_from(ms + self.unix_offset_ms).unwrap_or(0)
    }

    /// Moves `t` past a pause: a frozen process acts when it wakes.
    fn awake(&self, t: MonoTime) -> MonoTime {
        match self.pause {
            Some((from, to)) if t >= from && t < to => to,
            _ => t,
        }
    }

    /// When this holder acts next (store arrivals happen whether or not the
    /// holder is frozen: the request is already on the wire).
    fn next(&self) -> Option<MonoTime> {
        if self.stopped {
            return None;
        }
        if !self.started {
            return Some(self.start);
        }
        if let Some(call) = &self.call {
            return Some(match &call.reply {
                // The driver gives up on a call at its bound.
                None => (call.sent + ONE_WAY).min(call.until),
                Some((at, _)) => self.awake(*at),
            });
        }
        let wake = self.machine.next_wakeup();
        let t = match (wake, self.shutdown_at) {
            (Some(w), Some(s)) => w.min(s),
            (w, s) => w.or(s)?,
        };
        Some(self.awake(t))
    }

    fn step(&mut self, t: MonoTime, store: &mut Store) -> Result<(), String> {
        if !self.started {
            self.started = true;
            let actions = self.machine.handle(Input::Start, t);
            return self.perform(actions, t);
        }
        if let Some(call) = &mut self.call {
            if call.reply.is_none() {
                if t < call.sent + ONE_WAY {
                    // Its bound came before it could reach the store.
                    call.reply = Some((t, Reply::Unanswered));
                    return Ok(());
                }
                let cut = self.cut_from.is_some_and(|c| call.sent >= c);
                let reachable = store.at(t) && !cut;
                if !reachable {
                    let at = (call.sent + FAIL_AFTER).min(call.until.max(t));
                    call.reply = Some((at, Reply::Unanswered));
                    return Ok(());
                }
                call.at_store = Some(t);
                let pool = store.pool.clone();
                let reply = match &call.kind {
                    Kind::Acquire => Reply::Acquired(match store.guard_until() {
                        Some(until) if store.up_since.is_some_and(|up| t >= up) && t < until => {
                            Err(AcquireError::StoreRestarted {
                                resume_in: until.saturating_since(t),
                            })
                        }
                        _ => ready(store.mem.acquire(&pool, call.ceiling))?,
                    }),
                    Kind::Renew(g) => {
                        Reply::Renewal(ready(store.mem.renew(&pool, g, call.ceiling))?)
                    }
                    Kind::Release(g) => {
                        ready(store.mem.release(&pool, g, call.ceiling))?;
                        Reply::Released
                    }
                };
                let back = call.sent + ONE_WAY * 2;
                call.reply = Some(if back > call.until {
                    // Applied, but the answer comes after the bound: the
                    // driver has given up on it by then.
                    (call.until.max(t), Reply::Unanswered)
                } else {
                    (back, reply)
                });
                return Ok(());
            }
            return self.answer(t, store);
        }
        if self.shutdown_at.is_some_and(|s| t >= s) {
            self.shutdown_at = None;
            let actions = self.machine.handle(Input::Shutdown, t);
            return self.perform(actions, t);
        }
        let actions = self.machine.handle(Input::Tick, t);
        self.perform(actions, t)
    }

    /// Feeds the reply of the call in flight to the machine.
    fn answer(&mut self, t: MonoTime, store: &Store) -> Result<(), String> {
        let Some(call) = self.call.take() else {
            return Ok(());
        };
        let Some((_, reply)) = call.reply else {
            return Ok(());
        };
        let slot = match &call.kind {
            Kind::Renew(g) | Kind::Release(g) => Some(g.slot),
            Kind::Acquire => match &reply {
                Reply::Acquired(Ok(g)) => Some(g.slot),
                _ => None,
            },
        };
        let (input, outcome, kind) = match (call.kind, reply) {
            (Kind::Acquire, Reply::Acquired(Ok(grant))) => {
                let outcome = Outcome::Granted {
                    fence: grant.fence,
                    floor: grant.floor,
                };
                let input = Input::Acquired {
                    grant,
                    sent_at: call.sent,
                    ceiling: call.ceiling,
                };
                (Some(input), outcome, "acquire")
            }
            (Kind::Acquire, Reply::Acquired(Err(e))) => {
                let outcome = Outcome::Refused(refusal(&e));
                (Some(Input::AcquireFailed(e)), outcome, "acquire")
            }
            (Kind::Acquire, _) => (
                Some(Input::AcquireFailed(AcquireError::Unreachable(
                    Reason::new("no answer"),
                ))),
                Outcome::Unanswered,
                "acquire",
            ),
            (
                Kind::Renew(_),
                Reply::Renewal(Renewal::Renewed {
                    ttl, store_time, ..
                }),
            ) => (
                Some(Input::Renewed {
                    ttl,
                    sent_at: call.sent,
                    ceiling: call.ceiling,
                    store_time,
                }),
                Outcome::Renewed,
                "renew",
            ),
            (Kind::Renew(_), Reply::Renewal(Renewal::Lost(r))) => {
                (Some(Input::RenewLost(r)), Outcome::Lost, "renew")
            }
            (Kind::Renew(_), _) => (
                Some(Input::RenewRetry(Reason::new("no answer"))),
                Outcome::Unanswered,
                "renew",
            ),
            (Kind::Release(_), Reply::Released) => (None, Outcome::Released, "release"),
            (Kind::Release(_), _) => (None, Outcome::Unanswered, "release"),
        };
        let (expiry, floor_after) = match (slot, call.at_store) {
            (Some(s), Some(_)) => (store.expiry(s)?, Some(store.floor(s)?)),
            _ => (None, None),
        };
        self.log.push(Event::Call {
            kind,
            sent: call.sent,
            at_store: call.at_store,
            answered: t,
            outcome,
            expiry,
            ceiling: call.ceiling,
            floor_after,
        });
        match input {
            Some(input) => {
                let actions = self.machine.handle(input, t);
                self.perform(actions, t)
            }
            None => Ok(()),
        }
    }

    fn perform(&mut self, actions: Vec<Action>, t: MonoTime) -> Result<(), String> {
        for action in actions {
            match action {
                Action::Acquire { until } => self.send(Kind::Acquire, until, t),
                Action::Renew { grant, until } => self.send(Kind::Renew(grant), until, t),
                Action::Release { grant, until } => self.send(Kind::Release(grant), until, t),
                Action::Open(o) => {
                    self.opened = Some(t);
                    self.log.push(Event::Open {
                        at: t,
                        deadline: o.deadline,
                        fence: o.fence,
                        floor: o.floor,
                    });
                }
                Action::Extend { deadline, .. } => {
                    self.log.push(Event::Extend { at: t, deadline });
                }
                Action::Close => self.log.push(Event::Close { at: t, cause: None }),
                Action::NotifyLost(ev) => {
                    if let Some(Event::Close { cause, .. }) = self.log.last_mut() {
                        *cause = Some(ev.cause);
                    }
                    // The pictures end with the loss: no re-acquisition.
                    self.stopped = true;
                }
                Action::Stop => self.stopped = self.call.is_none(),
                Action::Fail(e) => return Err(format!("the lease could not start: {e}")),
                _ => {}
            }
        }
        Ok(())
    }

    fn send(&mut self, kind: Kind, until: MonoTime, t: MonoTime) {
        let ceiling = match &kind {
            // The ceiling of the deadline this request would give (the
            // driver's rule); a release reports what was issued: everything
            // up to the moment the gate closed.
            Kind::Acquire | Kind::Renew(_) => {
                Floor(self.unix_ms(self.machine.timing().deadline(t, self.ttl)))
            }
            Kind::Release(g) => Floor(self.unix_ms(t)).max(g.floor),
        };
        self.call = Some(Call {
            kind,
            sent: t,
            until,
            ceiling,
            reply: None,
            at_store: None,
        });
    }

    /// The latest deadline this holder's gate ever had.
    pub(super) fn last_deadline(&self) -> Option<MonoTime> {
        self.log.iter().rev().find_map(|e| match e {
            Event::Open { deadline, .. } | Event::Extend { deadline, .. } => Some(*deadline),
            _ => None,
        })
    }

    /// When the gate closed, and why.
    pub(super) fn closed(&self) -> Option<(MonoTime, Option<&LossCause>)> {
        self.log.iter().find_map(|e| match e {
            Event::Close { at, cause } => Some((*at, cause.as_ref())),
            _ => None,
        })
    }

    /// The first grant: when the gate opened, its fence and floor.
    pub(super) fn opened(&self) -> Option<(MonoTime, Fence, Floor, MonoTime)> {
        self.log.iter().find_map(|e| match e {
            Event::Open {
                at,
                fence,
                floor,
                deadline,
            } => Some((*at, *fence, *floor, *deadline)),
            _ => None,
        })
    }

    /// Every call, in order.
    pub(super) fn calls(&self) -> impl Iterator<Item = &Event> {
        self.log.iter().filter(|e| matches!(e, Event::Call { .. }))
    }
}

fn refusal(e: &AcquireError) -> String {
    match e {
        AcquireError::PoolExhausted { .. } => "slot held".into(),
        AcquireError::StoreRestarted { .. } => "store restarted".into(),
        other => other.to_string(),
    }
}

/// Runs every holder in time order until `end` or until all have stopped.
pub(super) fn run(
    store: &mut Store,
    holders: &mut [&mut Holder],
    end: MonoTime,
) -> Result<(), String> {
    for _ in 0..10_000 {
        let next = holders
            .iter()
            .enumerate()
            .filter_map(|(i, h)| h.next().map(|t| (t, i)))
            .min();
        let Some((t, i)) = next else {
            return Ok(());
        };
        if t > end {
            return Ok(());
        }
        holders[i].step(t, store)?;
    }
    Err("the run did not settle in 10,000 steps".into())
}

/// A fresh virtual clock and the run's origin.
pub(super) fn clock() -> (ManualClock, MonoTime) {
    let clock = ManualClock::new();
    let origin = clock.now();
    (clock, origin)
}
