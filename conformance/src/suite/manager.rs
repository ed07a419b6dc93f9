//! The lease manager on a real store: it holds, renews and releases, and a
//! restarted one gives back the lease its dropped predecessor left.

use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{Floor, LeaseConfig, LeaseManager, LeaseState, PoolSpec, Release};

use super::context::Ctx;
use super::{Outcome, STARVED};
use crate::glue::Glue;

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
pub async fn manager_holds_renews_and_releases(b: Arc<dyn Glue>) -> Outcome {
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
pub async fn manager_restart_releases_the_orphaned_lease(b: Arc<dyn Glue>) -> Outcome {
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
