//! PostgreSQL: a primary and a streaming standby, reached through one address
//! that an HA manager moves to whichever server is primary.
//!
//! sqlx has no multi-host URL and no `target_session_attrs`, so clients reach
//! a replicated PostgreSQL the way most deployments give them one: an address
//! that follows the primary (a virtual IP, an HAProxy that health-checks
//! `pg_is_in_recovery()`, a cloud's endpoint). Here that address is a
//! [`FaultProxy`] that [`PgPair::promote_standby`] re-points at the promoted
//! server, cutting the open connections as a moved address does.
//!
//! ```no_run
//! # async fn demo() -> Result<(), String> {
//! use leasehold_conformance::servers::ServerKind;
//! use leasehold_conformance::topology::postgres::{PgPair, Replication};
//!
//! let mut pair = PgPair::start(ServerKind::Postgres15, Replication::Async).await?;
//! let url = pair.url(); // what clients are given
//! // … hold leases through `url` …
//! pair.kill_primary()?; // SIGKILL of every process of the primary
//! pair.promote_standby()?; // `pg_ctl promote`, then the address follows
//! # Ok(()) }
//! ```

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::programs;
use crate::proxy::FaultProxy;
use crate::servers::{
    ServerKind, StartError, find_binary, free_ports, private_dir, retry_on_taken_port_async,
};

/// How the primary waits for its standby before it acknowledges a commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replication {
    /// Asynchronous streaming (PostgreSQL's default): a commit is
    /// acknowledged once it is durable on the primary; the standby may lag,
    /// and a failover loses what it had not received.
    Async,
    /// `synchronous_standby_names = '*'` with `synchronous_commit = on`: a
    /// commit is acknowledged once the standby has flushed it too, and waits
    /// (or is cancelled) while the standby is away.
    Sync,
}

impl Replication {
    /// `async` or `sync`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Async => "async",
            Self::Sync => "sync",
        }
    }
}

impl fmt::Display for Replication {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One server of the pair: its data directory and port.
#[derive(Debug)]
struct Node {
    data: PathBuf,
    port: u16,
    log: PathBuf,
}

impl Node {
    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

/// A primary and a streaming standby on loopback, each with its own port and
/// data directory under one private directory, and the address clients use
/// ([`PgPair::url`]). Every server is stopped and the directory removed when
/// the pair is dropped.
#[derive(Debug)]
pub struct PgPair {
    kind: ServerKind,
    replication: Replication,
    bindir: PathBuf,
    dir: PathBuf,
    primary: Node,
    standby: Node,
    /// Whether the roles have been swapped by a promotion.
    promoted: bool,
    proxy: FaultProxy,
}

impl PgPair {
    /// Starts a primary (`wal_level = replica`), takes a base backup of it
    /// with `pg_basebackup -R` for the standby, starts the standby streaming
    /// from it, and puts the clients' address in front of the primary.
    /// Waits until the standby streams (and, with [`Replication::Sync`], is
    /// the synchronous one).
    ///
    /// # Errors
    /// The binary is missing (`cargo xtask servers install`), or a step
    /// failed; the message has the server log's tail.
    pub async fn start(kind: ServerKind, replication: Replication) -> Result<Self, String> {
        let bin = find_binary(kind)
            .ok_or_else(|| format!("no {kind} binary here ({})", kind.install_hint()))?;
        let bindir = bin.parent().ok_or("no bin dir")?.to_path_buf();
        retry_on_taken_port_async(&format!("{kind} {replication} pair"), || {
            Self::start_once(kind, replication, bindir.clone())
        })
        .await
    }

    /// [`PgPair::start`] on ports drawn once.
    async fn start_once(
        kind: ServerKind,
        replication: Replication,
        bindir: PathBuf,
    ) -> Result<Self, StartError> {
        let dir = private_dir(&format!("{kind}-{replication}-pair"))?;
        let ports = free_ports(2)?;
        let node = |name: &str, port: u16| Node {
            data: dir.join(name),
            port,
            log: dir.join(format!("{name}.log")),
        };
        let (primary, standby) = (node("primary", ports[0]), node("standby", ports[1]));
        let proxy = match FaultProxy::start(primary.addr()).await {
            Ok(proxy) => proxy,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(format!("starting the clients' address: {e}").into());
            }
        };
        let pair = Self {
            kind,
            replication,
            bindir,
            dir,
            primary,
            standby,
            promoted: false,
            proxy,
        };
        if programs::is_root() {
            run(programs::command("chown")?
                .args(["-R", "postgres"])
                .arg(&pair.dir))?;
        }
        pair.initdb()?;
        pair.start_node(&pair.primary)?;
        pair.base_backup()?;
        pair.start_node(&pair.standby)?;
        pair.wait_streaming()?;
        Ok(pair)
    }

