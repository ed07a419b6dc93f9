//! Floor keys a claim or renewal cannot trust, planted with a plain put on
//! the real server: values that are not 20 decimal digits, sorting below a
//! ceiling's digits (which the raise in the claim's transaction replaces)
//! and above them (which it leaves). Claims refuse with a final error that
//! names the pool, the slot and the repair, put the value back and give the
//! slot up; a renewal over a damaged floor is `Lost` and leaves it as found.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_conformance::{Target, ensure, fresh_pool, trials};
use leasehold_core::{AcquireError, Floor, Grant, PoolSpec, Release, Renewal, Strategy};
use leasehold_etcd::EtcdStrategy;

use super::EtcdBackend;

type Outcome = Result<(), String>;

/// Registers the tests on `target`.
pub(crate) fn register(target: Target) -> Target {
    trials!(target; a_damaged_floor_holds_claims_back_and_ends_a_renewal)
}

/// The floor key of `pool`'s slot 0 under the default prefix.
fn floor_key(pool: &PoolSpec) -> String {
    format!("leasehold/{}/~floor/0", pool.name())
}

async fn put(s: &EtcdStrategy, key: &str, value: &str) -> Outcome {
    s.client()
        .clone()
        .put(key, value, None)
        .await
        .map(drop)
        .map_err(|e| format!("put {key}: {e}"))
}

async fn get(s: &EtcdStrategy, key: &str) -> Result<Option<String>, String> {
    let resp = s
        .client()
        .clone()
        .get(key, None)
        .await
        .map_err(|e| format!("get {key}: {e}"))?;
    Ok(resp
        .kvs()
        .first()
        .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()))
}

/// Polls until slot 0 of `pool` has no key: a refused claim gives the slot
/// up by revoking its etcd lease in the background.
async fn until_free(s: &EtcdStrategy, pool: &PoolSpec) -> Outcome {
    let key = format!("leasehold/{}/0", pool.name());
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(s, &key).await?.is_some() {
        ensure!(
            Instant::now() < deadline,
            "the refused claim's key {key} is still there after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// A claim of `pool`, polled until the slot a refused claim gave up (its
/// etcd lease is revoked in the background) is free again.
async fn claim(s: &EtcdStrategy, pool: &PoolSpec) -> Result<Grant, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match s.acquire(pool, Floor(1_000)).await {
            Ok(g) => return Ok(g),
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(format!("claim: {e}")),
        }
    }
}

/// A floor key that is not 20 decimal digits says nothing of what earlier
/// holders stamped (DESIGN.md rule 8). The claim's transaction reads it and
/// raises it in one step: the claim then puts a value its raise replaced
/// back, gives the slot up (it is claimable after the repair) and refuses,
/// naming the key, the value and an `etcdctl put` that repairs it. A holder
/// whose floor is damaged meanwhile loses its lease at the next renewal,
/// which leaves the value as found; `inspect` names it; a release writes
/// what the holder knows again.
async fn a_damaged_floor_holds_claims_back_and_ends_a_renewal(b: Arc<EtcdBackend>) -> Outcome {
    let s = b.leases().await?;
    let pool = fresh_pool(1, Duration::from_secs(60))?;
    super::declare_new(&s, &pool).await?;
    let key = floor_key(&pool);
    // "-5" and "" sort below every ceiling's digits (the raise replaces
    // them); the others above (the raise leaves them).
    for bad in ["-5", "", "abc", "1764000000000", "0000000000000000000x"] {
        put(&s, &key, bad).await?;
        match s.acquire(&pool, Floor(1_000)).await {
            Err(e @ AcquireError::DamagedRecord { slot: Some(0), .. }) => {
                ensure!(!e.is_retryable(), "a damaged record must be final: {e}");
                let msg = e.to_string();
                let name = format!("{:?}", pool.name().as_str());
                let shown = format!("{bad:?}");
                for needle in [name.as_str(), "slot 0", &key, &shown, "etcdctl put"] {
                    ensure!(msg.contains(needle), "the refusal lacks {needle:?}: {msg}");
                }
            }
            other => {
                return Err(format!(
                    "a claim over floor {bad:?} answered {other:?}; it must be refused"
                ));
            }
        }
        let now = get(&s, &key).await?;
        ensure!(
            now.as_deref() == Some(bad),
            "the refused claim left floor {now:?} instead of {bad:?}"
        );
        until_free(&s, &pool).await?;
    }
    put(&s, &key, "00000000000000007000").await?;
    let g = claim(&s, &pool).await?;
    ensure!(g.floor == Floor(7000), "grant floor {:?}", g.floor);
    put(&s, &key, "-5").await?;
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
            for needle in [key.as_str(), "\"-5\"", "slot 0", "etcdctl put"] {
                ensure!(text.contains(needle), "the loss lacks {needle:?}: {text}");
            }
        }
        other => return Err(format!("a renewal over floor -5 answered {other:?}")),
    }
    let now = get(&s, &key).await?;
    ensure!(
        now.as_deref() == Some("-5"),
        "the lost renewal left floor {now:?}"
    );
    let released = s.release(&pool, &g, Floor(8_000)).await;
    ensure!(released == Release::Released, "release: {released:?}");
    let next = claim(&s, &pool).await?;
    ensure!(
        next.floor == Floor(8_000),
        "after the release the grant floor is {:?}, not what was issued",
        next.floor
    );
    let released = s.release(&pool, &next, Floor(8_000)).await;
    ensure!(released == Release::Released, "release: {released:?}");
    Ok(())
}
