//! The behaviours. Each is one `pub async fn` taking a backend; each runs on a
//! fresh, randomly named pool.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_core::{
    AcquireError, BoxFuture, Capabilities, Elector, Fence, Floor, Grant, IdFormat, Leader,
    LeaderConfig, LeaseConfig, LeaseManager, LeaseState, PoolName, PoolSpec, Release, Renewal,
    StartError, Token,
};

use crate::backend::{Backend, Store};
use crate::proxy::{Fault, FaultProxy};

/// What a behaviour needs from a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// Any coordinated store.
    Store,
    /// A networked store (the fault proxy goes in front of it).
    Network,
    /// A backend that can delete a lease behind its holder's back.
    Revoke,
    /// A store that persists each slot's hand-over floor.
    Floor,
    /// A strategy that lists its slots ([`Capabilities::inspects`]) on a
    /// backend that can revoke.
    Inspect,
}

/// The result of one behaviour.
pub type Outcome = Result<(), String>;

/// One named behaviour.
#[derive(Clone, Copy)]
pub struct Behaviour {
    /// The test name.
    pub name: &'static str,
    /// What it needs.
    pub needs: Needs,
    /// Runs it.
    pub run: fn(Arc<dyn Backend>) -> BoxFuture<'static, Outcome>,
}

macro_rules! behaviours {
    ($($needs:ident $name:ident),* $(,)?) => {
        /// Every behaviour of the suite.
        pub fn all() -> Vec<Behaviour> {
            vec![$(Behaviour {
                name: stringify!($name),
                needs: Needs::$needs,
                run: |b| Box::pin($name(b)),
            }),*]
        }
    };
}

behaviours! {
    Store whole_pool_concurrent_acquirers_get_distinct_slots,
    Store oversubscribed_pool_gives_distinct_slots_then_exhausted,
    Store full_pool_answers_retryable_exhausted,
    Store renew_keeps_the_slot_past_the_original_ttl,
    Store renew_is_idempotent,
    Store renew_after_expiry_and_takeover_is_lost,
    Store stale_release_never_frees_the_new_holders_slot,
    Store fence_strictly_grows_across_holders,
    Store released_slot_is_immediately_acquirable,
    Store concurrent_renew_and_acquire_keep_invariants,
    Store manager_holds_renews_and_releases,
    Store manager_restart_releases_the_orphaned_lease,
    Network silent_store_gives_retry_within_timeout,
    Network dropped_connections_give_retry,
    Network unreachable_store_acquire_is_retryable,
    Network renewal_recovers_after_the_fault_heals,
    Revoke revoked_lease_is_lost_on_next_renewal,
    Revoke revoked_slot_stays_taken_until_the_old_expiry,
    Floor floor_is_kept_across_holders,
    Inspect inspect_shows_holders_fences_floors_and_tombstones,
    Inspect followers_observe_the_leader_and_its_fence,
    Store electors_never_lead_at_once,
    Store a_claim_declaring_another_id_format_is_refused,
}

/// Selects the behaviours a backend with `caps` (and `can_revoke`) runs.
pub fn select(caps: &Capabilities, can_revoke: bool) -> Vec<Behaviour> {
    all()
        .into_iter()
        .filter(|b| match b.needs {
            Needs::Store => caps.coordinated,
            Needs::Network => caps.coordinated && caps.networked,
            Needs::Revoke => caps.coordinated && can_revoke,
            Needs::Floor => caps.coordinated && caps.persists_floor,
            Needs::Inspect => caps.coordinated && caps.inspects && can_revoke,
        })
        .collect()
}

/// The prefix of an outcome that proves nothing either way: the machine (the
/// test or the store) stalled for longer than a lease's TTL, so the store may
/// rightly have expired a lease the test then expected to be live. The runner
/// repeats such a test on a fresh pool, up to [`STARVED_ATTEMPTS`] times; a
/// test starved every time fails (a bug that always looks like starvation
/// cannot pass).
pub const STARVED: &str = "starved: ";

/// How many times the runner tries a test that came back starved.
pub const STARVED_ATTEMPTS: u32 = 5;

/// A grant and the instant its request was sent. The store counted its TTL
/// from no earlier than that, so the lease is surely live until
/// `sent + ttl`: the bound every "still held" check is judged by, taken from
/// readings, not from a guess about how loaded the machine is.
struct Held {
    grant: Grant,
    sent: Instant,
}

impl Held {
    /// After a `Renewed { ttl }` to a renewal sent at `sent`.
    fn renewed(&mut self, sent: Instant, ttl: Duration) {
        self.grant.ttl = ttl;
        self.sent = sent;
    }

    /// `Ok` when `ok`; otherwise a failure if the lease was surely live when
    /// the answer came back, and a starved outcome if it may have expired.
    fn judge(&self, ok: bool, msg: impl FnOnce() -> String) -> Outcome {
        if ok {
            return Ok(());
        }
        // Read after the answer arrived: later than the answer, which can
        // only turn a failure into a starved run, never the reverse.
        let at = Instant::now();
        if at < self.sent + self.grant.ttl {
            Err(msg())
        } else {
            Err(format!(
                "{STARVED}{} (judged {:?} after the lease's request was sent; TTL {:?})",
                msg(),
                at - self.sent,
                self.grant.ttl
            ))
        }
    }
}

/// A fresh pool name: `t` and 12 random hex digits.
pub fn fresh_pool_name() -> PoolName {
    let hex = Token::random().to_hex();
    PoolName::new(format!("t{}", &hex[..12])).expect("valid pool name")
}

/// A pool of `size` slots with `ttl` under a fresh name
/// ([`fresh_pool_name`]): every test gets a namespace of its own.
pub fn fresh_pool(size: u32, ttl: Duration) -> Result<PoolSpec, String> {
    PoolSpec::new(fresh_pool_name(), size, ttl).map_err(|e| format!("pool spec: {e}"))
}

/// The shortest TTL worth testing expiry with on this backend.
fn short_ttl(caps: &Capabilities) -> Duration {
    caps.min_ttl.max(Duration::from_millis(400))
}

