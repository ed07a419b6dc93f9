//! The store a run works on: provided (a file, a server, a cluster or the
//! fake API server), and what the runner does to it: freeze, restart, and
//! the URL each worker reaches it through (a backend crash: `crash.rs`).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use leasehold_conformance::etcd_cluster::EtcdCluster;
use leasehold_conformance::programs;
use leasehold_conformance::servers::{self, Family, ServerKind, Settings};
use leasehold_conformance::topology::cluster::ClusterTopology;
use leasehold_conformance::topology::mariadb::MariaPair;
use leasehold_conformance::topology::postgres::{PgPair, Replication};
use leasehold_conformance::topology::sentinel::SentinelTopology;
use leasehold_conformance::topology::{Failover, FailoverError};

use super::args::Topology;
use super::choice::{Choice, choice, kind_of};
use leasehold_k8s_fake::{FakeApiServer, Fault as FakeFault, Verb as FakeVerb};

/// The store of a run: a URL, and what this process started to serve it.
pub(crate) struct Store {
    pub(crate) url: String,
    pub(crate) describe: String,
    pub(crate) serving: Serving,
    /// A PostgreSQL server this process started: one of its backends can be
    /// SIGKILLed (MariaDB and Valkey/Redis are one process, where a crash
    /// is a restart).
    pub(crate) pg_processes: bool,
}

/// What serves a run's store.
pub(crate) enum Serving {
    /// A file (SQLite): nothing to freeze, cut or restart.
    File,
    /// One server, started by this process or named by a variable.
    Server(servers::Server),
    /// A three-member etcd cluster started by this process: members are
    /// killed and started again (`member` faults).
    Cluster(EtcdCluster),
    /// The FAKE Kubernetes API server, in this process: a freeze delays
    /// every request instead of stopping a process.
    Fake(FakeApiServer),
    /// A PostgreSQL primary with a streaming standby, reached through an
    /// address that follows the primary (run on a runtime of its own):
    /// `failover` faults.
    /// A MariaDB primary with a GTID replica, reached through an address that
    /// follows the primary: `failover` faults.
    MariaPair {
        pair: MariaPair,
        /// Drives the address; dropped after the pair.
        _address_rt: tokio::runtime::Runtime,
    },
    /// A Valkey/Redis primary with a replica and three Sentinels, reached
    /// through the Sentinels: `failover` faults.
    Sentinel(SentinelTopology),
    /// A Valkey/Redis Cluster of three primaries with a replica each,
    /// reached through any node (clients follow `MOVED`): `failover` faults
    /// on the primary of the run's pool slot.
    ValkeyCluster(ClusterTopology),
    Pair {
        pair: PgPair,
        /// Drives the address; dropped after the pair.
        _address_rt: tokio::runtime::Runtime,
    },
}

impl Store {
    /// The server's process, to freeze it.
    pub(crate) fn pid(&self) -> Option<u32> {
        match &self.serving {
            Serving::Server(s) => s.pid(),
            _ => None,
        }
    }

    /// Whether the store can be frozen.
    pub(crate) fn can_freeze(&self) -> bool {
        matches!(self.serving, Serving::Fake(_)) || self.pid().is_some()
    }

    /// Freezes the store for `pause` (the main loop thaws it).
    pub(crate) fn freeze(&self, pause: Duration) {
        match &self.serving {
            Serving::Fake(fake) => {
                for verb in FAKE_VERBS {
                    fake.faults().set(verb, FakeFault::Delay(pause));
                }
            }
            _ => {
                if let Some(pid) = self.pid() {
                    signal(pid, "STOP");
                }
            }
        }
    }

    pub(crate) fn thaw(&self) {
        match &self.serving {
            Serving::Fake(fake) => fake.faults().clear(),
            _ => {
                if let Some(pid) = self.pid() {
                    signal(pid, "CONT");
                }
            }
        }
    }

    /// Whether the store is a replicated topology that can fail over.
    pub(crate) fn can_fail_over(&self) -> bool {
        matches!(
            self.serving,
            Serving::Pair { .. }
                | Serving::MariaPair { .. }
                | Serving::Sentinel(_)
                | Serving::ValkeyCluster(_)
        )
    }

