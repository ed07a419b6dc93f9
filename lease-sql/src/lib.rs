#![doc = include_str!("../README.md")]
// The crate's features, from the `## ` comments of its Cargo.toml, after the
// README; docs.rs builds with every feature and marks each item with the
// features it needs.
#![cfg_attr(feature = "document-features", doc = "## Features\n")]
#![cfg_attr(feature = "document-features", doc = document_features::document_features!())]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

#[cfg(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")))]
compile_error!(
    "leasehold-sql needs at least one engine: enable the feature `postgres`, `mysql` or `sqlite`"
);

mod config;
mod conns;
mod dialect;
pub mod driver;
mod engine;
mod error;
mod failure;
mod fence;
#[cfg(feature = "harness")]
mod harness;
mod ident;
mod leases;
#[cfg(feature = "postgres")]
mod notice;
mod operate;
mod privileges;
mod statements;
mod strategy;
mod tls;
mod url;

pub use config::SqlConfig;
pub use dialect::SqlDatabase;
pub use engine::Engine;
#[allow(deprecated)]
pub use error::FenceError;
pub use error::SqlError;
pub use fence::{DEFAULT_FENCE_TABLE, FenceTable};
pub use ident::{DEFAULT_TABLE, TableName};
pub use privileges::{MissingGrant, lease_user_sql};
pub use strategy::SqlStrategy;

/// Re-exported so callers can name the pools and connections this crate hands out.
pub use sqlx;
