#![doc = include_str!("../README.md")]
// The crate's features, from the `## ` comments of its Cargo.toml, after the
// README; docs.rs builds with every feature and marks each item with the
// features it needs.
#![cfg_attr(feature = "document-features", doc = "## Features\n")]
#![cfg_attr(feature = "document-features", doc = document_features::document_features!())]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

mod config;
mod store;

pub use config::{STORES, StoreConfig, StoreSchemes, register, registry, schemes_text};
/// Why a store could not be opened.
pub use leasehold_core::drivers::ConnectError;
pub use store::Store;

/// Everything of the core crate: the lease manager, leader election, the
/// strategy and operator traits, the in-process [`Memory`] store.
pub use leasehold_core::*;

/// Machine IDs, nonces and UUIDv7 generated under a lease.
pub use leasehold_nonce as nonce;

/// PostgreSQL, MySQL/MariaDB and SQLite (features `postgres`, `mysql`, `sqlite`).
#[cfg(feature = "_sql")]
pub use leasehold_sql as sql;

/// Valkey and Redis (feature `valkey`).
#[cfg(feature = "valkey")]
pub use leasehold_valkey as valkey;

/// etcd v3 (feature `etcd`).
#[cfg(feature = "etcd")]
pub use leasehold_etcd as etcd;

/// Kubernetes Leases (feature `k8s`).
#[cfg(feature = "k8s")]
pub use leasehold_k8s as k8s;

/// Opens the store `url` names: [`StoreConfig::from_url`], then
/// [`StoreConfig::connect`]. The scheme picks the backend (see [`STORES`]);
/// each store's backend is compiled in by its cargo feature.
///
/// **One attempt:** a store that is not reachable (down, still starting,
/// its host name not resolving yet) fails at once with the retryable
/// [`ConnectError::Unreachable`]. A process that may start before its store
/// (a pod scheduled before the database) waits for it instead with
/// [`connect_waiting`], or [`StoreConfig::wait_for_store`]; or it hands the
/// unconnected [`StoreConfig`] to [`LeaseManager::start`] or
/// [`Leader::builder`], which wait for the store as they wait for a lease.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = leasehold::connect("memory://doc").await?;
/// assert!(store.operator().describe().contains("memory"));
/// # Ok::<(), leasehold::ConnectError>(()) }).unwrap();
/// ```
pub async fn connect(url: &str) -> Result<Store, ConnectError> {
    StoreConfig::from_url(url)?.connect().await
}

/// [`connect`], waiting up to `deadline` for a store that is not reachable
/// yet: [`StoreConfig::wait_for_store`], which says what is tried again
/// (only "not reachable": a refusal is final at once), how, and what is
/// logged and counted. A deadline that passes is
/// [`ConnectError::NotReachable`], naming the deadline and the last cause.
///
/// ```no_run
/// # async fn run() -> Result<(), leasehold::ConnectError> {
/// use std::time::Duration;
/// let store = leasehold::connect_waiting("postgres://app@db.internal/app", Duration::from_secs(120)).await?;
/// # Ok(()) }
/// ```
pub async fn connect_waiting(
    url: &str,
    deadline: std::time::Duration,
) -> Result<Store, ConnectError> {
    StoreConfig::from_url(url)?
        .wait_for_store(deadline)
        .connect()
        .await
}
