//! The wipe guard, on a private **fake** API server: a pool's Leases
//! deleted while a holder runs (`kubectl delete leases -l
//! leasehold/pool=…`) take its floor with them, and a claim that creates
//! the slot's Lease again would overlap the holder until its next renewal.
//! Claims wait out the restart span instead (TTL + 2 × `max_clock_skew`),
//! the holder's renewal answers `Lost`, `prepare` does not take the wipe
//! for a new pool, and a pool an operator declares new is claimed at once.
//!
//! Times are lower bounds read around the calls: a loaded machine only
//! makes them longer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_conformance::{Target, ensure, fresh_pool, trials};
use leasehold_core::{AcquireError, Floor, Grant, Operate, PoolSpec, Renewal, Strategy};
use leasehold_k8s::{KubeConfig, KubeStrategy, POOL_LABEL};
use leasehold_k8s_fake::FakeApiServer;

use super::{FakeBackend, new_pool};

type Outcome = Result<(), String>;

/// What the wall clock the guard is judged on and the monotonic clock the
/// test reads may drift apart over a few seconds (NTP slews at most
/// 500 ppm): far below this.
const CLOCKS: Duration = Duration::from_millis(20);

/// Registers the tests on `target` (the fake's row).
pub(crate) fn register(target: Target) -> Target {
    trials!(target;
        a_wipe_of_the_pools_leases_grants_nothing_until_the_restart_span,
        prepare_after_a_wipe_does_not_take_the_pool_for_new,
        a_new_pool_waits_a_span_unless_declared_new,
        racing_claimers_of_a_wiped_pool_all_wait,
    )
}

/// A fake API server of this test's own, and a strategy on it.
async fn private() -> Result<(FakeApiServer, KubeStrategy), String> {
    let fake = FakeApiServer::start().map_err(|e| e.to_string())?;
    let s = connect(&fake).await?;
    Ok((fake, s))
}

async fn connect(fake: &FakeApiServer) -> Result<KubeStrategy, String> {
    KubeStrategy::connect(
        KubeConfig::url(fake.url())
            .namespace("default")
            .op_timeout(Duration::from_secs(5)),
    )
    .await
    .map_err(|e| e.to_string())
}

/// Deletes every Lease labelled with `pool`, in name order, one by one, as
/// `kubectl delete leases -l leasehold/pool=<pool>` does. Answers how many.
fn wipe(fake: &FakeApiServer, pool: &PoolSpec) -> usize {
    let mut names: Vec<String> = fake
        .leases("default")
        .into_iter()
        .filter(|(_, lease)| lease["metadata"]["labels"][POOL_LABEL] == pool.name().as_str())
        .map(|(name, _)| name)
        .collect();
    names.sort();
    names
        .iter()
        .filter(|name| fake.delete("default", name))
        .count()
}

