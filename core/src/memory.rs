//! `Memory`: a real in-process coordinator, the reference backend of the suite.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::clock::{Clock, MonoTime, SystemClock};
use crate::error::{AcquireError, Durability, Reason};
use crate::operate::{Check, Operate, OperateError, Verdict};
use crate::pool::PoolSpec;
use crate::strategy::{
    BoxFuture, Capabilities, Fence, Floor, Grant, InspectError, Release, Renewal, SlotInfo,
    Strategy,
};
use crate::token::Token;

/// The token a revoke leaves: no holder's token is all zeros (128 random
/// bits), so no renewal or release matches it, and `inspect` shows the
/// slot revoked.
const TOMBSTONE: Token = Token::from_bytes([0; 16]);

#[derive(Clone, Debug, Default)]
struct SlotState {
    token: Option<Token>,
    holder: String,
    acquired: MonoTime,
    renewed: MonoTime,
    expires: MonoTime,
    fence: u64,
    /// Unix ms: the highest timestamp any holder of the slot may have used.
    floor: u64,
}

/// An in-process lease store with its own clock. Clones share the store, so
/// several handles (several "nodes" in one process) contend for the same slots.
///
/// It follows the same rules as the networked stores: its clock decides expiry,
/// renew and release match on the token, the fence of a slot grows on every
/// claim, and each slot keeps its hand-over [`Floor`]. Use it in tests, in single-process programs, and as the reference the
/// behaviour suite is checked against.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use leasehold_core::{Floor, Memory, PoolName, PoolSpec, Release, Renewal, Strategy};
/// use std::time::Duration;
/// let store = Memory::new();
/// let pool = PoolSpec::new(PoolName::new("ids")?, 2, Duration::from_secs(5))?;
/// let a = store.acquire(&pool, Floor(1_000)).await.unwrap();
/// let b = store.clone().acquire(&pool, Floor(1_000)).await.unwrap();
/// assert_ne!(a.slot, b.slot);
/// assert!(matches!(store.renew(&pool, &a, Floor(2_000)).await, Renewal::Renewed { .. }));
/// // The next holder of a's slot starts after what a says it issued.
/// assert_eq!(store.release(&pool, &a, Floor(1_500)).await, Release::Released);
/// let c = store.acquire(&pool, Floor(900)).await.unwrap();
/// assert_eq!((c.slot, c.floor), (a.slot, Floor(1_500)));
/// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
/// ```
#[derive(Clone)]
pub struct Memory {
    pools: Arc<Mutex<HashMap<String, Vec<SlotState>>>>,
    /// Each pool's ID format: the first one a claim declared.
    formats: Arc<Mutex<HashMap<String, String>>>,
    clock: Arc<dyn Clock>,
    id: u64,
}

impl Memory {
    /// A new, empty store on the system clock.
    pub fn new() -> Self {
        Self::with_clock(SystemClock)
    }

    /// A new, empty store whose expiry is decided by `clock`.
    pub fn with_clock(clock: impl Clock) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Self {
            pools: Arc::default(),
            formats: Arc::default(),
            clock: Arc::new(clock),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Revokes the lease on `pool`'s `slot` as an operator would, without
    /// ever granting the slot twice: a tombstone replaces the holder's token
    /// and keeps the lease's expiry, so the holder's next renewal is `Lost`
    /// and the slot is granted again (with a bigger fence, the floor kept)
    /// only once the revoked lease would have ended. Returns whether a live
    /// lease was revoked (false for a free, expired or revoked slot).
    pub fn revoke(&self, pool: &str, slot: u32) -> bool {
        let now = self.clock.now();
        let mut pools = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
        match pools.get_mut(pool).and_then(|p| p.get_mut(slot as usize)) {
            // A revoked lease is not revoked twice: the backends answer false too.
            Some(s) if s.token.is_some_and(|t| t != TOMBSTONE) && s.expires > now => {
                s.token = Some(TOMBSTONE);
                true
            }
            _ => false,
        }
    }

    /// Forgets the lease on `pool`'s `slot`, as if the store lost it (the
    /// fence and the floor are kept): the slot is free at once while its
    /// holder learns of the loss only at its next renewal. For tests of loss
    /// handling; an operator revokes with [`Memory::revoke`].
    pub fn forget(&self, pool: &str, slot: u32) {
        let mut pools = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = pools.get_mut(pool).and_then(|p| p.get_mut(slot as usize)) {
            s.token = None;
        }
    }

    fn with_pool<T>(
        &self,
        pool: &PoolSpec,
        f: impl FnOnce(&mut Vec<SlotState>, MonoTime) -> T,
    ) -> T {
        let now = self.clock.now();
        let mut pools = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
        let slots = pools.entry(pool.name.as_str().to_owned()).or_default();
        if slots.len() < pool.size as usize {
            slots.resize(pool.size as usize, SlotState::default());
        }
        f(slots, now)
    }

    fn owned<'a>(
        slots: &'a mut [SlotState],
        grant: &Grant,
        now: MonoTime,
    ) -> Option<&'a mut SlotState> {
        slots
            .get_mut(grant.slot as usize)
            .filter(|s| s.token == Some(grant.token) && s.expires > now)
    }
}