    /// Fails the store over to its standby, which stops receiving `lag`
    /// before the primary is killed. In a Cluster, the primary of `pool`'s
    /// slot (the pool's keys share the hash tag `{campaign:<pool>}`). A
    /// Sentinel or Cluster topology whose HA made no promotion answers
    /// [`FailoverError::NotPromoted`], put back as it was; a pair's
    /// promotion is a command, made or failed.
    pub(crate) fn fail_over(
        &mut self,
        lag: Duration,
        pool: &str,
    ) -> Result<Failover, FailoverError> {
        let commanded = |down| Failover {
            down,
            forced: false,
        };
        match &mut self.serving {
            Serving::Pair { pair, .. } => Ok(pair.fail_over(lag).map(commanded)?),
            Serving::Sentinel(t) => t.fail_over(lag),
            Serving::MariaPair { pair, .. } => Ok(pair.fail_over(lag).map(commanded)?),
            Serving::ValkeyCluster(t) => {
                t.fail_over(&format!("{{{}:{pool}}}", crate::store::PREFIX), lag)
            }
            _ => Err(FailoverError::Failed("no standby to fail over to".into())),
        }
    }

    /// Whether the runner can wipe the store's lease records (the `wipe`
    /// fault, `crate::store::wipe`): a file, one server, etcd's own
    /// cluster (one Raft write) or the fake API server. Not the replicated
    /// topologies: their runs fail over every other fault, and a wipe on
    /// the primary replicates like any write (a Valkey Cluster's
    /// `FLUSHALL` is per node); the single servers test the guard.
    pub(crate) fn can_wipe(&self) -> bool {
        matches!(
            self.serving,
            Serving::File | Serving::Server(_) | Serving::Cluster(_) | Serving::Fake(_)
        )
    }

    /// Whether the server can be crashed and restarted.
    pub(crate) fn can_restart(&self) -> bool {
        match &self.serving {
            Serving::Server(s) => s.can_restart(),
            Serving::Cluster(_) => true,
            _ => false,
        }
    }

    /// Crashes the server (every member of a cluster) and starts it again on
    /// the same data.
    pub(crate) fn restart(&mut self) -> Result<(), String> {
        match &mut self.serving {
            Serving::Server(server) => {
                server.kill()?;
                server.restart()
            }
            Serving::Cluster(c) => {
                for i in 0..c.len() {
                    if c.is_running(i) {
                        c.kill(i)?;
                    }
                }
                for i in 0..c.len() {
                    c.restart(i)?;
                }
                c.wait_healthy(Duration::from_secs(30))
            }
            _ => Err("no server to restart".into()),
        }
    }

    /// The addresses a worker's fault proxies stand in front of (one per
    /// cluster member), or none for a file.
    pub(crate) fn upstreams(&self) -> Vec<SocketAddr> {
        match &self.serving {
            // Clients ask the Sentinels where the primary is, and reach it
            // at the address they name: no proxy can stand in between.
            // In a Cluster, they read the nodes' addresses from the slot
            // map: likewise.
            Serving::File | Serving::Sentinel(_) | Serving::ValkeyCluster(_) => Vec::new(),
            Serving::Server(s) => s.addr().into_iter().collect(),
            Serving::Cluster(c) => c.addrs(),
            Serving::Fake(f) => vec![f.addr()],
            Serving::Pair { pair: p, .. } => vec![p.proxy().addr()],
            Serving::MariaPair { pair: p, .. } => vec![p.proxy().addr()],
        }
    }

    /// The store's URL through the proxies at `addrs` (as [`Store::upstreams`]).
    pub(crate) fn url_via(&self, addrs: &[SocketAddr]) -> String {
        match &self.serving {
            Serving::Server(s) => s.store_url_via(addrs[0]),
            Serving::Cluster(_) => etcd_url(addrs),
            Serving::Fake(_) => format!("k8s://{}", addrs[0]),
            Serving::Pair { .. } => format!("postgres://postgres@{}/postgres", addrs[0]),
            Serving::MariaPair { .. } => format!("mysql://root@{}/leasehold", addrs[0]),
            Serving::File | Serving::Sentinel(_) | Serving::ValkeyCluster(_) => self.url.clone(),
        }
    }
}

/// Every verb of the fake API server, to delay them all in a freeze.
const FAKE_VERBS: [FakeVerb; 7] = [
    FakeVerb::List,
    FakeVerb::Get,
    FakeVerb::Create,
    FakeVerb::Patch,
    FakeVerb::Update,
    FakeVerb::Delete,
    FakeVerb::AccessReview,
];

fn etcd_url(addrs: &[SocketAddr]) -> String {
    let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    format!("etcd://{}", list.join(","))
}

