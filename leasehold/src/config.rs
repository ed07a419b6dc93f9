//! A store URL → the driver that reads it, and the connect: the registry
//! of drivers, one line per backend.

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use leasehold_core::credentials::{CallbackError, CredentialSource, Credentials};
use leasehold_core::drivers::{Driver, DriverConfig};
use leasehold_core::opening::{OpenStore, StoreWait, WaitError, wait_for_store};
use leasehold_core::{BoxFuture, StartError};

use crate::ConnectError;
use crate::store::Store;

/// A registry row: the driver when its feature is on, `None` when not.
macro_rules! driver {
    ($feature:literal, $driver:expr) => {{
        #[cfg(feature = $feature)]
        let driver: Option<&'static dyn Driver> = Some(&$driver);
        #[cfg(not(feature = $feature))]
        let driver: Option<&'static dyn Driver> = None;
        driver
    }};
}

/// The registry: every store this crate knows, one row per driver, with its
/// schemes, the cargo feature that compiles it in, and its name in
/// messages. A scheme of a store whose feature is off is refused with the
/// feature to turn on. A program adds drivers of its own with
/// [`register`].
pub static STORES: &[StoreSchemes] = &[
    StoreSchemes {
        store: "SQL",
        schemes: &["postgres", "postgresql"],
        feature: "postgres",
        driver: driver!("postgres", leasehold_sql::driver::POSTGRES),
    },
    StoreSchemes {
        store: "SQL",
        schemes: &["mysql", "mariadb"],
        feature: "mysql",
        driver: driver!("mysql", leasehold_sql::driver::MYSQL),
    },
    StoreSchemes {
        store: "SQL",
        schemes: &["sqlite"],
        feature: "sqlite",
        driver: driver!("sqlite", leasehold_sql::driver::SQLITE),
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
        driver: driver!("valkey", leasehold_valkey::DRIVER),
    },
    StoreSchemes {
        store: "etcd",
        schemes: &["etcd", "etcds"],
        feature: "etcd",
        driver: driver!("etcd", leasehold_etcd::DRIVER),
    },
    StoreSchemes {
        store: "Kubernetes",
        schemes: &["k8s", "k8s+http", "k8s+https", "kubernetes"],
        feature: "k8s",
        driver: driver!("k8s", leasehold_k8s::DRIVER),
    },
    StoreSchemes {
        store: "in-process",
        schemes: &["memory"],
        feature: "",
        driver: Some(&leasehold_core::drivers::MEMORY),
    },
];

/// One row of [`STORES`], or a driver added with [`register`].
#[derive(Clone, Copy, Debug)]
pub struct StoreSchemes {
    /// The store, for messages (`SQL`, `Valkey/Redis`).
    pub store: &'static str,
    /// The URL schemes it reads.
    pub schemes: &'static [&'static str],
    /// The cargo feature of `leasehold` that compiles it in (empty: always,
    /// or a driver added with [`register`]).
    pub feature: &'static str,
    /// Its driver, when this build has it.
    pub driver: Option<&'static dyn Driver>,
}

impl StoreSchemes {
    /// Whether this build has the store.
    pub fn compiled(&self) -> bool {
        self.driver.is_some()
    }
}

/// The drivers a program added with [`register`].
static ADDED: RwLock<Vec<StoreSchemes>> = RwLock::new(Vec::new());

/// Adds `driver` to this process's registry: from then on
/// [`connect`](crate::connect), [`StoreConfig::from_url`] and every tool
/// built on them (the command-line tool, the fault campaign) open its
/// schemes as they open the built-in stores'. A backend crate outside this
/// workspace joins so, with no change to this crate. A scheme already
/// taken (by a built-in store, compiled in or not, or by a driver added
/// before) is refused, naming its store.
///
/// ```
/// use leasehold::drivers::{ConnectError, Driver, DriverConfig, MEMORY};
///
/// /// A store of its own scheme that opens in-process stores.
/// struct Scratch;
///
/// impl Driver for Scratch {
///     fn store(&self) -> &'static str { "scratch" }
///     fn schemes(&self) -> &'static [&'static str] { &["scratch"] }
///     fn parse_url(&self, url: &str) -> Result<Box<dyn DriverConfig>, ConnectError> {
///         MEMORY.parse_url(&url.replacen("scratch", "memory", 1))
///     }
/// }
///
/// static SCRATCH: Scratch = Scratch;
/// leasehold::register(&SCRATCH)?;
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = leasehold::connect("scratch://a").await?;
/// assert_eq!(store.store(), "scratch");
/// # Ok::<(), leasehold::ConnectError>(()) }).unwrap();
/// assert!(leasehold::register(&SCRATCH).is_err());
/// # Ok::<(), leasehold::ConnectError>(())
/// ```
pub fn register(driver: &'static dyn Driver) -> Result<(), ConnectError> {
    let mut added = ADDED.write().unwrap_or_else(PoisonError::into_inner);
    for scheme in driver.schemes() {
        if let Some(row) = STORES
            .iter()
            .chain(added.iter())
            .find(|row| row.schemes.contains(scheme))
        {
            return Err(ConnectError::bad_url(
                &format!("{scheme}://"),
                format!(
                    "the scheme {scheme}:// is taken by the {} store; give the {} driver \
                     schemes of its own",
                    row.store,
                    driver.store()
                ),
            ));
        }
    }
    added.push(StoreSchemes {
        store: driver.store(),
        schemes: driver.schemes(),
        feature: "",
        driver: Some(driver),
    });
    Ok(())
}

