#![doc = include_str!("../README.md")]
// The crate's features, from the `## ` comments of its Cargo.toml, after the
// README; docs.rs builds with every feature and marks each item with the
// features it needs.
#![cfg_attr(feature = "document-features", doc = "## Features\n")]
#![cfg_attr(feature = "document-features", doc = document_features::document_features!())]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

mod acl;
mod config;
mod credentials;
pub mod driver;
mod durability;
mod error;
#[cfg(feature = "harness")]
mod harness;
mod operate;
mod replication;
mod scripts;
mod server;
mod strategy;
mod tls;
mod url;

pub use acl::{Grants, LeaseUserAcl};
pub use config::{MAX_PREFIX_LEN, Method, ValkeyConfig};
pub use driver::DRIVER;
pub use durability::Persistence;
pub use error::TlsFailure;
pub use error::ValkeyError;
pub use server::{Product, ServerInfo};
pub use strategy::{ActivePath, PoolKeys, ValkeyStrategy};
pub use tls::TlsInfo;

/// The HSETEX path's ownership marker for `slot` held by `token` (a field of
/// [`PoolKeys::leases`]). For benchmarks and tests: with the `stats` feature only.
#[cfg(feature = "stats")]
pub fn marker(slot: u32, token: &leasehold_core::Token) -> String {
    strategy::marker(slot, token)
}
