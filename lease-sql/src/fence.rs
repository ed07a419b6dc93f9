//! Fenced writes: storage that remembers, per resource, the stamp (pool,
//! slot and fence) of its last writer and refuses a write that is older or
//! comes from another pool or slot (DESIGN.md, timing rule 7).

use leasehold_core::{ConfigError, FenceStamp, PoolName};

use crate::dialect::SqlDatabase;
use crate::error::SqlError;
use crate::ident::TableName;
use crate::strategy::SqlStrategy;

/// The default fence table.
pub const DEFAULT_FENCE_TABLE: &str = "leasehold_fences";

/// A table of resources, each with the stamp of its last writer: the fence
/// and the pool and slot whose grant issued it ([`FenceStamp`]).
///
/// Call [`FenceTable::advance`] **inside the transaction that writes**, before the
/// writes, with the writer's stamp (`leadership.stamp()` for a leader,
/// `FenceStamp::of(&pool, &grant)` for a slot's holder). It is accepted when
/// the resource is new, or was last written from the same pool and slot with
/// a fence no bigger (the same holder may write many times with its fence);
/// otherwise it answers [`SqlError::Stale`] (a newer holder of the slot
/// has written) or [`SqlError::OtherWriter`] (another pool or slot wrote
/// last: fences of different slots are not comparable, so its number says
/// nothing), and you roll back. The row lock it takes orders a stale
/// holder's transaction after the new holder's, so once a newer fence has
/// committed, an older one is refused forever.
///
/// **What a fence guards.** A resource against writes older than its newest
/// writer's, among the holders of one slot of one pool. Until a new holder
/// has written, the old holder's writes are still accepted (nobody newer has
/// written). A resource moves to another pool or slot only by
/// [`FenceTable::take_over`], which names the pool and slot it leaves: from
/// then on every write of the old pool and slot is refused, whatever its
/// fence. Rows written before the table had the issuer columns take the
/// issuer of their next fenced write (which must carry a fence no smaller).
///
/// The same idea in a single statement, for a row that carries its own
/// fence columns (the writes to one row are then fenced, not the whole
/// resource):
///
/// ```sql
/// UPDATE invoices SET status = 'sent', fence = $1
///  WHERE id = $2 AND fence_pool = $3 AND fence_slot = $4 AND fence <= $1
/// -- 0 rows: refused, a newer holder (or another slot) has written this row
/// ```
///
/// (`<=`, not `<`: the same holder writes the same row many times with its
/// one fence.)
///
/// ```no_run
/// # async fn demo(strategy: leasehold_sql::SqlStrategy, stamp: leasehold_core::FenceStamp) -> Result<(), Box<dyn std::error::Error>> {
/// use leasehold_sql::FenceTable;
/// let fences = FenceTable::default();
/// fences.ensure(&strategy).await?;
/// let mut tx = strategy.postgres().unwrap().begin().await?;
/// fences.advance(&mut *tx, "billing", &stamp).await?; // Err(Stale | OtherWriter) → drop tx
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

    /// Creates the table in `strategy`'s database if it does not exist, and
    /// adds the issuer columns (`pool`, `slot`) to a table an older version
    /// created (what `migrations/<engine>/0004_leasehold_fence_issuer.sql`
    /// does); its rows keep their fences.
    pub async fn ensure(&self, strategy: &SqlStrategy) -> Result<(), SqlError> {
        strategy.ensure_fence_table(&self.name()).await
    }

    /// Creates the table on a database of the caller's own, through a plain
    /// sqlx pool (`sqlx::PgPool`, `sqlx::MySqlPool`, `sqlx::SqlitePool`), if
    /// it does not exist, and adds the issuer columns to a table an older
    /// version created: the same as [`FenceTable::ensure`], for a database
    /// that holds no leases.
    ///
    /// This is **fencing into another store**: the leader is elected on one
    /// store (Valkey, etcd, another SQL database) and writes here. The
    /// lease checks of `connect` (the durability settings, the lease table)
    /// are not run, and need not be: this database keeps no lease. What it
    /// must keep is the fenced write itself, committed with your rows; make
    /// it as durable as those rows need (on PostgreSQL, with
    /// `synchronous_commit = off`, a crash can lose the last commits and their
    /// fences together: run the transaction with
    /// `SET LOCAL synchronous_commit = on` where that matters).
    ///
    /// ```no_run
    /// # async fn demo(stamp: leasehold_core::FenceStamp) -> Result<(), Box<dyn std::error::Error>> {
    /// use leasehold_sql::{FenceTable, sqlx};
    /// let db = sqlx::PgPool::connect("postgres://app@db/billing").await?;
    /// let fences = FenceTable::default();
    /// fences.ensure_on(&db).await?;
    /// let mut tx = db.begin().await?;
    /// fences.advance(&mut *tx, "billing", &stamp).await?; // Err(Stale | OtherWriter) → drop tx
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn ensure_on<D: SqlDatabase>(&self, pool: &sqlx::Pool<D>) -> Result<(), SqlError> {
        let mut conn = pool.acquire().await?;
        D::ensure_fence_on(&mut *conn, &self.name()).await
    }

    /// Records `stamp` for `resource`, or refuses with [`SqlError::Stale`]
    /// or [`SqlError::OtherWriter`] (see the type's docs). Run it on the
    /// writing transaction (`&mut *tx`), before the writes; on SQLite,
    /// `BEGIN IMMEDIATE` is best: it takes the write lock up front.
    pub async fn advance<D, C>(
        &self,
        conn: &mut C,
        resource: &str,
        stamp: &FenceStamp,
    ) -> Result<(), SqlError>
    where
        D: SqlDatabase + sqlx::Database<Connection = C>,
        C: sqlx::Connection<Database = D>,
    {
        let t = self.name().quoted(D::QUOTE);
        D::advance_fence(conn, &t, resource, stamp).await
    }

    /// Moves `resource` to the pool and slot of `stamp`, from the pool and
    /// slot `from` (`(pool, slot)`) that wrote it last: from then on, writes
    /// from `from` are refused whatever their fence, so no stale holder of
    /// the old pool or slot can write again. Accepted when `from` wrote
    /// last, when nobody did (a new resource, or a row from before the
    /// issuer columns), or as [`FenceTable::advance`] when `stamp`'s own pool
    /// and slot did; refused with [`SqlError::OtherWriter`] when a third
    /// pool or slot did.
    ///
    /// Run it once, as a deliberate step (a deploy, a migration of the
    /// resource to a new leader pool), inside the transaction of the new
    /// owner's first write; never on every write, because whoever calls it
    /// wins the resource from `from`.
    pub async fn take_over<D, C>(
        &self,
        conn: &mut C,
        resource: &str,
        from: (&PoolName, u32),
        stamp: &FenceStamp,
    ) -> Result<(), SqlError>
    where
        D: SqlDatabase + sqlx::Database<Connection = C>,
        C: sqlx::Connection<Database = D>,
    {
        let t = self.name().quoted(D::QUOTE);
        D::take_over_fence(conn, &t, resource, from, stamp).await
    }
}
