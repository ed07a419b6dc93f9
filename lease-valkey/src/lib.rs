#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod config;
mod durability;
mod error;
mod operate;
mod scripts;
mod server;
mod strategy;
mod url;

pub use config::{MAX_PREFIX_LEN, Method, ValkeyConfig};
pub use durability::Persistence;
pub use error::ValkeyError;
pub use server::{Product, ServerInfo};
pub use strategy::{ActivePath, PoolKeys, ValkeyStrategy};

/// The HSETEX path's ownership marker for `slot` held by `token` (a field of
/// [`PoolKeys::leases`]). For benchmarks and tests: with the `stats` feature only.
#[cfg(feature = "stats")]
pub fn marker(slot: u32, token: &leasehold_core::Token) -> String {
    strategy::marker(slot, token)
}
