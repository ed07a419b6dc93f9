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
//!   `failover-timeout 3000`, set up for a loaded machine
//!   ([`SentinelTuning::LOADED_MACHINE`], see "On a loaded machine" below).
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
//! # On a loaded machine
//!
//! A Sentinel whose timer runs more than 2 s late (its process starved of
//! CPU, or blocked on a slow disk: it fsyncs its configuration after every
//! vote) enters TILT mode: for 30 s it acts on nothing, tells the others the
//! primary is not down (so two of three in TILT mode make no quorum), and
//! turns no old primary that comes back into a replica. On a loaded machine
//! the Sentinels then make no promotion for minutes. TILT mode is what
//! keeps a Sentinel from acting on what it saw before a stall, so the
//! topology keeps its trigger and shortens it to 5 s (`SENTINEL DEBUG
//! tilt-period`, Redis 7.0 and later, Valkey). It also gives the third
//! Sentinel a longer `down-after-milliseconds` (4 s, the others 2 s), so
//! that it votes for one of the first two instead of all three standing at
//! once and splitting their votes; asks a Sentinel not in TILT mode for the
//! failover (`SENTINEL FAILOVER`, which needs no election) when none came
//! 20 s after the kill; and brings a killed primary back as a replica of
//! the new one itself. A failover the Sentinels still do not make within
//! 90 s is [`FailoverError::NotPromoted`], with what each Sentinel was
//! doing, and the topology is put back as it was.
//!
//! Measured with `cargo xtask measure sentinel-failovers`: Valkey 8.1, the
//! same failover (replication cut, 500 ms of writes the replica misses, the
//! primary killed) on a topology per tuning in turn, beside two CPU-bound
//! processes (the machine's load 12 to 18, other work included); promoted
//! out of attempts, and the time without a primary (median / longest):
//!
//! | | [`SentinelTuning::PLAIN`] (before) | [`SentinelTuning::LOADED_MACHINE`] |
//! |---|---|---|
//! | `--rounds 10` | 10 of 10, 3.3 s / 3.6 s | 10 of 10, 3.5 s / 10.9 s |
//! | `--rounds 10 --stall-ms 2500`: the Sentinels also stopped 2.5 s every 10 s | 1 of 10: 9 without a promotion in 90 s, every Sentinel in TILT mode | 10 of 10, 3.4 s / 11.7 s |
//!
//! No failover needed asking for. With the TILT trigger raised to 30 s
//! instead of TILT mode shortened, 11 of 12 stalled failovers went through;
//! in the twelfth the Sentinels failed over a second time, to the restarted
//! old primary (a stalled Sentinel taking the new one for down, which TILT
//! mode is there to prevent).
//!
//! (A Sentinel promotes no replica whose link to the primary has been down
//! for more than ten times `down-after-milliseconds` beyond the time the
//! primary has been seen down: with 1000, one run on a loaded machine here
//! saw no promotion within 60 s of a kill, for a replica cut off by
//! [`SentinelTopology::cut_replication`]; 2000 doubles that allowance.)
//!
//! Blocking std code, like [`crate::servers`]: call it from
//! `tokio::task::block_in_place` or `spawn_blocking` in async tests.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Failover, FailoverError};
use crate::servers::{self, ServerKind, StartError};

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

/// How long a Sentinel may take to answer a question about its state
/// while a failover is waited for; one that does not is asked again at the
/// next look (a stopped Sentinel would hold each look for the full command
/// timeout).
const LOOK_WAIT: Duration = Duration::from_secs(2);

/// How the three Sentinels are set up, and what
/// [`SentinelTopology::wait_promoted`] does while they make no promotion
/// (see the module documentation for what was measured).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SentinelTuning {
    /// Each Sentinel's `down-after-milliseconds`, in order.
    pub down_after: [Duration; 3],
    /// Every Sentinel's `failover-timeout`: how long a failover may take,
    /// the wait for the votes of an election (at most 10 s), and half the
    /// time before a Sentinel tries again.
    pub failover_timeout: Duration,
    /// `SENTINEL DEBUG tilt-trigger`: a Sentinel whose timer runs this much
    /// late (its process starved or blocked) enters TILT mode. `None`:
    /// Sentinel's own, 2 s.
    pub tilt_trigger: Option<Duration>,
    /// `SENTINEL DEBUG tilt-period`: how long a Sentinel in TILT mode acts
    /// on nothing. `None`: Sentinel's own, 30 s.
    pub tilt_period: Option<Duration>,
    /// How long after the wait for a promotion began, with no Sentinel
    /// naming another primary, a Sentinel that is not in TILT mode is
    /// asked for one (`SENTINEL FAILOVER`, which needs no election); asked
    /// again every `2 × failover_timeout` while none comes. `None`: never.
    pub force_after: Option<Duration>,
    /// How long [`SentinelTopology::fail_over`] waits for a promotion before
    /// it puts the topology back and answers
    /// [`FailoverError::NotPromoted`].
    pub promotion_wait: Duration,
}

