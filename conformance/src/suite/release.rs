//! Release: a stale holder's release frees nothing, a released slot is
//! acquirable at once.

use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{AcquireError, Floor, Release, Renewal};

use super::Outcome;
use super::context::Ctx;
use crate::glue::Glue;

/// A stale holder's release never frees the slot of the new holder.
pub async fn stale_release_never_frees_the_new_holders_slot(b: Arc<dyn Glue>) -> Outcome {
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

/// A released slot can be acquired at once, without waiting for its TTL.
pub async fn released_slot_is_immediately_acquirable(b: Arc<dyn Glue>) -> Outcome {
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
