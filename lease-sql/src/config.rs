//! Connection settings.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use leasehold_core::credentials::{CallbackError, CredentialSource, Credentials};

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
/// `Debug` never shows credentials: the URL is printed as
/// [`leasehold_core::url::redacted`] shows it (the password and secret
/// options as `***`), and a credential source by its kind and file only.
///
/// ```
/// use leasehold_sql::SqlConfig;
/// let config = SqlConfig::new("postgres://app:hunter2@db.internal/app?sslmode=verify-full");
/// let shown = format!("{config:?}");
/// assert!(shown.contains("postgres://app:***@db.internal/app?sslmode=verify-full"));
/// assert!(!shown.contains("hunter2"));
/// ```
///
/// To keep the password out of the URL, see [`SqlConfig::password_file`]
/// and [`SqlConfig::credentials`].
#[derive(Clone)]
pub struct SqlConfig {
    pub(crate) url: String,
    pub(crate) table: String,
    pub(crate) op_timeout: Duration,
    pub(crate) max_connections: u32,
    pub(crate) require_durable: bool,
    pub(crate) restart_guard: bool,
    pub(crate) assume_one_timing: bool,
    pub(crate) refuse_at_connect: bool,
    pub(crate) refuse_split_brain: bool,
    pub(crate) keep_server_synchronous_commit: bool,
    pub(crate) credentials: Option<CredentialSource>,
}

