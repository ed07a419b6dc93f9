//! Valkey/Redis Cluster: three primaries, each with one replica.
//!
//! [`ClusterTopology::start`] starts six servers on free loopback ports
//! (client port and cluster bus port both drawn, so no `port + 10000`
//! clash), each in a private directory under the system's temp dir, with
//! `--cluster-enabled yes --cluster-node-timeout 2000
//! --cluster-replica-validity-factor 0` ([`ClusterTuning::LOADED_MACHINE`])
//! and durable like the
//! Sentinel topology's (the append-only file fsynced before every reply, no
//! snapshots), so that whatever a failover loses is lost by the replication,
//! never by a restart. It joins them with `valkey-cli --cluster create …
//! --cluster-replicas 1` (the CLI found beside the server binary) and
//! returns once every node reports `cluster_state:ok`, sees three primaries
//! and three replicas, and every replica's link is up. Every process is
//! killed (SIGKILL) and the directory removed when the handle is dropped.
//!
//! Clients reach the cluster the way users' clients do, through any node
//! ([`ClusterTopology::cluster_url`], as `fred` reads it), and follow
//! `MOVED` redirections after a failover. A pool's keys share one hash tag,
//! so one pool lives on one slot and one primary
//! ([`ClusterTopology::primary_of`]). A test makes that primary's replica
//! miss writes ([`ClusterTopology::cut_replication`]), then makes the
//! failover happen ([`ClusterTopology::kill_primary`], or
//! [`ClusterTopology::failover`] on the replica) and waits for it
//! ([`ClusterTopology::wait_promoted`]).
//!
//! Measured on Valkey 8.1 here: after `CLUSTER FAILOVER FORCE` on a cut
//! replica, the replica is a primary within half a second and the old
//! primary turns itself into its replica within about 2 s (it learns the
//! newer configuration epoch through the cluster bus), answering `MOVED`
//! from then on; writes sent to it before that are acknowledged and lost.
//!
//! # On a loaded machine
//!
//! A replica whose link to its primary has been down for longer than
//! `cluster-replica-validity-factor` node timeouts plus the ping period
//! (10 × 2 s + 10 s by default) never fails over by itself; a replica cut
//! off by [`ClusterTopology::cut_replication`] reaches that age 30 s after
//! the cut when a loaded machine delays the election, and the slot is then
//! left without a primary for good. The topology sets the factor to 0 (a
//! replica may always fail over), asks the replica for the failover
//! (`CLUSTER FAILOVER FORCE`) when none came 20 s after the kill, and says
//! so with [`FailoverError::NotPromoted`], the cluster put back as it was,
//! when none came within 90 s.
//!
//! Measured with `cargo xtask measure cluster-failovers` (Valkey 8.1, the
//! failover of one slot's primary on a cluster per tuning in turn, beside
//! two CPU-bound processes): with 500 ms of lag (`--rounds 10`), 10 of 10
//! promoted with either tuning (3.9 s / 4.8 s without the slot's primary,
//! median / longest, with [`ClusterTuning::PLAIN`]; 4.1 s / 4.7 s with
//! [`ClusterTuning::LOADED_MACHINE`]); with the replica cut off 31 s before
//! the kill (`--rounds 3 --lag-ms 31000`), PLAIN promoted none of 3 within
//! 90 s (the slot without a primary on every node; each time put back) and
//! LOADED_MACHINE 3 of 3 (4.1 s / 4.4 s), none asked for.
//!
//! Blocking std code, like [`crate::servers`]: call it from
//! `tokio::task::block_in_place` or `spawn_blocking` in async tests.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::sentinel::{
    Node, READY_WAIT, Reply, command, expect_ok, info_field, info_replication, spawn, wait_pong,
};
use super::{Failover, FailoverError};
use crate::servers::{self, ServerKind, StartError};

/// Servers in the cluster: three primaries and their replicas.
const NODES: usize = 6;

