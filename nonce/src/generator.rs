//! The public generators: [`Counter`] and [`Sortable`], in three widths.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use leasehold_core::LeaseGate;

use crate::engine::{Engine, NoWait, Wait};
use crate::error::{BuildError, GenerateError, LayoutError, TryNextError};
use crate::layout::{Layout, Parts};
use crate::time::{FastClock, TimeSource};
use crate::uuid7::Uuid7;
use crate::width::{W128, Width};

fn check_width<W: Width>(layout: &Layout) -> Result<(), LayoutError> {
    if layout.bits() == W::BITS {
        Ok(())
    } else {
        Err(LayoutError::new(
            "bits",
            layout.bits(),
            format!("{} for a {}-bit generator", W::BITS, W::BITS),
        ))
    }
}

/// The name a generator gives its gate, for the error a second one gets.
fn kind<W: Width>(sortable: bool) -> &'static str {
    match (sortable, W::BITS) {
        (false, 64) => "Counter64",
        (false, 96) => "Counter96",
        (false, _) => "Counter128",
        (true, 64) => "Sortable64",
        (true, 96) => "Sortable96",
        (true, _) => "Sortable128",
    }
}

fn default_layout<W: Width>() -> Layout {
    match W::BITS {
        64 => Layout::default64(),
        96 => Layout::default96(),
        _ => Layout::default128(),
    }
}

macro_rules! generator {
    ($(#[$doc:meta])* $name:ident, $sortable:literal) => {
        $(#[$doc])*
        pub struct $name<W: Width, T: TimeSource = FastClock> {
            engine: Arc<Engine<T, $sortable>>,
            _width: PhantomData<W>,
        }

        impl<W: Width> $name<W> {
            /// A generator with the default layout for the width and the
            /// default clock, bound to `gate`.
            ///
            /// Fails when the gate already has a generator in use (one
            /// generation state per lease: of the same kind, clone that
            /// generator instead; another kind needs a second lease, from a
            /// second lease manager), or when the wall clock is before the
            /// layout's epoch (2025-01-01).
            pub fn new(gate: LeaseGate) -> Result<Self, BuildError> {
                Self::with_layout(gate, default_layout::<W>())
            }

            /// A generator with a custom layout (of this width).
            pub fn with_layout(gate: LeaseGate, layout: Layout) -> Result<Self, BuildError> {
                Self::with_time(gate, layout, FastClock::new())
            }
        }

        impl<W: Width, T: TimeSource> $name<W, T> {
            /// A generator with a custom layout and time source.
            pub fn with_time(gate: LeaseGate, layout: Layout, time: T) -> Result<Self, BuildError> {
                check_width::<W>(&layout)?;
                Ok(Self {
                    engine: Arc::new(Engine::new(gate, layout, time, kind::<W>($sortable))?),
                    _width: PhantomData,
                })
            }

            /// The next nonce, or an error when no lease is held (the gate is
            /// closed or past its deadline). Lock-free, and never waits for a
            /// lease: without one it refuses at once.
            ///
            /// It may wait, on the calling thread (spinning, then yielding),
            /// while a value's timestamp is ahead of real time: until the
            /// next millisecond when a millisecond's values are used up, and
            /// right after a new lease whose floor (the highest timestamp a
            /// previous holder of the slot may have used) is ahead of this
            /// host's clock, **at most the lease's `max_clock_skew`**
            /// (default 1 s; further behind, it refuses with
            /// [`GenerateError::ClockBehind`]). In async code, use
            /// `next_async` (feature `tokio`), which
            /// waits without blocking the runtime's thread, or
            /// [`try_next`](Self::try_next), which says how long it would
            /// wait.
            #[inline(always)]
            pub fn next(&self) -> Result<W::Nonce, GenerateError> {
                self.engine.next::<true, Wait>().map(W::wrap)
            }

            /// The next nonce if it can be handed out now, without waiting:
            /// the same checks and refusals as [`next`](Self::next) (a
            /// closed gate is [`TryNextError::Refused`]`(`[`GenerateError::Closed`]`)`,
            /// never a wait), but where `next` would wait for real time to
            /// reach the value's timestamp (the next millisecond, or a new
            /// lease's floor, at most the lease's `max_clock_skew`) it
            /// answers [`TryNextError::WouldWait`] with how long and why.
            /// Nothing is handed out or held back for the caller meanwhile:
            /// call again after `retry_in` (a call before that answers the
            /// same, and takes nothing from the state).
            #[inline]
            pub fn try_next(&self) -> Result<W::Nonce, TryNextError> {
                self.engine.next::<true, NoWait>().map(W::wrap)
            }

            /// [`next`](Self::next) for async code: where `next` would
            /// wait on the calling thread (for the next millisecond, or for
            /// this host's clock to pass a new lease's floor, at most the
            /// lease's `max_clock_skew`), this sleeps on the runtime's
            /// timer (a wait under a millisecond yields to other tasks
            /// instead), and then checks the gate at a fresh reading again.
            /// It never waits for a lease: without one it answers
            /// [`GenerateError::Closed`] at once, as `next` does (answer
            /// 503; the lease manager's `health()` gives a Retry-After).
            /// Refusals are `next`'s. Needs a tokio runtime with its timer
            /// enabled. Dropping the future takes nothing from the state.
            #[cfg(feature = "tokio")]
            pub async fn next_async(&self) -> Result<W::Nonce, GenerateError> {
                crate::asynch::until_ready(|| self.try_next()).await
            }

            /// Benchmarks only: `next` without the clock read and the gate check.
            #[doc(hidden)]
            #[inline]
            pub fn next_ungated_for_bench(&self) -> Result<W::Nonce, GenerateError> {
                self.engine.next::<false, Wait>().map(W::wrap)
            }

            /// The layout.
            pub fn layout(&self) -> &Layout {
                self.engine.layout()
            }

            /// The gate this generator is bound to.
            pub fn gate(&self) -> &LeaseGate {
                self.engine.gate()
            }

            /// Takes a nonce of this generator apart.
            pub fn decode(&self, nonce: W::Nonce) -> Parts {
                self.layout().decode(W::unwrap(nonce))
            }
        }

        impl<W: Width, T: TimeSource> Clone for $name<W, T> {
            /// Shares the state: clones hand out distinct values.
            fn clone(&self) -> Self {
                Self {
                    engine: Arc::clone(&self.engine),
                    _width: PhantomData,
                }
            }
        }

        impl<W: Width, T: TimeSource> fmt::Debug for $name<W, T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("layout", self.layout())
                    .field("gate", self.gate())
                    .finish_non_exhaustive()
            }
        }

        impl<W: Width, T: TimeSource> Plain for $name<W, T> {
            type W = W;
            fn next_plain(&self) -> Result<u128, GenerateError> {
                self.engine.next::<true, Wait>()
            }
            fn try_next_plain(&self) -> Result<u128, TryNextError> {
                self.engine.next::<true, NoWait>()
            }
            fn plain_layout(&self) -> &Layout {
                self.layout()
            }
        }
    };
}

