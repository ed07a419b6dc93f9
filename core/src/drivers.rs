//! Drivers: how a store's URL becomes a connected store, the same way for
//! every backend.
//!
//! A **driver** is a backend's one entry in the registry (the facade's
//! `leasehold::STORES`, and whatever a program adds with
//! `leasehold::register`): the URL schemes it reads, and
//! [`Driver::parse_url`], which gives the backend's configuration behind
//! [`DriverConfig`]. Everything above the backends (the facade, the
//! command-line tool, the fault campaign) handles a store through these two
//! traits and never names a backend:
//!
//! - options are set by key and value ([`DriverConfig::set`]), with the
//!   keys and values of the URL's query (`op_timeout=2s`, `table=ids`);
//! - credentials are handed over as they come ([`DriverConfig::credentials`]);
//! - [`DriverConfig::connect`] runs the backend's own connect, with its
//!   checks of the server, and gives the store as an [`Operate`] (a lease
//!   strategy and the operator's handle in one), erased once behind an
//!   `Arc`; [`DynStrategy::as_any`](crate::DynStrategy::as_any) gives the
//!   backend's own type back.
//!
//! ```
//! use leasehold_core::drivers::{Driver, MEMORY};
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let mut config = MEMORY.parse_url("memory://drivers-doc")?;
//! config.set("op_timeout", "2s").unwrap_or_else(|why| panic!("{why}"));
//! let store = config.connect("memory://drivers-doc".to_owned()).await?;
//! assert!(store.describe().contains("memory"));
//! # Ok::<(), leasehold_core::drivers::ConnectError>(()) }).unwrap();
//! ```

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::credentials::CredentialSource;
use crate::memory::Memory;
use crate::operate::Operate;
use crate::strategy::BoxFuture;

/// A backend's entry in the registry: the schemes it reads and how it reads
/// a URL. Each backend crate exports its drivers as `static` values
/// (`leasehold_sql::drivers::POSTGRES`, `leasehold_valkey::DRIVER`, …); a
/// driver of a crate outside this workspace joins a program's registry with
/// `leasehold::register`.
pub trait Driver: Send + Sync + 'static {
    /// The store, for messages: `SQL`, `Valkey/Redis`, `etcd`.
    fn store(&self) -> &'static str;

    /// The URL schemes it reads, lowercase (`postgres`, `postgresql`).
    fn schemes(&self) -> &'static [&'static str];

    /// Reads `url` (no network): the backend's configuration, or
    /// [`ConnectError::BadUrl`] with the accepted form.
    fn parse_url(&self, url: &str) -> Result<Box<dyn DriverConfig>, ConnectError>;

    /// How to write the address of a store of this kind reached over HTTP
    /// or gRPC, for a URL given as `http://` (`tls` false) or `https://`
    /// (`tls` true): `etcd://HOST:2379 for etcd`. `None` (the default) for
    /// a store not reached so.
    fn http_form(&self, tls: bool) -> Option<&'static str> {
        let _ = tls;
        None
    }

    /// For a store that needs no server, whose callers open it themselves
    /// (a file on their machine, read and written under their own clock):
    /// the URL of a fresh store of this kind in the directory `dir`. A tool
    /// that provides a store for a test run (the fault campaign) opens it so
    /// without knowing the store. `None` (the default) for a store reached
    /// through a server, and for one that lives in a single process.
    fn local_url(&self, dir: &std::path::Path) -> Option<String> {
        let _ = dir;
        None
    }
}

impl fmt::Debug for dyn Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("store", &self.store())
            .field("schemes", &self.schemes())
            .finish()
    }
}

/// A backend's configuration, read from a URL by its [`Driver`] and not yet
/// connected. Implemented by each backend's own configuration type
/// (`SqlConfig`, `ValkeyConfig`, …), which [`DriverConfig::as_any`] gives
/// back for settings of its own.
///
/// `Debug` shows no secret: each backend redacts its own.
pub trait DriverConfig: fmt::Debug + Send + Sync + 'static {
    /// A copy, boxed.
    fn clone_config(&self) -> Box<dyn DriverConfig>;

    /// Sets the option `key` to `value`, as the URL's query would say it
    /// (`op_timeout` = `2s`, `table` = `ids`). Every backend takes
    /// `op_timeout` and `refuse_at_connect`; a key the backend does not
    /// take, or a value it cannot read, is refused with what it takes.
    fn set(&mut self, key: &str, value: &str) -> Result<(), String>;

    /// The keys [`DriverConfig::set`] takes.
    fn keys(&self) -> &'static [&'static str];

    /// The settings of an operator's tool that only looks (`leasehold
    /// doctor`, `status`, `revoke`): few connections, each connect bounded
    /// by `timeout`, and a server this configuration would refuse judged
    /// and kept rather than refused (so that it can be reported; such a
    /// store claims nothing). Refused, with what to give instead, where
    /// the URL names nothing such a tool can look at (a SQLite database in
    /// memory, or a file that is not there: opening it would create it).
    fn look_only(&mut self, timeout: Duration) -> Result<(), ConnectError>;

    /// Hands over the credential source (a password file or a callback),
    /// or says why this store cannot take it, in a sentence that names the
    /// source ([`CredentialSource::describe`]), the store, and what to do
    /// instead.
    fn credentials(&mut self, source: CredentialSource) -> Result<(), String>;

    /// Connects with the backend's own checks of the server (version,
    /// durability, permissions); each refusal says what to do. `shown` is
    /// the URL as messages show it (redacted).
    fn connect(
        self: Box<Self>,
        shown: String,
    ) -> BoxFuture<'static, Result<Arc<dyn Operate>, ConnectError>>;

    /// A [`Harness`] on the store this configuration names, connected
    /// with connections of its own: what the fault campaign does to a
    /// store besides holding leases. `None` where the backend has none in
    /// this build (its `harness` feature off): the default.
    fn harness(&self) -> Option<BoxFuture<'static, Result<Box<dyn Harness>, String>>> {
        None
    }

    /// The backend's own configuration type, to read.
    fn as_any(&self) -> &dyn Any;

    /// The backend's own configuration type, to take whole.
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

