//! Records of the fences hash a claim or renewal cannot trust, planted with
//! `HSET` on the real server: a slot's floor that is not a whole number from
//! 0 (a sign, letters, leading zeros, above `u64::MAX`, empty), a fence at
//! the largest integer the claim script counts exactly (or not a number),
//! and the pool's restart span and promotion record when `tonumber` would
//! read them as 0. Claims refuse with a final error naming the pool, the
//! slot or record and the repair, and write nothing; a renewal over a
//! damaged floor is `Lost` and leaves it as found.

use std::sync::Arc;
use std::time::Duration;

use fred::types::Value;
use leasehold_conformance::{Outcome, Target, ensure, fresh_pool, trials};
use leasehold_core::{AcquireError, Floor, PoolSpec, Release, Renewal, Strategy};
use leasehold_valkey::ValkeyStrategy;

use super::{Valkey, cmd};

/// Registers the tests on `target`.
pub(crate) fn register(target: Target) -> Target {
    trials!(target;
        a_damaged_floor_holds_claims_back_and_ends_a_renewal,
        a_fence_at_the_largest_the_script_counts_holds_claims_back,
        a_damaged_restart_span_or_promotion_record_holds_claims_back,
    )
}

/// `HSET fences field value` for `pool`.
async fn plant(s: &ValkeyStrategy, pool: &PoolSpec, field: &str, value: &str) -> Outcome {
    let fences = s.keys(pool.name()).fences;
    cmd(s, "HSET", vec![fences.into(), field.into(), value.into()]).await?;
    Ok(())
}

/// `HGET fences field` for `pool`.
async fn stored(s: &ValkeyStrategy, pool: &PoolSpec, field: &str) -> Result<String, String> {
    let fences = s.keys(pool.name()).fences;
    let v = cmd(s, "HGET", vec![fences.into(), field.into()]).await?;
    match v {
        Value::Null => Ok("(none)".to_owned()),
        v => v.as_string().ok_or_else(|| format!("HGET {field}: {v:?}")),
    }
}

/// Expects a claim of `pool` to be refused over the damaged record of
/// `slot` (`None`: the pool's), with a message that names the pool, the
/// slot and each of `needles`.
async fn expect_refused(
    s: &ValkeyStrategy,
    pool: &PoolSpec,
    slot: Option<u32>,
    needles: &[&str],
) -> Outcome {
    match s.acquire(pool, Floor(1_000)).await {
        Err(e @ AcquireError::DamagedRecord { slot: at, .. }) if at == slot => {
            ensure!(!e.is_retryable(), "a damaged record must be final: {e}");
            let msg = e.to_string();
            let name = format!("{:?}", pool.name().as_str());
            let slot = slot.map(|s| format!("slot {s}"));
            for needle in [Some(name.as_str()), slot.as_deref()]
                .into_iter()
                .flatten()
                .chain(needles.iter().copied())
            {
                ensure!(msg.contains(needle), "the refusal lacks {needle:?}: {msg}");
            }
            Ok(())
        }
        other => Err(format!(
            "a claim over a damaged record ({slot:?}) answered {other:?}; it must be refused"
        )),
    }
}

