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
/// bigger fence refuses the write, and accepts the holder's own repeated
/// writes (see DESIGN.md, timing rule 7).
///
/// Fences are **per slot**: each slot of a pool counts on its own (on SQL and
/// Valkey/Redis; etcd's revisions happen to be global, Kubernetes'
/// resourceVersions are opaque), so fences of different slots are not
/// comparable. A fence alone cannot tell which slot issued it: storage that
/// checks fences keeps, per resource, the pool and slot of its last writer
/// too, and refuses a write stamped by any other ([`FenceStamp`]).
///
/// Stores keep fences in signed 64-bit columns (SQL `BIGINT`): convert with
/// [`Fence::to_i64`] or `i64::try_from`, which refuse a fence above
/// `i64::MAX` instead of wrapping it negative (a wrapped fence would compare
/// below every earlier one). SQL and Valkey/Redis fences are at least the
/// store's clock in microseconds (rule 7), about 2^51 today: they fit until
/// the year 294,247.
///
/// ```
/// use leasehold_core::Fence;
/// assert_eq!(Fence(7).to_i64(), Some(7));
/// assert_eq!(Fence(u64::MAX).to_i64(), None);
/// assert_eq!(Fence::try_from(7_i64), Ok(Fence(7)));
/// assert!(Fence::try_from(-1_i64).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Fence(pub u64);

impl Fence {
    /// The fence as an `i64` (a `BIGINT` column), or `None` above
    /// `i64::MAX`.
    pub fn to_i64(self) -> Option<i64> {
        i64::try_from(self.0).ok()
    }
}

impl TryFrom<Fence> for i64 {
    type Error = std::num::TryFromIntError;

    /// Refuses a fence above `i64::MAX` (see [`Fence::to_i64`]).
    fn try_from(fence: Fence) -> Result<Self, Self::Error> {
        i64::try_from(fence.0)
    }
}

impl TryFrom<i64> for Fence {
    type Error = std::num::TryFromIntError;

    /// A fence read back from a signed column; refuses a negative value.
    fn try_from(value: i64) -> Result<Self, Self::Error> {
        u64::try_from(value).map(Self)
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What a fenced write carries: a [`Fence`] and the pool and slot whose
/// grant issued it.
///
/// Fences count per slot, so the number alone is only comparable with
/// fences of the same slot: fence 9 of slot 3 says nothing about fence 2 of
/// slot 4. Storage that checks fences records the stamp of a resource's last
/// writer and accepts a write only from the same pool and slot with a fence
/// at least as big (DESIGN.md, timing rule 7); a write from another pool or
/// slot is refused whatever its number, until that pool and slot explicitly
/// take the resource over.
///
/// ```
/// use leasehold_core::{Fence, FenceStamp, PoolName};
/// let stamp = FenceStamp::new(PoolName::new("scheduler")?, 0, Fence(7));
/// assert_eq!((stamp.pool().as_str(), stamp.slot(), stamp.fence()), ("scheduler", 0, Fence(7)));
/// assert_eq!(stamp.to_string(), "fence 7 of scheduler/0");
/// # Ok::<(), leasehold_core::ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FenceStamp {
    pool: crate::PoolName,
    slot: u32,
    fence: Fence,
}

impl FenceStamp {
    /// The fence `fence` of slot `slot` of pool `pool`.
    pub fn new(pool: crate::PoolName, slot: u32, fence: Fence) -> Self {
        Self { pool, slot, fence }
    }

    /// The stamp of `grant`, a grant of `pool`.
    pub fn of(pool: &crate::PoolSpec, grant: &Grant) -> Self {
        Self::new(pool.name().clone(), grant.slot, grant.fence)
    }

    /// The pool whose grant issued the fence.
    pub fn pool(&self) -> &crate::PoolName {
        &self.pool
    }

    /// The slot whose grant issued the fence.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The fence.
    pub fn fence(&self) -> Fence {
        self.fence
    }
}

impl fmt::Display for FenceStamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fence {} of {}/{}", self.fence, self.pool, self.slot)
    }
}

