//! A three-member etcd cluster on loopback ports, started by the test, with
//! members killed by PID.

use leasehold_core::Floor;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use leasehold_conformance::ExtraTest;
use leasehold_conformance::servers::{self, ServerKind};
use leasehold_conformance::suite::fresh_pool_name;
use leasehold_core::{LeaseConfig, LeaseManager, LossCause, LossEvent, Renewal, Strategy};
use leasehold_etcd::{EtcdConfig, EtcdStrategy};

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

pub(crate) fn all() -> Vec<(&'static str, ExtraTest)> {
    vec![
        (
            "cluster_one_member_down_keeps_leases_renewing",
            Arc::new(|_| Box::pin(one_member_down_keeps_leases_renewing())),
        ),
        (
            "cluster_two_members_down_retry_and_gate_closes_at_deadline",
            Arc::new(|_| Box::pin(two_members_down_retry_and_gate_closes_at_deadline())),
        ),
    ]
}

struct Member {
    client_port: u16,
    child: Option<Child>,
}

/// etcd members on loopback, started by the test; killed and cleaned up on
/// drop.
pub(crate) struct Cluster {
    members: Vec<Member>,
    dir: PathBuf,
}

impl Cluster {
    pub(crate) fn start(bin: &Path, members: usize) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!(
            "leasehold-etcd-cluster-{}-{}",
            std::process::id(),
            servers::free_port()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let ports: Vec<(u16, u16)> = (0..members)
            .map(|_| (servers::free_port(), servers::free_port()))
            .collect();
        let initial = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let token = format!("lh-{}-{}", std::process::id(), servers::free_port());
        let mut cluster = Self {
            members: Vec::new(),
            dir: dir.clone(),
        };
        for (i, (client, peer)) in ports.iter().enumerate() {
            let log =
                std::fs::File::create(dir.join(format!("m{i}.log"))).map_err(|e| e.to_string())?;
            let child = Command::new(bin)
                .arg(format!("--name=m{i}"))
                .arg(format!(
                    "--data-dir={}",
                    dir.join(format!("m{i}")).display()
                ))
                .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
                .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
                .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
                .arg(format!(
                    "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
                ))
                .arg(format!("--initial-cluster={initial}"))
                .arg("--initial-cluster-state=new")
                .arg(format!("--initial-cluster-token={token}"))
                .stdout(Stdio::null())
                .stderr(Stdio::from(log))
                .spawn()
                .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
            cluster.members.push(Member {
                client_port: *client,
                child: Some(child),
            });
        }
        Ok(cluster)
    }

    pub(crate) fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// Waits until every live member reports the same leader; returns the
    /// leader's index.
    pub(crate) async fn leader(&self, limit: Duration) -> Result<usize, String> {
        let start = Instant::now();
        let mut last = String::new();
        while start.elapsed() < limit {
            let mut ids = Vec::new();
            let mut leaders = Vec::new();
            for (i, m) in self.members.iter().enumerate() {
                if m.child.is_none() {
                    continue;
                }
                let url = format!("http://127.0.0.1:{}", m.client_port);
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
            let live = self.members.iter().filter(|m| m.child.is_some()).count();
            if ids.len() == live
                && leaders.iter().all(|l| *l != 0 && *l == leaders[0])
                && let Some((i, _)) = ids.iter().find(|(_, id)| *id == leaders[0])
            {
                return Ok(*i);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let logs: Vec<String> = (0..self.members.len())
            .map(|i| {
                let text =
                    std::fs::read_to_string(self.dir.join(format!("m{i}.log"))).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                format!(
                    "m{i}: {}",
                    lines[lines.len().saturating_sub(3)..].join(" | ")
                )
            })
            .collect();
        Err(format!(
            "no agreed leader within {limit:?} ({last}); logs:\n{}",
            logs.join("\n")
        ))
    }

    fn kill(&mut self, i: usize) -> Result<(), String> {
        let mut child = self.members[i].child.take().ok_or("already killed")?;
        // Child::kill sends SIGKILL to this member's PID.
        child.kill().map_err(|e| e.to_string())?;
        child.wait().map_err(|e| e.to_string())?;
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut c) = m.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn start_cluster() -> Result<Cluster, String> {
    let bin = servers::find_binary(ServerKind::Etcd35).ok_or_else(|| {
        format!(
            "no etcd 3.5 binary for the cluster test; {}",
            ServerKind::Etcd35.install_hint()
        )
    })?;
    let cluster = Cluster::start(&bin, 3)?;
    cluster.leader(Duration::from_secs(30)).await?;
    Ok(cluster)
}

async fn connect(cluster: &Cluster) -> Result<EtcdStrategy, String> {
    EtcdStrategy::connect(EtcdConfig::new(cluster.endpoints()).op_timeout(Duration::from_secs(1)))
        .await
        .map_err(|e| e.to_string())
}

/// With one member killed the cluster keeps its quorum: every renewal answers
/// `Renewed`, new acquisitions work, and a manager's gate never closes.
async fn one_member_down_keeps_leases_renewing() -> Result<(), String> {
    let mut cluster = start_cluster().await?;
    let leases = connect(&cluster).await?;
    let pool = leasehold_core::PoolSpec::new(fresh_pool_name(), 8, Duration::from_secs(4))
        .map_err(|e| e.to_string())?;
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

    let leader = cluster.leader(Duration::from_secs(10)).await?;
    let victim = (leader + 1) % 3;
    cluster.kill(victim)?;

    // Renew directly for two TTLs: every answer is Renewed.
    let start = Instant::now();
    let mut renewed = 0;
    while start.elapsed() < Duration::from_secs(8) {
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

/// With two of three members killed there is no quorum: renewals answer
/// `Retry` (never `Lost`, never `Renewed`) within the operation timeout, and
/// a manager holder's gate closes at its local deadline, as a deadline loss.
async fn two_members_down_retry_and_gate_closes_at_deadline() -> Result<(), String> {
    let mut cluster = start_cluster().await?;
    let leases = connect(&cluster).await?;
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
    let manager = LeaseManager::start(leases.clone(), config)
        .await
        .map_err(|e| e.to_string())?;
    let gate = manager.gate();
    let grant = leases
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;

    let leader = cluster.leader(Duration::from_secs(10)).await?;
    // Keep the leader alive: the harder case, where it still believes it
    // leads for a moment and could answer a renewal without a quorum.
    for i in (0..3).filter(|i| *i != leader) {
        cluster.kill(i)?;
    }
    let killed_at = Instant::now();

    // Direct renewals: Retry, bounded by the 1 s op timeout.
    for _ in 0..3 {
        let start = Instant::now();
        let r = leases.renew(&pool, &grant, Floor::NONE).await;
        ensure!(
            matches!(r, Renewal::Retry(_)),
            "renewal without quorum answered {r:?}"
        );
        ensure!(
            start.elapsed() < Duration::from_secs(3),
            "renewal took {:?}",
            start.elapsed()
        );
    }

    // The manager's gate closes by itself at its local deadline.
    let mut last_deadline = None;
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
    let deadline = last_deadline.ok_or("gate was closed before the members were killed")?;
    let late = closed_at.saturating_since(deadline);
    ensure!(
        late < Duration::from_millis(100),
        "gate closed {late:?} after its local deadline"
    );
    ensure!(
        killed_at.elapsed() <= ttl + Duration::from_millis(500),
        "gate closed {:?} after the kill, ttl {ttl:?}",
        killed_at.elapsed()
    );
    // The manager reports a deadline loss, not a rejection.
    let reported = super::until(Duration::from_secs(3), || {
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
