//! The SQL lease operations, generic over the [`Dialect`]: every one is
//! written once, in the files of this module: `server` (what connect checks
//! of the server), `schema` (the lease and fence tables, their migrations and
//! a pool's rows), `claim` (acquisition), `renew` (renewal and release) and
//! `inspect` (inspect and revoke), and `damaged` (what a claim or renewal
//! says of a row it cannot trust). [`Ops`] is its object-safe face, where
//! the engine is erased (see `SqlStrategy`).

mod claim;
mod damaged;
mod grants;
mod guards;
mod inspect;
mod renew;
mod replication;
mod schema;
mod server;

use std::any::Any;
use std::future::Future;
use std::time::Duration;

use leasehold_core::credentials::{CredentialSource, Credentials, CredentialsError};
use leasehold_core::{
    AcquireError, BoxFuture, Capabilities, Floor, Grant, InspectError, PoolSpec, Release, Renewal,
    SlotInfo, Strategy,
};
use sqlx::{Connection, Execute, Executor};

use self::schema::Schema;
use crate::config::SqlConfig;
use crate::conns::Conns;
use crate::dialect::{CredentialsFailed, Dialect, connect_budget, guarded, with_sqlx_bounds};
use crate::engine::Engine;
use crate::error::SqlError;
use crate::failure::Failure;
use crate::ident::TableName;
use crate::privileges::MissingGrant;
use crate::statements::Statements;

/// What a strategy is, whatever its engine.
#[derive(Debug)]
pub(crate) struct Info {
    pub(crate) engine: Engine,
    pub(crate) networked: bool,
    pub(crate) table: TableName,
    pub(crate) op_timeout: Duration,
    pub(crate) identity: String,
    pub(crate) version: String,
    /// The granularity of the expiry the engine stores.
    pub(crate) resolution: Duration,
    /// The server's durability and replication settings as judged at
    /// connect and at the latest re-read (see `server.rs`), with what
    /// claims and renewals answer for them.
    pub(crate) watched: server::Watched,
    /// What the URL asked of TLS (networked engines).
    pub(crate) tls: Option<crate::tls::Asked>,
}

/// The object-safe face of a [`Leases`], where the engine is erased: its
/// lease calls through core's [`DynStrategy`](leasehold_core::DynStrategy),
/// the one erasure every store's are made through (the facade's `Store`
/// too), and what only SQL does besides.
pub(crate) trait Ops: leasehold_core::DynStrategy {
    fn info(&self) -> &Info;
    fn revoke<'a>(&'a self, pool: &'a PoolSpec, slot: u32)
    -> BoxFuture<'a, Result<bool, SqlError>>;
    fn ensure_table(&self) -> BoxFuture<'_, Result<(), SqlError>>;
    fn check_schema(&self) -> BoxFuture<'_, Result<(), SqlError>>;
    /// The table, `pool`'s record and rows; `declared_new`: the caller says
    /// the pool has no holder (see `Leases::prepare_pool`).
    fn ensure_pool<'a>(
        &'a self,
        pool: &'a PoolSpec,
        declared_new: bool,
    ) -> BoxFuture<'a, Result<(), SqlError>>;
    fn ping(&self) -> BoxFuture<'_, Result<(), SqlError>>;
    fn ensure_fence_table<'a>(&'a self, t: &'a TableName) -> BoxFuture<'a, Result<(), SqlError>>;
    fn close(&self) -> BoxFuture<'_, ()>;
    fn refresh_credentials(&self) -> BoxFuture<'_, Result<(), SqlError>>;
    fn missing_grants(&self) -> BoxFuture<'_, Result<Vec<MissingGrant>, SqlError>>;
    fn tls_version(&self) -> BoxFuture<'_, Result<Option<String>, SqlError>>;
    /// What the guards hold back (with `pool`: its span and its record).
    fn guards<'a>(
        &'a self,
        pool: Option<&'a PoolSpec>,
    ) -> BoxFuture<'a, Result<Vec<leasehold_core::Guard>, SqlError>>;
    /// The caller's `sqlx::Pool<D>`.
    fn pool(&self) -> &(dyn Any + Send + Sync);
}

/// The lease connections (own, see `conns.rs`), how to open more, and a lazy
/// sqlx pool handed to callers for their own writes.
pub(crate) struct Leases<D: Dialect> {
    conns: Conns<D::Connection>,
    opts: D::Opts,
    pool: sqlx::Pool<D>,
    sql: Statements,
    info: Info,
    /// Where the credentials come from when not from the URL: asked for
    /// every new connection.
    credentials: Option<CredentialSource>,
}

