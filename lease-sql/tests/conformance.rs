//! The behaviour suite on PostgreSQL 15, the newest PostgreSQL a wheel
//! provides, MariaDB 10.11 and SQLite, plus the SQL-specific tests; and on
//! TLS-only PostgreSQL 15 and MariaDB servers, with the TLS tests.

#[path = "conformance/tls.rs"]
mod tls;

#[path = "conformance/lease_user.rs"]
mod lease_user;

mod damaged;

use leasehold_core::Floor;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use leasehold_conformance::servers::{
    Missing, PG15_ASYNC_LABEL, PG15_SYNC_LABEL, ServerKind, provide, provide_tls,
};
use leasehold_conformance::topology::postgres::{PgPair, Replication};
use leasehold_conformance::{ByDriver, Glue, Store, Target, ensure, fresh_pool, trials};
use leasehold_core::{
    AcquireError, BoxFuture, DurabilityPolicy, Fence, FenceStamp, PoolName, PoolSpec, Release,
    Renewal, Strategy, Token,
};
use leasehold_sql::{Engine, FenceTable, SqlConfig, SqlError, SqlStrategy};

#[derive(Clone)]
struct Sql {
    url: String,
    addr: Option<SocketAddr>,
    /// Whether the guards are on (see [`Sql::config`] and
    /// [`Sql::durability`]).
    guard: bool,
    /// Where `url` names a lease user, which may not create or alter
    /// tables: the admin's URL, for what only an admin does (prepare, plant
    /// rows). `None` when `url` is an admin's.
    admin: Option<String>,
}

impl Sql {
    /// The test servers are speed-tuned (`Fast`: PostgreSQL `fsync = off`,
    /// MariaDB `innodb_flush_log_at_trx_commit = 0`), so they can forget
    /// acknowledged writes, and they start seconds before the tests: the
    /// restart guard would refuse every claim for a TTL. They are never
    /// restarted while these tests hold leases, so the guard is off here;
    /// `the_restart_guard_*` below and `tests/restarts.rs` test it. The
    /// replicated pairs are durable and run with the guards on: the
    /// promotion guard's record is written by every claim there.
    fn config(&self) -> Result<SqlConfig, String> {
        Ok(SqlConfig::from_url(&self.url)
            .map_err(|e| e.to_string())?
            .max_connections(4)
            .durability(self.durability()))
    }

    /// The durability policy of every strategy here: `Durable` with the
    /// guards on, `Throwaway` with them off.
    fn durability(&self) -> DurabilityPolicy {
        if self.guard {
            DurabilityPolicy::Durable
        } else {
            DurabilityPolicy::Throwaway
        }
    }

    async fn strategy(&self) -> Result<SqlStrategy, String> {
        SqlStrategy::connect(self.config()?)
            .await
            .map_err(|e| e.to_string())
    }

    /// A strategy connected as the admin, who runs `prepare` (the lease
    /// user where there is no other).
    async fn admin(&self) -> Result<SqlStrategy, String> {
        let url = self.admin.as_ref().unwrap_or(&self.url);
        SqlStrategy::connect(
            SqlConfig::from_url(url)
                .map_err(|e| e.to_string())?
                .durability(self.durability()),
        )
        .await
        .map_err(|e| e.to_string())
    }

    /// The lease user's backend on the same server, `url` its URL.
    fn as_lease_user(&self, url: String) -> Self {
        Self {
            url,
            addr: self.addr,
            guard: self.guard,
            admin: Some(self.admin.clone().unwrap_or_else(|| self.url.clone())),
        }
    }
}

impl Glue for Sql {
    fn connect(&self) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async move { Ok(Arc::new(self.strategy().await?) as Store) })
    }

    fn connect_via(
        &self,
        addr: SocketAddr,
        op_timeout: Duration,
    ) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async move {
            let orig = self.addr.ok_or("not networked")?;
            let url = self.url.replacen(&orig.to_string(), &addr.to_string(), 1);
            let s = SqlStrategy::connect(
                SqlConfig::from_url(&url)
                    .map_err(|e| e.to_string())?
                    .op_timeout(op_timeout)
                    .durability(self.durability()),
            )
            .await
            .map_err(|e| e.to_string())?;
            Ok(Arc::new(s) as Store)
        })
    }

    fn store_addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// The suite's pools are fresh (a random name) and nobody has held
    /// them: declared new, so that their claims do not wait out the span a
    /// pool first seen without its record waits (`tests/wipe.rs`).
    fn prepare<'a>(&'a self, pool: &'a PoolSpec) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let s = self.admin().await?;
            let r = s.ensure_new_pool(pool).await.map_err(|e| e.to_string());
            s.close().await;
            r
        })
    }

    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> Option<BoxFuture<'a, Result<(), String>>> {
        Some(Box::pin(async move {
            let s = self.strategy().await?;
            let r = s.revoke(pool, slot).await.map_err(|e| e.to_string());
            s.close().await;
            match r? {
                true => Ok(()),
                false => Err(format!("no row for slot {slot}")),
            }
        }))
    }
}

/// Declares the fresh `pool` new (it has no holder) with the row of slot 0
/// only, for the tests of what claims do on a pool short of rows.
async fn declare_new_with_one_slot(b: &Sql, pool: &PoolSpec) -> Result<(), String> {
    let one = PoolSpec::new(pool.name().clone(), 1, pool.ttl()).map_err(|e| e.to_string())?;
    let admin = b.admin().await?;
    let r = admin.ensure_new_pool(&one).await.map_err(|e| e.to_string());
    admin.close().await;
    r
}

fn fresh_table(prefix: &str) -> String {
    format!("{prefix}_{}", &Token::random().to_hex()[..10])
}

/// A lease table that does not exist is a final error naming the call that creates it.
async fn missing_table_is_final_and_names_ensure_pool(b: Arc<Sql>) -> Result<(), String> {
    let s = SqlStrategy::connect(b.config()?.table(fresh_table("missing")))
        .await
        .map_err(|e| e.to_string())?;
    let r = s
        .acquire(&fresh_pool(2, Duration::from_secs(5))?, Floor::NONE)
        .await;
    s.close().await;
    match r {
        Err(e @ AcquireError::MissingSchema { .. }) => {
            ensure!(!e.is_retryable(), "MissingSchema must be final");
            ensure!(e.to_string().contains("ensure_pool"), "message: {e}");
            Ok(())
        }
        other => Err(format!("expected MissingSchema, got {other:?}")),
    }
}

/// An elector whose lease table is missing can never lead: `wait_leading`
/// answers the final error (naming the call that creates the table), the
/// error callback is called with it once, and `error()` says the same.
async fn an_elector_that_can_never_lead_reports_its_final_error(b: Arc<Sql>) -> Result<(), String> {
    use leasehold_core::{Leader, LeaderConfig, StartError};
    use std::sync::Mutex;
    let s = SqlStrategy::connect(b.config()?.table(fresh_table("missing")))
        .await
        .map_err(|e| e.to_string())?;
    let name = fresh_pool(1, Duration::from_secs(5))?.name().clone();
    let config = LeaderConfig::builder(name.as_str())
        .acquire_timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| e.to_string())?;
    let reported: Arc<Mutex<Vec<StartError>>> = Arc::default();
    let seen = reported.clone();
    let elector = Leader::builder(s, config)
        .on_error(move |e| seen.lock().unwrap().push(e.clone()))
        .campaign(|leadership| async move { leadership.lost().await });
    // Bounded well beyond one acquisition: a final error needs no retry.
    let r = tokio::time::timeout(Duration::from_secs(20), elector.wait_leading())
        .await
        .map_err(|_| "wait_leading still waiting 20 s after a final error".to_owned())?;
    let error = elector.error();
    elector.shutdown().await;
    match &r {
        Err(e @ StartError::Acquire(AcquireError::MissingSchema { .. })) => {
            ensure!(e.to_string().contains("ensure_pool"), "message: {e}");
        }
        other => {
            return Err(format!(
                "wait_leading on a missing table answered {other:?}"
            ));
        }
    }
    let reported = reported.lock().unwrap().clone();
    ensure!(
        reported.len() == 1 && Some(&reported[0]) == r.as_ref().err() && error == r.err(),
        "the callback saw {reported:?}, error() says {error:?}"
    );
    Ok(())
}