struct Ctx {
    backend: Arc<dyn Backend>,
    store: Store,
    pool: PoolSpec,
}

impl Ctx {
    async fn new(
        backend: Arc<dyn Backend>,
        size: u32,
        ttl: Option<Duration>,
    ) -> Result<Self, String> {
        let store = backend.connect().await?;
        let caps = store.capabilities_dyn();
        let ttl = ttl.unwrap_or_else(|| short_ttl(&caps));
        let pool = fresh_pool(size, ttl)?;
        backend.prepare(&pool).await?;
        Ok(Self {
            backend,
            store,
            pool,
        })
    }

    async fn another(&self) -> Result<Store, String> {
        self.backend.connect().await
    }

    async fn acquire(&self) -> Result<Grant, String> {
        self.store
            .acquire_dyn(&self.pool, Floor::NONE)
            .await
            .map_err(|e| format!("acquire: {e}"))
    }

    /// Acquires on `store`, noting when the request was sent.
    async fn hold(&self, store: &Store) -> Result<Held, String> {
        let sent = Instant::now();
        let grant = store
            .acquire_dyn(&self.pool, Floor::NONE)
            .await
            .map_err(|e| format!("acquire: {e}"))?;
        Ok(Held { grant, sent })
    }

    /// Polls `acquire` on `store` until it succeeds (the previous holder's
    /// lease expired) or `limit` passes.
    async fn acquire_after_expiry(&self, store: &Store) -> Result<Grant, String> {
        Ok(self.hold_after_expiry(store).await?.grant)
    }

    /// [`Ctx::acquire_after_expiry`], noting when the successful request was
    /// sent.
    async fn hold_after_expiry(&self, store: &Store) -> Result<Held, String> {
        let limit = self.pool.ttl() * 4 + Duration::from_secs(5);
        let start = Instant::now();
        loop {
            let sent = Instant::now();
            match store.acquire_dyn(&self.pool, Floor::NONE).await {
                Ok(grant) => return Ok(Held { grant, sent }),
                Err(e) if e.is_retryable() && start.elapsed() < limit => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(format!("no takeover within {limit:?}: {e}")),
            }
        }
    }
}

/// Races `n` acquirers over `connections` connections; returns the grants and
/// the errors.
async fn race(
    ctx: &Ctx,
    n: usize,
    connections: usize,
) -> Result<(Vec<Grant>, Vec<AcquireError>), String> {
    let mut stores = vec![ctx.store.clone()];
    for _ in 1..connections {
        stores.push(ctx.another().await?);
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let store = stores[i % stores.len()].clone();
        let pool = ctx.pool.clone();
        let barrier = barrier.clone();
        tasks.spawn(async move {
            barrier.wait().await;
            store.acquire_dyn(&pool, Floor::NONE).await
        });
    }
    let mut grants = Vec::new();
    let mut errors = Vec::new();
    while let Some(r) = tasks.join_next().await {
        match r.map_err(|e| e.to_string())? {
            Ok(g) => grants.push(g),
            Err(e) => errors.push(e),
        }
    }
    Ok((grants, errors))
}

fn distinct(grants: &[Grant]) -> Result<(), String> {
    let slots: HashSet<u32> = grants.iter().map(|g| g.slot).collect();
    ensure!(
        slots.len() == grants.len(),
        "duplicate slots among {} grants",
        grants.len()
    );
    let tokens: HashSet<Token> = grants.iter().map(|g| g.token).collect();
    ensure!(tokens.len() == grants.len(), "duplicate tokens");
    Ok(())
}

/// 64 acquirers on 4 connections race for a pool of 64: every one gets a
/// slot, all slots distinct, the whole pool used.
pub async fn whole_pool_concurrent_acquirers_get_distinct_slots(b: Arc<dyn Backend>) -> Outcome {
    let ctx = Ctx::new(b, 64, Some(Duration::from_secs(60))).await?;
    let (grants, errors) = race(&ctx, 64, 4).await?;
    distinct(&grants)?;
    // A store that did not answer within the operation timeout is a
    // retryable outcome a stalled machine produces too: such a run shows
    // nothing and is repeated; any other error fails it.
    if !errors.is_empty()
        && errors
            .iter()
            .all(|e| matches!(e, AcquireError::Unreachable(_)))
    {
        return Err(format!(
            "{STARVED}{} acquirers found the store unreachable, first: {}",
            errors.len(),
            errors[0]
        ));
    }
    ensure!(
        errors.is_empty(),
        "{} acquirers failed, first: {}",
        errors.len(),
        errors[0]
    );
    distinct(&grants)?;
    ensure!(grants.iter().all(|g| g.slot < 64), "slot out of range");
    Ok(())
}

/// 96 acquirers race for 64 slots: 64 distinct grants, 32 retryable
/// `PoolExhausted` (or contention) errors, nothing else.
pub async fn oversubscribed_pool_gives_distinct_slots_then_exhausted(
    b: Arc<dyn Backend>,
) -> Outcome {
    let ctx = Ctx::new(b, 64, Some(Duration::from_secs(60))).await?;
    let (mut grants, errors) = race(&ctx, 96, 4).await?;
    distinct(&grants)?;
    ensure!(
        errors.iter().all(AcquireError::is_retryable),
        "non-retryable error: {:?}",
        errors.iter().find(|e| !e.is_retryable())
    );
    // Contention may have turned some winners away while slots were still free:
    // those acquire on a second try; the pool then fills exactly.
    for _ in 0..errors.len() {
        match ctx.store.acquire_dyn(&ctx.pool, Floor::NONE).await {
            Ok(g) => grants.push(g),
            Err(AcquireError::PoolExhausted { .. }) => break,
            Err(e) => return Err(format!("unexpected error on retry: {e}")),
        }
    }
    distinct(&grants)?;
    ensure!(
        grants.len() == 64,
        "pool of 64 filled with {} grants",
        grants.len()
    );
    Ok(())
}

