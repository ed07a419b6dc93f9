//! A multi-member etcd cluster on loopback ports, started privately, whose
//! members can be killed (SIGKILL) and started again on their data: for the
//! etcd backend's cluster tests and the fault campaign's `etcd-cluster`
//! backend.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::servers::{self, ServerKind, StartError};

/// How long a member may take to listen on its client port (a loaded
/// machine included).
const LISTEN_WAIT: Duration = Duration::from_secs(60);

struct Member {
    client_port: u16,
    /// The arguments that start this member (the same on a restart: etcd
    /// ignores the initial-cluster flags once its data directory exists).
    args: Vec<String>,
    child: Option<Child>,
}

/// etcd members on loopback, started privately; killed and their data
/// removed on drop.
pub struct EtcdCluster {
    bin: PathBuf,
    members: Vec<Member>,
    dir: PathBuf,
}

impl EtcdCluster {
    /// Starts `members` members of `kind`'s binary (found as
    /// [`servers::find_binary`] finds it), without waiting for them.
    pub fn start_kind(kind: ServerKind, members: usize) -> Result<Self, String> {
        let bin = servers::find_binary(kind).ok_or_else(|| {
            format!(
                "no {kind} binary for an etcd cluster; {}",
                kind.install_hint()
            )
        })?;
        Self::start(&bin, members)
    }

    /// Starts `members` members of the etcd binary `bin` and waits until
    /// each listens on its ports, not until they form a cluster (see
    /// [`EtcdCluster::wait_healthy`]). Starts again on other ports when
    /// another process takes one first.
    pub fn start(bin: &Path, members: usize) -> Result<Self, String> {
        servers::retry_on_taken_port("the etcd cluster", || Self::start_once(bin, members))
    }