/// A hand-over floor: a Unix time in milliseconds, the highest timestamp a
/// holder of a slot may have put into an ID.
///
/// Every grant carries the floor the store held for the slot before it, and
/// generators start strictly after it, so a new holder whose clock is behind
/// the previous holder's never reissues its IDs (DESIGN.md, timing rule 8).
/// Holders report their floor to the store: with `acquire` and every `renew`
/// the highest timestamp they may issue until their new local deadline (their
/// *ceiling*), with `release` the highest they actually issued. `Floor(0)`
/// means "nothing issued yet".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Floor(pub u64);

impl Floor {
    /// No timestamp issued yet.
    pub const NONE: Self = Self(0);

    /// Unix milliseconds.
    pub const fn unix_millis(self) -> u64 {
        self.0
    }

    /// A floor an operator may store over a slot's damaged one: this host's
    /// Unix time plus `pool`'s restart span (its TTL and twice its
    /// `max_clock_skew`). No holder of the pool can have stamped a value
    /// above it yet: a holder stamps at most its ceiling, the Unix time of a
    /// local deadline less than a TTL ahead of its own clock, which is
    /// within the skew of this host's. A holder still running raises it
    /// with its next renewal. What the stores' refusals of a damaged floor
    /// suggest (`AcquireError::DamagedRecord`).
    pub fn above_every_holder(pool: &PoolSpec) -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let at = now.saturating_add(pool.restart_span());
        Self(u64::try_from(at.as_millis()).unwrap_or(u64::MAX))
    }
}

impl fmt::Display for Floor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ms", self.0)
    }
}

/// What a store grants on acquire. Build one with [`Grant::new`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Grant {
    /// The slot, in `0..pool.size`.
    pub slot: u32,
    /// The ownership token; renew and release match on it.
    pub token: Token,
    /// The slot's fence for this holder.
    pub fence: Fence,
    /// The lease time the store granted (it may differ from the one asked).
    pub ttl: Duration,
    /// The slot's floor before this grant: the highest timestamp any earlier
    /// holder may have used. [`Floor::NONE`] from stores that do not persist
    /// floors (see [`Capabilities::persists_floor`]).
    pub floor: Floor,
    /// The store's clock when it granted, if the store tells it (any fixed
    /// origin: only differences between readings matter). The driver
    /// compares it across renewals to catch the store's clock jumping
    /// forward, which would end the lease early on the store's side.
    pub store_time: Option<Duration>,
}

impl Grant {
    /// A grant of `slot` to `token` with `fence`, for `ttl` (the TTL the
    /// store applied), with no floor and no store time.
    pub fn new(slot: u32, token: Token, fence: Fence, ttl: Duration) -> Self {
        Self {
            slot,
            token,
            fence,
            ttl,
            floor: Floor::NONE,
            store_time: None,
        }
    }

    /// Sets the slot's floor before this grant.
    pub fn with_floor(mut self, floor: Floor) -> Self {
        self.floor = floor;
        self
    }

    /// Sets the store's clock reading at the grant.
    pub fn with_store_time(mut self, at: Duration) -> Self {
        self.store_time = Some(at);
        self
    }
}

/// The answer to a renewal: exactly one of three.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// The store confirms the token still owns the slot, for `ttl` from when the
    /// request was sent. Build it with [`Renewal::renewed`].
    #[non_exhaustive]
    Renewed {
        /// The lease time the store applied.
        ttl: Duration,
        /// The store's clock when it renewed, if the store tells it (see
        /// [`Grant::store_time`]).
        store_time: Option<Duration>,
    },
    /// The store positively rejected ownership: expired and taken, token gone.
    Lost(Reason),
    /// Uncertain: timeout, dropped connection, store unavailable. The renewal
    /// may or may not have been applied; retrying it is safe.
    Retry(Reason),
}

impl Renewal {
    /// Renewed for `ttl` (the TTL the store applied).
    pub const fn renewed(ttl: Duration) -> Self {
        Self::Renewed {
            ttl,
            store_time: None,
        }
    }

