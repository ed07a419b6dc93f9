//! The hand-over floor (DESIGN.md timing rule 8) outlives its holders.

use std::sync::Arc;
use std::time::Instant;

use leasehold_core::{Floor, Release, Renewal};

use super::Outcome;
use super::context::{Ctx, Held};
use crate::glue::Glue;

/// DESIGN.md timing rule 8: the slot's floor outlives its holders. Acquire and
/// renew raise it to the reported ceiling (never lower it), release sets it to
/// what was issued, and the next grant, after a release or an expiry,
/// carries it.
pub async fn floor_is_kept_across_holders(b: Arc<dyn Glue>) -> Outcome {
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
