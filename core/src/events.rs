//! What happens to a lease, as one event type: delivered to the callbacks
//! of [`LeaseConfigBuilder`](crate::LeaseConfigBuilder) and, with the
//! `tokio` feature, to every subscriber of
//! [`LeaseManager::events`](crate::LeaseManager::events) and
//! [`Elector::events`](crate::Elector::events).
//!
//! **Order.** Events come in the order things happened, from the lease
//! driver's task. On a loss the gate closes **first** (DESIGN.md, rule 4):
//! by the time any callback runs or any subscriber can receive
//! [`LeaseEvent::Lost`], generation has stopped. [`LeaseEvent::Acquired`]
//! is sent once the gate is open with the new grant.
//!
//! **Delivery.** Callbacks run on the lease manager's task, one after the other,
//! before the event is sent to subscribers; keep them short (a callback
//! that blocks delays the lease manager's next renewal). A callback that panics is
//! caught and logged (feature `tracing`); the lease manager goes on. Subscribers
//! get the events through a bounded channel
//! ([`SUBSCRIPTION_CAPACITY`] events) that never makes the lease manager wait: a
//! subscriber that falls further behind loses the **oldest** events it has
//! not read, and its next `recv` answers
//! `tokio::sync::broadcast::error::RecvError::Lagged(n)` with how many it
//! lost, then goes on with the oldest it still has. The first subscription
//! of a manager (or elector) sees the events from the first attempt to
//! acquire on, those of `start` included; a later one from its creation
//! on. Callbacks see every event from the first attempt on.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::MonoTime;
use crate::loss::LossEvent;
use crate::strategy::{Fence, Floor};

/// How many events a subscription holds for a subscriber that has not read
/// them; beyond that it loses the oldest (see the module docs).
pub const SUBSCRIPTION_CAPACITY: usize = 64;

/// Something that happened to a lease. See the module docs for order and
/// delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseEvent {
    /// A new grant is held and the gate is open with it: a new slot (or the
    /// same slot again) with a new fence.
    Acquired(Acquired),
    /// A renewal moved the local deadline. Sent only when asked for
    /// ([`LeaseConfigBuilder::report_renewals`](crate::LeaseConfigBuilder::report_renewals)):
    /// one every renew interval.
    Renewed(Renewed),
    /// The lease was lost. Generation had stopped before this was sent.
    Lost(LossEvent),
    /// Generation cannot go on before `until`, for a known reason: the
    /// store's restart guard holds grants back (no lease is held), or this
    /// host's clock is behind a new grant's floor (a lease is held).
    Waiting(Waiting),
    /// A leader's future returned: the elector released the lease and
    /// stands back until `until` before it campaigns again, so that a
    /// follower takes over ([`Elector`](crate::Elector) only).
    SteppedBack(SteppedBack),
}

/// A new grant is held ([`LeaseEvent::Acquired`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Acquired {
    /// The slot.
    pub slot: u32,
    /// Its fence.
    pub fence: Fence,
    /// The slot's floor (Unix ms): the highest timestamp a previous holder
    /// may have used. Generation starts strictly after it.
    pub floor: Floor,
    /// The local deadline.
    pub deadline: MonoTime,
    /// The gate's epoch for this grant ([`GateView::epoch`](crate::GateView::epoch)).
    pub epoch: u64,
}

/// A renewal moved the local deadline ([`LeaseEvent::Renewed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Renewed {
    /// The slot.
    pub slot: u32,
    /// Its fence.
    pub fence: Fence,
    /// The new local deadline.
    pub deadline: MonoTime,
}

/// Generation waits until `until` ([`LeaseEvent::Waiting`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiting {
    /// When it can go on (on [`MonoTime`], the gate's clock).
    pub until: MonoTime,
    /// Why it waits.
    pub cause: WaitCause,
}

impl Waiting {
    /// How long from now until `until` (zero once it has passed).
    pub fn remaining(&self) -> Duration {
        self.until.saturating_since(MonoTime::now())
    }
}

