//! A wipe of the pool's keys while holders run (`etcdctl del --prefix`):
//! no slot is granted until every holder from before has passed its
//! deadline and its clock cannot be ahead of a successor's, and an operator
//! can declare a pool new to skip the wait. Each test has a key prefix of
//! its own, since the wipe deletes the whole prefix.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_conformance::etcd_cluster::EtcdCluster;
use leasehold_conformance::{Target, ensure, fresh_pool, fresh_pool_name, trials};
use leasehold_core::{
    AcquireError, Floor, LeaseConfig, LeaseManager, Operate, PoolSpec, Release, Renewal, Strategy,
    Token,
};
use leasehold_etcd::etcd_client::DeleteOptions;
use leasehold_etcd::{EtcdConfig, EtcdStrategy};

use super::{EtcdBackend, until};

/// Registers the wipe tests on `target`.
pub(crate) fn register(target: Target) -> Target {
    trials!(target;
        wipe_a_claim_after_the_prefix_is_deleted_waits_out_the_restart_span,
        wipe_a_pool_declared_new_is_claimed_at_once_and_a_pool_never_prepared_waits,
        wipe_a_first_start_on_an_unused_etcd_waits_only_for_the_clocks,
    )
}

/// A strategy on a key prefix of its own.
async fn on_prefix(b: &EtcdBackend, prefix: &str) -> Result<EtcdStrategy, String> {
    EtcdStrategy::connect(b.config()?.prefix(prefix))
        .await
        .map_err(|e| e.to_string())
}

fn fresh_prefix() -> String {
    format!("wipe-{}", &Token::random().to_hex()[..12])
}

/// Deletes every key under `prefix/`, as `etcdctl del --prefix` does.
async fn wipe(s: &EtcdStrategy, prefix: &str) -> Result<i64, String> {
    let resp = s
        .client()
        .clone()
        .delete(
            format!("{prefix}/"),
            Some(DeleteOptions::new().with_prefix()),
        )
        .await
        .map_err(|e| format!("delete the prefix: {e}"))?;
    Ok(resp.deleted())
}

