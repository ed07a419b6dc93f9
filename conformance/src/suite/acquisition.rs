//! Acquisition: racing acquirers get distinct slots, a full pool answers a
//! retryable `PoolExhausted`, acquirers racing holders that renew never get
//! a held slot.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{AcquireError, Floor, Grant, Renewal, Token};

use super::context::Ctx;
use super::{Outcome, STARVED};
use crate::glue::Glue;

/// Races `n` acquirers over `connections` connections; returns the grants and
/// the errors.
pub(super) async fn race(
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

pub(super) fn distinct(grants: &[Grant]) -> Result<(), String> {
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
pub async fn whole_pool_concurrent_acquirers_get_distinct_slots(b: Arc<dyn Glue>) -> Outcome {
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
pub async fn oversubscribed_pool_gives_distinct_slots_then_exhausted(b: Arc<dyn Glue>) -> Outcome {
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
pub async fn full_pool_answers_retryable_exhausted(b: Arc<dyn Glue>) -> Outcome {
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

/// Holders renew in a loop while acquirers race for the rest of the pool:
/// every renewal succeeds, no acquirer gets a held slot, the pool fills
/// exactly.
pub async fn concurrent_renew_and_acquire_keep_invariants(b: Arc<dyn Glue>) -> Outcome {
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