impl SentinelTuning {
    /// Sentinel's own TILT timings, one `down-after-milliseconds` for all,
    /// and no promotion asked for: what the topology ran with before it was
    /// measured on a loaded machine, kept to measure against.
    pub const PLAIN: Self = Self {
        down_after: [Duration::from_secs(2); 3],
        failover_timeout: Duration::from_secs(3),
        tilt_trigger: None,
        tilt_period: None,
        force_after: None,
        promotion_wait: Duration::from_secs(90),
    };

    /// The topology's settings (see the module documentation).
    pub const LOADED_MACHINE: Self = Self {
        down_after: [
            Duration::from_secs(2),
            Duration::from_secs(2),
            Duration::from_secs(4),
        ],
        failover_timeout: Duration::from_secs(3),
        tilt_trigger: None,
        tilt_period: Some(Duration::from_secs(5)),
        force_after: Some(Duration::from_secs(20)),
        promotion_wait: Duration::from_secs(90),
    };
}

impl Default for SentinelTuning {
    fn default() -> Self {
        Self::LOADED_MACHINE
    }
}

/// A primary, one replica and three Sentinels on loopback (see the module
/// documentation). Dropping it kills every process and removes its files.
pub struct SentinelTopology {
    bin: PathBuf,
    dir: PathBuf,
    tuning: SentinelTuning,
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
    /// Sentinel from the same binary), tuned for a loaded machine
    /// ([`SentinelTuning::LOADED_MACHINE`]), and waits until it is ready for
    /// a failover (see the module documentation).
    pub fn start(kind: ServerKind) -> Result<Self, String> {
        Self::start_tuned(kind, SentinelTuning::default())
    }

    /// [`SentinelTopology::start`] with the Sentinels set up by `tuning`.
    /// Starts again on other ports when another process takes one first.
    pub fn start_tuned(kind: ServerKind, tuning: SentinelTuning) -> Result<Self, String> {
        let bin = servers::find_binary(kind)
            .ok_or_else(|| format!("no {kind} binary for Sentinel; {}", kind.install_hint()))?;
        servers::retry_on_taken_port("the Sentinel topology", || Self::start_once(&bin, tuning))
    }

    /// [`SentinelTopology::start_tuned`] on ports drawn once.
    fn start_once(bin: &Path, tuning: SentinelTuning) -> Result<Self, StartError> {
        let dir = servers::private_dir("sentinel")?;
        let ports = servers::free_ports(5)?;
        let mut topology = Self {
            bin: bin.to_path_buf(),
            dir,
            tuning,
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
                     sentinel down-after-milliseconds {service} {}\n\
                     sentinel failover-timeout {service} {}\n",
                    node_dir.display(),
                    tuning.down_after[i].as_millis(),
                    tuning.failover_timeout.as_millis()
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
            topology.tune(i)?;
        }
        topology.wait_ready()?;
        Ok(topology)
    }