impl Default for Memory {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Memory")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Strategy for Memory {
    async fn acquire(&self, pool: &PoolSpec, ceiling: Floor) -> Result<Grant, AcquireError> {
        if let Some(ours) = pool.id_format() {
            let mut formats = self.formats.lock().unwrap_or_else(PoisonError::into_inner);
            let recorded = formats
                .entry(pool.name.as_str().to_owned())
                .or_insert_with(|| ours.text().to_owned());
            if recorded != ours.text() {
                return Err(AcquireError::OtherIdFormat {
                    pool: pool.name.to_string(),
                    recorded: recorded.clone(),
                    ours: ours.text().to_owned(),
                });
            }
        }
        self.with_pool(pool, |slots, now| {
            let (slot, state) = slots
                .iter_mut()
                .take(pool.size as usize)
                .enumerate()
                .find(|(_, s)| s.token.is_none() || s.expires <= now)
                .ok_or_else(|| AcquireError::PoolExhausted {
                    pool: pool.name.to_string(),
                    size: pool.size,
                })?;
            let token = Token::random();
            state.token = Some(token);
            state.holder = pool.holder.clone();
            (state.acquired, state.renewed) = (now, now);
            state.expires = now + pool.ttl;
            state.fence += 1;
            let floor = Floor(state.floor);
            state.floor = state.floor.max(ceiling.0);
            Ok(Grant::new(
                u32::try_from(slot).unwrap_or(u32::MAX),
                token,
                Fence(state.fence),
                pool.ttl,
            )
            .with_floor(floor)
            .with_store_time(Duration::from_nanos(now.as_nanos())))
        })
    }

    async fn renew(&self, pool: &PoolSpec, grant: &Grant, ceiling: Floor) -> Renewal {
        self.with_pool(pool, |slots, now| match Self::owned(slots, grant, now) {
            Some(state) => {
                state.expires = now + pool.ttl;
                state.renewed = now;
                state.floor = state.floor.max(ceiling.0);
                Renewal::renewed(pool.ttl).with_store_time(Duration::from_nanos(now.as_nanos()))
            }
            None => Renewal::Lost(Reason::new(format!(
                "slot {} of pool {} is no longer held by this token (expired or taken)",
                grant.slot, pool.name
            ))),
        })
    }

    async fn release(&self, pool: &PoolSpec, grant: &Grant, issued: Floor) -> Release {
        self.with_pool(pool, |slots, now| match Self::owned(slots, grant, now) {
            Some(state) => {
                state.token = None;
                state.floor = issued.0;
                Release::Released
            }
            None => Release::NotHeld,
        })
    }

    async fn inspect(&self, pool: &PoolSpec) -> Result<Vec<SlotInfo>, InspectError> {
        Ok(self.with_pool(pool, |slots, now| {
            slots
                .iter()
                .take(pool.size as usize)
                .enumerate()
                .filter(|(_, s)| s.fence > 0)
                .map(|(i, s)| {
                    let info = SlotInfo::free(
                        u32::try_from(i).unwrap_or(u32::MAX),
                        Fence(s.fence),
                        Floor(s.floor),
                    );
                    match s.token {
                        Some(TOMBSTONE) if s.expires > now => {
                            info.revoked_until(s.expires.saturating_since(now))
                        }
                        Some(t) if s.expires > now => info
                            .held(s.holder.clone(), &t, s.expires.saturating_since(now))
                            .with_ages(
                                Some(now.saturating_since(s.renewed)),
                                Some(now.saturating_since(s.acquired)),
                            ),
                        _ => info,
                    }
                })
                .collect()
        }))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::coordinated(false, Duration::from_millis(1))
            .with_time_resolution(Duration::ZERO)
            .with_persisted_floor()
            .with_inspect()
    }

    fn identity(&self) -> String {
        format!("memory:{}", self.id)
    }
}

/// An in-process store's operator handle: its pools, slots and revokes are
/// the same as the [`Memory`] calls of those names.
impl Operate for Memory {
    fn describe(&self) -> String {
        format!("in-process memory store {}", self.id)
    }

    fn round_trip(&self) -> &'static str {
        "lock of the store"
    }

    fn durability(&self) -> Durability {
        // Nothing outlives the process, and no holder outside it can hold a
        // slot: every lease ends with the process that could generate under it.
        Durability::default()
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), OperateError>> {
        drop(self.pools.lock().unwrap_or_else(PoisonError::into_inner));
        Box::pin(std::future::ready(Ok(())))
    }

    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> BoxFuture<'a, Result<bool, OperateError>> {
        Box::pin(std::future::ready(Ok(Memory::revoke(
            self,
            pool.name.as_str(),
            slot,
        ))))
    }

    fn pools(&self) -> BoxFuture<'_, Result<Vec<String>, OperateError>> {
        let mut names: Vec<String> = self
            .pools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(_, slots)| slots.iter().any(|s| s.fence > 0))
            .map(|(name, _)| name.clone())
            .collect();
        names.sort();
        Box::pin(std::future::ready(Ok(names)))
    }

    fn checks(&self) -> BoxFuture<'_, Vec<Check>> {
        Box::pin(std::future::ready(vec![
            Check::new(Verdict::Ok, "server", self.describe()),
            Check::new(
                Verdict::Ok,
                "path",
                "one lock per call; expiry on this process's monotonic clock",
            ),
            Check::new(
                Verdict::NotApplicable,
                "durability",
                "the leases live and die with this process, and so does every holder",
            ),
        ]))
    }
}