pub(crate) fn provide(
    backend: &str,
    dir: &Path,
    settings: Settings,
    topology: Topology,
) -> Result<Store, String> {
    let chosen = choice(backend).ok_or_else(|| {
        format!(
            "unknown backend {backend:?}: a server kind ({}), a store that needs no server \
             (sqlite), etcd-cluster or k8s-fake",
            servers::KINDS
                .iter()
                .map(|k| k.name)
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    if let Topology::Etcd3 | Topology::Etcd5 = topology {
        let kind = kind_of(chosen, Family::Etcd, ServerKind::Etcd35);
        let members = if topology == Topology::Etcd5 { 5 } else { 3 };
        let cluster = EtcdCluster::start_kind(kind, members)?;
        cluster.wait_healthy(Duration::from_secs(60))?;
        return Ok(Store {
            url: etcd_url(&cluster.addrs()),
            describe: format!(
                "{kind}, a {members}-member cluster started by this run ({})",
                cluster.endpoints().join(", ")
            ),
            serving: Serving::Cluster(cluster),
            pg_processes: false,
        });
    }
    if topology == Topology::Sentinel {
        let kind = kind_of(chosen, Family::Redis, ServerKind::Valkey8);
        let t = SentinelTopology::start(kind)?;
        return Ok(Store {
            url: t.sentinel_url(),
            describe: format!("{kind} primary with a replica, through three Sentinels"),
            serving: Serving::Sentinel(t),
            pg_processes: false,
        });
    }
    if topology == Topology::ReplicatedAsync && chosen.family() == Some(Family::MariaDb) {
        let rt = address_runtime()?;
        let pair = rt.block_on(MariaPair::start())?;
        return Ok(Store {
            url: pair.url(),
            describe: pair.describe(),
            serving: Serving::MariaPair {
                pair,
                _address_rt: rt,
            },
            pg_processes: false,
        });
    }
    if topology == Topology::Cluster {
        let kind = kind_of(chosen, Family::Redis, ServerKind::Valkey8);
        let t = ClusterTopology::start(kind)?;
        return Ok(Store {
            url: t.cluster_url(),
            describe: format!("{kind} Cluster of three primaries with a replica each"),
            serving: Serving::ValkeyCluster(t),
            pg_processes: false,
        });
    }
    if let Some(replication) = match topology {
        Topology::Single
        | Topology::Sentinel
        | Topology::Cluster
        | Topology::Etcd3
        | Topology::Etcd5 => None,
        Topology::ReplicatedAsync => Some(Replication::Async),
        Topology::ReplicatedSync => Some(Replication::Sync),
    } {
        let kind = kind_of(chosen, Family::Postgres, ServerKind::Postgres15);
        let rt = address_runtime()?;
        let pair = rt.block_on(PgPair::start(kind, replication))?;
        return Ok(Store {
            url: pair.url(),
            describe: pair.describe(),
            serving: Serving::Pair {
                pair,
                _address_rt: rt,
            },
            pg_processes: false,
        });
    }
    let kind = match chosen {
        Choice::Local(driver) => {
            let url = driver
                .local_url(dir)
                .ok_or_else(|| format!("{backend} names no store in a directory"))?;
            return Ok(Store {
                url,
                describe: format!("{backend} (a file, no server)"),
                serving: Serving::File,
                pg_processes: false,
            });
        }
        Choice::EtcdCluster => {
            let cluster = EtcdCluster::start_kind(ServerKind::Etcd35, 3)?;
            cluster.wait_healthy(Duration::from_secs(60))?;
            return Ok(Store {
                url: etcd_url(&cluster.addrs()),
                describe: format!(
                    "etcd 3.5, a three-member cluster started by this run ({})",
                    cluster.endpoints().join(", ")
                ),
                serving: Serving::Cluster(cluster),
                pg_processes: false,
            });
        }
        Choice::FakeApi => {
            let fake = FakeApiServer::start().map_err(|e| format!("fake API server: {e}"))?;
            return Ok(Store {
                url: format!("k8s://{}", fake.addr()),
                describe: fake.describe(),
                serving: Serving::Fake(fake),
                pg_processes: false,
            });
        }
        Choice::Server(kind) => kind,
    };
    let server = servers::provide_with(kind, settings).map_err(|e| e.to_string())?;
    // Only a server started here: the PIDs in `pg_stat_activity` of one
    // elsewhere (a container, another host) are not ours to signal.
    let pg_processes = kind.family() == Family::Postgres && server.can_restart();
    Ok(Store {
        url: server.store_url(),
        describe: server.describe(),
        serving: Serving::Server(server),
        pg_processes,
    })
}

/// The runtime that drives a replicated SQL pair's address (the proxy that
/// follows the primary) for as long as the run.
fn address_runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("campaign-primary-address")
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

pub(crate) fn signal(pid: u32, sig: &str) {
    let Ok(mut kill) = programs::command("kill") else {
        eprintln!(
            "cannot signal worker {pid}: {}",
            programs::require("kill").unwrap_err()
        );
        return;
    };
    let _ = kill
        .args([format!("-{sig}"), pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