/// A table of that name that is not a lease table is reported, with its missing columns.
async fn foreign_table_is_reported(b: Arc<Sql>) -> Result<(), String> {
    let name = fresh_table("foreign");
    let s = SqlStrategy::connect(b.config()?.table(name.clone()))
        .await
        .map_err(|e| e.to_string())?;
    raw(
        &s,
        &format!("CREATE TABLE {name} (pool VARCHAR(64), slot INTEGER)"),
    )
    .await?;
    let r = s
        .acquire(&fresh_pool(2, Duration::from_secs(5))?, Floor::NONE)
        .await;
    s.close().await;
    match r {
        Err(e @ AcquireError::MissingSchema { .. }) => {
            ensure!(e.to_string().contains("token"), "message: {e}");
            Ok(())
        }
        other => Err(format!("expected MissingSchema, got {other:?}")),
    }
}

/// Runs `sql` (one or more statements) on `s`'s own pool.
async fn raw(s: &SqlStrategy, sql: &str) -> Result<(), String> {
    let done = match s.engine() {
        Engine::Postgres => sqlx::raw_sql(sql)
            .execute(s.postgres().unwrap())
            .await
            .map(drop),
        Engine::MySql => sqlx::raw_sql(sql)
            .execute(s.mysql().unwrap())
            .await
            .map(drop),
        _ => sqlx::raw_sql(sql)
            .execute(s.sqlite().unwrap())
            .await
            .map(drop),
    };
    done.map_err(|e| format!("{sql}: {e}"))
}

/// A shipped migration of `s`'s engine, for table `table`.
fn migration(s: &SqlStrategy, file: &str, table: &str) -> String {
    let text = match (s.engine(), file) {
        (Engine::Postgres, "0001") => {
            include_str!("../migrations/postgres/0001_leasehold_leases.sql")
        }
        (Engine::Postgres, "0002") => {
            include_str!("../migrations/postgres/0002_leasehold_floor.sql")
        }
        (Engine::Postgres, "0003") => {
            include_str!("../migrations/postgres/0003_leasehold_span.sql")
        }
        (Engine::Postgres, _) => {
            include_str!("../migrations/postgres/0005_leasehold_id_format.sql")
        }
        (Engine::MySql, "0001") => include_str!("../migrations/mysql/0001_leasehold_leases.sql"),
        (Engine::MySql, "0002") => include_str!("../migrations/mysql/0002_leasehold_floor.sql"),
        (Engine::MySql, "0003") => include_str!("../migrations/mysql/0003_leasehold_span.sql"),
        (Engine::MySql, _) => include_str!("../migrations/mysql/0005_leasehold_id_format.sql"),
        (_, "0001") => include_str!("../migrations/sqlite/0001_leasehold_leases.sql"),
        (_, "0002") => include_str!("../migrations/sqlite/0002_leasehold_floor.sql"),
        (_, "0003") => include_str!("../migrations/sqlite/0003_leasehold_span.sql"),
        (_, _) => include_str!("../migrations/sqlite/0005_leasehold_id_format.sql"),
    };
    text.replace("leasehold_leases", table)
}

/// A 0.1 lease table (migration 0001 only) named `table`, holding slot 0 of
/// `pool` for `token` with fence 7 for an hour, as a 0.1 process left it.
async fn table_0_1(
    s: &SqlStrategy,
    table: &str,
    pool: &PoolSpec,
    token: &Token,
) -> Result<(), String> {
    raw(s, &migration(s, "0001", table)).await?;
    let (quoted, token, expires) = match s.engine() {
        Engine::Postgres => (
            format!("\"{table}\""),
            format!("decode('{}', 'hex')", token.to_hex()),
            "CURRENT_TIMESTAMP(6) + INTERVAL '1 hour'".to_owned(),
        ),
        Engine::MySql => (
            format!("`{table}`"),
            format!("X'{}'", token.to_hex()),
            "CURRENT_TIMESTAMP(6) + INTERVAL 1 HOUR".to_owned(),
        ),
        _ => (
            format!("\"{table}\""),
            format!("X'{}'", token.to_hex()),
            "strftime('%Y-%m-%d %H:%M:%f','now','+3600 seconds')".to_owned(),
        ),
    };
    raw(
        s,
        &format!(
            "INSERT INTO {quoted} (pool, slot, token, fence, holder, expires_at) \
             VALUES ('{}', 0, {token}, 7, 'a 0.1 process', {expires})",
            pool.name()
        ),
    )
    .await
}

/// A 0.1 table (no floor columns) is refused with a final error naming both
/// fixes; `ensure_pool` migrates it in place: the 0.1 holder's lease, fence
/// and token are kept (it renews straight through), and from then on the
/// floor is kept and handed over.
async fn a_0_1_table_is_refused_then_migrated_by_ensure_pool(b: Arc<Sql>) -> Result<(), String> {
    let table = fresh_table("v01");
    let s = SqlStrategy::connect(b.config()?.table(table.clone()))
        .await
        .map_err(|e| e.to_string())?;
    let pool = fresh_pool(2, Duration::from_secs(30))?;
    let old = Token::random();
    table_0_1(&s, &table, &pool, &old).await?;
    match s.acquire(&pool, Floor::NONE).await {
        Err(e @ AcquireError::MissingSchema { .. }) => {
            let msg = e.to_string();
            ensure!(
                !e.is_retryable(),
                "a 0.1 table must be a final error: {msg}"
            );
            for needle in ["floor_ms", "ensure_table", "0002_leasehold_floor.sql"] {
                ensure!(msg.contains(needle), "the message lacks {needle}: {msg}");
            }
        }
        other => {
            return Err(format!(
                "acquire on a 0.1 table: expected MissingSchema, got {other:?}"
            ));
        }
    }
    // check_schema (what `leasehold doctor` asks) says the same, and
    // changes nothing.
    match s.check_schema().await {
        Err(SqlError::MissingSchema { what, .. }) if what.contains("floor_ms") => {}
        other => return Err(format!("check_schema on a 0.1 table: {other:?}")),
    }
    s.ensure_pool(&pool).await.map_err(|e| e.to_string())?;
    s.ensure_pool(&pool)
        .await
        .map_err(|e| format!("again: {e}"))?;
    s.check_schema()
        .await
        .map_err(|e| format!("check_schema after the migration: {e}"))?;
    if b.guard {
        // A table of an earlier version has no pool records: the pool's
        // first claim waits out a span, as after a wipe. The 0.1 holder's
        // row is intact (it keeps slot 0 taken whatever the record says),
        // so declaring the pool new is safe here.
        match s.acquire(&pool, Floor(1_000)).await {
            Err(AcquireError::StoreRestarted { .. }) => {}
            other => return Err(format!("the migrated pool's first claim: {other:?}")),
        }
        s.ensure_new_pool(&pool).await.map_err(|e| e.to_string())?;
    }
    // The 0.1 holder's lease survived: slot 0 is still taken, and its token renews.
    let new = s
        .acquire(&pool, Floor(1_000))
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        new.slot == 1,
        "the migrated table granted slot {} (0 is held)",
        new.slot
    );
    let held = leasehold_core::Grant::new(0, old, Fence(7), pool.ttl());
    let r = s.renew(&pool, &held, Floor(5_000)).await;
    ensure!(
        matches!(r, Renewal::Renewed { .. }),
        "the 0.1 lease after migration: {r:?}"
    );
    let r = s.release(&pool, &held, Floor(4_242)).await;
    ensure!(r == Release::Released, "release: {r:?}");
    let next = s
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        (next.slot, next.floor) == (0, Floor(4_242)) && next.fence > Fence(7),
        "after the release: slot {}, fence {}, floor {}",
        next.slot,
        next.fence,
        next.floor
    );
    s.close().await;
    Ok(())
}