/// Filling the pool then asking once more gives `PoolExhausted`, which is
/// retryable.
pub async fn full_pool_answers_retryable_exhausted(b: Arc<dyn Backend>) -> Outcome {
    let ctx = Ctx::new(b, 3, Some(Duration::from_secs(60))).await?;
    let mut grants = Vec::new();
    for _ in 0..3 {
        grants.push(ctx.acquire().await?);
    }
    distinct(&grants)?;
    match ctx.store.acquire_dyn(&ctx.pool, Floor::NONE).await {
        Err(e @ AcquireError::PoolExhausted { .. }) => {
            ensure!(e.is_retryable(), "PoolExhausted must be retryable");
            Ok(())
        }
        other => Err(format!("expected PoolExhausted, got {other:?}")),
    }
}

/// Renewing every ttl/4 keeps the slot well past the original TTL: a rival
/// never gets it.
pub async fn renew_keeps_the_slot_past_the_original_ttl(b: Arc<dyn Backend>) -> Outcome {
    let ctx = Ctx::new(b, 1, None).await?;
    let rival = ctx.another().await?;
    let mut held = ctx.hold(&ctx.store).await?;
    let start = Instant::now();
    while start.elapsed() < ctx.pool.ttl() * 2 {
        tokio::time::sleep(ctx.pool.ttl() / 4).await;
        let sent = Instant::now();
        match ctx
            .store
            .renew_dyn(&ctx.pool, &held.grant, Floor::NONE)
            .await
        {
            Renewal::Renewed { ttl, .. } => {
                ensure!(ttl > Duration::ZERO, "renewed with zero ttl");
                held.renewed(sent, ttl);
            }
            other => {
                return held.judge(false, || {
                    format!("renewal {:?} into the lease: {other:?}", start.elapsed())
                });
            }
        }
        let r = rival.acquire_dyn(&ctx.pool, Floor::NONE).await;
        held.judge(matches!(r, Err(AcquireError::PoolExhausted { .. })), || {
            format!("rival acquired a renewed slot: {r:?}")
        })?;
    }
    Ok(())
}

/// A renewal whose answer was lost is retried: renewing twice in a row (and
/// concurrently) answers `Renewed` each time.
pub async fn renew_is_idempotent(b: Arc<dyn Backend>) -> Outcome {
    let ctx = Ctx::new(b, 2, Some(Duration::from_secs(30))).await?;
    let grant = ctx.acquire().await?;
    for _ in 0..2 {
        let r = ctx.store.renew_dyn(&ctx.pool, &grant, Floor::NONE).await;
        ensure!(
            matches!(r, Renewal::Renewed { .. }),
            "repeated renewal: {r:?}"
        );
    }
    let (a, b2) = tokio::join!(
        ctx.store.renew_dyn(&ctx.pool, &grant, Floor::NONE),
        ctx.store.renew_dyn(&ctx.pool, &grant, Floor::NONE)
    );
    ensure!(
        matches!(
            (&a, &b2),
            (Renewal::Renewed { .. }, Renewal::Renewed { .. })
        ),
        "concurrent renewals: {a:?} {b2:?}"
    );
    Ok(())
}

/// After the lease expires and a rival takes the slot, the old holder's
/// renewal answers `Lost` (never `Renewed`).
pub async fn renew_after_expiry_and_takeover_is_lost(b: Arc<dyn Backend>) -> Outcome {
    let ctx = Ctx::new(b, 1, None).await?;
    let rival = ctx.another().await?;
    let old = ctx.acquire().await?;
    let new = ctx.hold_after_expiry(&rival).await?;
    ensure!(
        new.grant.slot == old.slot && new.grant.token != old.token,
        "takeover grant {:?}",
        new.grant
    );
    let r = ctx.store.renew_dyn(&ctx.pool, &old, Floor::NONE).await;
    ensure!(
        matches!(r, Renewal::Lost(_)),
        "stale renewal answered {r:?}"
    );
    let r = rival.renew_dyn(&ctx.pool, &new.grant, Floor::NONE).await;
    new.judge(matches!(r, Renewal::Renewed { .. }), || {
        format!("new holder's renewal answered {r:?}")
    })
}

/// A stale holder's release never frees the slot of the new holder.
pub async fn stale_release_never_frees_the_new_holders_slot(b: Arc<dyn Backend>) -> Outcome {
    let ctx = Ctx::new(b, 1, None).await?;
    let rival = ctx.another().await?;
    let old = ctx.acquire().await?;
    let new = ctx.hold_after_expiry(&rival).await?;
    let r = ctx.store.release_dyn(&ctx.pool, &old, Floor::NONE).await;
    ensure!(r == Release::NotHeld, "stale release answered {r:?}");
    let r = ctx.store.acquire_dyn(&ctx.pool, Floor::NONE).await;
    new.judge(matches!(r, Err(AcquireError::PoolExhausted { .. })), || {
        format!("slot was freed by a stale release: {r:?}")
    })?;
    let r = rival.renew_dyn(&ctx.pool, &new.grant, Floor::NONE).await;
    new.judge(matches!(r, Renewal::Renewed { .. }), || {
        format!("new holder lost its slot: {r:?}")
    })
}

/// The fence of a slot strictly grows across holders, after a release and
/// after an expiry, and a renewal does not change who holds it.
pub async fn fence_strictly_grows_across_holders(b: Arc<dyn Backend>) -> Outcome {
    let ctx = Ctx::new(b, 1, None).await?;
    let rival = ctx.another().await?;
    let first = ctx.acquire().await?;
    let r = ctx.store.release_dyn(&ctx.pool, &first, Floor::NONE).await;
    ensure!(r == Release::Released, "release answered {r:?}");
    let second = rival
        .acquire_dyn(&ctx.pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        second.fence > first.fence,
        "fence {} after {}",
        second.fence,
        first.fence
    );
    let third = ctx.acquire_after_expiry(&ctx.store).await?;
    ensure!(
        third.fence > second.fence,
        "fence {} after {}",
        third.fence,
        second.fence
    );
    ensure!(third.fence > Fence(0), "fence must be positive");
    Ok(())
}

