//! The leasehold fault campaign: see `README.md`.
#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod check;
pub mod drift;
pub mod plan;
pub mod record;
pub mod runner;
pub mod store;
pub mod timeline;
pub mod worker;
