//! A provided server: where it came from, and what can be done with it
//! (crash, restart, detach).

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Child;

use super::kinds::ServerKind;
use super::processes::Guard;
use super::settings::Settings;

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
    pub(super) settings: Option<Settings>,
    pub(super) guard: Option<Guard>,
}

impl Server {
    /// `host:port` of the server, for the fault proxy.
    pub fn addr(&self) -> Option<SocketAddr> {
        let rest = self.url.split_once("://")?.1;
        let host_port = rest.rsplit_once('@').map_or(rest, |(_, hp)| hp);
        let host_port = host_port.split(['/', '?']).next()?;
        std::net::ToSocketAddrs::to_socket_addrs(host_port)
            .ok()?
            .next()
    }

    /// The URL in the scheme `leasehold::connect` reads for this server:
    /// `etcd://` for etcd (whose own URL is `http://`), `valkey://` for
    /// Valkey, the server's URL otherwise.
    pub fn store_url(&self) -> String {
        self.in_store_scheme(self.url.clone())
    }

    /// [`Server::store_url`] with a different address (through the fault
    /// proxy).
    pub fn store_url_via(&self, addr: SocketAddr) -> String {
        self.in_store_scheme(self.url_via(addr))
    }

    fn in_store_scheme(&self, url: String) -> String {
        let name = self.kind.name();
        if name.starts_with("etcd") {
            url.replacen("http://", "etcd://", 1)
        } else if name.starts_with("valkey") {
            url.replacen("redis://", "valkey://", 1)
        } else {
            url
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

    /// The settings this server was started with ([`provide_with`](super::provide_with)); `None`
    /// for a URL from the environment or a container, which run as they were
    /// configured.
    pub fn settings(&self) -> Option<Settings> {
        self.settings
    }

    /// Whether [`Server::kill`], [`Server::restart`], [`Server::freeze`] and
    /// [`Server::thaw`] work on this server: only on one this process started
    /// from a local binary.
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
        Ok(guard.start()?)
    }

    /// Stops the server's processes (`SIGSTOP`), as a VM pause or a stalled
    /// machine would: it reads and answers nothing, but its connections stay
    /// open. Every process is stopped (PostgreSQL's postmaster and its backends alike),
    /// and this returns once the kernel shows them stopped.
    ///
    /// A frozen server is thawed by [`Server::thaw`], and may also be killed
    /// or restarted as it is ([`Server::kill`] and [`Server::restart`] thaw
    /// it first), or dropped.
    ///
    /// Only for a server this process started from a local binary: for a URL
    /// from the environment or a container it is an error that says so.
    pub fn freeze(&self) -> Result<(), String> {
        self.local("freezing needs")?.freeze()
    }

    /// Resumes a server stopped by [`Server::freeze`] (`SIGCONT`). Thawing a
    /// server that is not frozen does nothing.
    ///
    /// Only for a server this process started from a local binary, as
    /// [`Server::freeze`].
    pub fn thaw(&self) -> Result<(), String> {
        self.local("thawing needs")?.thaw()
    }

    fn local(&self, what: &str) -> Result<&Guard, String> {
        self.guard
            .as_ref()
            .filter(|g| g.relaunch.is_some())
            .ok_or_else(|| self.not_local(what))
    }

    fn local_guard(&mut self) -> Result<&mut Guard, String> {
        let why = self.not_local("restarts need");
        self.guard
            .as_mut()
            .filter(|g| g.relaunch.is_some())
            .ok_or(why)
    }

    /// Why `what` (`restarts need`, ...) a server this process started from a
    /// local binary.
    fn not_local(&self, what: &str) -> String {
        let kind = self.kind;
        format!(
            "{kind} from {}: {what} a server this process started from a local binary \
             ({}); unset {} to have one started",
            self.origin,
            kind.install_hint(),
            kind.env_var()
        )
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

#[cfg(test)]
mod tests {
    use std::net::TcpStream;
    use std::time::Duration;

    use super::*;
    use crate::servers::processes::alive;
    use crate::servers::{find_binary, provide_with};

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
        for e in [
            server.kill().unwrap_err(),
            server.restart().unwrap_err(),
            server.freeze().unwrap_err(),
            server.thaw().unwrap_err(),
        ] {
            assert!(e.contains("local binary"), "{e}");
            assert!(e.contains("LEASEHOLD_REDIS7_URL"), "{e}");
        }
        assert!(
            server.describe().ends_with("settings unknown)"),
            "{}",
            server.describe()
        );
    }

    /// Whether this machine can start a `kind` server of its own; says why
    /// not (a missing binary fails under CI, as everywhere).
    fn local_binary_here(kind: ServerKind) -> bool {
        if std::env::var_os(kind.env_var()).is_some() {
            eprintln!(
                "${} names a server: no local one to restart; skipped",
                kind.env_var()
            );
            return false;
        }
        if find_binary(kind).is_none() {
            // Under CI a missing server is a failure, as everywhere.
            assert!(
                !crate::in_ci(),
                "no local {kind} binary: {}",
                kind.install_hint()
            );
            eprintln!("no local {kind} binary: skipped");
            return false;
        }
        true
    }

    /// A `kind` server this process starts with `settings`, and its port; `None`
    /// (said) when this machine cannot start one.
    fn own_server(kind: ServerKind, settings: Settings) -> Option<(Server, u16)> {
        if !local_binary_here(kind) {
            return None;
        }
        let server = provide_with(kind, settings).expect("a local server");
        let port = server.addr().expect("address").port();
        Some((server, port))
    }

    /// What the server on `port` answers to `request` (its first `len`
    /// bytes), or `None` when it says nothing within `wait`.
    fn answer(port: u16, request: &[u8], len: usize, wait: Duration) -> Option<Vec<u8>> {
        use std::io::{Read, Write};
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut stream = TcpStream::connect_timeout(&addr, wait).ok()?;
        stream.set_read_timeout(Some(wait)).ok()?;
        stream.write_all(request).ok()?;
        let mut reply = vec![0; len];
        stream.read_exact(&mut reply).ok()?;
        Some(reply)
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
        if !local_binary_here(kind) {
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

    /// A TLS-only Redis answers no plain-text command, hands out a
    /// `rediss://` URL with the run's certificates, and starts again after
    /// a kill (its readiness read from its log, since a plain-text `PING`
    /// cannot tell).
    #[test]
    fn a_tls_only_redis_refuses_plain_text_and_restarts() {
        let kind = ServerKind::Redis7;
        if !local_binary_here(kind) {
            return;
        }
        let mut server = super::super::provide_tls(kind).expect("a TLS-only redis7");
        let pki = crate::tls::Pki::shared().expect("certificates");
        let port = server.addr().expect("address").port();
        assert_eq!(
            server.url,
            format!(
                "rediss://127.0.0.1:{port}?ca={}&cert={}&key={}",
                pki.ca.display(),
                pki.client.cert.display(),
                pki.client.key.display()
            )
        );
        let wait = Duration::from_secs(5);
        assert_eq!(answer(port, b"PING\r\n", 7, wait), None);
        let before = server.pid().expect("pid");
        server.kill().expect("kill");
        server.restart().expect("restart");
        assert_ne!(server.pid().expect("pid"), before);
        assert_eq!(answer(port, b"PING\r\n", 7, wait), None);
    }

    /// One handle freezes, thaws and restarts a server: a frozen Redis
    /// answers nothing, a thawed one answers again, and a frozen one restarts
    /// (with what it acknowledged, being durable) and answers.
    #[test]
    fn a_frozen_redis_thaws_and_restarts() {
        let Some((mut server, port)) = own_server(ServerKind::Redis7, Settings::Durable) else {
            return;
        };
        let ping = |wait| answer(port, b"PING\r\n", 7, wait);
        let pong = Some(b"+PONG\r\n".to_vec());
        assert_eq!(redis(port, &["SET", "k", "v"]), "+OK");
        server.freeze().expect("freeze");
        assert_eq!(
            ping(Duration::from_millis(500)),
            None,
            "a frozen server answered"
        );
        server.thaw().expect("thaw");
        assert_eq!(ping(Duration::from_secs(10)), pong, "after the thaw");
        server.freeze().expect("freeze again");
        let before = server.pid().expect("pid");
        server.restart().expect("restarting a frozen server");
        assert_ne!(server.pid(), Some(before));
        assert!(!alive(before), "the frozen server still runs");
        assert_eq!(ping(Duration::from_secs(10)), pong, "after the restart");
        assert_eq!(redis(port, &["GET", "k"]), "v");
        server.thaw().expect("thawing a server that is not frozen");
        let pid = server.pid().expect("pid");
        server.freeze().expect("freeze before drop");
        drop(server);
        assert!(!alive(pid), "a frozen server still runs after drop");
    }

    /// PostgreSQL runs as a daemon with a process per connection: a freeze
    /// stops them all, and the frozen daemon is still restarted (its stop
    /// command needs it thawed).
    #[test]
    fn a_frozen_postgres_thaws_and_restarts() {
        let Some((mut server, port)) = own_server(ServerKind::Postgres15, Settings::Fast) else {
            return;
        };
        // An SSLRequest: the server answers one byte, `N` or `S`.
        let probe = |wait| answer(port, &[0, 0, 0, 8, 4, 210, 22, 47], 1, wait).is_some();
        assert!(
            probe(Duration::from_secs(10)),
            "a fresh server did not answer"
        );
        server.freeze().expect("freeze");
        let pids = server.guard.as_ref().expect("guard").pids();
        assert!(pids.len() > 1, "the postmaster and its processes: {pids:?}");
        assert!(
            !probe(Duration::from_millis(500)),
            "a frozen server answered"
        );
        server.thaw().expect("thaw");
        assert!(probe(Duration::from_secs(10)), "no answer after the thaw");
        server.freeze().expect("freeze again");
        server.restart().expect("restarting a frozen server");
        assert!(
            probe(Duration::from_secs(10)),
            "no answer after the restart"
        );
        for pid in pids {
            assert!(!alive(pid), "process {pid} of the frozen server still runs");
        }
    }
}
