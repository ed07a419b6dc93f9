//! The ID format a pool records: a claim declaring another one is refused.

use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{
    AcquireError, Floor, Grant, IdFormat, LeaseConfig, LeaseManager, Release, StartError,
};

use super::Outcome;
use super::context::Ctx;
use crate::glue::Glue;

/// Two processes of one pool that generate different ID formats (another
/// layout, or another epoch) can mint equal values even on different slots.
/// The store records the first format a claim declares for a pool, for the
/// pool's life, and refuses a claim that declares another one with a final
/// error naming both, also when no slot is held at the time, and also to a
/// lease manager configured with it. A claim of the same format, and one
/// that declares none, get slots.
pub async fn a_claim_declaring_another_id_format_is_refused(b: Arc<dyn Glue>) -> Outcome {
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
