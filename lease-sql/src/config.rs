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
}

impl std::fmt::Debug for SqlConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlConfig")
            .field("url", &crate::dialect::redact(&self.url))
            .field("table", &self.table)
            .field("op_timeout", &self.op_timeout)
            .field("max_connections", &self.max_connections)
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

    /// The URL as given, credentials included: do not log it (`Debug`
    /// prints it without them).
    pub fn url(&self) -> &str {
        &self.url
    }
}
