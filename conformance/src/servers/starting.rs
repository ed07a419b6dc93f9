//! What starting a private server takes, whatever its kind: a directory of
//! its own, free loopback ports, and telling a port that another process took
//! first from any other failure, so that the start is made again on other
//! ports.
//!
//! Tests start many servers at once on one machine (the test binaries of a
//! workspace run side by side, and other checkouts' tests beside them). A
//! port is drawn by binding port 0 and releasing it, so another process can
//! bind it before the server does: the server then fails with "address
//! already in use", and the start is made again on new ports
//! ([`retry_on_taken_port`]). Worse, a readiness probe would find the other
//! process's listener and take it for the server: a server counts as
//! listening only once the listening socket is its own ([`listens_on`]).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// `n` free loopback ports, all different: each is drawn while the others
/// are still bound (a port drawn and released at once can come back).
///
/// # Errors
/// No port could be bound.
pub fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("no free port: {e}"))?;
    Ok(held
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()).unwrap_or(0))
        .collect())
}

/// A new, empty directory under the system's temp dir, named
/// `leasehold-<label>-<pid>-<n>` with `n` counted up in this process. It is
/// created only if no such directory existed (one left behind by an earlier
/// process of the same PID is passed over): two servers started at the same
/// moment never share one, which a name made of a port drawn at that moment
/// could not promise.
///
/// # Errors
/// The directory could not be created.
pub fn private_dir(label: &str) -> Result<PathBuf, String> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir();
    for _ in 0..1000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("leasehold-{label}-{}-{n}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("{}: {e}", dir.display())),
        }
    }
    Err(format!(
        "no new leasehold-{label}-{}-<n> directory under {}: a thousand already exist",
        std::process::id(),
        base.display()
    ))
}

/// Why a private server did not start.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StartError {
    /// Another process bound one of the ports drawn for the server before
    /// it did: the same start on other ports would succeed. What the server
    /// said.
    PortTaken(String),
    /// Any other failure, with what the server said.
    Failed(String),
}

impl StartError {
    /// The failure of a server that stopped, classified by what it logged:
    /// the system's message for `EADDRINUSE` (every server here logs it as
    /// "Address already in use", in one case or another) is
    /// [`StartError::PortTaken`].
    pub fn from_log(what: String, log: &str) -> Self {
        if log.to_ascii_lowercase().contains("address already in use") {
            Self::PortTaken(what)
        } else {
            Self::Failed(what)
        }
    }

