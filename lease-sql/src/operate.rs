//! The operator's handle on a SQL lease table: what `leasehold status`,
//! `revoke` and `doctor` do, through core's [`Operate`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold_core::operate::{durability_check, refusal_check};
use leasehold_core::{
    BoxFuture, Check, Durability, Guard, Operate, OperateError, PoolSpec, Reason, Replication,
    Verdict,
};

use crate::statements::RECORD_ROW;
use crate::tls::Mode;
use crate::{Engine, SqlError, SqlStrategy, sqlx};

fn store_error(e: impl std::fmt::Display) -> OperateError {
    OperateError::Store(Reason::new(e.to_string()))
}

fn from_sql(e: SqlError) -> OperateError {
    match e {
        SqlError::MissingSchema { what, fix } => OperateError::NeedsFix { what, fix },
        e if e.is_retryable() => OperateError::Unreachable(Reason::new(e.to_string())),
        e => store_error(e),
    }
}

impl SqlStrategy {
    /// One `i64` the server computes, on the sqlx pool.
    async fn scalar_i64(&self, sql: &str) -> Result<i64, sqlx::Error> {
        #[cfg(feature = "postgres")]
        if let Some(p) = self.postgres() {
            return sqlx::query_scalar(sql).fetch_one(p).await;
        }
        #[cfg(feature = "mysql")]
        if let Some(p) = self.mysql() {
            return sqlx::query_scalar(sql).fetch_one(p).await;
        }
        #[cfg(feature = "sqlite")]
        if let Some(p) = self.sqlite() {
            return sqlx::query_scalar(sql).fetch_one(p).await;
        }
        let _ = sql;
        Err(sqlx::Error::PoolClosed)
    }

    /// The distinct pools of the lease table.
    async fn pool_names(&self) -> Result<Vec<String>, sqlx::Error> {
        let sql = format!(
            "SELECT DISTINCT pool FROM {} WHERE pool NOT LIKE '~%' ORDER BY pool",
            self.table().as_str()
        );
        #[cfg(feature = "postgres")]
        if let Some(p) = self.postgres() {
            let rows: Vec<(String,)> = sqlx::query_as(&sql).fetch_all(p).await?;
            return Ok(rows.into_iter().map(|(p,)| p).collect());
        }
        #[cfg(feature = "mysql")]
        if let Some(p) = self.mysql() {
            // The pool column is VARBINARY on MySQL/MariaDB.
            let rows: Vec<(Vec<u8>,)> = sqlx::query_as(&sql).fetch_all(p).await?;
            return Ok(rows
                .into_iter()
                .map(|(b,)| String::from_utf8_lossy(&b).into_owned())
                .collect());
        }
        #[cfg(feature = "sqlite")]
        if let Some(p) = self.sqlite() {
            let rows: Vec<(String,)> = sqlx::query_as(&sql).fetch_all(p).await?;
            return Ok(rows.into_iter().map(|(p,)| p).collect());
        }
        Err(sqlx::Error::PoolClosed)
    }

    /// How many rows the lease table has for `pool` (what `prepare` made).
    async fn slot_rows(&self, pool: &str) -> Result<i64, sqlx::Error> {
        let table = self.table().as_str();
        #[cfg(feature = "postgres")]
        if let Some(p) = self.postgres() {
            // The pool's own rows (its ID format, its record) are not slots.
            let sql =
                format!("SELECT COUNT(*) FROM {table} WHERE pool = $1 AND slot < {RECORD_ROW}");
            return sqlx::query_scalar(&sql).bind(pool).fetch_one(p).await;
        }
        let sql = format!("SELECT COUNT(*) FROM {table} WHERE pool = ? AND slot < {RECORD_ROW}");
        #[cfg(feature = "mysql")]
        if let Some(p) = self.mysql() {
            // The pool column is VARBINARY on MySQL/MariaDB: compare bytes.
            return sqlx::query_scalar(&sql)
                .bind(pool.as_bytes())
                .fetch_one(p)
                .await;
        }
        #[cfg(feature = "sqlite")]
        if let Some(p) = self.sqlite() {
            return sqlx::query_scalar(&sql).bind(pool).fetch_one(p).await;
        }
        let _ = (pool, sql);
        Err(sqlx::Error::PoolClosed)
    }

