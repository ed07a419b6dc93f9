//! A store URL → the backend that reads it, and the connect.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use leasehold_core::credentials::{CallbackError, CredentialSource, Credentials};
use leasehold_core::opening::{OpenStore, StoreWait, WaitError, wait_for_store};
use leasehold_core::{BoxFuture, Memory, StartError};
#[cfg(feature = "etcd")]
use leasehold_etcd::{EtcdConfig, EtcdError, EtcdStrategy};
#[cfg(feature = "k8s")]
use leasehold_k8s::{KubeConfig, KubeError, KubeStrategy};
#[cfg(feature = "_sql")]
use leasehold_sql::{SqlConfig, SqlError, SqlStrategy};
#[cfg(feature = "valkey")]
use leasehold_valkey::{ValkeyConfig, ValkeyError, ValkeyStrategy};

use crate::ConnectError;
use crate::store::{Inner, Store};

/// Every store this crate knows: its schemes, the cargo feature that
/// compiles it in, and its name in messages. A scheme of a store whose
/// feature is off is refused with the feature to turn on.
pub const STORES: &[StoreSchemes] = &[
    StoreSchemes {
        store: "SQL",
        schemes: &["postgres", "postgresql"],
        feature: "postgres",
    },
    StoreSchemes {
        store: "SQL",
        schemes: &["mysql", "mariadb"],
        feature: "mysql",
    },
    StoreSchemes {
        store: "SQL",
        schemes: &["sqlite"],
        feature: "sqlite",
    },
    StoreSchemes {
        store: "Valkey/Redis",
        schemes: &[
            "redis",
            "rediss",
            "valkey",
            "valkeys",
            "redis-sentinel",
            "rediss-sentinel",
            "valkey-sentinel",
            "valkeys-sentinel",
            "redis-cluster",
            "rediss-cluster",
            "valkey-cluster",
            "valkeys-cluster",
        ],
        feature: "valkey",
    },
    StoreSchemes {
        store: "etcd",
        schemes: &["etcd", "etcds"],
        feature: "etcd",
    },
    StoreSchemes {
        store: "Kubernetes",
        schemes: &["k8s", "k8s+http", "k8s+https", "kubernetes"],
        feature: "k8s",
    },
    StoreSchemes {
        store: "in-process",
        schemes: &["memory"],
        feature: "",
    },
];

/// One row of [`STORES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreSchemes {
    /// The store, for messages (`SQL`, `Valkey/Redis`).
    pub store: &'static str,
    /// The URL schemes it reads.
    pub schemes: &'static [&'static str],
    /// The cargo feature of `leasehold` that compiles it in (empty: always).
    pub feature: &'static str,
}

impl StoreSchemes {
    /// Whether this build has the store.
    pub fn compiled(&self) -> bool {
        const ON: [(&str, bool); 7] = [
            ("", true),
            ("postgres", cfg!(feature = "postgres")),
            ("mysql", cfg!(feature = "mysql")),
            ("sqlite", cfg!(feature = "sqlite")),
            ("valkey", cfg!(feature = "valkey")),
            ("etcd", cfg!(feature = "etcd")),
            ("k8s", cfg!(feature = "k8s")),
        ];
        ON.iter()
            .any(|&(feature, on)| on && feature == self.feature)
    }
}