/// Claims `pool` until granted (20 s at most), answering the grant, how long
/// after `since` it came, and the `resume_in` of each `StoreRestarted`.
async fn claim_until_granted(
    s: &KubeStrategy,
    pool: &PoolSpec,
    since: Instant,
) -> Result<(Grant, Duration, Vec<Duration>), String> {
    let mut refusals = Vec::new();
    loop {
        match s.acquire(pool, Floor::NONE).await {
            Ok(g) => return Ok((g, since.elapsed(), refusals)),
            Err(AcquireError::StoreRestarted { resume_in }) => refusals.push(resume_in),
            Err(e) if e.is_retryable() => {}
            Err(e) => return Err(format!("claim: {e}")),
        }
        ensure!(
            since.elapsed() < Duration::from_secs(20),
            "no grant 20 s after the wipe ({} refusals)",
            refusals.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The hole the guard closes: a holder's Leases deleted, a second process
/// claims. Without the guard the slot is granted at once (its Lease is
/// created again with floor 0) while the holder still generates.
async fn a_wipe_of_the_pools_leases_grants_nothing_until_the_restart_span(
    _b: Arc<FakeBackend>,
) -> Outcome {
    let (fake, holder) = private().await?;
    let pool = new_pool(&holder, 1, Duration::from_secs(1)).await?;
    let span = pool.restart_span();
    let g = holder
        .acquire(&pool, Floor(1_000))
        .await
        .map_err(|e| e.to_string())?;
    let wiped = wipe(&fake, &pool);
    let t_wipe = Instant::now();
    ensure!(wiped >= 1, "the wipe deleted no Lease");
    let rival = connect(&fake).await?;
    let (taken, after, refusals) = claim_until_granted(&rival, &pool, t_wipe).await?;
    eprintln!(
        "granted {after:?} after the wipe, restart span {span:?}, {} refusals first",
        refusals.len()
    );
    ensure!(
        after + CLOCKS >= span,
        "the wiped slot was granted {after:?} after the wipe, inside the restart span {span:?}"
    );
    let first = refusals.first().copied().unwrap_or_default();
    ensure!(
        first > Duration::ZERO && first <= span + Duration::from_secs(1),
        "the first refusal said resume in {first:?} (span {span:?})"
    );
    // The old holder's Lease went with the wipe and was made again by the
    // new holder: the old one's renewal finds another holder.
    let r = holder.renew(&pool, &g, Floor::NONE).await;
    ensure!(
        matches!(r, Renewal::Lost(_)),
        "the old holder renewed: {r:?}"
    );
    ensure!(taken.slot == g.slot, "slot {} after {}", taken.slot, g.slot);
    Ok(())
}

/// Every start may call `prepare`: after a wipe it must make the guard,
/// not declare the pool new.
async fn prepare_after_a_wipe_does_not_take_the_pool_for_new(_b: Arc<FakeBackend>) -> Outcome {
    let (fake, holder) = private().await?;
    let pool = new_pool(&holder, 1, Duration::from_secs(1)).await?;
    let g = holder
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    wipe(&fake, &pool);
    let t_wipe = Instant::now();
    let r = holder.renew(&pool, &g, Floor::NONE).await;
    ensure!(
        matches!(r, Renewal::Lost(_)),
        "renewal after the wipe: {r:?}"
    );
    let rival = connect(&fake).await?;
    rival
        .prepare(Some(&pool))
        .await
        .map_err(|e| e.to_string())?;
    let (_, after, refusals) = claim_until_granted(&rival, &pool, t_wipe).await?;
    // A lower bound only: a stalled machine may reach the first claim after
    // the guard has passed, and then rightly be granted at once.
    ensure!(
        after + CLOCKS >= pool.restart_span(),
        "after prepare the wiped pool was granted {after:?} after the wipe ({} refusals)",
        refusals.len()
    );
    Ok(())
}

/// A pool nobody prepared looks wiped: its first claim waits a span. One an
/// operator declares new is claimed at once, in the claim's two round
/// trips, and so is a guarded one once declared new.
async fn a_new_pool_waits_a_span_unless_declared_new(_b: Arc<FakeBackend>) -> Outcome {
    let (fake, s) = private().await?;
    let pool = fresh_pool(1, Duration::from_secs(1)).map_err(|e| e.to_string())?;
    match s.acquire(&pool, Floor::NONE).await {
        Err(AcquireError::StoreRestarted { resume_in }) => ensure!(
            resume_in + Duration::from_secs(1) >= pool.restart_span(),
            "an unprepared pool waits {resume_in:?}, under its span"
        ),
        other => return Err(format!("an unprepared pool's first claim: {other:?}")),
    }
    s.prepare_new_pool(&pool).await.map_err(|e| e.to_string())?;
    s.acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| format!("claim of a guarded pool declared new: {e}"))?;

    let declared = new_pool(&s, 2, Duration::from_secs(1)).await?;
    let before = fake.total_requests();
    s.acquire(&declared, Floor::NONE)
        .await
        .map_err(|e| format!("claim of a pool declared new: {e}"))?;
    let sent = fake.total_requests() - before;
    ensure!(sent == 2, "the claim took {sent} requests");
    Ok(())
}

/// Claimers racing on a wiped pool: one guard is made (the others' POSTs
/// answer 409 and they read it), and every one of them waits.
async fn racing_claimers_of_a_wiped_pool_all_wait(_b: Arc<FakeBackend>) -> Outcome {
    let (fake, s) = private().await?;
    // A span (14 s) no loaded machine takes to send eight claims.
    let pool = new_pool(&s, 4, Duration::from_secs(12)).await?;
    s.acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    wipe(&fake, &pool);
    let mut racers = Vec::new();
    for _ in 0..8 {
        let c = connect(&fake).await?;
        let pool = pool.clone();
        racers.push(tokio::spawn(
            async move { c.acquire(&pool, Floor::NONE).await },
        ));
    }
    for racer in racers {
        match racer.await.map_err(|e| e.to_string())? {
            Err(AcquireError::StoreRestarted { .. }) => {}
            other => return Err(format!("a racer of a wiped pool: {other:?}")),
        }
    }
    Ok(())
}