    /// The durability check: what `connect` refuses under this
    /// configuration FAILs with the refusal's fixes and opt-ins; what it
    /// accepts is `ok`, or a warning naming the opt-in that accepted it.
    fn durability_verdict(&self) -> Check {
        // A refusal for replication is the replication check's.
        let replication = SqlStrategy::replication(self).refusal;
        if let Some(refusal) = self.refusal().filter(|r| Some(r) != replication.as_ref()) {
            return refusal_check("durability", &refusal);
        }
        let accepted = match self.opt_in() {
            Some(opt_in @ "durability=throwaway") => format!(
                "accepted by {opt_in}: no restart guard, so a restart can hand every held slot \
                 to a second holder at once"
            ),
            Some(opt_in) => {
                format!("accepted by {opt_in}: the restart guard holds claims back after a restart")
            }
            None => String::new(),
        };
        durability_check(&SqlStrategy::durability(self), &accepted)
    }

    async fn schema_check(&self) -> Check {
        let table = self.table().as_str();
        match self.check_schema().await {
            Ok(()) => Check::new(
                Verdict::Ok,
                "schema",
                format!(
                    "lease table {table} present, with the floor, restart-span and ID-format \
                     columns"
                ),
            ),
            Err(SqlError::MissingSchema { what, fix }) => {
                Check::new(Verdict::Fail, "schema", what).fix(fix)
            }
            Err(e) => Check::new(
                Verdict::Fail,
                "schema",
                format!("cannot read the columns of {table}: {e}"),
            ),
        }
    }
}

impl SqlStrategy {
    /// TLS of the lease connections: its version and whether the server's
    /// certificate was verified. Plain text, or TLS that checks nobody, is
    /// a warning towards another host (whoever reads or sits on the path
    /// sees the password and can forge answers) and fine on this machine.
    async fn tls_check(&self) -> Check {
        let Some(asked) = self.tls_asked() else {
            return Check::new(Verdict::NotApplicable, "tls", "no network: a file");
        };
        let names = tls_names(self.engine());
        let version = match self.tls_version().await {
            Ok(v) => v,
            Err(e) => {
                return Check::new(
                    Verdict::Warn,
                    "tls",
                    format!("cannot read the TLS of the lease connections: {e}"),
                );
            }
        };
        let shown = &asked.shown;
        match (version, asked.mode) {
            (Some(v), Mode::Verified) => Check::new(
                Verdict::Ok,
                "tls",
                format!("{v}, server certificate verified ({shown})"),
            ),
            (Some(v), _) if asked.local => Check::new(
                Verdict::Ok,
                "tls",
                format!("{v}, server certificate not verified ({shown}), on this machine"),
            ),
            (Some(v), _) => Check::new(
                Verdict::Warn,
                "tls",
                format!(
                    "{v}, server certificate not verified ({shown}): anyone on the path can \
                    pose as the database"
                ),
            )
            .fix(names),
            (None, _) if asked.local => Check::new(
                Verdict::Ok,
                "tls",
                format!("plain text ({shown}), on this machine"),
            ),
            (None, _) => Check::new(
                Verdict::Warn,
                "tls",
                format!(
                    "plain text ({shown}) to another host: the password and the leases cross \
                    the network unencrypted"
                ),
            )
            .fix(names),
        }
    }

    /// The privileges of the lease user: each one the lease operations
    /// need and it lacks is a failure naming the GRANT to add.
    async fn grants_check(&self) -> Check {
        let table = self.table().as_str();
        match self.missing_grants().await {
            Ok(missing) if missing.is_empty() => Check::new(
                Verdict::Ok,
                "grants",
                format!(
                    "the user may read, insert and update {table}, and read what the \
                    durability and promotion checks read"
                ),
            ),
            Ok(missing) => {
                let needs: Vec<&str> = missing.iter().map(|m| m.needed_for).collect();
                let grants: Vec<&str> = missing.iter().map(|m| m.grant.as_str()).collect();
                Check::new(
                    Verdict::Fail,
                    "grants",
                    format!(
                        "the user lacks {} privilege(s) the lease operations need, for {}",
                        missing.len(),
                        needs.join("; ")
                    ),
                )
                .fix(format!(
                    "as the admin, run: {} (the lease-sql README, \"Least privilege\")",
                    grants.join("; ")
                ))
            }
            Err(e) => Check::new(
                Verdict::Fail,
                "grants",
                format!("cannot check the user's privileges on {table}: {e}"),
            ),
        }
    }
}

/// The verified TLS options of `engine`'s URLs.
fn tls_names(engine: Engine) -> &'static str {
    match engine {
        Engine::MySql => "add ssl-mode=VERIFY_IDENTITY&ssl-ca=CA.crt to the URL",
        _ => "add sslmode=verify-full&sslrootcert=CA.crt to the URL",
    }
}

impl Operate for SqlStrategy {
    fn describe(&self) -> String {
        self.server_version().to_owned()
    }

