//! Valkey/Redis: a primary, a replica and three Sentinels.
//!
//! [`SentinelTopology::start`] starts, on free loopback ports and each in a
//! private directory under the system's temp dir:
//!
//! - a primary and one replica (`--replicaof`), both durable (the
//!   append-only file fsynced before every reply: `--appendonly yes
//!   --appendfsync always`, no snapshots), so that whatever a failover loses
//!   is lost by the replication, never by a restart;
//! - three Sentinels (`<server> sentinel.conf --sentinel`) watching the
//!   primary under the service name [`SentinelTopology::SERVICE`], quorum 2,
//!   `down-after-milliseconds 2000`, `failover-timeout 3000`.
//!   (A Sentinel promotes no replica whose link to the primary has been down
//!   for more than ten times `down-after-milliseconds` beyond the time the
//!   primary has been seen down, and a Sentinel starved by a loaded machine
//!   enters TILT mode and does nothing for 30 s. With 1000, one run on a
//!   loaded machine here saw no promotion within 60 s of a kill, for a
//!   replica cut off by [`SentinelTopology::cut_replication`]; 2000 doubles
//!   that allowance, at the cost of a second more before a failover.)
//!
//! It returns once the replica is in sync and every Sentinel knows the
//! replica and the two other Sentinels, so that a failover can be made at
//! once. Every process is killed (SIGKILL) and the directory removed when
//! the handle is dropped.
//!
//! Clients find the primary the way users' clients do, through the
//! Sentinels ([`SentinelTopology::sentinel_url`], as `fred` reads it). A
//! test makes the failover happen ([`SentinelTopology::kill_primary`],
//! [`SentinelTopology::failover`]), waits for it
//! ([`SentinelTopology::wait_promoted`]), and can make the replica miss
//! writes first ([`SentinelTopology::cut_replication`]).
//!
//! Measured on Valkey 8.1 here: after `SENTINEL FAILOVER` the old primary
//! keeps answering writes as a primary for about 10 s (until a Sentinel's
//! next `INFO` of it turns it into a replica); clients still connected to it
//! keep writing there meanwhile.
//!
//! Blocking std code, like [`crate::servers`]: call it from
//! `tokio::task::block_in_place` or `spawn_blocking` in async tests.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::servers::{self, ServerKind};

/// How long a process of the topology may take to be ready (loaded machine).
pub(super) const READY_WAIT: Duration = Duration::from_secs(120);

/// One process: a data server or a Sentinel.
pub(super) struct Node {
    pub(super) port: u16,
    pub(super) dir: PathBuf,
    pub(super) args: Vec<String>,
    pub(super) child: Option<Child>,
}

impl Node {
    pub(super) fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

/// A primary, one replica and three Sentinels on loopback (see the module
/// documentation). Dropping it kills every process and removes its files.
pub struct SentinelTopology {
    bin: PathBuf,
    dir: PathBuf,
    /// The two data servers: index 0 started as the primary, 1 as its
    /// replica.
    servers: Vec<Node>,
    sentinels: Vec<Node>,
    /// The index in `servers` of the primary as last known (at start, or
    /// after [`SentinelTopology::wait_promoted`]).
    primary: usize,
}

/// A RESP reply, as far as these tests read them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+OK` and other simple strings.
    Status(String),
    /// `-ERR ...`.
    Error(String),
    /// `:n`.
    Integer(i64),
    /// A bulk string (`None`: nil).
    Bulk(Option<String>),
    /// An array (`None`: nil).
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The text of a status or bulk string.
    pub fn text(&self) -> Option<&str> {
        match self {
            Self::Status(s) | Self::Bulk(Some(s)) => Some(s),
            _ => None,
        }
    }
}

impl SentinelTopology {
    /// The Sentinels' name for the primary (`sentinelServiceName`).
    pub const SERVICE: &'static str = "leasehold";