/// A released slot can be acquired at once, without waiting for its TTL.
pub async fn released_slot_is_immediately_acquirable(b: Arc<dyn Backend>) -> Outcome {
    let ctx = Ctx::new(b, 1, Some(Duration::from_secs(60))).await?;
    let g = ctx.acquire().await?;
    let r = ctx.store.release_dyn(&ctx.pool, &g, Floor::NONE).await;
    ensure!(r == Release::Released, "release answered {r:?}");
    let again = ctx.store.release_dyn(&ctx.pool, &g, Floor::NONE).await;
    ensure!(
        again == Release::NotHeld,
        "second release answered {again:?}"
    );
    let next = ctx
        .another()
        .await?
        .acquire_dyn(&ctx.pool, Floor::NONE)
        .await;
    ensure!(next.is_ok(), "released slot not acquirable: {next:?}");
    Ok(())
}

/// Holders renew in a loop while acquirers race for the rest of the pool:
/// every renewal succeeds, no acquirer gets a held slot, the pool fills
/// exactly.
pub async fn concurrent_renew_and_acquire_keep_invariants(b: Arc<dyn Backend>) -> Outcome {
    let ctx = Ctx::new(b, 16, Some(Duration::from_secs(60))).await?;
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(ctx.acquire().await?);
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut renewers = tokio::task::JoinSet::new();
    for g in held.clone() {
        let (store, pool, stop) = (ctx.store.clone(), ctx.pool.clone(), stop.clone());
        renewers.spawn(async move {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || n == 0 {
                match store.renew_dyn(&pool, &g, Floor::NONE).await {
                    Renewal::Renewed { .. } => n += 1,
                    other => return Err(format!("renewal of slot {} answered {other:?}", g.slot)),
                }
                tokio::task::yield_now().await;
            }
            Ok(n)
        });
    }
    let (grants, errors) = race(&ctx, 24, 3).await?;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    while let Some(r) = renewers.join_next().await {
        r.map_err(|e| e.to_string())??;
    }
    let mut all = held.clone();
    all.extend(grants.iter().cloned());
    distinct(&all)?;
    ensure!(
        errors.iter().all(AcquireError::is_retryable),
        "non-retryable error among {errors:?}"
    );
    ensure!(
        grants.len() <= 8,
        "{} acquirers won 8 free slots",
        grants.len()
    );
    Ok(())
}

fn manager_config(pool: &PoolSpec) -> Result<LeaseConfig, String> {
    LeaseConfig::builder(pool.name().as_str())
        .pool_size(pool.size())
        .ttl(pool.ttl())
        .renew_interval(pool.ttl() / 4)
        .safety_margin(pool.ttl() / 5)
        .acquire_timeout(Duration::from_secs(20))
        .build()
        .map_err(|e| e.to_string())
}

/// The manager blocks until it holds a lease, keeps it past the TTL by
/// renewing, and on shutdown closes the gate and releases the slot.
pub async fn manager_holds_renews_and_releases(b: Arc<dyn Backend>) -> Outcome {
    let ctx = Ctx::new(b, 1, None).await?;
    let manager = LeaseManager::start(ctx.store.clone(), manager_config(&ctx.pool)?)
        .await
        .map_err(|e| e.to_string())?;
    let gate = manager.gate();
    ensure!(gate.check_now().is_ok(), "gate closed right after start");
    tokio::time::sleep(ctx.pool.ttl() * 2).await;
    if gate.check_now().is_err() {
        // Renewals every TTL/4 failed for most of a TTL: on a loaded machine
        // that is a stall, not a verdict. A bug that always loses is caught
        // by every attempt starving.
        let state = manager.state();
        manager.shutdown().await;
        return Err(format!(
            "{STARVED}gate closed after 2 TTLs: renewals failed ({state:?})"
        ));
    }
    ensure!(
        matches!(manager.state(), LeaseState::Held { .. }),
        "state {:?}",
        manager.state()
    );
    let released = manager.shutdown().await;
    ensure!(
        released == Some(Release::Released),
        "shutdown released: {released:?}"
    );
    ensure!(gate.check_now().is_err(), "gate open after shutdown");
    let next = ctx
        .another()
        .await?
        .acquire_dyn(&ctx.pool, Floor::NONE)
        .await;
    ensure!(next.is_ok(), "slot not free after shutdown: {next:?}");
    Ok(())
}

/// A manager dropped without `shutdown` leaves an orphaned grant in the
/// process's lease cache; the next manager for the same pool and holder gives
/// it back and acquires anew. No slot leaks (the other three of four slots
/// stay free), and a re-granted slot carries a higher fence, since code of
/// the dropped holder may still carry the old one.
pub async fn manager_restart_releases_the_orphaned_lease(b: Arc<dyn Backend>) -> Outcome {
    let ctx = Ctx::new(b, 4, Some(Duration::from_secs(30))).await?;
    let first = LeaseManager::start(ctx.store.clone(), manager_config(&ctx.pool)?)
        .await
        .map_err(|e| e.to_string())?;
    let before = first.gate().view();
    drop(first);
    tokio::task::yield_now().await;
    let second = LeaseManager::start(ctx.store.clone(), manager_config(&ctx.pool)?)
        .await
        .map_err(|e| e.to_string())?;
    let after = second.gate().view();
    ensure!(
        after.slot != before.slot || after.fence > before.fence,
        "restart kept slot {} with fence {} (was {})",
        after.slot,
        after.fence,
        before.fence
    );
    let other = ctx.another().await?;
    for i in 0..3 {
        if let Err(e) = other.acquire_dyn(&ctx.pool, Floor::NONE).await {
            second.shutdown().await;
            return Err(format!(
                "acquire {} of the 3 free slots failed, the orphaned lease leaked: {e}",
                i + 1
            ));
        }
    }
    second.shutdown().await;
    Ok(())
}

const OP_TIMEOUT: Duration = Duration::from_secs(1);

async fn proxied(b: &Arc<dyn Backend>) -> Result<(FaultProxy, Ctx), String> {
    let addr = b
        .store_addr()
        .ok_or("networked backend without a store address")?;
    let proxy = FaultProxy::start(addr).await.map_err(|e| e.to_string())?;
    let mut ctx = Ctx::new(b.clone(), 2, Some(Duration::from_secs(30))).await?;
    ctx.store = b.connect_via(proxy.addr(), OP_TIMEOUT).await?;
    Ok((proxy, ctx))
}