    /// The same failure, its message changed by `f`.
    #[must_use]
    pub fn map(self, f: impl FnOnce(String) -> String) -> Self {
        match self {
            Self::PortTaken(what) => Self::PortTaken(f(what)),
            Self::Failed(what) => Self::Failed(f(what)),
        }
    }
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::PortTaken(what) => write!(f, "a port was taken by another process: {what}"),
            Self::Failed(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for StartError {}

impl From<String> for StartError {
    fn from(what: String) -> Self {
        Self::Failed(what)
    }
}

impl From<&str> for StartError {
    fn from(what: &str) -> Self {
        Self::Failed(what.to_owned())
    }
}

impl From<StartError> for String {
    fn from(e: StartError) -> Self {
        e.to_string()
    }
}

/// How many times a start whose port was taken is made (each on new ports).
const STARTS: usize = 5;

/// Makes `start` (which draws its ports anew each time) until it does not
/// fail with [`StartError::PortTaken`], five times at most; says so on
/// stderr each time.
///
/// # Errors
/// The last failure.
pub fn retry_on_taken_port<T>(
    what: &str,
    mut start: impl FnMut() -> Result<T, StartError>,
) -> Result<T, String> {
    let mut attempt = 1;
    loop {
        match start() {
            Err(StartError::PortTaken(why)) if attempt < STARTS => {
                say_again(what, &why);
                attempt += 1;
            }
            other => return other.map_err(String::from),
        }
    }
}

/// [`retry_on_taken_port`] for a start that is a future.
///
/// # Errors
/// The last failure.
pub async fn retry_on_taken_port_async<T, F>(
    what: &str,
    mut start: impl FnMut() -> F,
) -> Result<T, String>
where
    F: Future<Output = Result<T, StartError>>,
{
    let mut attempt = 1;
    loop {
        match start().await {
            Err(StartError::PortTaken(why)) if attempt < STARTS => {
                say_again(what, &why);
                attempt += 1;
            }
            other => return other.map_err(String::from),
        }
    }
}

fn say_again(what: &str, why: &str) {
    eprintln!(
        "leasehold: {what}: another process took a port before the server bound it; starting \
         again on other ports ({why})"
    );
}

/// Waits until the server process `child` listens on `port`: until the
/// listening socket is its own ([`listens_on`]), or, where that cannot be
/// told, until the port accepts a connection.
///
/// # Errors
/// The process exited (a [`StartError::PortTaken`] when its log, `log`,
/// says another process had the port), or `timeout` passed.
pub fn wait_listening(
    child: &mut Child,
    port: u16,
    timeout: Duration,
    log: &Path,
) -> Result<(), StartError> {
    let start = Instant::now();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            return Err(StartError::from_log(
                format!("exited with {status}: {}", tail(&text, 5)),
                &text,
            ));
        }
        let listening = match listens_on(child.id(), port) {
            Some(mine) => mine,
            None => TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok(),
        };
        if listening {
            return Ok(());
        }
        if start.elapsed() > timeout {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            return Err(StartError::Failed(format!(
                "port {port} not open after {timeout:?}: {}",
                tail(&text, 5)
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The last `lines` lines of a log's text, on one line.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join(" | ")
}

/// Whether the TCP socket listening on `port` is process `pid`'s:
/// `Some(false)` when another process listens there (or none does),
/// `None` when this system cannot tell (no `/proc`).
pub fn listens_on(pid: u32, port: u16) -> Option<bool> {
    let mut inodes = Vec::new();
    let mut readable = false;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        readable = true;
        inodes.extend(listening_inodes(&text, port));
    }
    if !readable {
        return None;
    }
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    let mine = fds.filter_map(Result::ok).any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| {
            inodes
                .iter()
                .any(|inode| target == Path::new(&format!("socket:[{inode}]")))
        })
    });
    Some(mine)
}

/// The inodes of the sockets listening on `port` in a `/proc/net/tcp`
/// table: `sl local_address rem_address st … uid timeout inode`, the port
/// in hex after the address, `0A` the listening state.
fn listening_inodes(table: &str, port: u16) -> Vec<String> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f.get(1)?.rsplit_once(':')?.1;
            let listening = u16::from_str_radix(local_port, 16).ok()? == port && *f.get(3)? == "0A";
            if listening {
                f.get(9).map(|inode| (*inode).to_owned())
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Directories asked for at the same moment are all different, and new.
    #[test]
    fn private_dirs_are_never_shared() {
        let dirs: Vec<PathBuf> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..16)
                .map(|_| s.spawn(|| private_dir("dir-test").expect("private dir")))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("join"))
                .collect()
        });
        let unique: std::collections::HashSet<_> = dirs.iter().collect();
        assert_eq!(unique.len(), dirs.len(), "{dirs:?}");
        for dir in &dirs {
            assert!(dir.is_dir());
            assert_eq!(std::fs::read_dir(dir).expect("read").count(), 0);
            std::fs::remove_dir(dir).expect("remove");
        }
    }

    /// A listener is told apart from another process's, and a taken port
    /// from other failures.
    #[test]
    fn a_listener_is_known_by_its_process() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        if listens_on(std::process::id(), port).is_none() {
            eprintln!("no /proc here: skipped");
            return;
        }
        assert_eq!(listens_on(std::process::id(), port), Some(true));
        let mut other = crate::programs::command("sleep")
            .expect("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        assert_eq!(listens_on(other.id(), port), Some(false));
        let _ = other.kill();
        let _ = other.wait();
        drop(listener);
        assert_eq!(listens_on(std::process::id(), port), Some(false));
        let taken = "Failed listening on port 1 (tcp): bind: Address already in use";
        assert!(matches!(
            StartError::from_log("x".into(), taken),
            StartError::PortTaken(_)
        ));
        assert!(matches!(
            StartError::from_log("x".into(), "Permission denied"),
            StartError::Failed(_)
        ));
    }
}