generator!(
    /// Counter nonces: timestamp (the lease's start, advancing only as the
    /// counter runs over), slot, counter. Unique, predictable, the fastest.
    ///
    /// The 64-bit form may burst on milliseconds saved up since the lease
    /// started, but its timestamp never passes real time: once the saved-up
    /// milliseconds are spent it waits (2^13 values per millisecond with the
    /// default layout). The 96- and 128-bit forms advance their timestamp only
    /// every 2^45 and never (2^64 values), so they never wait for that. Every
    /// form also waits after a new lease whose floor is ahead of this host's
    /// clock, at most the lease's `max_clock_skew` (see `next`).
    ///
    /// Cloning shares the state (hand clones to threads).
    Counter,
    false
);

generator!(
    /// Sortable (Snowflake-like) nonces: the creation time in the high bits,
    /// then the slot, then a per-millisecond sequence. They sort by time.
    ///
    /// The 64-bit form gives at most 2^13 values per millisecond (default
    /// layout) and waits for the next millisecond when they are spent. The
    /// 96- and 128-bit forms allow 2^21 per millisecond. After a new lease
    /// whose floor is ahead of this host's clock, every form waits for the
    /// clock to pass it, at most the lease's `max_clock_skew` (see `next`). A
    /// wall clock that goes backwards never makes a timestamp repeat (see the
    /// crate docs).
    ///
    /// Cloning shares the state.
    Sortable,
    true
);

impl<T: TimeSource> Sortable<W128, T> {
    /// The next 128-bit sortable nonce as an RFC 9562 version-7 UUID.
    ///
    /// ```
    /// # use leasehold_core::{Fence, LeaseGate, MonoTime};
    /// # use leasehold_core::testing::GateControl;
    /// # use std::time::Duration;
    /// # let gate = LeaseGate::new();
    /// # gate.open(3, Fence(1), MonoTime::now() + Duration::from_secs(60));
    /// let ids = leasehold_nonce::Sortable128::new(gate)?;
    /// let a = ids.next_uuid7()?;
    /// let b = ids.next_uuid7()?;
    /// assert!(a < b);
    /// assert_eq!(a.to_string().as_bytes()[14], b'7'); // the version digit
    /// assert_eq!(a.slot(ids.layout()), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Errors and waiting as `next`: it may wait on the calling thread, at
    /// most the lease's `max_clock_skew`, for this host's clock to pass a
    /// new lease's floor (in async code, use
    /// `next_uuid7_async`, feature `tokio`).
    #[inline(always)]
    pub fn next_uuid7(&self) -> Result<Uuid7, GenerateError> {
        let plain = self.engine.next::<true, Wait>()?;
        Ok(Uuid7::from_sortable(self.layout(), plain))
    }

    /// [`next_uuid7`](Self::next_uuid7) without waiting: as
    /// [`try_next`](Self::try_next).
    #[inline]
    pub fn try_next_uuid7(&self) -> Result<Uuid7, TryNextError> {
        let plain = self.engine.next::<true, NoWait>()?;
        Ok(Uuid7::from_sortable(self.layout(), plain))
    }

    /// [`next_uuid7`](Self::next_uuid7) for async code: as
    /// `next_async`.
    #[cfg(feature = "tokio")]
    pub async fn next_uuid7_async(&self) -> Result<Uuid7, GenerateError> {
        crate::asynch::until_ready(|| self.try_next_uuid7()).await
    }
}

mod sealed {
    pub trait Sealed {}
    impl<W: crate::Width, T: crate::TimeSource> Sealed for crate::Counter<W, T> {}
    impl<W: crate::Width, T: crate::TimeSource> Sealed for crate::Sortable<W, T> {}
}

/// A plain (not encrypted) generator: [`Counter`] or [`Sortable`]. Sealed;
/// [`Encrypted`](crate::Encrypted) wraps one.
pub trait Plain: sealed::Sealed + Clone + Send + Sync + 'static {
    /// The width.
    type W: Width;
    #[doc(hidden)]
    fn next_plain(&self) -> Result<u128, GenerateError>;
    #[doc(hidden)]
    fn try_next_plain(&self) -> Result<u128, TryNextError>;
    #[doc(hidden)]
    fn plain_layout(&self) -> &Layout;
}