    /// Adds the store's clock reading to a `Renewed` answer (others are
    /// returned unchanged).
    pub fn with_store_time(self, at: Duration) -> Self {
        match self {
            Self::Renewed { ttl, .. } => Self::Renewed {
                ttl,
                store_time: Some(at),
            },
            other => other,
        }
    }
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
    /// The slot is fixed by the environment (host list, pod ordinal): it is
    /// never re-acquired after a loss.
    pub deterministic: bool,
    /// The granularity of the store's clock and TTLs (SQLite and Valkey count
    /// milliseconds, for example). Part of the minimum safety margin.
    pub time_resolution: Duration,
    /// The store keeps each slot's [`Floor`]: reported floors survive the
    /// holder, and grants carry the previous holders' floor.
    pub persists_floor: bool,
    /// [`Strategy::inspect`] lists the pool's slots (holders, fences, floors,
    /// expiries); followers of a leader pool learn the leader from it.
    pub inspects: bool,
}

impl Capabilities {
    /// A coordinated store: the defaults for a real backend (time resolution
    /// 1 ms, floors not persisted).
    pub const fn coordinated(networked: bool, min_ttl: Duration) -> Self {
        Self {
            coordinated: true,
            networked,
            min_ttl,
            max_pool_size: crate::pool::MAX_POOL_SIZE,
            deterministic: false,
            time_resolution: Duration::from_millis(1),
            persists_floor: false,
            inspects: false,
        }
    }

    /// A slot fixed by the environment: nothing is coordinated, the slot is
    /// never re-acquired after a loss.
    pub const fn fixed() -> Self {
        Self {
            coordinated: false,
            networked: false,
            min_ttl: Duration::from_millis(1),
            max_pool_size: crate::pool::MAX_POOL_SIZE,
            deterministic: true,
            time_resolution: Duration::ZERO,
            persists_floor: false,
            inspects: false,
        }
    }

    /// Sets `max_pool_size`.
    pub const fn with_max_pool_size(mut self, size: u32) -> Self {
        self.max_pool_size = size;
        self
    }

    /// Sets `time_resolution`.
    pub const fn with_time_resolution(mut self, resolution: Duration) -> Self {
        self.time_resolution = resolution;
        self
    }

    /// Declares that the store persists floors.
    pub const fn with_persisted_floor(mut self) -> Self {
        self.persists_floor = true;
        self
    }

    /// Declares that [`Strategy::inspect`] lists the pool's slots.
    pub const fn with_inspect(mut self) -> Self {
        self.inspects = true;
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
///   [`Renewal::Lost`]; only a positive rejection is `Lost`;
/// - a store that persists floors ([`Capabilities::persists_floor`]) keeps one
///   per slot, writes it in the same atomic step as the claim, renewal or
///   release it comes with, and never loses a reported ceiling: `acquire` and
///   `renew` store `max(stored, ceiling)`, `release` stores `issued` (which the
///   holder computes as at least its grant's floor).
pub trait Strategy: Send + Sync + 'static {
    /// Claims a free slot of `pool` for `pool.ttl`. `ceiling` is the highest
    /// timestamp the caller may issue before its first local deadline; the
    /// grant carries the floor the slot had before.
    fn acquire(
        &self,
        pool: &PoolSpec,
        ceiling: Floor,
    ) -> impl Future<Output = Result<Grant, AcquireError>> + Send;

    /// Extends `grant` by `pool.ttl` if its token still owns the slot, and
    /// raises the slot's floor to `ceiling` (the highest timestamp the holder
    /// may issue until its new local deadline).
    fn renew(
        &self,
        pool: &PoolSpec,
        grant: &Grant,
        ceiling: Floor,
    ) -> impl Future<Output = Renewal> + Send;

    /// Frees the slot if its token is still `grant.token`, leaving `issued`
    /// (the highest timestamp the holder actually issued, at least
    /// `grant.floor`) as the slot's floor.
    fn release(
        &self,
        pool: &PoolSpec,
        grant: &Grant,
        issued: Floor,
    ) -> impl Future<Output = Release> + Send;

    /// What the strategy supports.
    fn capabilities(&self) -> Capabilities;

    /// Identifies the store (and namespace) for the in-process lease cache: two
    /// strategies with the same identity share slots. Never include credentials.
    fn identity(&self) -> String;

    /// What the store holds for each slot of `pool` that has ever been used,
    /// for operators (`leasehold status`) and for followers watching who
    /// leads. Read-only. The default says the strategy cannot.
    fn inspect(
        &self,
        pool: &PoolSpec,
    ) -> impl Future<Output = Result<Vec<SlotInfo>, InspectError>> + Send {
        let _ = pool;
        std::future::ready(Err(InspectError::Unsupported))
    }
}

/// One slot as the store sees it. Times are on the store's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SlotInfo {
    /// The slot.
    pub slot: u32,
    /// Who holds it (the pool's holder identity), or `None` when free.
    pub holder: Option<String>,
    /// The first 8 hex digits of the holder's token, to tell two holders
    /// with the same identity apart. Never the whole token.
    pub token_prefix: Option<String>,
    /// The slot's fence (of the current or last holder).
    pub fence: Fence,
    /// The slot's floor.
    pub floor: Floor,
    /// Time left until the store expires the lease, when held (or, with no
    /// holder, until a revoked lease's tombstone expires).
    pub expires_in: Option<Duration>,
    /// Time since the last renewal (or the acquisition), when the store knows.
    pub renewed_ago: Option<Duration>,
    /// Time since the current holder acquired the slot, when the store knows.
    pub held_for: Option<Duration>,
}