/// Renewal through a silent connection answers `Retry` within the operation
/// timeout (plus slack), never hangs and never answers `Lost`.
pub async fn silent_store_gives_retry_within_timeout(b: Arc<dyn Backend>) -> Outcome {
    renewals_under_fault_give_prompt_retry(b, Fault::Blackhole).await
}

/// Renewal while connections are being reset answers `Retry`, never `Lost`.
pub async fn dropped_connections_give_retry(b: Arc<dyn Backend>) -> Outcome {
    renewals_under_fault_give_prompt_retry(b, Fault::Drop).await
}

/// Under `fault`, two renewals in a row answer `Retry` within three
/// operation timeouts each.
///
/// "Within" is judged on the runtime's own timer, not by wall-clock readings:
/// `tokio::time::timeout` polls the call before its own timer, so when a
/// loaded machine starves the runtime past both the call's operation timeout
/// and the test's bound, the call's timeout is seen first and answers in time.
/// Only a call that is still pending once three operation timeouts have passed
/// on that timer (a hang, or a timeout not applied) fails.
async fn renewals_under_fault_give_prompt_retry(b: Arc<dyn Backend>, fault: Fault) -> Outcome {
    let (proxy, ctx) = proxied(&b).await?;
    let grant = ctx.acquire().await?;
    proxy.set(fault);
    for _ in 0..2 {
        let r = tokio::time::timeout(
            OP_TIMEOUT * 3,
            ctx.store.renew_dyn(&ctx.pool, &grant, Floor::NONE),
        )
        .await
        .map_err(|_| {
            format!(
                "renewal under {fault:?} still pending after {:?} (operation timeout {OP_TIMEOUT:?})",
                OP_TIMEOUT * 3
            )
        })?;
        ensure!(
            matches!(r, Renewal::Retry(_)),
            "renewal under {fault:?} answered {r:?}"
        );
    }
    Ok(())
}

/// Acquisition through a silent or dropped connection fails with a retryable
/// error within three operation timeouts (judged on the runtime's timer, as
/// in [`renewals_under_fault_give_prompt_retry`]).
pub async fn unreachable_store_acquire_is_retryable(b: Arc<dyn Backend>) -> Outcome {
    let (proxy, ctx) = proxied(&b).await?;
    for fault in [Fault::Blackhole, Fault::Drop] {
        proxy.set(fault);
        let r = tokio::time::timeout(
            OP_TIMEOUT * 3,
            ctx.store.acquire_dyn(&ctx.pool, Floor::NONE),
        )
        .await
        .map_err(|_| {
            format!(
                "acquire under {fault:?} still pending after {:?} (operation timeout {OP_TIMEOUT:?})",
                OP_TIMEOUT * 3
            )
        })?;
        match r {
            Err(e) if e.is_retryable() => {}
            other => return Err(format!("acquire under {fault:?} answered {other:?}")),
        }
    }
    Ok(())
}

/// After a partition heals, renewal of a still-valid lease answers `Renewed`.
pub async fn renewal_recovers_after_the_fault_heals(b: Arc<dyn Backend>) -> Outcome {
    let (proxy, ctx) = proxied(&b).await?;
    let grant = ctx.acquire().await?;
    proxy.set(Fault::Blackhole);
    let r = ctx.store.renew_dyn(&ctx.pool, &grant, Floor::NONE).await;
    ensure!(
        matches!(r, Renewal::Retry(_)),
        "silent store answered {r:?}"
    );
    proxy.set(Fault::Drop);
    proxy.set(Fault::Pass);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match ctx.store.renew_dyn(&ctx.pool, &grant, Floor::NONE).await {
            Renewal::Renewed { .. } => return Ok(()),
            Renewal::Retry(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            other => return Err(format!("after healing, renewal answered {other:?}")),
        }
    }
}

/// A lease deleted behind the holder's back is `Lost` on the next renewal.
pub async fn revoked_lease_is_lost_on_next_renewal(b: Arc<dyn Backend>) -> Outcome {
    let ctx = Ctx::new(b, 2, Some(Duration::from_secs(30))).await?;
    let grant = ctx.acquire().await?;
    let revoke = ctx
        .backend
        .revoke(&ctx.pool, grant.slot)
        .ok_or("backend cannot revoke")?;
    revoke.await?;
    let r = ctx.store.renew_dyn(&ctx.pool, &grant, Floor::NONE).await;
    ensure!(
        matches!(r, Renewal::Lost(_)),
        "renewal after revoke answered {r:?}"
    );
    Ok(())
}

/// A revoke cannot double-grant: it leaves a tombstone that keeps the revoked
/// lease's expiry, so nobody claims the slot while the revoked holder may
/// still be generating (until its next renewal, or its local deadline if its
/// renewals fail). The holder's next renewal is `Lost`, and the slot is
/// claimed again, with a bigger fence, once the old lease has expired.
pub async fn revoked_slot_stays_taken_until_the_old_expiry(b: Arc<dyn Backend>) -> Outcome {
    let ttl = {
        let store = b.connect().await?;
        short_ttl(&store.capabilities_dyn()).max(Duration::from_secs(2))
    };
    let ctx = Ctx::new(b, 1, Some(ttl)).await?;
    let rival = ctx.another().await?;
    let held = ctx.hold(&ctx.store).await?;
    let revoke = ctx
        .backend
        .revoke(&ctx.pool, held.grant.slot)
        .ok_or("backend cannot revoke")?;
    revoke.await?;
    let r = rival.acquire_dyn(&ctx.pool, Floor::NONE).await;
    held.judge(r.is_err(), || {
        format!("a rival was granted the revoked slot before its old expiry: {r:?}")
    })?;
    if let Err(e) = &r {
        ensure!(
            e.is_retryable(),
            "acquiring a revoked slot answered a final error: {e}"
        );
    }
    let renewal = ctx
        .store
        .renew_dyn(&ctx.pool, &held.grant, Floor::NONE)
        .await;
    ensure!(
        matches!(renewal, Renewal::Lost(_)),
        "renewal after revoke answered {renewal:?}"
    );
    let next = ctx.acquire_after_expiry(&rival).await?;
    ensure!(
        next.fence > held.grant.fence,
        "the next holder of a revoked slot got fence {}, not above {}",
        next.fence,
        held.grant.fence
    );
    Ok(())
}

