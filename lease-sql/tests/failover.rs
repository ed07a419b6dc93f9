//! A failover to an asynchronous replica that had not received the last
//! claim, on a private PostgreSQL primary and streaming standby
//! (`leasehold_conformance::topology::postgres`) and on a private MariaDB
//! primary and GTID replica (`leasehold_conformance::topology::mariadb`),
//! each reached through one address that follows the primary (what a
//! virtual IP or HAProxy gives clients).
//!
//! The promoted server has another incarnation (PostgreSQL: a new timeline;
//! MariaDB: its own `server_id`) and no record of the claim: the promotion
//! guard grants nothing until the pool's restart span has passed since a
//! claim first saw the new incarnation, and the old holder's renewal there
//! answers `Lost`. With the guard off, the same failover hands the slot to a
//! second holder while the first still holds it.

use std::time::{Duration, Instant, SystemTime};

use leasehold_conformance::restarts::{acquire_past_the_restart_guard, wait_out_the_restart_guard};
use leasehold_conformance::servers::ServerKind;
use leasehold_conformance::topology::mariadb::MariaPair;
use leasehold_conformance::topology::postgres::{PgPair, Replication};
use leasehold_core::{
    AcquireError, DurabilityPolicy, Floor, Grant, PoolName, PoolSpec, Renewal, Strategy,
};
use leasehold_sql::{SqlConfig, SqlStrategy};

const POOL: &str = "failover";

/// The pool's slot row once a release of it has reached the replica (slot
/// 0: the pool's own rows have no token either).
const RELEASED: &str = "SELECT COUNT(*) FROM leasehold_leases WHERE pool = 'failover' AND slot = 0 \
     AND token IS NULL";

/// The promotion guard's record (`statements::INCARNATION_POOL`).
const RECORD: &str = "pool = '~incarnation'";

fn spec(ttl: Duration) -> PoolSpec {
    PoolSpec::new(PoolName::new(POOL).unwrap(), 1, ttl)
        .unwrap()
        .with_max_clock_skew(Duration::from_millis(100))
        .unwrap()
}

/// Which replicated store a test fails over.
#[derive(Clone, Copy, Debug)]
enum Store {
    /// PostgreSQL 15, a primary and an asynchronous streaming standby.
    Postgres,
    /// The newest PostgreSQL a wheel provides (18), likewise.
    PostgresLatest,
    /// MariaDB 10.11, a primary and an asynchronous GTID replica.
    MariaDb,
}

/// A running primary and replica of a [`Store`].
enum Pair {
    Postgres(PgPair),
    MariaDb(MariaPair),
}

impl Store {
    /// The pair, or `None` (and a SKIPPED line) where the server is not
    /// installed; under CI a missing server fails.
    async fn pair(self) -> Option<Pair> {
        let pair = match self {
            Self::Postgres => PgPair::start(ServerKind::Postgres15, Replication::Async)
                .await
                .map(Pair::Postgres),
            Self::PostgresLatest => PgPair::start(ServerKind::PostgresLatest, Replication::Async)
                .await
                .map(Pair::Postgres),
            Self::MariaDb => MariaPair::start().await.map(Pair::MariaDb),
        };
        match pair {
            Ok(p) => Some(p),
            Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
                panic!("no {self:?} primary and replica under CI: {e}")
            }
            Err(e) => {
                eprintln!("SKIPPED (no {self:?} primary and replica here): {e}");
                None
            }
        }
    }
}

impl Pair {
    /// The URL clients are given: the address that follows the primary.
    fn url(&self) -> String {
        match self {
            Self::Postgres(p) => p.url(),
            Self::MariaDb(p) => p.url(),
        }
    }

    /// The URL of the primary now, bypassing the clients' address.
    fn primary_url(&self) -> String {
        match self {
            Self::Postgres(p) => p.primary_url(),
            Self::MariaDb(p) => p.primary_url(),
        }
    }

