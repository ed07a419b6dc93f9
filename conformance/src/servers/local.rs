//! Starting a server from a local binary, privately, on a free loopback
//! port with a temporary data directory: one recipe per family.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::discovery::version_of;
use super::kinds::{Family, ServerKind};
use super::processes::{Guard, Local, READY_WAIT, Relaunch, StartLocal};
use super::server::{Origin, Server};
use super::settings::Settings;
use crate::programs;

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

/// A new directory for a server of `kind`, never one another server of
/// this process uses: a server finding another's data directory would take
/// it for its own after a restart, and stop that server when dropped. (A
/// free port is no name for it: a port released is handed out again.)
pub(super) fn temp_dir(kind: ServerKind) -> std::io::Result<PathBuf> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    loop {
        let dir = std::env::temp_dir().join(format!(
            "leasehold-{kind}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        // Left by an earlier process of the same ID: take the next name.
        match std::fs::create_dir(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            other => return other.map(|()| dir),
        }
    }
}

pub(super) fn wait_for_port(
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

/// A family whose recipe starts no TLS-only server yet refuses to start a
/// plain one in its place.
fn refuse_tls(l: &Local<'_>, family: &str) -> Result<(), String> {
    match l.tls {
        Some(_) => Err(format!("the {family} recipe starts no TLS-only server")),
        None => Ok(()),
    }
}

pub(super) fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
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

pub(super) fn start_local(
    kind: ServerKind,
    bin: &Path,
    settings: Settings,
    tls: Option<&'static crate::tls::Pki>,
) -> Result<Server, String> {
    let launch = kind.row().launch;
    let start =
        recipe(launch.family).ok_or_else(|| format!("no local {kind} binary is supported"))?;
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
            tls,
        }),
        #[cfg(feature = "testcontainers")]
        _container: None,
    };
    let version = version_of(bin, "--version");
    let url = match tls {
        None => launch.url_at(port),
        Some(pki) => launch
            .tls_url_at(port, pki)
            .ok_or_else(|| format!("no TLS-only {kind} server can be started here"))?,
    };
    guard.start()?;
    Ok(Server {
        kind,
        url,
        version,
        origin: Origin::Binary(bin.to_path_buf()),
        settings: Some(settings),
        guard: Some(guard),
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
    let socket = l.dir.join("sock");
    let child = Command::new(l.bin)
        .arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .arg(format!("--port={}", l.port))
        .arg("--bind-address=127.0.0.1")
        .arg(format!("--socket={}", socket.display()))
        .arg(format!("--pid-file={}", l.dir.join("pid").display()))
        .arg(format!("--log-error={}", l.log.display()))
        .args(["--user=root", "--skip-log-bin", "--max-connections=1000"])
        .args(settings)
        .args(&tls)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    l.guard.child = Some(child);
    wait_for_port(l.port, &mut l.guard.child, READY_WAIT, &l.log)?;
    let client = programs::require("mariadb")?;
    let mut setup = Command::new(client);
    setup.args(["--no-defaults", "-uroot"]);
    if l.tls.is_some() {
        let user = format!("'{}'@'127.0.0.1'", crate::tls::CLIENT_NAME);
        setup.arg(format!("--socket={}", socket.display())).args([
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
}

fn start_redis(l: &mut Local<'_>) -> Result<(), String> {
    refuse_tls(l, "Redis/Valkey")?;
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
    let (port, peer) = (l.port, free_port());
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
