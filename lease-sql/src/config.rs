//! Connection settings.

use std::time::Duration;

use crate::ident::DEFAULT_TABLE;

/// The default per-operation timeout (`SqlStrategy::DEFAULT_OP_TIMEOUT`).
pub(crate) const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(5);

/// How a [`SqlStrategy`](crate::SqlStrategy) connects.
///
/// ```
/// use leasehold_sql::SqlConfig;
/// use std::time::Duration;
/// let config = SqlConfig::new("postgres://app@db.internal/app")
///     .table("machine_ids")
///     .op_timeout(Duration::from_secs(2))
///     .max_connections(2);
/// assert_eq!(config.url(), "postgres://app@db.internal/app");
/// ```
///
/// `Debug` never shows credentials: the URL is printed without its user,
/// password and query parameters.
///
/// ```
/// use leasehold_sql::SqlConfig;
/// let config = SqlConfig::new("postgres://app:hunter2@db.internal/app?sslmode=require");
/// let shown = format!("{config:?}");
/// assert!(shown.contains("postgres://db.internal/app") && !shown.contains("hunter2"));
/// ```
#[derive(Clone)]
pub struct SqlConfig {
    pub(crate) url: String,
    pub(crate) table: String,
    pub(crate) op_timeout: Duration,
    pub(crate) max_connections: u32,
    pub(crate) require_durable: bool,
    pub(crate) restart_guard: bool,
}

impl std::fmt::Debug for SqlConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlConfig")
            .field("url", &crate::dialect::redact(&self.url))
            .field("table", &self.table)
            .field("op_timeout", &self.op_timeout)
            .field("max_connections", &self.max_connections)
            .field("require_durable", &self.require_durable)
            .field("restart_guard", &self.restart_guard)
            .finish()
    }
}

impl SqlConfig {
    /// Settings for `url`: `postgres://…`, `mysql://…` (MariaDB too), `sqlite://path`
    /// or a plain file path (SQLite, created if missing).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            table: DEFAULT_TABLE.to_owned(),
            op_timeout: DEFAULT_OP_TIMEOUT,
            max_connections: 2,
            require_durable: false,
            restart_guard: true,
        }
    }

    /// The lease table (default `leasehold_leases`), validated on connect.
    pub fn table(mut self, name: impl Into<String>) -> Self {
        self.table = name.into();
        self
    }

    /// The most any single operation may take (default
    /// [`SqlStrategy::DEFAULT_OP_TIMEOUT`](crate::SqlStrategy::DEFAULT_OP_TIMEOUT), 5 s): the client gives up
    /// after it, the server cancels the statement after it (`statement_timeout`,
    /// `max_statement_time`, SQLite's busy timeout), and waiting for a pooled
    /// connection is bounded by it too. Keep it well below the lease TTL so a
    /// silent database turns into `Retry` long before the local deadline.
    pub fn op_timeout(mut self, timeout: Duration) -> Self {
        self.op_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The size of the connection pool (default 2; at least 1).
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Refuse to connect to a server that can forget writes it acknowledged
    /// (PostgreSQL `fsync`, `synchronous_commit` or `full_page_writes` off;
    /// MySQL/MariaDB `innodb_flush_log_at_trx_commit` other than 1, or
    /// `sync_binlog` other than 1 with the binary log on): `connect` answers
    /// [`SqlError::NotDurable`](crate::SqlError::NotDurable) naming each
    /// setting and its fix. Default false: such a server is accepted, its
    /// risks are in [`SqlStrategy::durability`](crate::SqlStrategy::durability)
    /// (and a `tracing` warning with the `tracing` feature), and the restart
    /// guard keeps a restart from handing out a slot twice.
    pub fn require_durable(mut self, yes: bool) -> Self {
        self.require_durable = yes;
        self
    }

    /// The restart guard (default on). A server that can forget writes it
    /// acknowledged (see [`SqlConfig::require_durable`]) may come back from a
    /// crash without a renewal, or a whole claim, that a holder still relies
    /// on, and would hand that slot out again. With the guard, claims on such
    /// a server grant nothing until the server has been up for the pool's TTL
    /// plus twice the default `max_clock_skew` (2 s: the floor a lost renewal
    /// raised is lost too, so the next holder must start later than anything
    /// the previous run's holders could stamp on a clock within the skew bound)
    /// (PostgreSQL `pg_postmaster_start_time()`, MySQL/MariaDB `Uptime`,
    /// checked inside the claim statement), when every lease of its previous
    /// run has expired; meanwhile acquisition answers the retryable
    /// `AcquireError::StoreRestarted` with the time left, and renewals go on.
    /// A durable server needs no guard and gets none. Turn it off only for a
    /// server that is never restarted while leases are held (a throwaway test
    /// database): every first start of a server waits out one TTL too.
    pub fn restart_guard(mut self, on: bool) -> Self {
        self.restart_guard = on;
        self
    }

    /// The URL as given, credentials included: do not log it (`Debug`
    /// prints it without them).
    pub fn url(&self) -> &str {
        &self.url
    }
}