/// Every scheme this build accepts (the stores whose features are on),
/// grouped by store: `postgres, postgresql, mysql, mariadb, sqlite (SQL);
/// redis, … (Valkey/Redis); …`.
pub fn schemes_text() -> String {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for row in STORES.iter().filter(|row| row.compiled()) {
        match groups.iter_mut().find(|(store, _)| *store == row.store) {
            Some((_, schemes)) => schemes.extend(row.schemes),
            None => groups.push((row.store, row.schemes.to_vec())),
        }
    }
    groups
        .iter()
        .map(|(store, schemes)| format!("{} ({store})", schemes.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A store, read from its URL and not yet connected: adjust the backend's
/// own settings, then [`StoreConfig::connect`].
///
/// ```
/// use std::time::Duration;
/// use leasehold::{StoreConfig, StoreKind};
/// let config = StoreConfig::from_url("sqlite://ids.sqlite")?.op_timeout(Duration::from_secs(2));
/// assert!(matches!(config.kind(), StoreKind::Sql(_)));
/// # Ok::<(), leasehold::ConnectError>(())
/// ```
///
/// `Debug` shows no secret: the URL as [`crate::url::redacted`] shows it,
/// the backend's configuration (each redacts its own), and a credential
/// source by its kind and file only.
///
/// ```
/// let config = leasehold::StoreConfig::from_url("sqlite://ids.sqlite?op_timeout=2s")?;
/// assert!(format!("{config:?}").contains("sqlite://ids.sqlite?op_timeout=2s"));
/// # Ok::<(), leasehold::ConnectError>(())
/// ```
///
/// Keep the password out of the URL with [`StoreConfig::password_file`]
/// (or the URL option `password_file=PATH`) and
/// [`StoreConfig::credentials`].
///
/// A process that may start before its store waits for it with
/// [`StoreConfig::wait_for_store`]. A `StoreConfig` can also be handed,
/// unconnected, to [`LeaseManager::start`](crate::LeaseManager::start) and
/// [`Leader::builder`](crate::Leader::builder), which connect it and wait
/// for a store that is not reachable yet (the manager within its acquire
/// timeout, an elector for as long as it campaigns).
#[derive(Clone)]
pub struct StoreConfig {
    url: String,
    kind: StoreKind,
    credentials: Option<CredentialSource>,
    wait: Option<StoreWait>,
}

impl fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreConfig")
            .field("url", &self.shown_url())
            .field("kind", &self.kind)
            .field("credentials", &self.credentials)
            .field("wait", &self.wait)
            .finish()
    }
}

/// Which store a [`StoreConfig`] opens, with that backend's configuration.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum StoreKind {
    /// An in-process [`Memory`] store: `memory://NAME`; every connect of one
    /// name in one process opens the same store.
    Memory(String),
    /// PostgreSQL, MySQL/MariaDB or SQLite.
    #[cfg(feature = "_sql")]
    Sql(SqlConfig),
    /// Valkey or Redis.
    #[cfg(feature = "valkey")]
    Valkey(ValkeyConfig),
    /// etcd v3.
    #[cfg(feature = "etcd")]
    Etcd(EtcdConfig),
    /// Kubernetes Leases.
    #[cfg(feature = "k8s")]
    Kube(KubeConfig),
}

/// `url`'s scheme, lowercased (`sqlite:PATH`, sqlx's form, is `sqlite`).
fn scheme(url: &str) -> Result<String, ConnectError> {
    match url.split_once("://") {
        Some((scheme, _)) if !scheme.is_empty() => Ok(scheme.to_ascii_lowercase()),
        _ if url
            .get(..7)
            .is_some_and(|s| s.eq_ignore_ascii_case("sqlite:")) =>
        {
            Ok("sqlite".to_owned())
        }
        _ => Err(ConnectError::bad_url(
            url,
            format!("it has no scheme; use one of {}", schemes_text()),
        )),
    }
}

impl StoreConfig {
    /// Reads `url` (no network): the backend whose schemes include the URL's
    /// reads the rest, and refuses what it cannot use with the accepted form.
    pub fn from_url(url: &str) -> Result<Self, ConnectError> {
        let url = url.trim();
        let scheme = scheme(url)?;
        let Some(row) = STORES.iter().find(|r| r.schemes.contains(&scheme.as_str())) else {
            if matches!(scheme.as_str(), "http" | "https")
                && let Some(forms) = http_forms(&scheme)
            {
                return Err(ConnectError::bad_url(
                    url,
                    format!("say which store the address is: {forms}"),
                ));
            }
            return Err(ConnectError::bad_url(
                url,
                format!("unknown scheme {scheme:?}; use one of {}", schemes_text()),
            ));
        };
        if !row.compiled() {
            return Err(ConnectError::bad_url(
                url,
                format!(
                    "{scheme}:// is {} {} store, left out of this build; enable the `{}` \
                     feature of the leasehold crate",
                    article(row.store),
                    row.store,
                    row.feature
                ),
            ));
        }
        #[allow(unused_variables)] // with no networked store compiled in
        let bad = |e: &dyn std::fmt::Display| ConnectError::bad_url(url, e);
        let kind = match row.feature {
            "" => StoreKind::Memory(memory_name(url)?),
            #[cfg(feature = "_sql")]
            "postgres" | "mysql" | "sqlite" => {
                StoreKind::Sql(SqlConfig::from_url(url).map_err(|e| match e {
                    SqlError::Config(c) => bad(&c),
                    other => bad(&other),
                })?)
            }
            #[cfg(feature = "valkey")]
            "valkey" => StoreKind::Valkey(ValkeyConfig::from_url(url).map_err(|e| match e {
                ValkeyError::Config(c) => bad(&c),
                other => bad(&other),
            })?),
            #[cfg(feature = "etcd")]
            "etcd" => StoreKind::Etcd(EtcdConfig::from_url(url).map_err(|e| match e {
                EtcdError::Config(c) => bad(&c),
                other => bad(&other),
            })?),
            #[cfg(feature = "k8s")]
            "k8s" => StoreKind::Kube(KubeConfig::from_url(url).map_err(|e| match e {
                KubeError::Config(c) => bad(&c),
                other => bad(&other),
            })?),
            other => unreachable!("feature {other} is compiled in but has no backend arm"),
        };
        Ok(Self {
            url: url.to_owned(),
            kind,
            credentials: None,
            wait: None,
        })
    }

