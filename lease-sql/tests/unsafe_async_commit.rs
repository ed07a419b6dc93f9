//! The control switch `SqlConfig::unsafe_keep_server_synchronous_commit`, on
//! a private lossy PostgreSQL (`synchronous_commit = off`): with the
//! defaults the lease sessions commit synchronously and the server is
//! accepted as durable; with the switch they keep the server's asynchronous
//! commit, so the server is judged able to forget (a crashed backend loses
//! the last claims) and refused unless the caller accepts that too. The
//! fault campaign's control relies on this to show what the session setting
//! prevents.

use leasehold_conformance::servers::{ServerKind, Settings, provide_with};
use leasehold_core::DurabilityPolicy;
use leasehold_sql::{SqlConfig, SqlError, SqlStrategy};

#[tokio::test]
async fn the_unsafe_switch_keeps_the_servers_asynchronous_commit() {
    let server = match provide_with(ServerKind::Postgres15, Settings::Lossy) {
        Ok(s) => s,
        Err(missing) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("no lossy PostgreSQL 15 under CI: {missing}")
        }
        Err(missing) => {
            eprintln!("SKIPPED (no lossy PostgreSQL 15 server here): {missing}");
            return;
        }
    };
    let url = server.url.clone();
    let defaults = SqlStrategy::connect(SqlConfig::new(&url))
        .await
        .expect("the defaults connect to a lossy PostgreSQL: the sessions commit synchronously");
    assert!(
        defaults.durability().is_durable(),
        "with the defaults the lease sessions must commit synchronously: {}",
        defaults.durability()
    );
    defaults.close().await;

    let unsafe_config = || SqlConfig::new(&url).unsafe_keep_server_synchronous_commit(true);
    match SqlStrategy::connect(unsafe_config()).await {
        Err(e @ SqlError::Forgetful(_)) => assert!(
            e.to_string().contains("synchronous_commit"),
            "the refusal must name synchronous_commit: {e}"
        ),
        Err(e) => panic!("expected SqlError::Forgetful naming synchronous_commit, got {e}"),
        Ok(_) => panic!(
            "with the switch the lease sessions must keep synchronous_commit = off, so the \
             server can forget and must be refused by default; it was accepted as durable"
        ),
    }

    let accepted = SqlStrategy::connect(unsafe_config().durability(DurabilityPolicy::Throwaway))
        .await
        .expect("durability(Throwaway) accepts a server that can forget");
    assert!(
        !accepted.durability().is_durable(),
        "with the switch the sessions keep synchronous_commit = off, which can forget: {}",
        accepted.durability()
    );
    accepted.close().await;
}