    /// Sets the TILT timings of Sentinel `i` (`SENTINEL DEBUG`, which
    /// Redis 7.0 and later and Valkey have; they last until it restarts).
    fn tune(&self, i: usize) -> Result<(), String> {
        let millis = |d: Duration| d.as_millis().to_string();
        let mut args = vec!["SENTINEL".to_owned(), "DEBUG".to_owned()];
        for (name, value) in [
            ("tilt-trigger", self.tuning.tilt_trigger),
            ("tilt-period", self.tuning.tilt_period),
        ] {
            if let Some(value) = value {
                args.extend([name.to_owned(), millis(value)]);
            }
        }
        if args.len() == 2 {
            return Ok(());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        expect_ok(command(self.sentinels[i].addr(), &args)?)
            .map_err(|e| format!("{args:?} on Sentinel {i}: {e}"))
    }

    fn spawn_server(&mut self, i: usize) -> Result<(), StartError> {
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

    /// The Sentinels' processes (to starve them, as a loaded machine does).
    pub fn sentinel_pids(&self) -> Vec<u32> {
        self.sentinels
            .iter()
            .filter_map(|s| s.child.as_ref().map(Child::id))
            .collect()
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
    /// and remembers it as the primary. While no Sentinel names another than the
    /// old primary [`SentinelTuning::force_after`] into the wait, a Sentinel
    /// not in TILT mode is asked for the failover (`SENTINEL FAILOVER`).
    ///
    /// # Errors
    /// No promotion within `timeout`: the message says what each Sentinel
    /// named and was doing, and how their logs end.
    pub fn wait_promoted(&mut self, timeout: Duration) -> Result<SocketAddr, String> {
        self.await_promotion(timeout)
            .map(|(new, _)| new)
            .map_err(|why| format!("no promotion within {timeout:?}: {why}"))
    }

    /// [`SentinelTopology::wait_promoted`]; also whether a failover was
    /// asked for before the promotion came.
    fn await_promotion(&mut self, timeout: Duration) -> Result<(SocketAddr, bool), String> {
        let old = self.primary_addr();
        let started = Instant::now();
        let deadline = started + timeout;
        let mut next_ask = self.tuning.force_after.map(|after| started + after);
        let mut asked = Vec::new();
        let mut forced = false;
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
                return Ok((*new, forced));
            }
            let now = Instant::now();
            if let Some(at) = next_ask
                && now >= at
            {
                // A promotion some Sentinel already made is left to spread
                // (one that does not answer names none).
                if named.iter().all(|n| n.is_none_or(|n| n == old)) {
                    let answer = self.ask_for_failover();
                    forced |= answer.is_ok();
                    asked.push(format!(
                        "after {:.1} s: {}",
                        (now - started).as_secs_f64(),
                        answer.unwrap_or_else(|e| e)
                    ));
                }
                next_ask = Some(now + 2 * self.tuning.failover_timeout);
            }
            if now > deadline {
                return Err(format!(
                    "the Sentinels name {named:?} (the old primary was {old}); {}; asked for \
                     a failover: {}\n{}",
                    self.sentinel_states(),
                    if asked.is_empty() {
                        "never".to_owned()
                    } else {
                        asked.join("; ")
                    },
                    self.sentinel_logs(8)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Asks the first Sentinel not in TILT mode for a failover (`SENTINEL
    /// FAILOVER`): which one accepted, or what each answered.
    fn ask_for_failover(&self) -> Result<String, String> {
        let mut answers = Vec::new();
        for (i, s) in self.sentinels.iter().enumerate() {
            if in_tilt(s.addr()) != Some(false) {
                answers.push(format!("sentinel{i} in TILT mode or not answering"));
                continue;
            }
            match command(s.addr(), &["SENTINEL", "FAILOVER", Self::SERVICE]) {
                Ok(Reply::Status(ok)) if ok == "OK" => {
                    return Ok(format!("SENTINEL FAILOVER accepted by sentinel{i}"));
                }
                // `-INPROG`: a failover is under way; `-NOGOODSLAVE`: it
                // sees no replica it may promote.
                Ok(other) => answers.push(format!("sentinel{i} answered {other:?}")),
                Err(e) => answers.push(format!("sentinel{i}: {e}")),
            }
        }
        Err(answers.join(", "))
    }

    /// What each Sentinel says of itself and of the primary: TILT mode, the
    /// primary's flags and failover state.
    fn sentinel_states(&self) -> String {
        self.sentinels
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let tilt = match in_tilt(s.addr()) {
                    Some(true) => "in TILT mode",
                    Some(false) => "not in TILT mode",
                    None => "not answering",
                };
                match sentinel_master(s.addr()) {
                    Ok(master) => format!(
                        "sentinel{i} {tilt}, flags {}, failover {}",
                        field(&master, "flags").unwrap_or("?"),
                        field(&master, "failover-state").unwrap_or("none under way")
                    ),
                    Err(_) => format!("sentinel{i} {tilt}"),
                }
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The last `lines` lines of every Sentinel's log.
    fn sentinel_logs(&self, lines: usize) -> String {
        (0..self.sentinels.len())
            .map(|i| {
                let name = format!("sentinel{i}");
                format!("{name}'s log ends:\n{}", self.log_tail(&name, lines))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Takes the primary the Sentinels agree on, if that server answers as
    /// one, as the primary: a failover the Sentinels made on their own (a
    /// primary starved on a loaded machine looks down) is followed.
    fn follow_sentinels(&mut self) {
        let named: Vec<Option<SocketAddr>> = self
            .sentinels
            .iter()
            .map(|s| master_addr(s.addr()).ok())
            .collect();
        if let Some(Some(now)) = named.first()
            && named.iter().all(|n| n.as_ref() == Some(now))
            && info_replication(*now).is_ok_and(|i| info_field(&i, "role") == Some("master"))
            && let Some(i) = self.servers.iter().position(|n| n.addr() == *now)
        {
            self.primary = i;
        }
    }

    /// Starts again every data server [`SentinelTopology::kill_primary`]
    /// killed, on its own files, as a replica of the current primary (as an
    /// operator brings a failed primary back), and waits until every
    /// Sentinel names one primary that answers as one, with the other server
    /// its replica, link up (a failover the Sentinels made meanwhile is
    /// followed): the topology can fail over again.
    /// (Left to the Sentinels, an old primary that comes back serves as a
    /// primary until one of them turns it into a replica, which none does
    /// while in TILT mode.)
    ///
    /// # Errors
    /// A server did not start, or the topology did not settle within two
    /// minutes.
    pub fn restart_killed(&mut self) -> Result<(), String> {
        for i in 0..self.servers.len() {
            if self.servers[i].child.is_some() {
                continue;
            }
            let primary = self.primary_addr();
            let args = self.servers[i].args.clone();
            self.servers[i].args = with_primary(&args, Some(primary));
            let started = self.spawn_server(i);
            self.servers[i].args = args;
            started?;
        }
        self.settle("a killed server started again as a replica")
    }

    /// Waits until every Sentinel names one primary, that server answers
    /// as one, and the other is its replica with its link up; takes that
    /// primary as the primary. (Another failover the Sentinels make
    /// meanwhile, a starved primary looking down, is followed.)
    fn settle(&mut self, after: &str) -> Result<(), String> {
        let deadline = Instant::now() + READY_WAIT;
        loop {
            let named: Vec<Option<SocketAddr>> = self
                .sentinels
                .iter()
                .map(|s| master_addr(s.addr()).ok())
                .collect();
            let settled = named.first().copied().flatten().and_then(|primary| {
                let p = self.servers.iter().position(|n| n.addr() == primary)?;
                let other = self.servers[1 - p].addr();
                let replica = info_replication(other).ok()?;
                (named.iter().all(|n| *n == Some(primary))
                    && info_replication(primary)
                        .is_ok_and(|i| info_field(&i, "role") == Some("master"))
                    && info_field(&replica, "role") == Some("slave")
                    && info_field(&replica, "master_link_status") == Some("up")
                    && info_field(&replica, "master_port")
                        == Some(primary.port().to_string().as_str()))
                .then_some(p)
            });
            if let Some(p) = settled {
                self.primary = p;
                return Ok(());
            }
            if Instant::now() > deadline {
                let infos: Vec<String> = self
                    .servers
                    .iter()
                    .map(|n| {
                        let info = info_replication(n.addr()).unwrap_or_default();
                        format!(
                            "{} role {}, link {}",
                            n.addr(),
                            info_field(&info, "role").unwrap_or("?"),
                            info_field(&info, "master_link_status").unwrap_or("-")
                        )
                    })
                    .collect();
                return Err(format!(
                    "the topology did not settle within {READY_WAIT:?} after {after}: the \
                     Sentinels name {named:?}; {}; {}",
                    infos.join(", "),
                    self.sentinel_states()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Clears the replication credentials [`SentinelTopology::cut_replication`]
    /// gave the server at `addr`, so that it can follow a primary again.
    fn clear_credentials(addr: SocketAddr) -> Result<(), String> {
        for name in ["masteruser", "masterauth"] {
            expect_ok(command(addr, &["CONFIG", "SET", name, ""])?)
                .map_err(|e| format!("clearing {name} on {addr}: {e}"))?;
        }
        Ok(())
    }

    /// Puts the topology back as it was before a failover that made no
    /// promotion: the replica's replication credentials are cleared, the
    /// killed primary `killed` starts again as a primary (without the
    /// `--replicaof` it may have started with), and this waits until the
    /// topology settled. (The Sentinels may still promote the replica
    /// meanwhile; then the old primary is what follows.)
    fn put_back(&mut self, killed: usize) -> Result<(), String> {
        Self::clear_credentials(self.servers[1 - killed].addr())?;
        let args = self.servers[killed].args.clone();
        self.servers[killed].args = with_primary(&args, None);
        let started = self.spawn_server(killed);
        self.servers[killed].args = args;
        started?;
        self.settle("the killed primary started again")
    }

    /// The failover a crash makes, with the replica `lag` behind: the
    /// replica stops receiving ([`SentinelTopology::cut_replication`]), the
    /// primary goes on acknowledging for `lag`, is killed, the Sentinels
    /// promote the replica (asked to, if they have not by
    /// [`SentinelTuning::force_after`]), and the killed server comes back
    /// as the new replica.
    ///
    /// # Errors
    /// [`FailoverError::NotPromoted`] when the Sentinels made no promotion
    /// within [`SentinelTuning::promotion_wait`] (the topology is then put
    /// back as it was: the killed primary started again, its replica
    /// following it); any other failed step is [`FailoverError::Failed`].
    pub fn fail_over(&mut self, lag: Duration) -> Result<Failover, FailoverError> {
        self.follow_sentinels();
        self.cut_replication()?;
        std::thread::sleep(lag);
        let killed = Instant::now();
        let victim = self.primary;
        self.kill_primary()?;
        let wait = self.tuning.promotion_wait;
        match self.await_promotion(wait) {
            Ok((new, forced)) => {
                let down = killed.elapsed();
                // It may be made a replica again by a later failover.
                Self::clear_credentials(new)?;
                self.restart_killed()?;
                Ok(Failover { down, forced })
            }
            Err(why) => {
                let why = format!("none within {wait:?} of the kill: {why}");
                self.put_back(victim).map_err(|e| {
                    FailoverError::Failed(format!("{why}\nputting the topology back failed: {e}"))
                })?;
                Err(FailoverError::NotPromoted(why))
            }
        }
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

/// A data server's arguments `args` with `--replicaof` naming `primary`,
/// or without it (`None`: it starts as a primary).
fn with_primary(args: &[String], primary: Option<SocketAddr>) -> Vec<String> {
    let mut args = match args.iter().position(|a| a == "--replicaof") {
        Some(at) => [&args[..at], &args[(at + 2).min(args.len())..]].concat(),
        None => args.to_vec(),
    };
    if let Some(p) = primary {
        args.extend(["--replicaof".to_owned(), format!("{} {}", p.ip(), p.port())]);
    }
    args
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

/// Waits until the process listens on its port (its own socket: another
/// process may have taken the port first) and answers `PING` (its data
/// loaded).
pub(super) fn wait_pong(node: &mut Node) -> Result<(), StartError> {
    let child = node.child.as_mut().ok_or("no process to wait for")?;
    let log = node.dir.join("log");
    servers::wait_listening(child, node.port, READY_WAIT, &log)
        .map_err(|e| e.map(|what| format!("{:?}: {what}", node.args)))?;
    let deadline = Instant::now() + READY_WAIT;
    loop {
        if matches!(command(node.addr(), &["PING"]), Ok(Reply::Status(s)) if s == "PONG") {
            return Ok(());
        }
        if let Some(child) = node.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(StartError::from_log(
                format!("{:?} exited with {status}: {log}", node.args),
                &log,
            ));
        }
        if Instant::now() > deadline {
            return Err(format!("no PONG on {} within {READY_WAIT:?}", node.addr()).into());
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
    match command_within(
        addr,
        &["SENTINEL", "MASTER", SentinelTopology::SERVICE],
        LOOK_WAIT,
    )? {
        Reply::Array(Some(items)) => Ok(items
            .iter()
            .map(|i| i.text().unwrap_or_default().to_owned())
            .collect()),
        other => Err(format!("SENTINEL MASTER on {addr}: {other:?}")),
    }
}

/// Whether the Sentinel at `addr` is in TILT mode (`sentinel_tilt` of
/// `INFO sentinel`); `None` when it does not say.
fn in_tilt(addr: SocketAddr) -> Option<bool> {
    match command_within(addr, &["INFO", "sentinel"], LOOK_WAIT).ok()? {
        Reply::Bulk(Some(info)) => match info_field(&info, "sentinel_tilt")? {
            "0" => Some(false),
            _ => Some(true),
        },
        _ => None,
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
    match command_within(
        sentinel,
        &[
            "SENTINEL",
            "GET-MASTER-ADDR-BY-NAME",
            SentinelTopology::SERVICE,
        ],
        LOOK_WAIT,
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
    command_within(addr, args, Duration::from_secs(10))
}

/// [`command`], its reply awaited for `wait` at most.
fn command_within(addr: SocketAddr, args: &[&str], wait: Duration) -> Result<Reply, String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("{addr}: {e}"))?;
    let _ = stream.set_read_timeout(Some(wait));
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
