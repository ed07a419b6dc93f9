#![doc = include_str!("../README.md")]
// The crate's features, from the `## ` comments of its Cargo.toml, after the
// README; docs.rs builds with every feature and marks each item with the
// features it needs.
#![cfg_attr(feature = "document-features", doc = "## Features\n")]
#![cfg_attr(feature = "document-features", doc = document_features::document_features!())]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

mod acquire;
mod api;
mod cache;
mod config;
pub mod driver;
mod error;
mod guard;
#[cfg(feature = "harness")]
mod harness;
mod hold;
mod inspect;
mod lease;
mod names;
mod operate;
mod ordinal;
mod preflight;
mod protocol;
#[cfg(feature = "stats")]
mod stats;
mod strategy;
mod time;
mod tls;
mod url;

pub use config::{DEFAULT_TAKEOVER_MARGIN, KubeConfig};
pub use driver::DRIVER;
pub use error::KubeError;
pub use names::{
    FENCE_ANNOTATION, FLOOR_ANNOTATION, FORMAT_ANNOTATION, INCARNATION_ANNOTATION, POOL_LABEL,
    SLOT_LABEL, format_name, incarnation_name, lease_name,
};
pub use ordinal::OrdinalLease;
pub use preflight::VERBS;
#[cfg(feature = "stats")]
pub use stats::Stats;
pub use strategy::KubeStrategy;

/// The `kube` crate this strategy is built on (for `kube::Config`).
pub use kube;
