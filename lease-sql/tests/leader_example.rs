//! The leader example's scheduler (`examples/sql_leader.rs`, compiled in here)
//! on SQLite and on the private servers of the provider chain: exactly one
//! leader, observed by every replica; a killed leader replaced with a bigger
//! fence; its late write refused.

#[path = "../examples/sql_leader.rs"]
#[allow(dead_code, unreachable_pub)]
mod example;

use leasehold_conformance::scheduler::{block_on, on_server};
use leasehold_conformance::servers::ServerKind;

#[test]
fn leader_example_on_sqlite() {
    let dir = std::env::temp_dir().join(format!("leasehold-leader-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let url = format!("sqlite://{}", dir.join("leader.sqlite").display());
    block_on(url, |url| async move { example::run(&url).await });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn leader_example_on_postgres() {
    on_server(ServerKind::PostgresLatest, |url| async move {
        example::run(&url).await
    });
}

#[test]
fn leader_example_on_mariadb() {
    on_server(ServerKind::MariaDb, |url| async move {
        example::run(&url).await
    });
}