/// What the fault campaign does to a store besides holding leases, the same
/// way on every store: fenced writes to one resource per slot, checked by
/// the store itself (a fence below the resource's last one is refused), with
/// a log of the fences the store accepted, in the store's order; and a wipe
/// of pools' lease records while their holders run, as an operator's
/// mistake would make one. For tests and fault campaigns only: each
/// backend compiles its harness behind its `harness` feature.
pub trait Harness: Send + Sync {
    /// Makes what the fenced writes to the `slots` slots of `pools` need
    /// (tables, …) and removes what an earlier run of the same pools left.
    fn prepare_fences<'a>(
        &'a self,
        pools: &'a [String],
        slots: u32,
    ) -> BoxFuture<'a, Result<(), String>>;

    /// One fenced write with `fence` to the resource of `slot` of `pool`:
    /// `Ok(true)` when the store accepted it (and logged it), `Ok(false)`
    /// when it refused it as stale.
    fn fenced_write<'a>(
        &'a self,
        pool: &'a str,
        slot: u32,
        fence: u64,
    ) -> BoxFuture<'a, Result<bool, String>>;

    /// Per resource (named by [`resource`]), the fences of the accepted
    /// writes in the store's order, for the `slots` slots of `pools`.
    fn accepted_fences<'a>(
        &'a self,
        pools: &'a [String],
        slots: u32,
    ) -> BoxFuture<'a, Result<std::collections::BTreeMap<String, Vec<u64>>, String>>;

    /// Deletes the lease records of `pools` (the rule-12 records with
    /// them) as an operator would by mistake, while their holders run.
    fn wipe<'a>(&'a self, pools: &'a [String]) -> BoxFuture<'a, Result<(), String>>;
}

/// The resource of `slot` of `pool`, as [`Harness::accepted_fences`] names
/// it.
pub fn resource(pool: &str, slot: u32) -> String {
    format!("{pool}-{slot}")
}

impl Clone for Box<dyn DriverConfig> {
    fn clone(&self) -> Self {
        self.clone_config()
    }
}

/// Why a store could not be opened: its URL, or its connect. Every message
/// names the store by its URL as [`crate::url::redacted`] shows it (no
/// password, no secret option).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL names no store this build can open: no or an unknown scheme,
    /// a store whose feature is off, a bad host, port or option. Final.
    BadUrl {
        /// The URL, redacted.
        url: String,
        /// What is wrong and the accepted form.
        why: String,
    },
    /// The store did not answer, or not in time. Without a wait for the
    /// store (`StoreConfig::wait_for_store` of the facade) nothing retries a
    /// failed connect by itself: check that the store runs and try again,
    /// or let `connect` wait for it.
    Unreachable {
        /// The URL, redacted.
        url: String,
        /// What failed, naming the URL.
        message: String,
    },
    /// The store was still not reachable when the deadline of the wait for
    /// it passed.
    NotReachable {
        /// The URL, redacted.
        url: String,
        /// The deadline that passed.
        waited: Duration,
        /// How many attempts were made.
        attempts: u32,
        /// What the last attempt answered.
        last: String,
    },
    /// The store refused the credentials: a wrong user or password (in the
    /// URL, its `password_file` or the credentials callback), a user the
    /// server does not know or let in from this host, a client certificate
    /// or token it does not accept (PostgreSQL `28P01`/`28000`,
    /// MySQL/MariaDB `1045`, Valkey/Redis `WRONGPASS`/`NOAUTH`, etcd's
    /// authentication errors, Kubernetes 401). Final until the credentials
    /// are fixed; the message says "authentication" and what to check.
    Authentication {
        /// The URL, redacted.
        url: String,
        /// What the store answered and what to check, naming the URL.
        message: String,
    },
    /// The store answered, and refused: permissions, a server too old, or
    /// settings that can lose leases. Final until fixed; the message says
    /// how.
    Refused {
        /// The URL, redacted.
        url: String,
        /// What the store answered and the fix, naming the URL.
        message: String,
    },
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadUrl { url, why } => write!(f, "bad store URL {url}: {why}"),
            Self::Unreachable { message, .. }
            | Self::Authentication { message, .. }
            | Self::Refused { message, .. } => f.write_str(message),
            Self::NotReachable {
                url,
                waited,
                attempts,
                last,
            } => write!(
                f,
                "{url} was not reachable within {waited:?}, the deadline of wait_for_store \
                 ({attempts} attempts); the last: {last}. Check that the store runs and that \
                 this host can reach it, or wait longer"
            ),
        }
    }
}

