//! Settings watched, not read once: an operator's change to a running
//! server's durability or replication settings, on private durable servers
//! (MariaDB 10.11, and a PostgreSQL 15 primary with a synchronous standby), is seen by the next claim or renewal
//! that finds a quarter of its pool's TTL passed since the last read.
//!
//! A primary made read-only stops claims and renewals (a lease user with
//! SUPER, as here, could still write there, so nothing else would), and
//! both resume once it is writable again; a durability setting weakened
//! under the durable policy refuses new claims while renewals go on (the
//! restart guard covers the crash that would lose them).
//!
//! Time bounds come from readings taken around the calls: a call that
//! began a quarter TTL after the change returned is the one that must see
//! it, however slow the machine.

use std::time::{Duration, Instant};

use leasehold_conformance::restarts::acquire_past_the_restart_guard;
use leasehold_conformance::servers::{Server, ServerKind, Settings, provide_with};
use leasehold_conformance::topology::postgres::{PgPair, Replication as PgReplication};
use leasehold_core::{
    AcquireError, DurabilityPolicy, Floor, Grant, PoolName, PoolSpec, Renewal, Strategy,
};
use leasehold_sql::{SqlConfig, SqlStrategy};

/// The lease TTL: a quarter of it (2 s) separates two reads of the
/// settings.
const TTL: Duration = Duration::from_secs(8);

/// How long a test polls for an answer before it fails.
const DEADLINE: Duration = Duration::from_secs(80);

/// Between two polls: no assertion depends on it.
const POLL: Duration = Duration::from_millis(100);

fn spec(name: &str) -> PoolSpec {
    PoolSpec::new(PoolName::new(name).unwrap(), 2, TTL)
        .unwrap()
        .with_max_clock_skew(Duration::from_millis(100))
        .unwrap()
}

/// A private durable server, or `None` (and a SKIPPED line) where it is not
/// installed; under CI a missing server fails.
fn server(kind: ServerKind) -> Option<Server> {
    match provide_with(kind, Settings::Durable) {
        Ok(server) => Some(server),
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("no {kind:?} server under CI: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED (no {kind:?} server here): {e}");
            None
        }
    }
}

