//! MariaDB servers set up at the same moment, as the test binaries and the
//! fault campaign set them up side by side: single servers and replicated
//! pairs, each with a temporary directory of its own.
//!
//! With one directory for all (MariaDB's default under `--no-defaults`:
//! `$TMPDIR` or `/tmp`), every MariaDB that starts, an install's bootstrap
//! included, removes the `#sql*` files it finds there, which are the
//! temporary tables of the servers already running: installs fail
//! ("Installation of system tables failed!", `Unknown table
//! 'mysql.tmp_user_sys'`), and a running server loses a temporary table
//! when another one starts.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use leasehold_conformance::in_ci;
use leasehold_conformance::programs;
use leasehold_conformance::servers::{self, Server, ServerKind};
use leasehold_conformance::topology::mariadb::MariaPair;

/// Single servers set up at once.
const SINGLES: usize = 4;

/// Replicated pairs set up at once with them (two servers each).
const PAIRS: usize = 2;

/// Whether this machine starts MariaDB servers of its own; says why not (a
/// missing server fails under CI, as everywhere).
fn local_mariadb_here() -> bool {
    let kind = ServerKind::MariaDb;
    if std::env::var_os(kind.env_var()).is_some_and(|v| !v.is_empty()) {
        eprintln!(
            "${} names one server for every test: nothing is set up here; skipped",
            kind.env_var()
        );
        return false;
    }
    if programs::find("mariadbd").is_none() || programs::find("mariadb-install-db").is_none() {
        assert!(!in_ci(), "no local MariaDB: {}", kind.install_hint());
        eprintln!("no local MariaDB ({}): skipped", kind.install_hint());
        return false;
    }
    true
}

/// A client on the server at `addr`: `mariadb` reading statements from
/// its stdin.
fn client(addr: SocketAddr) -> Command {
    let mut cmd = programs::command("mariadb").expect("the mariadb client");
    cmd.args(["--no-defaults", "-uroot", "-h127.0.0.1", "-N", "-B"])
        .arg(format!("-P{}", addr.port()));
    cmd
}

/// What `statements` print on the server at `addr`.
fn query(addr: SocketAddr, statements: &str) -> String {
    let out = client(addr)
        .args(["-e", statements])
        .output()
        .expect("the mariadb client runs");
    assert!(
        out.status.success(),
        "{statements} on {addr}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The address of a `mysql://root@host:port/db` URL.
fn addr_of(url: &str) -> SocketAddr {
    let host_port = url
        .rsplit_once('@')
        .and_then(|(_, rest)| rest.split('/').next())
        .expect("host and port in the URL");
    host_port.parse().expect("an address")
}

/// A pair, with the runtime that drives its clients' address.
struct Pair {
    pair: MariaPair,
    _address: tokio::runtime::Runtime,
}

fn start_pair() -> Result<Pair, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let pair = rt.block_on(MariaPair::start())?;
    Ok(Pair { pair, _address: rt })
}

/// Four single servers and two pairs, set up at the same moment, all
/// start, each with a temporary directory no other server has; and a
/// temporary table of one server can still be dropped after another
/// restarted.
#[test]
fn mariadb_servers_set_up_at_once_each_keep_their_own_temporary_files() {
    if !local_mariadb_here() {
        return;
    }
    let (singles, pairs) = std::thread::scope(|s| {
        let singles: Vec<_> = (0..SINGLES)
            .map(|_| s.spawn(|| servers::provide(ServerKind::MariaDb).map_err(|e| e.to_string())))
            .collect();
        let pairs: Vec<_> = (0..PAIRS).map(|_| s.spawn(start_pair)).collect();
        let singles: Vec<Result<Server, String>> = singles
            .into_iter()
            .map(|h| h.join().expect("a set-up thread"))
            .collect();
        let pairs: Vec<Result<Pair, String>> = pairs
            .into_iter()
            .map(|h| h.join().expect("a set-up thread"))
            .collect();
        (singles, pairs)
    });
    let failed: Vec<&String> = singles
        .iter()
        .filter_map(|r| r.as_ref().err())
        .chain(pairs.iter().filter_map(|r| r.as_ref().err()))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} set-ups made at once failed:\n{}",
        failed.len(),
        SINGLES + PAIRS,
        failed
            .iter()
            .map(|e| e.as_str())
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
    let mut singles: Vec<Server> = singles.into_iter().map(Result::unwrap).collect();
    let pairs: Vec<Pair> = pairs.into_iter().map(Result::unwrap).collect();

    let mut addrs: Vec<SocketAddr> = singles
        .iter()
        .map(|s| s.addr().expect("a server's address"))
        .collect();
    for p in &pairs {
        addrs.push(addr_of(&p.pair.primary_url()));
        addrs.push(addr_of(&p.pair.replica_url()));
    }
    let tmpdirs: Vec<String> = addrs.iter().map(|a| query(*a, "SELECT @@tmpdir")).collect();
    let system = std::env::temp_dir();
    for (addr, tmp) in addrs.iter().zip(&tmpdirs) {
        assert_ne!(
            Path::new(tmp.trim_end_matches('/')),
            system.as_path(),
            "the server on {addr} keeps its temporary files in the system's temp dir"
        );
    }
    let unique: std::collections::HashSet<&String> = tmpdirs.iter().collect();
    assert_eq!(
        unique.len(),
        tmpdirs.len(),
        "servers share a temporary directory: {tmpdirs:?}"
    );

    // A temporary table on disk (Aria keeps it in the server's temporary
    // directory) in a session of the first server, kept open while the
    // second server restarts, then read and dropped. (Had the restart
    // removed its files, the read would still work on the open files, but
    // the drop would fail: `ERROR 1051 Unknown table`, what fails the
    // installs.)
    let first = addrs[0];
    let mut session = client(first)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("a session");
    let mut stdin = session.stdin.take().expect("stdin");
    stdin
        .write_all(b"CREATE TEMPORARY TABLE leasehold.kept (x INT) ENGINE=Aria;\nINSERT INTO leasehold.kept VALUES (1);\n")
        .expect("the session's statements");
    stdin.flush().expect("flush");
    let tmp = Path::new(&tmpdirs[0]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_dir(tmp).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().starts_with("#sql"))
    }) {
        if let Ok(Some(status)) = session.try_wait() {
            let mut err = String::new();
            let _ = session
                .stderr
                .take()
                .map(|mut e| e.read_to_string(&mut err));
            panic!("the session on {first} ended ({status}) before its table appeared: {err}");
        }
        assert!(
            Instant::now() < deadline,
            "the temporary table of the server on {first} did not appear in {}",
            tmp.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    singles[1].restart().expect("restarting another server");
    stdin
        .write_all(b"SELECT COUNT(*) FROM leasehold.kept;\nDROP TEMPORARY TABLE leasehold.kept;\n")
        .expect("the session's last statement");
    drop(stdin);
    let mut out = String::new();
    let mut err = String::new();
    session
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("the session's output");
    session
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("the session's errors");
    let status = session.wait().expect("the session ends");
    assert!(
        status.success() && out.trim() == "1",
        "the temporary table of the server on {first} could not be read and dropped after \
         another server restarted ({status}): {out}{err}"
    );
}
