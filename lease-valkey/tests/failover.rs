//! A failover to an asynchronous replica, through Sentinel, on private
//! Valkey 8.1 servers (the script path; the guard's main cases on Redis 8.2
//! too, the HSETEX path) (`leasehold_conformance::topology::sentinel`): a
//! primary, one replica, three Sentinels, every data server durable (the
//! append-only file fsynced before every reply), so that what the failover
//! loses is lost by the replication alone and the restart guard has nothing
//! to say.
//!
//! The replica is made to miss a claim: its replication link is cut first
//! (`SentinelTopology::cut_replication`: it is given credentials the primary
//! refuses, and the primary drops it), so the primary grants the claim and
//! the replica never receives it, while it still answers the Sentinels and
//! can be promoted. Then the primary is killed (SIGKILL), or `SENTINEL
//! FAILOVER` promotes the replica while the old primary keeps running.
//!
//! On the promoted replica the slot is free. With the promotion guard (the
//! default) a second claimer is refused (`StoreRestarted`) until the pool's
//! restart span has passed since a claim first saw the new replication ID,
//! and the first holder's renewal answers `Lost`. Without it
//! (`DurabilityPolicy::Throwaway`) the second claimer is granted the same slot
//! while the first holder's lease is still valid: the control, which shows
//! that the scenario does lose the claim.
//!
//! What the guard does not cover is shown too: after `SENTINEL FAILOVER` the
//! old primary confirms renewals sent on connections that still reach it
//! (a split brain), unless it runs with `min-replicas-to-write`.
//!
//! And the other side of the promotion guard's choice, on a private durable
//! server without replicas: its restart changes the replication ID too, and
//! is not counted as a failover.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fred::prelude::ClientLike;
use fred::types::{ClusterHash, CustomCommand};
use leasehold_conformance::restarts::acquire_past_the_restart_guard;
use leasehold_conformance::servers::{ServerKind, Settings, provide_with};
use leasehold_conformance::topology::cluster::ClusterTopology;
use leasehold_conformance::topology::sentinel::{Reply, SentinelTopology};
use leasehold_conformance::{ensure, fresh_pool};
use leasehold_core::{AcquireError, DurabilityPolicy, Floor, Grant, PoolSpec, Renewal, Strategy};
use leasehold_valkey::{ActivePath, ValkeyConfig, ValkeyError, ValkeyStrategy};

/// The lease time: longer than a failover takes here (a few seconds after
/// a kill, with `down-after-milliseconds 2000`), so that the control's first
/// lease is still valid when the replica has been promoted.
const TTL: Duration = Duration::from_secs(8);

/// The controls' lease: long enough that even a failover on a loaded
/// machine (a starved Sentinel pauses for 30 s) ends inside it, which is
/// what makes the second grant they show an overlap. Nothing waits it out.
const CONTROL_TTL: Duration = Duration::from_secs(120);

/// How long a promotion may take on a loaded machine (a starved Sentinel
/// pauses for 30 s in TILT mode).
const PROMOTION_WAIT: Duration = Duration::from_secs(90);

#[derive(Clone, Copy, Debug)]
enum Failover {
    /// The primary is killed (SIGKILL); the Sentinels promote the replica.
    Kill,
    /// `SENTINEL FAILOVER`: the replica is promoted, the old primary runs on.
    Command,
}

/// The servers of a test, kept running until it ends.
#[allow(dead_code, reason = "held for its Drop")]
enum Topology {
    Sentinel(SentinelTopology),
    Cluster(ClusterTopology),
}

/// The topology after the failover, with the claim the new primary lacks.
struct AfterFailover {
    topology: Topology,
    pool: PoolSpec,
    url: String,
    holder: ValkeyStrategy,
    /// The claim the promoted replica never received.
    grant: Grant,
    /// Just before that claim was sent: its lease lasts until at least
    /// `sent + pool.ttl()` on the old primary.
    sent: Instant,
}

async fn connect(config: ValkeyConfig) -> Result<ValkeyStrategy, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match ValkeyStrategy::connect(config.clone()).await {
            Ok(s) => return Ok(s),
            Err(ValkeyError::Unreachable { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(format!("connect: {e}")),
        }
    }
}