/// Runs `sql` on the strategy's own pool (the same privileged user as the
/// lease connections), behind the lease operations' backs.
async fn run(s: &SqlStrategy, sql: &str) {
    let r = if let Some(p) = s.postgres() {
        sqlx::raw_sql(sql).execute(p).await.map(drop)
    } else {
        sqlx::raw_sql(sql)
            .execute(s.mysql().unwrap())
            .await
            .map(drop)
    };
    r.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Runs `sql`; the instant it returned, after which the server has it.
async fn change(s: &SqlStrategy, sql: &str) -> Instant {
    run(s, sql).await;
    Instant::now()
}

/// A connected strategy, the pool prepared and one of its two slots held.
async fn holder(config: SqlConfig, pool: &PoolSpec) -> (SqlStrategy, Grant) {
    let s = SqlStrategy::connect(config.max_connections(2))
        .await
        .expect("a durable server is accepted");
    s.ensure_pool(pool).await.unwrap();
    let grant = acquire_past_the_restart_guard(&s, pool, Floor::NONE)
        .await
        .expect("the first claim");
    (s, grant)
}

/// Renews `grant` until a renewal that began a quarter TTL after `changed`
/// has answered; every answer, with when its call began. Fails past the
/// deadline.
async fn renewals_until_due(
    s: &SqlStrategy,
    pool: &PoolSpec,
    grant: &Grant,
    changed: Instant,
) -> Vec<(Instant, Renewal)> {
    let due = changed + TTL / 4;
    let mut answers = Vec::new();
    loop {
        let began = Instant::now();
        assert!(
            began < changed + DEADLINE,
            "no renewal was tried a quarter TTL after the change within {DEADLINE:?}: {answers:?}"
        );
        let answer = s.renew(pool, grant, Floor::NONE).await;
        answers.push((began, answer));
        if began >= due {
            return answers;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `answer` says the server is read-only, naming the setting.
fn read_only_retry(answer: &Renewal) -> bool {
    matches!(answer, Renewal::Retry(why) if why.to_string().contains("read_only"))
}

/// Renewal of `grant` resumes: once a renewal that began a quarter TTL
/// after `changed` is tried, it renews, unless the lease ran out meanwhile
/// (its last renewal began a TTL ago), when it is `Lost`, tried and
/// answered by the store, not withheld.
async fn renewals_resume(
    s: &SqlStrategy,
    pool: &PoolSpec,
    grant: &Grant,
    changed: Instant,
    renewed: Instant,
) {
    let answers = renewals_until_due(s, pool, grant, changed).await;
    let (began, last) = answers.last().unwrap();
    match last {
        Renewal::Renewed { .. } => {}
        Renewal::Lost(_) if began.duration_since(renewed) >= TTL => {}
        other => panic!("a renewal a quarter TTL after the change must be tried: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_a_primary_made_read_only_stops_renewals_and_claims_until_writable_again() {
    let Some(server) = server(ServerKind::MariaDb) else {
        return;
    };
    let pool = spec("read-only-watch");
    // The server's own root user: SUPER, so read_only does not stop its
    // writes; only the watch does.
    let (s, grant) = holder(SqlConfig::new(&server.url), &pool).await;
    let renewed = Instant::now();
    match s.renew(&pool, &grant, Floor::NONE).await {
        Renewal::Renewed { .. } => {}
        other => panic!("a renewal on a writable primary: {other:?}"),
    }
    run(&s, "CREATE TABLE watch_probe (x INT)").await;

    let changed = change(&s, "SET GLOBAL read_only = ON").await;
    run(&s, "INSERT INTO watch_probe VALUES (1)").await;
    let answers = renewals_until_due(&s, &pool, &grant, changed).await;
    let (_, last) = answers.last().unwrap();
    assert!(
        read_only_retry(last),
        "a renewal a quarter TTL after the server was made read-only must not be tried, \
         naming read_only: {answers:?}"
    );
    let fix = match s.acquire(&pool, Floor::NONE).await {
        Err(AcquireError::Misconfigured { what, fix }) => {
            assert!(what.contains("read_only"), "{what}");
            fix
        }
        other => panic!("a claim on a read-only server must be refused: {other:?}"),
    };
    assert!(fix.contains("point the URL at the primary"), "{fix}");
    assert!(
        s.replication()
            .refusal
            .is_some_and(|r| r.contains("read_only")),
        "the doctor reports the latest read: {:?}",
        s.replication()
    );

    let changed = change(&s, "SET GLOBAL read_only = OFF").await;
    renewals_resume(&s, &pool, &grant, changed, renewed).await;
    assert!(s.refusal().is_none(), "{:?}", s.refusal());
    assert!(s.replication().refusal.is_none(), "{:?}", s.replication());
    match s.acquire(&pool, Floor::NONE).await {
        Ok(_) => {}
        other => panic!("a claim on the writable primary again: {other:?}"),
    }
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_innodb_flush_weakened_under_the_durable_policy_refuses_claims_while_renewals_go_on()
 {
    let Some(server) = server(ServerKind::MariaDb) else {
        return;
    };
    let pool = spec("durability-watch");
    let config = SqlConfig::new(&server.url).durability(DurabilityPolicy::Durable);
    let (s, grant) = holder(config, &pool).await;
    assert!(s.durability().is_durable(), "{}", s.durability());

    let changed = change(&s, "SET GLOBAL innodb_flush_log_at_trx_commit = 0").await;
    let answers = renewals_until_due(&s, &pool, &grant, changed).await;
    assert!(
        answers
            .iter()
            .all(|(_, a)| matches!(a, Renewal::Renewed { .. })),
        "a weakened durability setting must not stop renewals: {answers:?}"
    );
    match s.acquire(&pool, Floor::NONE).await {
        Err(AcquireError::Misconfigured { what, fix }) => {
            let text = format!("{what}\n{fix}");
            assert!(
                text.contains("innodb_flush_log_at_trx_commit = 0"),
                "{text}"
            );
            assert!(text.contains("durability=one-timing-per-pool"), "{text}");
        }
        other => panic!("a claim under the durable policy must be refused: {other:?}"),
    }
    assert!(!s.durability().is_durable(), "{}", s.durability());

    let changed = change(&s, "SET GLOBAL innodb_flush_log_at_trx_commit = 1").await;
    let answers = renewals_until_due(&s, &pool, &grant, changed).await;
    assert!(
        answers
            .iter()
            .all(|(_, a)| matches!(a, Renewal::Renewed { .. })),
        "{answers:?}"
    );
    match s.acquire(&pool, Floor::NONE).await {
        Ok(_) => {}
        other => panic!("a claim once the server is durable again: {other:?}"),
    }
    assert!(s.durability().is_durable(), "{}", s.durability());
    s.close().await;
}

/// A primary whose commits wait for its synchronous standby, with
/// `refuse_split_brain`: an operator's `synchronous_standby_names = ''`
/// lets it split brain, and claims are refused until it is set again; so
/// does `lc_messages` set to German, under which the warning of a
/// cancelled synchronous wait goes unread, until it is reset.
/// PostgreSQL's `pg_reload_conf()` only signals: each backend takes the new
/// setting at its next command, so the claim is polled until it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_synchronous_primary_made_able_to_split_brain_refuses_claims_under_refuse_split_brain()
 {
    let pair = match PgPair::start(ServerKind::Postgres15, PgReplication::Sync).await {
        Ok(pair) => pair,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("no PostgreSQL 15 primary and standby under CI: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED (no PostgreSQL 15 primary and standby here): {e}");
            return;
        }
    };
    let pool = spec("standbys-watch");
    let config = SqlConfig::new(pair.primary_url()).refuse_split_brain(true);
    let (s, _grant) = holder(config, &pool).await;
    assert!(
        s.replication().split_brain.is_none(),
        "{:?}",
        s.replication()
    );

    // Each change lets the primary split brain: synchronous standbys no
    // longer named; the server made to speak German, under which the
    // warning of a cancelled synchronous wait, read by its English text,
    // goes unseen (the locale is made by `cargo xtask test`, as root:
    // `localedef -i de_DE -f UTF-8 de_DE.UTF-8`). Each is refused, named,
    // reported as the latest read, and undone.
    for (setting, value, named) in [
        (
            "synchronous_standby_names",
            "''",
            "synchronous_standby_names = ''",
        ),
        ("lc_messages", "'de_DE.UTF-8'", "de_DE.UTF-8"),
    ] {
        run(&s, &format!("ALTER SYSTEM SET {setting} = {value}")).await;
        let changed = change(&s, "SELECT pg_reload_conf()").await;
        claims_until(&s, &pool, changed, |answer| match answer {
            Err(AcquireError::Misconfigured { what, fix }) => {
                let text = format!("{what}\n{fix}");
                assert!(text.contains(setting) && text.contains(named), "{text}");
                true
            }
            _ => false,
        })
        .await;
        assert!(
            s.replication()
                .split_brain
                .is_some_and(|r| r.setting == setting),
            "the doctor reports the latest read: {:?}",
            s.replication()
        );
        run(&s, &format!("ALTER SYSTEM RESET {setting}")).await;
        let changed = change(&s, "SELECT pg_reload_conf()").await;
        claims_until(&s, &pool, changed, |answer| answer.is_ok()).await;
        assert!(s.refusal().is_none(), "{:?}", s.refusal());
    }
    s.close().await;
}

/// Claims on `pool` until `done` says yes to an answer (a grant is given
/// back at once), failing past the deadline; a claim answers
/// `Misconfigured` or a grant, nothing else.
async fn claims_until(
    s: &SqlStrategy,
    pool: &PoolSpec,
    changed: Instant,
    mut done: impl FnMut(&Result<Grant, AcquireError>) -> bool,
) {
    let mut claims = 0;
    loop {
        let answer = s.acquire(pool, Floor::NONE).await;
        if done(&answer) {
            if let Ok(grant) = answer {
                let _ = s.release(pool, &grant, Floor::NONE).await;
            }
            return;
        }
        claims += 1;
        let last = match answer {
            Ok(grant) => {
                let _ = s.release(pool, &grant, Floor::NONE).await;
                "granted".to_owned()
            }
            Err(e @ AcquireError::Misconfigured { .. }) => e.to_string(),
            Err(e) => panic!("a claim: {e}"),
        };
        assert!(
            changed.elapsed() < DEADLINE,
            "none of {claims} claims in the {DEADLINE:?} after the change answered as \
             expected; the last: {last}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The server's count of statements received.
async fn questions(p: &sqlx::MySqlPool) -> i64 {
    let (_, v): (String, String) = sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Questions'")
        .fetch_one(p)
        .await
        .unwrap();
    v.parse().unwrap()
}

/// Not a check: measures what the re-read costs, in statements the server
/// counts (`Questions`) per renewal, for one holder and for eight sharing
/// a backend, renewing every third of a 2 s TTL for 10 s. A renewal is
/// two statements in one round trip on MariaDB; each re-read is one
/// statement in one round trip (and a lease connection opened once, for
/// the re-read that runs beside a renewal). Run with
/// `cargo test -p leasehold-sql --test watch -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn mariadb_statements_per_renewal_measured() {
    let Some(server) = server(ServerKind::MariaDb) else {
        return;
    };
    let ttl = Duration::from_secs(2);
    let admin = sqlx::MySqlPool::connect(&server.url).await.unwrap();
    for holders in [1u32, 8] {
        let pool =
            PoolSpec::new(PoolName::new(format!("m{holders}")).unwrap(), holders, ttl).unwrap();
        let s = SqlStrategy::connect(SqlConfig::new(&server.url))
            .await
            .unwrap();
        s.ensure_pool(&pool).await.unwrap();
        let mut grants = Vec::new();
        for _ in 0..holders {
            grants.push(
                acquire_past_the_restart_guard(&s, &pool, Floor::NONE)
                    .await
                    .unwrap(),
            );
        }
        let every = ttl / 3;
        let q0 = questions(&admin).await;
        let start = Instant::now();
        let mut renewals = 0u32;
        let mut spent = Duration::ZERO;
        while start.elapsed() < Duration::from_secs(10) {
            for g in &grants {
                let t = Instant::now();
                assert!(matches!(
                    s.renew(&pool, g, Floor::NONE).await,
                    Renewal::Renewed { .. }
                ));
                spent += t.elapsed();
                renewals += 1;
            }
            tokio::time::sleep(every).await;
        }
        let elapsed = start.elapsed();
        let q1 = questions(&admin).await;
        let statements = q1 - q0 - 1; // the second SHOW counts itself
        eprintln!(
            "{holders} holder(s): {renewals} renewals, {statements} statements, {:.2} per \
             renewal (2 without re-reads), a renewal took {:?} on average, over {elapsed:?}",
            statements as f64 / f64::from(renewals),
            spent / renewals
        );
        s.close().await;
    }
}
