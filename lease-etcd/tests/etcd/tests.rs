//! etcd-specific tests, run on every etcd target.

use leasehold_core::Floor;
use std::time::{Duration, Instant};

use std::sync::Arc;

use leasehold_conformance::proxy::{Fault, FaultProxy};
use leasehold_conformance::{Target, ensure, fresh_pool, fresh_pool_name, trials};
use leasehold_core::{
    AcquireError, Grant, LeaseConfig, LeaseManager, LeaseState, PoolSpec, Release, Renewal,
    StartError, Strategy, Token,
};
use leasehold_etcd::{EtcdConfig, EtcdError, EtcdStrategy};

use super::{EtcdBackend, declare_new, until};

/// Registers the etcd-specific tests on `target`.
pub(crate) fn register(target: Target) -> Target {
    trials!(target;
        watch_reports_a_deleted_key,
        watch_reports_a_rewritten_key,
        watch_survives_dropped_connections_then_reports_loss,
        guard_closes_the_manager_gate_when_the_watch_sees_a_deletion,
        too_short_ttl_is_a_configuration_error,
        fractional_ttl_is_rounded_up_and_reported,
        fence_is_the_keys_create_revision,
        revoke_leaves_a_tombstone_on_the_same_lease_once,
        watch_reports_a_revoke,
        floor_key_outlives_the_slot_key_and_ignores_non_owners,
        acquire_is_two_round_trips_while_candidates_are_free,
        credentials_pass_through_and_are_never_shown,
        tls_to_a_plain_text_server_says_so,
    )
}

async fn delete_behind_the_back(b: &EtcdBackend, key: &str) -> Result<(), String> {
    let other = b.leases().await?;
    let resp = other
        .client()
        .clone()
        .delete(key, None)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(resp.deleted() == 1, "key {key} was not there to delete");
    Ok(())
}

/// A lease deleted behind the holder's back is reported by the watch within
/// 1 s, and the next renewal answers `Lost` without asking etcd.
pub(crate) async fn watch_reports_a_deleted_key(b: Arc<EtcdBackend>) -> Result<(), String> {
    let leases = b.leases().await?;
    let pool = fresh_pool(4, Duration::from_secs(30))?;
    declare_new(&leases, &pool).await?;
    let grant = leases
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    let mut watch = leases.watch_loss(pool.name(), &grant);
    // Give the watch time to be established, so the test measures the event
    // path and not the catch-up from the start revision.
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(
        watch.try_lost().is_none(),
        "loss reported before any change"
    );
    let key = leases.slot_key(pool.name(), grant.slot);
    let start = Instant::now();
    delete_behind_the_back(&b, &key).await?;
    // Only the watch can resolve this future, and the RPC count below shows
    // no renewal ran: that is the property. The 10 s bound is a hang guard
    // on the runtime's own timer, not a speed claim.
    let reason = tokio::time::timeout(Duration::from_secs(10), &mut watch)
        .await
        .map_err(|_| "no loss reported within 10 s of deleting the key".to_owned())?;
    ensure!(
        reason.as_str().contains("deleted"),
        "unexpected reason: {reason}"
    );
    let before = leases.stats().rpcs;
    let r = leases.renew(&pool, &grant, Floor::NONE).await;
    ensure!(matches!(r, Renewal::Lost(_)), "renewal answered {r:?}");
    ensure!(
        leases.stats().rpcs == before,
        "renewal of a watched-lost grant asked etcd"
    );
    eprintln!(
        "watch reported the deletion {:?} after the delete was sent",
        start.elapsed()
    );
    Ok(())
}

