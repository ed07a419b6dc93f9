//! A three-member etcd cluster on loopback ports (`leasehold-conformance`'s
//! `EtcdCluster`), started by the test, with members killed by PID.

use leasehold_core::Floor;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use leasehold_conformance::etcd_cluster::EtcdCluster;
use leasehold_conformance::proxy::{Fault, FaultProxy};
use leasehold_conformance::servers::ServerKind;
use leasehold_conformance::{Target, ensure, fresh_pool, fresh_pool_name, trials};
use leasehold_core::{
    Grant, LeaseConfig, LeaseManager, LossCause, LossEvent, PoolSpec, Release, Renewal, Strategy,
};
use leasehold_etcd::{EtcdConfig, EtcdStrategy};

use super::{EtcdBackend, declare_new};

/// Registers the tests that start a three-member cluster of the target's
/// etcd version on `target`.
pub(crate) fn register(target: Target) -> Target {
    trials!(target;
        cluster_one_member_down_keeps_leases_renewing,
        cluster_requests_cut_mid_flight_are_sent_again_elsewhere,
        cluster_two_members_down_retry_and_gate_closes_at_deadline,
    )
}

/// Waits until every running member of `cluster` reports the same leader;
/// returns the leader's index.
pub(crate) async fn leader(cluster: &EtcdCluster, limit: Duration) -> Result<usize, String> {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < limit {
        let mut ids = Vec::new();
        let mut leaders = Vec::new();
        let mut live = 0;
        for (i, url) in cluster.endpoints().into_iter().enumerate() {
            if !cluster.is_running(i) {
                continue;
            }
            live += 1;
            let probe = async {
                let mut c = etcd_client::Client::connect([url], None).await?;
                c.status().await
            };
            match tokio::time::timeout(Duration::from_secs(1), probe).await {
                Ok(Ok(status)) => {
                    let member = status.header().map(|h| h.member_id()).unwrap_or(0);
                    ids.push((i, member));
                    leaders.push(status.leader());
                }
                Ok(Err(e)) => last = format!("member {i}: {e}"),
                Err(_) => last = format!("member {i}: status timed out"),
            }
        }
        if ids.len() == live
            && leaders.iter().all(|l| *l != 0 && *l == leaders[0])
            && let Some((i, _)) = ids.iter().find(|(_, id)| *id == leaders[0])
        {
            return Ok(*i);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logs: Vec<String> = (0..cluster.len())
        .map(|i| format!("m{i}: {}", cluster.log_tail(i, 3)))
        .collect();
    Err(format!(
        "no agreed leader within {limit:?} ({last}); logs:\n{}",
        logs.join("\n")
    ))
}

/// A three-member cluster of `kind`'s binary, with an agreed leader.
async fn start_cluster(kind: ServerKind) -> Result<EtcdCluster, String> {
    let cluster = EtcdCluster::start_kind(kind, 3)?;
    leader(&cluster, Duration::from_secs(30)).await?;
    Ok(cluster)
}

/// `n` operations sent at once, half renewals of `grant`, half acquisitions
/// each followed by its release; each must succeed. `when` names the moment
/// in the failure messages.
fn spawn_burst(
    n: usize,
    leases: &EtcdStrategy,
    pool: &PoolSpec,
    grant: &Grant,
    when: &'static str,
) -> tokio::task::JoinSet<Result<(), String>> {
    let mut burst = tokio::task::JoinSet::new();
    for i in 0..n {
        let (leases, pool, grant) = (leases.clone(), pool.clone(), grant.clone());
        burst.spawn(async move {
            if i % 2 == 0 {
                let r = leases.renew(&pool, &grant, Floor::NONE).await;
                ensure!(
                    matches!(r, Renewal::Renewed { .. }),
                    "renewal {when}: {r:?}"
                );
            } else {
                let g = leases
                    .acquire(&pool, Floor::NONE)
                    .await
                    .map_err(|e| format!("acquisition {when}: {e}"))?;
                let r = leases.release(&pool, &g, Floor::NONE).await;
                ensure!(r == Release::Released, "release {when}: {r:?}");
            }
            Ok(())
        });
    }
    burst
}

/// A strategy over every member with operations bounded by `op_timeout`.
async fn connect(cluster: &EtcdCluster, op_timeout: Duration) -> Result<EtcdStrategy, String> {
    EtcdStrategy::connect(EtcdConfig::new(cluster.endpoints()).op_timeout(op_timeout))
        .await
        .map_err(|e| e.to_string())
}

/// With one member killed the cluster keeps its quorum: every renewal answers
/// `Renewed`, new acquisitions work, and a manager's gate never closes.
async fn cluster_one_member_down_keeps_leases_renewing(b: Arc<EtcdBackend>) -> Result<(), String> {
    let mut cluster = start_cluster(b.kind).await?;
    // The product's default operation timeout: a loaded machine may hold an
    // answer of the live members past 1 s; only a Retry caused by the dead
    // member is the defect this test looks for.
    let leases = connect(&cluster, EtcdStrategy::DEFAULT_OP_TIMEOUT).await?;
    let pool = fresh_pool(8, Duration::from_secs(4))?;
    declare_new(&leases, &pool).await?;
    let grant = leases
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    let config = LeaseConfig::builder(pool.name().as_str())
        .pool_size(8)
        .ttl(Duration::from_secs(4))
        .renew_interval(Duration::from_secs(1))
        .build()
        .map_err(|e| e.to_string())?;
    let manager = LeaseManager::start(leases.clone(), config)
        .await
        .map_err(|e| e.to_string())?;
    let gate = manager.gate();

    let leader = leader(&cluster, Duration::from_secs(10)).await?;
    let victim = (leader + 1) % 3;
    cluster.kill(victim)?;

    // Right after the kill, whatever is sent on a connection to the dead
    // member breaks under it: renewals, acquisitions and releases sent at
    // once must still succeed, on the live members.
    let mut burst = spawn_burst(
        8,
        &leases,
        &pool,
        &grant,
        "right after killing one follower",
    );
    while let Some(done) = burst.join_next().await {
        done.map_err(|e| e.to_string())??;
    }

    // Renew directly for two TTLs: every answer is Renewed.
    let start = Instant::now();
    let mut renewed = 0;
    // Two TTLs, and at least ten renewals however slow the machine is.
    while start.elapsed() < Duration::from_secs(8) || renewed < 10 {
        let r = leases.renew(&pool, &grant, Floor::NONE).await;
        ensure!(
            matches!(r, Renewal::Renewed { .. }),
            "renewal {:?} after killing one follower: {r:?}",
            start.elapsed()
        );
        renewed += 1;
        ensure!(
            gate.check_now().is_ok(),
            "manager gate closed with quorum intact: {:?}",
            manager.state()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    ensure!(renewed >= 10, "only {renewed} renewals");
    let more = leases
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        more.slot != grant.slot,
        "slot {} handed out twice",
        more.slot
    );
    manager.shutdown().await;
    Ok(())
}

/// A member whose connections break while requests are on them (what a
/// killed member does to the requests in flight), then refuses new ones:
/// renewals, acquisitions and releases caught on it are sent again to the
/// live members and succeed; none answers `Retry` for it.
///
/// The member is reached through the fault proxy: a 300 ms delay holds the
/// requests routed to it in flight, then `Drop` cuts them and the proxy is
/// dropped (connections refused from then on).
async fn cluster_requests_cut_mid_flight_are_sent_again_elsewhere(
    b: Arc<EtcdBackend>,
) -> Result<(), String> {
    let cluster = start_cluster(b.kind).await?;
    let leader = leader(&cluster, Duration::from_secs(10)).await?;
    let victim = (leader + 1) % 3;
    let mut members = cluster.addrs();
    let proxy = FaultProxy::start(members[victim])
        .await
        .map_err(|e| e.to_string())?;
    members[victim] = proxy.addr();
    let hosts: Vec<String> = members.iter().map(ToString::to_string).collect();
    let leases = EtcdStrategy::connect(
        EtcdConfig::from_url(&format!("etcd://{}", hosts.join(",")))
            .map_err(|e| e.to_string())?
            .op_timeout(EtcdStrategy::DEFAULT_OP_TIMEOUT),
    )
    .await
    .map_err(|e| e.to_string())?;
    let pool = fresh_pool(16, Duration::from_secs(10))?;
    declare_new(&leases, &pool).await?;
    let grant = leases
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    // Connections to every member, the proxied one included.
    for _ in 0..9 {
        let r = leases.renew(&pool, &grant, Floor::NONE).await;
        ensure!(
            matches!(r, Renewal::Renewed { .. }),
            "warm-up renewal: {r:?}"
        );
    }

    proxy.set(Fault::Delay(Duration::from_millis(300)));
    let mut burst = spawn_burst(12, &leases, &pool, &grant, "cut mid-flight");
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.set(Fault::Drop);
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(proxy);
    while let Some(done) = burst.join_next().await {
        done.map_err(|e| e.to_string())??;
    }
    // Nothing leaked: the grant and nothing else holds a slot. Asked of the
    // leader directly (this client's balancer still lists the cut member).
    // Slot keys only (decimal, so before `:`): the floor keys stay, by design.
    let mut direct = etcd_client::Client::connect([cluster.endpoints()[leader].clone()], None)
        .await
        .map_err(|e| e.to_string())?;
    let held = direct
        .get(
            format!("leasehold/{}/", pool.name()),
            Some(
                etcd_client::GetOptions::new()
                    .with_range(format!("leasehold/{}/:", pool.name()))
                    .with_keys_only(),
            ),
        )
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        held.kvs().len() == 1,
        "{} slot keys after every acquisition was released (only the first grant should hold one)",
        held.kvs().len()
    );
    Ok(())
}

/// With two of three members killed there is no quorum: renewals answer
/// `Retry` (never `Lost`, never `Renewed`) within the operation timeout, and
/// a manager holder's gate closes at its local deadline, as a deadline loss.
async fn cluster_two_members_down_retry_and_gate_closes_at_deadline(
    b: Arc<EtcdBackend>,
) -> Result<(), String> {
    let mut cluster = start_cluster(b.kind).await?;
    let leases = connect(&cluster, Duration::from_secs(1)).await?;
    let ttl = Duration::from_secs(4);
    let losses: Arc<Mutex<Vec<LossEvent>>> = Arc::default();
    let seen = losses.clone();
    let config = LeaseConfig::builder(fresh_pool_name().as_str())
        .pool_size(8)
        .ttl(ttl)
        .renew_interval(Duration::from_secs(1))
        .safety_margin(Duration::from_millis(500))
        .on_lost(move |e| {
            seen.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(e.clone())
        })
        .build()
        .map_err(|e| e.to_string())?;
    let pool = config.pool().clone();
    declare_new(&leases, &pool).await?;
    let manager = LeaseManager::start(leases.clone(), config)
        .await
        .map_err(|e| e.to_string())?;
    let gate = manager.gate();
    let grant = leases
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;

    let leader = leader(&cluster, Duration::from_secs(10)).await?;
    // Keep the leader alive: the harder case, where it still believes it
    // leads for a moment and could answer a renewal without a quorum.
    for i in (0..3).filter(|i| *i != leader) {
        cluster.kill(i)?;
    }
    let killed_at = Instant::now();
    let killed_mono = leasehold_core::MonoTime::now();
    // The deadline the kill found: only a renewal confirmed without a quorum
    // could move it later.
    let at_kill = gate.view();
    let mut last_deadline = at_kill.is_open_at(killed_mono).then_some(at_kill.deadline);

    // Direct renewals: Retry, bounded by the 1 s op timeout.
    // "Bounded" is judged on the runtime's own timer, which polls the call
    // first: a starved runtime sees the call's own 1 s timeout first.
    for _ in 0..3 {
        let r = tokio::time::timeout(
            Duration::from_secs(3),
            leases.renew(&pool, &grant, Floor::NONE),
        )
        .await
        .map_err(|_| "renewal without quorum still pending after 3 op timeouts".to_owned())?;
        ensure!(
            matches!(r, Renewal::Retry(_)),
            "renewal without quorum answered {r:?}"
        );
    }

    // The manager's gate closes by itself at its local deadline.
    let closed_at = loop {
        let now = leasehold_core::MonoTime::now();
        let v = gate.view();
        if v.is_open_at(now) {
            last_deadline = Some(v.deadline);
        } else {
            break now;
        }
        ensure!(
            killed_at.elapsed() < ttl * 3,
            "gate still open {:?} after losing quorum",
            killed_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let deadline = last_deadline.ok_or_else(|| {
        format!(
            "{}the gate had closed before the members were killed: the machine stalled past \
             the lease's deadline, so the run shows nothing",
            leasehold_conformance::suite::STARVED
        )
    })?;
    // The gate refuses from its deadline on by construction (it compares
    // each reading with it), so what is checked is the deadline itself: no
    // renewal confirmed after the quorum went can have moved it past one
    // TTL after the kill. (When this loop saw it closed says only how late
    // a loaded machine ran the loop.)
    ensure!(
        closed_at >= deadline,
        "gate seen closed before its deadline"
    );
    ensure!(
        deadline <= killed_mono + ttl,
        "the deadline is {:?} after the kill, beyond the ttl {ttl:?}: a renewal was confirmed without a quorum",
        deadline.saturating_since(killed_mono)
    );
    // The manager reports a deadline loss, not a rejection.
    let reported = super::until(Duration::from_secs(10), || {
        !losses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    })
    .await;
    ensure!(
        reported.is_some(),
        "no loss reported: {:?}",
        manager.state()
    );
    let event = losses.lock().unwrap_or_else(PoisonError::into_inner)[0].clone();
    ensure!(
        matches!(event.cause, LossCause::DeadlinePassed { .. }),
        "loss cause {:?}",
        event.cause
    );
    ensure!(gate.check_now().is_err(), "gate reopened without quorum");
    drop(manager);
    Ok(())
}