    /// Makes [`StoreConfig::connect`] wait for a store that is not
    /// reachable yet, for up to `deadline` from the first attempt: a
    /// process that starts before its store (a pod scheduled before the
    /// database) then waits instead of failing at once.
    ///
    /// Only "not reachable" is tried again: a refused or dropped
    /// connection, no answer in time, a host name that does not resolve
    /// yet, a server still starting up (PostgreSQL's `57P03`), a password
    /// file or credentials callback that does not answer yet. A refusal
    /// (bad credentials, a bad URL, missing permissions, a server that can
    /// lose leases) is final at once. Each attempt is proven with one
    /// round trip ([`Operate::ping`](crate::Operate::ping)), since some
    /// clients (etcd's gRPC channel) "connect" without reaching anyone.
    /// Attempts are spaced by exponential backoff with jitter (100 ms
    /// doubling up to 5 s; [`StoreConfig::wait_for_store_with`] sets
    /// them), each failed one is logged at warn (feature `tracing` of
    /// `leasehold-core`, the URL redacted) and counted (feature
    /// `metrics`: `leasehold_store_connect_attempts_total`). A deadline
    /// that passes is [`ConnectError::NotReachable`], naming the deadline
    /// and the last cause.
    ///
    /// The same wait applies when this configuration is handed to
    /// [`LeaseManager::start`](crate::LeaseManager::start) or
    /// [`Leader::builder`](crate::Leader::builder), instead of theirs.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), leasehold::ConnectError> {
    /// use std::time::Duration;
    /// let store = leasehold::StoreConfig::from_url("postgres://app@db.internal/app")?
    ///     .wait_for_store(Duration::from_secs(120))
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn wait_for_store(self, deadline: Duration) -> Self {
        self.wait_for_store_with(StoreWait::within(deadline))
    }

    /// [`StoreConfig::wait_for_store`] with a wait of your own: its
    /// deadline (or [`StoreWait::until_reached`], none) and backoff.
    pub fn wait_for_store_with(mut self, wait: StoreWait) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Reads the password from the file at `path` instead of the URL (the
    /// URL option `password_file=PATH` says the same): PostgreSQL,
    /// MySQL/MariaDB and Valkey/Redis read it **again for every new
    /// connection**, so a rotated Kubernetes Secret mounted as a file
    /// takes effect without a restart; etcd reads it at connect (for the
    /// URL's user: `etcd://USER@HOST`). The file holds the password alone;
    /// one trailing line break is not part of it. A URL that carries a
    /// password too is refused at connect, and so is a store that takes
    /// no password (SQLite, Kubernetes, `memory://`).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), leasehold::ConnectError> {
    /// let store = leasehold::StoreConfig::from_url("postgres://app@db.internal/app?sslmode=verify-full")?
    ///     .password_file("/run/secrets/leasehold/password")
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn password_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.credentials = Some(CredentialSource::password_file(path));
        self
    }