/// The topology's Sentinel URL with this test's key prefix and a generous
/// operation timeout (the machine may be loaded).
fn store_url(topology: &SentinelTopology) -> String {
    format!(
        "{}&prefix=lhfailover&op_timeout=5s",
        topology.sentinel_url()
    )
}

/// Starts the topology, lets a first claim of the pool reach the replica
/// (so that it records the primary's replication ID there too), cuts the
/// replication, claims the pool's one slot, and fails over. `guarded`:
/// whether the holder runs the guards (the controls' holder does not: its
/// first claim would otherwise wait out the long lease's span on servers
/// that started moments ago, and what the control shows is the unguarded
/// second claimer's grant).
async fn claim_then_fail_over(
    kind: ServerKind,
    how: Failover,
    ttl: Duration,
    guarded: bool,
) -> Result<AfterFailover, String> {
    let mut topology = tokio::task::block_in_place(|| SentinelTopology::start(kind))?;
    let pool = fresh_pool(1, ttl)?;
    let url = store_url(&topology);
    let config = ValkeyConfig::from_url(&url)
        .map_err(|e| e.to_string())?
        .durability(if guarded {
            DurabilityPolicy::Durable
        } else {
            DurabilityPolicy::Throwaway
        });
    let holder = connect(config).await?;
    let path = if kind == ServerKind::Redis8 {
        ActivePath::Hsetex
    } else {
        ActivePath::Scripts
    };
    ensure!(
        holder.path() == path,
        "{kind} took the {} path, not {path}",
        holder.path()
    );
    holder
        .declare_new_pool(&pool)
        .await
        .map_err(|e| format!("declare the pool new: {e}"))?;
    let earlier = acquire_past_the_restart_guard(&holder, &pool, Floor::NONE)
        .await
        .map_err(|e| format!("the earlier claim: {e}"))?;
    holder.release(&pool, &earlier, Floor::NONE).await;
    let fences = holder.keys(pool.name()).fences;
    let replica = topology.replica_addr();
    let deadline = Instant::now() + PROMOTION_WAIT;
    // Every claim raises `span` in the script that records `replid`: the
    // replica has both once it has the one.
    while !matches!(
        topology.command(replica, &["HGET", fences.as_str(), "span"])?,
        Reply::Bulk(Some(_))
    ) {
        ensure!(
            Instant::now() < deadline,
            "the replica did not receive the pool's fences hash"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::task::block_in_place(|| topology.cut_replication())?;
    let sent = Instant::now();
    let grant = holder
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| format!("the claim before the failover: {e}"))?;
    tokio::task::block_in_place(|| -> Result<(), String> {
        match how {
            Failover::Kill => topology.kill_primary().map(drop),
            Failover::Command => topology.failover(),
        }?;
        topology.wait_promoted(PROMOTION_WAIT).map(drop)
    })?;
    // The lease is a slot key on the script path (Valkey 8), a field of the
    // leases hash on the HSETEX path (Redis 8).
    let keys = holder.keys(pool.name());
    let slot_key = keys.slot_key(grant.slot);
    let field = grant.slot.to_string();
    let primary = topology.primary_addr();
    let kept = (
        topology.command(primary, &["GET", slot_key.as_str()])?,
        topology.command(primary, &["HGET", keys.leases.as_str(), field.as_str()])?,
    );
    ensure!(
        kept == (Reply::Bulk(None), Reply::Bulk(None)),
        "the promoted replica has the claim ({slot_key}, {} {field}: {kept:?}): the test needs \
         one that missed it",
        keys.leases
    );
    Ok(AfterFailover {
        topology: Topology::Sentinel(topology),
        pool,
        url,
        holder,
        grant,
        sent,
    })
}

/// The first holder's renewal, on the new primary, answers `Lost` (within
/// 30 s of reconnections). After `SENTINEL FAILOVER` the holder's own
/// connection still reaches the old primary, which keeps answering writes
/// for seconds (see the topology's documentation): the renewal is sent on a
/// fresh connection through the Sentinels then.
async fn renewal_is_lost(after: &AfterFailover, how: Failover) -> Result<(), String> {
    let renewer = match how {
        Failover::Kill => after.holder.clone(),
        Failover::Command => {
            connect(ValkeyConfig::from_url(&after.url).map_err(|e| e.to_string())?).await?
        }
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match renewer.renew(&after.pool, &after.grant, Floor::NONE).await {
            Renewal::Lost(_) => return Ok(()),
            Renewal::Retry(why) if Instant::now() < deadline => {
                eprintln!("renewal: retry ({why})");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => {
                return Err(format!(
                    "the first holder's renewal on the promoted replica answered {other:?}, \
                     not Lost"
                ));
            }
        }
    }
}

/// With the promotion guard: refused until the pool's span has passed since
/// the change was first seen, the old holder's renewal `Lost`, then granted
/// with a fence above the lost claim's.
async fn the_guard_holds_claims_back(kind: ServerKind, how: Failover) -> Result<(), String> {
    let after = claim_then_fail_over(kind, how, TTL, true).await?;
    guard_holds_back(after, how).await
}

/// [`the_guard_holds_claims_back`] after the failover, whichever topology
/// made it.
async fn guard_holds_back(after: AfterFailover, how: Failover) -> Result<(), String> {
    renewal_is_lost(&after, how).await?;
    let claimer = connect(ValkeyConfig::from_url(&after.url).map_err(|e| e.to_string())?).await?;
    let span = after.pool.restart_span();
    let mut first_refusal: Option<Instant> = None;
    let deadline = Instant::now() + span + Duration::from_secs(60);
    loop {
        let sent = Instant::now();
        let r = claimer.acquire(&after.pool, Floor::NONE).await;
        let answered = Instant::now();
        match r {
            Err(AcquireError::StoreRestarted { resume_in }) => {
                first_refusal.get_or_insert(sent);
                ensure!(
                    resume_in <= span,
                    "the guard asked to wait {resume_in:?}, more than the span {span:?}"
                );
            }
            Err(e) if e.is_retryable() => eprintln!("claim: retry ({e})"),
            Err(e) => return Err(format!("the claim on the promoted replica: {e}")),
            Ok(g) => {
                let Some(first) = first_refusal else {
                    return Err(format!(
                        "slot {} was granted (fence {}) at the first claim on the promoted \
                         replica, {:?} after the lost claim was sent (its lease: {TTL:?}): the \
                         promotion guard did not see the failover",
                        g.slot,
                        g.fence,
                        answered - after.sent
                    ));
                };
                // The server first saw the new ID after `first` and granted
                // before `answered`: the span lies between.
                ensure!(
                    answered - first >= span,
                    "granted {:?} after the first refusal: before the span {span:?}",
                    answered - first
                );
                ensure!(
                    g.fence > after.grant.fence,
                    "the fence went back across the failover: {} after {}",
                    g.fence,
                    after.grant.fence
                );
                return Ok(());
            }
        }
        ensure!(
            answered < deadline,
            "no grant within {:?} of the failover",
            span + Duration::from_secs(60)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Without the guard the promoted replica grants the lost claim's slot to a
/// second claimer while the first lease is still valid: two holders.
async fn without_the_guard_the_slot_is_granted_twice(
    kind: ServerKind,
    how: Failover,
) -> Result<(), String> {
    let after = claim_then_fail_over(kind, how, CONTROL_TTL, false).await?;
    granted_twice(after).await
}

/// [`without_the_guard_the_slot_is_granted_twice`] after the failover,
/// whichever topology made it.
async fn granted_twice(after: AfterFailover) -> Result<(), String> {
    let config = ValkeyConfig::from_url(&after.url)
        .map_err(|e| e.to_string())?
        .durability(DurabilityPolicy::Throwaway);
    let claimer = connect(config).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let g = loop {
        match claimer.acquire(&after.pool, Floor::NONE).await {
            Ok(g) => break g,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(format!("the unguarded claim: {e}")),
        }
    };
    let answered = Instant::now();
    ensure!(
        g.slot == after.grant.slot,
        "a pool of one slot granted slot {}",
        g.slot
    );
    ensure!(
        answered < after.sent + after.pool.ttl(),
        "the failover took {:?}, longer than the lease ({:?}): the control shows nothing; \
         the machine is too slow for this TTL",
        answered - after.sent,
        after.pool.ttl()
    );
    drop(after.topology);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_primary_is_killed_the_promoted_replica_grants_nothing_until_the_span_has_passed()
{
    if let Err(e) = the_guard_holds_claims_back(ServerKind::Valkey8, Failover::Kill).await {
        panic!("{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_sentinel_failover_the_promoted_replica_grants_nothing_until_the_span_has_passed() {
    if let Err(e) = the_guard_holds_claims_back(ServerKind::Valkey8, Failover::Command).await {
        panic!("{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis8_hsetex_path_after_the_primary_is_killed_nothing_is_granted_until_the_span_has_passed()
 {
    if let Err(e) = the_guard_holds_claims_back(ServerKind::Redis8, Failover::Kill).await {
        panic!("{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis8_hsetex_path_control_an_unguarded_claim_takes_the_held_slot() {
    if let Err(e) =
        without_the_guard_the_slot_is_granted_twice(ServerKind::Redis8, Failover::Command).await
    {
        panic!("{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_after_the_primary_is_killed_an_unguarded_claim_takes_the_held_slot() {
    if let Err(e) =
        without_the_guard_the_slot_is_granted_twice(ServerKind::Valkey8, Failover::Kill).await
    {
        panic!("{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_after_sentinel_failover_an_unguarded_claim_takes_the_held_slot() {
    if let Err(e) =
        without_the_guard_the_slot_is_granted_twice(ServerKind::Valkey8, Failover::Command).await
    {
        panic!("{e}");
    }
}

/// A field of the pool's fences hash (`None`: absent).
async fn fences_field(
    s: &ValkeyStrategy,
    pool: &PoolSpec,
    field: &str,
) -> Result<Option<String>, String> {
    let command = CustomCommand::new_static("HGET", ClusterHash::FirstKey, false);
    let args = vec![s.keys(pool.name()).fences, field.to_owned()];
    s.client()
        .custom::<Option<String>, String>(command, args)
        .await
        .map_err(|e| format!("HGET {field}: {e}"))
}

/// The other side of the promotion guard's choice: a durable server that
/// never had replicas changes its replication ID at every restart
/// (measured on Valkey 8.1), and the promotion guard does not count that
/// as a failover. (The restart guard holds the claim after the restart
/// back one span, as on every server, and the test waits it out.) The
/// recorded ID moves all the same.
async fn a_durable_restart_is_not_counted_as_a_failover() -> Result<(), String> {
    let mut server =
        provide_with(ServerKind::Valkey8, Settings::Durable).map_err(|e| e.to_string())?;
    let url = format!("{}?prefix=lhfailover&op_timeout=5s", server.store_url());
    let pool = fresh_pool(2, TTL)?;
    let s = connect(ValkeyConfig::from_url(&url).map_err(|e| e.to_string())?).await?;
    s.declare_new_pool(&pool)
        .await
        .map_err(|e| format!("declare the pool new: {e}"))?;
    let first = acquire_past_the_restart_guard(&s, &pool, Floor::NONE)
        .await
        .map_err(|e| format!("the first claim: {e}"))?;
    let before = fences_field(&s, &pool, "replid").await?;
    drop(s);
    tokio::task::block_in_place(|| server.restart())?;
    let s = connect(ValkeyConfig::from_url(&url).map_err(|e| e.to_string())?).await?;
    let second = acquire_past_the_restart_guard(&s, &pool, Floor::NONE)
        .await
        .map_err(|e| format!("the claim after the restart: {e}"))?;
    let after = fences_field(&s, &pool, "replid").await?;
    let seen = fences_field(&s, &pool, "replid_seen").await?;
    ensure!(
        before.is_some() && after.is_some() && before != after,
        "the recorded replication ID did not change across the restart: {before:?} then {after:?}"
    );
    ensure!(
        seen.as_deref() == Some("0"),
        "the change was counted as a failover: replid_seen {seen:?}"
    );
    ensure!(
        second.slot != first.slot,
        "the restart lost the first claim"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_server_without_replicas_is_not_held_back_as_failed_over_after_its_restart() {
    if let Err(e) = a_durable_restart_is_not_counted_as_a_failover().await {
        panic!("{e}");
    }
}

/// What the promotion guard does not cover, and what does: after `SENTINEL
/// FAILOVER` the old primary keeps running, and a holder whose connection
/// still reaches it renews there. Without `min-replicas-to-write` the old
/// primary takes those renewals for seconds (until a Sentinel turns it into
/// a replica, about 10 s here), while the promoted replica grants the slot a
/// span after it first saw the change: two holders (a split brain). With
/// `min-replicas-to-write 1` the old primary lost its only replica at the
/// promotion and refuses every write (`NOREPLICAS`), so the renewal is not
/// confirmed and the holder stops at its deadline.
///
/// Renewals are sent on the holder's own connection for 3 s after the
/// promotion was seen; `renewed_late` says whether one sent 1 s or more
/// after it was confirmed (the server's `min-replicas-max-lag` is 1 s).
async fn old_primary_renews_after_failover(min_replicas: bool) -> Result<bool, String> {
    let mut topology =
        tokio::task::block_in_place(|| SentinelTopology::start(ServerKind::Valkey8))?;
    if min_replicas {
        for addr in [topology.primary_addr(), topology.replica_addr()] {
            for (name, value) in [
                ("min-replicas-max-lag", "1"),
                ("min-replicas-to-write", "1"),
            ] {
                let r = topology.command(addr, &["CONFIG", "SET", name, value])?;
                ensure!(r == Reply::Status("OK".into()), "CONFIG SET {name}: {r:?}");
            }
        }
    }
    let pool = fresh_pool(1, TTL)?;
    let url = store_url(&topology);
    let holder = connect(ValkeyConfig::from_url(&url).map_err(|e| e.to_string())?).await?;
    holder
        .declare_new_pool(&pool)
        .await
        .map_err(|e| format!("declare the pool new: {e}"))?;
    let grant = acquire_past_the_restart_guard(&holder, &pool, Floor::NONE)
        .await
        .map_err(|e| format!("the claim before the failover: {e}"))?;
    tokio::task::block_in_place(|| -> Result<(), String> {
        topology.failover()?;
        topology.wait_promoted(PROMOTION_WAIT).map(drop)
    })?;
    let promoted = Instant::now();
    let mut renewed_late = false;
    while promoted.elapsed() < Duration::from_secs(3) {
        let sent = Instant::now();
        let r = holder.renew(&pool, &grant, Floor::NONE).await;
        eprintln!("{:?} after the promotion: {r:?}", sent - promoted);
        if matches!(r, Renewal::Renewed { .. }) && sent - promoted >= Duration::from_secs(1) {
            renewed_late = true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(renewed_late)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_min_replicas_to_write_the_old_primary_refuses_renewals_after_sentinel_failover() {
    match old_primary_renews_after_failover(true).await {
        Ok(false) => {}
        Ok(true) => panic!(
            "the old primary confirmed a renewal 1 s or more after the promotion, with \
             min-replicas-to-write 1 and min-replicas-max-lag 1"
        ),
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_without_min_replicas_the_old_primary_renews_after_sentinel_failover() {
    match old_primary_renews_after_failover(false).await {
        Ok(true) => {}
        Ok(false) => panic!(
            "no renewal on the old primary was confirmed 1 s or more after the promotion: the \
             split brain this control shows did not happen (did the Sentinels turn the old \
             primary into a replica within a second?)"
        ),
        Err(e) => panic!("{e}"),
    }
}

/// The Cluster's URL with this test's key prefix and a generous operation
/// timeout.
fn cluster_store_url(topology: &ClusterTopology) -> String {
    format!("{}&prefix=lhfailover&op_timeout=5s", topology.cluster_url())
}

/// Readies `pool` on a Cluster `holder` just started: the pool declared
/// new, one claim made and released once the fresh servers' restart guard
/// lets it (so the replica holds the pool's records); the pool's fences
/// key, its primary and that primary's replica.
async fn past_the_guard_in_cluster(
    topology: &ClusterTopology,
    holder: &ValkeyStrategy,
    pool: &PoolSpec,
) -> Result<(String, SocketAddr, SocketAddr), String> {
    holder
        .declare_new_pool(pool)
        .await
        .map_err(|e| format!("declare the pool new: {e}"))?;
    let earlier = acquire_past_the_restart_guard(holder, pool, Floor::NONE)
        .await
        .map_err(|e| format!("the earlier claim: {e}"))?;
    holder.release(pool, &earlier, Floor::NONE).await;
    let fences = holder.keys(pool.name()).fences;
    let primary = tokio::task::block_in_place(|| topology.primary_of(&fences))?;
    let replica = tokio::task::block_in_place(|| topology.replica_of(primary))?;
    Ok((fences, primary, replica))
}

/// [`claim_then_fail_over`] on a Valkey 8.1 Cluster of three primaries with
/// one replica each: the failover is made on the primary of the pool's hash
/// slot, killed (the cluster promotes its replica after the node timeout)
/// or replaced by `CLUSTER FAILOVER FORCE` on the replica (then the test
/// also waits until the old primary turned itself into a replica, so that
/// every connection reaches the new one through `MOVED`).
async fn claim_then_fail_over_in_cluster(
    how: Failover,
    ttl: Duration,
    guarded: bool,
) -> Result<AfterFailover, String> {
    let mut topology = tokio::task::block_in_place(|| ClusterTopology::start(ServerKind::Valkey8))?;
    let pool = fresh_pool(1, ttl)?;
    let url = cluster_store_url(&topology);
    let config = ValkeyConfig::from_url(&url)
        .map_err(|e| e.to_string())?
        .durability(if guarded {
            DurabilityPolicy::Durable
        } else {
            DurabilityPolicy::Throwaway
        });
    let holder = connect(config).await?;
    ensure!(
        holder.path() == ActivePath::Scripts,
        "Valkey 8 took the {} path",
        holder.path()
    );
    let (fences, primary, replica) = past_the_guard_in_cluster(&topology, &holder, &pool).await?;
    // The replica has the earlier claim (and the fences hash with the
    // primary's replication ID) once its replication offset reached the
    // primary's, read after the claim (a replica answers MOVED to reads
    // of its primary's slots on a plain connection).
    let offset = |addr: SocketAddr| -> Result<u64, String> {
        let info = topology.info_replication(addr)?;
        info.lines()
            .find_map(|l| l.strip_prefix("master_repl_offset:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| format!("no master_repl_offset from {addr}: {info}"))
    };
    let written = offset(primary)?;
    let deadline = Instant::now() + PROMOTION_WAIT;
    while offset(replica)? < written {
        ensure!(
            Instant::now() < deadline,
            "the replica {replica} did not reach the primary's offset {written}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::task::block_in_place(|| topology.cut_replication(primary)).map(drop)?;
    let sent = Instant::now();
    let grant = holder
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| format!("the claim before the failover: {e}"))?;
    let promoted = tokio::task::block_in_place(|| -> Result<SocketAddr, String> {
        match how {
            Failover::Kill => topology.kill_primary(primary)?,
            Failover::Command => topology.failover(replica)?,
        }
        let new = topology.wait_promoted(&fences, primary, PROMOTION_WAIT)?;
        if matches!(how, Failover::Command) {
            let deadline = Instant::now() + PROMOTION_WAIT;
            while !topology
                .info_replication(primary)
                .is_ok_and(|i| i.contains("role:slave"))
            {
                if Instant::now() > deadline {
                    return Err(format!("the old primary {primary} stayed a primary"));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(new)
    })?;
    ensure!(
        promoted == replica,
        "the cluster promoted {promoted}, not the cut replica {replica}"
    );
    let keys = holder.keys(pool.name());
    let slot_key = keys.slot_key(grant.slot);
    let kept = topology.command(promoted, &["GET", slot_key.as_str()])?;
    ensure!(
        kept == Reply::Bulk(None),
        "the promoted replica has the claim ({slot_key}: {kept:?}): the test needs one that \
         missed it"
    );
    Ok(AfterFailover {
        topology: Topology::Cluster(topology),
        pool,
        url,
        holder,
        grant,
        sent,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_after_the_primary_is_killed_the_promoted_replica_grants_nothing_until_the_span_has_passed()
 {
    let r = match claim_then_fail_over_in_cluster(Failover::Kill, TTL, true).await {
        Ok(after) => guard_holds_back(after, Failover::Kill).await,
        Err(e) => Err(e),
    };
    if let Err(e) = r {
        panic!("{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_after_cluster_failover_the_promoted_replica_grants_nothing_until_the_span_has_passed()
 {
    let r = match claim_then_fail_over_in_cluster(Failover::Command, TTL, true).await {
        Ok(after) => guard_holds_back(after, Failover::Command).await,
        Err(e) => Err(e),
    };
    if let Err(e) = r {
        panic!("{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_control_after_the_primary_is_killed_an_unguarded_claim_takes_the_held_slot() {
    let r = match claim_then_fail_over_in_cluster(Failover::Kill, CONTROL_TTL, false).await {
        Ok(after) => granted_twice(after).await,
        Err(e) => Err(e),
    };
    if let Err(e) = r {
        panic!("{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_control_after_cluster_failover_an_unguarded_claim_takes_the_held_slot() {
    let r = match claim_then_fail_over_in_cluster(Failover::Command, CONTROL_TTL, false).await {
        Ok(after) => granted_twice(after).await,
        Err(e) => Err(e),
    };
    if let Err(e) = r {
        panic!("{e}");
    }
}

/// A Cluster replica that would forget what it acknowledged (`appendonly
/// no`, set on the replica alone after connect read every primary) is
/// promoted by `CLUSTER FAILOVER FORCE`. The claims read the settings
/// again at most once per quarter TTL, and every primary the client then
/// knows, the promoted replica included: they are refused, naming the
/// setting, and none is granted on the promoted replica before that (the
/// promotion guard holds claims back for a span, longer than a quarter
/// TTL). Before the watch, the promoted replica was never read, and
/// claims were granted on it once the guard opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_promoted_replica_that_can_forget_is_read_and_refused_before_any_claim_on_it() {
    if let Err(e) = promoted_replica_that_can_forget().await {
        panic!("{e}");
    }
}

async fn promoted_replica_that_can_forget() -> Result<(), String> {
    let topology = tokio::task::block_in_place(|| ClusterTopology::start(ServerKind::Valkey8))?;
    let pool = fresh_pool(2, TTL)?;
    let url = cluster_store_url(&topology);
    let holder = connect(ValkeyConfig::from_url(&url).map_err(|e| e.to_string())?).await?;
    let (fences, primary, replica) = past_the_guard_in_cluster(&topology, &holder, &pool).await?;
    topology.command(replica, &["CONFIG", "SET", "appendonly", "no"])?;
    tokio::task::block_in_place(|| -> Result<(), String> {
        topology.failover(replica)?;
        let new = topology.wait_promoted(&fences, primary, PROMOTION_WAIT)?;
        ensure!(new == replica, "the cluster promoted {new}, not {replica}");
        Ok(())
    })?;
    let deadline = Instant::now() + PROMOTION_WAIT;
    loop {
        match holder.acquire(&pool, Floor::NONE).await {
            Err(AcquireError::Misconfigured { what, fix }) => {
                let text = format!("{what}: {fix}");
                ensure!(text.contains("appendonly no"), "{text}");
                return Ok(());
            }
            Ok(g) => {
                return Err(format!(
                    "a claim was granted on the promoted replica, which can forget it: {g:?}"
                ));
            }
            Err(e) if e.is_retryable() && Instant::now() < deadline => {}
            Err(e) => return Err(format!("a claim after the promotion answered {e:?}")),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