/// A holder (a manager, watching its key) and a second grant hold the two
/// slots of a pool; the prefix is deleted; a second process claims. It is
/// refused with `StoreRestarted` until the span (TTL + 2 × skew) has passed
/// since the delete, the old holder's gate is closed by the time it is
/// granted, and the second grant's renewal answers `Lost`. Without the
/// guard the claim was granted within milliseconds of the delete, while the
/// old holder's gate was still open.
async fn wipe_a_claim_after_the_prefix_is_deleted_waits_out_the_restart_span(
    b: Arc<EtcdBackend>,
) -> Result<(), String> {
    let prefix = fresh_prefix();
    let holder = on_prefix(&b, &prefix).await?;
    let config = LeaseConfig::builder(fresh_pool_name().as_str())
        .pool_size(2)
        .ttl(Duration::from_secs(3))
        .max_clock_skew(Duration::from_millis(500))
        .build()
        .map_err(|e| e.to_string())?;
    let pool = config.pool().clone();
    let span = pool.restart_span();
    holder
        .prepare_new_pool(&pool)
        .await
        .map_err(|e| format!("declare the pool new: {e}"))?;
    let manager = LeaseManager::start(holder.clone(), config)
        .await
        .map_err(|e| e.to_string())?;
    let _watch = holder.guard(&manager);
    let gate = manager.gate();
    let before = gate.view();
    let other = holder
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| format!("the second slot: {e}"))?;
    let claimer = on_prefix(&b, &prefix).await?;
    // The watch is established by now (the manager started it at once).
    tokio::time::sleep(Duration::from_millis(300)).await;

    // When the old holder's gate closed, read every millisecond.
    let closed_after = Arc::new(std::sync::Mutex::new(None::<Duration>));
    let deleted_at = Instant::now();
    let watcher = tokio::spawn({
        let gate = gate.clone();
        let closed_after = closed_after.clone();
        async move {
            while gate.view().fence == before.fence && gate.check_now().is_ok() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            *closed_after.lock().unwrap_or_else(|p| p.into_inner()) = Some(deleted_at.elapsed());
        }
    });
    let deleted = wipe(&holder, &prefix).await?;
    ensure!(
        deleted >= 2,
        "the delete took {deleted} keys, not the slots"
    );
    let mut first: Option<(Duration, AcquireError)> = None;
    let (granted, granted_after, old_gate_open) = loop {
        let sent = Instant::now();
        match claimer.acquire(&pool, Floor::NONE).await {
            Ok(grant) => {
                let after = deleted_at.elapsed();
                let v = gate.view();
                let open = v.fence == before.fence && gate.check_now().is_ok();
                break (grant, after, open);
            }
            Err(e @ AcquireError::StoreRestarted { resume_in }) => {
                ensure!(e.is_retryable(), "StoreRestarted must be retryable");
                let ceil = Duration::from_secs(span.as_secs() + 1);
                ensure!(
                    resume_in > Duration::ZERO && resume_in <= ceil,
                    "resume_in {resume_in:?} outside (0, {ceil:?}]"
                );
                first.get_or_insert((sent - deleted_at, e));
            }
            Err(e) => return Err(format!("claim after the delete: {e}")),
        }
        ensure!(
            deleted_at.elapsed() < span + Duration::from_secs(60),
            "still refused {:?} after the delete",
            deleted_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), watcher).await;
    let closed = *closed_after.lock().unwrap_or_else(|p| p.into_inner());
    eprintln!(
        "granted {granted_after:?} after the delete (span {span:?}) with floor {:?}; first \
         refusal: {first:?}; old holder's gate open then: {old_gate_open}, closed {closed:?} \
         after the delete",
        granted.floor
    );
    ensure!(
        first.is_some(),
        "the claim was granted {granted_after:?} after the prefix was deleted, with the old \
         holder's gate {}",
        if old_gate_open {
            "still open"
        } else {
            "closed"
        }
    );
    ensure!(
        !old_gate_open,
        "granted while the old holder's gate was open"
    );
    // The guard was made after the delete and lasts the span on etcd's
    // clock: no grant can come sooner, however the machine is loaded.
    ensure!(
        granted_after >= span,
        "granted {granted_after:?} after the delete, inside the span {span:?}"
    );
    match holder.renew(&pool, &other, Floor::NONE).await {
        Renewal::Lost(_) => {}
        r => {
            return Err(format!(
                "the wiped grant's renewal answered {r:?}, not Lost"
            ));
        }
    }
    // The old manager has stopped on the deleted key: its gate closed.
    ensure!(
        until(Duration::from_secs(10), || gate.view().fence
            != before.fence
            || gate.check_now().is_err())
        .await
        .is_some(),
        "the old holder's gate stayed open on the deleted key"
    );
    let _ = claimer.release(&pool, &granted, Floor::NONE).await;
    let _ = manager.shutdown().await;
    wipe(&holder, &prefix).await?;
    Ok(())
}

/// On a prefix other pools use, a pool declared new (`prepare_new_pool`) is
/// claimed at once; a pool only `prepare`d (which every start may run)
/// waits its restart span, since its missing keys may be a wipe; and
/// declaring it new then takes the wait away.
async fn wipe_a_pool_declared_new_is_claimed_at_once_and_a_pool_never_prepared_waits(
    b: Arc<EtcdBackend>,
) -> Result<(), String> {
    let prefix = fresh_prefix();
    let s = on_prefix(&b, &prefix).await?;
    let ttl = Duration::from_secs(30);
    let neighbour = fresh_pool(1, ttl)?;
    s.prepare_new_pool(&neighbour)
        .await
        .map_err(|e| e.to_string())?;
    let held = s
        .acquire(&neighbour, Floor::NONE)
        .await
        .map_err(|e| format!("a pool declared new: {e}"))?;

    let pool: PoolSpec = fresh_pool(1, ttl)?;
    s.prepare(Some(&pool)).await.map_err(|e| e.to_string())?;
    let span = pool.restart_span();
    let asked = Instant::now();
    match s.acquire(&pool, Floor::NONE).await {
        Err(AcquireError::StoreRestarted { resume_in }) => {
            // The guard was made by prepare, just before.
            let low = span.saturating_sub(asked.elapsed() + Duration::from_secs(1));
            ensure!(
                resume_in >= low && resume_in <= span + Duration::from_secs(1),
                "resume_in {resume_in:?}, span {span:?}"
            );
        }
        other => return Err(format!("a pool only prepared answered {other:?}")),
    }
    s.prepare_new_pool(&pool).await.map_err(|e| e.to_string())?;
    let grant = s
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| format!("declared new after its guard: {e}"))?;
    ensure!(
        s.release(&pool, &grant, Floor::NONE).await == Release::Released,
        "release"
    );
    let _ = s.release(&neighbour, &held, Floor::NONE).await;
    wipe(&s, &prefix).await?;
    Ok(())
}

