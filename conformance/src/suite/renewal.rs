//! Renewal: it keeps the slot, is idempotent, and answers `Lost` once the
//! slot changed hands.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_core::{AcquireError, Floor, Renewal};

use super::Outcome;
use super::context::Ctx;
use crate::glue::Glue;

/// Renewing every ttl/4 keeps the slot well past the original TTL: a rival
/// never gets it.
pub async fn renew_keeps_the_slot_past_the_original_ttl(b: Arc<dyn Glue>) -> Outcome {
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
pub async fn renew_is_idempotent(b: Arc<dyn Glue>) -> Outcome {
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
pub async fn renew_after_expiry_and_takeover_is_lost(b: Arc<dyn Glue>) -> Outcome {
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