    /// Waits until the replica has applied the release of the pool's slot.
    async fn wait_released(&self) {
        match self {
            Self::Postgres(p) => {
                let standby = sqlx::PgPool::connect(&p.standby_url()).await.unwrap();
                let limit = Instant::now() + Duration::from_secs(60);
                loop {
                    let n: i64 = sqlx::query_scalar(RELEASED)
                        .fetch_one(&standby)
                        .await
                        .unwrap_or(0);
                    if n == 1 {
                        break;
                    }
                    assert!(
                        Instant::now() < limit,
                        "the standby did not replay the pool's release in 60 s"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                standby.close().await;
            }
            Self::MariaDb(p) => {
                let query = RELEASED.replace("FROM ", "FROM leasehold.");
                tokio::task::block_in_place(|| p.wait_replicated(&query)).unwrap();
            }
        }
    }

    /// Stops the replica from receiving what follows.
    fn stop_replica(&self) {
        match self {
            Self::Postgres(p) => p.stop_standby(),
            Self::MariaDb(p) => p.stop_replica(),
        }
        .unwrap();
    }

    /// Kills the primary and promotes the replica (started again first
    /// where stopping it stopped the server), moving the clients' address.
    fn fail_over(&mut self) {
        match self {
            Self::Postgres(p) => {
                p.kill_primary().unwrap();
                p.start_standby().unwrap();
                p.promote_standby().unwrap();
            }
            Self::MariaDb(p) => {
                p.kill_primary().unwrap();
                p.promote_replica().unwrap();
            }
        }
    }
}

async fn connect(config: SqlConfig) -> SqlStrategy {
    let limit = Instant::now() + Duration::from_secs(60);
    loop {
        match SqlStrategy::connect(config.clone().max_connections(2)).await {
            Ok(s) => return s,
            Err(e) if e.is_retryable() && Instant::now() < limit => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("connect: {e}"),
        }
    }
}

/// The state a failover test starts from: holder A claimed the pool's only
/// slot on the primary while the replica was not receiving, then the
/// primary was killed and the replica promoted: it never saw A's claim.
struct AfterFailover {
    pair: Pair,
    a: SqlStrategy,
    a_grant: Grant,
    /// Read just before A's claim was sent: A's lease ends no earlier than
    /// `ttl` minus its safety margin after this.
    a_sent_before: SystemTime,
}

/// `guarded`: whether A runs the guards (off: A's claims record no
/// incarnation and wait for no restart span).
async fn fail_over_after_a_claim(
    store: Store,
    pool: &PoolSpec,
    guarded: bool,
) -> Option<AfterFailover> {
    let mut pair = store.pair().await?;
    let a = connect(SqlConfig::new(pair.url()).durability(if guarded {
        DurabilityPolicy::Durable
    } else {
        DurabilityPolicy::Throwaway
    }))
    .await;
    a.ensure_pool(pool)
        .await
        .expect("the lease table and the pool's rows");
    // A first claim and release on the primary: the table, the pool's row
    // and the incarnation record exist, and reach the replica.
    let first = acquire_past_the_restart_guard(&a, pool, Floor(0))
        .await
        .expect("first claim");
    a.release(pool, &first, Floor(0)).await;
    pair.wait_released().await;

    pair.stop_replica();
    let a_sent_before = SystemTime::now();
    let a_grant = a.acquire(pool, Floor(0)).await.expect("A's claim");
    pair.fail_over();
    Some(AfterFailover {
        pair,
        a,
        a_grant,
        a_sent_before,
    })
}

async fn a_promoted_replica_that_missed_a_claim_grants_it_only_after_the_pools_span(store: Store) {
    let pool = spec(Duration::from_secs(3));
    let Some(f) = fail_over_after_a_claim(store, &pool, true).await else {
        return;
    };
    let b = connect(SqlConfig::new(f.pair.url())).await;
    let first_attempt = SystemTime::now();
    let mut refusals = 0;
    let b_grant = loop {
        match b.acquire(&pool, Floor(0)).await {
            Ok(g) => break g,
            Err(AcquireError::StoreRestarted { resume_in }) => {
                refusals += 1;
                tokio::time::sleep(resume_in.min(Duration::from_millis(200))).await;
            }
            Err(e) if e.is_retryable() => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("B's claim on the promoted replica: {e}"),
        }
    };
    let granted_by = SystemTime::now();
    assert!(
        refusals > 0,
        "the promoted replica granted at once: the promotion guard did not hold"
    );
    // The record of the new incarnation was written by a claim sent after
    // `first_attempt`, on the server's clock (this host's): the grant came
    // a whole span after it.
    let waited = granted_by.duration_since(first_attempt).unwrap();
    assert!(
        waited >= pool.restart_span(),
        "granted {waited:?} after the first claim on the new incarnation, before the pool's \
         restart span {:?}",
        pool.restart_span()
    );
    // So A's lease had ended: its deadline is at most a TTL after its claim
    // was sent, and the failover came after that claim.
    assert!(granted_by.duration_since(f.a_sent_before).unwrap() > pool.ttl());
    assert_eq!(b_grant.slot, f.a_grant.slot);
    assert!(
        b_grant.fence.0 > f.a_grant.fence.0,
        "the fence went back across the failover: A had {}, B got {}",
        f.a_grant.fence.0,
        b_grant.fence.0
    );
    // A's lease is unknown to the new primary: its renewal is refused (once
    // A's connections, which the moved address cut, are replaced: a
    // renewal on a broken connection is only `Retry`).
    let limit = Instant::now() + Duration::from_secs(60);
    loop {
        match f.a.renew(&pool, &f.a_grant, Floor(0)).await {
            Renewal::Lost(_) => break,
            Renewal::Retry(_) if Instant::now() < limit => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("A's renewal on the promoted replica must be Lost, got {other:?}"),
        }
    }
}

async fn without_the_guard_the_promoted_replica_hands_the_slot_to_a_second_holder(store: Store) {
    // A long lease, so that even a failover on a loaded machine ends inside
    // it (the assertion below needs it to take less than half the TTL).
    let pool = spec(Duration::from_secs(120));
    // A without the guards too: the primary started moments ago, and A's
    // first claim would otherwise wait out the long lease's span.
    let Some(f) = fail_over_after_a_claim(store, &pool, false).await else {
        return;
    };
    let b = connect(SqlConfig::new(f.pair.url()).durability(DurabilityPolicy::Throwaway)).await;
    let b_grant = loop {
        match b.acquire(&pool, Floor(0)).await {
            Ok(g) => break g,
            Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("B's claim on the promoted replica: {e}"),
        }
    };
    let granted_by = SystemTime::now();
    assert_eq!(b_grant.slot, f.a_grant.slot);
    // A's lease runs for the TTL less a safety margin (at most half of
    // it) from its send time: B got the slot inside it.
    let since_a = granted_by.duration_since(f.a_sent_before).unwrap();
    assert!(
        since_a < pool.ttl() / 2,
        "the failover took {since_a:?}; it must take less than half the {:?} TTL for this \
         test to show the overlap",
        pool.ttl()
    );
}

/// A primary whose synchronous standby is stopped: commits wait for it.
async fn sync_pair_without_its_standby(pool: &PoolSpec) -> Option<(PgPair, SqlStrategy)> {
    let pair = match PgPair::start(ServerKind::Postgres15, Replication::Sync).await {
        Ok(p) => p,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("no PostgreSQL 15 primary and synchronous standby under CI: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED (no PostgreSQL 15 primary and standby here): {e}");
            return None;
        }
    };
    let a = connect(SqlConfig::new(pair.url()).op_timeout(Duration::from_secs(30))).await;
    a.ensure_pool(pool)
        .await
        .expect("the lease table and the pool's rows");
    pair.stop_standby().unwrap();
    Some((pair, a))
}

/// Cancels, from a connection of its own, every statement waiting for the
/// synchronous standby (`pg_cancel_backend`, what an operator or a script
/// does to a session that hangs), once one is seen waiting.
async fn cancel_the_wait_for_the_standby(url: String) -> i64 {
    let admin = sqlx::PgPool::connect(&url).await.unwrap();
    let limit = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM (SELECT pg_cancel_backend(pid) FROM pg_stat_activity \
             WHERE wait_event = 'SyncRep') c",
        )
        .fetch_one(&admin)
        .await
        .unwrap();
        if n > 0 || std::time::Instant::now() > limit {
            admin.close().await;
            return n;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_wait_for_the_synchronous_standby_was_cancelled_is_not_granted() {
    let pool = spec(Duration::from_secs(10));
    let Some((pair, a)) = sync_pair_without_its_standby(&pool).await else {
        return;
    };
    let cancel = tokio::spawn(cancel_the_wait_for_the_standby(pair.primary_url()));
    // PostgreSQL answers the cancelled wait with success and a warning: the
    // claim is committed on the primary only, and a failover to the standby
    // would forget it.
    let claim = a.acquire(&pool, Floor(0)).await;
    assert_eq!(
        cancel.await.unwrap(),
        1,
        "no claim was seen waiting for the standby"
    );
    match claim {
        Err(e) if e.is_retryable() => {}
        Err(e) => panic!("a cancelled wait for the standby must be retryable, got {e}"),
        Ok(g) => panic!(
            "the claim was granted (slot {}) although its wait for the synchronous standby was \
             cancelled: the standby may never have it",
            g.slot
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_whose_wait_for_the_synchronous_standby_was_cancelled_is_not_renewed() {
    let pool = spec(Duration::from_secs(10));
    let Some((pair, a)) = sync_pair_without_its_standby(&pool).await else {
        return;
    };
    pair.start_standby().unwrap();
    let grant = loop {
        match a.acquire(&pool, Floor(0)).await {
            Ok(g) => break g,
            Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("claim: {e}"),
        }
    };
    pair.stop_standby().unwrap();
    let cancel = tokio::spawn(cancel_the_wait_for_the_standby(pair.primary_url()));
    let renewal = a.renew(&pool, &grant, Floor(0)).await;
    assert_eq!(
        cancel.await.unwrap(),
        1,
        "no renewal was seen waiting for the standby"
    );
    assert!(
        matches!(renewal, Renewal::Retry(_)),
        "a renewal whose wait for the synchronous standby was cancelled must be Retry, got \
         {renewal:?}"
    );
}

/// Waits until the standby has replayed the pool's slot row.
async fn wait_standby_has_the_pool(pair: &PgPair) {
    let standby = sqlx::PgPool::connect(&pair.standby_url()).await.unwrap();
    let limit = Instant::now() + Duration::from_secs(60);
    loop {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM leasehold_leases WHERE pool = 'failover' AND slot = 0",
        )
        .fetch_one(&standby)
        .await
        .unwrap_or(0);
        if n == 1 {
            break;
        }
        assert!(
            Instant::now() < limit,
            "the standby did not replay the pool's row in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    standby.close().await;
}

/// Split brain, measured: the standby is promoted while the old primary
/// still runs (a partition between them, no fencing by the HA manager), and
/// holder A still reaches the old primary while B reaches the new one.
/// Answers A's renewals made after B was granted A's slot.
async fn split_brain(replication: Replication) -> Option<Vec<Renewal>> {
    let pool = spec(Duration::from_secs(3));
    let mut pair = match PgPair::start(ServerKind::Postgres15, replication).await {
        Ok(p) => p,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("no PostgreSQL 15 primary and standby under CI: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED (no PostgreSQL 15 primary and standby here): {e}");
            return None;
        }
    };
    // A is left with the old primary: it reaches it directly.
    let old_primary = pair.primary_url();
    let a = connect(SqlConfig::new(&old_primary).op_timeout(Duration::from_secs(1))).await;
    a.ensure_pool(&pool)
        .await
        .expect("the lease table and the pool's rows");
    let a_grant = acquire_past_the_restart_guard(&a, &pool, Floor(0))
        .await
        .expect("A's claim");
    wait_standby_has_the_pool(&pair).await;
    pair.promote_standby().unwrap();
    if replication == Replication::Sync {
        // The promoted server has no standby of its own: writes there go on
        // without one, as an HA manager that is not strict makes them.
        let new_primary = sqlx::PgPool::connect(&pair.primary_url()).await.unwrap();
        for sql in [
            "ALTER SYSTEM SET synchronous_standby_names = ''",
            "SELECT pg_reload_conf()",
        ] {
            sqlx::raw_sql(sql).execute(&new_primary).await.unwrap();
        }
        new_primary.close().await;
    }
    let b = connect(SqlConfig::new(pair.url())).await;
    // A renews as its lease asks (every half TTL or so) while B waits out
    // the promotion guard and claims.
    let limit = std::time::Instant::now() + Duration::from_secs(120);
    let b_granted = loop {
        let _ = a.renew(&pool, &a_grant, Floor(0)).await;
        match b.acquire(&pool, Floor(0)).await {
            Ok(g) => break g,
            Err(e) if e.is_retryable() && std::time::Instant::now() < limit => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("B's claim on the promoted standby: {e}"),
        }
    };
    assert_eq!(b_granted.slot, a_grant.slot);
    let mut after = Vec::new();
    for _ in 0..3 {
        after.push(a.renew(&pool, &a_grant, Floor(0)).await);
    }
    Some(after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_brain_with_an_asynchronous_standby_lets_the_old_primarys_clients_renew() {
    let Some(after) = split_brain(Replication::Async).await else {
        return;
    };
    // The old primary knows nothing of the promotion: A goes on renewing
    // the slot B now holds. No setting of leasehold's prevents this; the HA
    // manager must fence the old primary (or replication be synchronous).
    assert!(
        after.iter().all(|r| matches!(r, Renewal::Renewed { .. })),
        "the old primary was expected to keep renewing A's lease (split brain): {after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_brain_with_a_synchronous_standby_stops_the_old_primarys_clients() {
    let Some(after) = split_brain(Replication::Sync).await else {
        return;
    };
    // The old primary's commits wait for a synchronous standby that left:
    // the wait is cancelled at the operation timeout, which answers
    // success with a warning, and such a renewal is not counted (`Retry`);
    // a commit still waiting is not visible to the next renewal, which
    // then finds the lease expired (`Lost`). Either way A stops.
    assert!(
        after.iter().all(|r| !matches!(r, Renewal::Renewed { .. })),
        "no renewal on the old primary may succeed once its synchronous standby is gone: \
         {after:?}"
    );
}

/// A claim while another transaction holds the promotion guard's record
/// locked: a current record is read without a lock (and without skipping
/// it), so claims of every pool do not queue on it.
async fn a_current_record_is_claimed_past_without_a_lock(store: Store) {
    let pool = spec(Duration::from_secs(30));
    let Some(pair) = store.pair().await else {
        return;
    };
    let a = connect(SqlConfig::new(pair.url())).await;
    a.ensure_pool(&pool)
        .await
        .expect("the lease table and the pool's rows");
    let first = acquire_past_the_restart_guard(&a, &pool, Floor(0))
        .await
        .expect("first claim");
    a.release(&pool, &first, Floor(0)).await;
    let lock = format!("SELECT holder FROM leasehold_leases WHERE {RECORD} FOR UPDATE");
    let url = pair.primary_url();
    // The lock is held by an open transaction of another session until the
    // claim has answered.
    let grant = match store {
        Store::Postgres | Store::PostgresLatest => {
            let mut locker = sqlx::PgPool::connect(&url)
                .await
                .unwrap()
                .begin()
                .await
                .unwrap();
            let n = sqlx::query(&lock)
                .fetch_all(&mut *locker)
                .await
                .unwrap()
                .len();
            assert_eq!(n, 1, "the claims recorded the incarnation");
            let grant = a.acquire(&pool, Floor(0)).await;
            locker.rollback().await.unwrap();
            grant
        }
        Store::MariaDb => {
            let mut locker = sqlx::MySqlPool::connect(&url)
                .await
                .unwrap()
                .begin()
                .await
                .unwrap();
            let n = sqlx::query(&lock)
                .fetch_all(&mut *locker)
                .await
                .unwrap()
                .len();
            assert_eq!(n, 1, "the claims recorded the incarnation");
            let grant = a.acquire(&pool, Floor(0)).await;
            locker.rollback().await.unwrap();
            grant
        }
    };
    // A claim that waited for the lock fails with a lock wait timeout, and
    // one that skipped the record is refused as if the server had just been
    // promoted.
    let grant = grant.expect("a claim while the incarnation record is locked");
    assert!(grant.fence.0 > first.fence.0);
}

/// Claimers racing for every slot of a pool on a fresh table, with the
/// promotion guard on: they race to create the incarnation record too, and
/// each gets a slot of its own at once (the record of a server that never
/// changed holds nothing back, and none of them is refused while another
/// writes it). They race once the server has been up for the pool's span,
/// which every server's start holds claims back for.
async fn racing_first_claims_get_distinct_slots_at_once(store: Store) {
    const CLAIMERS: u32 = 8;
    let pool = PoolSpec::new(
        PoolName::new(POOL).unwrap(),
        CLAIMERS,
        Duration::from_secs(10),
    )
    .unwrap()
    .with_max_clock_skew(Duration::from_millis(100))
    .unwrap();
    let Some(pair) = store.pair().await else {
        return;
    };
    let setup = connect(SqlConfig::new(pair.url())).await;
    setup
        .ensure_pool(&pool)
        .await
        .expect("the lease table and the pool's rows");
    wait_out_the_restart_guard(&setup, &pool).await.unwrap();
    let mut claimers = Vec::new();
    for _ in 0..CLAIMERS {
        claimers.push(connect(SqlConfig::new(pair.url())).await);
    }
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(claimers.len()));
    let mut tasks = tokio::task::JoinSet::new();
    for claimer in claimers {
        let (pool, barrier) = (pool.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            claimer.acquire(&pool, Floor(0)).await
        });
    }
    let mut slots = std::collections::BTreeSet::new();
    while let Some(grant) = tasks.join_next().await {
        let grant = grant
            .unwrap()
            .expect("a racing first claim on a fresh table");
        assert!(
            slots.insert(grant.slot),
            "slot {} granted twice",
            grant.slot
        );
    }
    assert_eq!(slots.len(), CLAIMERS as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_promoted_standby_that_missed_a_claim_grants_it_only_after_the_pools_span() {
    a_promoted_replica_that_missed_a_claim_grants_it_only_after_the_pools_span(Store::Postgres)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_a_promoted_replica_that_missed_a_claim_grants_it_only_after_the_pools_span() {
    a_promoted_replica_that_missed_a_claim_grants_it_only_after_the_pools_span(Store::MariaDb)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_without_the_guard_the_promoted_standby_hands_the_slot_to_a_second_holder() {
    without_the_guard_the_promoted_replica_hands_the_slot_to_a_second_holder(Store::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_without_the_guard_the_promoted_replica_hands_the_slot_to_a_second_holder() {
    without_the_guard_the_promoted_replica_hands_the_slot_to_a_second_holder(Store::MariaDb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_current_record_is_claimed_past_without_a_lock() {
    a_current_record_is_claimed_past_without_a_lock(Store::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_a_current_record_is_claimed_past_without_a_lock() {
    a_current_record_is_claimed_past_without_a_lock(Store::MariaDb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_racing_first_claims_get_distinct_slots_at_once() {
    racing_first_claims_get_distinct_slots_at_once(Store::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_racing_first_claims_get_distinct_slots_at_once() {
    racing_first_claims_get_distinct_slots_at_once(Store::MariaDb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_latest_a_promoted_standby_that_missed_a_claim_grants_it_only_after_the_pools_span()
 {
    a_promoted_replica_that_missed_a_claim_grants_it_only_after_the_pools_span(
        Store::PostgresLatest,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_latest_without_the_guard_the_promoted_standby_hands_the_slot_to_a_second_holder()
{
    without_the_guard_the_promoted_replica_hands_the_slot_to_a_second_holder(Store::PostgresLatest)
        .await;
}

/// Split brain on MariaDB, measured as on PostgreSQL: the replica is
/// promoted while the old primary still runs, holder A still reaches the
/// old primary, B the new one. Nothing on the old primary changes, so A goes
/// on renewing the slot B was granted: an HA manager must fence the old
/// primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_split_brain_lets_the_old_primarys_clients_renew() {
    let pool = spec(Duration::from_secs(3));
    let Some(Pair::MariaDb(mut pair)) = Store::MariaDb.pair().await else {
        return;
    };
    let a = connect(SqlConfig::new(pair.primary_url())).await;
    a.ensure_pool(&pool)
        .await
        .expect("the lease table and the pool's rows");
    let a_grant = acquire_past_the_restart_guard(&a, &pool, Floor(0))
        .await
        .expect("A's claim");
    tokio::task::block_in_place(|| {
        pair.wait_replicated(
            "SELECT COUNT(*) FROM leasehold.leasehold_leases WHERE pool = 'failover' \
             AND token IS NOT NULL",
        )
    })
    .unwrap();
    tokio::task::block_in_place(|| pair.promote_replica()).unwrap();
    let b = connect(SqlConfig::new(pair.url())).await;
    let limit = Instant::now() + Duration::from_secs(120);
    let b_grant = loop {
        let _ = a.renew(&pool, &a_grant, Floor(0)).await;
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
    assert!(
        after.iter().all(|r| matches!(r, Renewal::Renewed { .. })),
        "the old primary was expected to keep renewing A's lease (split brain): {after:?}"
    );
}