    /// The URL clients are given: the address that follows the primary.
    pub fn url(&self) -> String {
        format!("postgres://postgres@{}/postgres", self.proxy.addr())
    }

    /// The URL of the server that is primary now, bypassing the clients'
    /// address (an old primary's clients that a partition left behind).
    pub fn primary_url(&self) -> String {
        format!(
            "postgres://postgres@{}/postgres",
            self.current_primary().addr()
        )
    }

    /// The URL of the standby (read-only while it is one).
    pub fn standby_url(&self) -> String {
        format!(
            "postgres://postgres@{}/postgres",
            self.current_standby().addr()
        )
    }

    /// The clients' address, to inject faults on it.
    pub fn proxy(&self) -> &FaultProxy {
        &self.proxy
    }

    /// The server kind and the replication mode.
    pub fn describe(&self) -> String {
        format!(
            "{} primary + {} standby ({})",
            self.kind, self.kind, self.replication
        )
    }

    /// Stops the standby (`pg_ctl stop -m fast`): from now on the primary's
    /// commits do not reach it. With [`Replication::Sync`] every commit
    /// waits for it to come back.
    ///
    /// # Errors
    /// `pg_ctl` failed.
    pub fn stop_standby(&self) -> Result<(), String> {
        self.pg_ctl(self.current_standby(), &["-m", "fast", "-w", "stop"])
    }

    /// Starts the standby again after [`PgPair::stop_standby`].
    ///
    /// # Errors
    /// `pg_ctl` failed.
    pub fn start_standby(&self) -> Result<(), String> {
        Ok(self.start_node(self.current_standby())?)
    }

    /// Kills every process of the primary with SIGKILL: the crash an HA
    /// manager fails over from. Its clients' connections break.
    ///
    /// # Errors
    /// `pg_ctl` failed.
    pub fn kill_primary(&self) -> Result<(), String> {
        self.pg_ctl(self.current_primary(), &["-m", "immediate", "-w", "stop"])
    }

    /// Promotes the standby (`pg_ctl promote`, waiting until it accepts
    /// writes) and moves the clients' address to it. The promoted server
    /// starts a new timeline; whatever the old primary acknowledged that had
    /// not reached it is gone.
    ///
    /// # Errors
    /// `pg_ctl` failed.
    pub fn promote_standby(&mut self) -> Result<(), String> {
        self.pg_ctl(self.current_standby(), &["-w", "promote"])?;
        self.promoted = !self.promoted;
        self.proxy.point_at(self.current_primary().addr());
        Ok(())
    }

