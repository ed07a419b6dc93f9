//! The leasehold fault campaign: see `README.md`.
#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub mod availability;
pub mod check;
pub mod drift;
pub mod plan;
pub mod record;
pub mod runner;
pub mod store;
pub mod timeline;
pub mod worker;

/// The program in the workspace's README, run as a doctest so the code a
/// user pastes after `cargo add leasehold` keeps compiling and working. It
/// lives in this unpublished crate because the README is outside every
/// published package.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct WorkspaceReadme;
