//! The contract every lease store implements.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::error::{AcquireError, Reason};
use crate::pool::PoolSpec;
use crate::token::Token;

/// A fencing token: grows every time a slot changes hands and never goes back.
///
/// Send it with every write to storage that checks it; storage that has seen a
/// bigger fence refuses the write (see DESIGN.md, timing rule 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Fence(pub u64);

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What a store grants on acquire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The slot, in `0..pool.size`.
    pub slot: u32,
    /// The ownership token; renew and release match on it.
    pub token: Token,
    /// The slot's fence for this holder.
    pub fence: Fence,
    /// The lease time the store granted (it may differ from the one asked).
    pub ttl: Duration,
}

/// The answer to a renewal: exactly one of three.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// The store confirms the token still owns the slot, for `ttl` from when the
    /// request was sent.
    Renewed {
        /// The lease time granted.
        ttl: Duration,
    },
    /// The store positively rejected ownership: expired and taken, token gone.
    Lost(Reason),
    /// Uncertain: timeout, dropped connection, store unavailable. The renewal
    /// may or may not have been applied; retrying it is safe.
    Retry(Reason),
}

/// The answer to a release. Release is best-effort and never touches a slot
/// whose token is not ours.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Release {
    /// The slot was ours and is now free.
    Released,
    /// The slot was no longer ours (expired or taken): nothing was changed.
    NotHeld,
    /// The store could not be reached; the lease will expire by itself.
    Retry(Reason),
}

/// What a strategy can do; the behaviour suite selects tests from it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Slots are coordinated through a store (false for fixed slots).
    pub coordinated: bool,
    /// The store is reached over TCP, so the fault proxy applies.
    pub networked: bool,
    /// The smallest TTL the store accepts.
    pub min_ttl: Duration,
    /// The largest pool the strategy supports.
    pub max_pool_size: u32,
}

impl Capabilities {
    /// A coordinated store: the defaults for a real backend.
    pub const fn coordinated(networked: bool, min_ttl: Duration) -> Self {
        Self {
            coordinated: true,
            networked,
            min_ttl,
            max_pool_size: crate::pool::MAX_POOL_SIZE,
        }
    }

    /// Sets `max_pool_size`.
    pub const fn with_max_pool_size(mut self, size: u32) -> Self {
        self.max_pool_size = size;
        self
    }
}

/// A lease store: acquires, renews and releases slots of a pool.
///
/// Implementations write `async fn`; the returned futures are `Send`. See
/// [`DynStrategy`] for a boxed, object-safe companion.
///
/// The rules every implementation keeps:
/// - the store's clock decides expiry;
/// - `renew` and `release` match on `(pool, slot, token)`, so a retried renewal
///   after an ambiguous failure is idempotent;
/// - connection errors and timeouts are [`Renewal::Retry`], never a hang and never
///   [`Renewal::Lost`]; only a positive rejection is `Lost`.
pub trait Strategy: Send + Sync + 'static {
    /// Claims a free slot of `pool` for `pool.ttl`.
    fn acquire(&self, pool: &PoolSpec) -> impl Future<Output = Result<Grant, AcquireError>> + Send;

    /// Extends `grant` by `pool.ttl` if its token still owns the slot.
    fn renew(&self, pool: &PoolSpec, grant: &Grant) -> impl Future<Output = Renewal> + Send;

    /// Frees the slot if its token is still `grant.token`.
    fn release(&self, pool: &PoolSpec, grant: &Grant) -> impl Future<Output = Release> + Send;

    /// True when the slot is fixed by the environment (host list, pod ordinal):
    /// such a slot is never re-acquired after a loss.
    fn deterministic(&self) -> bool {
        false
    }

    /// What the strategy supports.
    fn capabilities(&self) -> Capabilities;

    /// Identifies the store (and namespace) for the in-process lease cache: two
    /// strategies with the same identity share slots. Never include credentials.
    fn identity(&self) -> String;
}