/// A floor that is not a whole number from 0 says nothing of what earlier
/// holders stamped (DESIGN.md rule 8). The claim refuses the slot before it
/// writes anything (the slot is claimable at once after the repair, with
/// the repaired floor); a holder whose floor is damaged meanwhile loses its
/// lease at the next renewal, which leaves the floor as found; `inspect`
/// names it; a release writes what the holder knows again.
async fn a_damaged_floor_holds_claims_back_and_ends_a_renewal(b: Arc<Valkey>) -> Outcome {
    let s = b.strategy(b.method).await?;
    let pool = fresh_pool(1, Duration::from_secs(60))?;
    for bad in ["-5", "abc", "007", "18446744073709551616", "1.5", ""] {
        plant(&s, &pool, "floor.0", bad).await?;
        let shown = format!("{bad:?}");
        expect_refused(&s, &pool, Some(0), &["floor.0", &shown, "HSET"]).await?;
        let now = stored(&s, &pool, "floor.0").await?;
        ensure!(
            now == bad,
            "the refused claim changed floor {bad:?} to {now:?}"
        );
    }
    plant(&s, &pool, "floor.0", "7000").await?;
    let g = s
        .acquire(&pool, Floor(1_000))
        .await
        .map_err(|e| format!("after the repair: {e}"))?;
    ensure!(g.floor == Floor(7000), "grant floor {:?}", g.floor);
    plant(&s, &pool, "floor.0", "-5").await?;
    let inspected = s.inspect(&pool).await;
    ensure!(
        inspected
            .as_ref()
            .is_err_and(|e| e.to_string().contains("slot 0") && e.to_string().contains("\"-5\"")),
        "inspect over floor -5 answered {inspected:?}"
    );
    match s.renew(&pool, &g, Floor(9_000)).await {
        Renewal::Lost(reason) => {
            let text = reason.to_string();
            for needle in ["floor.0", "\"-5\"", "slot 0", "HSET"] {
                ensure!(text.contains(needle), "the loss lacks {needle:?}: {text}");
            }
        }
        other => return Err(format!("a renewal over floor -5 answered {other:?}")),
    }
    let now = stored(&s, &pool, "floor.0").await?;
    ensure!(now == "-5", "the lost renewal wrote floor {now}");
    let released = s.release(&pool, &g, Floor(8_000)).await;
    ensure!(released == Release::Released, "release: {released:?}");
    let next = s
        .acquire(&pool, Floor(1_000))
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        next.floor == Floor(8_000),
        "after the release the grant floor is {:?}, not what was issued",
        next.floor
    );
    Ok(())
}

/// The claim script counts fences in Lua's doubles, exact below 2^53: a
/// fence at 2^53 - 1 (or not a number) could not be followed by a bigger
/// one (DESIGN.md rule 7). The claim refuses the slot, naming the fence, and
/// writes nothing. One below still grows, to 2^53 - 1, and then the slot is
/// refused: fences never wrap.
async fn a_fence_at_the_largest_the_script_counts_holds_claims_back(b: Arc<Valkey>) -> Outcome {
    let s = b.strategy(b.method).await?;
    let pool = fresh_pool(1, Duration::from_secs(60))?;
    for bad in ["9007199254740991", "-1", "abc", "inf"] {
        plant(&s, &pool, "0", bad).await?;
        let shown = format!("{bad:?}");
        expect_refused(&s, &pool, Some(0), &["fence", &shown, "HDEL"]).await?;
        let now = stored(&s, &pool, "0").await?;
        ensure!(
            now == bad,
            "the refused claim changed fence {bad:?} to {now:?}"
        );
    }
    plant(&s, &pool, "0", "9007199254740990").await?;
    let g = s
        .acquire(&pool, Floor(1_000))
        .await
        .map_err(|e| e.to_string())?;
    ensure!(g.fence.0 == 9_007_199_254_740_991, "fence {}", g.fence);
    let released = s.release(&pool, &g, Floor(1_000)).await;
    ensure!(released == Release::Released, "release: {released:?}");
    expect_refused(&s, &pool, Some(0), &["\"9007199254740991\""]).await
}

/// `tonumber` read a damaged restart span, promotion record or wipe record
/// as 0: no wait after a restart, a failover or a wipe (DESIGN.md rule 12).
/// Claims refuse the pool, naming the record and the repair, and write
/// nothing.
async fn a_damaged_restart_span_or_promotion_record_holds_claims_back(b: Arc<Valkey>) -> Outcome {
    let s = b.strategy(b.method).await?;
    let pool = fresh_pool(1, Duration::from_secs(60))?;
    for (field, bad, repair) in [
        ("span", "1e9", "HSET"),
        ("replid_seen", "x", "HDEL"),
        ("gone_seen", "x", "HSET"),
    ] {
        plant(&s, &pool, field, bad).await?;
        let shown = format!("{bad:?}");
        expect_refused(&s, &pool, None, &[field, &shown, repair]).await?;
        let now = stored(&s, &pool, field).await?;
        ensure!(
            now == bad,
            "the refused claim changed {field} {bad:?} to {now:?}"
        );
        let fences = s.keys(pool.name()).fences;
        cmd(&s, "HDEL", vec![fences.into(), field.into()]).await?;
    }
    let g = s
        .acquire(&pool, Floor(1_000))
        .await
        .map_err(|e| format!("after the repair: {e}"))?;
    let released = s.release(&pool, &g, Floor(1_000)).await;
    ensure!(released == Release::Released, "release: {released:?}");
    Ok(())
}