/// Migrations 0001, 0002, 0003 and 0005, as a migration tool applies them,
/// make a table `ensure_table` accepts as it is, that keeps floors and
/// records ID formats. Before 0005, a claim declaring a format is refused
/// with a final error naming it; one declaring none still gets a slot.
async fn the_shipped_migrations_make_a_floor_table(b: Arc<Sql>) -> Result<(), String> {
    let table = fresh_table("shipped");
    let s = SqlStrategy::connect(b.config()?.table(table.clone()))
        .await
        .map_err(|e| e.to_string())?;
    raw(&s, &migration(&s, "0001", &table)).await?;
    raw(&s, &migration(&s, "0002", &table)).await?;
    // A 0.2 table: refused until the restart-span column is there, with a
    // message naming the migration that adds it.
    match s.check_schema().await {
        Err(e @ SqlError::MissingSchema { .. })
            if e.to_string().contains("span_ms")
                && e.to_string().contains("0003_leasehold_span.sql") => {}
        other => return Err(format!("check_schema on a 0.2 table: {other:?}")),
    }
    raw(&s, &migration(&s, "0003", &table)).await?;
    let names_format = |message: String| {
        message.contains("id_format") && message.contains("0005_leasehold_id_format.sql")
    };
    match s.check_schema().await {
        Err(e @ SqlError::MissingSchema { .. }) if names_format(e.to_string()) => {}
        other => return Err(format!("check_schema without 0005: {other:?}")),
    }
    let before = fresh_pool(1, Duration::from_secs(30))?;
    let format =
        leasehold_core::IdFormat::new(1, "migrations test format").map_err(|e| e.to_string())?;
    match s
        .acquire(&before.clone().with_id_format(format), Floor::NONE)
        .await
    {
        Err(e @ AcquireError::MissingSchema { .. })
            if names_format(e.to_string()) && !e.is_retryable() => {}
        other => {
            return Err(format!(
                "a claim declaring a format without 0005: {other:?}"
            ));
        }
    }
    match s.acquire(&before, Floor::NONE).await {
        Ok(undeclared) => {
            let r = s.release(&before, &undeclared, Floor::NONE).await;
            ensure!(r == Release::Released, "release: {r:?}");
        }
        // With the guards on, a pool never prepared on a table that was
        // there waits out a span first (`tests/wipe.rs`): no refusal for
        // want of 0005 either.
        Err(AcquireError::StoreRestarted { .. }) if b.guard => {}
        Err(e) => return Err(format!("a claim declaring no format without 0005: {e}")),
    }
    raw(&s, &migration(&s, "0005", &table)).await?;
    s.check_schema()
        .await
        .map_err(|e| format!("check_schema after the shipped migrations: {e}"))?;
    s.ensure_table().await.map_err(|e| e.to_string())?;
    let pool = fresh_pool(1, Duration::from_secs(30))?;
    s.ensure_new_pool(&pool).await.map_err(|e| e.to_string())?;
    let first = s
        .acquire(&pool, Floor(9_000))
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        first.floor == Floor::NONE,
        "a fresh slot has floor {}",
        first.floor
    );
    let r = s.release(&pool, &first, Floor(8_500)).await;
    ensure!(r == Release::Released, "release: {r:?}");
    let second = s
        .acquire(&pool, Floor(100))
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        second.floor == Floor(8_500),
        "the next grant carries {}",
        second.floor
    );
    s.close().await;
    Ok(())
}

/// The password in the database URL — in its user info or in its query
/// string (`?password=`) — never shows: not in `Debug` of the config or the
/// strategy, not in `identity()`, not in any error (a wrong password, an
/// unreachable server, a missing table, a URL `from_url` refuses), and not
/// in any span, event or metric the driver emits while it holds, renews
/// and releases.
async fn the_password_never_shows(b: Arc<Sql>) -> Result<(), String> {
    use leasehold_conformance::secrets::{self, Secret, Shown, in_query, in_user_info};
    let secret = Secret::new();
    let mut shown = Shown::new(&secret);
    let _ = secrets::capture();
    // SQLite has no user info: the password only as a query parameter.
    let mut urls = vec![in_query(&b.url, secret.as_str())];
    if b.addr.is_some() {
        urls.push(in_user_info(&b.url, "root", secret.as_str()));
    }
    for url in urls {
        let sep = if url.contains('?') { '&' } else { '?' };
        match SqlConfig::from_url(&format!("{url}{sep}bogus=1")) {
            Ok(c) => return Err(format!("an unknown option was accepted: {c:?}")),
            Err(e) => {
                shown.both("SqlError (from_url, an unknown option)", &e);
            }
        }
        let config = SqlConfig::new(url.clone())
            .max_connections(2)
            .durability(DurabilityPolicy::Throwaway);
        shown.debug("SqlConfig", &config);
        match SqlStrategy::connect(config.clone()).await {
            Ok(s) => {
                shown.debug("SqlStrategy", &s);
                let missing = SqlStrategy::connect(config.clone().table(fresh_table("missing")))
                    .await
                    .map_err(|e| e.to_string())?;
                if let Err(e) = missing
                    .acquire(&fresh_pool(1, Duration::from_secs(5))?, Floor::NONE)
                    .await
                {
                    shown.both("AcquireError (missing table)", &e);
                }
                missing.close().await;
                s.ensure_table().await.map_err(|e| e.to_string())?;
                secrets::exercise(Arc::new(s.clone()), &mut shown).await?;
                s.close().await;
            }
            // MariaDB's root has no password: a wrong one is refused.
            Err(e) => {
                shown.both("SqlError (wrong password)", &e);
            }
        }
        if let Some(addr) = b.addr {
            // Nothing listens on port 1.
            let dead = url.replacen(&addr.to_string(), "127.0.0.1:1", 1);
            match SqlStrategy::connect(SqlConfig::new(dead)).await {
                Ok(_) => return Err("connected to port 1".into()),
                Err(e) => {
                    shown.both("SqlError (unreachable)", &e);
                }
            }
        }
    }
    // SQLite has no password: its URL with one is refused at connect, and
    // that refusal (the config's `Debug`, the error's `Display` and `Debug`)
    // is what there is to check. Counted before the traces, which come from
    // whatever else the process ran meanwhile.
    let least = if b.addr.is_some() { 10 } else { 5 };
    let checked = shown.count();
    ensure!(checked >= least, "only {checked} texts checked");
    shown.traces().metrics();
    shown.verdict()
}

/// Claims and renewals report the server's clock
/// (the driver compares its progress with the local clock's to catch a
/// store clock jump) and the TTL the engine applied. The server's readings
/// fall inside the local readings taken around the calls, whatever the load.
async fn claims_and_renewals_report_the_servers_time(b: Arc<Sql>) -> Result<(), String> {
    use std::time::{Instant, SystemTime, UNIX_EPOCH};
    let s = b.strategy().await?;
    let pool = fresh_pool(
        1,
        Duration::from_millis(30_000) + Duration::from_micros(1_234),
    )?;
    b.prepare(&pool).await?;
    let resolution = s.capabilities().time_resolution;
    let before = Instant::now();
    let g = s
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    let answered = Instant::now();
    let t0 = g.store_time.ok_or("the grant carries no store time")?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let sent = Instant::now();
    let r = s.renew(&pool, &g, Floor::NONE).await;
    let after = Instant::now();
    let Renewal::Renewed {
        ttl,
        store_time: Some(t1),
        ..
    } = r
    else {
        return Err(format!("renewal answered {r:?}"));
    };
    let store = t1
        .checked_sub(t0)
        .ok_or("the server's time went backwards between claim and renewal")?;
    let (outer, inner) = (after - before, sent - answered);
    // Two server readings, plus clock rates (1000 ppm) and the resolution.
    let slack = resolution * 2 + outer / 1000 + Duration::from_millis(1);
    ensure!(
        store <= outer + slack && store + slack >= inner,
        "the server's clock moved {store:?} between claim and renewal; this host's moved \
         between {inner:?} and {outer:?}"
    );
    for (what, applied) in [("grant", g.ttl), ("renewal", ttl)] {
        ensure!(
            applied <= pool.ttl() && pool.ttl() - applied < resolution.max(Duration::from_nanos(1)),
            "the {what} reports ttl {applied:?} for {:?} at resolution {resolution:?}",
            pool.ttl()
        );
    }
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| e.to_string())?;
    ensure!(
        wall.abs_diff(t1) < Duration::from_secs(60),
        "the server's time {t1:?} is not Unix time (this host says {wall:?})"
    );
    s.close().await;
    Ok(())
}

