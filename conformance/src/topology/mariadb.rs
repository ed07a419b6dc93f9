//! MariaDB: a primary and an asynchronous GTID replica, reached through one
//! address that an HA manager moves to whichever server is primary.
//!
//! Clients reach the pair the way most deployments give them a replicated
//! MariaDB: an address that follows the primary (a virtual IP, MaxScale or
//! an HAProxy that health-checks `@@read_only`, a cloud's endpoint). Here
//! that address is a [`FaultProxy`] that [`MariaPair::promote_replica`]
//! re-points at the promoted server, cutting the open connections as a moved
//! address does.
//!
//! ```no_run
//! # async fn demo() -> Result<(), String> {
//! use leasehold_conformance::topology::mariadb::MariaPair;
//!
//! let mut pair = MariaPair::start().await?;
//! let url = pair.url(); // what clients are given
//! // … hold leases through `url` …
//! pair.stop_replica()?; // `STOP SLAVE`: the replica misses what follows
//! pair.kill_primary()?; // SIGKILL of the primary's `mariadbd`
//! pair.promote_replica()?; // `RESET SLAVE ALL`, writable, then the address follows
//! # Ok(()) }
//! ```
//!
//! # The recipe (verified with Debian's MariaDB 10.11.19)
//!
//! Each server gets its own data directory and temporary directory from
//! `mariadb-install-db --no-defaults --datadir=D --tmpdir=T --user=root
//! --auth-root-authentication-method=normal --skip-test-db` (the system
//! tables are written without a binary log, so nothing of them replicates),
//! and runs as `mariadbd --no-defaults --datadir=D --tmpdir=T --port=P
//! --bind-address=127.0.0.1 --socket=… --pid-file=… --log-error=… --user=root`
//! (the recipe of [`servers::mariadb`], which says why each server has a
//! temporary directory of its own) with, on both, `--log-bin=D/binlog --log-slave-updates
//! --innodb-flush-log-at-trx-commit=1 --sync-binlog=1` (durable, and a
//! promoted replica writes a binary log of its own) and `--server-id=1`
//! (primary) or `--server-id=2 --read-only` (replica). The replica follows
//! with `CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=P,
//! MASTER_USER='root', MASTER_USE_GTID=slave_pos; START SLAVE` (root over TCP
//! from 127.0.0.1 is accepted: no replication user is needed on loopback);
//! `CREATE DATABASE leasehold` on the primary then reaches it within
//! milliseconds. A promotion is `STOP SLAVE; RESET SLAVE ALL; SET GLOBAL
//! read_only = OFF`. `read_only` does not stop root (it has `READ_ONLY
//! ADMIN`): only the clients' address keeps writes off the replica.
//! MariaDB 10.11 has no `@@server_uuid`; `@@server_id` is what tells the two
//! servers apart.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use crate::programs;
use crate::proxy::FaultProxy;
use crate::servers::mariadb::Files;
use crate::servers::{
    self, StartError, free_ports, private_dir, retry_on_taken_port_async, wait_listening,
};

/// The database the clients use, created on the primary (and replicated).
const DATABASE: &str = "leasehold";

/// How long a server may take to open its port, or the replica to catch up.
const WAIT: Duration = Duration::from_secs(60);

/// One server of the pair: its data directory, port, server ID and process.
#[derive(Debug)]
struct Node {
    name: &'static str,
    /// The pair's directory, where its files are ([`Node::files`]).
    dir: PathBuf,
    port: u16,
    server_id: u32,
    child: Option<Child>,
}

impl Node {
    /// The server's files in the pair's directory.
    fn files(&self) -> Files {
        let at = |what: &str| self.dir.join(format!("{}{what}", self.name));
        Files {
            data: at(""),
            tmp: at(".tmp"),
            socket: at(".sock"),
            pid: at(".pid"),
            log: at(".log"),
        }
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn url(&self) -> String {
        url_at(self.addr())
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (server_id {}, port {})",
            self.name, self.server_id, self.port
        )
    }
}

/// A primary and an asynchronous GTID replica on loopback, each with its
/// own port and data directory under one private directory, and the
/// address clients use ([`MariaPair::url`]). Both servers are killed and
/// the directory removed when the pair is dropped.
#[derive(Debug)]
pub struct MariaPair {
    dir: PathBuf,
    primary: Node,
    replica: Node,
    /// Whether the roles have been swapped by a promotion.
    promoted: bool,
    proxy: FaultProxy,
}

impl MariaPair {
    /// Installs two data directories, starts the primary (binary log,
    /// `server_id` 1) and the replica (`server_id` 2, read-only), both
    /// durable, points the replica at the primary with GTID replication,
    /// creates the clients' database on the primary and waits until the
    /// replica has it; then puts the clients' address in front of the
    /// primary.
    ///
    /// # Errors
    /// `mariadbd`, `mariadb-install-db` or `mariadb` is missing
    /// (`apt-get install mariadb-server`), or a step failed; the message has
    /// the server log's tail.
    pub async fn start() -> Result<Self, String> {
        retry_on_taken_port_async("MariaDB pair", Self::start_once).await
    }

