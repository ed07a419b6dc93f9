//! Leases a claim or renewal cannot trust, planted on a private **fake** API
//! server (the Lease stored exactly as given, as a `kubectl edit` could
//! leave it): a floor annotation that is not a whole number from 0, and a
//! resourceVersion at the largest a fence can be. Claims refuse with a
//! final error naming the pool, the slot and the `kubectl` that repairs it,
//! and write nothing; a renewal over a damaged floor is `Lost` and leaves it
//! as found.

use std::sync::Arc;
use std::time::Duration;

use leasehold_conformance::{Target, ensure, trials};
use leasehold_core::{AcquireError, Floor, PoolSpec, Release, Renewal, Strategy};
use leasehold_k8s::{KubeConfig, KubeStrategy, lease_name};
use leasehold_k8s_fake::FakeApiServer;
use serde_json::{Value, json};

use super::{FakeBackend, new_pool};

type Outcome = Result<(), String>;

/// Registers the tests on `target` (the fake's row).
pub(crate) fn register(target: Target) -> Target {
    trials!(target;
        a_damaged_floor_annotation_holds_claims_back_and_ends_a_renewal,
        a_resource_version_at_the_largest_fence_holds_claims_back,
    )
}

/// A fake API server of this test's own, and a strategy on it.
async fn private() -> Result<(FakeApiServer, KubeStrategy), String> {
    let fake = FakeApiServer::start().map_err(|e| e.to_string())?;
    let s = KubeStrategy::connect(
        KubeConfig::url(fake.url())
            .namespace("default")
            .op_timeout(Duration::from_secs(5)),
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok((fake, s))
}

/// Slot 0's Lease of `pool` as stored.
fn stored(fake: &FakeApiServer, pool: &PoolSpec) -> Result<Value, String> {
    fake.lease("default", &lease_name(pool.name(), 0))
        .ok_or_else(|| "slot 0 has no Lease".to_owned())
}

/// Stores slot 0's Lease of `pool` with its floor annotation set to `floor`.
fn plant_floor(fake: &FakeApiServer, pool: &PoolSpec, floor: &str) -> Outcome {
    let mut lease = stored(fake, pool)?;
    lease["metadata"]["annotations"]["leasehold/floor"] = json!(floor);
    fake.insert_raw("default", &lease_name(pool.name(), 0), lease);
    Ok(())
}

/// Expects a claim of `pool` to be refused over slot 0's Lease, naming the
/// pool, the slot, the Lease and each of `needles`.
async fn expect_refused(s: &KubeStrategy, pool: &PoolSpec, needles: &[&str]) -> Outcome {
    match s.acquire(pool, Floor(1_000)).await {
        Err(e @ AcquireError::DamagedRecord { slot: Some(0), .. }) => {
            ensure!(!e.is_retryable(), "a damaged record must be final: {e}");
            let msg = e.to_string();
            let name = format!("{:?}", pool.name().as_str());
            let lease = lease_name(pool.name(), 0);
            for needle in [name.as_str(), "slot 0", &lease]
                .into_iter()
                .chain(needles.iter().copied())
            {
                ensure!(msg.contains(needle), "the refusal lacks {needle:?}: {msg}");
            }
            Ok(())
        }
        other => Err(format!(
            "a claim over slot 0's damaged Lease answered {other:?}; it must be refused"
        )),
    }
}

/// An unreadable floor annotation was read as 0, and the claim stored its
/// own ceiling over it: the hand-over floor was lost (DESIGN.md rule 8).
/// The claim refuses the pool and writes nothing; a holder whose floor
/// annotation is damaged meanwhile loses its lease at the next renewal that
/// raises the floor (its `test` of the floor fails, and the read says why),
/// which leaves it as found; `inspect` names it; a release writes what the
/// holder knows again.
async fn a_damaged_floor_annotation_holds_claims_back_and_ends_a_renewal(
    _b: Arc<FakeBackend>,
) -> Outcome {
    let (fake, s) = private().await?;
    let pool = new_pool(&s, 1, Duration::from_secs(60)).await?;
    let g = s
        .acquire(&pool, Floor(1_000))
        .await
        .map_err(|e| e.to_string())?;
    let released = s.release(&pool, &g, Floor(1_000)).await;
    ensure!(released == Release::Released, "release: {released:?}");
    for bad in ["-5", "abc", "1.5", ""] {
        plant_floor(&fake, &pool, bad)?;
        let before = stored(&fake, &pool)?;
        let shown = format!("{bad:?}");
        expect_refused(&s, &pool, &["leasehold/floor", &shown, "kubectl annotate"]).await?;
        ensure!(
            stored(&fake, &pool)? == before,
            "the refused claim changed the Lease: {}",
            stored(&fake, &pool)?
        );
    }
    plant_floor(&fake, &pool, "7000")?;
    let g = s
        .acquire(&pool, Floor(1_000))
        .await
        .map_err(|e| e.to_string())?;
    ensure!(g.floor == Floor(7000), "grant floor {:?}", g.floor);
    plant_floor(&fake, &pool, "-5")?;
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
            for needle in ["leasehold/floor", "\"-5\"", "slot 0", "kubectl annotate"] {
                ensure!(text.contains(needle), "the loss lacks {needle:?}: {text}");
            }
        }
        other => return Err(format!("a renewal over floor -5 answered {other:?}")),
    }
    let floor = stored(&fake, &pool)?["metadata"]["annotations"]["leasehold/floor"].clone();
    ensure!(floor == json!("-5"), "the lost renewal left floor {floor}");
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

/// A fence is the resourceVersion of the holder's write: a Lease at the
/// largest resourceVersion a fence can be could not be followed by a bigger
/// one (DESIGN.md rule 7). The claim refuses and writes nothing.
async fn a_resource_version_at_the_largest_fence_holds_claims_back(
    _b: Arc<FakeBackend>,
) -> Outcome {
    let (fake, s) = private().await?;
    let pool = new_pool(&s, 1, Duration::from_secs(60)).await?;
    let g = s
        .acquire(&pool, Floor(1_000))
        .await
        .map_err(|e| e.to_string())?;
    let released = s.release(&pool, &g, Floor(1_000)).await;
    ensure!(released == Release::Released, "release: {released:?}");
    let mut lease = stored(&fake, &pool)?;
    lease["metadata"]["resourceVersion"] = json!(u64::MAX.to_string());
    fake.insert_raw("default", &lease_name(pool.name(), 0), lease.clone());
    expect_refused(&s, &pool, &["resourceVersion", &u64::MAX.to_string()]).await?;
    ensure!(
        stored(&fake, &pool)? == lease,
        "the refused claim changed the Lease: {}",
        stored(&fake, &pool)?
    );
    Ok(())
}