    fn round_trip(&self) -> &'static str {
        "SELECT 1"
    }

    fn durability(&self) -> Durability {
        SqlStrategy::durability(self)
    }

    fn replication(&self) -> Replication {
        SqlStrategy::replication(self)
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), OperateError>> {
        Box::pin(async move { SqlStrategy::ping(self).await.map_err(from_sql) })
    }

    fn store_time(&self) -> BoxFuture<'_, Result<Option<SystemTime>, OperateError>> {
        Box::pin(async move {
            // The server's clock, read as each engine's lease statements read it.
            let sql = match self.engine() {
                Engine::Postgres => {
                    "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)"
                }
                Engine::MySql => "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)",
                // No server: every holder reads its own host's clock, on
                // the one machine that has the file.
                _ => return Ok(None),
            };
            let micros = self.scalar_i64(sql).await.map_err(store_error)?;
            let micros = u64::try_from(micros).map_err(|_| {
                store_error(format!(
                    "the server's clock reads before 1970 ({micros} µs)"
                ))
            })?;
            Ok(Some(UNIX_EPOCH + Duration::from_micros(micros)))
        })
    }

    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> BoxFuture<'a, Result<bool, OperateError>> {
        Box::pin(async move {
            SqlStrategy::revoke(self, pool, slot)
                .await
                .map_err(from_sql)
        })
    }

    fn pools(&self) -> BoxFuture<'_, Result<Vec<String>, OperateError>> {
        Box::pin(async move {
            self.pool_names().await.map_err(|e| {
                store_error(format!(
                    "cannot list the pools in table {} ({}): {e}; is this the lease table?",
                    self.table().as_str(),
                    self.server_version()
                ))
            })
        })
    }

    fn pool_size<'a>(&'a self, pool: &'a str) -> BoxFuture<'a, Result<Option<u32>, OperateError>> {
        Box::pin(async move {
            let rows = self.slot_rows(pool).await.map_err(|e| {
                store_error(format!(
                    "cannot count the slots of pool {pool} in table {} ({}): {e}; is this the \
                     lease table?",
                    self.table().as_str(),
                    self.server_version()
                ))
            })?;
            Ok(u32::try_from(rows).ok().filter(|n| *n > 0))
        })
    }

    /// The lease connections and the caller's pool, closed at once
    /// ([`SqlStrategy::close`]).
    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(SqlStrategy::close(self))
    }

    fn prepare<'a>(
        &'a self,
        pool: Option<&'a PoolSpec>,
    ) -> BoxFuture<'a, Result<Option<Duration>, OperateError>> {
        // The wipe guard's wait is read by `guards` (a row of its own); the
        // claim statement answers it as `StoreRestarted` with the time left.
        Box::pin(async move {
            match pool {
                Some(pool) => self.ensure_pool(pool).await.map_err(from_sql),
                None => self.ensure_table().await.map_err(from_sql),
            }
            .map(|()| None)
        })
    }

    fn prepare_new_pool<'a>(
        &'a self,
        pool: &'a PoolSpec,
    ) -> BoxFuture<'a, Result<(), OperateError>> {
        Box::pin(async move { self.ensure_new_pool(pool).await.map_err(from_sql) })
    }

    /// The restart guard (the server's start, where the guard is on), the
    /// promotion guard (the table's `~incarnation` record) and, with a
    /// pool, its wipe guard (its record row), each judged with the pool's
    /// longest recorded span on the server's clock.
    fn guards<'a>(
        &'a self,
        pool: Option<&'a PoolSpec>,
    ) -> BoxFuture<'a, Result<Vec<Guard>, OperateError>> {
        Box::pin(async move { self.read_guards(pool).await.map_err(from_sql) })
    }

    fn checks(&self) -> BoxFuture<'_, Vec<Check>> {
        Box::pin(async move {
            let engine = self.engine();
            let table = self.table().as_str().to_owned();
            let mut checks = vec![
                Check::new(Verdict::Ok, "server", self.server_version()),
                Check::new(
                    Verdict::Ok,
                    "path",
                    format!("SQL lease table {table} ({engine}), one statement per operation"),
                ),
                self.schema_check().await,
                self.durability_verdict(),
            ];
            if engine != Engine::Sqlite {
                checks.push(self.tls_check().await);
                checks.push(self.grants_check().await);
            }
            if engine == Engine::Sqlite {
                checks.push(Check::new(
                    Verdict::NotApplicable,
                    "clock",
                    "SQLite has no server: every holder reads its own host's clock, on the one \
                     machine that has the file",
                ));
            }
            checks
        })
    }
}