with_sqlx_bounds!([impl<D> Leases<D>] {
    /// Opens the database `config` names, keeping the first connection for
    /// the first operation.
    pub(crate) async fn connect(config: &SqlConfig, table: TableName) -> Result<Self, SqlError> {
        let creds = match &config.credentials {
            None => None,
            Some(source) => {
                let store = D::identity(&config.url);
                let budget = connect_budget(config.op_timeout);
                match tokio::time::timeout(budget, source.fetch()).await {
                    Ok(Ok(creds)) => Some(creds),
                    Ok(Err(error)) => return Err(SqlError::Credentials { store, error }),
                    Err(_) => {
                        return Err(SqlError::Unreachable(leasehold_core::Reason::new(format!(
                            "{} of {store} did not answer within {budget:?}",
                            source.describe()
                        ))));
                    }
                }
            }
        };
        let opened = D::open(config, creds.as_ref()).await?;
        let mut backend = Self {
            conns: Conns::new(config.max_connections, Some(opened.conn)),
            opts: opened.opts,
            pool: opened.pool,
            sql: Statements::new::<D>(&table, &opened.version),
            info: Info {
                engine: D::ENGINE,
                networked: D::NETWORKED,
                identity: format!("{}#{table}", D::identity(&config.url)),
                table,
                op_timeout: config.op_timeout,
                version: opened.version,
                resolution: D::RESOLUTION,
                watched: server::Watched::new(server::Policy::of(config), opened.sync_standbys),
                tls: opened.tls,
            },
            credentials: config.credentials.clone(),
        };
        backend.check_server(config).await?;
        Ok(backend)
    }

    /// A new lease connection, with fresh credentials when they come from
    /// a credential source (which the caller's pool then gets too).
    async fn open_connection(&self) -> Result<D::Connection, sqlx::Error> {
        match &self.credentials {
            None => D::connect(&self.opts).await,
            Some(source) => {
                let creds = self.fresh_credentials(source).await.map_err(|error| {
                    sqlx::Error::Configuration(Box::new(CredentialsFailed {
                        store: self.info.identity.clone(),
                        error,
                    }))
                })?;
                D::connect(&D::with_credentials(&self.opts, &creds)).await
            }
        }
    }

    /// Asks `source`, and gives its answer to the caller's pool for the
    /// connections it opens from now on.
    async fn fresh_credentials(
        &self,
        source: &CredentialSource,
    ) -> Result<Credentials, CredentialsError> {
        let creds = source.fetch().await?;
        self.pool
            .set_connect_options(D::pool_with_credentials(&self.pool.connect_options(), &creds));
        Ok(creds)
    }

    /// Gives the caller's pool the credential source's newest answer (see
    /// `SqlStrategy::refresh_credentials`).
    async fn refresh_credentials(&self) -> Result<(), SqlError> {
        let Some(source) = &self.credentials else {
            return Ok(());
        };
        let store = || self.info.identity.clone();
        match tokio::time::timeout(self.info.op_timeout, self.fresh_credentials(source)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => Err(SqlError::Credentials {
                store: store(),
                error,
            }),
            Err(_) => Err(SqlError::Unreachable(leasehold_core::Reason::new(format!(
                "{} of {} did not answer within {:?} (op_timeout)",
                source.describe(),
                store(),
                self.info.op_timeout
            )))),
        }
    }
    /// Runs `q` on a lease connection; the rows it changed.
    async fn execute<'q, E: Execute<'q, D> + 'q>(&self, q: E) -> Result<u64, sqlx::Error> {
        let mut co = self.conns.checkout(|| self.open_connection()).await?;
        let n = D::rows_affected(&co.conn().execute(q).await?);
        co.done();
        Ok(n)
    }

    /// Runs `q` on a lease connection; the rows it answered.
    async fn fetch_all<'q, E: Execute<'q, D> + 'q>(
        &self,
        q: E,
    ) -> Result<Vec<D::Row>, sqlx::Error> {
        let mut co = self.conns.checkout(|| self.open_connection()).await?;
        let rows = co.conn().fetch_all(q).await?;
        co.done();
        Ok(rows)
    }

    /// Runs `q` on a lease connection; the one row it answered.
    async fn fetch_one<'q, E: Execute<'q, D> + 'q>(&self, q: E) -> Result<D::Row, sqlx::Error> {
        let mut co = self.conns.checkout(|| self.open_connection()).await?;
        let row = co.conn().fetch_one(q).await?;
        co.done();
        Ok(row)
    }

    /// Runs `fut` with the operation timeout; classifies its error.
    async fn timed<T>(
        &self,
        what: &str,
        fut: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, Failure> {
        self.bounded(what, self.info.op_timeout, fut).await
    }

    /// Runs `fut` within `budget`; classifies its error.
    async fn bounded<T>(
        &self,
        what: &str,
        budget: Duration,
        fut: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, Failure> {
        // A commit PostgreSQL acknowledged with a cancelled wait for its
        // synchronous standby is on the primary only: not done.
        let (outcome, unproven) =
            watch(
                self.info.watched.sync_standbys(),
                tokio::time::timeout(budget, fut),
            ).await;
        if let (Some(why), Ok(Ok(_))) = (unproven, &outcome) {
            return Err(Failure::Transient(format!("{what}: {why}")));
        }
        match outcome {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(D::classify(what, &e)),
            Err(_) => Err(Failure::timeout(what, budget)),
        }
    }

    /// The budget of schema changes.
    fn ddl_budget(&self) -> Duration {
        self.info.op_timeout.max(Duration::from_secs(30))
    }
    /// One `SELECT 1` on the sqlx pool, in the simple query protocol (one
    /// round trip), within the budget of a connect: the pool may have to
    /// open a connection first. Its errors are classified as connect's.
    async fn ping(&self) -> Result<(), SqlError> {
        // The pool may open a connection: with the source's latest answer.
        if self.pool.num_idle() == 0 {
            self.refresh_credentials().await?;
        }
        let what = format!("SELECT 1 on {}", self.info.identity);
        let budget = connect_budget(self.info.op_timeout);
        let select = sqlx::raw_sql("SELECT 1").execute(&self.pool);
        guarded::<D, _>(what, budget, select).await.map(drop)
    }

    async fn close(&self) {
        for c in self.conns.drain().await {
            let _ = c.close().await;
        }
        self.pool.close().await;
    }
});