impl SlotInfo {
    /// A free slot with `fence` and `floor`.
    pub fn free(slot: u32, fence: Fence, floor: Floor) -> Self {
        Self {
            slot,
            holder: None,
            token_prefix: None,
            fence,
            floor,
            expires_in: None,
            renewed_ago: None,
            held_for: None,
        }
    }

    /// The slot held by `holder` (token `token`), expiring in `expires_in`.
    pub fn held(mut self, holder: impl Into<String>, token: &Token, expires_in: Duration) -> Self {
        self.holder = Some(holder.into());
        self.token_prefix = Some(token.to_hex()[..8].to_owned());
        self.expires_in = Some(expires_in);
        self
    }

    /// [`SlotInfo::held`] for a store that hands out only the start of the
    /// token: `prefix` is cut to its first 8 characters.
    pub fn held_by_prefix(
        mut self,
        holder: impl Into<String>,
        prefix: &str,
        expires_in: Duration,
    ) -> Self {
        self.holder = Some(holder.into());
        self.token_prefix = Some(prefix.chars().take(8).collect());
        self.expires_in = Some(expires_in);
        self
    }

    /// A slot whose lease was revoked: no holder, but taken (a tombstone)
    /// for `left` more, until the revoked lease would have ended.
    pub fn revoked_until(mut self, left: Duration) -> Self {
        self.holder = None;
        self.token_prefix = None;
        self.expires_in = Some(left);
        self
    }

    /// Sets the time since the last renewal and since the acquisition.
    pub fn with_ages(mut self, renewed_ago: Option<Duration>, held_for: Option<Duration>) -> Self {
        self.renewed_ago = renewed_ago;
        self.held_for = held_for;
        self
    }
}

/// Why a store could not be inspected.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InspectError {
    /// This strategy cannot list its slots.
    Unsupported,
    /// The store could not be read (unreachable, timed out, denied).
    Store(Reason),
}

impl fmt::Display for InspectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unsupported => f.write_str("this strategy cannot list the slots of a pool"),
            Self::Store(r) => write!(f, "cannot read the lease store: {r}"),
        }
    }
}

impl std::error::Error for InspectError {}

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
    fn acquire_dyn<'a>(
        &'a self,
        pool: &'a PoolSpec,
        ceiling: Floor,
    ) -> BoxFuture<'a, Result<Grant, AcquireError>>;
    /// See [`Strategy::renew`].
    fn renew_dyn<'a>(
        &'a self,
        pool: &'a PoolSpec,
        grant: &'a Grant,
        ceiling: Floor,
    ) -> BoxFuture<'a, Renewal>;
    /// See [`Strategy::release`].
    fn release_dyn<'a>(
        &'a self,
        pool: &'a PoolSpec,
        grant: &'a Grant,
        issued: Floor,
    ) -> BoxFuture<'a, Release>;
    /// See [`Strategy::capabilities`].
    fn capabilities_dyn(&self) -> Capabilities;
    /// See [`Strategy::identity`].
    fn identity_dyn(&self) -> String;
    /// See [`Strategy::inspect`].
    fn inspect_dyn<'a>(
        &'a self,
        pool: &'a PoolSpec,
    ) -> BoxFuture<'a, Result<Vec<SlotInfo>, InspectError>>;
    /// The strategy's own type, for what only it has (a backend's pool for
    /// fenced writes): `store.as_any().downcast_ref::<Memory>()`.
    fn as_any(&self) -> &dyn std::any::Any;
}

