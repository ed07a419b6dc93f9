//! The store a run works on: provided (a file, a server, a cluster or the
//! fake API server), and what the runner does to it: freeze, restart, crash
//! one backend, and the URL each worker reaches it through.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use leasehold_conformance::etcd_cluster::EtcdCluster;
use leasehold_conformance::programs;
use leasehold_conformance::servers::{self, ServerKind, Settings};
use leasehold_k8s_fake::{FakeApiServer, Fault as FakeFault, Verb as FakeVerb};

/// The store of a run: a URL, and what this process started to serve it.
pub(crate) struct Store {
    pub(crate) url: String,
    pub(crate) describe: String,
    pub(crate) serving: Serving,
    /// A PostgreSQL server this process started: one of its backends can be
    /// SIGKILLed (MariaDB and Valkey/Redis are one process, where a crash
    /// is a restart).
    pub(crate) backends: bool,
}

/// What one backend crash did.
pub(crate) struct Crash {
    /// The backend killed.
    pub(crate) pid: u32,
    /// Until the server accepted a connection again.
    pub(crate) recovery: Duration,
    /// The postmaster's start time did not move: crash recovery in place,
    /// not a restart (what the restart guard cannot see).
    pub(crate) in_place: bool,
    /// How long before the kill the newest claim of any slot was made.
    pub(crate) after_claim: Option<Duration>,
    /// The server came back without that claim: it forgot a lease it had
    /// granted (on PostgreSQL, only where the lease sessions commit
    /// asynchronously).
    pub(crate) forgot_claim: bool,
}