/// How long [`ClusterTopology::fail_over`] waits for a promotion (a loaded
/// machine included).
const PROMOTION_WAIT: Duration = Duration::from_secs(90);

/// How the cluster's nodes are set up, and what
/// [`ClusterTopology::wait_promoted`] does while the cluster makes no
/// promotion (see the module documentation for what was measured).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterTuning {
    /// `cluster-node-timeout`: how long a node may not answer before it is
    /// taken for failed, and the pace of a replica's elections.
    pub node_timeout: Duration,
    /// `cluster-replica-validity-factor`: a replica whose link to its
    /// primary has been down for longer than this many node timeouts (plus
    /// the ping period, 10 s) never fails over by itself. 0: it always may.
    pub replica_validity_factor: u32,
    /// How long after the wait for a promotion began, with the slot still
    /// served by no other primary, the killed primary's replica is asked
    /// for one (`CLUSTER FAILOVER FORCE`, which skips the data age check);
    /// asked again every `4 × node_timeout` while none comes. `None`: never.
    pub force_after: Option<Duration>,
}

impl ClusterTuning {
    /// The cluster's own validity factor and no promotion asked for: what
    /// the topology ran with before it was measured on a loaded machine,
    /// kept to measure against.
    pub const PLAIN: Self = Self {
        node_timeout: Duration::from_secs(2),
        replica_validity_factor: 10,
        force_after: None,
    };

    /// The topology's settings (see the module documentation).
    pub const LOADED_MACHINE: Self = Self {
        node_timeout: Duration::from_secs(2),
        replica_validity_factor: 0,
        force_after: Some(Duration::from_secs(20)),
    };
}

impl Default for ClusterTuning {
    fn default() -> Self {
        Self::LOADED_MACHINE
    }
}

/// One line of `CLUSTER NODES`, as far as these tests read it.
#[derive(Clone, Debug)]
struct View {
    id: String,
    addr: SocketAddr,
    primary: bool,
    failed: bool,
    /// For a replica, the ID of its primary.
    primary_id: Option<String>,
    /// For a primary, the slot ranges it serves (inclusive).
    ranges: Vec<(u16, u16)>,
}

/// Three primaries with one replica each on loopback (see the module
/// documentation). Dropping it kills every process and removes its files.
pub struct ClusterTopology {
    bin: PathBuf,
    dir: PathBuf,
    tuning: ClusterTuning,
    nodes: Vec<Node>,
}

impl ClusterTopology {
    /// Starts the cluster with `kind`'s server binary (found as
    /// [`servers::find_binary`] finds it) and the CLI beside it
    /// (`valkey-cli` beside `valkey-server`, `redis-cli` beside
    /// `redis-server`), and waits until it is ready for a failover (see the
    /// module documentation).
    ///
    /// # Errors
    /// No binary or CLI, a server that did not start, a cluster that did
    /// not form within two minutes.
    pub fn start(kind: ServerKind) -> Result<Self, String> {
        Self::start_tuned(kind, ClusterTuning::default())
    }

    /// [`ClusterTopology::start`] with the nodes set up by `tuning`. Starts
    /// again on other ports when another process takes one first.
    ///
    /// # Errors
    /// As [`ClusterTopology::start`].
    pub fn start_tuned(kind: ServerKind, tuning: ClusterTuning) -> Result<Self, String> {
        let bin = servers::find_binary(kind)
            .ok_or_else(|| format!("no {kind} binary for Cluster; {}", kind.install_hint()))?;
        let cli = cli_beside(&bin)?;
        servers::retry_on_taken_port("the Cluster topology", || {
            Self::start_once(&bin, &cli, tuning)
        })
    }