    /// Starts the topology with `kind`'s server binary (found as
    /// [`servers::find_binary`] finds it; Valkey 8 and Redis 7/8 all run
    /// Sentinel from the same binary) and waits until it is ready for a
    /// failover (see the module documentation).
    pub fn start(kind: ServerKind) -> Result<Self, String> {
        let bin = servers::find_binary(kind)
            .ok_or_else(|| format!("no {kind} binary for Sentinel; {}", kind.install_hint()))?;
        let dir = std::env::temp_dir().join(format!(
            "leasehold-sentinel-{}-{}",
            std::process::id(),
            servers::free_port()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let ports = servers::free_ports(5)?;
        let mut topology = Self {
            bin,
            dir,
            servers: Vec::new(),
            sentinels: Vec::new(),
            primary: 0,
        };
        let primary_port = ports[0];
        for (i, &port) in ports[..2].iter().enumerate() {
            let node_dir = topology.dir.join(format!("server{i}"));
            std::fs::create_dir_all(&node_dir).map_err(|e| e.to_string())?;
            let mut args: Vec<String> = [
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
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
            if i == 1 {
                args.extend(["--replicaof".into(), format!("127.0.0.1 {primary_port}")]);
            }
            topology.servers.push(Node {
                port,
                dir: node_dir,
                args,
                child: None,
            });
        }
        for (i, &port) in ports[2..].iter().enumerate() {
            let node_dir = topology.dir.join(format!("sentinel{i}"));
            std::fs::create_dir_all(&node_dir).map_err(|e| e.to_string())?;
            let conf = node_dir.join("sentinel.conf");
            let service = Self::SERVICE;
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {}\n\
                     sentinel monitor {service} 127.0.0.1 {primary_port} 2\n\
                     sentinel down-after-milliseconds {service} 2000\n\
                     sentinel failover-timeout {service} 3000\n",
                    node_dir.display()
                ),
            )
            .map_err(|e| format!("{}: {e}", conf.display()))?;
            topology.sentinels.push(Node {
                port,
                dir: node_dir,
                args: vec![conf.display().to_string(), "--sentinel".into()],
                child: None,
            });
        }
        for i in 0..2 {
            topology.spawn_server(i)?;
        }
        for i in 0..3 {
            spawn(&topology.bin, &mut topology.sentinels[i])?;
            wait_pong(&mut topology.sentinels[i])?;
        }
        topology.wait_ready()?;
        Ok(topology)
    }

    fn spawn_server(&mut self, i: usize) -> Result<(), String> {
        spawn(&self.bin, &mut self.servers[i])?;
        wait_pong(&mut self.servers[i])
    }

    /// Waits until the replica is in sync and every Sentinel knows the
    /// replica and the two other Sentinels.
    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + READY_WAIT;
        let replica = self.servers[1].addr();
        loop {
            let synced = info_replication(replica)
                .is_ok_and(|info| info_field(&info, "master_link_status") == Some("up"));
            let known = synced
                && self.sentinels.iter().all(|s| {
                    sentinel_master(s.addr()).is_ok_and(|fields| {
                        field(&fields, "num-slaves") == Some("1")
                            && field(&fields, "num-other-sentinels") == Some("2")
                    })
                });
            if known {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the Sentinel topology in {} was not ready within {READY_WAIT:?} (replica \
                     synced: {synced})",
                    self.dir.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The URL a client reads to find the primary through the Sentinels, as
    /// `fred` reads it: `redis-sentinel://127.0.0.1:S1?sentinelServiceName=
    /// leasehold&node=127.0.0.1:S2&node=127.0.0.1:S3`.
    pub fn sentinel_url(&self) -> String {
        let mut url = format!(
            "redis-sentinel://{}?sentinelServiceName={}",
            self.sentinels[0].addr(),
            Self::SERVICE
        );
        for s in &self.sentinels[1..] {
            url.push_str(&format!("&node={}", s.addr()));
        }
        url
    }

    /// The Sentinels' addresses.
    pub fn sentinel_addrs(&self) -> Vec<SocketAddr> {
        self.sentinels.iter().map(Node::addr).collect()
    }

    /// The primary's address as last known (at start, or as
    /// [`SentinelTopology::wait_promoted`] found it).
    pub fn primary_addr(&self) -> SocketAddr {
        self.servers[self.primary].addr()
    }

    /// `redis://` URL of the primary as last known (a direct connection,
    /// which a failover does not follow).
    pub fn primary_url(&self) -> String {
        format!("redis://{}", self.primary_addr())
    }

    /// The replica's address as last known.
    pub fn replica_addr(&self) -> SocketAddr {
        self.servers[1 - self.primary].addr()
    }

    /// Makes the replica stop receiving the primary's writes, while it stays
    /// up and answers the Sentinels (so that it can still be promoted): the
    /// replica is given credentials the primary does not know (`masteruser`,
    /// `masterauth`), and the primary drops its replica connections (`CLIENT
    /// KILL TYPE replica`), so the replica's reconnections fail
    /// authentication. Returns once the replica reports its link down:
    /// every write the primary acknowledges after that is missing on the
    /// replica. (A replica frozen with SIGSTOP would miss them too, but
    /// would answer no Sentinel and so could not be picked by `SENTINEL
    /// FAILOVER`.)
    pub fn cut_replication(&self) -> Result<(), String> {
        let replica = self.replica_addr();
        for (name, value) in [
            ("masteruser", "leasehold-no-such-user"),
            ("masterauth", "x"),
        ] {
            expect_ok(command(replica, &["CONFIG", "SET", name, value])?)?;
        }
        command(self.primary_addr(), &["CLIENT", "KILL", "TYPE", "replica"])?;
        let deadline = Instant::now() + READY_WAIT;
        loop {
            let info = info_replication(replica)?;
            if info_field(&info, "master_link_status") == Some("down") {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("the replica {replica} kept its link up: {info}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the primary as last known (SIGKILL); returns its address.
    /// The Sentinels then find it down after `down-after-milliseconds` and
    /// promote the replica.
    pub fn kill_primary(&mut self) -> Result<SocketAddr, String> {
        let node = &mut self.servers[self.primary];
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            child
                .wait()
                .map_err(|e| format!("waiting for the killed primary: {e}"))?;
        }
        Ok(node.addr())
    }

    /// Asks the first Sentinel for a failover (`SENTINEL FAILOVER`): the
    /// replica is promoted without asking the others, and the old primary
    /// keeps running (see the module documentation).
    pub fn failover(&self) -> Result<(), String> {
        expect_ok(command(
            self.sentinels[0].addr(),
            &["SENTINEL", "FAILOVER", Self::SERVICE],
        )?)
    }

    /// Waits until every Sentinel names another primary than the one last
    /// known, and that server answers `role:master`; returns its address
    /// and remembers it as the primary.
    pub fn wait_promoted(&mut self, timeout: Duration) -> Result<SocketAddr, String> {
        let old = self.primary_addr();
        let deadline = Instant::now() + timeout;
        loop {
            let named: Vec<Option<SocketAddr>> = self
                .sentinels
                .iter()
                .map(|s| master_addr(s.addr()).ok())
                .collect();
            if let Some(Some(new)) = named.first()
                && *new != old
                && named.iter().all(|n| n.as_ref() == Some(new))
                && info_replication(*new)
                    .is_ok_and(|info| info_field(&info, "role") == Some("master"))
            {
                self.primary = self
                    .servers
                    .iter()
                    .position(|n| n.addr() == *new)
                    .ok_or_else(|| format!("the Sentinels name {new}, not one of ours"))?;
                return Ok(*new);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "no promotion within {timeout:?}: the Sentinels name {named:?} (the old \
                     primary was {old}); the first Sentinel's log ends:\n{}",
                    self.log_tail("sentinel0", 15)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts again every data server [`SentinelTopology::kill_primary`]
    /// killed, on its own files, and waits until the Sentinels made it a
    /// replica of the current primary and its link is up: the topology can
    /// fail over again. (It starts with the arguments it first had; the
    /// Sentinels turn an old primary that comes back into a replica.)
    ///
    /// # Errors
    /// A server did not start, or did not replicate within two minutes.
    pub fn restart_killed(&mut self) -> Result<(), String> {
        for i in 0..self.servers.len() {
            if self.servers[i].child.is_some() {
                continue;
            }
            self.spawn_server(i)?;
            let addr = self.servers[i].addr();
            let deadline = Instant::now() + READY_WAIT;
            loop {
                let info = info_replication(addr).unwrap_or_default();
                if info_field(&info, "role") == Some("slave")
                    && info_field(&info, "master_link_status") == Some("up")
                    && info_field(&info, "master_port")
                        == Some(self.primary_addr().port().to_string().as_str())
                {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "the restarted server {addr} did not become a replica of {} within \
                         {READY_WAIT:?}: {info}",
                        self.primary_addr()
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    /// The failover a crash makes, with the replica `lag` behind: the
    /// replica stops receiving ([`SentinelTopology::cut_replication`]), the
    /// primary goes on acknowledging for `lag`, is killed, the Sentinels
    /// promote the replica, and the killed server comes back as the new
    /// replica. Answers how long clients had no primary (from the kill until
    /// every Sentinel named the new one).
    ///
    /// # Errors
    /// A step failed.
    pub fn fail_over(&mut self, lag: Duration) -> Result<Duration, String> {
        self.cut_replication()?;
        std::thread::sleep(lag);
        let killed = Instant::now();
        self.kill_primary()?;
        self.wait_promoted(Duration::from_secs(90))?;
        let down = killed.elapsed();
        self.restart_killed()?;
        Ok(down)
    }

    /// `INFO replication` of the server at `addr`.
    pub fn info_replication(&self, addr: SocketAddr) -> Result<String, String> {
        info_replication(addr)
    }

    /// One command to the process at `addr`, on a fresh connection.
    pub fn command(&self, addr: SocketAddr, args: &[&str]) -> Result<Reply, String> {
        command(addr, args)
    }

    /// The last lines of a process's log (`server0`, `server1`,
    /// `sentinel0`, ...), for failure messages.
    pub fn log_tail(&self, name: &str, lines: usize) -> String {
        let text = std::fs::read_to_string(self.dir.join(name).join("log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for SentinelTopology {
    fn drop(&mut self) {
        for node in self.sentinels.iter_mut().chain(self.servers.iter_mut()) {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(super) fn spawn(bin: &Path, node: &mut Node) -> Result<(), String> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(node.dir.join("log"))
        .map_err(|e| e.to_string())?;
    let err = log.try_clone().map_err(|e| e.to_string())?;
    let child = Command::new(bin)
        .args(&node.args)
        .current_dir(&node.dir)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    node.child = Some(child);
    Ok(())
}

/// Waits until the process answers `PING` (its data loaded).
pub(super) fn wait_pong(node: &mut Node) -> Result<(), String> {
    let deadline = Instant::now() + READY_WAIT;
    loop {
        if matches!(command(node.addr(), &["PING"]), Ok(Reply::Status(s)) if s == "PONG") {
            return Ok(());
        }
        if let Some(child) = node.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            let log = std::fs::read_to_string(node.dir.join("log")).unwrap_or_default();
            return Err(format!("{:?} exited with {status}: {log}", node.args));
        }
        if Instant::now() > deadline {
            return Err(format!("no PONG on {} within {READY_WAIT:?}", node.addr()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(super) fn expect_ok(reply: Reply) -> Result<(), String> {
    match reply {
        Reply::Status(s) if s == "OK" => Ok(()),
        other => Err(format!("expected OK, got {other:?}")),
    }
}

pub(super) fn info_replication(addr: SocketAddr) -> Result<String, String> {
    match command(addr, &["INFO", "replication"])? {
        Reply::Bulk(Some(text)) => Ok(text),
        other => Err(format!("INFO replication on {addr}: {other:?}")),
    }
}

/// A `name:value` line of an `INFO` answer.
pub(super) fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// `SENTINEL MASTER <service>`: its flat list of names and values.
fn sentinel_master(addr: SocketAddr) -> Result<Vec<String>, String> {
    match command(addr, &["SENTINEL", "MASTER", SentinelTopology::SERVICE])? {
        Reply::Array(Some(items)) => Ok(items
            .iter()
            .map(|i| i.text().unwrap_or_default().to_owned())
            .collect()),
        other => Err(format!("SENTINEL MASTER on {addr}: {other:?}")),
    }
}

fn field<'a>(fields: &'a [String], name: &str) -> Option<&'a str> {
    fields
        .chunks(2)
        .find(|kv| kv[0] == name)
        .and_then(|kv| kv.get(1))
        .map(String::as_str)
}

/// The primary a Sentinel names (`SENTINEL GET-MASTER-ADDR-BY-NAME`).
fn master_addr(sentinel: SocketAddr) -> Result<SocketAddr, String> {
    match command(
        sentinel,
        &[
            "SENTINEL",
            "GET-MASTER-ADDR-BY-NAME",
            SentinelTopology::SERVICE,
        ],
    )? {
        Reply::Array(Some(items)) if items.len() == 2 => {
            let host = items[0].text().unwrap_or_default();
            let port = items[1].text().unwrap_or_default();
            format!("{host}:{port}")
                .parse()
                .map_err(|e| format!("{host}:{port}: {e}"))
        }
        other => Err(format!(
            "SENTINEL GET-MASTER-ADDR-BY-NAME on {sentinel}: {other:?}"
        )),
    }
}

/// Sends one command on a fresh connection and reads its reply.
pub(super) fn command(addr: SocketAddr, args: &[&str]) -> Result<Reply, String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("{addr}: {e}"))?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut out = format!("*{}\r\n", args.len());
    for a in args {
        out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    stream
        .write_all(out.as_bytes())
        .map_err(|e| format!("{addr}: {e}"))?;
    read_reply(&mut BufReader::new(stream)).map_err(|e| format!("{addr} {args:?}: {e}"))
}

fn read_reply(r: &mut impl BufRead) -> Result<Reply, String> {
    let mut line = String::new();
    r.read_line(&mut line).map_err(|e| e.to_string())?;
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at_checked(1).ok_or("connection closed")?;
    let number = || rest.parse::<i64>().map_err(|e| format!("{line:?}: {e}"));
    Ok(match kind {
        "+" => Reply::Status(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        ":" => Reply::Integer(number()?),
        "$" => {
            let n = number()?;
            if n < 0 {
                Reply::Bulk(None)
            } else {
                let mut buf = vec![0; n as usize + 2];
                r.read_exact(&mut buf).map_err(|e| e.to_string())?;
                buf.truncate(n as usize);
                Reply::Bulk(Some(String::from_utf8_lossy(&buf).into_owned()))
            }
        }
        "*" => {
            let n = number()?;
            if n < 0 {
                Reply::Array(None)
            } else {
                let items = (0..n).map(|_| read_reply(r)).collect::<Result<_, _>>()?;
                Reply::Array(Some(items))
            }
        }
        _ => return Err(format!("not a RESP reply: {line:?}")),
    })
}
