//! What connect reads of a replicated server, on private replicated pairs
//! (`leasehold_conformance::topology`): a client sent to a replica is
//! refused, whatever its privileges; a primary whose replicas are
//! asynchronous can split brain (after a failover it goes on confirming
//! claims and renewals to the clients a partition left with it): connect
//! reports it with the setting that closes it, and refuses it when asked
//! to (`refuse_split_brain`); one whose commits wait for a replica cannot.

use leasehold_conformance::restarts::acquire_past_the_restart_guard;
use leasehold_conformance::servers::ServerKind;
use leasehold_conformance::topology::mariadb::MariaPair;
use leasehold_conformance::topology::postgres::{PgPair, Replication};
use leasehold_core::operate::doctor;
use std::time::{Duration, Instant};

use leasehold_core::{AcquireError, Floor, PoolName, PoolSpec, Renewal, Strategy, Verdict};
use leasehold_sql::{SqlConfig, SqlError, SqlStrategy};

/// Under CI a missing server fails; elsewhere it is a SKIPPED line.
fn skip_or_fail(what: &str, e: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("no {what} under CI: {e}");
    }
    eprintln!("SKIPPED (no {what} here): {e}");
}

async fn pg_pair(replication: Replication) -> Option<PgPair> {
    match PgPair::start(ServerKind::Postgres15, replication).await {
        Ok(p) => Some(p),
        Err(e) => {
            skip_or_fail("PostgreSQL 15 primary and standby", &e);
            None
        }
    }
}

async fn maria_pair() -> Option<MariaPair> {
    match MariaPair::start().await {
        Ok(p) => Some(p),
        Err(e) => {
            skip_or_fail("MariaDB primary and replica", &e);
            None
        }
    }
}

async fn connect(config: SqlConfig) -> Result<SqlStrategy, SqlError> {
    SqlStrategy::connect(config.max_connections(1)).await
}

/// The doctor's `replication` line for `s`.
async fn replication_line(s: &SqlStrategy) -> leasehold_core::Check {
    doctor(s)
        .await
        .into_iter()
        .find(|c| c.name == "replication")
        .expect("a replication line")
}

fn pool() -> PoolSpec {
    PoolSpec::new(
        PoolName::new("replication").unwrap(),
        1,
        Duration::from_secs(10),
    )
    .unwrap()
}