/// A boxed future, for [`DynStrategy`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The object-safe companion of [`Strategy`]; every `Strategy` is one.
///
/// ```
/// use leasehold_core::{DynStrategy, Memory};
/// let strategies: Vec<Box<dyn DynStrategy>> = vec![Box::new(Memory::new())];
/// assert_eq!(strategies.len(), 1);
/// ```
pub trait DynStrategy: Send + Sync + 'static {
    /// See [`Strategy::acquire`].
    fn acquire_dyn<'a>(&'a self, pool: &'a PoolSpec) -> BoxFuture<'a, Result<Grant, AcquireError>>;
    /// See [`Strategy::renew`].
    fn renew_dyn<'a>(&'a self, pool: &'a PoolSpec, grant: &'a Grant) -> BoxFuture<'a, Renewal>;
    /// See [`Strategy::release`].
    fn release_dyn<'a>(&'a self, pool: &'a PoolSpec, grant: &'a Grant) -> BoxFuture<'a, Release>;
    /// See [`Strategy::deterministic`].
    fn deterministic_dyn(&self) -> bool;
    /// See [`Strategy::capabilities`].
    fn capabilities_dyn(&self) -> Capabilities;
    /// See [`Strategy::identity`].
    fn identity_dyn(&self) -> String;
}

impl<S: Strategy> DynStrategy for S {
    fn acquire_dyn<'a>(&'a self, pool: &'a PoolSpec) -> BoxFuture<'a, Result<Grant, AcquireError>> {
        Box::pin(self.acquire(pool))
    }
    fn renew_dyn<'a>(&'a self, pool: &'a PoolSpec, grant: &'a Grant) -> BoxFuture<'a, Renewal> {
        Box::pin(self.renew(pool, grant))
    }
    fn release_dyn<'a>(&'a self, pool: &'a PoolSpec, grant: &'a Grant) -> BoxFuture<'a, Release> {
        Box::pin(self.release(pool, grant))
    }
    fn deterministic_dyn(&self) -> bool {
        self.deterministic()
    }
    fn capabilities_dyn(&self) -> Capabilities {
        self.capabilities()
    }
    fn identity_dyn(&self) -> String {
        self.identity()
    }
}

/// Boxed and shared trait objects are strategies too, so the driver accepts
/// `Box<dyn DynStrategy>` and `Arc<dyn DynStrategy>`. Calls go through `**self`:
/// the pointer itself is a `DynStrategy` (blanket impl) and would recurse.
macro_rules! forward_dyn {
    ($($ptr:ty),*) => {$(
        impl Strategy for $ptr {
            async fn acquire(&self, pool: &PoolSpec) -> Result<Grant, AcquireError> {
                (**self).acquire_dyn(pool).await
            }
            async fn renew(&self, pool: &PoolSpec, grant: &Grant) -> Renewal {
                (**self).renew_dyn(pool, grant).await
            }
            async fn release(&self, pool: &PoolSpec, grant: &Grant) -> Release {
                (**self).release_dyn(pool, grant).await
            }
            fn deterministic(&self) -> bool {
                (**self).deterministic_dyn()
            }
            fn capabilities(&self) -> Capabilities {
                (**self).capabilities_dyn()
            }
            fn identity(&self) -> String {
                (**self).identity_dyn()
            }
        }
    )*};
}

forward_dyn!(Box<dyn DynStrategy>, std::sync::Arc<dyn DynStrategy>);

impl<S: Strategy> Strategy for std::sync::Arc<S> {
    fn acquire(&self, pool: &PoolSpec) -> impl Future<Output = Result<Grant, AcquireError>> + Send {
        (**self).acquire(pool)
    }
    fn renew(&self, pool: &PoolSpec, grant: &Grant) -> impl Future<Output = Renewal> + Send {
        (**self).renew(pool, grant)
    }
    fn release(&self, pool: &PoolSpec, grant: &Grant) -> impl Future<Output = Release> + Send {
        (**self).release(pool, grant)
    }
    fn deterministic(&self) -> bool {
        (**self).deterministic()
    }
    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }
    fn identity(&self) -> String {
        (**self).identity()
    }
}