// The lease calls on one engine: what `Ops` erases through
// `DynStrategy`.
with_sqlx_bounds!([impl<D> Strategy for Leases<D>] {
    async fn acquire(&self, pool: &PoolSpec, ceiling: Floor) -> Result<Grant, AcquireError> {
        Leases::acquire(self, pool, ceiling).await
    }

    async fn renew(&self, pool: &PoolSpec, grant: &Grant, ceiling: Floor) -> Renewal {
        Leases::renew(self, pool, grant, ceiling).await
    }

    async fn release(&self, pool: &PoolSpec, grant: &Grant, issued: Floor) -> Release {
        Leases::release(self, pool, grant, issued).await
    }

    async fn inspect(&self, pool: &PoolSpec) -> Result<Vec<SlotInfo>, InspectError> {
        Leases::inspect(self, pool).await
    }

    fn capabilities(&self) -> Capabilities {
        // SQLite stores text times with milliseconds; the servers keep
        // microseconds.
        Capabilities::coordinated(self.info.networked, crate::SqlStrategy::MIN_TTL)
            .with_persisted_floor()
            .with_time_resolution(self.info.resolution)
            .with_inspect()
    }

    fn identity(&self) -> String {
        self.info.identity.clone()
    }
});

with_sqlx_bounds!([impl<D> Ops for Leases<D>] {
    fn info(&self) -> &Info {
        &self.info
    }

    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> BoxFuture<'a, Result<bool, SqlError>> {
        Box::pin(self.revoke(pool, slot))
    }

    fn ensure_table(&self) -> BoxFuture<'_, Result<(), SqlError>> {
        Box::pin(self.ensure_table())
    }

    fn check_schema(&self) -> BoxFuture<'_, Result<(), SqlError>> {
        Box::pin(async move {
            match self.schema_problem().await {
                Ok(None) => Ok(()),
                Ok(Some(Schema::Broken(e) | Schema::Floorless(e))) => Err(e),
                Err(f) => Err(self.to_sql_error(f).await),
            }
        })
    }

    fn ensure_pool<'a>(
        &'a self,
        pool: &'a PoolSpec,
        declared_new: bool,
    ) -> BoxFuture<'a, Result<(), SqlError>> {
        Box::pin(self.prepare_pool(pool, declared_new))
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), SqlError>> {
        Box::pin(self.ping())
    }

    fn ensure_fence_table<'a>(&'a self, t: &'a TableName) -> BoxFuture<'a, Result<(), SqlError>> {
        Box::pin(self.ensure_fence_table(t))
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.close())
    }

    fn refresh_credentials(&self) -> BoxFuture<'_, Result<(), SqlError>> {
        Box::pin(self.refresh_credentials())
    }

    fn missing_grants(&self) -> BoxFuture<'_, Result<Vec<MissingGrant>, SqlError>> {
        Box::pin(async move {
            match self.missing_grants().await {
                Ok(m) => Ok(m),
                Err(f) => Err(self.to_sql_error(f).await),
            }
        })
    }

    fn tls_version(&self) -> BoxFuture<'_, Result<Option<String>, SqlError>> {
        Box::pin(self.tls_version())
    }

    fn guards<'a>(
        &'a self,
        pool: Option<&'a PoolSpec>,
    ) -> BoxFuture<'a, Result<Vec<leasehold_core::Guard>, SqlError>> {
        Box::pin(self.guards(pool))
    }

    fn pool(&self) -> &(dyn Any + Send + Sync) {
        &self.pool
    }
});

#[cfg(feature = "postgres")]
use crate::notice::watch;

/// Without PostgreSQL there is no synchronous standby to wait for.
#[cfg(not(feature = "postgres"))]
async fn watch<F: Future>(_sync_standbys: bool, fut: F) -> (F::Output, Option<String>) {
    (fut.await, None)
}
