//! The PostgreSQL examples (`examples/snowflake_postgres.rs` and
//! `examples/leader_postgres.rs`, compiled in here) against a private server
//! from the provider chain. A missing server is said loudly, and fails under
//! `CI=true`.

#[path = "../examples/snowflake_postgres.rs"]
#[allow(dead_code, unreachable_pub)]
mod snowflake;

#[path = "../examples/leader_postgres.rs"]
#[allow(dead_code, unreachable_pub)]
mod leader;

use std::collections::HashSet;

use leasehold_conformance::servers::{ServerKind, Settings, provide_with};
use leasehold_core::LeaseGate;
use leasehold_nonce::Sortable64;

/// The URL of a private PostgreSQL, or `None` (said loudly) when this
/// machine has none outside CI.
fn postgres() -> Option<leasehold_conformance::servers::Server> {
    // Durable settings: the examples connect with the library's defaults, as a
    // user's would, and those refuse a server that can forget.
    match provide_with(ServerKind::PostgresLatest, Settings::Durable) {
        Ok(server) => Some(server),
        Err(missing) if !leasehold_conformance::in_ci() => {
            eprintln!(
                "NOT RUN on {}: {missing}",
                ServerKind::PostgresLatest.name()
            );
            None
        }
        Err(missing) => panic!("{missing}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snowflake_example_makes_distinct_ids_in_concurrent_handlers() {
    let Some(server) = postgres() else { return };
    let made = snowflake::run(&server.url, 2_000).await.unwrap();
    let distinct: HashSet<&String> = made.iter().collect();
    assert_eq!((made.len(), distinct.len()), (2_000, 2_000));
}

/// Without a lease the handler answers 503 at once (generation never waits
/// for a lease), with the Retry-After of the lease's health, and says why.
#[tokio::test(flavor = "current_thread")]
async fn snowflake_handler_answers_503_while_no_lease_is_held() {
    let ids = Sortable64::new(LeaseGate::new()).unwrap();
    match snowflake::create_order(&ids).await {
        snowflake::Response::Unavailable { retry_after, why } => {
            assert_eq!(retry_after, 1);
            assert!(why.contains("no lease held"), "{why}");
        }
        other => panic!("without a lease the handler answered {other:?}"),
    }
}

/// Every hour is billed once, by one leader at a time; after the first
/// leader is shut down the other bills the next hours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_example_bills_every_hour_once_across_a_hand_over() {
    let Some(server) = postgres() else { return };
    let rows = leader::run(&server.url, 3).await.unwrap();
    let hours: Vec<i64> = rows.iter().map(|(h, _)| *h).collect();
    let first = hours[0];
    assert_eq!(
        hours,
        (first..first + hours.len() as i64).collect::<Vec<_>>(),
        "{rows:?}"
    );
    let billers: HashSet<&str> = rows.iter().map(|(_, b)| b.as_str()).collect();
    assert_eq!(billers.len(), 2, "one replica billed every hour: {rows:?}");
}