impl<S: Strategy> DynStrategy for S {
    fn acquire_dyn<'a>(
        &'a self,
        pool: &'a PoolSpec,
        ceiling: Floor,
    ) -> BoxFuture<'a, Result<Grant, AcquireError>> {
        Box::pin(self.acquire(pool, ceiling))
    }
    fn renew_dyn<'a>(
        &'a self,
        pool: &'a PoolSpec,
        grant: &'a Grant,
        ceiling: Floor,
    ) -> BoxFuture<'a, Renewal> {
        Box::pin(self.renew(pool, grant, ceiling))
    }
    fn release_dyn<'a>(
        &'a self,
        pool: &'a PoolSpec,
        grant: &'a Grant,
        issued: Floor,
    ) -> BoxFuture<'a, Release> {
        Box::pin(self.release(pool, grant, issued))
    }
    fn capabilities_dyn(&self) -> Capabilities {
        self.capabilities()
    }
    fn identity_dyn(&self) -> String {
        self.identity()
    }
    fn inspect_dyn<'a>(
        &'a self,
        pool: &'a PoolSpec,
    ) -> BoxFuture<'a, Result<Vec<SlotInfo>, InspectError>> {
        Box::pin(self.inspect(pool))
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Boxed and shared trait objects are strategies too, so the driver accepts
/// `Box<dyn DynStrategy>` and `Arc<dyn DynStrategy>`. Calls go through `**self`:
/// the pointer itself is a `DynStrategy` (blanket impl) and would recurse.
macro_rules! forward_dyn {
    ($($ptr:ty),*) => {$(
        impl Strategy for $ptr {
            async fn acquire(&self, pool: &PoolSpec, ceiling: Floor) -> Result<Grant, AcquireError> {
                (**self).acquire_dyn(pool, ceiling).await
            }
            async fn renew(&self, pool: &PoolSpec, grant: &Grant, ceiling: Floor) -> Renewal {
                (**self).renew_dyn(pool, grant, ceiling).await
            }
            async fn release(&self, pool: &PoolSpec, grant: &Grant, issued: Floor) -> Release {
                (**self).release_dyn(pool, grant, issued).await
            }
            fn capabilities(&self) -> Capabilities {
                (**self).capabilities_dyn()
            }
            fn identity(&self) -> String {
                (**self).identity_dyn()
            }
            async fn inspect(&self, pool: &PoolSpec) -> Result<Vec<SlotInfo>, InspectError> {
                (**self).inspect_dyn(pool).await
            }
        }
    )*};
}

forward_dyn!(Box<dyn DynStrategy>, std::sync::Arc<dyn DynStrategy>);

impl<S: Strategy> Strategy for std::sync::Arc<S> {
    fn acquire(
        &self,
        pool: &PoolSpec,
        ceiling: Floor,
    ) -> impl Future<Output = Result<Grant, AcquireError>> + Send {
        (**self).acquire(pool, ceiling)
    }
    fn renew(
        &self,
        pool: &PoolSpec,
        grant: &Grant,
        ceiling: Floor,
    ) -> impl Future<Output = Renewal> + Send {
        (**self).renew(pool, grant, ceiling)
    }
    fn release(
        &self,
        pool: &PoolSpec,
        grant: &Grant,
        issued: Floor,
    ) -> impl Future<Output = Release> + Send {
        (**self).release(pool, grant, issued)
    }
    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }
    fn identity(&self) -> String {
        (**self).identity()
    }
    fn inspect(
        &self,
        pool: &PoolSpec,
    ) -> impl Future<Output = Result<Vec<SlotInfo>, InspectError>> + Send {
        (**self).inspect(pool)
    }
}
