//! The processes of a server this process started: what starting one takes,
//! and stopping, killing and watching them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::settings::Settings;
use super::starting::StartError;
use crate::programs;

/// How long a local server may take to accept connections, after a start or
/// a restart (crash recovery included). Generous: the machine may be loaded.
pub(super) const READY_WAIT: Duration = Duration::from_secs(60);

/// What a family's start function works with. The same function starts the
/// server again after [`Server::kill`](super::Server::kill): it then finds its data directory
/// initialised and reuses it.
pub(super) struct Local<'a> {
    pub(super) bin: &'a Path,
    pub(super) dir: PathBuf,
    pub(super) port: u16,
    /// A second port, different from `port`, for a family that needs one
    /// (etcd's peer port).
    pub(super) second_port: u16,
    pub(super) log: PathBuf,
    pub(super) settings: Settings,
    /// TLS only, with this run's certificates ([`crate::tls::Pki`]): the
    /// server takes no plain connection and asks clients for a certificate
    /// ([`super::provide_tls`]).
    pub(super) tls: Option<&'static crate::tls::Pki>,
    pub(super) guard: &'a mut Guard,
}

impl Local<'_> {
    /// The server log, opened for appending (stdout and stderr of a child).
    pub(super) fn log_file(&self) -> Stdio {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map(Stdio::from)
            .unwrap_or_else(|_| Stdio::null())
    }
}

/// Starts a family's server from a local binary.
pub(super) type StartLocal = fn(&mut Local<'_>) -> Result<(), StartError>;

pub(super) struct Guard {
    pub(super) child: Option<Child>,
    /// A command that stops the server (for daemons such as `pg_ctl start`).
    pub(super) stop: Option<Vec<std::ffi::OsString>>,
    /// The daemon's lock files: first its PID file (PostgreSQL's
    /// `postmaster.pid`), whose first line is the PID to make sure of after
    /// `stop`, then any other (the socket's). A daemon killed with SIGKILL
    /// leaves them behind, and they would stop it from starting again.
    pub(super) lock_files: Vec<PathBuf>,
    pub(super) dir: PathBuf,
    /// How to start the server again: for one started from a local binary.
    pub(super) relaunch: Option<Relaunch>,
    #[cfg(feature = "testcontainers")]
    pub(super) _container: Option<std::sync::Mutex<Box<dyn std::any::Any + Send>>>,
}

/// What starting a local server again takes.
#[derive(Clone)]
pub(super) struct Relaunch {
    pub(super) start: StartLocal,
    pub(super) bin: PathBuf,
    pub(super) port: u16,
    /// See [`Local::second_port`].
    pub(super) second_port: u16,
    pub(super) settings: Settings,
    pub(super) tls: Option<&'static crate::tls::Pki>,
}

impl Guard {
    /// Starts (or starts again) the server of `self.relaunch`.
    pub(super) fn start(&mut self) -> Result<(), StartError> {
        let r = self
            .relaunch
            .clone()
            .ok_or("not a server started from a local binary")?;
        (r.start)(&mut Local {
            bin: &r.bin,
            log: self.dir.join("server.log"),
            dir: self.dir.clone(),
            port: r.port,
            second_port: r.second_port,
            settings: r.settings,
            tls: r.tls,
            guard: self,
        })
    }

    /// The server's running processes: the child, or the daemon named in
    /// the PID file and the daemon's children (PostgreSQL's backends).
    /// Empty when it is down.
    pub(super) fn pids(&self) -> Vec<u32> {
        if let Some(child) = &self.child {
            return vec![child.id()];
        }
        let Some(daemon) = self.lock_files.first().and_then(|f| read_pid(f)) else {
            return Vec::new();
        };
        if !alive(daemon) {
            return Vec::new();
        }
        let mut pids = vec![daemon];
        pids.extend(children(daemon));
        pids
    }

    /// Stops every process of the server (`SIGSTOP`): it reads and answers
    /// nothing, but its connections stay open. A daemon is stopped before its
    /// children, so that it starts no new one meanwhile. Returns once the
    /// kernel shows them all stopped.
    pub(super) fn freeze(&self) -> Result<(), String> {
        let pids = self.pids();
        let (&first, _) = pids.split_first().ok_or("the server is not running")?;
        signal("STOP", &[first])?;
        // Read again: children the daemon started before it stopped.
        let pids = self.pids();
        signal("STOP", &pids)?;
        let deadline = Instant::now() + FREEZE_WAIT;
        while let Some(&running) = pids.iter().find(|&&p| alive(p) && !stopped(p)) {
            if Instant::now() >= deadline {
                return Err(format!(
                    "server process {running} is not stopped {FREEZE_WAIT:?} after SIGSTOP"
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// Resumes every process of a frozen server (`SIGCONT`). Thawing a
    /// server that is not frozen, or down, does nothing.
    pub(super) fn thaw(&self) -> Result<(), String> {
        let pids = self.pids();
        if pids.is_empty() {
            return Ok(());
        }
        signal("CONT", &pids)
    }

    /// Kills the server without letting it flush or shut down; returns once
    /// its process is gone. A frozen server is thawed first: a daemon's stop
    /// command signals it, and it would not act on that while stopped.
    pub(super) fn kill(&mut self) -> Result<(), String> {
        let _ = self.thaw();
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

/// How long a frozen server's processes may take to show as stopped.
const FREEZE_WAIT: Duration = Duration::from_secs(30);

/// Sends `SIGSTOP`, `SIGCONT`, ... (`which` without `SIG`) to `pids`. A
/// process that exits between being listed and the signal (a PostgreSQL
/// backend whose client went away) makes `kill` fail for it alone: the
/// signal is sent again to those still there, and only a live process that
/// refuses it is an error.
fn signal(which: &str, pids: &[u32]) -> Result<(), String> {
    let mut left = pids.to_vec();
    for _ in 0..3 {
        let status = programs::command("kill")?
            .arg(format!("-{which}"))
            .args(left.iter().map(u32::to_string))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("kill -{which} {left:?}: {e}"))?;
        if status.success() {
            return Ok(());
        }
        let before = left.len();
        left.retain(|&p| alive(p));
        if left.is_empty() {
            return Ok(());
        }
        if left.len() == before {
            return Err(format!("kill -{which} {left:?} answered {status}"));
        }
    }
    Err(format!(
        "kill -{which} {left:?}: processes kept exiting under it"
    ))
}

/// Whether process `pid` is stopped by a signal (`T` in `/proc/<pid>/stat`).
fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
    })
}

/// Whether every process of `pids` is gone within `wait`.
pub(super) fn gone_within(pids: &[u32], wait: Duration) -> bool {
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
pub(super) fn children(pid: u32) -> Vec<u32> {
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
pub(super) fn read_pid(file: &Path) -> Option<u32> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// Whether process `pid` exists (and is not a zombie).
pub(super) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

impl Drop for Guard {
    fn drop(&mut self) {
        // A frozen server would not act on its stop command.
        let _ = self.thaw();
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
