//! Revocation behind the holder's back: the holder's next renewal is
//! `Lost`, and the slot stays taken until the old lease would have ended.

use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{Floor, Renewal};

use super::Outcome;
use super::context::{Ctx, short_ttl};
use crate::glue::Glue;

/// A lease deleted behind the holder's back is `Lost` on the next renewal.
pub async fn revoked_lease_is_lost_on_next_renewal(b: Arc<dyn Glue>) -> Outcome {
    let ctx = Ctx::new(b, 2, Some(Duration::from_secs(30))).await?;
    let grant = ctx.acquire().await?;
    let revoke = ctx
        .backend
        .revoke(&ctx.pool, grant.slot)
        .ok_or("backend cannot revoke")?;
    revoke.await?;
    let r = ctx.store.renew_dyn(&ctx.pool, &grant, Floor::NONE).await;
    ensure!(
        matches!(r, Renewal::Lost(_)),
        "renewal after revoke answered {r:?}"
    );
    Ok(())
}

/// A revoke cannot double-grant: it leaves a tombstone that keeps the revoked
/// lease's expiry, so nobody claims the slot while the revoked holder may
/// still be generating (until its next renewal, or its local deadline if its
/// renewals fail). The holder's next renewal is `Lost`, and the slot is
/// claimed again, with a bigger fence, once the old lease has expired.
pub async fn revoked_slot_stays_taken_until_the_old_expiry(b: Arc<dyn Glue>) -> Outcome {
    let ttl = {
        let store = b.connect().await?;
        short_ttl(&store.capabilities_dyn()).max(Duration::from_secs(2))
    };
    let ctx = Ctx::new(b, 1, Some(ttl)).await?;
    let rival = ctx.another().await?;
    let held = ctx.hold(&ctx.store).await?;
    let revoke = ctx
        .backend
        .revoke(&ctx.pool, held.grant.slot)
        .ok_or("backend cannot revoke")?;
    revoke.await?;
    let r = rival.acquire_dyn(&ctx.pool, Floor::NONE).await;
    held.judge(r.is_err(), || {
        format!("a rival was granted the revoked slot before its old expiry: {r:?}")
    })?;
    if let Err(e) = &r {
        ensure!(
            e.is_retryable(),
            "acquiring a revoked slot answered a final error: {e}"
        );
    }
    let renewal = ctx
        .store
        .renew_dyn(&ctx.pool, &held.grant, Floor::NONE)
        .await;
    ensure!(
        matches!(renewal, Renewal::Lost(_)),
        "renewal after revoke answered {renewal:?}"
    );
    let next = ctx.acquire_after_expiry(&rival).await?;
    ensure!(
        next.fence > held.grant.fence,
        "the next holder of a revoked slot got fence {}, not above {}",
        next.fence,
        held.grant.fence
    );
    Ok(())
}
