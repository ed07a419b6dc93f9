//! A lease table wiped while a holder runs, on a private durable PostgreSQL
//! 15, a private durable MariaDB 10.11 and a SQLite file: `TRUNCATE` (SQLite:
//! `DELETE` of every row), and a `DELETE` of one pool's rows.
//!
//! The wipe takes the holder's lease with it, but the holder generates until
//! its next renewal (`Lost`) or its local deadline. A claim that finds the
//! pool's record gone records when it first saw that and grants nothing
//! until the pool's restart span has passed since then (the retryable
//! `StoreRestarted`), so no second holder overlaps the first. `prepare` on
//! the table that was there, which the quickstart runs on every start, does
//! not declare the pool new; an operator who has stopped every holder can
//! (`ensure_new_pool`). On PostgreSQL, a table dropped and created again
//! from an older copy (a restore that recreates it) is caught the same
//! way. The control: a pool prepared in the call that created its table
//! waits for nothing.
//!
//! Time bounds come from readings taken around the calls: a claim's answer
//! can only come later than the bound, never earlier, on a loaded machine.

use std::time::{Duration, Instant};

use leasehold_conformance::restarts::wait_out_the_restart_guard;
use leasehold_conformance::servers::{ServerKind, Settings, provide_with};
use leasehold_core::{AcquireError, Floor, Grant, PoolName, PoolSpec, Renewal, Strategy};
use leasehold_sql::{SqlConfig, SqlStrategy};

/// The lease TTL: short, so a test waits seconds, and far above the
/// smallest TTL every engine takes.
const TTL: Duration = Duration::from_secs(2);

/// SQLite keeps times in milliseconds: the record's time can read up to a
/// millisecond before the claim that wrote it.
const RESOLUTION: Duration = Duration::from_millis(1);

fn spec(name: &str) -> PoolSpec {
    PoolSpec::new(PoolName::new(name).unwrap(), 1, TTL)
        .unwrap()
        .with_max_clock_skew(Duration::from_millis(100))
        .unwrap()
}

/// Where the test runs.
#[derive(Clone, Copy, Debug)]
enum Engine {
    Postgres,
    MariaDb,
    Sqlite,
}

/// A store for one test: a private server (kept running while the test
/// runs) or a SQLite file in a directory of its own, and its URL.
struct Store {
    url: String,
    _server: Option<leasehold_conformance::servers::Server>,
    dir: Option<std::path::PathBuf>,
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Engine {
    /// The store, or `None` (and a SKIPPED line) where the server is not
    /// installed; under CI a missing server fails.
    fn store(self) -> Option<Store> {
        let kind = match self {
            Self::Postgres => ServerKind::Postgres15,
            Self::MariaDb => ServerKind::MariaDb,
            Self::Sqlite => {
                let dir = leasehold_conformance::servers::private_dir("sql-wipe").unwrap();
                return Some(Store {
                    url: format!("sqlite://{}", dir.join("leases.sqlite").display()),
                    _server: None,
                    dir: Some(dir),
                });
            }
        };
        // Durable: the library accepts it without an opt-in, with every
        // guard on, as a deployment runs it.
        match provide_with(kind, Settings::Durable) {
            Ok(server) => Some(Store {
                url: server.url.clone(),
                _server: Some(server),
                dir: None,
            }),
            Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
                panic!("no {self:?} server under CI: {e}")
            }
            Err(e) => {
                eprintln!("SKIPPED (no {self:?} server here): {e}");
                None
            }
        }
    }
}

async fn connect(url: &str) -> SqlStrategy {
    SqlStrategy::connect(SqlConfig::new(url)).await.unwrap()
}