impl std::fmt::Debug for SqlConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlConfig")
            .field("url", &leasehold_core::url::redacted(&self.url))
            .field("table", &self.table)
            .field("op_timeout", &self.op_timeout)
            .field("max_connections", &self.max_connections)
            .field("require_durable", &self.require_durable)
            .field("restart_guard", &self.restart_guard)
            .field("assume_one_timing_per_pool", &self.assume_one_timing)
            .field("refuse_at_connect", &self.refuse_at_connect)
            .field("refuse_split_brain", &self.refuse_split_brain)
            .field(
                "unsafe_keep_server_synchronous_commit",
                &self.keep_server_synchronous_commit,
            )
            .field("credentials", &self.credentials)
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
            assume_one_timing: false,
            refuse_at_connect: true,
            refuse_split_brain: false,
            keep_server_synchronous_commit: false,
            credentials: None,
        }
    }

    /// Reads the password from the file at `path` (PostgreSQL and
    /// MySQL/MariaDB) **for every new connection**, instead of from the URL:
    /// a Kubernetes Secret mounted as a file, rotated in place, takes effect
    /// at the next connection, without a restart (connections already open
    /// stay open). The file holds the password alone; one trailing line
    /// break is not part of it. The URL option `password_file=PATH` says the
    /// same. A URL that carries a password too is refused at connect.
    ///
    /// ```
    /// use leasehold_sql::SqlConfig;
    /// let config = SqlConfig::new("postgres://app@db.internal/app")
    ///     .password_file("/run/secrets/leasehold/password");
    /// assert!(format!("{config:?}").contains("PasswordFile(\"/run/secrets/leasehold/password\")"));
    /// ```
    pub fn password_file(self, path: impl Into<PathBuf>) -> Self {
        self.credential_source(CredentialSource::password_file(path))
    }

    /// Asks `callback` for the user and password **for every new
    /// connection** (PostgreSQL and MySQL/MariaDB): short-lived tokens such
    /// as RDS IAM authentication tokens (valid 15 minutes) are made when a
    /// connection needs one. A user the callback leaves out is the URL's.
    /// An error it returns fails that connection: at connect,
    /// [`SqlError::Credentials`](crate::SqlError::Credentials) (retryable);
    /// later, the operation that needed the connection answers `Retry`
    /// (renewals) or a retryable error, and the next attempt asks again. A
    /// URL that carries a password too is refused at connect.
    ///
    /// ```no_run
    /// use leasehold_sql::{SqlConfig, SqlStrategy};
    /// use leasehold_core::credentials::Credentials;
    /// # async fn rds_iam_token() -> Result<String, std::io::Error> { Ok(String::new()) }
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = SqlConfig::new("postgres://app@db.internal/app?sslmode=verify-full")
    ///     .credentials(|| async { Ok::<_, std::io::Error>(Credentials::new("app", rds_iam_token().await?)) });
    /// let strategy = SqlStrategy::connect(config).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// The caller's pool ([`SqlStrategy::pool`](crate::SqlStrategy::pool))
    /// gets the newest credentials whenever a lease connection is opened
    /// and at [`SqlStrategy::refresh_credentials`](crate::SqlStrategy::refresh_credentials).
    pub fn credentials<F, Fut, E>(self, callback: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Credentials, E>> + Send + 'static,
        E: Into<CallbackError>,
    {
        self.credential_source(CredentialSource::callback(callback))
    }

    /// Where the credentials come from ([`SqlConfig::password_file`] and
    /// [`SqlConfig::credentials`] set it): asked for every new connection.
    pub fn credential_source(mut self, source: CredentialSource) -> Self {
        self.credentials = Some(source);
        self
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

    /// What this process accepts of a server that can forget writes it
    /// acknowledged ([`DurabilityPolicy`](leasehold_core::DurabilityPolicy),
    /// default `Durable`; the URL option `durability=…` says the same):
    /// `Durable` refuses such a server at connect with
    /// [`SqlError::Forgetful`](crate::SqlError::Forgetful);
    /// `OneTimingPerPool` accepts it with the restart guard on, on the
    /// promise that every process of each pool uses the same TTL and
    /// `max_clock_skew`; `Throwaway` accepts it with the restart, promotion
    /// and wipe guards off (see [`SqlConfig::restart_guard`] and
    /// [`SqlConfig::assume_one_timing_per_pool`] for what each guard waits
    /// and what each case risks).
    ///
    /// It is one word for what the deprecated [`SqlConfig::require_durable`],
    /// [`SqlConfig::assume_one_timing_per_pool`] and
    /// [`SqlConfig::restart_guard`] say together, and sets all three: a
    /// later call of one of them changes what it sets.
    pub fn durability(mut self, policy: leasehold_core::DurabilityPolicy) -> Self {
        use leasehold_core::DurabilityPolicy::{Durable, OneTimingPerPool, Throwaway};
        (self.restart_guard, self.assume_one_timing) = match policy {
            Durable => (true, false),
            OneTimingPerPool => (true, true),
            Throwaway => (false, false),
        };
        self.require_durable = false;
        self
    }

    /// Refuse to connect to a server that can forget writes it acknowledged
    /// even when [`SqlConfig::assume_one_timing_per_pool`] or
    /// [`SqlConfig::restart_guard`]`(false)` accepts one: `connect` answers
    /// [`SqlError::NotDurable`](crate::SqlError::NotDurable) naming each
    /// setting and its fix. Default false. A server weakened after connect
    /// is found by the next re-read of its settings (a quarter of the
    /// pool's TTL apart): from then on claims answer the same refusal as
    /// `AcquireError::Misconfigured`, while renewals go on (the restart
    /// guard covers the crash that would lose them).
    ///
    /// Which servers can forget: PostgreSQL with `fsync` or
    /// `full_page_writes` off (an OS crash or power loss), MySQL/MariaDB with
    /// `innodb_flush_log_at_trx_commit` other than 1, or `sync_binlog` other
    /// than 1 with the binary log on. PostgreSQL with `synchronous_commit =
    /// off` is not among them: the lease connections set it `on` for
    /// themselves, so leases are durable whatever the server's default (the
    /// caller's own pool, [`SqlStrategy::pool`](crate::SqlStrategy::pool),
    /// keeps the server's setting).
    #[deprecated(
        since = "0.4.0",
        note = "use `.durability(DurabilityPolicy::Durable)` (the default), which refuses a \
                server that can forget"
    )]
    pub fn require_durable(mut self, yes: bool) -> Self {
        self.require_durable = yes;
        self
    }

    /// Accept a server that can forget acknowledged writes (see
    /// [`SqlConfig::require_durable`]), promising that **every process of
    /// each pool uses the same TTL and `max_clock_skew`**. Default false: such
    /// a server is refused at connect with
    /// [`SqlError::Forgetful`](crate::SqlError::Forgetful).
    ///
    /// What it risks: a crash of such a server can lose a claim, or a
    /// renewal, that a holder still relies on. The restart guard then
    /// grants nothing until the server has been up for the pool's longest
    /// TTL plus twice its largest `max_clock_skew` — as recorded in the
    /// table with each claim (`span_ms`), or this process's own if that is
    /// longer — so every holder of the previous run has stopped, and a
    /// successor's clock is past anything it stamped. But the crash can lose
    /// that record too. If a process with a longer TTL or larger skew than
    /// the first claimant after the crash still holds a lease the server
    /// forgot, the two overlap and can mint the same IDs. With one TTL and
    /// skew for the whole pool, as this promises, they cannot.
    #[deprecated(
        since = "0.4.0",
        note = "use `.durability(DurabilityPolicy::OneTimingPerPool)` for `true`, \
                `.durability(DurabilityPolicy::Durable)` for `false`"
    )]
    pub fn assume_one_timing_per_pool(mut self, yes: bool) -> Self {
        self.assume_one_timing = yes;
        self
    }

    /// Whether `connect` refuses a server this configuration does not
    /// accept (default true): one that can forget acknowledged writes
    /// ([`SqlError::Forgetful`](crate::SqlError::Forgetful),
    /// [`SqlError::NotDurable`](crate::SqlError::NotDurable)), or that cannot
    /// tell the restart guard when it started. With `false`, for an
    /// operator's tool that only looks (`leasehold doctor`, `status`,
    /// `revoke`), `connect` makes the same judgement and keeps it instead:
    /// [`SqlStrategy::refusal`](crate::SqlStrategy::refusal) tells it, the
    /// doctor's durability check reports it as a failure, and **every claim
    /// answers it** as a final `AcquireError::Misconfigured`, so such a
    /// strategy never holds a lease the default would have refused.
    pub fn refuse_at_connect(mut self, refuse: bool) -> Self {
        self.refuse_at_connect = refuse;
        self
    }

    /// Refuse a primary that can split brain (default false: `connect`
    /// accepts it, logs a `tracing` warning, and `leasehold doctor`'s
    /// `replication` line warns): `connect` answers
    /// [`SqlError::SplitBrain`](crate::SqlError::SplitBrain) naming the
    /// setting that closes it. The URL option `refuse_split_brain=true`
    /// says the same.
    ///
    /// Which primaries can split brain, as read at connect and at every
    /// re-read of the settings (a quarter of the pool's TTL apart, after
    /// which claims answer the refusal): PostgreSQL with streaming standbys
    /// (`pg_stat_replication`) and an empty `synchronous_standby_names` (or
    /// the lease user's `synchronous_commit` at `local` or `off`), or with
    /// synchronous standbys and `lc_messages` not English (the cancelled
    /// wait's warning is recognised by its English text); MariaDB with replicas
    /// connected (`Slaves_connected`) and no semi-synchronous replication
    /// in force (`rpl_semi_sync_master_enabled`, `Rpl_semi_sync_master_status`).
    /// After a failover such an old primary, cut off from its replicas,
    /// goes on confirming the claims and renewals of the clients a
    /// partition left with it, while the promoted replica grants the same
    /// slots to the others. MySQL 8's replicas are not read (see the crate
    /// README, "Replication").
    ///
    /// A replica (a standby in recovery, a read-only or replicating
    /// MySQL/MariaDB server) is refused whatever this says:
    /// [`SqlError::Replica`](crate::SqlError::Replica); one found so by a
    /// re-read refuses claims and renewals (`Retry`) until it is the
    /// primary again.
    pub fn refuse_split_brain(mut self, yes: bool) -> Self {
        self.refuse_split_brain = yes;
        self
    }

    /// The restart guard (default on; see
    /// [`SqlConfig::assume_one_timing_per_pool`] for what it waits and when
    /// it runs). On every server, claims grant nothing until the
    /// server has been up for the pool's restart span
    /// (PostgreSQL `pg_postmaster_start_time()`, MySQL/MariaDB `Uptime`,
    /// checked inside the claim statement); meanwhile acquisition answers the
    /// retryable `AcquireError::StoreRestarted` with the time left, and
    /// renewals go on. A durable server is guarded too: the settings read at
    /// connect say nothing of those it ran with before its last restart (a
    /// `SET GLOBAL innodb_flush_log_at_trx_commit = 0` is not written to the
    /// option files, so a crash loses claims and the server comes back
    /// durable).
    ///
    /// The same switch turns the **promotion guard** on or off, on every
    /// server, durable ones included: a replica promoted after it missed
    /// claims (or a point-in-time restore) has another history than its
    /// clients saw, and its start time is its own. Each claim records the
    /// server's incarnation (PostgreSQL's timeline, MySQL/MariaDB's
    /// `@@server_id`, and `@@server_uuid` on MySQL 8) in a row of the lease
    /// table (pool `~incarnation`), in the claim's own round trip; after a
    /// change nothing is granted until the pool's restart span has passed
    /// since a claim first saw it (`StoreRestarted` meanwhile).
    ///
    /// `restart_guard(false)` also accepts a server that can forget, with no
    /// guard at all: a restart or a failover that loses a lease hands its
    /// slot to a second holder at once, and both can mint the same IDs. Only
    /// for a throwaway database that is never restarted nor failed over while
    /// leases are held (tests, benchmarks).
    #[deprecated(
        since = "0.4.0",
        note = "use `.durability(DurabilityPolicy::Throwaway)` for `false`, \
                `.durability(DurabilityPolicy::Durable)` for `true`"
    )]
    pub fn restart_guard(mut self, on: bool) -> Self {
        self.restart_guard = on;
        self
    }

    /// **Unsafe: for fault-injection control runs only.** Keeps the server's
    /// `synchronous_commit` on the PostgreSQL lease connections instead of
    /// turning it `on` for them. On a server with `synchronous_commit = off`
    /// a crash of any backend (SIGKILL, segfault, the OOM killer: the
    /// postmaster replays its WAL in place without restarting, so the
    /// restart guard sees nothing) then loses the last claims and renewals,
    /// and a slot whose holder still generates is granted again at once:
    /// **duplicate IDs**. It exists so that a test can show that the
    /// session setting is what prevents them; no deployment wants it. The
    /// server is then judged by its own setting (it can forget), so it is
    /// refused at connect unless the [`SqlConfig::durability`] policy is
    /// `OneTimingPerPool` or `Throwaway`. Other engines ignore it.
    #[doc(hidden)]
    pub fn unsafe_keep_server_synchronous_commit(mut self, yes: bool) -> Self {
        self.keep_server_synchronous_commit = yes;
        self
    }

    /// The URL as given, credentials included: do not log it (`Debug`
    /// prints it without them).
    pub fn url(&self) -> &str {
        &self.url
    }
}