/// Every row of the registry: [`STORES`], then the drivers added with
/// [`register`], in the order they were added.
pub fn registry() -> Vec<StoreSchemes> {
    let added = ADDED.read().unwrap_or_else(PoisonError::into_inner);
    STORES.iter().chain(added.iter()).copied().collect()
}

/// Every scheme this build accepts (the stores whose features are on, and
/// those added with [`register`]), grouped by store: `postgres, postgresql,
/// mysql, mariadb, sqlite (SQL); redis, … (Valkey/Redis); …`.
pub fn schemes_text() -> String {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for row in registry().into_iter().filter(|row| row.compiled()) {
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
/// use leasehold::StoreConfig;
/// let config = StoreConfig::from_url("sqlite://ids.sqlite")?.op_timeout(Duration::from_secs(2));
/// assert_eq!(config.store(), "SQL");
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
    driver: &'static dyn Driver,
    config: Box<dyn DriverConfig>,
    credentials: Option<CredentialSource>,
    wait: Option<StoreWait>,
}

impl fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreConfig")
            .field("url", &self.shown_url())
            .field("store", &self.driver.store())
            .field("config", &self.config)
            .field("credentials", &self.credentials)
            .field("wait", &self.wait)
            .finish()
    }
}

/// `url`'s scheme, lowercased. A URL without `//` after its scheme
/// (`sqlite:PATH`, sqlx's form) has one where the text before its first
/// `:` is a scheme of the registry; its driver reads the rest.
fn scheme(url: &str) -> Result<String, ConnectError> {
    if let Some((scheme, _)) = url.split_once("://")
        && !scheme.is_empty()
    {
        return Ok(scheme.to_ascii_lowercase());
    }
    let registered = url
        .split_once(':')
        .map(|(s, _)| s.to_ascii_lowercase())
        .filter(|s| {
            registry()
                .iter()
                .any(|row| row.schemes.contains(&s.as_str()))
        });
    registered.ok_or_else(|| {
        ConnectError::bad_url(
            url,
            format!("it has no scheme; use one of {}", schemes_text()),
        )
    })
}

impl StoreConfig {
    /// Reads `url` (no network): the backend whose schemes include the URL's
    /// reads the rest, and refuses what it cannot use with the accepted form.
    pub fn from_url(url: &str) -> Result<Self, ConnectError> {
        let url = url.trim();
        let scheme = scheme(url)?;
        let Some(row) = registry()
            .into_iter()
            .find(|r| r.schemes.contains(&scheme.as_str()))
        else {
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
        let Some(driver) = row.driver else {
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
        };
        Ok(Self {
            url: url.to_owned(),
            driver,
            config: driver.parse_url(url)?,
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
        if let Some(source) = self.credentials.take() {
            self.config
                .credentials(source)
                .map_err(|why| ConnectError::bad_url(&self.url, why))?;
        }
        Ok(self)
    }

    /// The store's name in messages (`SQL`, `Valkey/Redis`, `etcd`), as its
    /// driver says.
    pub fn store(&self) -> &'static str {
        self.driver.store()
    }

    /// The driver that read the URL.
    pub fn driver(&self) -> &'static dyn Driver {
        self.driver
    }

    /// The backend's own configuration, when it is a `T`
    /// (`leasehold::sql::SqlConfig`, …).
    ///
    /// ```
    /// let config = leasehold::StoreConfig::from_url("sqlite://ids.sqlite")?;
    /// let sql = config.backend::<leasehold::sql::SqlConfig>().expect("a SQL store");
    /// assert_eq!(sql.sqlite_path(), Some("ids.sqlite"));
    /// # Ok::<(), leasehold::ConnectError>(())
    /// ```
    pub fn backend<T: 'static>(&self) -> Option<&T> {
        self.config.as_any().downcast_ref()
    }