/// Someone overwriting the slot key (a blind put) is a loss too.
async fn watch_reports_a_rewritten_key(b: Arc<EtcdBackend>) -> Result<(), String> {
    let leases = b.leases().await?;
    let pool = fresh_pool(4, Duration::from_secs(30))?;
    declare_new(&leases, &pool).await?;
    let grant = leases
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    let watch = leases.watch_loss(pool.name(), &grant);
    let key = leases.slot_key(pool.name(), grant.slot);
    let other = b.leases().await?;
    other
        .client()
        .clone()
        .put(key, "someone else", None)
        .await
        .map_err(|e| e.to_string())?;
    // Only the watch can resolve this future: a 10 s hang guard on the
    // runtime's timer, not a speed claim.
    let reason = tokio::time::timeout(Duration::from_secs(10), watch)
        .await
        .map_err(|_| "rewrite not reported".to_owned())?;
    ensure!(
        reason.as_str().contains("rewritten"),
        "unexpected reason: {reason}"
    );
    // A fresh strategy (no watch) finds out from the key on renewal.
    let fresh = b.leases().await?;
    let r = fresh.renew(&pool, &grant, Floor::NONE).await;
    ensure!(matches!(r, Renewal::Lost(_)), "renewal answered {r:?}");
    let r = fresh.release(&pool, &grant, Floor::NONE).await;
    ensure!(
        r == Release::NotHeld,
        "release of a rewritten key answered {r:?}"
    );
    Ok(())
}

/// Dropped connections are not a loss: the watch reconnects, and still
/// reports the deletion that follows.
pub(crate) async fn watch_survives_dropped_connections_then_reports_loss(
    b: Arc<EtcdBackend>,
) -> Result<(), String> {
    let addr = b.addr.ok_or("no store address")?;
    let proxy = FaultProxy::start(addr).await.map_err(|e| e.to_string())?;
    let leases = EtcdStrategy::connect(
        b.config_via(proxy.addr())?
            .op_timeout(Duration::from_secs(1)),
    )
    .await
    .map_err(|e| e.to_string())?;
    let pool = fresh_pool(2, Duration::from_secs(30))?;
    declare_new(&leases, &pool).await?;
    let grant = leases
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    let mut watch = leases.watch_loss(pool.name(), &grant);
    tokio::time::sleep(Duration::from_millis(200)).await;
    proxy.set(Fault::Drop);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    ensure!(
        watch.try_lost().is_none(),
        "dropped connections were reported as a loss"
    );
    proxy.set(Fault::Pass);
    let key = leases.slot_key(pool.name(), grant.slot);
    delete_behind_the_back(&b, &key).await?;
    tokio::time::timeout(Duration::from_secs(10), watch)
        .await
        .map_err(|_| "deletion after reconnect not reported".to_owned())?;
    Ok(())
}

/// `guard` wires the watch to a manager: after the key is deleted the gate
/// closes and the manager moves to Lost because the **watch** reported it
/// (its reason, not a renewal's: renewals run every 3 s), then the manager
/// re-acquires a new lease.
pub(crate) async fn guard_closes_the_manager_gate_when_the_watch_sees_a_deletion(
    b: Arc<EtcdBackend>,
) -> Result<(), String> {
    let leases = b.leases().await?;
    let losses: Arc<std::sync::Mutex<Vec<leasehold_core::LossEvent>>> = Arc::default();
    let renew_interval = Duration::from_secs(3);
    let config = LeaseConfig::builder(fresh_pool_name().as_str())
        .pool_size(4)
        .ttl(Duration::from_secs(10))
        .renew_interval(renew_interval)
        .on_lost({
            let losses = losses.clone();
            move |e| {
                losses
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(e.clone())
            }
        })
        .build()
        .map_err(|e| e.to_string())?;
    declare_new(&leases, config.pool()).await?;
    let manager = LeaseManager::start(leases.clone(), config)
        .await
        .map_err(|e| e.to_string())?;
    let _guard = leases.guard(&manager);
    let gate = manager.gate();
    let before = gate.view();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let key = leases.slot_key(manager.pool().name(), before.slot);
    let start = Instant::now();
    delete_behind_the_back(&b, &key).await?;
    // Hang guards on the runtime's timer; what is judged is *who* reported
    // the loss (the watch, not a renewal), below.
    let closed = until(Duration::from_secs(10), || gate.check_now().is_err()).await;
    ensure!(
        closed.is_some(),
        "gate still open 10 s after the key was deleted"
    );
    eprintln!("gate closed {:?} after the delete", start.elapsed());
    let mut states = manager.subscribe();
    tokio::time::timeout(
        Duration::from_secs(10),
        states.wait_for(|s| !matches!(s, LeaseState::Held { fence, .. } if *fence == before.fence)),
    )
    .await
    .map_err(|_| {
        format!(
            "manager still held the deleted lease 10 s later: {:?}",
            manager.state()
        )
    })?
    .map_err(|e| e.to_string())?;
    let took = start.elapsed();
    let cause = losses
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .first()
        .map(|e| format!("{:?}", e.cause))
        .unwrap_or_default();
    // The watch's reason ("was deleted at revision"), or a renewal's answer
    // to the watch's flag ("the watch saw"): either way the watch found it.
    if !(cause.contains("was deleted at revision") || cause.contains("watch saw")) {
        // A renewal found it first. Renewals run every 3 s, the first one
        // about 2.7 s after the delete: only a watch delayed that long (a
        // stalled machine) lets one win, and then the run proves nothing.
        let msg = format!(
            "the loss came from a renewal, not the watch, {took:?} after the delete: {cause}"
        );
        return Err(if took >= renew_interval - Duration::from_millis(500) {
            format!("{}{msg}", leasehold_conformance::suite::STARVED)
        } else {
            msg
        });
    }
    // It re-acquires with a new fence.
    let reopened = until(Duration::from_secs(8), || {
        let v = gate.view();
        v.open && v.fence != before.fence && gate.check_now().is_ok()
    })
    .await;
    ensure!(
        reopened.is_some(),
        "manager did not re-acquire after the loss: {:?}",
        manager.state()
    );
    ensure!(
        gate.view().fence > before.fence,
        "new fence {} not above {}",
        gate.view().fence,
        before.fence
    );
    let released = manager.shutdown().await;
    ensure!(
        released == Some(Release::Released),
        "shutdown released {released:?}"
    );
    Ok(())
}

