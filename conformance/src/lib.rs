#![doc = include_str!("../README.md")]
// The crate's features, from the `## ` comments of its Cargo.toml, after the
// README; docs.rs builds with every feature and marks each item with the
// features it needs.
#![cfg_attr(feature = "document-features", doc = "## Features\n")]
#![cfg_attr(feature = "document-features", doc = document_features::document_features!())]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

#[macro_use]
mod macros;
mod by_driver;
pub mod etcd_cluster;
mod glue;
#[cfg(feature = "testcontainers")]
mod k3s;
pub mod programs;
pub mod proxy;
pub mod restarts;
mod runner;
pub mod scheduler;
pub mod secrets;
pub mod servers;
pub mod suite;
pub mod tls;
pub mod topology;

pub use by_driver::ByDriver;
pub use glue::{Glue, Store};
pub use runner::{ExtraTest, Target, in_ci, run};
pub use suite::{Outcome, fresh_pool, fresh_pool_name};
