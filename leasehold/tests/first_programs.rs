//! The guide's first programs (`examples/first_<store>.rs`, the code its
//! pages show whole) run against a private server of their store, twice: each
//! run leases a slot, makes three IDs and gives the slot back, and no ID of
//! either run repeats. A missing server is said loudly, and fails under
//! `CI=true`. (Kubernetes' program needs an API server; the fake one is not a
//! dependency of this crate, so that program is compiled, not run, here.)

use std::collections::HashSet;
use std::process::Command;

use leasehold_conformance::servers::{ServerKind, Settings, provide_with};

mod common;
use common::example;

/// One run of `program` on `url`: its slot, its fence and its three IDs.
fn run(program: &str, url: &str) -> (u32, u64, Vec<String>) {
    let out = Command::new(example(program))
        .arg(url)
        .env_remove("LEASEHOLD_URL")
        .current_dir(std::env::temp_dir())
        .output()
        .expect("spawn the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{program} {url}: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = stdout.lines();
    let first = lines.next().unwrap_or_default();
    let parsed = first
        .strip_prefix("slot ")
        .and_then(|rest| rest.split_once(" with fence "))
        .and_then(|(slot, fence)| Some((slot.parse().ok()?, fence.parse().ok()?)));
    let Some((slot, fence)) = parsed else {
        panic!("{program}: expected `slot N with fence F` first, got:\n{stdout}");
    };
    let ids: Vec<String> = lines
        .filter_map(|l| l.strip_prefix("id ").map(str::to_owned))
        .collect();
    assert_eq!(ids.len(), 3, "{program}: three IDs expected:\n{stdout}");
    (slot, fence, ids)
}

/// Both runs succeed on the store at `url`; together they made six
/// different IDs; a run that got the slot its predecessor gave back holds a
/// larger fence.
fn twice(program: &str, url: &str) {
    let (slot1, fence1, ids1) = run(program, url);
    let (slot2, fence2, ids2) = run(program, url);
    let all: HashSet<&String> = ids1.iter().chain(&ids2).collect();
    assert_eq!(all.len(), 6, "{program}: an ID repeated: {ids1:?} {ids2:?}");
    if slot1 == slot2 {
        assert!(
            fence2 > fence1,
            "{program}: slot {slot1} handed over without a larger fence ({fence1} then {fence2})"
        );
    }
}

/// A private server of `kind`, durable where the kind can be (the programs
/// use the library's defaults, which refuse a store that can forget), or
/// `None` (said loudly) when this machine has none outside CI.
fn server(kind: ServerKind) -> Option<leasehold_conformance::servers::Server> {
    let settings = if kind.settings().contains(&Settings::Durable) {
        Settings::Durable
    } else {
        Settings::Fast
    };
    match provide_with(kind, settings) {
        Ok(server) => Some(server),
        Err(missing) if !leasehold_conformance::in_ci() => {
            eprintln!("NOT RUN on {}: {missing}", kind.name());
            None
        }
        Err(missing) => panic!("{missing}"),
    }
}

#[test]
fn the_sqlite_program_runs_twice_on_one_file() {
    let dir = std::env::temp_dir().join(format!("leasehold-first-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("leases.sqlite").display());
    twice("first_sqlite", &url);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_postgres_program_runs_twice() {
    let Some(server) = server(ServerKind::PostgresLatest) else {
        return;
    };
    twice("first_postgres", &server.url);
}

#[test]
fn the_mysql_program_runs_twice_on_mariadb() {
    let Some(server) = server(ServerKind::MariaDb) else {
        return;
    };
    twice("first_mysql", &server.url);
}

#[test]
fn the_valkey_program_runs_twice() {
    let Some(server) = server(ServerKind::Valkey8) else {
        return;
    };
    twice("first_valkey", &server.url);
}

#[test]
fn the_etcd_program_runs_twice() {
    let Some(server) = server(ServerKind::Etcd35) else {
        return;
    };
    // The server is provided as an endpoint (`http://HOST:PORT`); the
    // store's URL names the store.
    let url = server.url.replacen("http://", "etcd://", 1);
    twice("first_etcd", &url);
}
