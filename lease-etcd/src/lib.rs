#![doc = include_str!("../README.md")]
// The crate's features, from the `## ` comments of its Cargo.toml, after the
// README; docs.rs builds with every feature and marks each item with the
// features it needs.
#![cfg_attr(feature = "document-features", doc = "## Features\n")]
#![cfg_attr(feature = "document-features", doc = document_features::document_features!())]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

mod acquire;
mod call;
mod config;
mod damaged;
pub mod driver;
mod error;
mod guard;
#[cfg(feature = "harness")]
mod harness;
mod hold;
mod inspect;
mod keys;
mod lost;
mod operate;
mod role;
mod strategy;
mod tls;
mod url;
mod watch;

pub use config::{DEFAULT_CANDIDATES, DEFAULT_PREFIX, EtcdConfig, MAX_CANDIDATES};
pub use driver::DRIVER;
pub use error::EtcdError;
pub use role::LeaseRole;
pub use strategy::EtcdStrategy;
#[cfg(feature = "stats")]
pub use strategy::Stats;
pub use watch::{LossGuard, LossWatch};

/// The `etcd-client` crate this strategy is built on (for `TlsOptions`,
/// `Certificate`, `Identity` with the `tls` feature, or direct access).
pub use etcd_client;
