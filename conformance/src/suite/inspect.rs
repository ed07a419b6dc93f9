//! `inspect`: what it shows of held, revoked and released slots.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_core::{Floor, Release, Renewal};

use super::context::Ctx;
use super::{Outcome, STARVED};
use crate::glue::Glue;

/// `inspect` shows each slot ever claimed: a held slot's holder,
/// token prefix (8 hex digits, never more), fence, floor and time left; a
/// revoked slot's tombstone (no holder, but taken until the old expiry); a
/// released slot's floor and no holder; never a slot nobody claimed.
/// Followers of a leader pool read the leader from it. Times are on the
/// store's clock (Kubernetes: the observer's), so they are only bounded by
/// the TTL, never compared with this process's clock.
pub async fn inspect_shows_holders_fences_floors_and_tombstones(b: Arc<dyn Glue>) -> Outcome {
    let ttl = Duration::from_secs(30);
    let ctx = Ctx::new(b, 3, Some(ttl)).await?;
    let caps = ctx.store.capabilities_dyn();
    // Expiries are kept at the store's resolution (SQLite: text with
    // milliseconds, differences through julianday's floating point).
    let slack = caps.time_resolution * 2 + Duration::from_millis(1);
    let floors = caps.persists_floor;
    let sent = Instant::now();
    let acquire = || async {
        ctx.store
            .acquire_dyn(&ctx.pool, Floor(5_000))
            .await
            .map_err(|e| format!("acquire: {e}"))
    };
    let a = acquire().await?;
    let bb = acquire().await?;
    let r = ctx.store.renew_dyn(&ctx.pool, &a, Floor(7_000)).await;
    ensure!(matches!(r, Renewal::Renewed { .. }), "renewal: {r:?}");
    let revoke = ctx
        .backend
        .revoke(&ctx.pool, bb.slot)
        .ok_or("backend cannot revoke")?;
    revoke.await?;
    let slots = ctx
        .store
        .inspect_dyn(&ctx.pool)
        .await
        .map_err(|e| format!("inspect: {e}"))?;
    if sent.elapsed() >= ttl {
        return Err(format!(
            "{STARVED}the leases may have expired before inspect"
        ));
    }
    let listed: Vec<u32> = slots.iter().map(|i| i.slot).collect();
    let mut claimed = vec![a.slot, bb.slot];
    claimed.sort_unstable();
    ensure!(
        listed == claimed,
        "inspect listed slots {listed:?}, not {claimed:?}"
    );
    for info in &slots {
        let shown = format!("{info:?}");
        for token in [a.token, bb.token] {
            ensure!(
                !shown.contains(&token.to_hex()[8..]),
                "inspect shows more than 8 hex digits of a token: {shown}"
            );
        }
    }
    let of = |slot: u32| {
        slots
            .iter()
            .find(|i| i.slot == slot)
            .ok_or(format!("slot {slot} missing"))
    };
    let held = of(a.slot)?;
    ensure!(
        held.holder.as_deref() == Some(ctx.pool.holder())
            && held.token_prefix.as_deref() == Some(&a.token.to_hex()[..8])
            && held.fence == a.fence
            && (!floors || held.floor == Floor(7_000))
            && held
                .expires_in
                .is_some_and(|d| d > Duration::ZERO && d <= ttl + slack)
            && held.renewed_ago.is_some_and(|d| d <= ttl + slack)
            && held
                .held_for
                .is_none_or(|h| held.renewed_ago.is_some_and(|r| r <= h + slack)),
        "the held slot reads {held:?}"
    );
    let revoked = of(bb.slot)?;
    ensure!(
        revoked.holder.is_none()
            && revoked.token_prefix.is_none()
            && revoked.fence == bb.fence
            && revoked.expires_in.is_some_and(|d| d <= ttl + slack),
        "the revoked slot reads {revoked:?}"
    );
    let r = ctx.store.release_dyn(&ctx.pool, &a, Floor(6_000)).await;
    ensure!(r == Release::Released, "release: {r:?}");
    let slots = ctx
        .store
        .inspect_dyn(&ctx.pool)
        .await
        .map_err(|e| format!("inspect: {e}"))?;
    let freed = slots
        .iter()
        .find(|i| i.slot == a.slot)
        .ok_or("the released slot is gone from inspect")?;
    ensure!(
        freed.holder.is_none()
            && freed.token_prefix.is_none()
            && freed.expires_in.is_none()
            && (!floors || freed.floor == Floor(6_000)),
        "the released slot reads {freed:?}"
    );
    Ok(())
}