    /// The URL as messages show it ([`crate::url::redacted`]: the password
    /// and secret options as `***`).
    pub fn shown_url(&self) -> String {
        leasehold_core::url::redacted(&self.url)
    }

    /// The bound on each store operation, whatever the store.
    pub fn op_timeout(mut self, timeout: Duration) -> Self {
        let value = format!("{}ms", timeout.as_millis().max(1));
        // Every driver takes `op_timeout`, and a whole number of
        // milliseconds above zero is always a duration it reads.
        if let Err(why) = self.config.set("op_timeout", &value) {
            unreachable!(
                "the {} driver refused op_timeout={value}: {why}",
                self.store()
            );
        }
        self
    }

    /// Sets the backend's option `key` to `value`, as the URL's query says
    /// it (`table` = `ids` for SQL, `prefix` for Valkey/Redis and etcd,
    /// `namespace` for Kubernetes; `op_timeout` and `refuse_at_connect` for
    /// every store). A key the store does not take is refused with the keys
    /// it takes.
    ///
    /// ```
    /// let config = leasehold::StoreConfig::from_url("sqlite://ids.sqlite")?.set("table", "ids")?;
    /// let e = config.set("namespace", "ids").unwrap_err();
    /// assert!(e.to_string().contains("SQL takes no option \"namespace\""), "{e}");
    /// # Ok::<(), leasehold::ConnectError>(())
    /// ```
    pub fn set(mut self, key: &str, value: &str) -> Result<Self, ConnectError> {
        self.config
            .set(key, value)
            .map_err(|why| ConnectError::bad_url(&self.url, why))?;
        Ok(self)
    }

    /// Whether the store takes the option `key` ([`StoreConfig::set`]).
    pub fn takes(&self, key: &str) -> bool {
        self.config.keys().contains(&key)
    }

    /// The settings of an operator's tool that only looks (`leasehold
    /// doctor`, `status`, `revoke`): few connections, each connect bounded
    /// by `timeout`, a SQLite file that must exist already, and a server
    /// this configuration would refuse judged and kept rather than refused,
    /// so that it can be reported (such a store claims nothing). Refused
    /// where the URL names nothing such a tool can look at (a SQLite
    /// database in memory; a SQLite file that is not there, which opening
    /// would create).
    pub fn look_only(mut self, timeout: Duration) -> Result<Self, ConnectError> {
        self.config.look_only(timeout)?;
        Ok(self)
    }

    /// The fault campaign's [`Harness`](leasehold_core::drivers::Harness) on
    /// this store, connected with connections of its own (feature
    /// `harness`), or why the store has none in this build.
    pub async fn harness(&self) -> Result<Box<dyn leasehold_core::drivers::Harness>, String> {
        match self.config.harness() {
            Some(connecting) => connecting.await,
            None => Err(format!(
                "{} has no harness in this build (the `harness` feature of the leasehold \
                 crate turns on every store's)",
                self.shown_url()
            )),
        }
    }

    /// Changes the backend's own configuration, when it is a `T`:
    /// `config.map(|c: SqlConfig| c.max_connections(4))`. Any other store's
    /// is left as it is.
    pub fn map<T: DriverConfig + Clone>(mut self, f: impl FnOnce(T) -> T) -> Self {
        if let Some(c) = self.config.as_any().downcast_ref::<T>() {
            self.config = Box::new(f(c.clone()));
        }
        self
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
        let driver = this.driver;
        let operate = this.config.connect(shown.clone()).await?;
        Ok(Store::new(operate, shown, driver))
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
/// store of this build reached over HTTP(S) or gRPC (etcd, Kubernetes, as
/// their drivers say); `None` when the build has none.
fn http_forms(scheme: &str) -> Option<String> {
    let tls = scheme == "https";
    let forms: Vec<&str> = registry()
        .iter()
        .filter_map(|row| row.driver?.http_form(tls))
        .collect();
    (!forms.is_empty()).then(|| forms.join(", or "))
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

    /// The registry's rows name the schemes and store of their drivers:
    /// the rows hold them so that a store whose feature is off is still
    /// named, with its feature, and must not drift from the driver.
    #[test]
    fn each_row_says_what_its_driver_says() {
        for row in STORES.iter().filter(|row| row.compiled()) {
            let driver = row.driver.expect("compiled");
            assert_eq!(row.store, driver.store());
            assert_eq!(row.schemes, driver.schemes(), "{}", row.store);
        }
    }
}