/// A TTL below etcd's minimum is a final configuration error that says what
/// to use — at acquire and at manager start.
async fn too_short_ttl_is_a_configuration_error(b: Arc<EtcdBackend>) -> Result<(), String> {
    let leases = b.leases().await?;
    for ttl in [Duration::from_millis(500), Duration::from_secs(1)] {
        match leases.acquire(&fresh_pool(2, ttl)?, Floor::NONE).await {
            Err(e @ AcquireError::Misconfigured { .. }) => {
                ensure!(!e.is_retryable(), "must be final");
                ensure!(
                    e.to_string().contains("at least 2s"),
                    "message does not say what to use: {e}"
                );
            }
            other => return Err(format!("ttl {ttl:?} answered {other:?}")),
        }
    }
    let config = LeaseConfig::builder(fresh_pool_name().as_str())
        .pool_size(2)
        .ttl(Duration::from_secs(1))
        .build()
        .map_err(|e| e.to_string())?;
    match LeaseManager::start(leases, config).await {
        Err(StartError::Acquire(AcquireError::Misconfigured { .. })) => Ok(()),
        other => Err(format!("manager start answered {:?}", other.map(|_| ()))),
    }
}

/// etcd counts whole seconds: 2.5 s is asked as 3 s and reported as granted.
async fn fractional_ttl_is_rounded_up_and_reported(b: Arc<EtcdBackend>) -> Result<(), String> {
    let leases = b.leases().await?;
    let pool = fresh_pool(2, Duration::from_millis(2500))?;
    declare_new(&leases, &pool).await?;
    let grant = leases
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        grant.ttl == Duration::from_secs(3),
        "granted ttl {:?}",
        grant.ttl
    );
    let r = leases.renew(&pool, &grant, Floor::NONE).await;
    ensure!(
        r == Renewal::renewed(Duration::from_secs(3)),
        "renewal answered {r:?}"
    );
    Ok(())
}

