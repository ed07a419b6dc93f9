//! Starting a server from a local binary, privately, on a free loopback
//! port with a temporary data directory: one recipe per family.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use super::discovery::version_of;
use super::kinds::{Family, ServerKind};
use super::mariadb;
use super::processes::{Guard, Local, READY_WAIT, Relaunch, StartLocal};
use super::server::{Origin, Server};
use super::settings::Settings;
use super::starting::{
    self, StartError, free_ports, private_dir, retry_on_taken_port, wait_listening,
};
use crate::programs;

/// Waits until the server `child` listens on `port` (see
/// [`wait_listening`]), its log `log`.
fn wait_for_port(
    port: u16,
    child: &mut Option<Child>,
    timeout: Duration,
    log: &Path,
) -> Result<(), StartError> {
    let child = child.as_mut().ok_or("no server process to wait for")?;
    wait_listening(child, port, timeout, log)
}

pub(super) fn tail(log: &Path) -> String {
    starting::tail(&std::fs::read_to_string(log).unwrap_or_default(), 5)
}

pub(super) fn run(cmd: &mut Command) -> Result<(), String> {
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

/// Starts a `kind` server from `bin` in a private directory, on new ports
/// each time another process takes one first.
pub(super) fn start_local(
    kind: ServerKind,
    bin: &Path,
    settings: Settings,
) -> Result<Server, String> {
    let launch = kind.row().launch;
    let start =
        recipe(launch.family).ok_or_else(|| format!("no local {kind} binary is supported"))?;
    let version = version_of(bin, "--version");
    retry_on_taken_port(kind.name(), || {
        // Drawn together, so that they differ.
        let ports = free_ports(2)?;
        let mut guard = Guard {
            child: None,
            stop: None,
            lock_files: Vec::new(),
            dir: private_dir(kind.name())?,
            relaunch: Some(Relaunch {
                start,
                bin: bin.to_path_buf(),
                port: ports[0],
                second_port: ports[1],
                settings,
            }),
            #[cfg(feature = "testcontainers")]
            _container: None,
        };
        // Dropped on an error: the server is stopped, the directory goes.
        guard.start()?;
        Ok(Server {
            kind,
            url: launch.url_at(ports[0]),
            version: version.clone(),
            origin: Origin::Binary(bin.to_path_buf()),
            settings: Some(settings),
            guard: Some(guard),
        })
    })
}

/// The recipe that starts a server of `family` from a local binary, if a
/// local binary can run one.
fn recipe(family: Family) -> Option<StartLocal> {
    match family {
        Family::Postgres => Some(start_postgres),
        Family::MariaDb => Some(start_mariadb),
        Family::Redis => Some(start_redis),
        Family::Etcd => Some(start_etcd),
        Family::Kubernetes => None,
    }
}

fn start_postgres(l: &mut Local<'_>) -> Result<(), StartError> {
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
    .map_err(|e| {
        let log = std::fs::read_to_string(&l.log).unwrap_or_default();
        StartError::from_log(format!("{e}: {}", starting::tail(&log, 5)), &log)
    })
}

fn start_mariadb(l: &mut Local<'_>) -> Result<(), StartError> {
    let files = mariadb::Files {
        data: l.dir.join("data"),
        tmp: l.dir.join("tmp"),
        socket: l.dir.join("sock"),
        pid: l.dir.join("pid"),
        log: l.log.clone(),
    };
    // A restart finds the data directory installed.
    if !files.data.join("mysql").is_dir() {
        mariadb::install(&files.data, &files.tmp)?;
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
    let child = mariadb::server_command(l.bin, &files, l.port)
        .arg("--skip-log-bin")
        .args(settings)
        .spawn()
        .map_err(|e| e.to_string())?;
    l.guard.child = Some(child);
    wait_for_port(l.port, &mut l.guard.child, READY_WAIT, &l.log)?;
    let client = programs::require("mariadb")?;
    Ok(run(Command::new(client)
        .args(["--no-defaults", "-uroot", "-h127.0.0.1"])
        .arg(format!("-P{}", l.port))
        .args(["-e", "CREATE DATABASE IF NOT EXISTS leasehold"]))?)
}

fn start_redis(l: &mut Local<'_>) -> Result<(), StartError> {
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
            return Err(StartError::Failed(format!(
                "no PONG on port {} after {READY_WAIT:?}: {}",
                l.port,
                tail(&l.log)
            )));
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

fn start_etcd(l: &mut Local<'_>) -> Result<(), StartError> {
    let (port, peer) = (l.port, l.second_port);
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