/// A backend crash is aimed at a claim younger than this: the moment a
/// server that forgets loses the most (a new holder generating on a claim
/// the server no longer has). A backend crash loses only the WAL not yet
/// written out of the server's buffers, which the WAL writer writes as soon
/// as a page is full: with the campaign's traffic, within a fraction of a
/// second.
pub(crate) const AIM_AFTER_CLAIM: Duration = Duration::from_millis(50);

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

    /// SIGKILLs one client backend of a PostgreSQL server this process
    /// started: one serving the lease connections (`application_name =
    /// 'leasehold'`) where there is one, else any; `which` picks among them
    /// in the order of their process IDs. The kill waits (up to `aim`) for
    /// a claim younger than [`AIM_AFTER_CLAIM`] in the lease table. Returns
    /// once the server accepts connections again (it ends every other
    /// backend and replays its WAL in place), at most 60 s later.
    pub(crate) fn crash_backend(
        &self,
        which: usize,
        aim: Duration,
    ) -> Result<Option<Crash>, String> {
        use leasehold_sql::sqlx::{self, Connection, Row};
        let url = self.url.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async move {
            let connect = || async {
                let opts: sqlx::postgres::PgConnectOptions = url
                    .parse::<sqlx::postgres::PgConnectOptions>()
                    .map_err(|e| format!("{url}: {e}"))?
                    .application_name("campaign-runner");
                tokio::time::timeout(Duration::from_secs(5), sqlx::PgConnection::connect_with(&opts))
                    .await
                    .map_err(|_| "no connection within 5 s".to_owned())?
                    .map_err(|e| e.to_string())
            };
            let started = "SELECT CAST(pg_postmaster_start_time() AS TEXT)";
            // The server may still be recovering from an earlier fault (a
            // restart replays its WAL before it lets clients in).
            let waiting = Instant::now();
            let (mut conn, before) = loop {
                let tried = async {
                    let mut c = connect().await?;
                    let t: String = sqlx::query_scalar(started)
                        .fetch_one(&mut c)
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok::<_, String>((c, t))
                };
                match tried.await {
                    Ok(ready) => break ready,
                    Err(e) if waiting.elapsed() > Duration::from_secs(60) => {
                        return Err(format!("the server did not let clients in for 60 s: {e}"));
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            };
            // The age of the newest claim, in µs (none before the first).
            let newest = "SELECT CAST(EXTRACT(EPOCH FROM (CURRENT_TIMESTAMP(6) - max(acquired_at))) \
                          * 1000000 AS BIGINT) FROM leasehold_leases";
            let aiming = Instant::now();
            let after_claim = loop {
                let age: Option<i64> = sqlx::query_scalar(newest)
                    .fetch_one(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
                let age = age.map(|us| Duration::from_micros(us.max(0).unsigned_abs()));
                if age.is_some_and(|a| a <= AIM_AFTER_CLAIM) || aiming.elapsed() >= aim {
                    break age;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            let rows = sqlx::query(
                "SELECT pid, application_name = 'leasehold' AS lease FROM pg_stat_activity \
                 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() ORDER BY pid",
            )
            .fetch_all(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
            let all: Vec<(i32, bool)> = rows
                .iter()
                .map(|r| (r.get::<i32, _>(0), r.get::<bool, _>(1)))
                .collect();
            let lease: Vec<i32> = all.iter().filter(|(_, l)| *l).map(|(p, _)| *p).collect();
            let pool = if lease.is_empty() {
                all.iter().map(|(p, _)| *p).collect()
            } else {
                lease
            };
            let Some(&pid) = pool.get(which % pool.len().max(1)) else {
                return Ok(None);
            };
            let pid = pid.unsigned_abs();
            let claims = "SELECT CAST(max(acquired_at) AS TEXT) FROM leasehold_leases";
            let newest_before: Option<String> = sqlx::query_scalar(claims)
                .fetch_one(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
            let _ = conn.close().await;
            let at = Instant::now();
            signal(pid, "KILL");
            // The postmaster notices the crash, ends every backend and
            // recovers; until then connections fail or are refused.
            tokio::time::sleep(Duration::from_millis(20)).await;
            let after = loop {
                if at.elapsed() > Duration::from_secs(60) {
                    return Err(format!(
                        "the server did not accept connections within 60 s of killing backend {pid}"
                    ));
                }
                if let Ok(mut c) = connect().await
                    && let Ok(t) = sqlx::query_scalar::<_, String>(started).fetch_one(&mut c).await
                    && let Ok(newest) = sqlx::query_scalar::<_, Option<String>>(claims)
                        .fetch_one(&mut c)
                        .await
                {
                    let _ = c.close().await;
                    break (t, newest);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            let (after, newest_after) = after;
            Ok(Some(Crash {
                pid,
                recovery: at.elapsed(),
                in_place: after == before,
                after_claim,
                forgot_claim: newest_after < newest_before,
            }))
        })
    }

    /// The addresses a worker's fault proxies stand in front of (one per
    /// cluster member), or none for a file.
    pub(crate) fn upstreams(&self) -> Vec<SocketAddr> {
        match &self.serving {
            Serving::File => Vec::new(),
            Serving::Server(s) => s.addr().into_iter().collect(),
            Serving::Cluster(c) => c.addrs(),
            Serving::Fake(f) => vec![f.addr()],
        }
    }

    /// The store's URL through the proxies at `addrs` (as [`Store::upstreams`]).
    pub(crate) fn url_via(&self, addrs: &[SocketAddr]) -> String {
        match &self.serving {
            Serving::Server(s) => store_url(s.kind, s.url_via(addrs[0])),
            Serving::Cluster(_) => etcd_url(addrs),
            Serving::Fake(_) => format!("k8s://{}", addrs[0]),
            Serving::File => self.url.clone(),
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

/// The store URL of a server's `url`: an etcd server hands out its member's
/// `http://` endpoint, which says nothing of the store behind it; the
/// campaign names it `etcd://`.
fn store_url(kind: ServerKind, url: String) -> String {
    match (kind, url.split_once("://")) {
        (ServerKind::Etcd35 | ServerKind::Etcd34, Some((_, member))) => format!("etcd://{member}"),
        _ => url,
    }
}

pub(crate) fn provide(backend: &str, dir: &Path, settings: Settings) -> Result<Store, String> {
    let kind = match backend {
        "sqlite" => {
            return Ok(Store {
                url: format!("sqlite://{}", dir.join("leases.sqlite").display()),
                describe: "sqlite (file)".into(),
                serving: Serving::File,
                backends: false,
            });
        }
        "etcd-cluster" | "etcd35x3" => {
            let cluster = EtcdCluster::start_kind(ServerKind::Etcd35, 3)?;
            cluster.wait_healthy(Duration::from_secs(60))?;
            return Ok(Store {
                url: etcd_url(&cluster.addrs()),
                describe: format!(
                    "etcd 3.5, a three-member cluster started by this run ({})",
                    cluster.endpoints().join(", ")
                ),
                serving: Serving::Cluster(cluster),
                backends: false,
            });
        }
        "k8s-fake" | "k8s" => {
            let fake = FakeApiServer::start().map_err(|e| format!("fake API server: {e}"))?;
            return Ok(Store {
                url: format!("k8s://{}", fake.addr()),
                describe: fake.describe(),
                serving: Serving::Fake(fake),
                backends: false,
            });
        }
        "postgres" | "postgres15" => ServerKind::Postgres15,
        "postgres-latest" => ServerKind::PostgresLatest,
        "mariadb" | "mysql" => ServerKind::MariaDb,
        "redis8" | "redis" => ServerKind::Redis8,
        "redis7" => ServerKind::Redis7,
        "valkey8" | "valkey" => ServerKind::Valkey8,
        "etcd35" | "etcd" => ServerKind::Etcd35,
        "etcd34" => ServerKind::Etcd34,
        other => return Err(format!("unknown backend {other:?}")),
    };
    let server = servers::provide_with(kind, settings).map_err(|e| e.to_string())?;
    // Only a server started here: the PIDs in `pg_stat_activity` of one
    // elsewhere (a container, another host) are not ours to signal.
    let backends =
        matches!(kind, ServerKind::Postgres15 | ServerKind::PostgresLatest) && server.can_restart();
    Ok(Store {
        url: store_url(kind, server.url.clone()),
        describe: server.describe(),
        serving: Serving::Server(server),
        backends,
    })
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