    /// Makes the server a promotion left behind (stopped or killed) a
    /// standby of the new primary again: its data directory is taken anew
    /// with `pg_basebackup` (what `pg_rewind` would spare on a large
    /// database), and it streams. Waits until the primary lists it (as its
    /// synchronous standby with [`Replication::Sync`]: until then commits
    /// there wait).
    ///
    /// # Errors
    /// A step failed.
    pub fn rebuild_standby(&self) -> Result<(), String> {
        let node = self.current_standby();
        let _ = self.pg_ctl(node, &["-m", "immediate", "-w", "stop"]);
        std::fs::remove_dir_all(&node.data)
            .map_err(|e| format!("removing {}: {e}", node.data.display()))?;
        run(self
            .as_postgres("pg_basebackup")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.current_primary().port.to_string(),
            ])
            .args(["-U", "postgres", "-X", "stream", "-R", "-D"])
            .arg(&node.data))?;
        self.start_node(node)?;
        self.wait_streaming()
    }

    /// The failover an HA manager makes after the primary crashed, with
    /// the standby `lag` behind: the standby stops receiving, the primary
    /// goes on acknowledging for `lag` (with [`Replication::Sync`] its
    /// commits wait instead), is killed, the standby is promoted and the
    /// clients' address moves to it; then the old primary is rebuilt as the
    /// new standby. Answers how long clients had no primary (from the kill
    /// until the address moved).
    ///
    /// # Errors
    /// A step failed; the pair may then be left without a standby.
    pub fn fail_over(&mut self, lag: Duration) -> Result<Duration, String> {
        self.stop_standby()?;
        std::thread::sleep(lag);
        let killed = std::time::Instant::now();
        self.kill_primary()?;
        self.start_standby()?;
        self.promote_standby()?;
        let down = killed.elapsed();
        self.rebuild_standby()?;
        Ok(down)
    }

    fn current_primary(&self) -> &Node {
        if self.promoted {
            &self.standby
        } else {
            &self.primary
        }
    }

    fn current_standby(&self) -> &Node {
        if self.promoted {
            &self.primary
        } else {
            &self.standby
        }
    }

    fn initdb(&self) -> Result<(), String> {
        run(self
            .as_postgres("initdb")
            .arg("-D")
            .arg(&self.primary.data)
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            ]))?;
        let mut conf = String::from(
            "listen_addresses = '127.0.0.1'\nwal_level = replica\nmax_wal_senders = 4\n\
             max_connections = 600\n",
        );
        if self.replication == Replication::Sync {
            conf.push_str("synchronous_standby_names = '*'\nsynchronous_commit = on\n");
        }
        append(&self.primary.data.join("postgresql.conf"), &conf)
    }

    fn base_backup(&self) -> Result<(), String> {
        run(self
            .as_postgres("pg_basebackup")
            .args(["-h", "127.0.0.1", "-p", &self.primary.port.to_string()])
            .args(["-U", "postgres", "-X", "stream", "-R", "-D"])
            .arg(&self.standby.data))
    }

    /// Starts `node`'s server (each listens on its own port, and has its
    /// own socket in the pair's directory: `.s.PGSQL.<port>`).
    fn start_node(&self, node: &Node) -> Result<(), StartError> {
        let opts = format!("-p {} -k {}", node.port, self.dir.display());
        self.pg_ctl_logged(node, &["-w", "-t", "60", "-o", &opts, "start"])
            .map_err(|e| {
                StartError::from_log(e, &std::fs::read_to_string(&node.log).unwrap_or_default())
            })
    }

    /// Waits until the primary lists the standby as streaming (and, for
    /// synchronous replication, as its synchronous standby).
    fn wait_streaming(&self) -> Result<(), String> {
        let want = match self.replication {
            Replication::Async => "streaming async",
            Replication::Sync => "streaming sync",
        };
        let psql = self.bindir.join("psql");
        let started = std::time::Instant::now();
        loop {
            let out = Command::new(&psql)
                .args([
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &self.current_primary().port.to_string(),
                ])
                .args(["-U", "postgres", "-At", "-c"])
                .arg("SELECT state || ' ' || sync_state FROM pg_stat_replication")
                .output()
                .map_err(|e| format!("psql: {e}"))?;
            if String::from_utf8_lossy(&out.stdout).trim() == want {
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(60) {
                return Err(format!(
                    "the standby of {} was not {want} after 60 s: {}",
                    self.describe(),
                    tail(&self.current_standby().log)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn pg_ctl(&self, node: &Node, args: &[&str]) -> Result<(), String> {
        run(self
            .as_postgres("pg_ctl")
            .arg("-D")
            .arg(&node.data)
            .args(args))
        .map_err(|e| format!("{e}\n{}", tail(&node.log)))
    }

    fn pg_ctl_logged(&self, node: &Node, args: &[&str]) -> Result<(), String> {
        run(self
            .as_postgres("pg_ctl")
            .arg("-D")
            .arg(&node.data)
            .arg("-l")
            .arg(&node.log)
            .args(args))
        .map_err(|e| format!("{e}\n{}", tail(&node.log)))
    }

    /// A command of the server's bin directory, run as `postgres` when this
    /// process is root (`initdb` and the server refuse to run as root).
    fn as_postgres(&self, program: &str) -> Command {
        let program = self.bindir.join(program);
        match programs::is_root()
            .then(|| programs::require("runuser").ok())
            .flatten()
        {
            Some(runuser) => {
                let mut c = Command::new(runuser);
                c.args(["-u", "postgres", "--"]).arg(program);
                c
            }
            None => Command::new(program),
        }
    }
}

impl Drop for PgPair {
    fn drop(&mut self) {
        for node in [&self.primary, &self.standby] {
            let _ = self.pg_ctl(node, &["-m", "immediate", "-w", "stop"]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn append(path: &Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