/// Why generation waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitCause {
    /// The store restarted or failed over recently and grants no slot until
    /// every lease it may have forgotten has expired (its restart or
    /// promotion guard: the store answered
    /// [`AcquireError::StoreRestarted`](crate::AcquireError::StoreRestarted)).
    /// No lease is held; the manager keeps asking.
    StoreRestarted,
    /// A lease is held, but this host's clock is behind the slot's floor
    /// (DESIGN.md rule 8): generators wait for it, at most the lease's
    /// `max_clock_skew`.
    Floor,
}

impl fmt::Display for WaitCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::StoreRestarted => {
                "the store restarted or failed over recently and grants no slot until every \
                 lease it may have forgotten has expired (its restart guard)"
            }
            Self::Floor => {
                "this host's clock is behind the slot's floor (the highest timestamp a \
                 previous holder may have used)"
            }
        })
    }
}

/// An elector stood back after its leader's future returned
/// ([`LeaseEvent::SteppedBack`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SteppedBack {
    /// The slot it released.
    pub slot: u32,
    /// The fence of the term that ended.
    pub fence: Fence,
    /// When it campaigns again.
    pub until: MonoTime,
}

pub(crate) type Hook<T> = Arc<dyn Fn(&T) + Send + Sync>;

/// The callbacks of a configuration, and whether renewals are reported.
#[derive(Clone, Default)]
pub(crate) struct Hooks {
    pub(crate) on_acquired: Option<Hook<Acquired>>,
    pub(crate) on_lost: Option<Hook<LossEvent>>,
    pub(crate) on_waiting: Option<Hook<Waiting>>,
    pub(crate) on_event: Vec<Hook<LeaseEvent>>,
    pub(crate) renewals: bool,
}

impl Hooks {
    /// Runs the callbacks for `event`, the one for its kind first; a
    /// panicking callback is caught and its message returned, the others
    /// still run.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn run(&self, event: &LeaseEvent) -> Vec<String> {
        let mut panics = Vec::new();
        let mut call = |f: &dyn Fn()| {
            if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
                panics.push(panic_message(payload));
            }
        };
        match event {
            LeaseEvent::Acquired(e) => {
                if let Some(cb) = &self.on_acquired {
                    call(&|| cb(e));
                }
            }
            LeaseEvent::Lost(e) => {
                if let Some(cb) = &self.on_lost {
                    call(&|| cb(e));
                }
            }
            LeaseEvent::Waiting(e) => {
                if let Some(cb) = &self.on_waiting {
                    call(&|| cb(e));
                }
            }
            LeaseEvent::Renewed(_) | LeaseEvent::SteppedBack(_) => {}
        }
        for cb in &self.on_event {
            call(&|| cb(event));
        }
        panics
    }
}

/// The text of a panic's payload.
#[cfg_attr(not(feature = "tokio"), allow(dead_code))]
pub(crate) fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// Where a driver (or an elector) sends its events: the configuration's
/// callbacks, then the subscribers.
#[cfg(feature = "tokio")]
#[derive(Clone)]
pub(crate) struct Sink {
    pub(crate) hooks: Hooks,
    pub(crate) tx: tokio::sync::broadcast::Sender<LeaseEvent>,
}

#[cfg(feature = "tokio")]
impl Sink {
    /// A sink with `hooks` sending to `tx`, or to a channel of its own.
    pub(crate) fn new(
        hooks: Hooks,
        tx: Option<tokio::sync::broadcast::Sender<LeaseEvent>>,
    ) -> Self {
        Self {
            hooks,
            tx: tx.unwrap_or_else(|| tokio::sync::broadcast::channel(SUBSCRIPTION_CAPACITY).0),
        }
    }

    /// Runs the callbacks, then sends `event` to the subscribers (never
    /// waiting for one). Renewals only when they are asked for. Returns
    /// the messages of callbacks that panicked.
    pub(crate) fn emit(&self, event: LeaseEvent) -> Vec<String> {
        if matches!(event, LeaseEvent::Renewed(_)) && !self.hooks.renewals {
            return Vec::new();
        }
        let panics = self.hooks.run(&event);
        // No subscriber is not an error: nobody is listening.
        let _ = self.tx.send(event);
        panics
    }
}