/// The fence is the key's create revision, the value carries the token, and
/// the key is attached to a lease.
async fn fence_is_the_keys_create_revision(b: Arc<EtcdBackend>) -> Result<(), String> {
    let leases = b.leases().await?;
    let pool = fresh_pool(2, Duration::from_secs(30))?;
    declare_new(&leases, &pool).await?;
    let grant = leases
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    let key = leases.slot_key(pool.name(), grant.slot);
    ensure!(
        key == format!("leasehold/{}/{}", pool.name(), grant.slot),
        "key layout {key}"
    );
    let resp = leases
        .client()
        .clone()
        .get(key.clone(), None)
        .await
        .map_err(|e| e.to_string())?;
    let kv = resp.kvs().first().ok_or("slot key missing")?;
    ensure!(
        u64::try_from(kv.create_revision()).ok() == Some(grant.fence.0),
        "fence {} vs create revision {}",
        grant.fence,
        kv.create_revision()
    );
    ensure!(
        kv.value().starts_with(grant.token.to_hex().as_bytes()),
        "value does not carry the token"
    );
    ensure!(kv.lease() != 0, "key not attached to a lease");
    let ttl = leases
        .client()
        .clone()
        .lease_time_to_live(
            kv.lease(),
            Some(etcd_client::LeaseTimeToLiveOptions::new().with_keys()),
        )
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        ttl.keys().iter().any(|k| k == key.as_bytes()),
        "lease does not hold the key"
    );
    ensure!(ttl.ttl() > 0 && ttl.ttl() <= 30, "lease ttl {}", ttl.ttl());
    Ok(())
}

/// A failure, or a starved outcome when the lease acquired at `sent` with
/// `ttl` may have expired by now (the machine stalled for longer than the
/// TTL, so the store rightly let it go and the run proves nothing).
fn judged(sent: Instant, ttl: Duration, msg: String) -> String {
    if sent.elapsed() < ttl {
        msg
    } else {
        format!(
            "{}{msg} (judged {:?} after the lease's request was sent; TTL {ttl:?})",
            leasehold_conformance::suite::STARVED,
            sent.elapsed()
        )
    }
}

/// The slot key's `(value, create revision, lease)`, if it exists.
async fn read_key(leases: &EtcdStrategy, key: &str) -> Result<Option<(Vec<u8>, i64, i64)>, String> {
    let resp = leases
        .client()
        .clone()
        .get(key, None)
        .await
        .map_err(|e| e.to_string())?;
    Ok(resp
        .kvs()
        .first()
        .map(|kv| (kv.value().to_vec(), kv.create_revision(), kv.lease())))
}

/// The stored floor of `slot` (its key `<prefix>/<pool>/~floor/<slot>` must
/// be on no lease), or `None` when the key does not exist.
async fn read_floor(
    leases: &EtcdStrategy,
    pool: &PoolSpec,
    slot: u32,
) -> Result<Option<Floor>, String> {
    let key = format!("leasehold/{}/~floor/{slot}", pool.name());
    let Some((value, _, lease)) = read_key(leases, &key).await? else {
        return Ok(None);
    };
    ensure!(lease == 0, "floor key {key} is on etcd lease {lease:x}");
    let text = String::from_utf8(value).map_err(|e| e.to_string())?;
    ensure!(
        text.len() == 20 && text.bytes().all(|b| b.is_ascii_digit()),
        "floor key {key} holds {text:?}, not 20 decimal digits"
    );
    Ok(Some(Floor(text.parse().map_err(|e| format!("{e}"))?)))
}