    /// Asks `callback` for the user and password **for every new
    /// connection** (PostgreSQL, MySQL/MariaDB, Valkey/Redis), instead of
    /// a password in the URL: short-lived tokens such as RDS or
    /// ElastiCache IAM authentication tokens (valid 15 minutes) are made
    /// when a connection needs one. A user it leaves out is the URL's. If
    /// it fails when the store is opened, [`StoreConfig::connect`] answers
    /// [`ConnectError::Unreachable`] (retryable) naming the store and the
    /// callback; later failures make the operation that needed the
    /// connection retry. Refused at connect with a password in the URL
    /// too, and for the other stores.
    ///
    /// ```no_run
    /// use leasehold::credentials::Credentials;
    /// # async fn rds_iam_token() -> Result<String, std::io::Error> { Ok(String::new()) }
    /// # async fn run() -> Result<(), leasehold::ConnectError> {
    /// let store = leasehold::StoreConfig::from_url("postgres://app@db.internal/app?sslmode=verify-full")?
    ///     .credentials(|| async { Ok::<_, std::io::Error>(Credentials::new("app", rds_iam_token().await?)) })
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn credentials<F, Fut, E>(mut self, callback: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Credentials, E>> + Send + 'static,
        E: Into<CallbackError>,
    {
        self.credentials = Some(CredentialSource::callback(callback));
        self
    }

    /// The configuration with its credential source handed to the
    /// backend, or why the store takes none.
    fn with_credentials(mut self) -> Result<Self, ConnectError> {
        let Some(source) = self.credentials.take() else {
            return Ok(self);
        };
        let refuse = |why: String| ConnectError::bad_url(&self.url, why);
        let none = |store: &str, instead: &str| {
            refuse(format!(
                "{} cannot be used with {store}, which takes no password; {instead}",
                source.describe()
            ))
        };
        let kind = match self.kind {
            StoreKind::Memory(_) => Err(none("an in-process store", "leave it out")),
            #[cfg(feature = "_sql")]
            StoreKind::Sql(c) if c.sqlite_path().is_some() => Err(none(
                "SQLite",
                "protect the database file with file permissions instead",
            )),
            #[cfg(feature = "_sql")]
            StoreKind::Sql(c) => Ok(StoreKind::Sql(c.credential_source(source))),
            #[cfg(feature = "valkey")]
            StoreKind::Valkey(c) => Ok(StoreKind::Valkey(c.credential_source(source))),
            #[cfg(feature = "etcd")]
            StoreKind::Etcd(c) => match source.file() {
                Some(path) => Ok(StoreKind::Etcd(c.password_file(path))),
                None => Err(refuse(
                    "etcd reads its password once, at connect (etcd-client renews its \
                         token with it): give etcd://USER@HOST?password_file=PATH; a \
                         credentials callback is for SQL and Valkey/Redis stores"
                        .to_owned(),
                )),
            },
            #[cfg(feature = "k8s")]
            StoreKind::Kube(_) => Err(none(
                "Kubernetes",
                "its credentials come from the kubeconfig or the pod's service account \
                 (tokens, client certificates, exec plugins, which kube refreshes itself)",
            )),
        };
        self.kind = kind?;
        Ok(self)
    }

    /// The store and its backend's configuration.
    pub fn kind(&self) -> &StoreKind {
        &self.kind
    }

    /// The URL as messages show it ([`crate::url::redacted`]: the password
    /// and secret options as `***`).
    pub fn shown_url(&self) -> String {
        leasehold_core::url::redacted(&self.url)
    }

    /// The bound on each store operation, whatever the store.
    pub fn op_timeout(self, timeout: Duration) -> Self {
        let _ = timeout; // unused with no networked store compiled in
        self.map(|kind| match kind {
            StoreKind::Memory(name) => StoreKind::Memory(name),
            #[cfg(feature = "_sql")]
            StoreKind::Sql(c) => StoreKind::Sql(c.op_timeout(timeout)),
            #[cfg(feature = "valkey")]
            StoreKind::Valkey(c) => StoreKind::Valkey(c.op_timeout(timeout)),
            #[cfg(feature = "etcd")]
            StoreKind::Etcd(c) => StoreKind::Etcd(c.op_timeout(timeout)),
            #[cfg(feature = "k8s")]
            StoreKind::Kube(c) => StoreKind::Kube(c.op_timeout(timeout)),
        })
    }

    fn map(mut self, f: impl FnOnce(StoreKind) -> StoreKind) -> Self {
        let kind = std::mem::replace(&mut self.kind, StoreKind::Memory(String::new()));
        self.kind = f(kind);
        self
    }

    /// Changes the SQL configuration, when the store is SQL.
    #[cfg(feature = "_sql")]
    pub fn map_sql(self, f: impl FnOnce(SqlConfig) -> SqlConfig) -> Self {
        self.map(|kind| match kind {
            StoreKind::Sql(c) => StoreKind::Sql(f(c)),
            other => other,
        })
    }

    /// Changes the Valkey/Redis configuration, when the store is one.
    #[cfg(feature = "valkey")]
    pub fn map_valkey(self, f: impl FnOnce(ValkeyConfig) -> ValkeyConfig) -> Self {
        self.map(|kind| match kind {
            StoreKind::Valkey(c) => StoreKind::Valkey(f(c)),
            other => other,
        })
    }

    /// Changes the etcd configuration, when the store is etcd.
    #[cfg(feature = "etcd")]
    pub fn map_etcd(self, f: impl FnOnce(EtcdConfig) -> EtcdConfig) -> Self {
        self.map(|kind| match kind {
            StoreKind::Etcd(c) => StoreKind::Etcd(f(c)),
            other => other,
        })
    }

    /// Changes the Kubernetes configuration, when the store is Kubernetes.
    #[cfg(feature = "k8s")]
    pub fn map_kube(self, f: impl FnOnce(KubeConfig) -> KubeConfig) -> Self {
        self.map(|kind| match kind {
            StoreKind::Kube(c) => StoreKind::Kube(f(c)),
            other => other,
        })
    }

    /// Connects with the backend's own `connect`: its checks of the server
    /// (version, durability, permissions) run, and each refusal says what to
    /// do.
    ///
    /// Without [`StoreConfig::wait_for_store`], one attempt: a store that
    /// is not reachable fails at once with the retryable
    /// [`ConnectError::Unreachable`]. With it, attempts go on while the
    /// store is not reachable, until its deadline.
    pub async fn connect(self) -> Result<Store, ConnectError> {
        match self.wait {
            None => self.connect_once().await,
            Some(wait) => self.connect_waiting(wait).await,
        }
    }

    /// Attempts to connect, proving each with a round trip, while the store
    /// is not reachable and `wait` allows.
    async fn connect_waiting(self, wait: StoreWait) -> Result<Store, ConnectError> {
        let shown = self.shown_url();
        let answer = wait_for_store(&shown, wait, ConnectError::is_retryable, || {
            self.clone().connect_reached()
        })
        .await;
        answer.map_err(|e| match e {
            WaitError::Refused(e) => e,
            WaitError::NotReachable {
                waited,
                attempts,
                last,
            } => ConnectError::NotReachable {
                url: shown.clone(),
                waited,
                attempts,
                last,
            },
        })
    }

    /// One attempt to connect, and one round trip to prove the store is
    /// reached (a lazy client may connect without reaching anyone).
    async fn connect_reached(self) -> Result<Store, ConnectError> {
        let store = self.connect_once().await?;
        match store.operator().ping().await {
            Ok(()) => Ok(store),
            Err(e) if e.is_retryable() => Err(ConnectError::Unreachable {
                message: format!("cannot reach {}: {e}", store.shown_url()),
                url: store.shown_url().to_owned(),
            }),
            Err(e) => Err(ConnectError::Refused {
                message: format!("cannot use {}: {e}", store.shown_url()),
                url: store.shown_url().to_owned(),
            }),
        }
    }

    /// One attempt to connect.
    async fn connect_once(self) -> Result<Store, ConnectError> {
        let shown = self.shown_url();
        let this = self.with_credentials()?;
        let kind = this.kind;
        let inner = match kind {
            StoreKind::Memory(name) => Inner::Memory(memory(&name)),
            #[cfg(feature = "_sql")]
            StoreKind::Sql(c) => Inner::Sql(
                SqlStrategy::connect(c)
                    .await
                    .map_err(|e| sql_error(&shown, e))?,
            ),
            #[cfg(feature = "valkey")]
            StoreKind::Valkey(c) => Inner::Valkey(
                ValkeyStrategy::connect(c)
                    .await
                    .map_err(|e| valkey_error(&shown, e))?,
            ),
            #[cfg(feature = "etcd")]
            StoreKind::Etcd(c) => Inner::Etcd(
                EtcdStrategy::connect(c)
                    .await
                    .map_err(|e| etcd_error(&shown, e))?,
            ),
            #[cfg(feature = "k8s")]
            StoreKind::Kube(c) => Inner::Kube(
                KubeStrategy::connect(c)
                    .await
                    .map_err(|e| kube_error(&shown, e))?,
            ),
        };
        Ok(Store::new(inner, shown))
    }
}

/// A store connected, when a lease manager starts or an elector campaigns:
/// while it is not reachable, tried again as [`StoreConfig::wait_for_store`]
/// says or, without it, as the manager or elector waits.
impl OpenStore for StoreConfig {
    type Strategy = Store;

