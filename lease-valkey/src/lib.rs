#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod config;
mod error;
mod scripts;
mod server;
mod strategy;

pub use config::{MAX_PREFIX_LEN, Method, ValkeyConfig};
pub use error::Error;
pub use server::{Product, ServerInfo};
pub use strategy::{ActivePath, PoolKeys, ValkeyStrategy, marker};