/// `revoke` leaves a tombstone in the slot key on the holder's own etcd lease
/// (same create revision, lease still alive), once: the holder's renewal is
/// `Lost` and its release `NotHeld`, a rival cannot claim the slot meanwhile,
/// the floor is untouched, and the next holder (here after the revoked
/// holder's release, which is allowed to free it: it has stopped
/// generating) gets a bigger fence and the floor.
async fn revoke_leaves_a_tombstone_on_the_same_lease_once(
    b: Arc<EtcdBackend>,
) -> Result<(), String> {
    let leases = b.leases().await?;
    let ttl = Duration::from_secs(30);
    let pool = fresh_pool(1, ttl)?;
    declare_new(&leases, &pool).await?;
    let sent = Instant::now();
    let grant = leases
        .acquire(&pool, Floor(1_000))
        .await
        .map_err(|e| e.to_string())?;
    let key = leases.slot_key(pool.name(), 0);
    let (_, created, lease_id) = read_key(&leases, &key).await?.ok_or("slot key missing")?;
    let operator = b.leases().await?;
    let first = operator.revoke(&pool, 0).await.map_err(|e| e.to_string())?;
    if !first {
        return Err(judged(sent, ttl, "first revoke found nothing".into()));
    }
    ensure!(
        !operator.revoke(&pool, 0).await.map_err(|e| e.to_string())?,
        "second revoke found a holder"
    );
    let Some((value, created_after, lease_after)) = read_key(&leases, &key).await? else {
        return Err(judged(sent, ttl, "the tombstone is gone".into()));
    };
    ensure!(
        value == EtcdStrategy::TOMBSTONE.as_bytes(),
        "slot key holds {:?} after the revoke",
        String::from_utf8_lossy(&value)
    );
    ensure!(
        created_after == created && lease_after == lease_id,
        "the tombstone is on create revision {created_after} / lease {lease_after:x}, the \
         holding was {created} / {lease_id:x}"
    );
    let alive = leases
        .client()
        .clone()
        .lease_time_to_live(lease_id, None)
        .await
        .map_err(|e| e.to_string())?;
    if alive.ttl() <= 0 {
        return Err(judged(
            sent,
            ttl,
            format!("the revoked etcd lease is gone (ttl {})", alive.ttl()),
        ));
    }
    let rival = b.leases().await?;
    match rival.acquire(&pool, Floor(5_000)).await {
        Err(AcquireError::PoolExhausted { .. }) => {}
        other => {
            return Err(judged(
                sent,
                ttl,
                format!("a rival claimed the revoked slot before its expiry: {other:?}"),
            ));
        }
    }
    let r = leases.renew(&pool, &grant, Floor(9_000)).await;
    ensure!(
        matches!(&r, Renewal::Lost(reason) if reason.as_str().contains("revoked")),
        "renewal after revoke answered {r:?}"
    );
    let floor = read_floor(&leases, &pool, 0).await?;
    ensure!(
        floor == Some(Floor(1_000)),
        "the revoke or the lost renewal changed the floor to {floor:?}"
    );
    let r = leases.release(&pool, &grant, Floor(3)).await;
    ensure!(r == Release::NotHeld, "release after revoke answered {r:?}");
    let floor = read_floor(&leases, &pool, 0).await?;
    ensure!(
        floor == Some(Floor(1_000)),
        "the release of a revoked grant changed the floor to {floor:?}"
    );
    // The revoked holder's release revoked its own lease, tombstone and all.
    let next = rival
        .acquire(&pool, Floor(2_000))
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        next.fence > grant.fence,
        "fence {} after {}",
        next.fence,
        grant.fence
    );
    ensure!(
        next.floor == Floor(1_000),
        "the next holder got floor {:?}",
        next.floor
    );
    Ok(())
}

/// The watch reports a revoke (the tombstone is a rewrite of the key) at
/// once, and the renewal that follows is `Lost` without asking etcd.
async fn watch_reports_a_revoke(b: Arc<EtcdBackend>) -> Result<(), String> {
    let leases = b.leases().await?;
    let pool = fresh_pool(2, Duration::from_secs(30))?;
    declare_new(&leases, &pool).await?;
    let grant = leases
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    let watch = leases.watch_loss(pool.name(), &grant);
    let operator = b.leases().await?;
    ensure!(
        operator
            .revoke(&pool, grant.slot)
            .await
            .map_err(|e| e.to_string())?,
        "revoke found nothing"
    );
    // Only the watch can resolve this future: a hang guard, not a speed claim.
    let reason = tokio::time::timeout(Duration::from_secs(10), watch)
        .await
        .map_err(|_| "revoke not reported".to_owned())?;
    ensure!(
        reason.as_str().contains("revoked"),
        "unexpected reason: {reason}"
    );
    let before = leases.stats().rpcs;
    let r = leases.renew(&pool, &grant, Floor::NONE).await;
    ensure!(matches!(r, Renewal::Lost(_)), "renewal answered {r:?}");
    ensure!(
        leases.stats().rpcs == before,
        "renewal of a watched-lost grant asked etcd"
    );
    Ok(())
}