/// On a server that can forget acknowledged writes (accepted with the
/// one-timing opt-in), the restart guard grants nothing until the server has
/// been up for the pool's TTL,
/// answering the retryable `StoreRestarted` with the time left; then grants
/// resume. These servers started seconds ago, so a pool with a TTL of an
/// hour is held back and one of 100 ms is not (once the server has been up
/// for a second: MariaDB counts its uptime in whole seconds). SQLite needs
/// no guard. (The guard spans the TTL plus twice the default
/// `max_clock_skew`, 2 s.)
async fn the_restart_guard_holds_grants_for_a_ttl_after_the_server_started(
    b: Arc<Sql>,
) -> Result<(), String> {
    let s =
        SqlStrategy::connect(SqlConfig::new(&b.url).durability(DurabilityPolicy::OneTimingPerPool))
            .await
            .map_err(|e| e.to_string())?;
    s.ensure_table().await.map_err(|e| e.to_string())?;
    let hour = Duration::from_secs(3600);
    let long = fresh_pool(2, hour)?;
    // With the rows in place, so the claim statement itself is held back
    // (and the fresh pool declared new: held back by the restart alone).
    s.ensure_new_pool(&long).await.map_err(|e| e.to_string())?;
    let r = s.acquire(&long, Floor::NONE).await;
    match (s.engine(), r) {
        (Engine::Sqlite, Ok(_)) => {}
        (Engine::Sqlite, other) => return Err(format!("SQLite needs no guard: {other:?}")),
        (_, Err(e @ AcquireError::StoreRestarted { resume_in })) => {
            ensure!(e.is_retryable(), "StoreRestarted must be retryable");
            let span = long.restart_span();
            ensure!(
                resume_in > Duration::ZERO && resume_in <= span + Duration::from_secs(1),
                "grants resume in {resume_in:?}, for a TTL of {hour:?} (span {span:?})"
            );
            ensure!(
                e.to_string().contains("restarted"),
                "the message does not say why: {e}"
            );
        }
        (_, other) => {
            return Err(format!(
                "a server up for less than the TTL granted a slot: {other:?}"
            ));
        }
    }
    if s.engine() != Engine::Sqlite {
        let r = leasehold_conformance::restarts::a_lease_manager_announces_the_guard_as_waiting(
            s.clone(),
            &long,
        )
        .await;
        let r = match r {
            Ok(()) => leasehold_conformance::restarts::a_lease_manager_started_inside_the_guard_gets_its_lease_when_it_opens(
                s.clone(),
                |ttl| {
                    let s = s.clone();
                    Box::pin(async move {
                        let pool = fresh_pool(2, ttl)?;
                        s.ensure_pool(&pool).await.map_err(|e| e.to_string())?;
                        Ok(pool)
                    })
                },
            )
            .await,
            e => e,
        };
        if r.is_err() {
            s.close().await;
        }
        r?;
    }
    let r =
        leasehold_conformance::restarts::grants_resume_after_the_guard(&s, Duration::from_secs(10))
            .await;
    s.close().await;
    r
}

/// The durability settings are read at connect and reported; a server that
/// can forget acknowledged writes is refused by the durable policy, the
/// default (naming the setting, its fix and the two other policies). The
/// test servers are speed-tuned on purpose (PostgreSQL `fsync = off`,
/// MariaDB `innodb_flush_log_at_trx_commit = 0`); SQLite is durable for
/// every holder it can have.
async fn a_server_that_can_forget_is_reported_and_refused_by_the_durable_policy(
    b: Arc<Sql>,
) -> Result<(), String> {
    let s = b.strategy().await?;
    let durability = s.durability().clone();
    let debug = format!("{s:?}");
    let engine = s.engine();
    s.close().await;
    let setting = match engine {
        Engine::Postgres => "fsync",
        Engine::MySql => "innodb_flush_log_at_trx_commit",
        _ => {
            ensure!(durability.is_durable(), "SQLite reported {durability}");
            let durable =
                SqlStrategy::connect(b.config()?.durability(DurabilityPolicy::Durable)).await;
            ensure!(
                durable.is_ok(),
                "SQLite refused as not durable: {durable:?}"
            );
            return Ok(());
        }
    };
    ensure!(
        durability.risks.iter().any(|r| r.setting == setting),
        "{setting} not reported: {durability}"
    );
    ensure!(debug.contains(setting), "Debug does not show it: {debug}");
    for (config, which) in [
        (SqlConfig::new(&b.url), "the defaults"),
        (
            SqlConfig::new(&b.url).durability(DurabilityPolicy::Durable),
            "durability(Durable)",
        ),
    ] {
        match SqlStrategy::connect(config).await {
            Err(e @ SqlError::Forgetful(_)) => {
                let msg = e.to_string();
                ensure!(
                    msg.contains(setting)
                        && msg.contains(&format!("set {setting}"))
                        && msg.contains("durability=one-timing-per-pool")
                        && msg.contains("durability=throwaway"),
                    "{which}: the refusal does not name the setting, its fix and both opt-ins: \
                     {msg}"
                );
                ensure!(!e.is_retryable(), "Forgetful must be final");
            }
            other => {
                return Err(format!(
                    "{which} accepted a server with {setting} off: {other:?}"
                ));
            }
        }
    }
    Ok(())
}

/// The deprecated `require_durable(true)` still refuses a server that can
/// forget acknowledged writes even beside `assume_one_timing_per_pool(true)`,
/// with `NotDurable` naming the setting and its fix, and still accepts
/// SQLite. No durability policy says this (`Durable` refuses such a server
/// as `Forgetful`), so the switch is exercised by its own name here for as
/// long as it is kept.
#[allow(deprecated)]
async fn require_durable_refuses_a_server_that_can_forget_whatever_the_opt_ins(
    b: Arc<Sql>,
) -> Result<(), String> {
    let strict = SqlStrategy::connect(b.config()?.require_durable(true)).await;
    let setting = match strict {
        Ok(s) if s.engine() == Engine::Sqlite => {
            s.close().await;
            return Ok(());
        }
        Ok(s) => {
            let durability = s.durability().clone();
            s.close().await;
            return Err(format!(
                "require_durable accepted a server that can forget: {durability}"
            ));
        }
        Err(SqlError::NotDurable(d)) => match d.risks.first() {
            Some(r) => r.setting.clone(),
            None => return Err("NotDurable named no setting".into()),
        },
        Err(e) => return Err(format!("require_durable: {e}")),
    };
    match SqlStrategy::connect(
        SqlConfig::new(&b.url)
            .assume_one_timing_per_pool(true)
            .require_durable(true),
    )
    .await
    {
        Err(e @ SqlError::NotDurable(_)) => {
            let msg = e.to_string();
            ensure!(
                msg.contains(&setting) && msg.contains(&format!("set {setting}")),
                "the refusal does not name the setting and its fix: {msg}"
            );
            ensure!(!e.is_retryable(), "NotDurable must be final");
            Ok(())
        }
        other => Err(format!(
            "require_durable accepted a server with {setting} off: {other:?}"
        )),
    }
}

/// A table name that is not a plain identifier is refused before any SQL runs.
async fn bad_table_name_is_refused(b: Arc<Sql>) -> Result<(), String> {
    match SqlStrategy::connect(b.config()?.table("leases; DROP TABLE x")).await {
        Err(SqlError::Config(_)) => Ok(()),
        other => Err(format!("expected a configuration error, got {other:?}")),
    }
}

