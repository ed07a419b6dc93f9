//! Fenced writes: storage that remembers the biggest fence it has seen per
//! resource and refuses a write carrying a smaller one (DESIGN.md, timing rule 7).

use leasehold_core::{ConfigError, Fence};

use crate::dialect::SqlDatabase;
use crate::error::{FenceError, SqlError};
use crate::ident::TableName;
use crate::strategy::SqlStrategy;

/// The default fence table.
pub const DEFAULT_FENCE_TABLE: &str = "leasehold_fences";

/// A table of resources, each with the biggest fence that has written to it.
///
/// Call [`FenceTable::advance`] **inside the transaction that writes**, before the
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
/// fences.advance(&mut *tx, "billing", fence).await?; // Err(Stale) → drop tx
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
    pub fn new(name: impl Into<String>) -> Result<Self, ConfigError> {
        Ok(Self {
            name: Some(TableName::new(name)?),
        })
    }

    fn name(&self) -> TableName {
        self.name
            .clone()
            .unwrap_or_else(|| TableName::new(DEFAULT_FENCE_TABLE).unwrap_or_default())
    }

    /// `CREATE TABLE IF NOT EXISTS` for this table on database `D`
    /// (`sqlx::Postgres`, `sqlx::MySql`, `sqlx::Sqlite`).
    pub fn create_sql<D: SqlDatabase>(&self) -> String {
        D::create_fence_table(&self.name().quoted(D::QUOTE))
    }

    /// Creates the table in `strategy`'s database if it does not exist.
    pub async fn ensure(&self, strategy: &SqlStrategy) -> Result<(), SqlError> {
        strategy.ensure_fence_table(&self.name()).await
    }

    /// Records `fence` for `resource`, or refuses with [`FenceError::Stale`].
    /// Run it on the writing transaction (`&mut *tx`), before the writes; on
    /// SQLite, `BEGIN IMMEDIATE` is best: it takes the write lock up front.
    pub async fn advance<D, C>(
        &self,
        conn: &mut C,
        resource: &str,
        fence: Fence,
    ) -> Result<(), FenceError>
    where
        D: SqlDatabase + sqlx::Database<Connection = C>,
        C: sqlx::Connection<Database = D>,
    {
        let t = self.name().quoted(D::QUOTE);
        D::advance_fence(conn, &t, resource, fence).await
    }
}
