//! Fences: a slot's fence grows every time the slot changes hands.

use std::sync::Arc;

use leasehold_core::{Fence, Floor, Release};

use super::Outcome;
use super::context::Ctx;
use crate::glue::Glue;

/// The fence of a slot strictly grows across holders, after a release and
/// after an expiry, and a renewal does not change who holds it.
pub async fn fence_strictly_grows_across_holders(b: Arc<dyn Glue>) -> Outcome {
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
