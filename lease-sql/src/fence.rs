//! Fenced writes: storage that remembers the biggest fence it has seen per
//! resource and refuses a write carrying a smaller one (DESIGN.md, timing rule 7).

use leasehold_core::{AcquireError, Fence};
use sqlx::{MySqlConnection, PgConnection, SqliteConnection};

use crate::engine::Engine;
use crate::ident::TableName;
use crate::strategy::{SqlStrategy, StoreError};

/// The default fence table.
pub const DEFAULT_FENCE_TABLE: &str = "leasehold_fences";

/// A write was refused, or the database failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// A holder with a bigger fence has written to `resource`: this holder's
    /// lease is stale. Roll the transaction back and stop acting as holder.
    #[error(
        "fenced write to {resource:?} refused: it carries fence {fence}, but fence {seen} has \
         already written there (this holder's lease was taken over)"
    )]
    Stale {
        /// The resource written to.
        resource: String,
        /// The fence this write carried.
        fence: Fence,
        /// The biggest fence seen so far.
        seen: Fence,
    },
    /// The database answered with an error.
    #[error("database error during a fenced write: {0}")]
    Database(#[from] sqlx::Error),
}

/// A table of resources, each with the biggest fence that has written to it.
///
/// Call `advance_*` **inside the transaction that writes**, before the
/// writes: it records `fence` for `resource` if no bigger one has been seen
/// (the same holder may write many times with its fence), and otherwise
/// answers [`FenceError::Stale`], and you roll back. The row lock it takes
/// orders a stale holder's transaction after the new holder's, so once a
/// bigger fence has committed, a smaller one is refused forever.
///
/// The same idea in a single statement, for a row that carries its own fence
/// column (the writes to one row are then fenced, not the whole resource):
///
/// ```sql
/// UPDATE invoices SET status = 'sent', fence = $1 WHERE id = $2 AND fence <= $1
/// -- 0 rows: refused, a bigger fence has written this row
/// ```
///
/// (`<=`, not `<`: the same holder writes the same row many times with its
/// one fence.) Fences are per slot: compare fences of one slot (a leader pool
/// of one slot, or one resource per slot), never fences of different slots.
///
/// ```no_run
/// # async fn demo(strategy: leasehold_sql::SqlStrategy, fence: leasehold_core::Fence) -> Result<(), Box<dyn std::error::Error>> {
/// use leasehold_sql::FenceTable;
/// let fences = FenceTable::default();
/// fences.ensure(&strategy).await?;
/// let mut tx = strategy.postgres().unwrap().begin().await?;
/// fences.advance_postgres(&mut tx, "billing", fence).await?; // Err(Stale) → drop tx
/// sqlx::query("INSERT INTO invoices (key, amount) VALUES ($1, $2)")
///     .bind("2025-01-01T10:customer-7").bind(42_i64).execute(&mut *tx).await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct FenceTable {
    name: Option<TableName>,
}

impl FenceTable {
    /// A fence table named `name` (validated like the lease table).
    pub fn new(name: impl Into<String>) -> Result<Self, AcquireError> {
        Ok(Self {
            name: Some(TableName::new(name)?),
        })
    }

    fn quoted(&self, engine: Engine) -> String {
        match &self.name {
            Some(n) => n.quoted(engine),
            None => TableName::new(DEFAULT_FENCE_TABLE)
                .map(|n| n.quoted(engine))
                .unwrap_or_default(),
        }
    }

    /// `CREATE TABLE IF NOT EXISTS` for this table on `engine`.
    pub fn create_sql(&self, engine: Engine) -> String {
        let t = self.quoted(engine);
        match engine {
            Engine::Postgres => format!(
                "CREATE TABLE IF NOT EXISTS {t} (resource VARCHAR(255) PRIMARY KEY, \
                 fence BIGINT NOT NULL, updated_at TIMESTAMPTZ(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))"
            ),
            Engine::MySql => format!(
                "CREATE TABLE IF NOT EXISTS {t} (resource VARCHAR(255) CHARACTER SET utf8mb4 \
                 COLLATE utf8mb4_bin PRIMARY KEY, fence BIGINT UNSIGNED NOT NULL, \
                 updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE = InnoDB"
            ),
            Engine::Sqlite => format!(
                "CREATE TABLE IF NOT EXISTS {t} (resource TEXT PRIMARY KEY, \
                 fence INTEGER NOT NULL, updated_at TEXT NOT NULL DEFAULT \
                 (strftime('%Y-%m-%d %H:%M:%f','now')))"
            ),
        }
    }