/// A replica refused at connect, and, for an operator's tool that only
/// looks (`refuse_at_connect(false)`), kept: the doctor's replication line
/// FAILs with the fix and a claim answers the refusal.
async fn assert_refused_as_a_replica(url: &str, says: &str) {
    match connect(SqlConfig::new(url)).await {
        Err(e @ SqlError::Replica { .. }) => {
            assert!(!e.is_retryable());
            let text = e.to_string();
            assert!(text.contains(says), "{says} missing: {text}");
            assert!(text.contains("point the URL at the primary"), "{text}");
        }
        Err(e) => panic!("a replica must be refused as one: {e:?}"),
        Ok(s) => panic!("a replica was accepted: {:?}", s.replication()),
    }
    let s = connect(SqlConfig::new(url).refuse_at_connect(false))
        .await
        .expect("an operator's look at a replica");
    let line = replication_line(&s).await;
    assert_eq!(line.verdict, Verdict::Fail, "{line}");
    assert!(line.detail.contains(says), "{line}");
    assert!(
        line.fix.as_deref().is_some_and(|f| f.contains("primary")),
        "{line}"
    );
    match s.acquire(&pool(), Floor(0)).await {
        Err(AcquireError::Misconfigured { what, .. }) => assert!(what.contains(says), "{what}"),
        other => panic!("a claim on a replica must be refused: {other:?}"),
    }
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_standby_is_refused_at_connect() {
    let Some(pair) = pg_pair(Replication::Async).await else {
        return;
    };
    assert_refused_as_a_replica(&pair.standby_url(), "is a standby").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_asynchronous_standby_lets_the_primary_split_brain_reported_or_refused() {
    let Some(pair) = pg_pair(Replication::Async).await else {
        return;
    };
    let url = pair.primary_url();
    let s = connect(SqlConfig::new(&url)).await.expect("a primary");
    let risk = s.replication().split_brain.clone().expect("a split brain");
    assert_eq!(risk.setting, "synchronous_standby_names", "{risk:?}");
    assert!(
        s.replication().found.contains("1 WAL sender"),
        "{:?}",
        s.replication()
    );
    let line = replication_line(&s).await;
    assert_eq!(line.verdict, Verdict::Warn, "{line}");
    let fix = line.fix.clone().unwrap_or_default();
    assert!(fix.contains("synchronous_standby_names"), "{line}");
    assert!(fix.contains("refuse_split_brain=true"), "{line}");

    // A least-privileged user sees the WAL senders too (their details
    // hidden without pg_read_all_stats, which the count does not need).
    let admin = s.postgres().expect("PostgreSQL").clone();
    sqlx::raw_sql("CREATE ROLE lease_user LOGIN PASSWORD 'pw'")
        .execute(&admin)
        .await
        .unwrap();
    s.close().await;
    let user_url = url.replacen("postgres://postgres@", "postgres://lease_user:pw@", 1);
    let user = connect(SqlConfig::new(&user_url))
        .await
        .expect("the lease user");
    assert_eq!(
        user.replication()
            .split_brain
            .as_ref()
            .map(|r| r.setting.as_str()),
        Some("synchronous_standby_names"),
        "{:?}",
        user.replication()
    );
    user.close().await;

    for config in [
        SqlConfig::new(&url).refuse_split_brain(true),
        SqlConfig::from_url(&format!("{url}?refuse_split_brain=true")).unwrap(),
    ] {
        match connect(config).await {
            Err(e @ SqlError::SplitBrain(_)) => {
                assert!(!e.is_retryable());
                let text = e.to_string();
                assert!(text.contains("synchronous_standby_names"), "{text}");
                assert!(text.contains("refuse_split_brain"), "{text}");
            }
            Err(e) => panic!("expected a split-brain refusal: {e:?}"),
            Ok(s) => panic!("refuse_split_brain accepted {:?}", s.replication()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_synchronous_standby_closes_the_split_brain() {
    let Some(pair) = pg_pair(Replication::Sync).await else {
        return;
    };
    let s = connect(SqlConfig::new(pair.primary_url()).refuse_split_brain(true))
        .await
        .expect("a primary whose commits wait for its standby");
    assert!(
        s.replication().split_brain.is_none(),
        "{:?}",
        s.replication()
    );
    assert!(
        s.replication().found.contains("1 WAL sender"),
        "{:?}",
        s.replication()
    );
    let line = replication_line(&s).await;
    assert_eq!(line.verdict, Verdict::Ok, "{line}");
    s.close().await;
}

/// The replica is `read_only`, which root (`READ_ONLY ADMIN`) writes
/// through: refused for it; and with `read_only` off, refused still, for
/// the replication it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_a_replica_is_refused_even_for_root() {
    let Some(pair) = maria_pair().await else {
        return;
    };
    let url = pair.replica_url();
    assert_refused_as_a_replica(&url, "read_only = ON").await;
    let replica = sqlx::MySqlPool::connect(&url).await.unwrap();
    sqlx::raw_sql("SET GLOBAL read_only = OFF")
        .execute(&replica)
        .await
        .unwrap();
    replica.close().await;
    assert_refused_as_a_replica(&url, "is a replica").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_an_asynchronous_replica_lets_the_primary_split_brain_reported_or_refused() {
    let Some(pair) = maria_pair().await else {
        return;
    };
    let url = pair.primary_url();
    let s = connect(SqlConfig::new(&url)).await.expect("a primary");
    let risk = s.replication().split_brain.clone().expect("a split brain");
    assert_eq!(risk.setting, "rpl_semi_sync_master_enabled", "{risk:?}");
    let line = replication_line(&s).await;
    assert_eq!(line.verdict, Verdict::Warn, "{line}");
    s.close().await;
    match connect(SqlConfig::from_url(&format!("{url}?refuse_split_brain=true")).unwrap()).await {
        Err(e @ SqlError::SplitBrain(_)) => {
            let text = e.to_string();
            assert!(text.contains("rpl_semi_sync_master_enabled"), "{text}");
        }
        Err(e) => panic!("expected a split-brain refusal: {e:?}"),
        Ok(s) => panic!("refuse_split_brain accepted {:?}", s.replication()),
    }
}

/// Turns semi-synchronous replication on (the replica acknowledges, the
/// primary's commits wait for it, for up to an hour), and waits until the
/// primary counts the replica as a semi-synchronous client.
async fn semi_synchronous(pair: &MariaPair) {
    let replica = sqlx::MySqlPool::connect(&pair.replica_url()).await.unwrap();
    sqlx::raw_sql(
        "SET GLOBAL rpl_semi_sync_slave_enabled = ON; STOP SLAVE IO_THREAD; \
         START SLAVE IO_THREAD",
    )
    .execute(&replica)
    .await
    .unwrap();
    replica.close().await;
    let primary = sqlx::MySqlPool::connect(&pair.primary_url()).await.unwrap();
    sqlx::raw_sql(
        "SET GLOBAL rpl_semi_sync_master_enabled = ON; \
         SET GLOBAL rpl_semi_sync_master_timeout = 3600000",
    )
    .execute(&primary)
    .await
    .unwrap();
    let limit = Instant::now() + Duration::from_secs(60);
    loop {
        let clients: String = sqlx::query_scalar(
            "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
             WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_CLIENTS'",
        )
        .fetch_one(&primary)
        .await
        .unwrap();
        if clients == "1" {
            break;
        }
        assert!(
            Instant::now() < limit,
            "the replica did not reconnect semi-synchronously in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    primary.close().await;
}

/// Semi-synchronous replication in force (the primary's commits wait for
/// the replica's acknowledgement) closes the split brain: not reported,
/// and `refuse_split_brain` accepts the primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_semi_synchronous_replication_closes_the_split_brain() {
    let Some(pair) = maria_pair().await else {
        return;
    };
    semi_synchronous(&pair).await;
    let s = connect(SqlConfig::new(pair.primary_url()).refuse_split_brain(true))
        .await
        .expect("a primary whose commits wait for its replica");
    assert!(
        s.replication().split_brain.is_none(),
        "{:?}",
        s.replication()
    );
    let line = replication_line(&s).await;
    assert_eq!(line.verdict, Verdict::Ok, "{line}");
    s.close().await;
}

/// The split brain `tests/failover.rs` measures on MariaDB
/// (`mariadb_split_brain_lets_the_old_primarys_clients_renew`), with the
/// setting the replication line recommends: the replica is promoted while
/// the old primary still runs, holder A still reaches the old primary, B
/// the new one. The old primary's commits now wait for a replica it no
/// longer has, so none of A's renewals there is confirmed once B holds the
/// slot: A stops at its deadline instead of overlapping B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_split_brain_with_semi_synchronous_replication_stops_the_old_primarys_clients() {
    let pool = PoolSpec::new(
        PoolName::new("splitbrain").unwrap(),
        1,
        Duration::from_secs(3),
    )
    .unwrap()
    .with_max_clock_skew(Duration::from_millis(100))
    .unwrap();
    let Some(mut pair) = maria_pair().await else {
        return;
    };
    semi_synchronous(&pair).await;
    let a = connect(SqlConfig::new(pair.primary_url()).op_timeout(Duration::from_secs(1)))
        .await
        .expect("A on the primary");
    a.ensure_pool(&pool)
        .await
        .expect("the lease table and the pool's rows");
    let a_grant = acquire_past_the_restart_guard(&a, &pool, Floor(0))
        .await
        .expect("A's claim");
    tokio::task::block_in_place(|| {
        pair.wait_replicated(
            "SELECT COUNT(*) FROM leasehold.leasehold_leases WHERE pool = 'splitbrain' \
             AND token IS NOT NULL",
        )
    })
    .unwrap();
    tokio::task::block_in_place(|| pair.promote_replica()).unwrap();
    let b = loop_connect(SqlConfig::new(pair.url())).await;
    let limit = Instant::now() + Duration::from_secs(120);
    let mut before = Vec::new();
    let b_grant = loop {
        before.push(a.renew(&pool, &a_grant, Floor(0)).await);
        match b.acquire(&pool, Floor(0)).await {
            Ok(g) => break g,
            Err(e) if e.is_retryable() && Instant::now() < limit => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("B's claim on the promoted replica: {e}"),
        }
    };
    assert_eq!(b_grant.slot, a_grant.slot);
    let mut after = Vec::new();
    for _ in 0..3 {
        after.push(a.renew(&pool, &a_grant, Floor(0)).await);
    }
    eprintln!("A's renewals on the old primary before B's grant: {before:?}; after: {after:?}");
    assert!(
        after.iter().all(|r| !matches!(r, Renewal::Renewed { .. })),
        "no renewal on the old primary may be confirmed once its semi-synchronous replica is \
         gone: {after:?}"
    );
}

/// Connects, trying again while the server is unreachable (a promotion in
/// progress) for up to 60 s.
async fn loop_connect(config: SqlConfig) -> SqlStrategy {
    let limit = Instant::now() + Duration::from_secs(60);
    loop {
        match connect(config.clone()).await {
            Ok(s) => return s,
            Err(e) if e.is_retryable() && Instant::now() < limit => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("connect: {e}"),
        }
    }
}