/// The floor lives in `<prefix>/<pool>/~floor/<slot>`, on no lease: it
/// survives the slot key's expiry and the next holder's grant carries it.
/// Renewals and releases of grants that do not own the slot (another token,
/// or the holder whose lease expired) never change it; the owner's renewal
/// only raises it (one round trip of two requests), its release sets it.
async fn floor_key_outlives_the_slot_key_and_ignores_non_owners(
    b: Arc<EtcdBackend>,
) -> Result<(), String> {
    let leases = b.leases().await?;
    let rival = b.leases().await?;
    // The first holder's lease is short (it is left to expire); the second
    // holder's is long, so its renewals do not depend on a quiet machine.
    let short = fresh_pool(1, Duration::from_secs(2))?;
    declare_new(&leases, &short).await?;
    let long_ttl = Duration::from_secs(30);
    let long = PoolSpec::new(short.name().clone(), 1, long_ttl).map_err(|e| e.to_string())?;
    let floor_of = || read_floor(&leases, &short, 0);

    let first = leases
        .acquire(&short, Floor(7_000))
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        first.floor == Floor::NONE,
        "fresh slot with floor {:?}",
        first.floor
    );
    ensure!(
        floor_of().await? == Some(Floor(7_000)),
        "after acquire with ceiling 7000 the floor key holds {:?}",
        floor_of().await?
    );

    // Someone with another token and the same slot and fence owns nothing.
    let stranger = Grant::new(0, Token::random(), first.fence, first.ttl);
    let r = rival.renew(&short, &stranger, Floor(50_000)).await;
    ensure!(matches!(r, Renewal::Lost(_)), "stranger's renewal: {r:?}");
    let r = rival.release(&short, &stranger, Floor(1)).await;
    ensure!(r == Release::NotHeld, "stranger's release: {r:?}");
    ensure!(
        floor_of().await? == Some(Floor(7_000)),
        "a stranger's renew/release changed the floor to {:?}",
        floor_of().await?
    );

    // The slot key expires with its lease; the floor key stays.
    let key = leases.slot_key(short.name(), 0);
    let limit = Duration::from_secs(20);
    let start = Instant::now();
    while read_key(&leases, &key).await?.is_some() {
        ensure!(
            start.elapsed() < limit,
            "slot key still there {limit:?} after a 2 s lease was left to expire"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ensure!(
        floor_of().await? == Some(Floor(7_000)),
        "after the slot key expired the floor key holds {:?}",
        floor_of().await?
    );
    // The expired holder owns nothing any more either.
    let r = leases.renew(&short, &first, Floor(99_000)).await;
    ensure!(matches!(r, Renewal::Lost(_)), "expired renewal: {r:?}");
    let r = leases.release(&short, &first, Floor(1)).await;
    ensure!(r == Release::NotHeld, "expired release: {r:?}");
    ensure!(
        floor_of().await? == Some(Floor(7_000)),
        "the expired holder's renew/release changed the floor to {:?}",
        floor_of().await?
    );

    // The next holder gets it, and its ceiling is kept.
    let sent = Instant::now();
    let second = rival
        .acquire(&long, Floor(8_000))
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        second.floor == Floor(7_000),
        "the next holder's grant carries {:?}, not 7000",
        second.floor
    );
    ensure!(
        floor_of().await? == Some(Floor(8_000)),
        "after the second acquire the floor key holds {:?}",
        floor_of().await?
    );
    for (ceiling, expect) in [(3_000, 8_000), (12_000, 12_000)] {
        let before = rival.stats().rpcs;
        let r = rival.renew(&long, &second, Floor(ceiling)).await;
        if !matches!(r, Renewal::Renewed { .. }) {
            return Err(judged(sent, long_ttl, format!("renewal answered {r:?}")));
        }
        let used = rival.stats().rpcs - before;
        ensure!(used == 2, "a renewal sent {used} requests");
        let floor = floor_of().await?;
        ensure!(
            floor == Some(Floor(expect)),
            "after a renewal with ceiling {ceiling} the floor key holds {floor:?}, not {expect}"
        );
    }
    // Stale and foreign grants still change nothing while someone holds it.
    let _ = leases.renew(&short, &first, Floor(99_000)).await;
    let _ = leases.release(&short, &first, Floor(1)).await;
    let _ = leases.renew(&short, &stranger, Floor(99_000)).await;
    let _ = leases.release(&short, &stranger, Floor(1)).await;
    ensure!(
        floor_of().await? == Some(Floor(12_000)),
        "a non-owner changed the holder's floor to {:?}",
        floor_of().await?
    );
    let r = rival.release(&long, &second, Floor(11_000)).await;
    if r != Release::Released {
        return Err(judged(sent, long_ttl, format!("release answered {r:?}")));
    }
    ensure!(
        floor_of().await? == Some(Floor(11_000)),
        "after a release reporting 11000 the floor key holds {:?}",
        floor_of().await?
    );
    ensure!(
        read_key(&leases, &key).await?.is_none(),
        "the slot key survived the release"
    );
    Ok(())
}

