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
    tls: Option<&'static crate::tls::Pki>,
) -> Result<Server, String> {
    let launch = kind.row().launch;
    let start =
        recipe(launch.family).ok_or_else(|| format!("no local {kind} binary is supported"))?;
    let version = version_of(bin, "--version");
    if tls.is_some() && launch.tls_url.is_none() {
        return Err(format!("no TLS-only {kind} server can be started here"));
    }
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
                tls,
            }),
            #[cfg(feature = "testcontainers")]
            _container: None,
        };
        // Dropped on an error: the server is stopped, the directory goes.
        guard.start()?;
        let url = match tls {
            Some(pki) => launch
                .tls_url_at(ports[0], pki)
                .ok_or("no TLS-only server of this family")?,
            None => launch.url_at(ports[0]),
        };
        Ok(Server {
            kind,
            url,
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
        // A TLS-only server knows its one user by the client
        // certificate's name, and that user owns the cluster.
        let superuser = match l.tls {
            Some(_) => crate::tls::CLIENT_NAME,
            None => "postgres",
        };
        run(as_user(bindir.join("initdb")).arg("-D").arg(&data).args([
            "-U",
            superuser,
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
    let tls = match l.tls {
        Some(pki) => postgres_tls_only(&data, pki)?,
        None => "",
    };
    let opts = format!(
        "-p {} -k {} -c listen_addresses=127.0.0.1 {settings} -c max_connections=600{tls}",
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

/// Makes the PostgreSQL cluster in `data` take TLS connections only, each
/// with a client certificate signed by the run's CA whose common name is the
/// user's (`cert` authentication, which implies `clientcert=verify-full`); a
/// connection without TLS finds no `pg_hba.conf` line. The certificates are
/// copied into the data directory: the server reads its key only when the
/// key belongs to the server's user and no one else may read it. Returns the
/// server options that turn TLS on.
fn postgres_tls_only(data: &Path, pki: &crate::tls::Pki) -> Result<&'static str, String> {
    use std::os::unix::fs::PermissionsExt;
    let copies = [
        (&pki.ca, "ca.crt"),
        (&pki.server.cert, "server.crt"),
        (&pki.server.key, "server.key"),
    ];
    for (from, to) in copies {
        std::fs::copy(from, data.join(to))
            .map_err(|e| format!("copying {} into {}: {e}", from.display(), data.display()))?;
    }
    let key = data.join("server.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("{}: {e}", key.display()))?;
    std::fs::write(
        data.join("pg_hba.conf"),
        "# TLS only: a client certificate signed by ca.crt, named as the user.\n\
         hostssl all all 127.0.0.1/32 cert\n",
    )
    .map_err(|e| format!("writing pg_hba.conf: {e}"))?;
    if programs::is_root() {
        run(programs::command("chown")?
            .arg("postgres")
            .args(copies.map(|(_, to)| data.join(to)))
            .arg(data.join("pg_hba.conf")))?;
    }
    Ok(" -c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key -c ssl_ca_file=ca.crt")
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
    // TLS only: every TCP connection must be TLS, and the one user over
    // TCP must show a client certificate of its name, signed by the run's
    // CA. Root keeps the unix socket only (which needs no TLS), to create it.
    let tls: Vec<String> = match l.tls {
        Some(pki) => vec![
            format!("--ssl-ca={}", pki.ca.display()),
            format!("--ssl-cert={}", pki.server.cert.display()),
            format!("--ssl-key={}", pki.server.key.display()),
            "--require-secure-transport=ON".to_owned(),
            // Users are matched by address only: 127.0.0.1 is not taken
            // for `localhost`, whose root needs no certificate.
            "--skip-name-resolve".to_owned(),
        ],
        None => Vec::new(),
    };
    let child = mariadb::server_command(l.bin, &files, l.port)
        .arg("--skip-log-bin")
        .args(settings)
        .args(&tls)
        .spawn()
        .map_err(|e| e.to_string())?;
    l.guard.child = Some(child);
    wait_for_port(l.port, &mut l.guard.child, READY_WAIT, &l.log)?;
    let client = programs::require("mariadb")?;
    let setup = || {
        let mut setup = Command::new(&client);
        setup.args(["--no-defaults", "-uroot"]);
        if l.tls.is_some() {
            let user = format!("'{}'@'127.0.0.1'", crate::tls::CLIENT_NAME);
            setup
                .arg(format!("--socket={}", files.socket.display()))
                .args([
                    "-e",
                    &format!(
                        "CREATE DATABASE IF NOT EXISTS leasehold; \
                     DROP USER IF EXISTS 'root'@'127.0.0.1', 'root'@'::1'; \
                     CREATE USER IF NOT EXISTS {user} REQUIRE SUBJECT '/CN={}'; \
                     GRANT ALL PRIVILEGES ON *.* TO {user}",
                        crate::tls::CLIENT_NAME
                    ),
                ]);
        } else {
            setup
                .arg("-h127.0.0.1")
                .arg(format!("-P{}", l.port))
                .args(["-e", "CREATE DATABASE IF NOT EXISTS leasehold"]);
        }
        run(&mut setup)
    };
    // The port opens before the server takes logins: on a loaded machine
    // the first one can be cut at its handshake. Tried again until the
    // server's start is overdue.
    let started = Instant::now();
    loop {
        match setup() {
            Ok(()) => return Ok(()),
            Err(e) if started.elapsed() > READY_WAIT => return Err(e.into()),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

fn start_redis(l: &mut Local<'_>) -> Result<(), StartError> {
    let persistence: &[&str] = match l.settings {
        Settings::Fast | Settings::Lossy => &["--appendonly", "no"],
        Settings::Durable => &["--appendonly", "yes", "--appendfsync", "always"],
    };
    let port = l.port.to_string();
    // TLS only: no plain-text port, and every client must present a
    // certificate signed by the run's CA.
    let listen: Vec<std::ffi::OsString> = match l.tls {
        None => vec!["--port".into(), port.into()],
        Some(pki) => vec![
            "--port".into(),
            "0".into(),
            "--tls-port".into(),
            port.into(),
            "--tls-cert-file".into(),
            pki.server.cert.clone().into(),
            "--tls-key-file".into(),
            pki.server.key.clone().into(),
            "--tls-ca-cert-file".into(),
            pki.ca.clone().into(),
            "--tls-auth-clients".into(),
            "yes".into(),
        ],
    };
    // A restart appends to the log: count the readiness lines before it.
    let ready_before = redis_ready_lines(&l.log);
    let child = Command::new(l.bin)
        .args(&listen)
        .args(["--bind", "127.0.0.1"])
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
    let waited = wait_for_port(l.port, &mut l.guard.child, READY_WAIT, &l.log);
    if l.tls.is_some() {
        let log = std::fs::read_to_string(&l.log).unwrap_or_default();
        if log.contains("Missing implement of connection type tls") {
            return Err(StartError::Failed(format!(
                "{} is built without TLS (\"Missing implement of connection type tls\"); \
                 Debian's redis-server 7 has TLS",
                l.bin.display()
            )));
        }
    }
    waited?;
    // The port opens before the data is loaded (`-LOADING` until then):
    // plain text answers PING once it is; over TLS the log says so.
    let ready = |l: &Local<'_>| match l.tls {
        None => redis_pongs(l.port),
        Some(_) => redis_ready_lines(&l.log) > ready_before,
    };
    while !ready(l) {
        if start.elapsed() > READY_WAIT {
            return Err(StartError::Failed(format!(
                "not ready on port {} after {READY_WAIT:?}: {}",
                l.port,
                tail(&l.log)
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// How many times a Redis or Valkey log says it is ready to accept
/// connections (once per start, after its data is loaded).
fn redis_ready_lines(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .matches("Ready to accept connections")
        .count()
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
    let mut cmd = Command::new(l.bin);
    cmd.args(["--name", "n0", "--data-dir"])
        .arg(l.dir.join("data"))
        .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
        .arg(format!(
            "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
        ))
        .arg(format!("--initial-cluster=n0=http://127.0.0.1:{peer}"));
    match l.tls {
        // Clients over TLS only, each with a certificate the CA signed; the
        // one member's peer port stays plain (no other member talks to it).
        Some(pki) => cmd
            .arg(format!("--listen-client-urls=https://127.0.0.1:{port}"))
            .arg(format!("--advertise-client-urls=https://127.0.0.1:{port}"))
            .arg("--cert-file")
            .arg(&pki.server.cert)
            .arg("--key-file")
            .arg(&pki.server.key)
            .arg("--trusted-ca-file")
            .arg(&pki.ca)
            .arg("--client-cert-auth"),
        None => cmd
            .arg(format!("--listen-client-urls=http://127.0.0.1:{port}"))
            .arg(format!("--advertise-client-urls=http://127.0.0.1:{port}")),
    };
    let child = cmd
        .stdout(l.log_file())
        .stderr(l.log_file())
        .spawn()
        .map_err(|e| e.to_string())?;
    l.guard.child = Some(child);
    wait_for_port(port, &mut l.guard.child, READY_WAIT, &l.log)
}