    /// [`MariaPair::start`] on ports drawn once.
    async fn start_once() -> Result<Self, StartError> {
        let dir = private_dir("mariadb-pair")?;
        let ports = free_ports(2)?;
        let node = |name: &'static str, port: u16, server_id: u32| Node {
            name,
            dir: dir.clone(),
            port,
            server_id,
            child: None,
        };
        let (primary, replica) = (node("primary", ports[0], 1), node("replica", ports[1], 2));
        let proxy = match FaultProxy::start(primary.addr()).await {
            Ok(proxy) => proxy,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(format!("starting the clients' address: {e}").into());
            }
        };
        let mut pair = Self {
            dir,
            primary,
            replica,
            promoted: false,
            proxy,
        };
        // Dropped on an error: both servers are killed, the directory goes.
        for node in [&mut pair.primary, &mut pair.replica] {
            let files = node.files();
            servers::mariadb::install(&files.data, &files.tmp)?;
            launch(node)?;
        }
        sql(
            &pair.replica,
            &format!(
                "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={}, MASTER_USER='root', \
                 MASTER_USE_GTID=slave_pos; START SLAVE",
                pair.primary.port
            ),
        )?;
        sql(
            &pair.primary,
            &format!("CREATE DATABASE IF NOT EXISTS {DATABASE}"),
        )?;
        pair.wait_replicated(&format!(
            "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = '{DATABASE}'"
        ))?;
        Ok(pair)
    }

    /// The URL clients are given: the address that follows the primary.
    pub fn url(&self) -> String {
        url_at(self.proxy.addr())
    }

    /// The URL of the server that is primary now, bypassing the clients'
    /// address (an old primary's clients that a partition left behind).
    pub fn primary_url(&self) -> String {
        self.current_primary().url()
    }

    /// The URL of the replica (read-only while it is one, except for users
    /// with `READ_ONLY ADMIN`, such as root).
    pub fn replica_url(&self) -> String {
        self.current_replica().url()
    }

    /// The clients' address, to inject faults on it.
    pub fn proxy(&self) -> &FaultProxy {
        &self.proxy
    }

    /// The servers and their roles.
    pub fn describe(&self) -> String {
        format!(
            "MariaDB primary {} + async GTID replica {}",
            self.current_primary(),
            self.current_replica()
        )
    }

    /// Stops replication on the replica (`STOP SLAVE`): from now on the
    /// primary's commits do not reach it, as with a replica that lags.
    ///
    /// # Errors
    /// The statement failed.
    pub fn stop_replica(&self) -> Result<(), String> {
        sql(self.current_replica(), "STOP SLAVE")
    }

    /// Resumes replication after [`MariaPair::stop_replica`] (`START
    /// SLAVE`): the replica catches up from where it stopped.
    ///
    /// # Errors
    /// The statement failed.
    pub fn start_replica(&self) -> Result<(), String> {
        sql(self.current_replica(), "START SLAVE")
    }

    /// Kills the primary's `mariadbd` with SIGKILL: the crash an HA manager
    /// fails over from. Its clients' connections break.
    ///
    /// # Errors
    /// The process could not be killed.
    pub fn kill_primary(&mut self) -> Result<(), String> {
        let node = if self.promoted {
            &mut self.replica
        } else {
            &mut self.primary
        };
        kill(node)
    }

    /// Promotes the replica (`STOP SLAVE; RESET SLAVE ALL; SET GLOBAL
    /// read_only = OFF`) and moves the clients' address to it. Whatever the
    /// old primary acknowledged that had not reached the replica is gone;
    /// the replica's `server_id` is its own.
    ///
    /// # Errors
    /// A statement failed.
    pub fn promote_replica(&mut self) -> Result<(), String> {
        sql(
            self.current_replica(),
            "STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = OFF",
        )?;
        self.promoted = !self.promoted;
        self.proxy.point_at(self.current_primary().addr());
        Ok(())
    }

    /// Makes the server a promotion left behind a replica of the new
    /// primary again: its data directory is installed anew, it starts with
    /// a `server_id` no server of the pair had (reusing one would hide the
    /// next failover from the promotion guard), replicates with GTID from
    /// the primary's first binary log (every server logs what it applies,
    /// `--log-slave-updates`, so that log holds all of it), and is waited
    /// for until it has everything the primary has (`MASTER_GTID_WAIT`).
    ///
    /// # Errors
    /// A step failed.
    pub fn rebuild_replica(&mut self) -> Result<(), String> {
        let server_id = self.primary.server_id.max(self.replica.server_id) + 1;
        let primary_port = self.current_primary().port;
        let position = sql_answer(self.current_primary(), "SELECT @@gtid_binlog_pos")?;
        let node = if self.promoted {
            &mut self.primary
        } else {
            &mut self.replica
        };
        kill(node)?;
        let files = node.files();
        std::fs::remove_dir_all(&files.data)
            .map_err(|e| format!("removing {}: {e}", files.data.display()))?;
        for leftover in [&files.socket, &files.pid] {
            let _ = std::fs::remove_file(leftover);
        }
        node.server_id = server_id;
        servers::mariadb::install(&files.data, &files.tmp)?;
        launch(node)?;
        sql(
            node,
            &format!(
                "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary_port}, \
                 MASTER_USER='root', MASTER_USE_GTID=slave_pos; START SLAVE"
            ),
        )?;
        let waited = sql_answer(
            node,
            &format!(
                "SELECT MASTER_GTID_WAIT('{}', {})",
                position.trim(),
                WAIT.as_secs()
            ),
        )?;
        if waited.trim() != "0" {
            return Err(format!(
                "{node} did not catch up with the primary's {} within {WAIT:?}",
                position.trim()
            ));
        }
        Ok(())
    }

    /// The failover an HA manager makes after the primary crashed, with the
    /// replica `lag` behind: replication stops, the primary goes on
    /// acknowledging for `lag`, is killed, the replica is promoted and the
    /// clients' address moves to it; then the old primary is rebuilt as the
    /// new replica. Answers how long clients had no primary (from the kill
    /// until the address moved).
    ///
    /// # Errors
    /// A step failed; the pair may then be left without a replica.
    pub fn fail_over(&mut self, lag: Duration) -> Result<Duration, String> {
        self.stop_replica()?;
        std::thread::sleep(lag);
        let killed = Instant::now();
        self.kill_primary()?;
        self.promote_replica()?;
        let down = killed.elapsed();
        self.rebuild_replica()?;
        Ok(down)
    }

    /// Waits until `query` (one integer) answers 1 on the replica.
    ///
    /// # Errors
    /// It did not within a minute, or the replica failed.
    pub fn wait_replicated(&self, query: &str) -> Result<(), String> {
        let replica = self.current_replica();
        let started = Instant::now();
        loop {
            if sql_answer(replica, query).is_ok_and(|n| n.trim() == "1") {
                return Ok(());
            }
            if started.elapsed() > WAIT {
                let status = sql_answer(replica, "SHOW SLAVE STATUS\\G").unwrap_or_default();
                return Err(format!(
                    "the replica of {} did not answer 1 to {query} within {WAIT:?}: {status}\n{}",
                    self.describe(),
                    tail(&replica.files().log)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn current_primary(&self) -> &Node {
        if self.promoted {
            &self.replica
        } else {
            &self.primary
        }
    }

    fn current_replica(&self) -> &Node {
        if self.promoted {
            &self.primary
        } else {
            &self.replica
        }
    }
}

impl Drop for MariaPair {
    fn drop(&mut self) {
        for node in [&mut self.primary, &mut self.replica] {
            let _ = kill(node);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn url_at(addr: SocketAddr) -> String {
    format!("mysql://root@{addr}/{DATABASE}")
}

/// Starts `node`'s server and waits until it listens on its port.
fn launch(node: &mut Node) -> Result<(), StartError> {
    let bin = programs::require("mariadbd")?;
    let files = node.files();
    let mut cmd = servers::mariadb::server_command(&bin, &files, node.port);
    cmd.arg(format!("--log-bin={}", files.data.join("binlog").display()))
        .arg(format!("--server-id={}", node.server_id))
        .args([
            "--log-slave-updates",
            "--innodb-flush-log-at-trx-commit=1",
            "--sync-binlog=1",
        ]);
    if node.server_id != 1 {
        cmd.arg("--read-only");
    }
    let child = cmd.spawn().map_err(|e| format!("{cmd:?}: {e}"))?;
    let child = node.child.insert(child);
    wait_listening(child, node.port, WAIT, &files.log)
        .map_err(|e| e.map(|what| format!("{node}: {what}\n{}", tail(&files.log))))
}

fn kill(node: &mut Node) -> Result<(), String> {
    if let Some(mut child) = node.child.take() {
        child.kill().map_err(|e| format!("killing {node}: {e}"))?;
        child.wait().map_err(|e| format!("reaping {node}: {e}"))?;
    }
    Ok(())
}

/// Runs `statements` on `node` as root.
fn sql(node: &Node, statements: &str) -> Result<(), String> {
    sql_answer(node, statements)
        .map(drop)
        .map_err(|e| format!("{e}\n{}", tail(&node.files().log)))
}

/// Runs `statements` on `node` as root; their output, without headers.
fn sql_answer(node: &Node, statements: &str) -> Result<String, String> {
    let mut cmd = programs::command("mariadb")?;
    cmd.args(["--no-defaults", "-uroot", "-h127.0.0.1", "-N", "-B"])
        .arg(format!("-P{}", node.port))
        .args(["-e", statements]);
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{statements} on {node} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