/// Round trips: 2 per acquisition while a candidate is free; a nearly full
/// pool costs at most one more transaction per round.
async fn acquire_is_two_round_trips_while_candidates_are_free(
    b: Arc<EtcdBackend>,
) -> Result<(), String> {
    let leases = b.leases().await?;
    let pool = fresh_pool(64, Duration::from_secs(30))?;
    declare_new(&leases, &pool).await?;
    let before = leases.stats().rpcs;
    leases
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    let used = leases.stats().rpcs - before;
    ensure!(used == 2, "first acquisition used {used} requests");
    for _ in 1..64 {
        leases
            .acquire(&pool, Floor::NONE)
            .await
            .map_err(|e| e.to_string())?;
    }
    let stats = leases.stats();
    ensure!(stats.acquisitions == 64, "{stats:?}");
    ensure!(
        stats.max_acquire_rpcs <= 3,
        "an acquisition needed {} requests",
        stats.max_acquire_rpcs
    );
    let before = leases.stats().rpcs;
    match leases.acquire(&pool, Floor::NONE).await {
        Err(AcquireError::PoolExhausted { .. }) => {}
        other => return Err(format!("full pool answered {other:?}")),
    }
    // Grant + one txn whose bottom read shows the pool full (+ a background revoke).
    let used = leases.stats().rpcs - before;
    ensure!(used <= 3, "exhausted answer used {used} requests");
    eprintln!(
        "64 sequential acquisitions: {} requests, {:.2} per acquisition, max {}",
        stats.acquire_rpcs,
        stats.acquire_rpcs as f64 / stats.acquisitions as f64,
        stats.max_acquire_rpcs
    );
    Ok(())
}

