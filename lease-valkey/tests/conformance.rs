//! The whole behaviour suite on Redis 8.2 (HSETEX path), Redis 7.0 and
//! Valkey 8.1 (script path), plus Valkey-specific behaviours; on Redis 7.0
//! over TLS only, with client certificates, plus each way TLS must fail;
//! on Redis 7.0 and Valkey 8.1 as an ACL lease user; and on Valkey
//! 8.1 through Sentinel (a primary, a replica, three Sentinels); and on a
//! Valkey 8.1 Cluster (three primaries with a replica each).

mod damaged;

use leasehold_core::Floor;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use fred::prelude::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use leasehold_conformance::servers::{
    Missing, Server, ServerKind, VALKEY8_CLUSTER_LABEL, VALKEY8_SENTINEL_LABEL, find_binary,
    provide, provide_tls,
};
use leasehold_conformance::suite::STARVED;
use leasehold_conformance::tls::Pair;
use leasehold_conformance::topology::cluster::ClusterTopology;
use leasehold_conformance::topology::sentinel::SentinelTopology;
use leasehold_conformance::{Glue, Outcome, Store, Target, ensure, fresh_pool, trials};
use leasehold_core::{
    AcquireError, BoxFuture, DurabilityPolicy, Grant, IdFormat, LeaseConfig, LeaseGate,
    LeaseManager, LossCause, LossEvent, PoolSpec, Release, Renewal, Strategy,
};
use leasehold_valkey::{ActivePath, Method, ValkeyConfig, ValkeyError, ValkeyStrategy, marker};

/// The TLS row's own tests: each way TLS must fail, named with its fix.
#[path = "conformance/tls.rs"]
mod tls;

/// The suite as a lease user: the ACL of `LeaseUserAcl`, and what a
/// missing rule says.
#[path = "conformance/lease_user.rs"]
mod lease_user;

struct Valkey {
    url: String,
    addr: SocketAddr,
    method: Method,
    prefix: String,
    /// The path the probe must pick on this server.
    path: ActivePath,
    /// The server's version, as the provider read it.
    version: String,
    /// The server binary, to start private servers with other settings.
    binary: Option<PathBuf>,
}

impl Valkey {
    /// The row's URL read as a user's would be (TLS files included).
    fn config(&self) -> Result<ValkeyConfig, String> {
        ValkeyConfig::from_url(&self.url).map_err(|e| e.to_string())
    }

    /// The test servers keep nothing on disk and start seconds before the
    /// tests, so the restart guard would hold every claim for a TTL; they are
    /// never restarted while these tests hold leases, so the guard is off
    /// here (and in every config below but the guard's own test).
    async fn strategy(&self, method: Method) -> Result<ValkeyStrategy, String> {
        ValkeyStrategy::connect(
            ValkeyConfig::from_url(&self.url)
                .map_err(|e| e.to_string())?
                .durability(DurabilityPolicy::Throwaway)
                .key_prefix(&self.prefix)
                .method(method),
        )
        .await
        .map_err(|e| e.to_string())
    }
}

impl Glue for Valkey {
    fn connect(&self) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async move { Ok(Arc::new(self.strategy(self.method).await?) as Store) })
    }

    /// Every test's pool is new (a fresh random name): said so, so that its
    /// first claim is not held back as a possibly wiped pool's.
    fn prepare<'a>(&'a self, pool: &'a PoolSpec) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let s = self.strategy(self.method).await?;
            s.declare_new_pool(pool).await.map_err(|e| e.to_string())
        })
    }

    fn connect_via(
        &self,
        addr: SocketAddr,
        op_timeout: Duration,
    ) -> BoxFuture<'_, Result<Store, String>> {
        let url = self
            .url
            .replacen(&self.addr.to_string(), &addr.to_string(), 1);
        Box::pin(async move {
            let s = ValkeyStrategy::connect(
                ValkeyConfig::from_url(&url)
                    .map_err(|e| e.to_string())?
                    .durability(DurabilityPolicy::Throwaway)
                    .key_prefix(&self.prefix)
                    .method(self.method)
                    .op_timeout(op_timeout),
            )
            .await
            .map_err(|e| e.to_string())?;
            Ok(Arc::new(s) as Store)
        })
    }

    fn store_addr(&self) -> Option<SocketAddr> {
        Some(self.addr)
    }

    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> Option<BoxFuture<'a, Result<(), String>>> {
        Some(Box::pin(async move {
            let s = self.strategy(self.method).await?;
            let was = s.revoke(pool, slot).await.map_err(|e| e.to_string())?;
            ensure!(was, "no lease on slot {slot} to revoke");
            Ok(())
        }))
    }
}

async fn cmd(s: &ValkeyStrategy, name: &'static str, args: Vec<Value>) -> Result<Value, String> {
    s.client()
        .custom::<Value, Value>(
            CustomCommand::new_static(name, ClusterHash::FirstKey, false),
            args,
        )
        .await
        .map_err(|e| format!("{name}: {e}"))
}

/// `Ok` when `ok`. Otherwise, as the suite judges "still held": a failure if
/// the lease was surely live when the answer came (less than its TTL after
/// its request was `sent`), and a starved outcome (the machine stalled, the
/// run proves nothing and is repeated) if it may have expired.
fn judge(sent: Instant, ttl: Duration, ok: bool, msg: impl FnOnce() -> String) -> Outcome {
    if ok {
        return Ok(());
    }
    let at = Instant::now();
    if at < sent + ttl {
        Err(msg())
    } else {
        Err(format!(
            "{STARVED}{} (judged {:?} after the lease's request was sent; TTL {ttl:?})",
            msg(),
            at - sent
        ))
    }
}

/// Acquires on `s` with `ceiling`, noting when the request was sent.
async fn hold(s: &ValkeyStrategy, p: &PoolSpec, ceiling: u64) -> Result<(Grant, Instant), String> {
    let sent = Instant::now();
    let g = s
        .acquire(p, Floor(ceiling))
        .await
        .map_err(|e| format!("{} acquire: {e}", s.path()))?;
    Ok((g, sent))
}

/// Renews (raising the floor to `ceiling`) and releases (leaving `issued`),
/// both of which must succeed while the lease is live.
async fn renew_and_release(
    s: &ValkeyStrategy,
    p: &PoolSpec,
    (g, sent): (Grant, Instant),
    ceiling: u64,
    issued: u64,
) -> Outcome {
    let renewed = Instant::now();
    let r = s.renew(p, &g, Floor(ceiling)).await;
    judge(sent, g.ttl, matches!(r, Renewal::Renewed { .. }), || {
        format!("{} renewal answered {r:?}", s.path())
    })?;
    let r = s.release(p, &g, Floor(issued)).await;
    judge(renewed, g.ttl, r == Release::Released, || {
        format!("{} release answered {r:?}", s.path())
    })
}

/// The floor lives in the fences hash both paths share, so a slot's floor
/// survives a change of path (an in-place upgrade from Redis 7 to 8): what
/// a holder on one path reports is carried by the next grant on the other.
/// Floors are exact beyond 2^53, where Lua's numbers are not.
async fn floor_is_carried_across_paths(b: Arc<Valkey>) -> Outcome {
    let scripts = b.strategy(Method::Scripts).await?;
    let hsetex = b.strategy(Method::Hsetex).await?;
    ensure!(
        scripts.path() == ActivePath::Scripts && hsetex.path() == ActivePath::Hsetex,
        "paths {} and {}",
        scripts.path(),
        hsetex.path()
    );
    let p = fresh_pool(1, Duration::from_secs(30))?;
    let held = hold(&scripts, &p, 4_000).await?;
    ensure!(
        held.0.floor == Floor::NONE,
        "fresh slot: {:?}",
        held.0.floor
    );
    renew_and_release(&scripts, &p, held, 6_000, 5_000).await?;

    let held = hold(&hsetex, &p, 1_000).await?;
    ensure!(
        held.0.floor == Floor(5_000),
        "HSETEX grant after a script-path release of 5000 carries {:?}",
        held.0.floor
    );
    renew_and_release(&hsetex, &p, held, 8_000, 7_000).await?;

    let held = hold(&scripts, &p, 2_000).await?;
    ensure!(
        held.0.floor == Floor(7_000),
        "script-path grant after an HSETEX release of 7000 carries {:?}",
        held.0.floor
    );
    // 2^53 + 1 and 2^53 are one double: only an exact comparison keeps the
    // bigger.
    let big = (1u64 << 53) + 1;
    renew_and_release(&scripts, &p, held, big, big).await?;
    let held = hold(&hsetex, &p, big - 1).await?;
    ensure!(
        held.0.floor == Floor(big),
        "after a release of {big} the next grant carries {:?}",
        held.0.floor
    );
    renew_and_release(&hsetex, &p, held, u64::MAX, u64::MAX).await?;
    let held = hold(&scripts, &p, 0).await?;
    ensure!(
        held.0.floor == Floor(u64::MAX),
        "after a release of u64::MAX the next grant carries {:?}",
        held.0.floor
    );
    Ok(())
}

/// After an in-place upgrade from Redis 7 to 8, processes on the script
/// path (slot keys) and on the HSETEX path (fields of the leases hash) share
/// a pool. Each claim checks the other representation, so they never hold
/// one slot, whichever path claims first; a slot released on one path is
/// claimed on the other with a bigger fence, and a revoke from either path
/// ends a lease on the other.
async fn paths_exclude_each_other(b: Arc<Valkey>) -> Outcome {
    let scripts = b.strategy(Method::Scripts).await?;
    let hsetex = b.strategy(Method::Hsetex).await?;
    ensure!(
        scripts.path() == ActivePath::Scripts && hsetex.path() == ActivePath::Hsetex,
        "paths {} and {}",
        scripts.path(),
        hsetex.path()
    );
    let ttl = Duration::from_secs(30);
    for (first, second) in [(&scripts, &hsetex), (&hsetex, &scripts)] {
        let names = format!("{} then {}", first.path(), second.path());
        let p = fresh_pool(4, ttl)?;
        // Every lease below is live until `sent + ttl`.
        let sent = Instant::now();
        let mut grants = Vec::new();
        for s in [first, first, second, second] {
            grants.push(hold(s, &p, 0).await?.0);
        }
        let mut slots: Vec<u32> = grants.iter().map(|g| g.slot).collect();
        slots.sort_unstable();
        slots.dedup();
        ensure!(slots.len() == 4, "{names}: slots {grants:?}");
        // The pool is full; the claim hint has wrapped to slots the other
        // path holds.
        for s in [first, second] {
            let r = s.acquire(&p, Floor::NONE).await;
            judge(
                sent,
                ttl,
                matches!(r, Err(AcquireError::PoolExhausted { .. })),
                || format!("{names}: {} claimed in a full pool: {r:?}", s.path()),
            )?;
        }
        let r = first.release(&p, &grants[0], Floor::NONE).await;
        judge(sent, ttl, r == Release::Released, || {
            format!("{names}: release answered {r:?}")
        })?;
        let g = hold(second, &p, 0).await?.0;
        ensure!(
            g.slot == grants[0].slot && g.fence > grants[0].fence,
            "{names}: after {} released slot {} (fence {}), {} got {g:?}",
            first.path(),
            grants[0].slot,
            grants[0].fence,
            second.path()
        );
        let was = second
            .revoke(&p, grants[1].slot)
            .await
            .map_err(|e| e.to_string())?;
        judge(sent, ttl, was, || {
            format!("{names}: revoke found no lease on slot {}", grants[1].slot)
        })?;
        let r = first.renew(&p, &grants[1], Floor::NONE).await;
        ensure!(
            matches!(r, Renewal::Lost(_)),
            "{names}: renewal after a revoke from the other path answered {r:?}"
        );
        let r = second.acquire(&p, Floor::NONE).await;
        judge(
            sent,
            ttl,
            matches!(r, Err(AcquireError::PoolExhausted { .. })),
            || format!("{names}: claimed a slot revoked on the other path: {r:?}"),
        )?;
    }
    Ok(())
}

/// The probe picks HSETEX exactly where the server has it.
async fn probe_picks_the_path(b: Arc<Valkey>) -> Outcome {
    let want = b.path;
    let s = b.strategy(Method::Auto).await?;
    ensure!(
        s.path() == want,
        "{} took {} (want {want})",
        s.server(),
        s.path()
    );
    ensure!(
        s.identity().ends_with(&format!("/{want}")),
        "identity {}",
        s.identity()
    );
    Ok(())
}