/// Fences grow on every claim, to at least the server's clock in
/// microseconds (so a fence the server forgot is never issued again, DESIGN.md
/// rule 7); renewals never move them.
async fn fence_grows_on_claims_never_on_renewals(b: Arc<Sql>) -> Result<(), String> {
    let s = b.strategy().await?;
    let pool = fresh_pool(1, Duration::from_secs(30))?;
    b.prepare(&pool).await?;
    let mut last = None;
    let mut last_time = None;
    for _ in 0..3 {
        let g = s
            .acquire(&pool, Floor::NONE)
            .await
            .map_err(|e| e.to_string())?;
        for _ in 0..3 {
            let r = s.renew(&pool, &g, Floor::NONE).await;
            ensure!(matches!(r, Renewal::Renewed { .. }), "renewal: {r:?}");
        }
        if let Some(Fence(prev)) = last {
            ensure!(g.fence.0 > prev, "fence {} after {prev}", g.fence);
        }
        // This claim was sent after the previous one answered: its fence
        // is at least the server's clock then.
        let at = g.store_time.ok_or("the claim carries no store time")?;
        if let Some(before) = last_time {
            ensure!(
                u128::from(g.fence.0) >= Duration::as_micros(&before),
                "fence {} is below the server's clock at the previous claim ({before:?})",
                g.fence
            );
        }
        last_time = Some(at);
        last = Some(g.fence);
        ensure!(
            s.release(&pool, &g, Floor::NONE).await == Release::Released,
            "release"
        );
    }
    s.close().await;
    Ok(())
}

/// Acquisition adds a pool's missing rows by itself (the table must exist),
/// and fills exactly `size` slots. The pool is declared new with one slot
/// (a pool never prepared on a table that was there waits a span first:
/// `tests/wipe.rs`), so the claims add the other four.
async fn missing_pool_rows_are_added_on_acquisition(b: Arc<Sql>) -> Result<(), String> {
    let s = b.strategy().await?;
    let pool = fresh_pool(5, Duration::from_secs(30))?;
    declare_new_with_one_slot(&b, &pool).await?;
    let mut slots = Vec::new();
    for _ in 0..5 {
        slots.push(
            s.acquire(&pool, Floor::NONE)
                .await
                .map_err(|e| e.to_string())?
                .slot,
        );
    }
    slots.sort_unstable();
    ensure!(slots == [0, 1, 2, 3, 4], "slots {slots:?}");
    let r = s.acquire(&pool, Floor::NONE).await;
    ensure!(
        matches!(r, Err(AcquireError::PoolExhausted { .. })),
        "sixth: {r:?}"
    );
    s.close().await;
    Ok(())
}

/// `ensure_pool` from many nodes at once is idempotent and keeps held
/// leases; so is `ensure_new_pool` beside it, and whatever their order the
/// pool ends up new (this fresh pool has no holder).
async fn ensure_pool_is_idempotent_and_concurrent(b: Arc<Sql>) -> Result<(), String> {
    let pool = fresh_pool(40, Duration::from_secs(30))?;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..4 {
        let b = b.clone();
        let pool = pool.clone();
        tasks.spawn(async move {
            let s = b.strategy().await?;
            let r = if i % 2 == 0 {
                s.ensure_new_pool(&pool).await
            } else {
                s.ensure_pool(&pool).await
            };
            let r = r.map_err(|e| e.to_string());
            s.close().await;
            r
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.map_err(|e| e.to_string())??;
    }
    let s = b.strategy().await?;
    let g = s
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    s.ensure_pool(&pool).await.map_err(|e| e.to_string())?;
    let r = s.renew(&pool, &g, Floor::NONE).await;
    ensure!(
        matches!(r, Renewal::Renewed { .. }),
        "after re-ensure: {r:?}"
    );
    s.close().await;
    Ok(())
}

/// A stamp of fence `f` from slot 0 of the pool `billing`.
fn billing(f: u64) -> FenceStamp {
    FenceStamp::new(PoolName::new("billing").unwrap(), 0, Fence(f))
}

/// One fenced write of `f` (from slot 0 of the pool `billing`) to `resource`
/// in a transaction of its own.
async fn advance_once(
    s: &SqlStrategy,
    fences: &FenceTable,
    resource: &str,
    f: u64,
) -> Result<Result<(), SqlError>, String> {
    write_once(s, fences, resource, None, &billing(f)).await
}

/// One fenced write of `stamp` to `resource` in a transaction of its own:
/// `advance`, or with `from`, `take_over`.
async fn write_once(
    s: &SqlStrategy,
    fences: &FenceTable,
    resource: &str,
    from: Option<(&PoolName, u32)>,
    stamp: &FenceStamp,
) -> Result<Result<(), SqlError>, String> {
    macro_rules! in_tx {
        ($pool:expr) => {{
            let mut tx = $pool.begin().await.map_err(|e| e.to_string())?;
            let r = match from {
                Some(from) => fences.take_over(&mut *tx, resource, from, stamp).await,
                None => fences.advance(&mut *tx, resource, stamp).await,
            };
            if r.is_ok() {
                tx.commit().await.map_err(|e| e.to_string())?;
            } else {
                tx.rollback().await.map_err(|e| e.to_string())?;
            }
            r
        }};
    }
    Ok(match s.engine() {
        Engine::Postgres => in_tx!(s.postgres().unwrap()),
        Engine::MySql => in_tx!(s.mysql().unwrap()),
        _ => in_tx!(s.sqlite().unwrap()),
    })
}

/// The fence table refuses a smaller fence once a bigger one has written.
async fn fenced_write_refuses_a_stale_holder(b: Arc<Sql>) -> Result<(), String> {
    let s = b.strategy().await?;
    let fences = FenceTable::new(fresh_table("fences")).map_err(|e| e.to_string())?;
    fences.ensure(&s).await.map_err(|e| e.to_string())?;
    let steps = [(2, true), (2, true), (1, false), (3, true), (2, false)];
    for (f, accepted) in steps {
        match (advance_once(&s, &fences, "billing", f).await?, accepted) {
            (Ok(()), true) => {}
            (Err(SqlError::Stale { seen, .. }), false) => {
                ensure!(seen.0 > f, "refused fence {f} citing {seen}");
            }
            (r, _) => {
                return Err(format!(
                    "fence {f}: expected accepted={accepted}, got {r:?}"
                ));
            }
        }
    }
    s.close().await;
    Ok(())
}

/// The outcome of a fenced write, in short: `ok`, `stale`, `other` or the error.
fn verdict(r: &Result<(), SqlError>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(SqlError::Stale { .. }) => "stale".into(),
        Err(SqlError::OtherWriter { .. }) => "other".into(),
        Err(e) => e.to_string(),
    }
}

/// Fences count per slot, so two holders of a pool of two slots both hold
/// fence 1: the table records the pool and slot of the resource's writer
/// and refuses the other slot's write (and another pool's) whatever its
/// fence, bigger ones included; the writer's own slot goes on as before.
async fn a_write_from_another_slot_or_pool_is_refused_whatever_its_fence(
    b: Arc<Sql>,
) -> Result<(), String> {
    let s = b.strategy().await?;
    let fences = FenceTable::new(fresh_table("fences")).map_err(|e| e.to_string())?;
    fences.ensure(&s).await.map_err(|e| e.to_string())?;
    let pool = fresh_pool(2, Duration::from_secs(30))?;
    s.ensure_new_pool(&pool).await.map_err(|e| e.to_string())?;
    let acquire = || async {
        s.acquire(&pool, Floor::NONE)
            .await
            .map_err(|e| e.to_string())
    };
    let (first, second) = (acquire().await?, acquire().await?);
    // The later claim's fence is at least as big (fences start at the
    // server's clock; SQLite's counts milliseconds): a check of numbers
    // alone would accept its write.
    ensure!(
        second.fence >= first.fence,
        "the later claim has fence {}, the earlier {}",
        second.fence,
        first.fence
    );
    let (a, b2) = (
        FenceStamp::of(&pool, &first),
        FenceStamp::of(&pool, &second),
    );
    // The same number from the other slot (slots count on their own).
    let same_number = FenceStamp::new(pool.name().clone(), second.slot, first.fence);
    let other_pool = FenceStamp::new(
        fresh_pool(1, Duration::from_secs(30))?.name().clone(),
        first.slot,
        Fence(first.fence.0 + 10),
    );
    let bigger = FenceStamp::new(pool.name().clone(), second.slot, Fence(second.fence.0 + 10));
    let steps = [
        (&a, "ok"),
        (&same_number, "other"),
        (&b2, "other"),
        (&bigger, "other"),
        (&other_pool, "other"),
        (&a, "ok"),
    ];
    for (i, (stamp, expected)) in steps.into_iter().enumerate() {
        let r = write_once(&s, &fences, "billing", None, stamp).await?;
        ensure!(
            verdict(&r) == expected,
            "step {i}: a write with {stamp} answered {r:?}, expected {expected}"
        );
        if let Err(e @ SqlError::OtherWriter { .. }) = &r {
            let msg = e.to_string();
            ensure!(
                msg.contains("take_over"),
                "the refusal does not say what to do: {msg}"
            );
        }
    }
    s.close().await;
    Ok(())
}

/// A resource moves to another pool only by `take_over`, naming the pool
/// and slot it leaves: from then on the old pool's writes are refused
/// whatever their fence (a stale leader of the old pool can never write
/// again), the new pool's writes are fenced as usual, and a third pool can
/// take nothing over from a pool that no longer owns the resource.
async fn take_over_moves_a_resource_and_refuses_the_old_pool_for_good(
    b: Arc<Sql>,
) -> Result<(), String> {
    let s = b.strategy().await?;
    let fences = FenceTable::new(fresh_table("fences")).map_err(|e| e.to_string())?;
    fences.ensure(&s).await.map_err(|e| e.to_string())?;
    let name = |n: &str| PoolName::new(n).unwrap();
    let (old, new, third) = (name("old"), name("new"), name("third"));
    let stamp = |p: &PoolName, f: u64| FenceStamp::new(p.clone(), 0, Fence(f));
    // (the pool and slot taken over, or a plain write; the stamp; the verdict)
    type Step<'a> = (Option<(&'a PoolName, u32)>, FenceStamp, &'static str);
    let steps: [Step<'_>; 9] = [
        (None, stamp(&old, 5), "ok"),
        (None, stamp(&new, 1), "other"),
        (Some((&third, 0)), stamp(&new, 1), "other"),
        (Some((&old, 0)), stamp(&new, 1), "ok"),
        (None, stamp(&old, 99), "other"),
        (None, stamp(&new, 1), "ok"),
        (Some((&old, 0)), stamp(&third, 1), "other"),
        // Taking over from one's own pool and slot is a fenced write.
        (Some((&new, 0)), stamp(&new, 0), "stale"),
        (Some((&new, 0)), stamp(&new, 2), "ok"),
    ];
    for (i, (from, stamp, expected)) in steps.iter().enumerate() {
        let r = write_once(&s, &fences, "billing", *from, stamp).await?;
        ensure!(
            verdict(&r) == *expected,
            "step {i}: {} with {stamp} answered {r:?}, expected {expected}",
            from.map_or("advance".to_owned(), |(p, s)| format!(
                "take_over from {p}/{s}"
            ))
        );
    }
    s.close().await;
    Ok(())
}

