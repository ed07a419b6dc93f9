//! Store restarts, for every backend whose server this process can crash
//! and start again (`Server::kill`, `Server::restart`): what a store
//! acknowledged before it crashed (a fence, a floor, a lease) is there after
//! it restarts on a [`Settings::Durable`] server. On a [`Settings::Lossy`]
//! one, either the backend makes its own writes durable anyway (PostgreSQL:
//! the lease sessions turn `synchronous_commit` on), and the durable tests
//! run there too, or the store forgets (DESIGN.md rule 12): then connecting
//! with the defaults is refused, and with the one-timing opt-in the restart
//! guard keeps a second holder off the slot while the first may still
//! generate, for the pool's longest recorded span, and fences never repeat.
//! Each target has a private server only its binary uses; its tests take
//! turns with it, so that a restart disturbs no other test.
//!
//! A backend's test binary implements [`Stores`] and calls [`target`] per
//! server kind and setting.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_core::{
    AcquireError, BoxFuture, Floor, Grant, PoolSpec, Release, Renewal, StaticSlot,
};

use crate::servers::{Missing, ProvideError, Server, ServerKind, Settings, provide_with};
use crate::suite::{Outcome, STARVED, fresh_pool};
use crate::{Glue, Store, Target};

/// How a backend reaches the store on a restartable server.
pub trait Stores: Send + Sync + 'static {
    /// A strategy connected to the store at `url`, with its defaults (the
    /// restart guard on).
    fn connect<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<Store, String>>;

    /// Makes `pool` ready on the store at `url` (tables, rows), with what it
    /// created on disk, so that a crash cannot lose the schema itself.
    fn prepare<'a>(
        &'a self,
        url: &'a str,
        pool: &'a PoolSpec,
    ) -> BoxFuture<'a, Result<(), String>> {
        let _ = (url, pool);
        Box::pin(async { Ok(()) })
    }

    /// Whether the store reports that it can forget acknowledged writes
    /// (`None`: it cannot tell).
    fn reports_lossy<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<Option<bool>, String>> {
        let _ = url;
        Box::pin(async { Ok(None) })
    }

    /// Whether a `kind` server with [`Settings::Lossy`] forgets what this
    /// backend acknowledged (false where the backend makes its own writes
    /// durable on such a server). Picks the lossy target's tests.
    fn lossy_forgets(&self, kind: ServerKind) -> bool {
        let _ = kind;
        true
    }

    /// A strategy connected to the store at `url` that accepts a store that
    /// can forget on the promise that every holder of a pool uses one TTL
    /// and `max_clock_skew` (the restart guard on).
    fn connect_one_timing<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<Store, String>> {
        let _ = url;
        Box::pin(async { Err("this backend has no one-timing opt-in".to_owned()) })
    }

    /// Makes everything the store at `url` acknowledged so far survive a
    /// crash (a checkpoint, a snapshot, a log flush).
    fn make_durable_now<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<(), String>> {
        let _ = url;
        Box::pin(async { Err("this backend cannot flush on demand".to_owned()) })
    }

    /// Weakens the durable server at `url` until its next restart, as an
    /// operator's run-time setting that was never written to the server's
    /// configuration would (MariaDB `SET GLOBAL
    /// innodb_flush_log_at_trx_commit = 0`, Valkey `CONFIG SET appendonly
    /// no`): `Some(true)` when a crash then surely loses the claims made
    /// meanwhile, `Some(false)` when it may, `None` when the backend has no
    /// such setting.
    fn weaken_until_restart<'a>(
        &'a self,
        url: &'a str,
    ) -> BoxFuture<'a, Result<Option<bool>, String>> {
        let _ = url;
        Box::pin(async { Ok(None) })
    }

    /// Whether [`Stores::crash_without_restart`] can crash a `kind` server.
    fn can_crash_without_restart(&self, kind: ServerKind) -> bool {
        let _ = kind;
        false
    }

    /// Crashes one server process without restarting the server (a
    /// PostgreSQL backend killed with SIGKILL: the postmaster reinitialises
    /// and replays its log in place), and returns once it accepts
    /// connections again. `None`: the store has no such crash.
    fn crash_without_restart<'a>(
        &'a self,
        url: &'a str,
    ) -> Option<BoxFuture<'a, Result<(), String>>> {
        let _ = url;
        None
    }
}

/// A store on a server the tests may crash and restart.
pub struct Restartable<S> {
    stores: S,
    url: String,
    /// The server. A test holds it for its whole run: the tests of one
    /// target take turns, so that a restart disturbs no other test.
    server: tokio::sync::Mutex<Server>,
}

impl<S: Stores> Restartable<S> {
    async fn store(&self) -> Result<Store, String> {
        self.stores.connect(&self.url).await
    }

    async fn prepare(&self, pool: &PoolSpec) -> Result<(), String> {
        self.stores.prepare(&self.url, pool).await
    }

    async fn store_one_timing(&self) -> Result<Store, String> {
        self.stores.connect_one_timing(&self.url).await
    }
}

