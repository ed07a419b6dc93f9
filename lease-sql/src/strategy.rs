//! `SqlStrategy`: the engine is chosen from the URL and erased here, once
//! (its lease calls through core's `DynStrategy`, as every store's are);
//! everything else delegates to the engine-generic `Leases`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{
    AcquireError, Capabilities, ConfigError, Floor, Grant, InspectError, PoolSpec, Release,
    Renewal, SlotInfo, Strategy,
};

use crate::config::{DEFAULT_OP_TIMEOUT, SqlConfig};
use crate::dialect::SqlDatabase;
use crate::engine::Engine;
use crate::error::SqlError;
use crate::ident::TableName;
use crate::leases::{Leases, Ops};

/// Leases in a PostgreSQL, MySQL/MariaDB or SQLite table (see the crate docs).
///
/// Cloning shares the connections.
#[derive(Clone)]
pub struct SqlStrategy {
    ops: Arc<dyn Ops>,
}

impl SqlStrategy {
    /// The smallest TTL the SQL stores accept (SQLite keeps milliseconds).
    pub const MIN_TTL: Duration = Duration::from_millis(100);

    /// The per-operation timeout unless [`SqlConfig::op_timeout`] sets another.
    pub const DEFAULT_OP_TIMEOUT: Duration = DEFAULT_OP_TIMEOUT;

    /// Connects with `config`: opens one connection, checks the server, and
    /// keeps it for the first operation.
    ///
    /// Errors: [`SqlError::Unreachable`] when the database does not answer
    /// (retryable); [`SqlError::Config`] for a bad URL or table name, an
    /// engine this build leaves out, a TLS mode that does not verify the
    /// server or a TLS file that is missing or not PEM of its kind,
    /// [`SqlError::Refused`] for bad credentials (or a login the server
    /// refuses without TLS or a client certificate), [`SqlError::Tls`] for
    /// a TLS handshake that failed or a server without TLS,
    /// [`SqlError::UnsupportedServer`] for a server without
    /// `SKIP LOCKED`/`RETURNING` (final); [`SqlError::Credentials`] when
    /// the password file or the credentials callback
    /// ([`SqlConfig::password_file`], [`SqlConfig::credentials`]) does not
    /// answer (retryable).
    pub async fn connect(config: SqlConfig) -> Result<Self, SqlError> {
        let table = TableName::new(config.table.clone())?;
        config.check_credentials()?;
        // A mistyped scheme is not a file path: without this it would be
        // taken for SQLite, whose error would mislead.
        if let Some((scheme, _)) = config.url.split_once("://")
            && !SqlConfig::SCHEMES.contains(&scheme.to_ascii_lowercase().as_str())
        {
            return Err(leasehold_core::url::unknown_scheme(
                scheme,
                SqlConfig::SCHEMES,
                "postgres://USER@HOST/DB, mysql://… or sqlite://PATH",
            )
            .into());
        }
        let ops: Arc<dyn Ops> = match Engine::from_url(&config.url) {
            #[cfg(feature = "postgres")]
            Engine::Postgres => Arc::new(Leases::<sqlx::Postgres>::connect(&config, table).await?),
            #[cfg(feature = "mysql")]
            Engine::MySql => Arc::new(Leases::<sqlx::MySql>::connect(&config, table).await?),
            #[cfg(feature = "sqlite")]
            Engine::Sqlite => Arc::new(Leases::<sqlx::Sqlite>::connect(&config, table).await?),
            #[allow(unreachable_patterns)]
            missing => {
                return Err(SqlError::Config(ConfigError::new(
                    "url",
                    format!("a {missing} URL"),
                    format!(
                        "an engine this build has, or enable leasehold-sql's `{missing}` feature"
                    ),
                )));
            }
        };
        Ok(Self { ops })
    }

    /// The engine.
    pub fn engine(&self) -> Engine {
        self.ops.info().engine
    }

    /// The lease table.
    pub fn table(&self) -> &TableName {
        &self.ops.info().table
    }

    /// The server, as it reports itself: `PostgreSQL 15.14`, `MariaDB 10.11.…`, `SQLite 3.46.0`.
    pub fn server_version(&self) -> &str {
        &self.ops.info().version
    }

    /// Whether the server keeps acknowledged writes across a crash, as read at
    /// connect and at the latest re-read (see [`SqlConfig::durability`]
    /// and the crate README, "Settings watched"). SQLite is durable for
    /// every holder it can have: all run on the machine that has the file.
    pub fn durability(&self) -> leasehold_core::Durability {
        self.ops.info().watched.get().durability
    }

    /// The server's replication as read at connect and at the latest
    /// re-read: what it is (a primary, with how many replicas), whether it
    /// can split brain and the setting that closes it (see
    /// [`SqlConfig::refuse_split_brain`]).
    pub fn replication(&self) -> leasehold_core::Replication {
        self.ops.info().watched.get().replication
    }