/// The fence table as leasehold-sql 0.2 created it (no issuer columns).
fn fence_table_0_2(s: &SqlStrategy, table: &str) -> String {
    match s.engine() {
        Engine::Postgres => format!(
            "CREATE TABLE \"{table}\" (resource VARCHAR(255) PRIMARY KEY, fence BIGINT NOT NULL, \
             updated_at TIMESTAMPTZ(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))"
        ),
        Engine::MySql => format!(
            "CREATE TABLE `{table}` (resource VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin \
             PRIMARY KEY, fence BIGINT UNSIGNED NOT NULL, updated_at DATETIME(6) NOT NULL DEFAULT \
             CURRENT_TIMESTAMP(6)) ENGINE = InnoDB"
        ),
        _ => format!(
            "CREATE TABLE \"{table}\" (resource TEXT PRIMARY KEY, fence INTEGER NOT NULL, \
             updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')))"
        ),
    }
}

/// The shipped 0003 migration of `s`'s engine, for the fence table `table`.
fn fence_migration(s: &SqlStrategy, table: &str) -> String {
    let text = match s.engine() {
        Engine::Postgres => include_str!("../migrations/postgres/0004_leasehold_fence_issuer.sql"),
        Engine::MySql => include_str!("../migrations/mysql/0004_leasehold_fence_issuer.sql"),
        _ => include_str!("../migrations/sqlite/0004_leasehold_fence_issuer.sql"),
    };
    text.replace("leasehold_fences", table)
}

/// A fence table without the issuer columns (as 0.2 made it) refuses fenced
/// writes with an error naming both fixes; `ensure` (or the shipped 0003
/// migration) adds them, the recorded fence is kept, and the first write
/// after it (with a fence no smaller) records its pool and slot, after
/// which other slots are refused.
async fn an_older_fence_table_is_migrated_and_keeps_its_fences(b: Arc<Sql>) -> Result<(), String> {
    let s = b.strategy().await?;
    for by_ensure in [true, false] {
        let table = fresh_table("oldfences");
        raw(&s, &fence_table_0_2(&s, &table)).await?;
        let quoted = if s.engine() == Engine::MySql {
            format!("`{table}`")
        } else {
            format!("\"{table}\"")
        };
        raw(
            &s,
            &format!("INSERT INTO {quoted} (resource, fence) VALUES ('billing', 7)"),
        )
        .await?;
        let fences = FenceTable::new(table.clone()).map_err(|e| e.to_string())?;
        let r = advance_once(&s, &fences, "billing", 7).await?;
        match &r {
            Err(e @ SqlError::FenceSchema { .. }) => {
                let msg = e.to_string();
                for needle in ["FenceTable::ensure", "0004_leasehold_fence_issuer.sql"] {
                    ensure!(msg.contains(needle), "the message lacks {needle}: {msg}");
                }
            }
            other => return Err(format!("a write to a 0.2 fence table answered {other:?}")),
        }
        if by_ensure {
            fences.ensure(&s).await.map_err(|e| e.to_string())?;
        } else {
            raw(&s, &fence_migration(&s, &table)).await?;
        }
        fences
            .ensure(&s)
            .await
            .map_err(|e| format!("ensure after the migration: {e}"))?;
        let other_slot = FenceStamp::new(PoolName::new("billing").unwrap(), 1, Fence(8));
        let steps = [
            (billing(6), "stale"),
            (billing(7), "ok"),
            (other_slot, "other"),
            (billing(8), "ok"),
        ];
        for (i, (stamp, expected)) in steps.iter().enumerate() {
            let r = write_once(&s, &fences, "billing", None, stamp).await?;
            ensure!(
                verdict(&r) == *expected,
                "migrated by {}: step {i}: {stamp} answered {r:?}, expected {expected}",
                if by_ensure { "ensure" } else { "0004" }
            );
        }
    }
    s.close().await;
    Ok(())
}

/// Fenced writes racing on one resource (a new one, and then an existing
/// row) each end accepted or refused as stale, never in an error such as a
/// deadlock: MariaDB's `INSERT IGNORE` took a shared lock on the existing
/// row before the `UPDATE` wanted an exclusive one, so two writers deadlocked
/// and one of them failed (found by the leader examples under load).
async fn racing_fenced_writes_never_fail(b: Arc<Sql>) -> Result<(), String> {
    let s = Arc::new(b.strategy().await?);
    let fences = Arc::new(FenceTable::new(fresh_table("fences")).map_err(|e| e.to_string())?);
    fences.ensure(&s).await.map_err(|e| e.to_string())?;
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let (s, fences) = (s.clone(), fences.clone());
        tasks.push(tokio::spawn(async move {
            let mut errors = Vec::new();
            for round in 0..25u64 {
                let f = round * 8 + w;
                match advance_once(&s, &fences, "racing", f).await {
                    Ok(Ok(()) | Err(SqlError::Stale { .. })) => {}
                    Ok(Err(e)) => errors.push(format!("writer {w}, fence {f}: {e}")),
                    Err(e) => errors.push(format!("writer {w}, fence {f}: {e}")),
                }
            }
            errors
        }));
    }
    let mut errors = Vec::new();
    for t in tasks {
        errors.extend(t.await.map_err(|e| e.to_string())?);
    }
    ensure!(
        errors.is_empty(),
        "{} racing fenced writes failed, e.g. {}",
        errors.len(),
        errors.first().map_or("", String::as_str)
    );
    Ok(())
}