/// For the runner only, which picks the behaviours of the suite to run from
/// the capabilities of the store `connect` gives: a fixed slot's, so that it
/// picks none. The suite runs in the `conformance` binaries, on servers of
/// their own; here it would only repeat it, and be disturbed by the restarts.
impl<S: Stores> Glue for Restartable<S> {
    fn connect(&self) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async { Ok(Arc::new(StaticSlot::new(0)) as Store) })
    }
}

/// A lease surely live until `sent + ttl`: the store counted its TTL from no
/// earlier than when the request that granted or renewed it was sent.
#[derive(Clone, Copy)]
struct Live {
    sent: Instant,
    ttl: Duration,
}

impl Live {
    fn until(self) -> Instant {
        self.sent + self.ttl
    }

    /// `Ok` when `ok`; otherwise a failure if the lease was surely live when
    /// the answer came, and a starved outcome (the machine stalled past the
    /// TTL: the run proves nothing and is repeated) if it may have expired.
    fn judge(self, ok: bool, msg: impl FnOnce() -> String) -> Outcome {
        if ok {
            return Ok(());
        }
        // Read after the answer: later than it, which can only turn a
        // failure into a starved run, never the reverse.
        let at = Instant::now();
        if at < self.until() {
            Err(msg())
        } else {
            Err(format!(
                "{STARVED}{} (judged {:?} after the lease's request was sent; TTL {:?})",
                msg(),
                at - self.sent,
                self.ttl
            ))
        }
    }
}

/// Renews `grant` with `ceiling` before a crash: it must answer `Renewed`
/// while `live` is live, and `live` then moves to the renewal.
async fn renew_before_crash(
    s: &Store,
    pool: &PoolSpec,
    grant: &Grant,
    ceiling: Floor,
    live: &mut Live,
) -> Outcome {
    let sent = Instant::now();
    let r = s.renew_dyn(pool, grant, ceiling).await;
    live.judge(matches!(r, Renewal::Renewed { .. }), || {
        format!("the renewal before the crash answered {r:?}")
    })?;
    if let Renewal::Renewed { ttl, .. } = r {
        *live = Live { sent, ttl };
    }
    Ok(())
}

/// Acquires the slot of `pool` on `s` with `floor`, then renews it with
/// `ceiling` before a crash: the grant, and how long it surely lives.
async fn hold_renewed(
    s: &Store,
    pool: &PoolSpec,
    floor: Floor,
    ceiling: Floor,
) -> Result<(Grant, Live), String> {
    let (grant, mut live) = acquire_live(s, pool, floor).await?;
    renew_before_crash(s, pool, &grant, ceiling, &mut live).await?;
    Ok((grant, live))
}