    /// [`ClusterTopology::start_tuned`] on ports drawn once.
    fn start_once(bin: &Path, cli: &Path, tuning: ClusterTuning) -> Result<Self, StartError> {
        let dir = servers::private_dir("cluster")?;
        // A client port and a cluster bus port per node, all different.
        let ports = servers::free_ports(2 * NODES)?;
        let mut topology = Self {
            bin: bin.to_path_buf(),
            dir,
            tuning,
            nodes: Vec::new(),
        };
        for i in 0..NODES {
            let node_dir = topology.dir.join(format!("node{i}"));
            std::fs::create_dir_all(&node_dir).map_err(|e| e.to_string())?;
            let args: Vec<String> = [
                "--port",
                &ports[i].to_string(),
                "--cluster-port",
                &ports[NODES + i].to_string(),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                &tuning.node_timeout.as_millis().to_string(),
                "--cluster-replica-validity-factor",
                &tuning.replica_validity_factor.to_string(),
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--dir",
                &node_dir.display().to_string(),
            ]
            .map(str::to_owned)
            .to_vec();
            topology.nodes.push(Node {
                port: ports[i],
                dir: node_dir,
                args,
                child: None,
            });
        }
        for i in 0..NODES {
            spawn(&topology.bin, &mut topology.nodes[i])?;
        }
        for node in &mut topology.nodes {
            wait_pong(node)?;
        }
        let mut create = Command::new(cli);
        create.args(["--cluster", "create"]);
        create.args(topology.nodes.iter().map(|n| n.addr().to_string()));
        create.args(["--cluster-replicas", "1", "--cluster-yes"]);
        let out = create
            .output()
            .map_err(|e| format!("{}: {e}", cli.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} --cluster create exited with {}: {}{}",
                cli.display(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        topology.wait_ready()?;
        Ok(topology)
    }

    /// Waits until every running node reports `cluster_state:ok` and sees
    /// three primaries and three replicas, none failed, and every replica's
    /// link to its primary is up.
    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + READY_WAIT;
        loop {
            let ready = self.running().all(|addr| {
                cluster_info(addr).is_ok_and(|i| info_field(&i, "cluster_state") == Some("ok"))
                    && views(addr).is_ok_and(|v| {
                        v.len() == NODES
                            && v.iter().all(|n| !n.failed)
                            && v.iter().filter(|n| n.primary).count() == NODES / 2
                    })
                    && info_replication(addr).is_ok_and(|i| {
                        info_field(&i, "role") == Some("master")
                            || info_field(&i, "master_link_status") == Some("up")
                    })
            });
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the cluster in {} was not ready within {READY_WAIT:?}; node0 sees:\n{}",
                    self.dir.display(),
                    self.cluster_nodes(self.nodes[0].addr()).unwrap_or_default()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The addresses of the nodes whose process runs.
    fn running(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(Node::addr)
    }

    /// The URL a client reads to reach the cluster, as `fred` reads it:
    /// `redis-cluster://127.0.0.1:P1?node=127.0.0.1:P2&node=…`, every node
    /// named (the client finds the others with `CLUSTER SLOTS` anyway).
    pub fn cluster_url(&self) -> String {
        let mut url = format!("redis-cluster://{}", self.nodes[0].addr());
        for (i, n) in self.nodes[1..].iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(&format!("node={}", n.addr()));
        }
        url
    }

    /// Every node's address.
    pub fn node_addrs(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(Node::addr).collect()
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT` on a running node).
    ///
    /// # Errors
    /// No running node answered.
    pub fn slot_of(&self, key: &str) -> Result<u16, String> {
        let mut last = String::from("no node runs");
        for addr in self.running() {
            match command(addr, &["CLUSTER", "KEYSLOT", key]) {
                Ok(Reply::Integer(n)) => {
                    return u16::try_from(n).map_err(|e| format!("slot {n}: {e}"));
                }
                Ok(other) => last = format!("CLUSTER KEYSLOT on {addr}: {other:?}"),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The primary serving `key`'s slot, as the first running node that
    /// answers `CLUSTER NODES` sees it.
    ///
    /// # Errors
    /// No node answered, or none names a live primary for the slot.
    pub fn primary_of(&self, key: &str) -> Result<SocketAddr, String> {
        let slot = self.slot_of(key)?;
        let addr = self.running().next().ok_or("no node runs")?;
        let v = views(addr)?;
        primary_in(&v, slot)
            .map(|p| p.addr)
            .ok_or_else(|| format!("{addr} names no live primary for slot {slot}"))
    }

    /// The slot ranges (inclusive) `primary` serves, as it sees them.
    ///
    /// # Errors
    /// `primary` did not answer, or is not a primary.
    pub fn slot_ranges(&self, primary: SocketAddr) -> Result<Vec<(u16, u16)>, String> {
        views(primary)?
            .into_iter()
            .find(|n| n.addr == primary && n.primary)
            .map(|n| n.ranges)
            .ok_or_else(|| format!("{primary} is not a primary"))
    }

    /// The replica of `primary` (a live one), as `primary` sees it.
    ///
    /// # Errors
    /// `primary` did not answer, or has no live replica.
    pub fn replica_of(&self, primary: SocketAddr) -> Result<SocketAddr, String> {
        let v = views(primary)?;
        let id = v
            .iter()
            .find(|n| n.addr == primary)
            .map(|n| n.id.clone())
            .ok_or_else(|| format!("{primary} does not list itself"))?;
        v.iter()
            .find(|n| !n.primary && !n.failed && n.primary_id.as_deref() == Some(id.as_str()))
            .map(|n| n.addr)
            .ok_or_else(|| format!("{primary} has no live replica"))
    }

    /// Makes `primary`'s replica stop receiving its writes, while it stays
    /// up and talks to the cluster bus (so that it can still be promoted):
    /// the replica is given credentials the primary does not know
    /// (`masteruser`, `masterauth`), and the primary drops its replica
    /// connections (`CLIENT KILL TYPE replica`), so the replica's
    /// reconnections fail authentication (as with Sentinel; verified on
    /// Valkey 8.1 Cluster). Returns the replica once it reports its link
    /// down: every write the primary acknowledges after that is missing on
    /// it.
    ///
    /// # Errors
    /// A command failed, or the link stayed up for a minute.
    pub fn cut_replication(&self, primary: SocketAddr) -> Result<SocketAddr, String> {
        let replica = self.replica_of(primary)?;
        for (name, value) in [
            ("masteruser", "leasehold-no-such-user"),
            ("masterauth", "x"),
        ] {
            expect_ok(command(replica, &["CONFIG", "SET", name, value])?)?;
        }
        command(primary, &["CLIENT", "KILL", "TYPE", "replica"])?;
        let deadline = Instant::now() + READY_WAIT;
        loop {
            let info = info_replication(replica)?;
            if info_field(&info, "master_link_status") == Some("down") {
                return Ok(replica);
            }
            if Instant::now() > deadline {
                return Err(format!("the replica {replica} kept its link up: {info}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server at `addr` (SIGKILL). Its replica's cluster then
    /// finds it failed after the node timeout (2 s) and promotes the
    /// replica.
    ///
    /// # Errors
    /// `addr` is not a running node of this cluster.
    pub fn kill_primary(&mut self, addr: SocketAddr) -> Result<(), String> {
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.addr() == addr && n.child.is_some())
            .ok_or_else(|| format!("{addr} is not a running node of this cluster"))?;
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            child
                .wait()
                .map_err(|e| format!("waiting for the killed server {addr}: {e}"))?;
        }
        Ok(())
    }

    /// `CLUSTER FAILOVER FORCE` on `replica`: it is promoted with the other
    /// primaries' votes, without the handshake with its primary, which keeps
    /// running (until it learns of the promotion and turns into a replica).
    /// `FORCE`, because a plain `CLUSTER FAILOVER` waits until the replica
    /// has caught up with its primary, which a replica cut off by
    /// [`ClusterTopology::cut_replication`] never does.
    ///
    /// # Errors
    /// The replica did not answer `OK`.
    pub fn failover(&self, replica: SocketAddr) -> Result<(), String> {
        expect_ok(command(replica, &["CLUSTER", "FAILOVER", "FORCE"])?)
    }

    /// Waits until every running node names the same live primary for
    /// `key`'s slot, another than `old`, and that server answers
    /// `role:master`; returns its address. While no other primary serves
    /// the slot [`ClusterTuning::force_after`] into the wait, `old`'s
    /// replica is asked for the failover (`CLUSTER FAILOVER FORCE`).
    ///
    /// # Errors
    /// No such promotion within `timeout`.
    pub fn wait_promoted(
        &self,
        key: &str,
        old: SocketAddr,
        timeout: Duration,
    ) -> Result<SocketAddr, String> {
        self.await_promotion(key, old, timeout)
            .map(|(new, _)| new)
            .map_err(|why| format!("no promotion within {timeout:?}: {why}"))
    }

    /// [`ClusterTopology::wait_promoted`]; also whether a failover was asked
    /// for before the promotion came.
    fn await_promotion(
        &self,
        key: &str,
        old: SocketAddr,
        timeout: Duration,
    ) -> Result<(SocketAddr, bool), String> {
        let slot = self.slot_of(key)?;
        let started = Instant::now();
        let deadline = started + timeout;
        let mut next_ask = self.tuning.force_after.map(|after| started + after);
        let mut asked = Vec::new();
        let mut forced = false;
        loop {
            let named: Vec<Option<SocketAddr>> = self
                .running()
                .filter(|a| *a != old)
                .map(|a| {
                    views(a)
                        .ok()
                        .and_then(|v| primary_in(&v, slot).map(|p| p.addr))
                })
                .collect();
            if let Some(Some(new)) = named.first()
                && *new != old
                && named.iter().all(|n| n.as_ref() == Some(new))
                && info_replication(*new)
                    .is_ok_and(|info| info_field(&info, "role") == Some("master"))
            {
                return Ok((*new, forced));
            }
            let now = Instant::now();
            if let Some(at) = next_ask
                && now >= at
            {
                // A promotion some node already knows of is left to spread.
                if named.iter().all(|n| n.is_none_or(|n| n == old)) {
                    let answer = self.ask_for_failover(old);
                    forced |= answer.is_ok();
                    asked.push(format!(
                        "after {:.1} s: {}",
                        (now - started).as_secs_f64(),
                        answer.unwrap_or_else(|e| e)
                    ));
                }
                next_ask = Some(now + 4 * self.tuning.node_timeout);
            }
            if now > deadline {
                let replica = self.replica_of_failed(old);
                return Err(format!(
                    "the nodes name {named:?} for slot {slot} (the old primary was {old}); \
                     asked for a failover: {}; the replica's log ends:\n{}",
                    if asked.is_empty() {
                        "never".to_owned()
                    } else {
                        asked.join("; ")
                    },
                    replica.map_or_else(|e| e, |r| self.log_tail(r, 10))
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The replica of the primary `old` (which may be down), as the first
    /// other running node sees it.
    fn replica_of_failed(&self, old: SocketAddr) -> Result<SocketAddr, String> {
        let addr = self.running().find(|a| *a != old).ok_or("no node runs")?;
        let v = views(addr)?;
        let id = v
            .iter()
            .find(|n| n.addr == old)
            .map(|n| n.id.clone())
            .ok_or_else(|| format!("{addr} does not know {old}"))?;
        v.iter()
            .find(|n| !n.primary && n.primary_id.as_deref() == Some(id.as_str()))
            .map(|n| n.addr)
            .ok_or_else(|| format!("{addr} knows no replica of {old}"))
    }

    /// Asks the replica of `old` for the failover (`CLUSTER FAILOVER
    /// FORCE`): what it answered.
    fn ask_for_failover(&self, old: SocketAddr) -> Result<String, String> {
        let replica = self.replica_of_failed(old)?;
        match command(replica, &["CLUSTER", "FAILOVER", "FORCE"])? {
            Reply::Status(ok) if ok == "OK" => {
                Ok(format!("CLUSTER FAILOVER FORCE accepted by {replica}"))
            }
            other => Err(format!("{replica} answered {other:?}")),
        }
    }

    /// Starts again every server [`ClusterTopology::kill_primary`] killed,
    /// on its own files (its `nodes.conf` included), and waits until it
    /// rejoined as a replica with its link up and the cluster state is `ok`
    /// on it: the cluster can fail over again.
    ///
    /// # Errors
    /// A server did not start, or did not replicate within two minutes.
    pub fn restart_killed(&mut self) -> Result<(), String> {
        for i in 0..self.nodes.len() {
            if self.nodes[i].child.is_some() {
                continue;
            }
            spawn(&self.bin, &mut self.nodes[i])?;
            wait_pong(&mut self.nodes[i])?;
            let addr = self.nodes[i].addr();
            let deadline = Instant::now() + READY_WAIT;
            loop {
                let info = info_replication(addr).unwrap_or_default();
                if info_field(&info, "role") == Some("slave")
                    && info_field(&info, "master_link_status") == Some("up")
                    && cluster_info(addr)
                        .is_ok_and(|c| info_field(&c, "cluster_state") == Some("ok"))
                {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "the restarted server {addr} did not rejoin as a replica within \
                         {READY_WAIT:?}: {info}"
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    /// Puts the cluster back as it was before a failover that made no
    /// promotion: the cut `replica`'s replication credentials are cleared,
    /// the killed primary starts again on its own files (it still serves
    /// its slots), and this waits until the cluster is ready as after
    /// [`ClusterTopology::start`]. (The cluster may still promote the
    /// replica meanwhile; then the old primary rejoins as its replica.)
    fn put_back(&mut self, replica: SocketAddr) -> Result<(), String> {
        for name in ["masteruser", "masterauth"] {
            expect_ok(command(replica, &["CONFIG", "SET", name, ""])?)
                .map_err(|e| format!("clearing {name} on the replica {replica}: {e}"))?;
        }
        for i in 0..self.nodes.len() {
            if self.nodes[i].child.is_none() {
                spawn(&self.bin, &mut self.nodes[i])?;
                wait_pong(&mut self.nodes[i])?;
            }
        }
        self.wait_ready()
    }

    /// The failover a crash makes on `key`'s slot, with the replica `lag`
    /// behind: the replica stops receiving
    /// ([`ClusterTopology::cut_replication`]), the primary goes on
    /// acknowledging for `lag`, is killed, the cluster promotes the replica
    /// (asked to, if it has not by [`ClusterTuning::force_after`]; its
    /// bogus replication credentials are then cleared), and the killed
    /// server comes back as its replica. Answers how long the slot had no
    /// primary (from the kill until every node named the new one).
    ///
    /// # Errors
    /// [`FailoverError::NotPromoted`] when the cluster made no promotion
    /// within 90 s (the cluster is then put back as it was: the killed
    /// primary started again, its replica following it); any other failed
    /// step is [`FailoverError::Failed`].
    pub fn fail_over(&mut self, key: &str, lag: Duration) -> Result<Failover, FailoverError> {
        let primary = self.primary_of(key)?;
        let replica = self.cut_replication(primary)?;
        std::thread::sleep(lag);
        let killed = Instant::now();
        self.kill_primary(primary)?;
        match self.await_promotion(key, primary, PROMOTION_WAIT) {
            Ok((new, forced)) => {
                let down = killed.elapsed();
                for name in ["masteruser", "masterauth"] {
                    expect_ok(command(new, &["CONFIG", "SET", name, ""])?)?;
                }
                self.restart_killed()?;
                Ok(Failover { down, forced })
            }
            Err(why) => {
                let why = format!("none within {PROMOTION_WAIT:?} of the kill: {why}");
                self.put_back(replica).map_err(|e| {
                    FailoverError::Failed(format!("{why}\nputting the cluster back failed: {e}"))
                })?;
                Err(FailoverError::NotPromoted(why))
            }
        }
    }

    /// `CLUSTER NODES` of the server at `addr`, as text.
    ///
    /// # Errors
    /// It did not answer with the text.
    pub fn cluster_nodes(&self, addr: SocketAddr) -> Result<String, String> {
        cluster_nodes(addr)
    }

    /// `INFO replication` of the server at `addr`.
    ///
    /// # Errors
    /// It did not answer with the text.
    pub fn info_replication(&self, addr: SocketAddr) -> Result<String, String> {
        info_replication(addr)
    }

    /// One command to the server at `addr`, on a fresh connection (a key
    /// of another node's slot answers `MOVED`).
    ///
    /// # Errors
    /// No connection, or no readable reply.
    pub fn command(&self, addr: SocketAddr, args: &[&str]) -> Result<Reply, String> {
        command(addr, args)
    }

    /// The last lines of the log of the server at `addr`, for failure
    /// messages.
    pub fn log_tail(&self, addr: SocketAddr, lines: usize) -> String {
        let Some(node) = self.nodes.iter().find(|n| n.addr() == addr) else {
            return String::new();
        };
        let text = std::fs::read_to_string(node.dir.join("log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for ClusterTopology {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The CLI beside the server binary: `valkey-cli` beside `valkey-server`,
/// `redis-cli` beside `redis-server`.
fn cli_beside(bin: &std::path::Path) -> Result<PathBuf, String> {
    let name = bin
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .replace("-server", "-cli");
    let cli = bin.with_file_name(&name);
    if cli.is_file() {
        Ok(cli)
    } else {
        Err(format!(
            "no {name} beside {} to create the cluster",
            bin.display()
        ))
    }
}

fn cluster_info(addr: SocketAddr) -> Result<String, String> {
    match command(addr, &["CLUSTER", "INFO"])? {
        Reply::Bulk(Some(text)) => Ok(text),
        other => Err(format!("CLUSTER INFO on {addr}: {other:?}")),
    }
}

fn cluster_nodes(addr: SocketAddr) -> Result<String, String> {
    match command(addr, &["CLUSTER", "NODES"])? {
        Reply::Bulk(Some(text)) => Ok(text),
        other => Err(format!("CLUSTER NODES on {addr}: {other:?}")),
    }
}

/// The nodes `addr` knows, from its `CLUSTER NODES`: `<id> <ip:port@bus[,
/// hostname]> <flags> <primary id or -> <ping> <pong> <epoch> <link>
/// <slot ranges…>`.
fn views(addr: SocketAddr) -> Result<Vec<View>, String> {
    let text = cluster_nodes(addr)?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                return Err(format!("CLUSTER NODES line {line:?}"));
            }
            let addr_text = f[1].split(['@', ',']).next().unwrap_or_default();
            let addr: SocketAddr = addr_text
                .parse()
                .map_err(|e| format!("{addr_text:?} in {line:?}: {e}"))?;
            let flags: Vec<&str> = f[2].split(',').collect();
            let ranges = f[8..]
                .iter()
                .filter(|r| !r.starts_with('['))
                .filter_map(|r| match r.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => r.parse().ok().map(|n| (n, n)),
                })
                .collect();
            Ok(View {
                id: f[0].to_owned(),
                addr,
                primary: flags.contains(&"master"),
                failed: flags.iter().any(|x| *x == "fail" || *x == "noaddr"),
                primary_id: (f[3] != "-").then(|| f[3].to_owned()),
                ranges,
            })
        })
        .collect()
}

/// The live primary serving `slot` in a node's view.
fn primary_in(views: &[View], slot: u16) -> Option<&View> {
    views
        .iter()
        .find(|n| n.primary && !n.failed && n.ranges.iter().any(|&(a, b)| a <= slot && slot <= b))
}