/// Claims declaring two ID formats race on fresh pools, each claimer on a
/// connection of its own: the format recorded first is the only one that
/// ever holds slots, and every claim of the other is refused with
/// `OtherIdFormat` naming the winner. A check that read the other slots'
/// rows would let both through: neither sees the other's claim before it
/// commits. Half the pools have their slot rows prepared beforehand, so the
/// claims race on the claim itself; the others have none, so they race on
/// adding the rows too. The two formats of a pool differ only in letter
/// case, or in a trailing space, which a comparison under a text collation
/// would take for one format.
async fn claims_of_two_id_formats_racing_on_a_fresh_pool_never_both_hold_slots(
    b: Arc<Sql>,
) -> Result<(), String> {
    use leasehold_core::IdFormat;
    const CLAIMERS: usize = 8;
    // A claim that read the record in a snapshot older than its rival's commit
    // got through in about one pool of ten here: forty make it show.
    const POOLS: usize = 40;
    let format = |text: &str| IdFormat::new(1, text).map_err(|e| e.to_string());
    let pairs = [
        [
            format("race/v1: 41-bit ms, 10-bit slot")?,
            format("race/v1: 41-bit MS, 10-bit slot")?,
        ],
        [
            format("race/v1: 41-bit ms, 10-bit slot")?,
            format("race/v1: 41-bit ms, 10-bit slot ")?,
        ],
    ];
    // Connected before the race, so the claims, not the connects, race.
    let mut stores = Vec::new();
    for _ in 0..CLAIMERS {
        stores.push(Arc::new(b.strategy().await?));
    }
    let mut failures = Vec::new();
    for round in 0..POOLS {
        let formats = &pairs[round % pairs.len()];
        let pool = fresh_pool(CLAIMERS as u32, Duration::from_secs(30))?;
        if round % 2 == 0 {
            b.prepare(&pool).await?;
        } else {
            // The racing claims add the rows of slots 1 and up.
            declare_new_with_one_slot(&b, &pool).await?;
        }
        let start = Arc::new(tokio::sync::Barrier::new(CLAIMERS));
        let mut tasks = Vec::new();
        for (i, s) in stores.iter().enumerate() {
            let (s, start) = (s.clone(), start.clone());
            let spec = pool.clone().with_id_format(formats[i % 2].clone());
            tasks.push(tokio::spawn(async move {
                start.wait().await;
                // Lock conflicts and busy files are retried, as the driver does.
                let mut tries = 0;
                loop {
                    tries += 1;
                    match s.acquire(&spec, Floor::NONE).await {
                        Err(e) if e.is_retryable() && tries < 20 => {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        r => return (i % 2, spec, r),
                    }
                }
            }));
        }
        let mut holding = [Vec::new(), Vec::new()];
        let mut refused = [0, 0];
        let mut grants = Vec::new();
        for t in tasks {
            let (which, spec, r) = t.await.map_err(|e| e.to_string())?;
            match r {
                Ok(g) => {
                    holding[which].push(g.slot);
                    grants.push((spec, g));
                }
                Err(AcquireError::OtherIdFormat { recorded, ours, .. })
                    if ours == formats[which].text() && recorded == formats[1 - which].text() =>
                {
                    refused[which] += 1;
                }
                Err(e) => failures.push(format!("pool {round}, format {which}: {e}")),
            }
        }
        for (spec, g) in &grants {
            let _ = stores[0].release(spec, g, Floor::NONE).await;
        }
        ensure!(
            holding[0].is_empty() || holding[1].is_empty(),
            "pool {round}: both formats hold slots: {:?} holds {:?}, {:?} holds {:?}",
            formats[0].text(),
            holding[0],
            formats[1].text(),
            holding[1]
        );
        let winner = usize::from(holding[0].is_empty());
        ensure!(
            holding[winner].len() == CLAIMERS / 2 && refused[1 - winner] == CLAIMERS / 2,
            "pool {round}: the recorded format got slots {:?}, {} claims of the other were \
             refused (of {} each)",
            holding[winner],
            refused[1 - winner],
            CLAIMERS / 2
        );
    }
    for s in &stores {
        s.close().await;
    }
    ensure!(
        failures.is_empty(),
        "{} claims failed otherwise, e.g. {}",
        failures.len(),
        failures[0]
    );
    Ok(())
}

/// A renewal blocked behind another transaction's row lock (or, on SQLite,
/// the file's write lock) answers `Retry` within about the operation timeout:
/// the server-side limits and the client-side timeout both stop it; never
/// `Lost`, never a hang. After the lock goes, renewal succeeds.
async fn renewal_blocked_by_a_lock_gives_retry_within_op_timeout(
    b: Arc<Sql>,
) -> Result<(), String> {
    let op = Duration::from_secs(1);
    // SQLite locks the whole file: use a file of its own, or every other test
    // sharing the file would stall behind this one's lock.
    let b = if b.addr.is_none() {
        Arc::new(Sql {
            url: b
                .url
                .replace(".sqlite", &format!("-{}.sqlite", fresh_table("lock"))),
            addr: None,
            guard: false,
            admin: None,
        })
    } else {
        b
    };
    // Connecting within a 1 s op_timeout is not what is tested: a loaded
    // machine may take longer to open the file or the connection, which is
    // retryable, so it is retried (bounded).
    let started = std::time::Instant::now();
    let s = loop {
        match SqlStrategy::connect(b.config()?.op_timeout(op)).await {
            Ok(s) => break s,
            Err(e) if e.is_retryable() && started.elapsed() < Duration::from_secs(60) => {}
            Err(e) => return Err(e.to_string()),
        }
    };
    let pool = fresh_pool(1, Duration::from_secs(30))?;
    s.ensure_new_pool(&pool).await.map_err(|e| e.to_string())?;
    let g = loop {
        match s.acquire(&pool, Floor::NONE).await {
            Ok(g) => break g,
            Err(e) if e.is_retryable() && started.elapsed() < Duration::from_secs(60) => {}
            Err(e) => return Err(e.to_string()),
        }
    };
    let locker = b.strategy().await?;
    let name = pool.name().as_str();
    let t = locker.table().as_str().to_owned();
    let e = |e: sqlx::Error| e.to_string();
    let check = async {
        // Bounded on the runtime's own timer, which polls the call first: a
        // starved runtime sees the call's own timeout first, so only a
        // renewal that ignores its op_timeout fails here.
        let r = tokio::time::timeout(op * 3, s.renew(&pool, &g, Floor::NONE))
            .await
            .map_err(|_| format!("blocked renewal still pending after 3 × op_timeout {op:?}"))?;
        ensure!(
            matches!(r, Renewal::Retry(_)),
            "blocked renewal answered {r:?}"
        );
        Ok(())
    };
    match locker.engine() {
        Engine::Postgres => {
            let mut tx = locker.postgres().unwrap().begin().await.map_err(e)?;
            sqlx::query(&format!(
                "SELECT slot FROM \"{t}\" WHERE pool = $1 FOR UPDATE"
            ))
            .bind(name)
            .execute(&mut *tx)
            .await
            .map_err(e)?;
            check.await?;
            tx.rollback().await.map_err(e)?;
        }
        Engine::MySql => {
            let mut tx = locker.mysql().unwrap().begin().await.map_err(e)?;
            sqlx::query(&format!("SELECT slot FROM `{t}` WHERE pool = ? FOR UPDATE"))
                .bind(name)
                .execute(&mut *tx)
                .await
                .map_err(e)?;
            check.await?;
            tx.rollback().await.map_err(e)?;
        }
        _ => {
            use sqlx::Executor;
            let mut conn = locker.sqlite().unwrap().acquire().await.map_err(e)?;
            conn.execute("BEGIN IMMEDIATE").await.map_err(e)?;
            check.await?;
            conn.execute("ROLLBACK").await.map_err(e)?;
        }
    }
    let r = s.renew(&pool, &g, Floor::NONE).await;
    ensure!(
        matches!(r, Renewal::Renewed { .. }),
        "after the lock: {r:?}"
    );
    locker.close().await;
    s.close().await;
    Ok(())
}

fn target(label: &str, server: String, backend: Sql) -> Target {
    // The guards' own tests need a server whose settings can forget (the
    // speed-tuned single servers and SQLite); the replicated pairs are
    // durable and run with the guards on.
    let single = !backend.guard;
    let t = Target::new(label, server, Arc::new(backend)).with_revoke();
    let t = damaged::register(t, label == "sqlite");
    let t = trials!(t;
        missing_table_is_final_and_names_ensure_pool,
        an_elector_that_can_never_lead_reports_its_final_error,
        foreign_table_is_reported,
        bad_table_name_is_refused,
        fence_grows_on_claims_never_on_renewals,
        missing_pool_rows_are_added_on_acquisition,
        ensure_pool_is_idempotent_and_concurrent,
        fenced_write_refuses_a_stale_holder,
        racing_fenced_writes_never_fail,
        claims_of_two_id_formats_racing_on_a_fresh_pool_never_both_hold_slots,
        a_write_from_another_slot_or_pool_is_refused_whatever_its_fence,
        take_over_moves_a_resource_and_refuses_the_old_pool_for_good,
        an_older_fence_table_is_migrated_and_keeps_its_fences,
        renewal_blocked_by_a_lock_gives_retry_within_op_timeout,
        a_0_1_table_is_refused_then_migrated_by_ensure_pool,
        the_shipped_migrations_make_a_floor_table,
        the_password_never_shows,
        claims_and_renewals_report_the_servers_time,
    );
    if !single {
        return t;
    }
    trials!(t;
        the_restart_guard_holds_grants_for_a_ttl_after_the_server_started,
        a_server_that_can_forget_is_reported_and_refused_by_the_durable_policy,
        require_durable_refuses_a_server_that_can_forget_whatever_the_opt_ins,
    )
}

/// The label of the suite as a lease user on `kind`'s server, if it has one.
fn lease_user_label(kind: ServerKind) -> Option<&'static str> {
    let label = match kind {
        ServerKind::Postgres15 => "postgres15-lease-user",
        ServerKind::PostgresLatest => "postgres-latest-lease-user",
        ServerKind::MariaDb => "mariadb-lease-user",
        _ => return None,
    };
    debug_assert!(leasehold_conformance::servers::SQL_LEASE_USER_LABELS.contains(&label));
    Some(label)
}

