//! The leasehold fault campaign: see `README.md`.
#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod check;
pub mod record;
pub mod timeline;