    /// Creates the table in `strategy`'s database if it does not exist.
    pub async fn ensure(&self, strategy: &SqlStrategy) -> Result<(), StoreError> {
        let sql = self.create_sql(strategy.engine());
        let fut = async {
            if let Some(p) = strategy.postgres() {
                sqlx::raw_sql(&sql).execute(p).await.map(drop)
            } else if let Some(p) = strategy.mysql() {
                sqlx::raw_sql(&sql).execute(p).await.map(drop)
            } else if let Some(p) = strategy.sqlite() {
                sqlx::raw_sql(&sql).execute(p).await.map(drop)
            } else {
                Ok(())
            }
        };
        let budget = strategy
            .op_timeout()
            .max(std::time::Duration::from_secs(30));
        tokio::time::timeout(budget, fut)
            .await
            .map_err(|_| StoreError::Timeout(budget))?
            .map_err(StoreError::from)
    }

    /// PostgreSQL: records `fence` for `resource`, or refuses. Run it inside
    /// the writing transaction.
    pub async fn advance_postgres(
        &self,
        conn: &mut PgConnection,
        resource: &str,
        fence: Fence,
    ) -> Result<(), FenceError> {
        let t = self.quoted(Engine::Postgres);
        let f = to_i64(fence);
        let n = sqlx::query(&format!(
            "INSERT INTO {t} AS cur (resource, fence) VALUES ($1, $2) \
             ON CONFLICT (resource) DO UPDATE SET fence = EXCLUDED.fence, \
             updated_at = CURRENT_TIMESTAMP(6) WHERE cur.fence <= EXCLUDED.fence"
        ))
        .bind(resource)
        .bind(f)
        .execute(&mut *conn)
        .await?
        .rows_affected();
        if n > 0 {
            return Ok(());
        }
        let seen: i64 = sqlx::query_scalar(&format!("SELECT fence FROM {t} WHERE resource = $1"))
            .bind(resource)
            .fetch_one(&mut *conn)
            .await?;
        Err(stale(resource, fence, u64::try_from(seen).unwrap_or(0)))
    }

    /// MySQL/MariaDB: records `fence` for `resource`, or refuses. Run it inside
    /// the writing transaction.
    pub async fn advance_mysql(
        &self,
        conn: &mut MySqlConnection,
        resource: &str,
        fence: Fence,
    ) -> Result<(), FenceError> {
        let t = self.quoted(Engine::MySql);
        sqlx::query(&format!(
            "INSERT IGNORE INTO {t} (resource, fence) VALUES (?, 0)"
        ))
        .bind(resource)
        .execute(&mut *conn)
        .await?;
        // Rows *matched* (sqlx sets CLIENT_FOUND_ROWS): 1 even when the fence is unchanged.
        let n = sqlx::query(&format!(
            "UPDATE {t} SET fence = ?, updated_at = CURRENT_TIMESTAMP(6) \
             WHERE resource = ? AND fence <= ?"
        ))
        .bind(fence.0)
        .bind(resource)
        .bind(fence.0)
        .execute(&mut *conn)
        .await?
        .rows_affected();
        if n > 0 {
            return Ok(());
        }
        let seen: u64 = sqlx::query_scalar(&format!("SELECT fence FROM {t} WHERE resource = ?"))
            .bind(resource)
            .fetch_one(&mut *conn)
            .await?;
        Err(stale(resource, fence, seen))
    }

    /// SQLite: records `fence` for `resource`, or refuses. Run it inside the
    /// writing transaction (`BEGIN IMMEDIATE` is best: it takes the write
    /// lock up front).
    pub async fn advance_sqlite(
        &self,
        conn: &mut SqliteConnection,
        resource: &str,
        fence: Fence,
    ) -> Result<(), FenceError> {
        let t = self.quoted(Engine::Sqlite);
        let f = to_i64(fence);
        let n = sqlx::query(&format!(
            "INSERT INTO {t} (resource, fence) VALUES (?1, ?2) \
             ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence, \
             updated_at = strftime('%Y-%m-%d %H:%M:%f','now') WHERE fence <= excluded.fence"
        ))
        .bind(resource)
        .bind(f)
        .execute(&mut *conn)
        .await?
        .rows_affected();
        if n > 0 {
            return Ok(());
        }
        let seen: i64 = sqlx::query_scalar(&format!("SELECT fence FROM {t} WHERE resource = ?1"))
            .bind(resource)
            .fetch_one(&mut *conn)
            .await?;
        Err(stale(resource, fence, u64::try_from(seen).unwrap_or(0)))
    }
}

fn to_i64(fence: Fence) -> i64 {
    i64::try_from(fence.0).unwrap_or(i64::MAX)
}

fn stale(resource: &str, fence: Fence, seen: u64) -> FenceError {
    FenceError::Stale {
        resource: resource.to_owned(),
        fence,
        seen: Fence(seen),
    }
}