impl std::error::Error for ConnectError {}

impl ConnectError {
    /// True when trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unreachable { .. } | Self::NotReachable { .. })
    }

    /// The store's URL, redacted ([`crate::url::redacted`]).
    pub fn url(&self) -> &str {
        match self {
            Self::BadUrl { url, .. }
            | Self::Unreachable { url, .. }
            | Self::NotReachable { url, .. }
            | Self::Authentication { url, .. }
            | Self::Refused { url, .. } => url,
        }
    }

    /// A bad URL: `url` (redacted here) and what is wrong with it.
    pub fn bad_url(url: &str, why: impl fmt::Display) -> Self {
        Self::BadUrl {
            url: crate::url::redacted(url),
            why: why.to_string(),
        }
    }
}

/// An option key no backend of this kind takes, answered with those it
/// takes: for [`DriverConfig::set`].
pub fn unknown_key(store: &str, key: &str, keys: &[&str]) -> String {
    format!(
        "{store} takes no option {key:?}; it takes {}",
        keys.join(", ")
    )
}

/// `value` read as a duration, as the URL options say one (`500ms`,
/// `2s`), for [`DriverConfig::set`].
pub fn duration_value(key: &str, value: &str) -> Result<Duration, String> {
    crate::url::parse_duration(value).ok_or_else(|| {
        format!(
            "option {key}={value:?}: give a whole number of milliseconds or seconds above \
             zero, with its unit: {key}=500ms or {key}=2s"
        )
    })
}

/// `value` read as a switch, as the URL options say one (`true`/`false`,
/// `1`/`0`, `yes`/`no`, `on`/`off`, in any case), for
/// [`DriverConfig::set`].
pub fn bool_value(key: &str, value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(format!(
            "option {key}={value:?}: give {key}=true or {key}=false"
        )),
    }
}

/// The in-process [`Memory`] store's driver: `memory://NAME`. Every connect
/// of one name in one process opens the same store.
pub static MEMORY: MemoryDriver = MemoryDriver;

/// The driver of [`MEMORY`].
#[derive(Clone, Copy, Debug)]
pub struct MemoryDriver;

impl Driver for MemoryDriver {
    fn store(&self) -> &'static str {
        "in-process"
    }

    fn schemes(&self) -> &'static [&'static str] {
        &["memory"]
    }

    fn parse_url(&self, url: &str) -> Result<Box<dyn DriverConfig>, ConnectError> {
        Ok(Box::new(MemoryConfig {
            name: memory_name(url)?,
        }))
    }
}

/// The configuration of an in-process store: its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryConfig {
    /// The name: every connect of one name in one process opens the same
    /// store.
    pub name: String,
}

impl DriverConfig for MemoryConfig {
    fn clone_config(&self) -> Box<dyn DriverConfig> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            // Nothing waits on the network: there is nothing to bound, and
            // nothing is refused at connect.
            "op_timeout" => duration_value(key, value).map(drop),
            "refuse_at_connect" => bool_value(key, value).map(drop),
            _ => Err(unknown_key("an in-process store", key, self.keys())),
        }
    }

    fn keys(&self) -> &'static [&'static str] {
        &["op_timeout", "refuse_at_connect"]
    }

    fn look_only(&mut self, _timeout: Duration) -> Result<(), ConnectError> {
        Ok(())
    }

    fn credentials(&mut self, source: CredentialSource) -> Result<(), String> {
        Err(format!(
            "{} cannot be used with an in-process store, which takes no password; leave it out",
            source.describe()
        ))
    }

    fn connect(
        self: Box<Self>,
        _shown: String,
    ) -> BoxFuture<'static, Result<Arc<dyn Operate>, ConnectError>> {
        let store = named_memory(&self.name);
        Box::pin(async move { Ok(Arc::new(store) as Arc<dyn Operate>) })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
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
fn named_memory(name: &str) -> Memory {
    static STORES: Mutex<Option<HashMap<String, Memory>>> = Mutex::new(None);
    let mut stores = STORES.lock().unwrap_or_else(PoisonError::into_inner);
    stores
        .get_or_insert_with(HashMap::new)
        .entry(name.to_owned())
        .or_default()
        .clone()
}