/// Acquires the slot of `pool` on `s` with `floor` until granted: a store
/// that is unreachable for a moment, a pool still exhausted, or a store's
/// restart guard (every restart, durable or not, holds claims back one
/// span) only delay it. The grant, and how long it surely lives, from the
/// attempt that was granted.
async fn acquire_live(s: &Store, pool: &PoolSpec, floor: Floor) -> Result<(Grant, Live), String> {
    let mut deadline = Instant::now() + pool.ttl() * 4 + Duration::from_secs(30);
    loop {
        let sent = Instant::now();
        match s.acquire_dyn(pool, floor).await {
            Ok(grant) => {
                let ttl = grant.ttl;
                return Ok((grant, Live { sent, ttl }));
            }
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                if let AcquireError::StoreRestarted { resume_in } = e {
                    deadline = deadline.max(Instant::now() + resume_in + Duration::from_secs(30));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(format!("no grant: {e}")),
        }
    }
}

/// Crashes the server as a power cut would its process, and starts it again
/// on the same data.
fn crash_and_restart(server: &mut Server) -> Outcome {
    let what = server.describe();
    tokio::task::block_in_place(|| {
        server.kill().map_err(|e| format!("kill {what}: {e}"))?;
        server.restart().map_err(|e| format!("restart {what}: {e}"))
    })
}

/// Acquires on `s` until granted; a store that is unreachable for a moment,
/// a pool still exhausted, or a store's restart guard only delay it.
async fn acquire_after_expiry(s: &Store, pool: &PoolSpec, floor: Floor) -> Result<Grant, String> {
    acquire_live(s, pool, floor)
        .await
        .map(|(grant, _)| grant)
        .map_err(|e| format!("after the restart: {e}"))
}

/// A rival's acquisition while `live`: tried again while the store cannot be
/// reached (it was just restarted), then returned as it answered.
async fn rival_acquire(s: &Store, pool: &PoolSpec, live: Live) -> Result<Grant, AcquireError> {
    loop {
        let r = s.acquire_dyn(pool, Floor::NONE).await;
        match r {
            Err(AcquireError::Unreachable(_)) if Instant::now() < live.until() => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            r => return r,
        }
    }
}

/// The holder's renewal, tried again while it is uncertain (`Retry`) and the
/// lease is surely live.
async fn renew(s: &Store, pool: &PoolSpec, grant: &Grant, ceiling: Floor, live: Live) -> Renewal {
    loop {
        let r = s.renew_dyn(pool, grant, ceiling).await;
        match r {
            Renewal::Retry(_) if Instant::now() < live.until() => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            r => return r,
        }
    }
}

/// The fence a store hands out after a restart is bigger than every fence it
/// acknowledged before, and the floor the holder reported before the crash
/// is carried to the next holder: a restarted store never lets a new holder
/// reissue what the old one may have issued.
pub async fn a_fence_never_repeats_after_a_store_restart<S: Stores>(
    b: Arc<Restartable<S>>,
) -> Outcome {
    let mut server = b.server.lock().await;
    let pool = fresh_pool(1, Duration::from_secs(3))?;
    b.prepare(&pool).await?;
    let s = b.store().await?;
    let (first, _) = hold_renewed(&s, &pool, Floor(1_000), Floor(5_000)).await?;
    drop(s);
    crash_and_restart(&mut server)?;
    let s = b.store().await?;
    let next = acquire_after_expiry(&s, &pool, Floor(6_000)).await?;
    let r = s.release_dyn(&pool, &next, Floor(6_000)).await;
    crate::ensure!(
        next.fence > first.fence,
        "after the restart slot {} was granted with fence {}, not above the {} acknowledged \
         before the crash",
        next.slot,
        next.fence,
        first.fence
    );
    crate::ensure!(
        next.floor == Floor(5_000),
        "after the restart the next grant carries floor {}, not the 5000 ms the renewal before \
         the crash reported",
        next.floor
    );
    crate::ensure!(r == Release::Released, "the release answered {r:?}");
    Ok(())
}

/// A holder's acknowledged renewal survives a crash of the store: after the
/// restart its next renewal is `Renewed`, and no rival is granted its slot
/// (a pool of one) while the lease is live.
pub async fn a_durable_store_keeps_the_lease_across_a_restart<S: Stores>(
    b: Arc<Restartable<S>>,
) -> Outcome {
    let mut server = b.server.lock().await;
    // Long enough for a crash and a restart on a loaded machine (the lease
    // is released at the end, never waited out), and short, because the
    // holder's first claim waits out the span after the previous test's
    // restart.
    let pool = fresh_pool(1, Duration::from_secs(20))?;
    b.prepare(&pool).await?;
    let s = b.store().await?;
    let (grant, mut live) = hold_renewed(&s, &pool, Floor(1_000), Floor(2_000)).await?;
    drop(s);
    crash_and_restart(&mut server)?;
    let (holder, rival) = (b.store().await?, b.store().await?);
    let no_grant = |r: &Result<Grant, AcquireError>| {
        // A store's restart guard may refuse every grant for a while.
        matches!(
            r,
            Err(AcquireError::PoolExhausted { .. } | AcquireError::StoreRestarted { .. })
        )
    };
    let r = rival_acquire(&rival, &pool, live).await;
    live.judge(no_grant(&r), || {
        format!("a rival's acquisition after the restart, while the lease was live: {r:?}")
    })?;
    let sent = Instant::now();
    let r = renew(&holder, &pool, &grant, Floor(3_000), live).await;
    live.judge(matches!(r, Renewal::Renewed { .. }), || {
        format!("the holder's renewal after the restart answered {r:?}")
    })?;
    if let Renewal::Renewed { ttl, .. } = r {
        live = Live { sent, ttl };
    }
    let r = rival_acquire(&rival, &pool, live).await;
    live.judge(no_grant(&r), || {
        format!("a rival's acquisition after the renewal, while the lease was live: {r:?}")
    })?;
    let r = holder.release_dyn(&pool, &grant, Floor(3_000)).await;
    live.judge(r == Release::Released, || {
        format!("the release answered {r:?}")
    })
}

/// A store that keeps every write it acknowledges is guarded after a restart
/// all the same: the settings read at connect say nothing of those the
/// server ran with before it. An operator's run-time weakening that was
/// never saved to the server's configuration (MariaDB `SET GLOBAL
/// innodb_flush_log_at_trx_commit = 0`, Valkey `CONFIG SET appendonly no`)
/// lets a crash lose a claim, and the server comes back durable from its
/// configuration, so a process that connects then reads durable settings.
/// Its claim after the restart is held back for the pool's span, for the
/// holder's slot and for the free one alike. Where the weakening surely
/// loses the claim, the holder's renewal after the restart shows the
/// server forgot it. Without the guard on durable stores the rival was
/// granted a slot at once, the holder's own where the claim was lost.
pub async fn a_restart_of_a_durable_store_holds_claims_back_for_a_span<S: Stores>(
    b: Arc<Restartable<S>>,
) -> Outcome {
    let mut server = b.server.lock().await;
    // A span (10 s + 2 x 1 s of skew) longer than a restart on a loaded
    // machine, so that the guard's time left can be judged.
    let pool = fresh_pool(2, Duration::from_secs(10))?;
    b.prepare(&pool).await?;
    // The holder accepts the server it weakens (the one-timing opt-in): the
    // SQL and Valkey/Redis backends read the settings again while they run,
    // and by default a server found able to forget refuses claims from that
    // reading on, which would keep this claim from being made at all.
    let s = b.store_one_timing().await?;
    let weakened = b.stores.weaken_until_restart(&b.url).await?;
    let (grant, live) = acquire_live(&s, &pool, Floor(1_000)).await?;
    drop(s);
    let restarted = Instant::now();
    crash_and_restart(&mut server)?;
    let rival = b.store().await?;
    let r = rival_acquire(&rival, &pool, live).await;
    if let Ok(g) = &r {
        let _ = rival.release_dyn(&pool, g, Floor::NONE).await;
    }
    live.judge(!matches!(r, Ok(ref g) if g.slot == grant.slot), || {
        format!(
            "after a restart of a durable store a rival was granted slot {}, held by a live \
             lease: {r:?}",
            grant.slot
        )
    })?;
    guard_waits_at_least(&r, restarted, pool.restart_span())?;
    if weakened == Some(true) {
        let r = renew(&rival, &pool, &grant, Floor(2_000), live).await;
        live.judge(matches!(r, Renewal::Lost(_)), || {
            format!(
                "the claim made while the server was weakened survived the crash (the \
                 holder's renewal answered {r:?}): this test needs a weakening that loses it"
            )
        })?;
    }
    Ok(())
}

/// A crash of one server process that the server recovers from without
/// restarting (PostgreSQL: a backend killed by SIGKILL, a segfault or the
/// OOM killer makes the postmaster reinitialise and replay its log in place,
/// and `pg_postmaster_start_time()` does not move, so no restart guard
/// sees it) loses nothing the backend acknowledged, on a [`Settings::Lossy`]
/// server too: the holder's renewal is `Renewed` after it, no rival gets the
/// slot while the lease is live, and the next grant's fence is above the
/// holder's and carries its floor.
pub async fn a_crash_without_a_restart_loses_no_lease<S: Stores>(
    b: Arc<Restartable<S>>,
) -> Outcome {
    let _server = b.server.lock().await;
    // Short: the holder's first claim waits out the span after the previous
    // test's restart.
    let pool = fresh_pool(1, Duration::from_secs(20))?;
    b.prepare(&pool).await?;
    let s = b.store().await?;
    let (grant, live) = hold_renewed(&s, &pool, Floor(1_000), Floor(2_000)).await?;
    b.stores
        .crash_without_restart(&b.url)
        .ok_or("this store has no crash without a restart")?
        .await?;
    let (holder, rival) = (b.store().await?, b.store().await?);
    let r = rival_acquire(&rival, &pool, live).await;
    live.judge(matches!(r, Err(AcquireError::PoolExhausted { .. })), || {
        format!("a rival's acquisition after the crash, while the lease was live: {r:?}")
    })?;
    let r = renew(&holder, &pool, &grant, Floor(3_000), live).await;
    live.judge(matches!(r, Renewal::Renewed { .. }), || {
        format!("the holder's renewal after the crash answered {r:?}")
    })?;
    let r = holder.release_dyn(&pool, &grant, Floor(3_000)).await;
    crate::ensure!(r == Release::Released, "the release answered {r:?}");
    let next = acquire_after_expiry(&rival, &pool, Floor::NONE).await?;
    let _ = rival.release_dyn(&pool, &next, Floor(3_000)).await;
    crate::ensure!(
        next.fence > grant.fence && next.floor == Floor(3_000),
        "after the crash the next grant has fence {} (the holder had {}) and floor {} (the \
         holder released at 3000)",
        next.fence,
        grant.fence,
        next.floor
    );
    Ok(())
}

/// The backend reports a [`Settings::Lossy`] server as durable when it makes
/// its own writes durable there (PostgreSQL with `synchronous_commit = off`).
pub async fn the_lease_sessions_are_durable_on_a_lossy_server<S: Stores>(
    b: Arc<Restartable<S>>,
) -> Outcome {
    let _server = b.server.lock().await;
    crate::ensure!(
        b.stores.reports_lossy(&b.url).await? == Some(false),
        "the lease connections to a lossy server do not report durable settings"
    );
    Ok(())
}

/// A store that forgets acknowledged writes is refused by a strategy with
/// its defaults, with an error that names both ways to accept it.
pub async fn a_store_that_forgets_is_refused_by_default<S: Stores>(
    b: Arc<Restartable<S>>,
) -> Outcome {
    let _server = b.server.lock().await;
    match b.store().await {
        Ok(_) => Err("a strategy with its defaults connected to a store that forgets".into()),
        Err(e)
            if e.contains("durability=one-timing-per-pool")
                && e.contains("durability=throwaway") =>
        {
            Ok(())
        }
        Err(e) => Err(format!(
            "refused, but without naming the opt-ins durability=one-timing-per-pool and \
             durability=throwaway: {e}"
        )),
    }
}

/// On a store that forgets acknowledged writes ([`Settings::Lossy`]: MariaDB
/// `innodb_flush_log_at_trx_commit = 0`, Valkey/Redis without persistence),
/// a crash can lose the holder's claim and renewal; the restart guard then
/// keeps every rival from the slot while the holder may still generate, and
/// grants it again once that cannot matter, with a fence above the
/// holder's, though the store forgot it. Without the guard
/// (`DurabilityPolicy::Throwaway`) a rival is granted the live lease at once.
pub async fn a_store_that_forgets_grants_no_second_holder_after_a_restart<S: Stores>(
    b: Arc<Restartable<S>>,
) -> Outcome {
    let mut server = b.server.lock().await;
    let pool = fresh_pool(1, Duration::from_secs(3))?;
    b.prepare(&pool).await?;
    crate::ensure!(
        b.stores.reports_lossy(&b.url).await? != Some(false),
        "a Lossy server reported that it keeps every acknowledged write"
    );
    let s = b.store_one_timing().await?;
    // The guard holds for the TTL and 2 s after the server started.
    let sent = Instant::now();
    let grant = acquire_after_expiry(&s, &pool, Floor(1_000)).await?;
    let mut live = Live {
        sent,
        ttl: grant.ttl,
    };
    renew_before_crash(&s, &pool, &grant, Floor(2_000), &mut live).await?;
    drop(s);
    crash_and_restart(&mut server)?;
    let rival = b.store_one_timing().await?;
    let r = rival_acquire(&rival, &pool, live).await;
    live.judge(
        matches!(
            r,
            Err(AcquireError::StoreRestarted { .. } | AcquireError::PoolExhausted { .. })
        ),
        || format!("a rival's acquisition after the restart, while the lease was live: {r:?}"),
    )?;
    // Once the guard's span has passed, the slot is granted again, with a
    // fence never handed out before.
    let next = acquire_after_expiry(&rival, &pool, Floor::NONE).await?;
    crate::ensure!(
        next.fence > grant.fence,
        "after the store forgot, slot {} was granted with fence {}, not above the {} it had \
         handed out before the crash",
        next.slot,
        next.fence,
        grant.fence
    );
    Ok(())
}

/// What a rival's acquisition answered after a restart that began at
/// `restarted`: the guard's time left, which must be at least `span` less
/// the server's uptime (no more than the time since `restarted`) and a
/// second of rounding (MySQL counts uptime in seconds). `Ok(None)` when the
/// machine was too slow for the reading to tell (a starved run).
fn guard_waits_at_least(
    r: &Result<Grant, AcquireError>,
    restarted: Instant,
    span: Duration,
) -> Outcome {
    let up_at_most = restarted.elapsed();
    let bound = span
        .saturating_sub(up_at_most)
        .saturating_sub(Duration::from_secs(1));
    match r {
        Err(AcquireError::StoreRestarted { resume_in }) if *resume_in >= bound => Ok(()),
        _ if bound.is_zero() => Err(format!(
            "{STARVED}the restart took {up_at_most:?}, longer than the guard's span {span:?}"
        )),
        Err(AcquireError::StoreRestarted { resume_in }) => Err(format!(
            "the restart guard holds for {resume_in:?} more, not the at least {bound:?} a span \
             of {span:?} leaves {up_at_most:?} after the restart began"
        )),
        other => Err(format!(
            "a claim {up_at_most:?} after the restart began answered {other:?}, not \
             StoreRestarted for {bound:?} or more"
        )),
    }
}

/// The restart guard waits out the pool's longest restart span, not the
/// claimer's: a holder with a 20 s TTL claimed a slot (recorded durably),
/// another holder with the same TTL claimed a second slot, which the crash
/// lost; a claimer with a 1 s TTL after the restart is held back for the
/// 20 s holder's TTL plus twice its skew, not for its own 3 s, while the
/// forgotten lease may still be in use.
pub async fn the_restart_guard_waits_out_the_pools_longest_span<S: Stores>(
    b: Arc<Restartable<S>>,
) -> Outcome {
    let mut server = b.server.lock().await;
    let long = fresh_pool(2, Duration::from_secs(20))?;
    let short =
        PoolSpec::new(long.name().clone(), 2, Duration::from_secs(1)).map_err(|e| e.to_string())?;
    b.prepare(&long).await?;
    let s = b.store_one_timing().await?;
    let first = acquire_after_expiry(&s, &long, Floor::NONE).await?;
    b.stores.make_durable_now(&b.url).await?;
    let sent = Instant::now();
    let lost = s
        .acquire_dyn(&long, Floor::NONE)
        .await
        .map_err(|e| format!("the second claim: {e}"))?;
    let live = Live {
        sent,
        ttl: lost.ttl,
    };
    drop(s);
    let restarted = Instant::now();
    crash_and_restart(&mut server)?;
    let rival = b.store_one_timing().await?;
    let r = rival_acquire(&rival, &short, live).await;
    live.judge(!matches!(r, Ok(ref g) if g.slot == lost.slot), || {
        format!(
            "a 1 s claimer got slot {} of a live 20 s lease: {r:?}",
            lost.slot
        )
    })?;
    guard_waits_at_least(&r, restarted, long.restart_span())?;
    let _ = first;
    Ok(())
}

/// A configured `max_clock_skew` larger than the default lengthens the
/// restart guard: a pool with a 20 s TTL and 20 s of skew waits 60 s after
/// the store forgot, not the 22 s the default skew would give.
pub async fn a_larger_clock_skew_lengthens_the_restart_guard<S: Stores>(
    b: Arc<Restartable<S>>,
) -> Outcome {
    let mut server = b.server.lock().await;
    let pool = fresh_pool(1, Duration::from_secs(20))?
        .with_max_clock_skew(Duration::from_secs(20))
        .map_err(|e| e.to_string())?;
    b.prepare(&pool).await?;
    let restarted = Instant::now();
    crash_and_restart(&mut server)?;
    let s = b.store_one_timing().await?;
    let r = loop {
        match s.acquire_dyn(&pool, Floor::NONE).await {
            Err(AcquireError::Unreachable(_)) if restarted.elapsed() < pool.restart_span() => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            r => break r,
        }
    };
    if let Ok(g) = &r {
        let _ = s.release_dyn(&pool, g, Floor::NONE).await;
    }
    guard_waits_at_least(&r, restarted, pool.restart_span())
}

/// A private server of `kind` with `settings` that this process can crash and
/// restart, or the target labelled `label` that says why there is none.
///
/// # Panics
///
/// When `kind` cannot run with `settings` ([`ServerKind::settings`]): the
/// test asks for a server that cannot exist, which no machine would mend.
pub fn restartable_server(
    kind: ServerKind,
    settings: Settings,
    label: &str,
) -> Result<Server, Target> {
    let server = match provide_with(kind, settings) {
        Ok(server) => server,
        Err(ProvideError::Missing(missing)) => return Err(Target::missing(label, missing)),
        Err(e) => panic!("{label}: {e}"),
    };
    if !server.can_restart() {
        let tried = vec![format!(
            "{}: restart tests need a server this process starts from a local binary",
            server.describe()
        )];
        return Err(Target::missing(label, Missing { kind, tried }));
    }
    Ok(server)
}

/// A target on `kind`'s own server with `settings`: on a durable server the
/// fence and lease tests, on a lossy one the restart guard's. Labelled
/// `<kind>-restarts` or `<kind>-lossy-restarts`.
pub fn target<S: Stores>(kind: ServerKind, settings: Settings, stores: S) -> Target {
    let label = match settings {
        Settings::Lossy => format!("{}-lossy-restarts", kind.name()),
        _ => format!("{}-restarts", kind.name()),
    };
    let server = match restartable_server(kind, settings, &label) {
        Ok(server) => server,
        Err(missing) => return missing,
    };
    let describe = server.describe();
    let backend = Restartable {
        stores,
        url: server.url.clone(),
        server: tokio::sync::Mutex::new(server),
    };
    let forgets = settings == Settings::Lossy && backend.stores.lossy_forgets(kind);
    let crashes = backend.stores.can_crash_without_restart(kind);
    let t = Target::new(label, describe, Arc::new(backend));
    if forgets {
        return t
            .with_test(
                "a_store_that_forgets_is_refused_by_default",
                a_store_that_forgets_is_refused_by_default::<S>,
            )
            .with_test(
                "a_store_that_forgets_grants_no_second_holder_after_a_restart",
                a_store_that_forgets_grants_no_second_holder_after_a_restart::<S>,
            )
            .with_test(
                "the_restart_guard_waits_out_the_pools_longest_span",
                the_restart_guard_waits_out_the_pools_longest_span::<S>,
            )
            .with_test(
                "a_larger_clock_skew_lengthens_the_restart_guard",
                a_larger_clock_skew_lengthens_the_restart_guard::<S>,
            );
    }
    let t = if settings == Settings::Lossy {
        t.with_test(
            "the_lease_sessions_are_durable_on_a_lossy_server",
            the_lease_sessions_are_durable_on_a_lossy_server::<S>,
        )
    } else {
        t
    };
    let t = if crashes {
        t.with_test(
            "a_crash_without_a_restart_loses_no_lease",
            a_crash_without_a_restart_loses_no_lease::<S>,
        )
    } else {
        t
    };
    t.with_test(
        "a_fence_never_repeats_after_a_store_restart",
        a_fence_never_repeats_after_a_store_restart::<S>,
    )
    .with_test(
        "a_durable_store_keeps_the_lease_across_a_restart",
        a_durable_store_keeps_the_lease_across_a_restart::<S>,
    )
    .with_test(
        "a_restart_of_a_durable_store_holds_claims_back_for_a_span",
        a_restart_of_a_durable_store_holds_claims_back_for_a_span::<S>,
    )
}

/// Acquires `pool` on `s` once the restart guard lets it: every start of a
/// server, its first included, holds its claims back for the pool's restart
/// span (DESIGN.md rule 12), so the first claim on a server started moments
/// ago waits that out. Every other answer is returned as it came, and so is
/// `StoreRestarted` once the span and a minute more have passed.
pub async fn acquire_past_the_restart_guard<S: leasehold_core::Strategy>(
    s: &S,
    pool: &PoolSpec,
    floor: Floor,
) -> Result<Grant, AcquireError> {
    let limit = Instant::now() + pool.restart_span() + Duration::from_secs(60);
    loop {
        match s.acquire(pool, floor).await {
            Err(AcquireError::StoreRestarted { resume_in }) if Instant::now() < limit => {
                let pause = resume_in.clamp(Duration::from_millis(10), Duration::from_millis(200));
                tokio::time::sleep(pause).await;
            }
            r => return r,
        }
    }
}

/// Waits until the server `s` reaches has been up for `pool`'s restart
/// span and two seconds more (MySQL counts its uptime in whole seconds and
/// the guard rounds the span up), as its restart guard reads the server's
/// start ([`leasehold_core::operate::Operate::guards`]), so that the guard
/// no longer holds `pool`'s claims back. For tests whose claims must show
/// what another guard does, on a server started moments ago. A store
/// without a restart guard reading returns at once.
pub async fn wait_out_the_restart_guard<O: leasehold_core::operate::Operate>(
    s: &O,
    pool: &PoolSpec,
) -> Outcome {
    let guards = s
        .guards(Some(pool))
        .await
        .map_err(|e| format!("reading the guards: {e}"))?;
    let started = guards
        .iter()
        .find(|g| g.kind == leasehold_core::guards::GuardKind::Restart)
        .and_then(|g| g.since);
    if let Some(started) = started {
        let open = started + pool.restart_span() + Duration::from_secs(2);
        if let Ok(left) = open.duration_since(std::time::SystemTime::now()) {
            tokio::time::sleep(left).await;
        }
    }
    Ok(())
}

/// After the restart guard held a pool back, grants resume: a pool of
/// 100 ms is granted on `s` once the server has been up for its span
/// (retrying only `StoreRestarted`, within `limit`), and its renewal is never
/// held back (`Lost` fails). For the guard tests of each backend, whose
/// servers started a moment ago.
pub async fn grants_resume_after_the_guard<S: leasehold_core::Strategy>(
    s: &S,
    limit: Duration,
) -> Outcome {
    let short = fresh_pool(2, Duration::from_millis(100))?;
    let start = Instant::now();
    let grant = loop {
        match s.acquire(&short, Floor::NONE).await {
            Ok(g) => break g,
            Err(AcquireError::StoreRestarted { .. }) if start.elapsed() < limit => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(format!("a 100 ms pool after the guard: {e}")),
        }
    };
    let r = s.renew(&short, &grant, Floor::NONE).await;
    crate::ensure!(
        !matches!(r, Renewal::Lost(_)),
        "a renewal under the guard answered {r:?}"
    );
    Ok(())
}

/// A lease manager on a store whose restart guard holds grants back says
/// so: a `Waiting` event with the cause `StoreRestarted` and the time the
/// store gave (to its callbacks, which see the events of `start` too), and
/// health would say not ready until then; `start` waits the guard out
/// instead of failing at an acquire timeout shorter than the guard (here
/// 2 s against an hour), because the store has answered and said when it
/// will grant again. `pool` (prepared by the caller) must be held back for
/// much longer than a few seconds: a TTL of an hour on a server started
/// minutes ago. For the guard tests of each backend.
pub async fn a_lease_manager_announces_the_guard_as_waiting<S: leasehold_core::Strategy>(
    s: S,
    pool: &PoolSpec,
) -> Outcome {
    use leasehold_core::events::Waiting;
    use leasehold_core::{LeaseConfig, LeaseManager, MonoTime, StartError, WaitCause};
    let waits: Arc<std::sync::Mutex<Vec<Waiting>>> = Arc::default();
    let config = {
        let waits = waits.clone();
        LeaseConfig::builder(pool.name().as_str())
            .pool_size(pool.size())
            .ttl(pool.ttl())
            .acquire_timeout(Duration::from_secs(2))
            .on_waiting(move |w| waits.lock().unwrap_or_else(|e| e.into_inner()).push(*w))
            .build()
            .map_err(|e| e.to_string())?
    };
    let began = MonoTime::now();
    // Three times the acquire timeout: long enough that a start which counted
    // the guard against the timeout would have failed, far shorter than the
    // guard. Dropping the pending start shuts its driver down.
    let watched = Duration::from_secs(6);
    let r = tokio::time::timeout(watched, LeaseManager::start(s, config)).await;
    crate::ensure!(
        r.is_err(),
        "a lease manager under an hour's restart guard, with a 2 s acquire timeout, did not \
         wait the guard out: within {watched:?} it answered {:?}",
        r.map(|r| r.map(|_| "a lease").map_err(|e: StartError| e.to_string()))
    );
    let waits = waits.lock().unwrap_or_else(|e| e.into_inner()).clone();
    crate::ensure!(
        !waits.is_empty(),
        "no Waiting event while the store's restart guard held grants back"
    );
    for w in &waits {
        crate::ensure!(
            w.cause == WaitCause::StoreRestarted,
            "waiting for {:?}, not for the store's restart guard",
            w.cause
        );
        crate::ensure!(
            w.until > began + pool.ttl() / 2,
            "the guard of a {:?} pool announced until {:?} from the start, not the time the \
             store gave",
            pool.ttl(),
            w.until.saturating_since(began)
        );
    }
    Ok(())
}

/// A lease manager started inside the restart guard, with an acquire
/// timeout far shorter than the guard, gets its lease once the guard opens:
/// the store said when it grants again, so the wait does not count against
/// the timeout. `make_pool` makes (and prepares, where the store needs it) a
/// fresh pool with the TTL given. The server must be one the guard holds
/// back (accepted with the one-timing opt-in, up for less than an hour).
///
/// The guard of a pool opens when the server has been up for the pool's
/// span (TTL plus twice the clock skew), so the pool's TTL is chosen from the
/// server's uptime, as the guard itself reports it, to open it a few seconds
/// after the manager starts. On a machine too loaded to start the manager
/// before that, the guard is open already and shows nothing: the attempt is
/// made again with more room rather than counted.
pub async fn a_lease_manager_started_inside_the_guard_gets_its_lease_when_it_opens<S, F>(
    s: S,
    make_pool: F,
) -> Outcome
where
    S: leasehold_core::Strategy + Clone,
    F: Fn(Duration) -> BoxFuture<'static, Result<PoolSpec, String>>,
{
    use leasehold_core::events::Waiting;
    use leasehold_core::{DEFAULT_MAX_CLOCK_SKEW, LeaseConfig, LeaseManager, MonoTime};
    let skews = DEFAULT_MAX_CLOCK_SKEW * 2;
    let hour = Duration::from_secs(3600);
    // Longer than one operation that stalls for its whole timeout (5 s) on
    // a loaded machine, and well short of the guard's first room.
    let acquire_timeout = Duration::from_secs(6);
    for room in [Duration::from_secs(15), Duration::from_secs(40)] {
        // The guard's own reading of the uptime: an hour's span less what is left.
        let probe = make_pool(hour).await?;
        let resume_in = match s.acquire(&probe, Floor::NONE).await {
            Err(AcquireError::StoreRestarted { resume_in }) => resume_in,
            other => {
                return Err(format!(
                    "a pool with a TTL of an hour was not held back by the guard: {other:?}"
                ));
            }
        };
        let uptime = (hour + skews).saturating_sub(resume_in);
        let pool = make_pool(uptime + room - skews).await?;
        let waits: Arc<std::sync::Mutex<Vec<Waiting>>> = Arc::default();
        let config = {
            let waits = waits.clone();
            LeaseConfig::builder(pool.name().as_str())
                .pool_size(pool.size())
                .ttl(pool.ttl())
                .acquire_timeout(acquire_timeout)
                .on_waiting(move |w| waits.lock().unwrap_or_else(|e| e.into_inner()).push(*w))
                .build()
                .map_err(|e| e.to_string())?
        };
        let began = MonoTime::now();
        let bound = room + Duration::from_secs(60);
        let manager = tokio::time::timeout(bound, LeaseManager::start(s.clone(), config))
            .await
            .map_err(|_| format!("no lease within {bound:?}, for a guard opening in {room:?}"))?
            .map_err(|e| {
                format!(
                    "a lease manager with a {acquire_timeout:?} acquire timeout, started \
                     {room:?} before the guard opens, failed: {e}"
                )
            })?;
        let held_at = MonoTime::now();
        let open = manager.gate().check_now().is_ok();
        manager.shutdown().await;
        crate::ensure!(open, "the manager returned without an open gate");
        let waits = waits.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(first) = waits.first() else {
            // The guard had opened before the first attempt: no evidence.
            continue;
        };
        let waited = held_at.saturating_since(began);
        if waited <= acquire_timeout {
            // The manager started so late that the guard opened within the
            // acquire timeout: it shows nothing about the timeout.
            continue;
        }
        // The guard counts whole seconds of uptime one second short.
        crate::ensure!(
            held_at + Duration::from_millis(1_500) >= first.until,
            "the lease came {:?} before the time the guard announced",
            first.until.saturating_since(held_at)
        );
        return Ok(());
    }
    Err(format!(
        "no attempt started more than the acquire timeout before the guard opened, even \
         with {:?} of room",
        Duration::from_secs(40)
    ))
}
