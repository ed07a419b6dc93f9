#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod classify;
mod config;
mod conns;
mod engine;
mod fence;
mod ident;
mod strategy;

pub use config::{DEFAULT_OP_TIMEOUT, SqlConfig};
pub use engine::Engine;
pub use fence::{DEFAULT_FENCE_TABLE, FenceError, FenceTable};
pub use ident::{DEFAULT_TABLE, TableName};
pub use strategy::{SQL_MIN_TTL, SqlStrategy, StoreError};

/// Re-exported so callers can name the pools and connections this crate hands out.
pub use sqlx;