/// DESIGN.md timing rule 8: the slot's floor outlives its holders. Acquire and
/// renew raise it to the reported ceiling (never lower it), release sets it to
/// what was issued, and the next grant, after a release or an expiry,
/// carries it.
pub async fn floor_is_kept_across_holders(b: Arc<dyn Backend>) -> Outcome {
    let ctx = Ctx::new(b, 1, None).await?;
    let rival = ctx.another().await?;
    let sent = Instant::now();
    let first = ctx
        .store
        .acquire_dyn(&ctx.pool, Floor(1_000))
        .await
        .map_err(|e| format!("acquire: {e}"))?;
    ensure!(
        first.floor <= Floor(1_000),
        "fresh slot with floor {:?}",
        first.floor
    );
    let mut held = Held { grant: first, sent };
    for ceiling in [5_000, 2_000] {
        let sent = Instant::now();
        let r = ctx
            .store
            .renew_dyn(&ctx.pool, &held.grant, Floor(ceiling))
            .await;
        held.judge(matches!(r, Renewal::Renewed { .. }), || {
            format!("renewal answered {r:?}")
        })?;
        if let Renewal::Renewed { ttl, .. } = r {
            held.renewed(sent, ttl);
        }
    }
    let first = held.grant.clone();
    let r = ctx.store.release_dyn(&ctx.pool, &first, Floor(3_000)).await;
    held.judge(r == Release::Released, || format!("release answered {r:?}"))?;
    let sent = Instant::now();
    let second = rival
        .acquire_dyn(&ctx.pool, Floor(2_500))
        .await
        .map_err(|e| format!("acquire after release: {e}"))?;
    ensure!(
        second.floor == Floor(3_000),
        "after a release reporting 3000 the next grant carries {:?}",
        second.floor
    );
    let r = rival.renew_dyn(&ctx.pool, &second, Floor(9_000)).await;
    let second = Held {
        grant: second,
        sent,
    };
    second.judge(matches!(r, Renewal::Renewed { .. }), || {
        format!("renewal answered {r:?}")
    })?;
    // A stale release (the first holder's token) changes nothing.
    let r = ctx.store.release_dyn(&ctx.pool, &first, Floor(1)).await;
    ensure!(r == Release::NotHeld, "stale release answered {r:?}");
    let third = ctx.acquire_after_expiry(&ctx.store).await?;
    ensure!(
        third.floor == Floor(9_000),
        "after an expiry the next grant carries {:?}, not the last ceiling 9000",
        third.floor
    );
    Ok(())
}

/// `inspect` shows each slot ever claimed: a held slot's holder,
/// token prefix (8 hex digits, never more), fence, floor and time left; a
/// revoked slot's tombstone (no holder, but taken until the old expiry); a
/// released slot's floor and no holder; never a slot nobody claimed.
/// Followers of a leader pool read the leader from it. Times are on the
/// store's clock (Kubernetes: the observer's), so they are only bounded by
/// the TTL, never compared with this process's clock.
pub async fn inspect_shows_holders_fences_floors_and_tombstones(b: Arc<dyn Backend>) -> Outcome {
    let ttl = Duration::from_secs(30);
    let ctx = Ctx::new(b, 3, Some(ttl)).await?;
    let caps = ctx.store.capabilities_dyn();
    // Expiries are kept at the store's resolution (SQLite: text with
    // milliseconds, differences through julianday's floating point).
    let slack = caps.time_resolution * 2 + Duration::from_millis(1);
    let floors = caps.persists_floor;
    let sent = Instant::now();
    let acquire = || async {
        ctx.store
            .acquire_dyn(&ctx.pool, Floor(5_000))
            .await
            .map_err(|e| format!("acquire: {e}"))
    };
    let a = acquire().await?;
    let bb = acquire().await?;
    let r = ctx.store.renew_dyn(&ctx.pool, &a, Floor(7_000)).await;
    ensure!(matches!(r, Renewal::Renewed { .. }), "renewal: {r:?}");
    let revoke = ctx
        .backend
        .revoke(&ctx.pool, bb.slot)
        .ok_or("backend cannot revoke")?;
    revoke.await?;
    let slots = ctx
        .store
        .inspect_dyn(&ctx.pool)
        .await
        .map_err(|e| format!("inspect: {e}"))?;
    if sent.elapsed() >= ttl {
        return Err(format!(
            "{STARVED}the leases may have expired before inspect"
        ));
    }
    let listed: Vec<u32> = slots.iter().map(|i| i.slot).collect();
    let mut claimed = vec![a.slot, bb.slot];
    claimed.sort_unstable();
    ensure!(
        listed == claimed,
        "inspect listed slots {listed:?}, not {claimed:?}"
    );
    for info in &slots {
        let shown = format!("{info:?}");
        for token in [a.token, bb.token] {
            ensure!(
                !shown.contains(&token.to_hex()[8..]),
                "inspect shows more than 8 hex digits of a token: {shown}"
            );
        }
    }
    let of = |slot: u32| {
        slots
            .iter()
            .find(|i| i.slot == slot)
            .ok_or(format!("slot {slot} missing"))
    };
    let held = of(a.slot)?;
    ensure!(
        held.holder.as_deref() == Some(ctx.pool.holder())
            && held.token_prefix.as_deref() == Some(&a.token.to_hex()[..8])
            && held.fence == a.fence
            && (!floors || held.floor == Floor(7_000))
            && held
                .expires_in
                .is_some_and(|d| d > Duration::ZERO && d <= ttl + slack)
            && held.renewed_ago.is_some_and(|d| d <= ttl + slack)
            && held
                .held_for
                .is_none_or(|h| held.renewed_ago.is_some_and(|r| r <= h + slack)),
        "the held slot reads {held:?}"
    );
    let revoked = of(bb.slot)?;
    ensure!(
        revoked.holder.is_none()
            && revoked.token_prefix.is_none()
            && revoked.fence == bb.fence
            && revoked.expires_in.is_some_and(|d| d <= ttl + slack),
        "the revoked slot reads {revoked:?}"
    );
    let r = ctx.store.release_dyn(&ctx.pool, &a, Floor(6_000)).await;
    ensure!(r == Release::Released, "release: {r:?}");
    let slots = ctx
        .store
        .inspect_dyn(&ctx.pool)
        .await
        .map_err(|e| format!("inspect: {e}"))?;
    let freed = slots
        .iter()
        .find(|i| i.slot == a.slot)
        .ok_or("the released slot is gone from inspect")?;
    ensure!(
        freed.holder.is_none()
            && freed.token_prefix.is_none()
            && freed.expires_in.is_none()
            && (!floors || freed.floor == Floor(6_000)),
        "the released slot reads {freed:?}"
    );
    Ok(())
}