    /// What `connect` refuses this server for under its configuration (the
    /// text of the [`SqlError`] it answers): kept because
    /// [`SqlConfig::refuse_at_connect`] was `false`, or found by a re-read
    /// of the server's settings since. `None`: the server is accepted.
    /// Every claim answers it as a final `AcquireError::Misconfigured`.
    pub fn refusal(&self) -> Option<String> {
        self.ops.info().watched.refusal()
    }

    /// The opt-in (as its URL option) that accepted a server that can
    /// forget acknowledged writes.
    pub(crate) fn opt_in(&self) -> Option<&'static str> {
        self.ops.info().watched.get().opt_in
    }

    /// The per-operation timeout.
    pub fn op_timeout(&self) -> Duration {
        self.ops.info().op_timeout
    }

    /// A sqlx pool on the same database when it is a `D` database
    /// (`sqlx::Postgres`, `sqlx::MySql`, `sqlx::Sqlite`), for your own
    /// (fenced) writes. It connects lazily, with the URL's settings (none of
    /// the lease connections' statement timeouts); the lease operations do not
    /// use it. Query it with the sqlx this crate re-exports
    /// ([`crate::sqlx`]), whose types are the pool's.
    ///
    /// With a credential source ([`SqlConfig::password_file`],
    /// [`SqlConfig::credentials`]) the pool opens its connections with the
    /// source's latest answer: it gets a new one whenever a lease
    /// connection is opened, at [`SqlStrategy::ping`], and at
    /// [`SqlStrategy::refresh_credentials`]. sqlx 0.8 has no hook that runs
    /// before the pool opens a connection, so with tokens that expire, call
    /// `refresh_credentials` before work that may need a new connection.
    pub fn pool<D: SqlDatabase>(&self) -> Option<&sqlx::Pool<D>> {
        self.ops.pool().downcast_ref()
    }

    /// The PostgreSQL pool (see [`SqlStrategy::pool`]).
    #[cfg(feature = "postgres")]
    pub fn postgres(&self) -> Option<&sqlx::PgPool> {
        self.pool()
    }

    /// The MySQL/MariaDB pool (see [`SqlStrategy::pool`]).
    #[cfg(feature = "mysql")]
    pub fn mysql(&self) -> Option<&sqlx::MySqlPool> {
        self.pool()
    }

    /// The SQLite pool (see [`SqlStrategy::pool`]).
    #[cfg(feature = "sqlite")]
    pub fn sqlite(&self) -> Option<&sqlx::SqlitePool> {
        self.pool()
    }

    /// One `SELECT 1` on the sqlx pool ([`SqlStrategy::pool`]), in the
    /// simple query protocol: one round trip to the server, for health
    /// checks and for measuring the store's round trip.
    ///
    /// Errors as [`SqlStrategy::connect`]'s (the pool may open a connection
    /// first): [`SqlError::Unreachable`] when the database does not answer
    /// within the budget of a connect (retryable), [`SqlError::Refused`]
    /// when it answers with an error no retry fixes.
    pub async fn ping(&self) -> Result<(), SqlError> {
        self.ops.ping().await
    }

    /// Asks the credential source ([`SqlConfig::password_file`],
    /// [`SqlConfig::credentials`]) again and gives its answer to the pool
    /// of [`SqlStrategy::pool`] for the connections it opens from now on
    /// (the lease connections ask for themselves). Nothing to do without a
    /// source.
    ///
    /// Errors (retryable): [`SqlError::Credentials`] when the source fails,
    /// [`SqlError::Unreachable`] when it does not answer within the
    /// operation timeout.
    pub async fn refresh_credentials(&self) -> Result<(), SqlError> {
        self.ops.refresh_credentials().await
    }

    /// Closes the idle lease connections and the sqlx pool (every clone's).
    pub async fn close(&self) {
        self.ops.close().await;
    }

    /// Creates the lease table if it does not exist (idempotent, safe to run
    /// from many nodes at once). The DDL is the one shipped in
    /// `migrations/<engine>/` for the default table name.
    ///
    /// Errors: [`SqlError::Unreachable`] or [`SqlError::Contention`]
    /// (retryable), [`SqlError::MissingSchema`] when the table is there but
    /// is not a lease table, [`SqlError::Refused`] when the user may not
    /// create or alter it.
    pub async fn ensure_table(&self) -> Result<(), SqlError> {
        self.ops.ensure_table().await
    }

    /// Checks the lease table without changing it: `Ok` when it is there with
    /// every column of this version, otherwise [`SqlError::MissingSchema`]
    /// with the words acquisition would answer in
    /// `AcquireError::MissingSchema` (what is missing, and the call or
    /// migration that fixes it), or the error that kept the table from
    /// being read.
    pub async fn check_schema(&self) -> Result<(), SqlError> {
        self.ops.check_schema().await
    }

    /// Creates the lease table if needed, the pool's record and the rows of
    /// slots `0..pool.size()` (idempotent: existing rows, their fences and
    /// holders are kept). Run it at deployment or startup; acquisition also
    /// adds missing rows by itself when it finds a pool short of them, but
    /// never creates the table.
    ///
    /// The record is what tells a claim that the pool's rows were not
    /// deleted while holders ran (a truncated or emptied table): a pool
    /// without one is held back for a span (its TTL plus twice its
    /// `max_clock_skew`) from when it was first seen without it. This call
    /// records a pool as new, with nothing to wait for, only when it found
    /// the table missing; on a table that was there it records a missing
    /// record as first seen now, which a new pool and a wiped one share
    /// (see [`SqlStrategy::ensure_new_pool`]).
    /// Errors as [`SqlStrategy::ensure_table`]'s.
    pub async fn ensure_pool(&self, pool: &PoolSpec) -> Result<(), SqlError> {
        self.ops.ensure_pool(pool, false).await
    }

    /// [`SqlStrategy::ensure_pool`], and the pool recorded as **new**: its
    /// claims wait for nothing, also where a claim has found its rows gone
    /// and is waiting out a span. Use it only with every holder of the pool
    /// stopped (a pool just added, or a wiped table after every process of
    /// the pool has ended): a holder still generating could be handed its
    /// slot's IDs twice.
    /// Errors as [`SqlStrategy::ensure_table`]'s.
    pub async fn ensure_new_pool(&self, pool: &PoolSpec) -> Result<(), SqlError> {
        self.ops.ensure_pool(pool, true).await
    }

    /// Revokes the lease on `slot` of `pool` behind its holder's back, as an
    /// operator would, without ever granting the slot twice: a tombstone
    /// replaces the holder's token and keeps the lease's expiry, so nobody can
    /// claim the slot while the revoked holder may still be generating (until
    /// its next renewal, which is `Lost`, or its local deadline if its
    /// renewals are failing). The slot is claimed again, with a bigger fence
    /// and the floor the holder last reported, once that expiry passes.
    /// Returns whether a live lease was revoked (`false` for a free or
    /// expired slot).
    pub async fn revoke(&self, pool: &PoolSpec, slot: u32) -> Result<bool, SqlError> {
        self.ops.revoke(pool, slot).await
    }

    /// The privileges the lease operations need that this connection's
    /// user lacks, each with the `GRANT … TO …` an admin runs to give it
    /// (the crate README, "Least privilege"); empty when it has them all,
    /// and for SQLite. Each privilege is tried with a statement of its kind
    /// that touches no row, so whatever granted it (the table, the
    /// database, a role, `PUBLIC`) counts.
    ///
    /// Errors: [`SqlError::Unreachable`] (retryable) or the error that kept
    /// a privilege from being tried.
    pub async fn missing_grants(&self) -> Result<Vec<crate::MissingGrant>, SqlError> {
        self.ops.missing_grants().await
    }

    /// What the guards hold back, read without writing (see
    /// `Operate::guards`).
    pub(crate) async fn read_guards(
        &self,
        pool: Option<&PoolSpec>,
    ) -> Result<Vec<leasehold_core::Guard>, SqlError> {
        self.ops.guards(pool).await
    }

    /// The TLS version of the lease connections, `None` for plain text.
    pub(crate) async fn tls_version(&self) -> Result<Option<String>, SqlError> {
        self.ops.tls_version().await
    }

    /// What the URL asked of TLS (networked engines).
    pub(crate) fn tls_asked(&self) -> Option<&crate::tls::Asked> {
        self.ops.info().tls.as_ref()
    }

    pub(crate) fn ensure_fence_table<'a>(
        &'a self,
        t: &'a TableName,
    ) -> impl Future<Output = Result<(), SqlError>> + Send + 'a {
        self.ops.ensure_fence_table(t)
    }
}

impl fmt::Debug for SqlStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let info = self.ops.info();
        f.debug_struct("SqlStrategy")
            .field("store", &info.identity)
            .field("server", &info.version)
            .field(
                "durability",
                &format_args!("{}", info.watched.get().durability),
            )
            .finish_non_exhaustive()
    }
}

impl Strategy for SqlStrategy {
    async fn acquire(&self, pool: &PoolSpec, ceiling: Floor) -> Result<Grant, AcquireError> {
        self.ops.acquire_dyn(pool, ceiling).await
    }

    async fn renew(&self, pool: &PoolSpec, grant: &Grant, ceiling: Floor) -> Renewal {
        self.ops.renew_dyn(pool, grant, ceiling).await
    }

    async fn release(&self, pool: &PoolSpec, grant: &Grant, issued: Floor) -> Release {
        self.ops.release_dyn(pool, grant, issued).await
    }

    async fn inspect(&self, pool: &PoolSpec) -> Result<Vec<SlotInfo>, InspectError> {
        self.ops.inspect_dyn(pool).await
    }

    fn capabilities(&self) -> Capabilities {
        self.ops.capabilities_dyn()
    }

    fn identity(&self) -> String {
        self.ops.identity_dyn()
    }
}