/// Forcing HSETEX on a server without it: a final error that names the server
/// version and the fix.
async fn forced_hsetex_is_final_unsupported(b: Arc<Valkey>) -> Outcome {
    let version = &b.version;
    let s = b.strategy(Method::Hsetex).await?;
    ensure!(s.path() == ActivePath::Unsupported, "path {}", s.path());
    match s
        .acquire(&fresh_pool(4, Duration::from_secs(5))?, Floor::NONE)
        .await
    {
        Err(e @ AcquireError::UnsupportedServer { .. }) => {
            let msg = e.to_string();
            ensure!(!e.is_retryable(), "UnsupportedServer must be final");
            ensure!(
                msg.contains(version.as_str()) && msg.contains("Method::Scripts"),
                "message lacks the version {version} or the fix: {msg}"
            );
            Ok(())
        }
        other => Err(format!("forced HSETEX answered {other:?}")),
    }
}

/// One round trip per acquisition, renewal and release, on the idle store.
async fn one_round_trip_per_operation(b: Arc<Valkey>) -> Outcome {
    let s = b.strategy(b.method).await?;
    let p = fresh_pool(32, Duration::from_secs(30))?;
    let before = s.round_trips();
    let mut grants = Vec::new();
    for _ in 0..16 {
        grants.push(
            s.acquire(&p, Floor::NONE)
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    ensure!(
        s.round_trips() - before == 16,
        "16 acquisitions took {} round trips",
        s.round_trips() - before
    );
    let before = s.round_trips();
    for g in &grants {
        ensure!(
            matches!(s.renew(&p, g, Floor::NONE).await, Renewal::Renewed { .. }),
            "renewal"
        );
        ensure!(
            s.release(&p, g, Floor::NONE).await == Release::Released,
            "release"
        );
    }
    ensure!(
        s.round_trips() - before == 32,
        "16 renewals + releases took {} round trips",
        s.round_trips() - before
    );
    Ok(())
}

/// The claim scan starts at a hint: a slot freed by release is found at
/// once (the release moves the hint down to it), a slot freed behind the
/// hint's back (expiry) after the scan wraps, and a revoked slot not at all
/// (its tombstone keeps it taken until the revoked lease's expiry).
async fn freed_slots_are_found_around_the_hint(b: Arc<Valkey>) -> Outcome {
    let s = b.strategy(b.method).await?;
    let ttl = Duration::from_secs(30);
    let p = fresh_pool(4, ttl)?;
    // Slot 0's lease is short: it expires behind the hint's back.
    let short = PoolSpec::new(p.name().clone(), 4, Duration::from_millis(300))
        .map_err(|e| e.to_string())?;
    let mut grants = vec![hold(&s, &short, 0).await?.0];
    // The long leases are live until `sent + ttl`.
    let sent = Instant::now();
    for _ in 1..4 {
        grants.push(hold(&s, &p, 0).await?.0);
    }
    let slots: Vec<u32> = grants.iter().map(|g| g.slot).collect();
    ensure!(slots == [0, 1, 2, 3], "slots {slots:?}");
    let r = s.release(&p, &grants[1], Floor::NONE).await;
    judge(sent, ttl, r == Release::Released, || {
        format!("release answered {r:?}")
    })?;
    let g = hold(&s, &p, 0).await?.0;
    ensure!(g.slot == 1, "after releasing slot 1 got {}", g.slot);
    ensure!(g.fence > grants[1].fence, "fence did not grow");
    // The hint is at 2: slot 0 is found once it expired, after the wrap.
    loop {
        match s.acquire(&p, Floor::NONE).await {
            Ok(g) => {
                judge(sent, ttl, g.slot == 0, || {
                    format!("after slot 0 expired got slot {}", g.slot)
                })?;
                break;
            }
            Err(AcquireError::PoolExhausted { .. }) if Instant::now() < sent + ttl => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(AcquireError::PoolExhausted { .. }) => {
                return Err(format!(
                    "{STARVED}slot 0 (TTL 300 ms) not found expired within {ttl:?}"
                ));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    ensure!(s.revoke(&p, 3).await.map_err(|e| e.to_string())?, "revoke");
    let r = s.acquire(&p, Floor::NONE).await;
    judge(
        sent,
        ttl,
        matches!(r, Err(AcquireError::PoolExhausted { .. })),
        || format!("with slot 3 revoked and the rest held, acquire answered {r:?}"),
    )
}

/// The slot's absolute expiry (Unix ms) and value on the strategy's path.
async fn slot_state(
    s: &ValkeyStrategy,
    p: &PoolSpec,
    slot: u32,
) -> Result<(Option<i64>, Value), String> {
    let keys = s.keys(p.name());
    if s.path() == ActivePath::Hsetex {
        let at = cmd(
            s,
            "HPEXPIRETIME",
            vec![
                keys.leases.as_str().into(),
                "FIELDS".into(),
                1.into(),
                slot.to_string().into(),
            ],
        )
        .await?;
        let v = cmd(
            s,
            "HGET",
            vec![keys.leases.as_str().into(), slot.to_string().into()],
        )
        .await?;
        // One field: a one-element array, which `as_i64` reads.
        Ok((at.as_i64(), v))
    } else {
        let key = keys.slot_key(slot);
        let at = cmd(s, "PEXPIRETIME", vec![key.as_str().into()]).await?;
        let v = cmd(s, "GET", vec![key.as_str().into()]).await?;
        Ok((at.as_i64(), v))
    }
}

/// Revoke leaves a tombstone with the revoked lease's own expiry, to the
/// millisecond (HSETEX path: `HSETEX FXX KEEPTTL` and the marker deleted;
/// script path: `SET XX KEEPTTL`); revoking it again finds no lease.
async fn revoke_leaves_a_tombstone_with_the_old_expiry(b: Arc<Valkey>) -> Outcome {
    let s = b.strategy(b.method).await?;
    let p = fresh_pool(2, Duration::from_secs(30))?;
    let (g, sent) = hold(&s, &p, 0).await?;
    let (at, v) = slot_state(&s, &p, g.slot).await?;
    ensure!(
        v.as_str().as_deref() == Some(g.token.to_hex().as_str()),
        "slot holds {v:?}"
    );
    let was = s.revoke(&p, g.slot).await.map_err(|e| e.to_string())?;
    judge(sent, g.ttl, was, || "revoke found no lease".into())?;
    let (after, v) = slot_state(&s, &p, g.slot).await?;
    ensure!(v.as_str().as_deref() == Some("revoked"), "tombstone {v:?}");
    ensure!(
        at.is_some_and(|t| t > 0) && after == at,
        "expiry {at:?} before the revoke, {after:?} after"
    );
    if s.path() == ActivePath::Hsetex {
        let m = cmd(
            &s,
            "HEXISTS",
            vec![
                s.keys(p.name()).leases.as_str().into(),
                marker(g.slot, &g.token).into(),
            ],
        )
        .await?;
        ensure!(
            m.as_i64() == Some(0),
            "the holder's marker survived the revoke"
        );
    }
    let again = s.revoke(&p, g.slot).await.map_err(|e| e.to_string())?;
    ensure!(!again, "a tombstone was revoked as if it were a lease");
    Ok(())
}

/// A revoked holder can neither raise nor set the floor: its renewal is
/// `Lost` and its release `NotHeld`, both without writing, and the next
/// holder, once the tombstone expired, gets the floor from before the
/// revoke and a bigger fence.
async fn revoked_holder_cannot_move_the_floor(b: Arc<Valkey>) -> Outcome {
    let s = b.strategy(b.method).await?;
    let p = fresh_pool(1, Duration::from_secs(2))?;
    let (g, sent) = hold(&s, &p, 1_000).await?;
    let renewed = Instant::now();
    let r = s.renew(&p, &g, Floor(2_000)).await;
    judge(sent, g.ttl, matches!(r, Renewal::Renewed { .. }), || {
        format!("renewal answered {r:?}")
    })?;
    let was = s.revoke(&p, g.slot).await.map_err(|e| e.to_string())?;
    judge(renewed, g.ttl, was, || "revoke found no lease".into())?;
    let r = s.renew(&p, &g, Floor(9_000)).await;
    ensure!(
        matches!(r, Renewal::Lost(_)),
        "revoked renewal answered {r:?}"
    );
    let r = s.release(&p, &g, Floor(1)).await;
    ensure!(r == Release::NotHeld, "revoked release answered {r:?}");
    let limit = Instant::now() + g.ttl * 4 + Duration::from_secs(5);
    let next = loop {
        match s.acquire(&p, Floor(1_500)).await {
            Ok(next) => break next,
            Err(AcquireError::PoolExhausted { .. }) if Instant::now() < limit => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(format!("the tombstone did not expire: {e}")),
        }
    };
    ensure!(
        next.floor == Floor(2_000),
        "after the revoke the next grant carries {:?}, not the last ceiling 2000",
        next.floor
    );
    ensure!(
        next.fence > g.fence,
        "fence {} after {}",
        next.fence,
        g.fence
    );
    Ok(())
}

/// Connecting to a port nobody listens on fails within the operation
/// timeout with `Unreachable`; a bad key prefix is refused before any I/O.
async fn connect_errors_are_prompt_and_typed(_b: Arc<Valkey>) -> Outcome {
    let port = leasehold_conformance::servers::free_port();
    // Bounded on the runtime's own timer, which polls the call first.
    let r = tokio::time::timeout(
        Duration::from_secs(2),
        ValkeyStrategy::connect(
            ValkeyConfig::new(format!("redis://127.0.0.1:{port}"))
                .durability(DurabilityPolicy::Throwaway)
                .op_timeout(Duration::from_millis(500)),
        ),
    )
    .await
    .map_err(|_| "connect to a closed port still pending after 4 op timeouts".to_owned())?;
    ensure!(
        matches!(r, Err(leasehold_valkey::ValkeyError::Unreachable { .. })),
        "closed port answered {r:?}"
    );
    let r = ValkeyStrategy::connect(
        ValkeyConfig::new("redis://127.0.0.1:1")
            .durability(DurabilityPolicy::Throwaway)
            .key_prefix("a{b}"),
    )
    .await;
    ensure!(
        matches!(r, Err(leasehold_valkey::ValkeyError::Config(_))),
        "bad prefix answered {r:?}"
    );
    Ok(())
}

/// After `SCRIPT FLUSH` (as after a server restart) the scripts are sent
/// again and acquisition, release still work.
async fn lost_script_cache_is_healed(b: Arc<Valkey>) -> Outcome {
    let s = b.strategy(b.method).await?;
    let p = fresh_pool(2, Duration::from_secs(30))?;
    cmd(&s, "SCRIPT", vec!["FLUSH".into()]).await?;
    let g = s
        .acquire(&p, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    cmd(&s, "SCRIPT", vec!["FLUSH".into()]).await?;
    ensure!(
        s.release(&p, &g, Floor::NONE).await == Release::Released,
        "release"
    );
    Ok(())
}

/// HSETEX path: the two fields of a lease carry one TTL, expire together,
/// and the fence field stays.
async fn fields_expire_together_fence_persists(b: Arc<Valkey>) -> Outcome {
    let s = b.strategy(Method::Hsetex).await?;
    let p = fresh_pool(1, Duration::from_millis(600))?;
    let keys = s.keys(p.name());
    let g = s
        .acquire(&p, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    let ttls = cmd(
        &s,
        "HPEXPIRETIME",
        vec![
            keys.leases.as_str().into(),
            "FIELDS".into(),
            2.into(),
            "0".into(),
            marker(0, &g.token).into(),
        ],
    )
    .await?;
    match &ttls {
        Value::Array(v) if v.len() == 2 && v[0] == v[1] && v[0].as_i64() > Some(0) => {}
        other => return Err(format!("fields do not share one expiry: {other:?}")),
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = cmd(&s, "HLEN", vec![keys.leases.as_str().into()]).await?;
        let live = cmd(&s, "HEXISTS", vec![keys.leases.as_str().into(), "0".into()]).await?;
        if live.as_i64() == Some(0) {
            let m = cmd(
                &s,
                "HEXISTS",
                vec![keys.leases.as_str().into(), marker(0, &g.token).into()],
            )
            .await?;
            ensure!(m.as_i64() == Some(0), "marker outlived the slot field");
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "lease fields still there: HLEN {n:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let fence = cmd(&s, "HGET", vec![keys.fences.as_str().into(), "0".into()]).await?;
    ensure!(
        fence.as_string().and_then(|f| f.parse().ok()) == Some(g.fence.0),
        "fence after expiry: {fence:?}, granted {}",
        g.fence
    );
    Ok(())
}

/// HSETEX path: with only one of the two fields present, `FXX` writes
/// nothing and the renewal is `Lost`.
async fn fxx_with_one_field_missing_is_lost(b: Arc<Valkey>) -> Outcome {
    let s = b.strategy(Method::Hsetex).await?;
    let p = fresh_pool(1, Duration::from_secs(30))?;
    let keys = s.keys(p.name());
    let g = s
        .acquire(&p, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    cmd(
        &s,
        "HDEL",
        vec![keys.leases.as_str().into(), marker(0, &g.token).into()],
    )
    .await?;
    let r = s.renew(&p, &g, Floor::NONE).await;
    ensure!(matches!(r, Renewal::Lost(_)), "renewal answered {r:?}");
    let m = cmd(
        &s,
        "HEXISTS",
        vec![keys.leases.as_str().into(), marker(0, &g.token).into()],
    )
    .await?;
    ensure!(m.as_i64() == Some(0), "FXX recreated the missing marker");
    Ok(())
}

/// The server's clock (`TIME`) as a time since the Unix epoch.
async fn server_time(s: &ValkeyStrategy) -> Result<Duration, String> {
    match cmd(s, "TIME", vec![]).await? {
        Value::Array(v) if v.len() == 2 => {
            let n = |i: usize| {
                v[i].as_string()
                    .and_then(|t| t.parse::<u64>().ok())
                    .ok_or_else(|| format!("TIME answered {v:?}"))
            };
            Ok(Duration::from_secs(n(0)?) + Duration::from_micros(n(1)?))
        }
        other => Err(format!("TIME answered {other:?}")),
    }
}

/// Valkey/Redis keep expiries in whole milliseconds: grants and renewals
/// report the TTL the server applies (the requested one floored to the
/// millisecond), and the capabilities say the resolution is 1 ms.
async fn applied_ttl_is_whole_milliseconds(b: Arc<Valkey>) -> Outcome {
    let s = b.strategy(b.method).await?;
    let res = s.capabilities().time_resolution;
    ensure!(res == Duration::from_millis(1), "time resolution {res:?}");
    let p = fresh_pool(2, Duration::from_micros(30_000_700))?;
    let (g, sent) = hold(&s, &p, 0).await?;
    ensure!(
        g.ttl == Duration::from_millis(30_000),
        "a TTL of {:?} was granted as {:?}, not the 30 s the server applies",
        p.ttl(),
        g.ttl
    );
    let r = s.renew(&p, &g, Floor::NONE).await;
    judge(sent, g.ttl, matches!(r, Renewal::Renewed { .. }), || {
        format!("renewal answered {r:?}")
    })?;
    match r {
        Renewal::Renewed { ttl, .. } => ensure!(
            ttl == Duration::from_millis(30_000),
            "the renewal reports {ttl:?}"
        ),
        _ => unreachable!("judged above"),
    }
    Ok(())
}

/// Grants and renewals carry the server's clock (`TIME`, read by the claim
/// and renewal scripts), which the driver compares with its own elapsed
/// time (DESIGN.md, rule 11). Bracketed by `TIME` commands, so exact on a
/// loaded machine too.
async fn grants_and_renewals_carry_store_time(b: Arc<Valkey>) -> Outcome {
    let s = b.strategy(b.method).await?;
    let p = fresh_pool(2, Duration::from_secs(30))?;
    let before = server_time(&s).await?;
    let (g, sent) = hold(&s, &p, 0).await?;
    let between = server_time(&s).await?;
    let at = g.store_time.ok_or("the grant carries no store time")?;
    ensure!(
        before <= at && at <= between,
        "grant store time {at:?} outside [{before:?}, {between:?}]"
    );
    let r = s.renew(&p, &g, Floor::NONE).await;
    let after = server_time(&s).await?;
    judge(sent, g.ttl, matches!(r, Renewal::Renewed { .. }), || {
        format!("renewal answered {r:?}")
    })?;
    match r {
        Renewal::Renewed {
            store_time: Some(t),
            ..
        } => ensure!(
            between <= t && t <= after,
            "renewal store time {t:?} outside [{between:?}, {after:?}]"
        ),
        other => return Err(format!("the renewal carries no store time: {other:?}")),
    }
    Ok(())
}

/// The server's clock in whole microseconds, as the claim scripts read it.
async fn server_micros(s: &ValkeyStrategy) -> Result<u64, String> {
    let t = server_time(s).await?;
    u64::try_from(t.as_micros()).map_err(|e| e.to_string())
}

/// Expects a claim on `p` to be refused because its fences hash was lost.
async fn expect_fences_lost(s: &ValkeyStrategy, p: &PoolSpec, when: &str) -> Outcome {
    match s.acquire(p, Floor::NONE).await {
        Err(e @ AcquireError::Misconfigured { .. }) => {
            let msg = e.to_string();
            ensure!(
                msg.contains("fences hash") && msg.contains("lost") && msg.contains("HDEL"),
                "{when}: the refusal does not say what was lost and what to do: {msg}"
            );
            Ok(())
        }
        other => Err(format!(
            "{when}: a claim with the fences hash gone answered {other:?} (fences would restart at 1)"
        )),
    }
}

/// A fences hash lost (evicted, deleted, failed over) while a lease of the
/// pool lives makes claims refuse instead of restarting floors at 0 (below
/// what earlier holders stamped), and the refusal outlives the evidence:
/// after the lease is released claims still refuse, until an operator
/// repairs the floors and deletes the marker. Fences need no repair: the
/// next one is at least the server's clock in µs, above every fence issued
/// before the loss — also above one an operator set by hand. A renewal or
/// release that finds the hash gone leaves the marker too.
async fn lost_fences_hash_refuses_claims(b: Arc<Valkey>) -> Outcome {
    let s = b.strategy(b.method).await?;
    // The live lease is the evidence: long enough that no stall outlives it.
    let ttl = Duration::from_secs(300);
    // Found by the claim.
    let p = fresh_pool(2, ttl)?;
    let fences = s.keys(p.name()).fences;
    let (g, sent) = hold(&s, &p, 0).await?;
    cmd(&s, "DEL", vec![fences.as_str().into()]).await?;
    // Slot 1 is free: without the check it would be granted with floor 0.
    expect_fences_lost(&s, &p, "with a live lease").await?;
    let r = s.release(&p, &g, Floor::NONE).await;
    judge(sent, ttl, r == Release::Released, || {
        format!("release answered {r:?}")
    })?;
    expect_fences_lost(&s, &p, "after the lease was released").await?;
    // The operator's repair: every slot's floor at the current Unix ms (the
    // pool's holders stopped), one fence set by hand, the marker gone.
    let now_ms = server_micros(&s).await? / 1000;
    cmd(
        &s,
        "HSET",
        vec![
            fences.as_str().into(),
            "floor.0".into(),
            now_ms.to_string().into(),
            "floor.1".into(),
            now_ms.to_string().into(),
            "1".into(),
            "100".into(),
        ],
    )
    .await?;
    cmd(&s, "HDEL", vec![fences.as_str().into(), "lost".into()]).await?;
    let before = server_micros(&s).await?;
    let (a, _) = hold(&s, &p, 0).await?;
    let (c, _) = hold(&s, &p, 0).await?;
    for g2 in [&a, &c] {
        ensure!(
            g2.fence.0 > g.fence.0 && g2.fence.0 >= before,
            "after the repair slot {} got fence {}: not above the {} issued before the loss \
             and the server's clock ({before} µs) when it was claimed",
            g2.slot,
            g2.fence,
            g.fence
        );
        ensure!(
            g2.floor == Floor(now_ms),
            "after the repair slot {} carries floor {}, not the repaired {now_ms}",
            g2.slot,
            g2.floor
        );
    }

    // Found by a renewal: no claim runs before the lease is released.
    let p = fresh_pool(2, ttl)?;
    let fences = s.keys(p.name()).fences;
    let (g, sent) = hold(&s, &p, 0).await?;
    cmd(&s, "DEL", vec![fences.as_str().into()]).await?;
    let r = s.renew(&p, &g, Floor::NONE).await;
    judge(sent, ttl, matches!(r, Renewal::Renewed { .. }), || {
        format!("renewal answered {r:?}")
    })?;
    let r = s.release(&p, &g, Floor::NONE).await;
    judge(sent, ttl, r == Release::Released, || {
        format!("release answered {r:?}")
    })?;
    expect_fences_lost(&s, &p, "after a renewal found the hash gone").await?;

    // Found by a release alone.
    let p = fresh_pool(2, ttl)?;
    let fences = s.keys(p.name()).fences;
    let (g, sent) = hold(&s, &p, 0).await?;
    cmd(&s, "DEL", vec![fences.as_str().into()]).await?;
    let r = s.release(&p, &g, Floor::NONE).await;
    judge(sent, ttl, r == Release::Released, || {
        format!("release answered {r:?}")
    })?;
    expect_fences_lost(&s, &p, "after a release found the hash gone").await
}

/// The pool's ID format lives in its fences hash, so a lost hash lost it
/// too: a claim that declares a format is refused as the lost hash's (not
/// granted, and it records nothing, which would recreate the hash and hide
/// the loss from the next claim), also once the leases that were the
/// evidence are gone. The repair puts the format back, and from then on a
/// claim of another format is refused again while the recorded one is
/// granted.
async fn a_lost_fences_hash_refuses_claims_of_every_id_format(b: Arc<Valkey>) -> Outcome {
    let s = b.strategy(b.method).await?;
    let ttl = Duration::from_secs(300);
    let plain = fresh_pool(2, ttl)?;
    let format = |code, text: &str| IdFormat::new(code, text).map_err(|e| e.to_string());
    let ours = format(1, "valkey test format: epoch 0")?;
    let theirs = format(2, "valkey test format: epoch 1")?;
    let p = plain.clone().with_id_format(ours.clone());
    let other = plain.clone().with_id_format(theirs.clone());
    let fences = s.keys(p.name()).fences;
    let (g, sent) = hold(&s, &p, 0).await?;
    let recorded = cmd(&s, "HGET", vec![fences.as_str().into(), "id_format".into()]).await?;
    ensure!(
        recorded.as_string().as_deref() == Some(ours.text()),
        "the first claim recorded {recorded:?}"
    );
    cmd(&s, "DEL", vec![fences.as_str().into()]).await?;
    expect_fences_lost(&s, &other, "another format, with a live lease").await?;
    expect_fences_lost(&s, &p, "the lost format, with a live lease").await?;
    let r = s.release(&p, &g, Floor::NONE).await;
    judge(sent, ttl, r == Release::Released, || {
        format!("release answered {r:?}")
    })?;
    expect_fences_lost(&s, &other, "another format, after the release").await?;
    let kept = cmd(&s, "HGET", vec![fences.as_str().into(), "id_format".into()]).await?;
    ensure!(
        kept.as_string().is_none(),
        "a refused claim recorded the format {kept:?}"
    );
    // The repair, with the pool's format.
    let now_ms = server_micros(&s).await? / 1000;
    cmd(
        &s,
        "HSET",
        vec![
            fences.as_str().into(),
            "floor.0".into(),
            now_ms.to_string().into(),
            "floor.1".into(),
            now_ms.to_string().into(),
            "id_format".into(),
            ours.text().into(),
        ],
    )
    .await?;
    cmd(&s, "HDEL", vec![fences.as_str().into(), "lost".into()]).await?;
    match s.acquire(&other, Floor::NONE).await {
        Err(AcquireError::OtherIdFormat { recorded, .. }) if recorded == ours.text() => {}
        r => return Err(format!("after the repair another format answered {r:?}")),
    }
    let (g, _) = hold(&s, &p, 0).await?;
    ensure!(
        g.floor == Floor(now_ms),
        "after the repair slot {} carries floor {}, not the repaired {now_ms}",
        g.slot,
        g.floor
    );
    Ok(())
}

/// A server this test started with its own settings, stopped (and its
/// directory removed) on drop.
struct OwnServer {
    child: Child,
    url: String,
    port: u16,
    dir: PathBuf,
}

impl OwnServer {
    /// Starts `bin` on a free loopback port without persistence, with
    /// `args` and `env` added, in a directory of its own; on another port
    /// when another process takes the one drawn first.
    fn start(bin: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<Self, String> {
        Self::start_as(bin, None, args, env)
    }

    /// As [`OwnServer::start`], taking TLS connections only: presenting
    /// `server` (a certificate and its key) and asking every client for a
    /// certificate signed by `ca`. Its `url` is `rediss://` without TLS
    /// options.
    fn start_tls(bin: &Path, server: &Pair, ca: &Path) -> Result<Self, String> {
        Self::start_as(bin, Some((server, ca)), &[], &[])
    }

    fn start_as(
        bin: &Path,
        tls: Option<(&Pair, &Path)>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Self, String> {
        use leasehold_conformance::servers::{self, StartError};
        servers::retry_on_taken_port("a Valkey of the test's own", || {
            let port = servers::free_port();
            let port_text = port.to_string();
            let dir = servers::private_dir("valkey-test")?;
            let log = dir.join("server.log");
            let file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
            let listen: Vec<&std::ffi::OsStr> = match tls {
                None => vec!["--port".as_ref(), port_text.as_ref()],
                Some((server, ca)) => vec![
                    "--port".as_ref(),
                    "0".as_ref(),
                    "--tls-port".as_ref(),
                    port_text.as_ref(),
                    "--tls-cert-file".as_ref(),
                    server.cert.as_os_str(),
                    "--tls-key-file".as_ref(),
                    server.key.as_os_str(),
                    "--tls-ca-cert-file".as_ref(),
                    ca.as_os_str(),
                    "--tls-auth-clients".as_ref(),
                    "yes".as_ref(),
                ],
            };
            let mut command = Command::new(bin);
            command
                .args(listen)
                .args(["--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(&dir)
                .args(args)
                .envs(env.iter().copied())
                .stdout(Stdio::from(file.try_clone().map_err(|e| e.to_string())?))
                .stderr(Stdio::from(file));
            let child = match command.spawn() {
                Ok(child) => child,
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(StartError::Failed(format!("{}: {e}", bin.display())));
                }
            };
            // Dropped on an error: killed, its directory removed.
            let mut server = Self {
                child,
                url: format!(
                    "{}://127.0.0.1:{port}",
                    if tls.is_some() { "rediss" } else { "redis" }
                ),
                port,
                dir,
            };
            servers::wait_listening(&mut server.child, port, Duration::from_secs(30), &log)
                .map_err(|e| e.map(|what| format!("{}: {what}", bin.display())))?;
            Ok(server)
        })
    }

    /// Starts `bin` as a replica of this server (`--replicaof`), on its own
    /// port and directory.
    fn replica(&self, bin: &Path) -> Result<Self, String> {
        let port = self.port.to_string();
        Self::start(bin, &["--replicaof", "127.0.0.1", &port], &[])
    }

    /// Stops the process (`SIGSTOP`: it reads and answers nothing, but
    /// its connections stay open) and returns once the kernel shows it
    /// stopped.
    fn freeze(&self) -> Outcome {
        self.signal("-STOP")?;
        let stat = format!("/proc/{}/stat", self.child.id());
        let limit = Instant::now() + Duration::from_secs(30);
        loop {
            let text = std::fs::read_to_string(&stat).map_err(|e| format!("{stat}: {e}"))?;
            // The state follows the parenthesised command name.
            let state = text
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next());
            if state == Some('T') {
                return Ok(());
            }
            ensure!(
                Instant::now() < limit,
                "the server is not stopped 30 s after SIGSTOP: {text}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Resumes a frozen process (`SIGCONT`).
    fn thaw(&self) -> Outcome {
        self.signal("-CONT")
    }

    fn signal(&self, which: &str) -> Outcome {
        let status = leasehold_conformance::programs::command("kill")?
            .args([which, &self.child.id().to_string()])
            .status()
            .map_err(|e| format!("kill {which}: {e}"))?;
        ensure!(status.success(), "kill {which} answered {status}");
        Ok(())
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Expects `connect` to refuse a server that can forget (no persistence)
/// with `NotDurable`, naming the settings it read, the fix and both opt-ins,
/// and saying whether the deprecated `require_durable(true)` refused it.
fn expect_not_durable(r: Result<ValkeyStrategy, ValkeyError>, required: bool) -> Outcome {
    match r {
        Err(e @ ValkeyError::NotDurable { .. }) => {
            let msg = e.to_string();
            ensure!(
                msg.contains("appendonly no")
                    && msg.contains("appendfsync")
                    && msg.contains(
                        "set appendonly yes, appendfsync always and no-appendfsync-on-rewrite no"
                    ),
                "the refusal lacks the settings read or the fix: {msg}"
            );
            let names_opt_ins = msg.contains("durability=one-timing-per-pool")
                && msg.contains("durability=throwaway");
            ensure!(
                names_opt_ins,
                "the refusal does not name both opt-ins: {msg}"
            );
            ensure!(
                msg.contains("require_durable(true) is set") == required,
                "require_durable {required}, but the refusal says: {msg}"
            );
            Ok(())
        }
        other => Err(format!(
            "a server without persistence was accepted (require_durable {required}): {:?}",
            other.map(|_| ())
        )),
    }
}

/// The server's `uptime_in_seconds` (`INFO server`).
async fn uptime_secs(s: &ValkeyStrategy) -> Result<u64, String> {
    let info = cmd(s, "INFO", vec!["server".into()]).await?;
    let text = info.as_string().unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no uptime_in_seconds in INFO server: {text}"))
}

/// `pool`, declared new on the server (`ValkeyStrategy::declare_new_pool`):
/// a test's fresh pool, whose first claim is then not held back as a
/// possibly wiped pool's.
async fn declared_new(s: &ValkeyStrategy, pool: PoolSpec) -> Result<PoolSpec, String> {
    s.declare_new_pool(&pool)
        .await
        .map_err(|e| format!("declare the pool new: {e}"))?;
    Ok(pool)
}

/// On a server that keeps nothing on disk the restart guard grants nothing
/// until the server has been up for the pool's TTL plus twice its
/// `max_clock_skew`, answering the retryable `StoreRestarted` with the time
/// left, read inside the claim script; a pool with a short TTL is granted
/// once the server has been up long enough, and renewals are never held
/// back. Such a server is refused by the durable policy, the default, since
/// a restart loses the pool's recorded span (`NotDurable`, naming the
/// settings, the fix and both opt-ins); `DurabilityPolicy::OneTimingPerPool`
/// accepts it with the guard. A server with `appendfsync always` is
/// accepted with its defaults and guarded all the same (what it ran with
/// before its last start is not known: a weakening set at run time goes
/// with a restart).
async fn the_restart_guard_holds_grants_after_a_start(b: Arc<Valkey>) -> Outcome {
    let plain = b.config()?.key_prefix(&b.prefix).method(b.method);
    expect_not_durable(ValkeyStrategy::connect(plain.clone()).await, false)?;
    expect_not_durable(
        ValkeyStrategy::connect(plain.clone().durability(DurabilityPolicy::Durable)).await,
        false,
    )?;
    let s = ValkeyStrategy::connect(plain.durability(DurabilityPolicy::OneTimingPerPool))
        .await
        .map_err(|e| e.to_string())?;
    let hour = Duration::from_secs(3600);
    let span = hour + leasehold_core::DEFAULT_MAX_CLOCK_SKEW * 2;
    match s
        .acquire(&declared_new(&s, fresh_pool(2, hour)?).await?, Floor::NONE)
        .await
    {
        Err(e @ AcquireError::StoreRestarted { resume_in }) => {
            ensure!(e.is_retryable(), "StoreRestarted must be retryable");
            // The guard counts the whole-second uptime one second short.
            ensure!(
                resume_in > Duration::ZERO && resume_in <= span + Duration::from_secs(1),
                "grants resume in {resume_in:?} for a span of {span:?}"
            );
        }
        other => {
            return Err(format!(
                "a server without persistence, up for less than the TTL, granted: {other:?}"
            ));
        }
    }
    leasehold_conformance::restarts::a_lease_manager_announces_the_guard_as_waiting(
        s.clone(),
        &declared_new(&s, fresh_pool(2, hour)?).await?,
    )
    .await?;
    leasehold_conformance::restarts::a_lease_manager_started_inside_the_guard_gets_its_lease_when_it_opens(
        s.clone(),
        |ttl| {
            let s = s.clone();
            Box::pin(async move { declared_new(&s, fresh_pool(2, ttl)?).await })
        },
    )
    .await?;
    leasehold_conformance::restarts::grants_resume_after_the_guard(&s, Duration::from_secs(15))
        .await?;
    drop(s);
    // A server that writes every acknowledged write to disk is guarded
    // after its start too.
    let bin = b.binary.as_deref().ok_or("no local server binary")?;
    let own = OwnServer::start(
        bin,
        &["--appendonly", "yes", "--appendfsync", "always"],
        &[],
    )?;
    let durable = ValkeyStrategy::connect(ValkeyConfig::new(&own.url).method(b.method))
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        durable.persistence().keeps_every_write(),
        "appendfsync always not seen: {}",
        durable.persistence()
    );
    let r = durable
        .acquire(
            &declared_new(&durable, fresh_pool(2, hour)?).await?,
            Floor::NONE,
        )
        .await;
    ensure!(
        matches!(r, Err(AcquireError::StoreRestarted { resume_in }) if resume_in <= span + Duration::from_secs(1)),
        "a durable server up for less than the TTL answered {r:?}, not the restart guard"
    );
    Ok(())
}

/// The deprecated `require_durable(true)` still accepts a server with
/// `appendfsync always` and refuses one without persistence whatever
/// `assume_one_timing_per_pool(true)` and `restart_guard(false)` say, its
/// refusal saying so. No durability policy says this (each policy but
/// `Durable` accepts such a server), so the switches are exercised by their
/// own names here for as long as they are kept.
#[allow(deprecated)]
async fn require_durable_refuses_a_server_that_can_forget_whatever_the_opt_ins(
    b: Arc<Valkey>,
) -> Outcome {
    let bin = b.binary.as_deref().ok_or("no local server binary")?;
    let own = OwnServer::start(
        bin,
        &["--appendonly", "yes", "--appendfsync", "always"],
        &[],
    )?;
    ValkeyStrategy::connect(ValkeyConfig::new(&own.url).require_durable(true))
        .await
        .map_err(|e| format!("require_durable refused appendfsync always: {e}"))?;
    let strict = b.config()?.key_prefix(&b.prefix).require_durable(true);
    expect_not_durable(
        ValkeyStrategy::connect(strict.clone().assume_one_timing_per_pool(true)).await,
        true,
    )?;
    expect_not_durable(
        ValkeyStrategy::connect(strict.restart_guard(false)).await,
        true,
    )
}

/// A configured `max_clock_skew` larger than the default lengthens the
/// restart guard: after a loss the floor is gone, so a successor's clock
/// must pass anything a forgotten holder stamped, on clocks up to that skew
/// apart. A pool of TTL 1 h with a skew of 1 h waits 3 h of uptime, not the
/// 1 h 2 s the default skew would give: the time left that `StoreRestarted`
/// answers is judged against the server's uptime read before and after the
/// claim.
async fn the_configured_clock_skew_lengthens_the_guard(b: Arc<Valkey>) -> Outcome {
    let s = ValkeyStrategy::connect(
        b.config()?
            .key_prefix(&b.prefix)
            .method(b.method)
            .op_timeout(Duration::from_secs(10))
            .durability(DurabilityPolicy::OneTimingPerPool),
    )
    .await
    .map_err(|e| e.to_string())?;
    let hour = Duration::from_secs(3600);
    let pool = fresh_pool(2, hour)?
        .with_max_clock_skew(hour)
        .map_err(|e| e.to_string())?;
    let pool = declared_new(&s, pool).await?;
    let span = pool.restart_span();
    ensure!(span == hour * 3, "restart span {span:?}");
    let up_before = Duration::from_secs(uptime_secs(&s).await?);
    let r = s.acquire(&pool, Floor::NONE).await;
    // `uptime_in_seconds` is floored: the uptime is below the next second.
    let up_after = Duration::from_secs(uptime_secs(&s).await? + 1);
    match r {
        Err(AcquireError::StoreRestarted { resume_in }) => {
            ensure!(
                // The guard counts the uptime one second short (it is a
                // difference of whole seconds of the clock).
                span.saturating_sub(up_after) <= resume_in
                    && resume_in <= span + Duration::from_secs(1) - up_before,
                "with a skew of 1 h grants resume in {resume_in:?}: not the 3 h span less the \
                 uptime ({up_before:?} to {up_after:?})"
            );
            Ok(())
        }
        other => Err(format!(
            "a pool spanning 3 h on a server up for {up_before:?} answered {other:?}"
        )),
    }
}

/// Whether `version` (`major.minor.patch`) is at least `major.minor`.
fn version_at_least(version: &str, major: u32, minor: u32) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (major, minor)
}

/// A server with the append-only file fsynced once a second can lose the
/// last acknowledged writes when its machine crashes, but a client can wait
/// for the fsync (`WAITAOF`, Redis and Valkey 7.2+). There a claim whose
/// span is above the span known to be on disk waits for it before it is
/// used (two more round trips: `WAITAOF`, and the record that the span is
/// on disk), so the guard knows the pool's span after any restart, and the
/// server is accepted by default; a later claim of no longer a span takes
/// one round trip. So does the claim that records the pool's ID format: a
/// crash that forgot it would let another format in after values of this
/// one were handed out. A claim whose fsync cannot be confirmed (the append-only
/// file switched off behind the strategy's back) is released and answered
/// as retryable. A server without `WAITAOF` (Redis 7.0) is refused.
async fn claims_wait_for_the_fsync_of_the_pools_span(b: Arc<Valkey>) -> Outcome {
    let bin = b.binary.as_deref().ok_or("no local server binary")?;
    let own = OwnServer::start(
        bin,
        &["--appendonly", "yes", "--appendfsync", "everysec"],
        &[],
    )?;
    let config = ValkeyConfig::new(&own.url)
        .method(b.method)
        .op_timeout(Duration::from_secs(10));
    let r = ValkeyStrategy::connect(config.clone()).await;
    if !version_at_least(&b.version, 7, 2) {
        return match r {
            Err(e @ ValkeyError::NotDurable { .. }) => {
                let msg = e.to_string();
                ensure!(
                    msg.contains("appendonly yes, appendfsync everysec"),
                    "the refusal does not name the settings read: {msg}"
                );
                Ok(())
            }
            other => Err(format!(
                "a server without WAITAOF and with appendfsync everysec answered {:?}",
                other.map(|_| ())
            )),
        };
    }
    let s = r.map_err(|e| format!("appendfsync everysec on a server with WAITAOF: {e}"))?;
    // The append-only file is switched off below, behind the claims' back:
    // the claim's own wait must catch it, not the next reading of the
    // settings.
    s.keep_the_settings_read_at_connect();
    ensure!(
        s.server().waitaof && !s.persistence().keeps_every_write(),
        "probe {:?}, durability {}",
        s.server(),
        s.persistence()
    );
    // The server started a moment ago: the guard holds claims for the span.
    // An fsync slower than the wait (a loaded machine) is tried again where
    // the fsync is expected to succeed.
    let claim = async |p: &PoolSpec, fsync_works: bool| -> Result<(Grant, u64), String> {
        let limit = Instant::now() + Duration::from_secs(60);
        loop {
            let before = s.round_trips();
            match s.acquire(p, Floor::NONE).await {
                Ok(g) => return Ok((g, s.round_trips() - before)),
                Err(AcquireError::StoreRestarted { .. }) if Instant::now() < limit => {}
                Err(AcquireError::Unreachable(_)) if fsync_works && Instant::now() < limit => {}
                Err(e) => return Err(format!("claim: {e}")),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let p = declared_new(&s, fresh_pool(2, Duration::from_millis(100))?).await?;
    let (first, trips) = claim(&p, true).await?;
    ensure!(
        trips == 3,
        "the first claim of a 300 ms span took {trips} round trips, not 3 (the claim, WAITAOF \
         and the record of the span on disk)"
    );
    let fences = s.keys(p.name()).fences;
    let fsynced = cmd(
        &s,
        "HGET",
        vec![fences.as_str().into(), "span_fsynced".into()],
    )
    .await?;
    ensure!(
        fsynced.as_string().as_deref() == Some("300"),
        "span_fsynced after the claim: {fsynced:?}"
    );
    let (second, trips) = claim(&p, true).await?;
    ensure!(
        trips == 1,
        "a second claim of the same span took {trips} round trips, not 1"
    );
    for g in [first, second] {
        // Expired or released, the slot is free again.
        let _ = s.release(&p, &g, Floor::NONE).await;
    }
    // The first claim that declares an ID format records it: that record
    // waits for the disk too, although the span is known to be there.
    let format = IdFormat::new(1, "valkey test format").map_err(|e| e.to_string())?;
    let declared = p.clone().with_id_format(format);
    let (g, trips) = claim(&declared, true).await?;
    let _ = s.release(&declared, &g, Floor::NONE).await;
    ensure!(
        trips == 3,
        "the claim that recorded the pool's ID format took {trips} round trips, not 3 (the \
         claim, WAITAOF and the record of the span on disk)"
    );
    let (_, trips) = claim(&declared, true).await?;
    ensure!(
        trips == 1,
        "a claim of the recorded ID format took {trips} round trips, not 1"
    );
    // The append-only file switched off: WAITAOF cannot confirm the fsync.
    cmd(
        &s,
        "CONFIG",
        vec!["SET".into(), "appendonly".into(), "no".into()],
    )
    .await?;
    let p = declared_new(&s, fresh_pool(1, Duration::from_secs(2))?).await?;
    match claim(&p, false).await {
        Err(msg) if msg.contains("WAITAOF") && msg.contains("released it") => {}
        other => {
            return Err(format!(
                "a claim whose fsync could not be confirmed answered {other:?}"
            ));
        }
    }
    let slots = s.inspect(&p).await.map_err(|e| e.to_string())?;
    ensure!(
        slots.iter().all(|slot| slot.token_prefix.is_none()),
        "the unconfirmed claim was not released: {slots:?}"
    );
    Ok(())
}

/// Expects a claim on `s` (of a fresh pool of one slot with `ttl`) that
/// cannot be proven, for the reason its error names (`why`), to be answered
/// as retryable `Unreachable` and released.
async fn expect_unproven_claim(
    s: &ValkeyStrategy,
    ttl: Duration,
    why: &str,
    what: &str,
) -> Outcome {
    let p = declared_new(s, fresh_pool(1, ttl)?).await?;
    match s.acquire(&p, Floor::NONE).await {
        Err(e @ AcquireError::Unreachable(_)) => {
            let msg = e.to_string();
            ensure!(
                msg.contains(why) && msg.contains("released it"),
                "{what}: {msg}"
            );
        }
        other => {
            return Err(format!(
                "{what}: a claim that could not be proven ({why}) answered {other:?}"
            ));
        }
    }
    let slots = s.inspect(&p).await.map_err(|e| e.to_string())?;
    ensure!(
        slots.iter().all(|slot| slot.token_prefix.is_none()),
        "{what}: the unproven claim was not released: {slots:?}"
    );
    Ok(())
}

/// While a child process writes a snapshot or rewrites the append-only
/// file, a server with `no-appendfsync-on-rewrite yes` skips its fsyncs,
/// with `appendfsync always` as with `everysec`, and answers the writes
/// anyway; Valkey 8.1 even confirmed such a write to `WAITAOF`. Such a
/// server keeps no more than one with `appendfsync no`, so a claim proven by
/// the fsync wait, or acknowledged by an `always` server, can be lost in a
/// crash of the machine with the pool's span. It is refused by default,
/// naming the setting and its fix; the opt-in accepts it with the restart
/// guard on and no fsync wait trusted; and with the setting back at `no`
/// the same server is accepted as before.
async fn a_server_that_skips_fsyncs_while_a_child_saves_is_refused(b: Arc<Valkey>) -> Outcome {
    let bin = b.binary.as_deref().ok_or("no local server binary")?;
    for fsync in ["always", "everysec"] {
        let own = OwnServer::start(
            bin,
            &[
                "--appendonly",
                "yes",
                "--appendfsync",
                fsync,
                "--no-appendfsync-on-rewrite",
                "yes",
                "--enable-debug-command",
                "yes",
            ],
            &[],
        )?;
        let config = ValkeyConfig::new(&own.url)
            .method(b.method)
            .op_timeout(Duration::from_secs(10));
        match ValkeyStrategy::connect(config.clone()).await {
            Err(e @ ValkeyError::NotDurable { .. }) => {
                let msg = e.to_string();
                ensure!(
                    msg.contains(&format!(
                        "appendfsync {fsync}, no-appendfsync-on-rewrite yes"
                    )) && msg.contains("no-appendfsync-on-rewrite no"),
                    "the refusal does not name the setting read and its fix: {msg}"
                );
            }
            other => {
                return Err(format!(
                    "appendfsync {fsync} with no-appendfsync-on-rewrite yes answered {:?}",
                    other.map(|s| s.persistence().to_string())
                ));
            }
        }
        let s = ValkeyStrategy::connect(
            config
                .clone()
                .durability(DurabilityPolicy::OneTimingPerPool),
        )
        .await
        .map_err(|e| format!("appendfsync {fsync}, opted in: {e}"))?;
        let d = s.persistence();
        ensure!(
            !d.keeps_every_write() && !d.fsyncs_on_request(),
            "appendfsync {fsync} with fsyncs skipped during rewrites counted as durable: {d}"
        );
        ensure!(
            d.durability()
                .risks
                .iter()
                .any(|r| r.setting == "no-appendfsync-on-rewrite" && r.value == "yes"),
            "the durability report misses the setting: {:?}",
            d.durability()
        );
        if fsync == "always" && version_at_least(&b.version, 7, 2) {
            write_unsynced_while_a_child_saves(&s).await?;
        }
        // Accepted by the opt-in, the restart guard holds claims back on
        // the freshly started server.
        let pool = fresh_pool(1, Duration::from_secs(60))?;
        match s.acquire(&pool, Floor::NONE).await {
            Err(AcquireError::StoreRestarted { .. }) => {}
            other => {
                return Err(format!(
                    "a claim on a server up for seconds, its pool spanning a minute, was \
                     answered {other:?}"
                ));
            }
        }
        cmd(
            &s,
            "CONFIG",
            vec![
                "SET".into(),
                "no-appendfsync-on-rewrite".into(),
                "no".into(),
            ],
        )
        .await?;
        let again = ValkeyStrategy::connect(config).await;
        let waitaof = version_at_least(&b.version, 7, 2);
        match (fsync, again) {
            ("always", Ok(s)) => {
                ensure!(s.persistence().keeps_every_write(), "{}", s.persistence())
            }
            ("everysec", Ok(s)) if waitaof => ensure!(
                s.persistence().fsyncs_on_request() && s.server().waitaof,
                "{}",
                s.persistence()
            ),
            ("everysec", Err(ValkeyError::NotDurable { .. })) if !waitaof => {}
            (_, other) => {
                return Err(format!(
                    "appendfsync {fsync} with no-appendfsync-on-rewrite no answered {:?}",
                    other.map(|s| s.persistence().to_string())
                ));
            }
        }
    }
    Ok(())
}

/// Why the setting is refused, shown by the server itself: with
/// `appendfsync always` and `no-appendfsync-on-rewrite yes`, a write
/// acknowledged while a snapshot is being written is not on disk, as
/// `WAITAOF 1 0` (which waits for the local fsync) times out with no fsync.
/// The snapshot is made slow (`rdb-key-save-delay`, 10 ms a key for 600
/// keys); a wait that ends after the snapshot did proves nothing, and is
/// tried again (and the test repeated as starved after five such tries).
async fn write_unsynced_while_a_child_saves(s: &ValkeyStrategy) -> Outcome {
    let set =
        |name: &'static str, value: &'static str| vec!["SET".into(), name.into(), value.into()];
    let saving = async || -> Result<bool, String> {
        let info = cmd(s, "INFO", vec!["persistence".into()]).await?;
        Ok(format!("{info:?}").contains("rdb_bgsave_in_progress:1"))
    };
    cmd(s, "DEBUG", vec!["POPULATE".into(), "600".into()]).await?;
    cmd(s, "CONFIG", set("rdb-key-save-delay", "10000")).await?;
    let mut tries = 0;
    let outcome = loop {
        tries += 1;
        while saving().await? {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        cmd(s, "BGSAVE", Vec::new()).await?;
        let started = saving().await?;
        cmd(s, "SET", vec!["written-while-saving".into(), "1".into()]).await?;
        let fsynced = cmd(s, "WAITAOF", vec!["1".into(), "0".into(), "1500".into()]).await?;
        if !started || !saving().await? {
            if tries < 5 {
                continue;
            }
            break Err(format!(
                "{STARVED}the snapshot ended before the wait did, {tries} times"
            ));
        }
        break match fsynced {
            Value::Array(ref a) if a.first() == Some(&Value::Integer(0)) => Ok(()),
            other => Err(format!(
                "a write acknowledged by an appendfsync always server while a snapshot was \
                 being written, with no-appendfsync-on-rewrite yes, was fsynced: WAITAOF \
                 answered {other:?}"
            )),
        };
    };
    cmd(s, "CONFIG", set("rdb-key-save-delay", "0")).await?;
    while saving().await? {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    outcome
}

/// `WAITAOF` answers for the writes of the connection it is sent on. A
/// claim whose connection dropped before its fsync wait (here a reconnect
/// the test hook forces between the two, which a real drop cannot be timed
/// to hit) must not be proven by a wait on the new connection, which wrote
/// nothing and is answered at once: a crash of the machine in that second
/// could lose the claim with the pool's span. The server is switched to
/// `appendfsync no` after the connect, where `WAITAOF` never confirms a
/// connection's writes (but answers a connection without writes at once),
/// so no wait that covers the claim can succeed: the claim is released and
/// answered as retryable, with or without the reconnect, and the connection
/// did change.
async fn a_reconnect_before_the_fsync_wait_proves_nothing(b: Arc<Valkey>) -> Outcome {
    let bin = b.binary.as_deref().ok_or("no local server binary")?;
    let own = OwnServer::start(
        bin,
        &["--appendonly", "yes", "--appendfsync", "everysec"],
        &[],
    )?;
    let s = ValkeyStrategy::connect(
        ValkeyConfig::new(&own.url)
            .method(b.method)
            .op_timeout(Duration::from_secs(2)),
    )
    .await
    .map_err(|e| e.to_string())?;
    // The fsyncs are switched off below, behind the claims' back: the
    // claim's own wait must catch it, not the next reading of the settings.
    s.keep_the_settings_read_at_connect();
    // Past the guard of the fresh server for the pools below (TTL 1 s),
    // with fsyncs still running.
    let warm = declared_new(&s, fresh_pool(1, Duration::from_secs(1))?).await?;
    let limit = Instant::now() + Duration::from_secs(60);
    loop {
        match s.acquire(&warm, Floor::NONE).await {
            Ok(_) => break,
            Err(AcquireError::StoreRestarted { .. } | AcquireError::Unreachable(_))
                if Instant::now() < limit => {}
            Err(e) => return Err(format!("a claim before fsyncs were held back: {e}")),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cmd(
        &s,
        "CONFIG",
        vec!["SET".into(), "appendfsync".into(), "no".into()],
    )
    .await?;
    {
        let unproven = async |what: &str| {
            expect_unproven_claim(&s, Duration::from_secs(1), "fsynced", what).await
        };
        unproven("on the claim's own connection").await?;
        let before = cmd(&s, "CLIENT", vec!["ID".into()]).await?;
        s.reconnect_before_the_next_wait();
        unproven("after a reconnect between the claim and the wait").await?;
        let after = cmd(&s, "CLIENT", vec!["ID".into()]).await?;
        ensure!(
            before != after,
            "the hook did not reconnect: client id {before:?} before, {after:?} after"
        );
        Ok(())
    }
}

/// Polls the server's `INFO replication` until it has a replica online
/// (synchronised, receiving the write stream), for up to a minute.
async fn a_replica_online(s: &ValkeyStrategy) -> Outcome {
    let limit = Instant::now() + Duration::from_secs(60);
    loop {
        let info = cmd(s, "INFO", vec!["replication".into()]).await?;
        let text = info.as_string().unwrap_or_default();
        if text
            .lines()
            .any(|l| l.starts_with("slave0:") && l.contains("state=online"))
        {
            return Ok(());
        }
        ensure!(
            Instant::now() < limit,
            "no replica online after 60 s: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `WAIT` answers for the writes of the connection it is sent on: sent on a
/// connection that wrote nothing (the claim's or renewal's connection
/// dropped and fred reconnected; here the test hook forces the reconnect
/// between the script and the wait, which a real drop cannot be timed to
/// hit), it counts every replica at once, and a claim or renewal no replica
/// has would be trusted: a failover could then lose it and grant the slot to
/// a second holder. With the only replica stopped (`SIGSTOP`: still
/// connected, acknowledging nothing), no wait that covers the claim or
/// renewal can succeed, so the claim is released and answered as retryable
/// and the renewal answers `Retry`, with or without the reconnect, and the
/// connection did change. While the replica runs, both are acknowledged.
async fn a_reconnect_before_the_replica_wait_proves_nothing(b: Arc<Valkey>) -> Outcome {
    let bin = b.binary.as_deref().ok_or("no local server binary")?;
    let primary = OwnServer::start(bin, &[], &[])?;
    let replica = primary.replica(bin)?;
    // The server keeps nothing on disk and starts here: no guard (as in
    // `Valkey::strategy`). WAIT gives up after 1 s (what a stopped replica
    // costs each operation); the operation timeout leaves room for a loaded
    // machine.
    let config = ValkeyConfig::new(&primary.url)
        .durability(DurabilityPolicy::Throwaway)
        .method(b.method)
        .op_timeout(Duration::from_secs(20));
    let waiting =
        ValkeyStrategy::connect(config.clone().wait_for_replicas(1, Duration::from_secs(1)))
            .await
            .map_err(|e| e.to_string())?;
    let plain = ValkeyStrategy::connect(config)
        .await
        .map_err(|e| e.to_string())?;
    a_replica_online(&plain).await?;
    // Acknowledged while the replica runs (a loaded machine may need more
    // than the WAIT timeout: retried until a generous deadline).
    let p = fresh_pool(1, Duration::from_secs(30))?;
    let limit = Instant::now() + Duration::from_secs(120);
    let (g, sent) = loop {
        let sent = Instant::now();
        match waiting.acquire(&p, Floor::NONE).await {
            Ok(g) => break (g, sent),
            Err(AcquireError::Unreachable(_)) if Instant::now() < limit => {}
            Err(e) => return Err(format!("a claim with the replica running: {e}")),
        }
    };
    let r = waiting.renew(&p, &g, Floor::NONE).await;
    judge(sent, g.ttl, !matches!(r, Renewal::Lost(_)), || {
        format!("a renewal with the replica running answered {r:?}")
    })?;
    let r = plain.release(&p, &g, Floor::NONE).await;
    ensure!(r == Release::Released, "the release answered {r:?}");
    replica.freeze()?;
    let outcome = async {
        let unproven_claim = async |what: &str| {
            expect_unproven_claim(&waiting, Duration::from_secs(30), "0 of 1 replicas", what).await
        };
        let unproven_renewal = async |what: &str| -> Outcome {
            let p = fresh_pool(1, Duration::from_secs(30))?;
            let (g, sent) = hold(&plain, &p, 0).await?;
            let r = waiting.renew(&p, &g, Floor::NONE).await;
            judge(sent, g.ttl, matches!(r, Renewal::Retry(_)), || {
                format!("{what}: a renewal no replica received answered {r:?}")
            })
        };
        let client_id = async || cmd(&waiting, "CLIENT", vec!["ID".into()]).await;
        unproven_claim("a claim on its own connection").await?;
        let before = client_id().await?;
        waiting.reconnect_before_the_next_wait();
        unproven_claim("a claim after a reconnect before the wait").await?;
        let between = client_id().await?;
        unproven_renewal("a renewal on its own connection").await?;
        waiting.reconnect_before_the_next_wait();
        unproven_renewal("a renewal after a reconnect before the wait").await?;
        let after = client_id().await?;
        ensure!(
            before != between && between != after,
            "the hook did not reconnect: client ids {before:?}, {between:?}, {after:?}"
        );
        Ok(())
    }
    .await;
    replica.thaw()?;
    outcome
}

/// The password in the URL never shows — not in `Debug` of
/// the config or the strategy, not in `identity()`, not in an error (a wrong
/// password, an unreachable server), not in any span or event of a manager
/// holding, renewing and releasing.
async fn the_password_never_shows(b: Arc<Valkey>) -> Outcome {
    use leasehold_conformance::secrets::{self, Secret, Shown};
    let bin = b.binary.as_deref().ok_or("no local server binary")?;
    let secret = Secret::new();
    let mut shown = Shown::new(&secret);
    let _ = secrets::capture();
    let own = OwnServer::start(bin, &["--requirepass", secret.as_str()], &[])?;
    let authed = own.url.replacen(
        "redis://",
        &format!("redis://default:{}@", secret.as_str()),
        1,
    );
    let config = ValkeyConfig::new(&authed)
        .method(b.method)
        .durability(DurabilityPolicy::Throwaway);
    shown.debug("ValkeyConfig", &config);
    let s = ValkeyStrategy::connect(config)
        .await
        .map_err(|e| e.to_string())?;
    shown.debug("ValkeyStrategy", &s);
    secrets::exercise(Arc::new(s), &mut shown).await?;
    let wrong = own.url.replacen(
        "redis://",
        &format!("redis://default:{}x@", secret.as_str()),
        1,
    );
    match ValkeyStrategy::connect(ValkeyConfig::new(&wrong).op_timeout(Duration::from_secs(2)))
        .await
    {
        Ok(_) => return Err("a wrong password was accepted".into()),
        Err(e) => {
            shown.both("ValkeyError (wrong password)", &e);
        }
    }
    let dead = format!("redis://default:{}@127.0.0.1:1", secret.as_str());
    match ValkeyStrategy::connect(ValkeyConfig::new(&dead).op_timeout(Duration::from_secs(2))).await
    {
        Ok(_) => return Err("connected to port 1".into()),
        Err(e) => {
            shown.both("ValkeyError (unreachable)", &e);
        }
    }
    shown.traces().metrics().verdict()
}

/// A server whose `maxmemory-policy` may evict keys is refused at connect
/// with an error that names the setting and the fix, and accepted with
/// `allow_eviction(true)`, which records the warning; a server with
/// `CONFIG` renamed away is accepted with the settings unknown; the test
/// server (no persistence) is described as such.
async fn evicting_server_is_refused_unless_allowed(b: Arc<Valkey>) -> Outcome {
    let bin = b.binary.as_deref().ok_or("no local server binary")?;
    let own = OwnServer::start(bin, &["--maxmemory-policy", "allkeys-lru"], &[])?;
    let r = ValkeyStrategy::connect(
        ValkeyConfig::new(&own.url).durability(DurabilityPolicy::Throwaway),
    )
    .await;
    match &r {
        Err(e @ ValkeyError::Eviction { policy, .. }) => {
            let msg = e.to_string();
            ensure!(policy == "allkeys-lru", "policy {policy}");
            ensure!(
                msg.contains("maxmemory-policy")
                    && msg.contains("CONFIG SET maxmemory-policy noeviction")
                    && msg.contains("allow_eviction"),
                "the refusal lacks the setting or the fix: {msg}"
            );
        }
        other => return Err(format!("an allkeys-lru server answered {other:?}")),
    }
    let s = ValkeyStrategy::connect(
        ValkeyConfig::new(&own.url)
            .durability(DurabilityPolicy::Throwaway)
            .allow_eviction(true),
    )
    .await
    .map_err(|e| format!("with allow_eviction(true): {e}"))?;
    let d = s.persistence();
    ensure!(
        d.evicts() == Some(true) && d.eviction_allowed && d.warning().is_some(),
        "durability {d:?}"
    );
    let dbg = format!("{s:?}");
    ensure!(
        dbg.contains("WARNING") && dbg.contains("allkeys-lru"),
        "{dbg}"
    );
    drop(s);

    let own = OwnServer::start(bin, &["--rename-command", "CONFIG", ""], &[])?;
    let s = ValkeyStrategy::connect(
        ValkeyConfig::new(&own.url).durability(DurabilityPolicy::Throwaway),
    )
    .await
    .map_err(|e| format!("without CONFIG: {e}"))?;
    let d = s.persistence();
    ensure!(
        d.maxmemory_policy.is_none() && d.evicts().is_none() && d.persists().is_none(),
        "without CONFIG: {d:?}"
    );
    ensure!(d.to_string().contains("unknown"), "without CONFIG: {d}");
    let p = fresh_pool(1, Duration::from_secs(5))?;
    s.acquire(&p, Floor::NONE)
        .await
        .map_err(|e| format!("without CONFIG: {e}"))?;
    drop(s);

    let s = b.strategy(b.method).await?;
    let d = s.persistence();
    ensure!(
        d.evicts() == Some(false)
            && d.appendonly == Some(false)
            && d.persists() == Some(false)
            && d.warning().is_none()
            && d.wait.is_none(),
        "the test server (noeviction, --save '', --appendonly no): {d:?}"
    );
    ensure!(d.to_string().contains("a restart loses"), "{d}");
    Ok(())
}

/// `wait_for_replicas`: a server without replicas acknowledges none, so a
/// claim is released and refused as retryable, and a renewal answers
/// `Retry`; a timeout not below the operation timeout is refused at
/// connect.
async fn wait_without_replicas_refuses(b: Arc<Valkey>) -> Outcome {
    let base = b
        .config()?
        .durability(DurabilityPolicy::Throwaway)
        .key_prefix(&b.prefix)
        .method(b.method);
    let config = || base.clone();
    let r =
        ValkeyStrategy::connect(config().wait_for_replicas(1, ValkeyStrategy::DEFAULT_OP_TIMEOUT))
            .await;
    ensure!(
        matches!(r, Err(ValkeyError::Config(_))),
        "a WAIT timeout equal to the operation timeout answered {r:?}"
    );
    // WAIT answers after 50 ms; the operation timeout leaves room for a
    // loaded machine.
    let waiting = ValkeyStrategy::connect(
        config()
            .op_timeout(Duration::from_secs(10))
            .wait_for_replicas(1, Duration::from_millis(50)),
    )
    .await
    .map_err(|e| e.to_string())?;
    let plain = b.strategy(b.method).await?;
    let p = fresh_pool(1, Duration::from_secs(30))?;
    match waiting.acquire(&p, Floor::NONE).await {
        Err(e @ AcquireError::Unreachable(_)) => {
            let msg = e.to_string();
            ensure!(msg.contains("0 of 1 replicas"), "{msg}");
        }
        other => {
            return Err(format!(
                "a claim no replica acknowledged answered {other:?}"
            ));
        }
    }
    // It was released: the only slot is free.
    let (g, sent) = hold(&plain, &p, 0).await?;
    let r = waiting.renew(&p, &g, Floor::NONE).await;
    judge(sent, g.ttl, matches!(r, Renewal::Retry(_)), || {
        format!("a renewal no replica acknowledged answered {r:?}")
    })?;
    let r = plain.renew(&p, &g, Floor::NONE).await;
    judge(sent, g.ttl, matches!(r, Renewal::Renewed { .. }), || {
        format!("after a Retry the renewal answered {r:?}")
    })
}

/// Writes libfaketime's offset file in one step (a reader never sees it
/// empty).
fn set_fake_offset(file: &Path, offset: &str) -> Result<(), String> {
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, format!("{offset}\n")).map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, file).map_err(|e| e.to_string())
}

/// The server's clock jumps 8 s ahead in the middle of a lease (libfaketime
/// in the server, whose `TIME` and key expiry follow it): the next renewal
/// still finds the lease (TTL 20 s), but the store time it carries ran
/// ahead of the local clock by far more than the margin allows, so the
/// manager loses the lease with `StoreClockJumped`, the gate closed first.
/// Without store times in renewals nothing would notice, and the store
/// would expire the lease 8 s before the local deadline.
async fn store_clock_jump_loses_the_lease(b: Arc<Valkey>) -> Outcome {
    let bin = b.binary.as_deref().ok_or("no local server binary")?;
    // libfaketime, preloaded into the server.
    let libfaketime = leasehold_conformance::programs::require("libfaketime")?;
    let offsets = std::env::temp_dir().join(format!(
        "leasehold-faketime-{}-{}",
        std::process::id(),
        leasehold_conformance::servers::free_port()
    ));
    set_fake_offset(&offsets, "+0")?;
    let server = OwnServer::start(
        bin,
        &[],
        &[
            ("LD_PRELOAD", libfaketime.to_str().ok_or("path")?),
            ("FAKETIME_TIMESTAMP_FILE", offsets.to_str().ok_or("path")?),
            ("FAKETIME_NO_CACHE", "1"),
        ],
    )?;
    let outcome = async {
        let s = ValkeyStrategy::connect(
            ValkeyConfig::new(&server.url)
                .durability(DurabilityPolicy::Throwaway)
                .method(b.method),
        )
        .await
        .map_err(|e| e.to_string())?;
        let gate: Arc<OnceLock<LeaseGate>> = Arc::new(OnceLock::new());
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(LossEvent, Option<bool>)>();
        let seen = gate.clone();
        let config = LeaseConfig::builder("clock-jump")
            .pool_size(4)
            .ttl(Duration::from_secs(20))
            .renew_interval(Duration::from_secs(1))
            .on_lost(move |e| {
                // Rule 4: the gate is closed before the callback runs.
                let closed = seen.get().map(|g| g.check_now().is_err());
                let _ = tx.send((e.clone(), closed));
            })
            .build()
            .map_err(|e| e.to_string())?;
        let manager = LeaseManager::start(s, config)
            .await
            .map_err(|e| e.to_string())?;
        let _ = gate.set(manager.gate());
        let view = manager.gate().view();
        set_fake_offset(&offsets, "+8")?;
        let got = tokio::time::timeout(Duration::from_secs(90), rx.recv()).await;
        manager.shutdown().await;
        let (event, closed) = got
            .map_err(|_| "no loss within 90 s of the store clock's 8 s jump".to_owned())?
            .ok_or("the loss channel closed")?;
        match event.cause {
            // The driver reports how far the store ran ahead beyond what the
            // local clock allows, which (on one machine, whatever the load)
            // cannot exceed the jump itself.
            LossCause::StoreClockJumped { by } => ensure!(
                by <= Duration::from_secs(8) + Duration::from_millis(10),
                "a jump of 8 s was measured as {by:?}"
            ),
            other => return Err(format!("lost with {other:?}, not StoreClockJumped")),
        }
        ensure!(
            event.slot == view.slot && event.fence == view.fence,
            "lost {event:?}, held slot {} fence {}",
            view.slot,
            view.fence
        );
        ensure!(
            closed == Some(true),
            "the gate was not closed when the loss was reported ({closed:?})"
        );
        Ok(())
    }
    .await;
    drop(server);
    let _ = std::fs::remove_file(&offsets);
    outcome
}

/// A target for `kind`, and the server to keep alive until the run ends.
/// With `tls`, the server takes TLS connections only and asks for a client
/// certificate ([`provide_tls`]): the row `<kind>-tls` reaches it with a
/// `rediss://` URL, and runs the TLS tests instead of those that start
/// plain-text servers of their own.
fn target(
    kind: ServerKind,
    method: Method,
    path: ActivePath,
    tls: bool,
) -> (Target, Option<Server>) {
    let label = if tls {
        format!("{kind}-tls")
    } else {
        kind.name().to_owned()
    };
    let provided = if tls {
        provide_tls(kind)
    } else {
        provide(kind)
    };
    let server = match provided {
        Ok(s) => s,
        Err(missing) => return (Target::missing(label, missing), None),
    };
    let Some(addr) = server.addr() else {
        let tried = vec![format!("no address in {}", server.url)];
        return (Target::missing(label, Missing { kind, tried }), None);
    };
    let backend = Arc::new(Valkey {
        url: server.url.clone(),
        addr,
        method,
        prefix: "lhtest".into(),
        path,
        version: server.version.clone(),
        binary: find_binary(kind),
    });
    let describe = if tls {
        format!(
            "{} over TLS only, with client certificates",
            server.describe()
        )
    } else {
        server.describe()
    };
    let t = Target::new(label, describe, backend).with_revoke();
    let t = trials!(t;
        probe_picks_the_path,
        one_round_trip_per_operation,
        freed_slots_are_found_around_the_hint,
        lost_script_cache_is_healed,
        revoke_leaves_a_tombstone_with_the_old_expiry,
        revoked_holder_cannot_move_the_floor,
        applied_ttl_is_whole_milliseconds,
        grants_and_renewals_carry_store_time,
        lost_fences_hash_refuses_claims,
        a_lost_fences_hash_refuses_claims_of_every_id_format,
        wait_without_replicas_refuses,
    );
    // Damaged records, planted on the row's server (over TLS on the TLS row).
    let t = damaged::register(t);
    // The tests below start plain-text servers of their own: the TLS row
    // runs the TLS tests instead, on its server and on TLS servers of their
    // own.
    let own_servers = !tls && find_binary(kind).is_some();
    let t = if tls { tls::trials(t) } else { t };
    let t = if own_servers {
        trials!(t;
            evicting_server_is_refused_unless_allowed,
            the_restart_guard_holds_grants_after_a_start,
            require_durable_refuses_a_server_that_can_forget_whatever_the_opt_ins,
            the_configured_clock_skew_lengthens_the_guard,
            claims_wait_for_the_fsync_of_the_pools_span,
            a_server_that_skips_fsyncs_while_a_child_saves_is_refused,
            the_password_never_shows,
        )
    } else {
        t
    };
    // WAITAOF: Redis and Valkey 7.2+.
    let t = if own_servers && version_at_least(&server.version, 7, 2) {
        trials!(t; a_reconnect_before_the_fsync_wait_proves_nothing)
    } else {
        t
    };
    let t = if own_servers {
        trials!(t; a_reconnect_before_the_replica_wait_proves_nothing)
    } else {
        t
    };
    // Debian's redis-server 7.0 aborts under libfaketime (its jemalloc calls
    // clock_gettime while libfaketime initialises); the PyPI builds run.
    let t = if kind != ServerKind::Redis7 && own_servers {
        trials!(t; store_clock_jump_loses_the_lease)
    } else {
        t
    };
    let t = if path == ActivePath::Hsetex {
        trials!(t;
            connect_errors_are_prompt_and_typed,
            fields_expire_together_fence_persists,
            fxx_with_one_field_missing_is_lost,
            floor_is_carried_across_paths,
            paths_exclude_each_other,
        )
    } else {
        trials!(t; forced_hsetex_is_final_unsupported)
    };
    (t, Some(server))
}

/// The suite through Sentinel: a durable primary with one replica and three
/// Sentinels ([`SentinelTopology`]), the store reached through the
/// Sentinels with the library's defaults (the restart guard and the
/// promotion guard on: a durable server that has not failed over holds no
/// claim back). The fault proxy goes in front of the primary itself.
struct ThroughSentinel {
    url: String,
    primary: SocketAddr,
}

impl ThroughSentinel {
    async fn strategy(&self) -> Result<ValkeyStrategy, String> {
        ValkeyStrategy::connect(ValkeyConfig::from_url(&self.url).map_err(|e| e.to_string())?)
            .await
            .map_err(|e| e.to_string())
    }
}

impl Glue for ThroughSentinel {
    fn connect(&self) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async move { Ok(Arc::new(self.strategy().await?) as Store) })
    }

    /// Every test's pool is new (a fresh random name): said so, so that its
    /// first claim is not held back as a possibly wiped pool's.
    fn prepare<'a>(&'a self, pool: &'a PoolSpec) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let s = self.strategy().await?;
            s.declare_new_pool(pool).await.map_err(|e| e.to_string())
        })
    }

    fn connect_via(
        &self,
        addr: SocketAddr,
        op_timeout: Duration,
    ) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async move {
            let config = ValkeyConfig::from_url(&format!("redis://{addr}?prefix=lhsentinel"))
                .map_err(|e| e.to_string())?
                .op_timeout(op_timeout);
            let s = ValkeyStrategy::connect(config)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Arc::new(s) as Store)
        })
    }

    fn store_addr(&self) -> Option<SocketAddr> {
        Some(self.primary)
    }

    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> Option<BoxFuture<'a, Result<(), String>>> {
        Some(Box::pin(async move {
            let s = self.strategy().await?;
            let was = s.revoke(pool, slot).await.map_err(|e| e.to_string())?;
            ensure!(was, "no lease on slot {slot} to revoke");
            Ok(())
        }))
    }
}

/// The suite's row through Sentinel on Valkey 8, and the topology to keep
/// running until the run ends.
fn sentinel_target() -> (Target, Option<SentinelTopology>) {
    let kind = ServerKind::Valkey8;
    let label = VALKEY8_SENTINEL_LABEL.to_owned();
    let topology = match SentinelTopology::start(kind) {
        Ok(t) => t,
        Err(why) => {
            let missing = Missing {
                kind,
                tried: vec![format!("a Sentinel topology: {why}")],
            };
            return (Target::missing(label, missing), None);
        }
    };
    let backend = Arc::new(ThroughSentinel {
        url: format!("{}&prefix=lhsentinel", topology.sentinel_url()),
        primary: topology.primary_addr(),
    });
    let describe = format!(
        "{kind} primary {} with a replica, through 3 Sentinels",
        topology.primary_addr()
    );
    let t = Target::new(label, describe, backend).with_revoke();
    let t = trials!(t; sentinel_guards_are_read_where_the_pool_lives);
    (t, Some(topology))
}

/// What doctor reads of a pool's guards through a Sentinel or a Cluster
/// URL comes from the server that holds the pool: no incarnation record
/// before the pool is declared new, one after; no replication ID recorded
/// before a claim, and after it the one the claim recorded, which is the
/// server's own (a reading from another Cluster primary, whose replication
/// ID differs, would show a change).
async fn guards_are_read_where_the_pool_lives(s: &ValkeyStrategy) -> Outcome {
    use leasehold_core::{GuardKind, GuardState, Operate};
    let pool = fresh_pool(2, Duration::from_secs(10))?;
    let read = |kind: GuardKind| {
        let s = s.clone();
        let pool = pool.clone();
        async move {
            let guards = s.guards(Some(&pool)).await.map_err(|e| e.to_string())?;
            guards
                .into_iter()
                .find(|g| g.kind == kind)
                .ok_or_else(|| format!("no {kind:?} guard"))
        }
    };
    let wipe = read(GuardKind::Wipe).await?;
    ensure!(wipe.state == GuardState::Missing, "before: {wipe:?}");
    let promotion = read(GuardKind::Promotion).await?;
    ensure!(
        matches!(promotion.state, GuardState::NotRecorded { .. }),
        "before: {promotion:?}"
    );
    s.declare_new_pool(&pool).await.map_err(|e| e.to_string())?;
    s.acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    let wipe = read(GuardKind::Wipe).await?;
    ensure!(wipe.state == GuardState::Open, "after: {wipe:?}");
    let promotion = read(GuardKind::Promotion).await?;
    ensure!(
        promotion.state == GuardState::Open
            && promotion
                .recorded
                .as_deref()
                .is_some_and(|r| r.starts_with("replication ID ")),
        "after a claim: {promotion:?}"
    );
    Ok(())
}

async fn cluster_guards_are_read_where_the_pool_lives(b: Arc<InCluster>) -> Outcome {
    guards_are_read_where_the_pool_lives(&b.strategy().await?).await
}

/// The doctor shows what every Cluster primary keeps, a `node` line each
/// (the eviction and persistence lines judge the weakest): three durable
/// primaries, three `ok` lines naming their addresses.
async fn cluster_doctor_shows_what_every_primary_keeps(b: Arc<InCluster>) -> Outcome {
    let s = b.strategy().await?;
    use leasehold_core::{Check, Verdict};
    let nodes: Vec<Check> = leasehold_core::operate::doctor(&s)
        .await
        .into_iter()
        .filter(|c| c.name == "node")
        .collect();
    ensure!(nodes.len() == 3, "node lines: {nodes:?}");
    for node in &nodes {
        ensure!(
            node.verdict == Verdict::Ok
                && node.detail.contains("AOF on (appendfsync always)")
                && node.detail.contains("maxmemory-policy noeviction"),
            "{node}"
        );
    }
    Ok(())
}

async fn sentinel_guards_are_read_where_the_pool_lives(b: Arc<ThroughSentinel>) -> Outcome {
    guards_are_read_where_the_pool_lives(&b.strategy().await?).await
}

/// The suite on a Cluster: three durable primaries with a replica each
/// ([`ClusterTopology`]), the store reached through the cluster URL with the
/// library's defaults, so that each test's pool lives on whichever primary
/// serves its slot. The fault proxy goes in front of one primary; a store
/// through it ([`ThroughOnePrimary`]) is a plain client of that node whose
/// key prefix is picked, once it sees the pool, so that the pool's slot is
/// that node's (any other would answer `MOVED`).
struct InCluster {
    url: String,
    /// The primary behind the fault proxy, and the slots it serves.
    primary: SocketAddr,
    ranges: Vec<(u16, u16)>,
}

impl InCluster {
    async fn strategy(&self) -> Result<ValkeyStrategy, String> {
        ValkeyStrategy::connect(ValkeyConfig::from_url(&self.url).map_err(|e| e.to_string())?)
            .await
            .map_err(|e| e.to_string())
    }
}

impl Glue for InCluster {
    fn connect(&self) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async move { Ok(Arc::new(self.strategy().await?) as Store) })
    }

    /// Every test's pool is new (a fresh random name): said so, so that its
    /// first claim is not held back as a possibly wiped pool's.
    fn prepare<'a>(&'a self, pool: &'a PoolSpec) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let s = self.strategy().await?;
            s.declare_new_pool(pool).await.map_err(|e| e.to_string())
        })
    }

    fn connect_via(
        &self,
        addr: SocketAddr,
        op_timeout: Duration,
    ) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async move {
            let template = ValkeyStrategy::connect(
                ValkeyConfig::from_url(&format!("redis://{addr}?prefix=lhcluster"))
                    .map_err(|e| e.to_string())?
                    .op_timeout(op_timeout),
            )
            .await
            .map_err(|e| e.to_string())?;
            Ok(Arc::new(ThroughOnePrimary {
                addr,
                op_timeout,
                ranges: self.ranges.clone(),
                template,
                store: tokio::sync::OnceCell::new(),
            }) as Store)
        })
    }

    fn store_addr(&self) -> Option<SocketAddr> {
        Some(self.primary)
    }

    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> Option<BoxFuture<'a, Result<(), String>>> {
        Some(Box::pin(async move {
            let s = self.strategy().await?;
            let was = s.revoke(pool, slot).await.map_err(|e| e.to_string())?;
            ensure!(was, "no lease on slot {slot} to revoke");
            Ok(())
        }))
    }
}

/// A store through the fault proxy in front of one Cluster primary: a plain
/// (not cluster-aware) client of that node, connected at its first call
/// with a key prefix that puts the pool on one of the node's slots. A
/// connection that fails then is a retryable answer, as the fault tests
/// expect of an unreachable store.
struct ThroughOnePrimary {
    addr: SocketAddr,
    op_timeout: Duration,
    ranges: Vec<(u16, u16)>,
    /// Connected through the proxy at once: its capabilities and identity.
    template: ValkeyStrategy,
    store: tokio::sync::OnceCell<ValkeyStrategy>,
}

impl ThroughOnePrimary {
    /// The first prefix `lhclusterN` whose pool tag `{lhclusterN:<pool>}`
    /// hashes to one of the node's slots.
    fn prefix_for(&self, pool: &PoolSpec) -> String {
        (0u32..)
            .map(|n| format!("lhcluster{n}"))
            .find(|p| {
                let slot = fred::util::redis_keyslot(format!("{p}:{}", pool.name()).as_bytes());
                self.ranges.iter().any(|&(a, b)| a <= slot && slot <= b)
            })
            .unwrap_or_default()
    }

    async fn store(&self, pool: &PoolSpec) -> Result<&ValkeyStrategy, String> {
        self.store
            .get_or_try_init(|| async {
                let url = format!("redis://{}?prefix={}", self.addr, self.prefix_for(pool));
                let config = ValkeyConfig::from_url(&url)
                    .map_err(|e| e.to_string())?
                    .op_timeout(self.op_timeout);
                let s = ValkeyStrategy::connect(config)
                    .await
                    .map_err(|e| e.to_string())?;
                // The pool under this prefix is new: its first claim is
                // not held back as a possibly wiped pool's.
                s.declare_new_pool(pool).await.map_err(|e| e.to_string())?;
                Ok::<_, String>(s)
            })
            .await
    }
}

impl Strategy for ThroughOnePrimary {
    async fn acquire(&self, pool: &PoolSpec, ceiling: Floor) -> Result<Grant, AcquireError> {
        match self.store(pool).await {
            Ok(s) => s.acquire(pool, ceiling).await,
            Err(e) => Err(AcquireError::Unreachable(leasehold_core::Reason::new(e))),
        }
    }

    async fn renew(&self, pool: &PoolSpec, grant: &Grant, ceiling: Floor) -> Renewal {
        match self.store(pool).await {
            Ok(s) => s.renew(pool, grant, ceiling).await,
            Err(e) => Renewal::Retry(leasehold_core::Reason::new(e)),
        }
    }

    async fn release(&self, pool: &PoolSpec, grant: &Grant, issued: Floor) -> Release {
        match self.store(pool).await {
            Ok(s) => s.release(pool, grant, issued).await,
            Err(_) => self.template.release(pool, grant, issued).await,
        }
    }

    fn capabilities(&self) -> leasehold_core::Capabilities {
        self.template.capabilities()
    }

    fn identity(&self) -> String {
        self.template.identity()
    }
}

/// The suite's row on a Valkey 8 Cluster, and the topology to keep running
/// until the run ends.
fn cluster_target() -> (Target, Option<ClusterTopology>) {
    let kind = ServerKind::Valkey8;
    let label = VALKEY8_CLUSTER_LABEL.to_owned();
    let started = ClusterTopology::start(kind).and_then(|t| {
        let primary = t.primary_of("{lhcluster}")?;
        let ranges = t.slot_ranges(primary)?;
        Ok((t, primary, ranges))
    });
    let (topology, primary, ranges) = match started {
        Ok(t) => t,
        Err(why) => {
            let missing = Missing {
                kind,
                tried: vec![format!("a Cluster topology: {why}")],
            };
            return (Target::missing(label, missing), None);
        }
    };
    let backend = Arc::new(InCluster {
        url: format!("{}&prefix=lhcluster", topology.cluster_url()),
        primary,
        ranges,
    });
    let describe = format!(
        "{kind} Cluster of 3 primaries with a replica each, from {}",
        topology.node_addrs()[0]
    );
    let t = Target::new(label, describe, backend).with_revoke();
    let t = trials!(t; cluster_guards_are_read_where_the_pool_lives, cluster_doctor_shows_what_every_primary_keeps);
    (t, Some(topology))
}

fn main() -> ExitCode {
    let (sentinel, topology) = sentinel_target();
    let (cluster, cluster_topology) = cluster_target();
    let (mut targets, servers): (Vec<_>, Vec<_>) = [
        (ServerKind::Redis8, ActivePath::Hsetex),
        (ServerKind::Redis7, ActivePath::Scripts),
        (ServerKind::Valkey8, ActivePath::Scripts),
    ]
    .into_iter()
    .map(|(kind, path)| target(kind, Method::Auto, path, false))
    .chain([target(
        ServerKind::Redis7,
        Method::Auto,
        ActivePath::Scripts,
        true,
    )])
    .unzip();
    let (redis7_user, redis7_user_server) = lease_user::target(ServerKind::Redis7);
    let (valkey8_user, valkey8_user_server) = lease_user::target(ServerKind::Valkey8);
    targets.push(redis7_user);
    targets.push(valkey8_user);
    targets.push(sentinel);
    targets.push(cluster);
    let code = leasehold_conformance::run(targets);
    drop(servers);
    drop((redis7_user_server, valkey8_user_server));
    drop(topology);
    drop(cluster_topology);
    code
}