/// On an etcd of its own, where nothing of the key prefix exists and no
/// etcd lease is held (a first start), a pool's first claim waits only
/// 2 × `max_clock_skew`: no holder of any pool can still be generating,
/// only clocks are left to wait for. Once a holder holds a lease there, a
/// wipe holds the next claim back the whole span.
async fn wipe_a_first_start_on_an_unused_etcd_waits_only_for_the_clocks(
    b: Arc<EtcdBackend>,
) -> Result<(), String> {
    let cluster = EtcdCluster::start_kind(b.kind, 1)?;
    super::cluster::leader(&cluster, Duration::from_secs(30)).await?;
    let s = EtcdStrategy::connect(EtcdConfig::new(cluster.endpoints()))
        .await
        .map_err(|e| e.to_string())?;
    let skew = Duration::from_millis(500);
    let pool = fresh_pool(2, Duration::from_secs(30))?
        .with_max_clock_skew(skew)
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    s.prepare(Some(&pool)).await.map_err(|e| e.to_string())?;
    let mut refused = None;
    let held = loop {
        match s.acquire(&pool, Floor::NONE).await {
            Ok(grant) => break grant,
            Err(AcquireError::StoreRestarted { resume_in }) => {
                // 2 x 500 ms, raised to etcd's smallest lease TTL (2 s with
                // the default election timeout), counted down in whole
                // seconds.
                ensure!(
                    resume_in <= Duration::from_secs(2),
                    "a first start was told to wait {resume_in:?}"
                );
                refused.get_or_insert(resume_in);
            }
            Err(e) => return Err(format!("first claim: {e}")),
        }
        ensure!(
            started.elapsed() < Duration::from_secs(30),
            "a first start still refused after {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let granted_after = started.elapsed();
    eprintln!("first start: refused {refused:?}, granted after {granted_after:?}");
    ensure!(
        granted_after >= skew * 2,
        "a first start was granted after {granted_after:?}, before 2 x the skew"
    );

    // A holder holds a lease now: a wipe waits the whole span.
    let deleted = s
        .client()
        .clone()
        .delete(
            format!("{}/", leasehold_etcd::DEFAULT_PREFIX),
            Some(DeleteOptions::new().with_prefix()),
        )
        .await
        .map_err(|e| e.to_string())?
        .deleted();
    ensure!(deleted >= 2, "the delete took {deleted} keys");
    match s.acquire(&pool, Floor::NONE).await {
        Err(AcquireError::StoreRestarted { resume_in }) => ensure!(
            resume_in >= pool.restart_span().saturating_sub(Duration::from_secs(1)),
            "after a wipe with a holder's lease alive the wait was {resume_in:?}, not the span \
             {:?}",
            pool.restart_span()
        ),
        other => return Err(format!("a claim after the wipe answered {other:?}")),
    }
    match s.renew(&pool, &held, Floor::NONE).await {
        Renewal::Lost(_) => {}
        r => {
            return Err(format!(
                "the wiped holder's renewal answered {r:?}, not Lost"
            ));
        }
    }
    drop(cluster);
    Ok(())
}