    fn open(self, wait: StoreWait) -> BoxFuture<'static, Result<Store, StartError>> {
        Box::pin(async move {
            let wait = self.wait.unwrap_or(wait);
            let shown = self.shown_url();
            let answer = wait_for_store(&shown, wait, ConnectError::is_retryable, || {
                self.clone().connect_reached()
            })
            .await;
            answer.map_err(|e| e.into_start_error(&shown))
        })
    }
}

/// `a` or `an`, as `store` (a name in [`STORES`]) is spoken.
fn article(store: &str) -> &'static str {
    match store.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u' | 'A' | 'E' | 'I' | 'O' | 'U') => "an",
        _ => "a",
    }
}

/// How to write the address of an `http://` or `https://` URL for each
/// store of this build that is reached over HTTP(S) or gRPC (etcd,
/// Kubernetes); `None` when the build has neither.
fn http_forms(scheme: &str) -> Option<String> {
    let tls = scheme == "https";
    let mut forms = Vec::new();
    if cfg!(feature = "etcd") {
        forms.push(if tls {
            "etcds://HOST:2379?ca=CA.crt for etcd over TLS"
        } else {
            "etcd://HOST:2379 for etcd"
        });
    }
    if cfg!(feature = "k8s") {
        forms.push(if tls {
            "k8s+https://HOST:6443 (or k8s:// alone, for the kubeconfig's server and \
             credentials) for a Kubernetes API server"
        } else {
            "k8s://HOST:PORT for a Kubernetes API server in plain HTTP (kubectl proxy)"
        });
    }
    (!forms.is_empty()).then(|| forms.join(", or "))
}