/// On a leader pool (one slot), every elector, followers included,
/// learns the leader's holder identity and fence from `inspect`
/// (`Elector::leader`), and agrees with the leader's own term. A leadership
/// that changed hands while waiting (a machine too slow to renew) proves
/// nothing either way: starved.
pub async fn followers_observe_the_leader_and_its_fence(b: Arc<dyn Backend>) -> Outcome {
    let ttl = {
        let store = b.connect().await?;
        short_ttl(&store.capabilities_dyn()).max(Duration::from_secs(2))
    };
    let ctx = Ctx::new(b, 1, Some(ttl)).await?;
    let terms: Arc<std::sync::Mutex<Vec<(String, Fence)>>> = Arc::default();
    let mut electors: Vec<Elector> = Vec::new();
    for i in 0..3 {
        let holder = format!("replica-{i}");
        let config = LeaderConfig::builder(ctx.pool.name().as_str())
            .holder(holder.clone())
            .ttl(ttl)
            .renew_interval(ttl / 4)
            .safety_margin(ttl / 5)
            .acquire_timeout(ttl)
            .build()
            .map_err(|e| e.to_string())?;
        let terms = terms.clone();
        let elector = Leader::builder(ctx.another().await?, config)
            .observe_every(ttl / 8)
            .on_started_leading(move |l| {
                terms
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((holder.clone(), l.fence()));
            })
            .campaign(|leadership| async move { leadership.lost().await });
        electors.push(elector);
    }
    let give_up = Instant::now() + ttl * 10 + Duration::from_secs(10);
    let outcome = loop {
        let terms = terms
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let seen: Vec<_> = electors.iter().map(Elector::leader).collect();
        let agreed = match terms.last() {
            Some((holder, fence)) => seen.iter().all(|l| {
                l.as_ref()
                    .is_some_and(|l| &l.holder == holder && l.fence == *fence)
            }),
            None => false,
        };
        if agreed && terms.len() == 1 {
            break Ok(());
        }
        if terms.len() > 1 {
            break Err(format!(
                "{STARVED}leadership changed hands while waiting: {terms:?}"
            ));
        }
        if Instant::now() >= give_up {
            break Err(format!(
                "the electors did not agree on the leader {terms:?}: they observed {seen:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let leading = electors.iter().filter(|e| e.is_leading()).count();
    for e in electors {
        e.shutdown().await;
    }
    outcome?;
    ensure!(leading <= 1, "{leading} electors led at once");
    Ok(())
}

/// One observation of a term from inside it: between `before` and `after`
/// (readings of the test's monotonic clock around the call), the term's
/// `is_leading` answered true.
#[derive(Clone, Copy, Debug)]
struct Seen {
    before: Instant,
    after: Instant,
}

/// What the electors of [`electors_never_lead_at_once`] saw of their terms:
/// per term (elector, fence), every instant it said it led.
type TermLog = Arc<std::sync::Mutex<Vec<((usize, Fence), Vec<Seen>)>>>;

/// Two terms that surely led at one same instant, if any. A term is one
/// stretch of time (its gate closes for good when it ends), so a term seen
/// leading at two observations led at every instant between them: surely
/// from the end of its first observation to the start of its last. Two such
/// stretches of different terms that overlap are two leaders at once. A
/// stalled machine only shortens the stretches (the readings bracket every
/// call), so it can hide an overlap, never invent one.
fn overlapping_terms(log: &[((usize, Fence), Vec<Seen>)]) -> Option<String> {
    let stretches: Vec<_> = log
        .iter()
        .filter_map(|(term, seen)| {
            let (first, last) = (seen.first()?, seen.last()?);
            (first.after <= last.before).then_some((*term, first.after, last.before))
        })
        .collect();
    for (i, (a, a_from, a_to)) in stretches.iter().enumerate() {
        for (b, b_from, b_to) in &stretches[i + 1..] {
            if a.0 != b.0 && a_from.max(b_from) < a_to.min(b_to) {
                return Some(format!(
                    "elector {} (fence {}) and elector {} (fence {}) both led for {:?}",
                    a.0,
                    a.1,
                    b.0,
                    b.1,
                    *a_to.min(b_to) - *a_from.max(b_from)
                ));
            }
        }
    }
    None
}

/// Several electors campaign for one pool with a plain configuration (the
/// leader's own, which has no size): at most one leads at every instant
/// observed, while leadership changes hands by a graceful shutdown and by a
/// leader that dies without releasing. Each term records, from inside, every
/// instant it says it leads; the terms' stretches must never overlap (see
/// [`overlapping_terms`], which a loaded machine cannot fool).
pub async fn electors_never_lead_at_once(b: Arc<dyn Backend>) -> Outcome {
    let ttl = {
        let store = b.connect().await?;
        short_ttl(&store.capabilities_dyn()).max(Duration::from_secs(1))
    };
    let ctx = Ctx::new(b, 1, Some(ttl)).await?;
    let log: TermLog = Arc::default();
    let mut electors: Vec<Option<Elector>> = Vec::new();
    for i in 0..4 {
        let config = LeaderConfig::builder(ctx.pool.name().as_str())
            .holder(format!("replica-{i}"))
            .ttl(ttl)
            .renew_interval(ttl / 4)
            .safety_margin(ttl / 5)
            .acquire_timeout(ttl)
            .build()
            .map_err(|e| e.to_string())?;
        let log = log.clone();
        let elector = Leader::campaign(ctx.another().await?, config, move |leadership| {
            let log = log.clone();
            async move {
                let term = (i, leadership.fence());
                loop {
                    let before = Instant::now();
                    let leading = leadership.is_leading();
                    let after = Instant::now();
                    if !leading {
                        break;
                    }
                    {
                        let mut log = log
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        match log.iter_mut().find(|(t, _)| *t == term) {
                            Some((_, seen)) => seen.push(Seen { before, after }),
                            None => log.push((term, vec![Seen { before, after }])),
                        }
                    }
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(2)) => {}
                        () = leadership.lost() => break,
                    }
                }
            }
        });
        electors.push(Some(elector));
    }
    let outcome = hand_leadership_around(&mut electors, &log, ttl).await;
    for e in electors.into_iter().flatten() {
        e.shutdown().await;
    }
    let log = log
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    if let Some(two) = overlapping_terms(&log) {
        return Err(format!("two leaders at once: {two}"));
    }
    outcome
}

/// Waits for a leader three times, ending its leadership after it has been
/// seen leading a while: first by a graceful shutdown (the lease is released
/// and another elector may claim it at once), then by dropping it (no
/// release: the lease runs out).
async fn hand_leadership_around(
    electors: &mut [Option<Elector>],
    log: &TermLog,
    ttl: Duration,
) -> Outcome {
    let limit = ttl * 10 + Duration::from_secs(10);
    for round in 0..3 {
        let give_up = Instant::now() + limit;
        let leader = loop {
            // A term seen leading over at least a quarter of the TTL, of an
            // elector still running.
            let found = log
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .iter()
                .filter(|((i, _), _)| electors[*i].is_some())
                .find(|(_, seen)| {
                    seen.first()
                        .zip(seen.last())
                        .is_some_and(|(f, l)| l.before.duration_since(f.after) >= ttl / 4)
                })
                .map(|((i, _), _)| *i);
            if let Some(i) =
                found.filter(|i| electors[*i].as_ref().is_some_and(Elector::is_leading))
            {
                break i;
            }
            if Instant::now() >= give_up {
                return Err(format!(
                    "round {round}: no elector led for {:?} within {limit:?}",
                    ttl / 4
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let elector = electors[leader].take().ok_or("elector gone")?;
        if round == 0 {
            elector.shutdown().await;
        } else {
            drop(elector);
        }
    }
    Ok(())
}

/// Two processes of one pool that generate different ID formats (another
/// layout, or another epoch) can mint equal values even on different slots.
/// The store records the first format a claim declares for a pool, for the
/// pool's life, and refuses a claim that declares another one with a final
/// error naming both, also when no slot is held at the time, and also to a
/// lease manager configured with it. A claim of the same format, and one
/// that declares none, get slots.
pub async fn a_claim_declaring_another_id_format_is_refused(b: Arc<dyn Backend>) -> Outcome {
    let ctx = Ctx::new(b, 4, Some(Duration::from_secs(30))).await?;
    let format = |code, text: &str| IdFormat::new(code, text).map_err(|e| e.to_string());
    let ours = format(
        1,
        "suite format: 64 bits = timestamp 42 + slot 9 + counter 13; epoch 0",
    )?;
    let theirs = format(
        2,
        "suite format: 64 bits = timestamp 42 + slot 9 + counter 13; epoch 1",
    )?;
    let first_pool = ctx.pool.clone().with_id_format(ours.clone());
    let other_pool = ctx.pool.clone().with_id_format(theirs.clone());
    let first = ctx
        .store
        .acquire_dyn(&first_pool, Floor::NONE)
        .await
        .map_err(|e| format!("the first claim of the pool: {e}"))?;
    let rival = ctx.another().await?;
    let refused = |what: &str, r: Result<Grant, AcquireError>| -> Outcome {
        match r {
            Err(AcquireError::OtherIdFormat {
                pool,
                recorded,
                ours: declared,
            }) => {
                ensure!(
                    pool == ctx.pool.name().as_str()
                        && recorded == ours.text()
                        && declared == theirs.text(),
                    "{what}: the refusal names pool {pool:?}, recorded {recorded:?}, declared \
                     {declared:?}"
                );
                Ok(())
            }
            Err(e) => Err(format!("{what}: refused with another error: {e}")),
            Ok(g) => Err(format!(
                "{what}: granted slot {} (fence {}) to another ID format while the pool \
                 records {ours}",
                g.slot, g.fence
            )),
        }
    };
    refused(
        "a claim with another format while a slot is held",
        rival.acquire_dyn(&other_pool, Floor::NONE).await,
    )?;
    let same = rival
        .acquire_dyn(&first_pool, Floor::NONE)
        .await
        .map_err(|e| format!("a claim of the recorded format: {e}"))?;
    let undeclared = rival
        .acquire_dyn(&ctx.pool, Floor::NONE)
        .await
        .map_err(|e| format!("a claim that declares no format: {e}"))?;
    for g in [&first, &same, &undeclared] {
        let r = ctx.store.release_dyn(&ctx.pool, g, Floor::NONE).await;
        ensure!(r == Release::Released, "release answered {r:?}");
    }
    refused(
        "a claim with another format once every slot was released",
        rival.acquire_dyn(&other_pool, Floor::NONE).await,
    )?;
    let config = LeaseConfig::builder(ctx.pool.name().as_str())
        .pool_size(ctx.pool.size())
        .ttl(ctx.pool.ttl())
        .id_format(theirs.clone())
        .acquire_timeout(Duration::from_secs(20))
        .build()
        .map_err(|e| e.to_string())?;
    match LeaseManager::start(rival, config).await {
        Err(StartError::Acquire(AcquireError::OtherIdFormat { .. })) => Ok(()),
        Err(e) => Err(format!("a manager with another format: another error: {e}")),
        Ok(m) => {
            m.shutdown().await;
            Err("a manager with another format started".into())
        }
    }
}
