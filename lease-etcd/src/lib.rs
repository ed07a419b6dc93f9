#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod config;
mod error;
mod keys;
mod strategy;
mod watch;

pub use config::{
    DEFAULT_CANDIDATES, DEFAULT_OP_TIMEOUT, DEFAULT_PREFIX, EtcdConfig, MAX_CANDIDATES,
};
pub use error::EtcdError;
pub use strategy::{ETCD_MIN_TTL, EtcdLeases, MAX_POOL_SIZE, Stats};
pub use watch::{LossGuard, LossWatch};

/// The `etcd-client` crate this strategy is built on (for `TlsOptions`,
/// `Certificate`, `Identity` with the `tls` feature, or direct access).
pub use etcd_client;