/// Runs `sql` on the strategy's own pool, behind the holders' backs.
async fn run(s: &SqlStrategy, sql: &str) {
    let r = if let Some(p) = s.postgres() {
        sqlx::raw_sql(sql).execute(p).await.map(drop)
    } else if let Some(p) = s.mysql() {
        sqlx::raw_sql(sql).execute(p).await.map(drop)
    } else {
        sqlx::raw_sql(sql)
            .execute(s.sqlite().unwrap())
            .await
            .map(drop)
    };
    r.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The control: a pool prepared by the call that created its table is
/// new, and its first claim waits for nothing. Returns the holder's grant.
async fn fresh_table_grants_at_once(holder: &SqlStrategy, pool: &PoolSpec) -> Grant {
    holder.ensure_pool(pool).await.unwrap();
    // The server started moments ago: its start holds claims back one span
    // (the restart guard), which is not what this shows.
    wait_out_the_restart_guard(holder, pool).await.unwrap();
    match holder.acquire(pool, Floor::NONE).await {
        Ok(grant) => grant,
        Err(e) => panic!("a fresh table's first claim must wait for nothing: {e}"),
    }
}

/// After the wipe that began at `wiped` (local time before the statement
/// was sent): the claimer is refused with `StoreRestarted` for the span
/// since it first saw the pool's record gone, the holder's renewal is
/// `Lost`, and the slot is granted again only once that span has passed,
/// with a bigger fence. `prepare_first`: the claimer prepares the pool
/// first, as the quickstart does on every start.
async fn wiped_pool_waits_a_span(
    holder: &SqlStrategy,
    claimer: &SqlStrategy,
    pool: &PoolSpec,
    held: &Grant,
    prepare_first: bool,
) {
    let span = pool.restart_span();
    // The record of the pool's rows gone is written during what follows
    // (by `prepare`, or else by the claim): no earlier than `sent`.
    let sent = Instant::now();
    if prepare_first {
        claimer.ensure_pool(pool).await.unwrap();
    }
    let first = claimer.acquire(pool, Floor::NONE).await;
    let answered = Instant::now();
    match first {
        Err(e @ AcquireError::StoreRestarted { resume_in }) => {
            assert!(e.is_retryable(), "StoreRestarted must be retryable");
            // The record was written between `sent` and `answered`.
            assert!(
                resume_in <= span && resume_in + (answered - sent) + RESOLUTION >= span,
                "resume in {resume_in:?}, for a span of {span:?}, {:?} after the wipe was seen",
                answered - sent
            );
        }
        Ok(g) => panic!(
            "a claim after the wipe granted slot {} while its holder still runs (fence {} \
             after {})",
            g.slot, g.fence.0, held.fence.0
        ),
        Err(e) => panic!("a claim after the wipe answered {e}, not StoreRestarted"),
    }
    match holder.renew(pool, held, Floor::NONE).await {
        Renewal::Lost(_) => {}
        other => panic!("the holder's renewal after the wipe answered {other:?}, not Lost"),
    }
    // Claims go on being refused until the span has passed since the
    // record was written (no earlier than `sent`).
    let limit = sent + span + Duration::from_secs(60);
    let grant = loop {
        match claimer.acquire(pool, Floor::NONE).await {
            Ok(g) => break g,
            Err(AcquireError::StoreRestarted { resume_in }) => {
                assert!(resume_in <= span, "resume in {resume_in:?} > span {span:?}");
                assert!(
                    Instant::now() < limit,
                    "still refused {limit:?} after the wipe"
                );
                tokio::time::sleep(resume_in.min(Duration::from_millis(200))).await;
            }
            Err(e) => panic!("a claim while the wipe is waited out answered {e}"),
        }
    };
    let granted = Instant::now();
    assert!(
        granted - sent + RESOLUTION >= span,
        "granted {:?} after the wipe was first seen, before the span {span:?}",
        granted - sent
    );
    assert!(
        grant.fence > held.fence,
        "fence {} after the wipe, {} before",
        grant.fence.0,
        held.fence.0
    );
    let _ = claimer.release(pool, &grant, Floor::NONE).await;
}

/// `TRUNCATE` (SQLite: `DELETE` of every row) while a holder runs.
async fn truncate_while_a_holder_runs(engine: Engine) {
    let Some(store) = engine.store() else { return };
    let (holder, claimer) = (connect(&store.url).await, connect(&store.url).await);
    let pool = spec("wiped");
    let held = fresh_table_grants_at_once(&holder, &pool).await;
    let wipe = match engine {
        Engine::Sqlite => "DELETE FROM leasehold_leases",
        _ => "TRUNCATE TABLE leasehold_leases",
    };
    run(&claimer, wipe).await;
    wiped_pool_waits_a_span(&holder, &claimer, &pool, &held, false).await;
    holder.close().await;
    claimer.close().await;
}

/// A `DELETE` of one pool's rows while a holder runs, then `prepare` as
/// the quickstart runs it on every start: the pool is not taken as new.
/// An operator who stopped every holder declares it new, and its claims
/// wait for nothing again.
async fn delete_of_one_pool_while_a_holder_runs(engine: Engine) {
    let Some(store) = engine.store() else { return };
    let (holder, claimer) = (connect(&store.url).await, connect(&store.url).await);
    let pool = spec("deleted");
    let held = fresh_table_grants_at_once(&holder, &pool).await;
    run(
        &claimer,
        "DELETE FROM leasehold_leases WHERE pool = 'deleted'",
    )
    .await;
    wiped_pool_waits_a_span(&holder, &claimer, &pool, &held, true).await;

    // Every holder stopped (the claimer released above): declared new, the
    // pool's rows deleted again are claimed at once.
    run(
        &claimer,
        "DELETE FROM leasehold_leases WHERE pool = 'deleted'",
    )
    .await;
    claimer.ensure_new_pool(&pool).await.unwrap();
    match claimer.acquire(&pool, Floor::NONE).await {
        Ok(g) => {
            let _ = claimer.release(&pool, &g, Floor::NONE).await;
        }
        Err(e) => panic!("a pool declared new must wait for nothing: {e}"),
    }
    holder.close().await;
    claimer.close().await;
}

/// PostgreSQL: the table dropped and created again from a copy taken
/// before the holder claimed, as restoring a dump that recreates the table
/// does. The copy's records were written for the table it replaced (another
/// OID): no record of this one, so claims wait out a span as after a wipe.
async fn a_table_recreated_from_an_older_copy_while_a_holder_runs() {
    let Some(store) = Engine::Postgres.store() else {
        return;
    };
    let (holder, claimer) = (connect(&store.url).await, connect(&store.url).await);
    let pool = spec("restored");
    holder.ensure_pool(&pool).await.unwrap();
    // The backup: the table before the holder's claim, its records included.
    run(
        &claimer,
        "CREATE TABLE leasehold_backup (LIKE leasehold_leases INCLUDING ALL); \
         INSERT INTO leasehold_backup SELECT * FROM leasehold_leases",
    )
    .await;
    wait_out_the_restart_guard(&holder, &pool).await.unwrap();
    let held = match holder.acquire(&pool, Floor::NONE).await {
        Ok(grant) => grant,
        Err(e) => panic!("a fresh table's first claim must wait for nothing: {e}"),
    };
    // The restore: a new table of the same name, holding the old rows.
    run(
        &claimer,
        "DROP TABLE leasehold_leases; ALTER TABLE leasehold_backup RENAME TO leasehold_leases",
    )
    .await;
    wiped_pool_waits_a_span(&holder, &claimer, &pool, &held, false).await;
    holder.close().await;
    claimer.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_table_recreated_from_an_older_copy_while_a_holder_runs_waits_a_span() {
    a_table_recreated_from_an_older_copy_while_a_holder_runs().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_truncate_while_a_holder_runs_waits_a_span() {
    truncate_while_a_holder_runs(Engine::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_delete_of_one_pool_while_a_holder_runs_waits_a_span() {
    delete_of_one_pool_while_a_holder_runs(Engine::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_truncate_while_a_holder_runs_waits_a_span() {
    truncate_while_a_holder_runs(Engine::MariaDb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_delete_of_one_pool_while_a_holder_runs_waits_a_span() {
    delete_of_one_pool_while_a_holder_runs(Engine::MariaDb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_delete_of_every_row_while_a_holder_runs_waits_a_span() {
    truncate_while_a_holder_runs(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_delete_of_one_pool_while_a_holder_runs_waits_a_span() {
    delete_of_one_pool_while_a_holder_runs(Engine::Sqlite).await;
}