/// The suite on `server` as a lease user made with the crate's
/// statements (`lease_user_sql`), the admin of `admin` preparing.
fn lease_user_target(
    label: &str,
    server: &leasehold_conformance::servers::Server,
    admin: &Sql,
) -> Target {
    let made = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| rt.block_on(lease_user::create(&admin.url, lease_user::LEASE_USER)));
    match made {
        Ok(url) => {
            let shown = format!(
                "{} as the lease user {} (SELECT, INSERT, UPDATE on the lease table)",
                server.describe(),
                lease_user::LEASE_USER
            );
            let t = lease_user::register(
                Target::new(label, shown, Arc::new(admin.as_lease_user(url))).with_revoke(),
            );
            if server.kind == ServerKind::Postgres15 {
                lease_user::register_postgres(t)
            } else {
                t
            }
        }
        Err(e) => Target::missing(
            label,
            Missing {
                kind: server.kind,
                tried: vec![format!("creating the lease user: {e}")],
            },
        ),
    }
}

/// The suite on a TLS-only server, with the TLS tests.
fn tls_target(label: &str, server: String, backend: Sql) -> Target {
    use tls::*;
    trials!(target(label, server, backend);
        the_connection_is_verified_tls_with_a_client_certificate,
        a_connection_without_tls_is_refused_and_the_fix_is_named,
        a_server_certificate_from_an_untrusted_ca_is_refused,
        an_expired_server_certificate_is_refused,
        a_server_certificate_for_another_host_is_refused,
        a_client_certificate_the_server_does_not_trust_is_refused,
        a_missing_client_certificate_is_refused_and_named,
        a_missing_or_wrong_file_is_a_configuration_error_naming_it,
        unverified_tls_modes_are_refused_naming_the_verified_one,
    )
}

fn main() -> ExitCode {
    let mut servers = Vec::new();
    let mut targets = Vec::new();
    for kind in [
        ServerKind::Postgres15,
        ServerKind::PostgresLatest,
        ServerKind::MariaDb,
    ] {
        match provide(kind) {
            Ok(server) => {
                let backend = Sql {
                    url: server.url.clone(),
                    addr: server.addr(),
                    guard: false,
                    admin: None,
                };
                // The suite again as a lease user, where the engine has users.
                if let Some(label) = lease_user_label(kind) {
                    targets.push(lease_user_target(label, &server, &backend));
                }
                let t = target(kind.name(), server.describe(), backend);
                targets.push(match kind {
                    ServerKind::PostgresLatest => t,
                    _ => t.with_test(
                        "a_verified_tls_url_to_a_plain_server_does_not_fall_back",
                        tls::a_verified_tls_url_to_a_plain_server_does_not_fall_back,
                    ),
                });
                servers.push(server);
            }
            Err(missing) => targets.push(Target::missing(kind.name(), missing)),
        }
    }
    // TLS only, each user known by its client certificate.
    for (label, kind) in [
        ("postgres15-tls", ServerKind::Postgres15),
        ("mariadb-tls", ServerKind::MariaDb),
    ] {
        match provide_tls(kind) {
            Ok(server) => {
                let backend = Sql {
                    url: server.url.clone(),
                    addr: server.addr(),
                    guard: false,
                    admin: None,
                };
                let shown = format!(
                    "{} over TLS only, verified, client certificate {}",
                    server.describe(),
                    leasehold_conformance::tls::CLIENT_NAME
                );
                targets.push(tls_target(label, shown, backend));
                servers.push(server);
            }
            Err(missing) => targets.push(Target::missing(label, missing)),
        }
    }
    let dir =
        std::env::temp_dir().join(format!("leasehold-sql-conformance-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let sqlite = Sql {
        url: format!("sqlite://{}", dir.join("leases.sqlite").display()),
        addr: None,
        guard: false,
        admin: None,
    };
    let version = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(async {
            let s = sqlite.strategy().await?;
            let v = s.server_version().to_owned();
            s.close().await;
            Ok::<_, String>(v)
        })
        .unwrap_or_else(|e| format!("unknown version: {e}"));
    targets.push(target(
        "sqlite",
        format!("sqlite {version} (bundled; one file shared by every connection)"),
        sqlite,
    ));
    // The same engine through its driver, as `leasehold::connect` opens it:
    // the suite's glue written once (`ByDriver`), on a file of its own.
    targets.push(
        Target::new(
            "sqlite-by-driver",
            format!("sqlite {version}, through its driver"),
            Arc::new(ByDriver::new(
                &leasehold_sql::driver::SQLITE,
                format!(
                    "sqlite://{}?durability=throwaway",
                    dir.join("by-driver.sqlite").display()
                ),
            )),
        )
        .with_revoke(),
    );
    // The replicated pairs: a primary and a streaming standby, reached
    // through the address that follows the primary. Their runtime drives
    // that address while the suite runs.
    let pairs_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let mut pairs = Vec::new();
    for (label, replication) in [
        (PG15_ASYNC_LABEL, Replication::Async),
        (PG15_SYNC_LABEL, Replication::Sync),
    ] {
        match pairs_rt.block_on(PgPair::start(ServerKind::Postgres15, replication)) {
            Ok(pair) => {
                let backend = Sql {
                    url: pair.url(),
                    addr: Some(pair.proxy().addr()),
                    guard: true,
                    admin: None,
                };
                targets.push(target(label, pair.describe(), backend));
                pairs.push(pair);
            }
            Err(e) => targets.push(Target::missing(
                label,
                Missing {
                    kind: ServerKind::Postgres15,
                    tried: vec![format!("a primary and a {replication} standby: {e}")],
                },
            )),
        }
    }
    let code = leasehold_conformance::run(targets);
    drop(pairs);
    drop(pairs_rt);
    drop(servers);
    let _ = std::fs::remove_dir_all(&dir);
    code
}