/// User/password reach etcd: on a private server with auth enabled, the right
/// password acquires, a wrong one is `EtcdError::Auth`, a user without
/// permission gets a final error — and no message shows a password.
async fn credentials_pass_through_and_are_never_shown(b: Arc<EtcdBackend>) -> Result<(), String> {
    // Auth changes the whole server: start a private one from the local
    // binary, never the shared (maybe external) server.
    let server = leasehold_conformance::etcd_cluster::EtcdCluster::start_kind(b.kind, 1)?;
    super::cluster::leader(&server, Duration::from_secs(30)).await?;
    let url = server.endpoints()[0].clone();
    let mut admin = etcd_client::Client::connect([url.clone()], None)
        .await
        .map_err(|e| e.to_string())?;
    let root_pw = "r00t-Secret-pw";
    let app_pw = "app-Secret-pw";
    admin
        .user_add("root", root_pw, None)
        .await
        .map_err(|e| e.to_string())?;
    admin
        .user_grant_role("root", "root")
        .await
        .map_err(|e| e.to_string())?;
    admin
        .user_add("app", app_pw, None)
        .await
        .map_err(|e| e.to_string())?;
    admin.auth_enable().await.map_err(|e| e.to_string())?;

    let pool = fresh_pool(2, Duration::from_secs(10))?;
    // Root may do everything.
    let config = EtcdConfig::new([url.clone()]).user("root", root_pw);
    ensure!(
        !format!("{config:?}").contains(root_pw),
        "password in Debug output"
    );
    let leases = EtcdStrategy::connect(config)
        .await
        .map_err(|e| e.to_string())?;
    declare_new(&leases, &pool).await?;
    ensure!(
        !leases.identity().contains(root_pw) && !format!("{leases:?}").contains(root_pw),
        "password in identity or Debug"
    );
    let grant = leases
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    let r = leases.renew(&pool, &grant, Floor::NONE).await;
    ensure!(matches!(r, Renewal::Renewed { .. }), "renewal {r:?}");
    // Nor in any span or event of a manager holding, renewing and releasing.
    {
        use leasehold_conformance::secrets::{self, Secret, Shown};
        let _ = secrets::capture();
        let mut shown = Shown::new(&Secret::given(root_pw));
        secrets::exercise(Arc::new(leases.clone()), &mut shown).await?;
        shown.traces().metrics().verdict()?;
    }

    // The password from a file (read at connect), the user from the URL.
    let dir = std::env::temp_dir().join(format!("leasehold-etcd-pw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let file = dir.join("password");
    std::fs::write(&file, format!("{root_pw}\n")).map_err(|e| e.to_string())?;
    let host = url.trim_start_matches("http://");
    let from_file = EtcdConfig::from_url(&format!(
        "etcd://root@{host}?password_file={}",
        file.display()
    ))
    .map_err(|e| e.to_string())?;
    let by_file = EtcdStrategy::connect(from_file.clone())
        .await
        .map_err(|e| format!("connect with password_file: {e}"))?;
    let g = by_file
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| format!("acquire with password_file: {e}"))?;
    let r = by_file.release(&pool, &g, Floor::NONE).await;
    ensure!(r == leasehold_core::Release::Released, "release {r:?}");
    std::fs::write(&file, "wrong-Secret").map_err(|e| e.to_string())?;
    match EtcdStrategy::connect(from_file.clone()).await {
        Err(e @ EtcdError::Auth { .. }) => {
            ensure!(!e.to_string().contains("wrong-Secret"), "password in: {e}");
        }
        other => return Err(format!("a wrong file answered {:?}", other.map(|_| ()))),
    }
    std::fs::remove_file(&file).map_err(|e| e.to_string())?;
    match EtcdStrategy::connect(from_file).await {
        Err(e @ EtcdError::Connect { .. }) => ensure!(
            e.to_string().contains("the password file"),
            "a missing file answered {e}"
        ),
        other => return Err(format!("a missing file answered {:?}", other.map(|_| ()))),
    }
    let _ = std::fs::remove_dir_all(&dir);

    // A wrong password is refused at connect, without echoing it.
    match EtcdStrategy::connect(EtcdConfig::new([url.clone()]).user("root", "wrong-Secret")).await {
        Err(e @ EtcdError::Auth { .. }) => {
            let text = e.to_string();
            ensure!(
                !text.contains("wrong-Secret"),
                "password in error message: {text}"
            );
        }
        other => return Err(format!("wrong password answered {:?}", other.map(|_| ()))),
    }

    // A user without any role may not grant leases or write keys: final error.
    let app = EtcdStrategy::connect(EtcdConfig::new([url]).user("app", app_pw))
        .await
        .map_err(|e| e.to_string())?;
    match app.acquire(&pool, Floor::NONE).await {
        Err(e @ AcquireError::Misconfigured { .. }) => {
            ensure!(!e.to_string().contains(app_pw), "password in message: {e}");
        }
        other => return Err(format!("user without permission answered {other:?}")),
    }
    drop(server);
    Ok(())
}

/// `etcds://` to a server that takes plain text only: the handshake is cut
/// off, and the error says the server answers without TLS, and what to do.
/// Nothing falls back to plain text.
async fn tls_to_a_plain_text_server_says_so(b: Arc<EtcdBackend>) -> Result<(), String> {
    let pki = leasehold_conformance::tls::Pki::shared()?;
    let addr = b.addr.ok_or("no store address")?;
    let url = format!(
        "etcds://{addr}?ca={}&cert={}&key={}",
        pki.ca.display(),
        pki.client.cert.display(),
        pki.client.key.display()
    );
    let config = EtcdConfig::from_url(&url).map_err(|e| e.to_string())?;
    match EtcdStrategy::connect(config).await {
        Err(e @ EtcdError::Tls { .. }) => {
            let text = e.to_string();
            for needle in [
                &format!("the server at {addr} takes plain text only"),
                "turn TLS on in the server",
                "write etcd://",
            ] {
                ensure!(text.contains(needle), "{needle:?} missing from: {text}");
            }
            eprintln!("refused, as it should be: {text}");
            Ok(())
        }
        Err(e) => Err(format!("not a TLS error: {e}")),
        Ok(_) => Err(format!("{url} connected to a plain-text server")),
    }
}