/// `memory://NAME` → `NAME` (empty for `memory://`). A name takes no user
/// info, options or fragment: they would become part of it (and be shown
/// with it).
fn memory_name(url: &str) -> Result<String, ConnectError> {
    let name = url
        .split_once("://")
        .map(|(_, rest)| rest.trim_end_matches('/'))
        .unwrap_or_default();
    if name.contains(['@', '?', '#', ':']) {
        return Err(ConnectError::bad_url(
            url,
            "memory://NAME takes a name of letters, digits, '-', '_', '.' or '/' only: no user, \
             password, port or options",
        ));
    }
    Ok(name.to_owned())
}

/// The process's in-memory store of `name`.
fn memory(name: &str) -> Memory {
    static STORES: Mutex<Option<HashMap<String, Memory>>> = Mutex::new(None);
    let mut stores = STORES.lock().unwrap_or_else(PoisonError::into_inner);
    stores
        .get_or_insert_with(HashMap::new)
        .entry(name.to_owned())
        .or_default()
        .clone()
}

#[cfg(feature = "_sql")]
fn sql_error(shown: &str, e: SqlError) -> ConnectError {
    let url = shown.to_owned();
    match e {
        SqlError::Config(c) => ConnectError::BadUrl {
            url,
            why: c.to_string(),
        },
        // Its message names the store already.
        e @ SqlError::Credentials { .. } => ConnectError::Unreachable {
            message: e.to_string(),
            url,
        },
        // Its message says "authentication failed" and names the URL.
        e @ SqlError::Authentication { .. } => ConnectError::Authentication {
            message: e.to_string(),
            url,
        },
        e @ (SqlError::Unreachable(_) | SqlError::Timeout(_)) => ConnectError::Unreachable {
            message: format!("cannot reach {shown}: {e}"),
            url,
        },
        e => ConnectError::Refused {
            message: format!("cannot use {shown}: {e}"),
            url,
        },
    }
}