    /// [`EtcdCluster::start`] on ports drawn once.
    fn start_once(bin: &Path, members: usize) -> Result<Self, StartError> {
        let dir = servers::private_dir("etcd-cluster")?;
        // A client and a peer port per member, all different.
        let ports: Vec<(u16, u16)> = servers::free_ports(2 * members)?
            .chunks(2)
            .map(|pair| (pair[0], pair[1]))
            .collect();
        let initial = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        // Unique to this cluster: its directory's name.
        let token = dir
            .file_name()
            .map_or_else(|| "leasehold".into(), |n| n.to_string_lossy().into_owned());
        let mut cluster = Self {
            bin: bin.to_path_buf(),
            members: Vec::new(),
            dir: dir.clone(),
        };
        for (i, (client, peer)) in ports.iter().enumerate() {
            let args = vec![
                format!("--name=m{i}"),
                format!("--data-dir={}", dir.join(format!("m{i}")).display()),
                format!("--listen-client-urls=http://127.0.0.1:{client}"),
                format!("--advertise-client-urls=http://127.0.0.1:{client}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
                format!("--initial-cluster={initial}"),
                "--initial-cluster-state=new".to_owned(),
                format!("--initial-cluster-token={token}"),
            ];
            cluster.members.push(Member {
                client_port: *client,
                args,
                child: None,
            });
            cluster.spawn(i)?;
        }
        for i in 0..members {
            let port = cluster.members[i].client_port;
            let log = cluster.dir.join(format!("m{i}.log"));
            let child = cluster.members[i]
                .child
                .as_mut()
                .ok_or("a member that was just started is not running")?;
            servers::wait_listening(child, port, LISTEN_WAIT, &log)
                .map_err(|e| e.map(|what| format!("member m{i}: {what}")))?;
        }
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("m{i}.log")))
            .map_err(|e| e.to_string())?;
        let child = Command::new(&self.bin)
            .args(&self.members[i].args)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.bin.display()))?;
        self.members[i].child = Some(child);
        Ok(())
    }

    /// How many members the cluster has (running or not).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the cluster has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The members' client endpoints (`http://127.0.0.1:port`), in member
    /// order.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// The members' client addresses, in member order.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.members
            .iter()
            .map(|m| SocketAddr::from(([127, 0, 0, 1], m.client_port)))
            .collect()
    }

    /// Whether member `i` runs (was not killed, or was started again).
    pub fn is_running(&self, i: usize) -> bool {
        self.members.get(i).is_some_and(|m| m.child.is_some())
    }

    /// Member `i`'s process.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members.get(i)?.child.as_ref().map(Child::id)
    }

    /// The last `lines` lines member `i` logged.
    pub fn log_tail(&self, i: usize, lines: usize) -> String {
        let text = std::fs::read_to_string(self.dir.join(format!("m{i}.log"))).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join(" | ")
    }

    /// SIGKILLs member `i`.
    pub fn kill(&mut self, i: usize) -> Result<(), String> {
        let mut child = self
            .members
            .get_mut(i)
            .ok_or_else(|| format!("no member {i}"))?
            .child
            .take()
            .ok_or_else(|| format!("member {i} is not running"))?;
        // Child::kill sends SIGKILL to this member's PID.
        child.kill().map_err(|e| e.to_string())?;
        child.wait().map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Starts member `i` again on its data directory (after [`kill`]).
    ///
    /// [`kill`]: EtcdCluster::kill
    pub fn restart(&mut self, i: usize) -> Result<(), String> {
        if self.is_running(i) {
            return Err(format!("member {i} is running"));
        }
        self.spawn(i)
    }

    /// The index of the member that is the Raft leader now, as the running
    /// members report it (`/v3/maintenance/status`), if they agree on one.
    pub fn leader(&self) -> Option<usize> {
        let mut ids = Vec::new();
        let mut leader = None;
        for m in &self.members {
            let addr = SocketAddr::from(([127, 0, 0, 1], m.client_port));
            let answer = if m.child.is_some() {
                status(addr).ok()
            } else {
                None
            };
            let own = answer
                .as_deref()
                .and_then(|a| json_str(a, "member_id").map(str::to_owned));
            if let Some(l) = answer.as_deref().and_then(|a| json_str(a, "leader")) {
                leader.get_or_insert_with(|| l.to_owned());
            }
            ids.push(own);
        }
        let leader = leader?;
        ids.iter()
            .position(|id| id.as_deref() == Some(leader.as_str()))
    }

    /// Waits until every running member answers `/health` with a healthy
    /// cluster (a leader and a quorum), or `limit` passes.
    pub fn wait_healthy(&self, limit: Duration) -> Result<(), String> {
        let start = Instant::now();
        loop {
            let sick: Vec<String> = self
                .members
                .iter()
                .enumerate()
                .filter(|(_, m)| m.child.is_some())
                .filter_map(|(i, m)| {
                    let addr = SocketAddr::from(([127, 0, 0, 1], m.client_port));
                    match health(addr) {
                        Ok(true) => None,
                        Ok(false) => Some(format!("m{i}: unhealthy")),
                        Err(e) => Some(format!("m{i}: {e}")),
                    }
                })
                .collect();
            if sick.is_empty() {
                return Ok(());
            }
            if start.elapsed() >= limit {
                let tails: Vec<String> = (0..self.members.len())
                    .map(|i| format!("m{i}: {}", self.log_tail(i, 3)))
                    .collect();
                return Err(format!(
                    "the etcd cluster was not healthy within {limit:?} ({}); logs:\n{}",
                    sick.join(", "),
                    tails.join("\n")
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// `POST /v3/maintenance/status` on a member's client address: the raw
/// JSON answer (its `header.member_id` and `leader`).
fn status(addr: SocketAddr) -> Result<String, String> {
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(1)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    s.write_all(
        b"POST /v3/maintenance/status HTTP/1.0\r\nHost: 127.0.0.1\r\n\
          Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
    )
    .map_err(|e| e.to_string())?;
    let mut body = String::new();
    s.read_to_string(&mut body).map_err(|e| e.to_string())?;
    Ok(body)
}

/// The string value of the first `"key":"value"` in `json`.
fn json_str<'a>(json: &'a str, key: &str) -> Option<&'a str> {
    let at = json.find(&format!("\"{key}\":\""))? + key.len() + 4;
    json[at..].split('"').next()
}

/// One `GET /health` on a member's client address: `Ok(true)` when it says
/// the cluster is healthy.
fn health(addr: SocketAddr) -> Result<bool, String> {
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(1)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut body = String::new();
    s.read_to_string(&mut body).map_err(|e| e.to_string())?;
    Ok(body.contains("\"health\":\"true\""))
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut c) = m.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
