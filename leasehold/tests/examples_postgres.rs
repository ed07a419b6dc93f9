//! The examples to copy (`examples/snowflake_postgres.rs`,
//! `examples/leader_postgres.rs` and `examples/fence_into_postgres.rs`,
//! compiled in here) against private servers from the provider chain. A
//! missing server is said loudly, and fails under `CI=true`.

#[path = "../examples/snowflake_postgres.rs"]
#[allow(dead_code, unreachable_pub)]
mod snowflake;

#[path = "../examples/leader_postgres.rs"]
#[allow(dead_code, unreachable_pub)]
mod leader;

#[path = "../examples/fence_into_postgres.rs"]
#[allow(dead_code, unreachable_pub)]
mod fence_into;

use std::collections::HashSet;

use leasehold::LeaseGate;
use leasehold::nonce::{Layout, Sortable64};
use leasehold_conformance::servers::{ServerKind, Settings, provide_with};

/// A private server of `kind` with `settings`, or `None` (said loudly) when
/// this machine has none outside CI.
fn server(kind: ServerKind, settings: Settings) -> Option<leasehold_conformance::servers::Server> {
    match provide_with(kind, settings) {
        Ok(server) => Some(server),
        Err(missing) if !leasehold_conformance::in_ci() => {
            eprintln!("NOT RUN on {}: {missing}", kind.name());
            None
        }
        Err(missing) => panic!("{missing}"),
    }
}

/// A private PostgreSQL with durable settings: the examples connect with the
/// library's defaults, as a user's would, and those refuse a server that can
/// forget.
fn postgres() -> Option<leasehold_conformance::servers::Server> {
    server(ServerKind::PostgresLatest, Settings::Durable)
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
    let ids = Sortable64::with_layout(LeaseGate::new(), Layout::default64()).unwrap();
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

/// A leader elected on Valkey writes fenced rows into a PostgreSQL that
/// holds no leases, opened as a plain pool. That PostgreSQL runs with
/// `fsync = off`, which `leasehold::connect` refuses for leases: the fence
/// table needs none of the lease checks. Every hour is written once across
/// the hand-over, and the first leader's stamp is refused once the second
/// has written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_on_valkey_writes_fenced_rows_into_postgres() {
    let Some(valkey) = server(ServerKind::Valkey8, Settings::Durable) else {
        return;
    };
    let Some(data) = server(ServerKind::PostgresLatest, Settings::Fast) else {
        return;
    };
    let refused = leasehold::connect(&data.url).await;
    assert!(
        refused.is_err(),
        "leases on a PostgreSQL with fsync = off were accepted: the contrast this test draws is gone"
    );
    let outcome = fence_into::run(&valkey.url, &data.url, 3).await.unwrap();
    let hours: Vec<i64> = outcome.rows.iter().map(|(h, _)| *h).collect();
    assert_eq!(
        hours,
        (0..hours.len() as i64).collect::<Vec<_>>(),
        "{:?}",
        outcome.rows
    );
    let writers: HashSet<&str> = outcome.rows.iter().map(|(_, w)| w.as_str()).collect();
    assert_eq!(
        writers.len(),
        2,
        "one replica wrote every hour: {:?}",
        outcome.rows
    );
    assert!(
        !outcome.stale_accepted,
        "the first leader's stamp was accepted after its successor wrote: {:?}",
        outcome.rows
    );
}