#[cfg(feature = "valkey")]
fn valkey_error(shown: &str, e: ValkeyError) -> ConnectError {
    let url = shown.to_owned();
    match e {
        ValkeyError::Config(c) => ConnectError::BadUrl {
            url,
            why: c.to_string(),
        },
        // Their messages name the URL already (without credentials).
        e @ (ValkeyError::Unreachable { .. } | ValkeyError::Credentials { .. }) => {
            ConnectError::Unreachable {
                message: e.to_string(),
                url,
            }
        }
        e @ ValkeyError::Authentication { .. } => ConnectError::Authentication {
            message: e.to_string(),
            url,
        },
        // A refused certificate, or TLS on one side only: final until the
        // configuration or the certificates change; the message names the
        // URL and the fix.
        e @ ValkeyError::Tls { .. } => ConnectError::Refused {
            message: e.to_string(),
            url,
        },
        e => ConnectError::Refused {
            message: format!("{shown}: {e}"),
            url,
        },
    }
}

#[cfg(feature = "etcd")]
fn etcd_error(shown: &str, e: EtcdError) -> ConnectError {
    let url = shown.to_owned();
    match e {
        EtcdError::Config(c) => ConnectError::BadUrl {
            url,
            why: c.to_string(),
        },
        e @ EtcdError::Connect { .. } => ConnectError::Unreachable {
            message: format!("{shown}: {e}"),
            url,
        },
        e @ EtcdError::Auth { .. } => ConnectError::Authentication {
            message: format!("{shown}: {e}"),
            url,
        },
        e => ConnectError::Refused {
            message: format!("{shown}: {e}"),
            url,
        },
    }
}

#[cfg(feature = "k8s")]
fn kube_error(shown: &str, e: KubeError) -> ConnectError {
    let url = shown.to_owned();
    match e {
        KubeError::Config(c) => ConnectError::BadUrl {
            url,
            why: c.to_string(),
        },
        e @ KubeError::Connect { .. } => ConnectError::Unreachable {
            message: format!("{shown}: {e}"),
            url,
        },
        e @ KubeError::Unauthorized { .. } => ConnectError::Authentication {
            message: format!("{shown}: {e}"),
            url,
        },
        e => ConnectError::Refused {
            message: format!("{shown}: {e}"),
            url,
        },
    }
}

#[cfg(test)]
mod words {
    use super::*;

    #[test]
    fn a_store_takes_its_article() {
        assert_eq!(article("etcd"), "an");
        assert_eq!(article("in-process"), "an");
        assert_eq!(article("Valkey/Redis"), "a");
        assert_eq!(article("Kubernetes"), "a");
    }

    /// `http://` and `https://` are answered with the forms of the stores
    /// this build reaches over HTTP(S) or gRPC, TLS with TLS.
    #[test]
    fn an_http_address_is_answered_with_the_forms_of_this_build() {
        let https = http_forms("https");
        let http = http_forms("http");
        if cfg!(any(feature = "etcd", feature = "k8s")) {
            let (https, http) = (https.unwrap_or_default(), http.unwrap_or_default());
            assert_eq!(
                cfg!(feature = "etcd"),
                https.contains("etcds://"),
                "{https}"
            );
            assert_eq!(
                cfg!(feature = "k8s"),
                https.contains("k8s+https://"),
                "{https}"
            );
            assert_eq!(cfg!(feature = "etcd"), http.contains("etcd://"), "{http}");
        } else {
            assert_eq!((https, http), (None, None));
        }
    }
}

#[cfg(all(test, feature = "_sql"))]
mod tests {
    use super::*;

    /// A TLS failure at connect (an expired or untrusted certificate, a
    /// client certificate refused) is final, in the backend's words.
    #[test]
    fn a_tls_refusal_is_final_and_keeps_its_cause_and_fix() {
        let e = sql_error(
            "postgres://h/db",
            SqlError::Tls {
                what: "connecting to postgres://h/db: the server's certificate has expired".into(),
                fix: "renew the server's certificate".into(),
            },
        );
        assert!(matches!(e, ConnectError::Refused { .. }), "{e:?}");
        assert!(!e.is_retryable());
        assert!(
            e.to_string()
                .ends_with("has expired; renew the server's certificate"),
            "{e}"
        );
    }
}
