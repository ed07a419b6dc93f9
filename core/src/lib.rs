#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(feature = "tokio")]
mod cache;
mod clock;
mod config;
#[cfg(feature = "tokio")]
mod driver;
mod error;
mod fixed;
mod gate;
pub mod machine;
mod memory;
mod pool;
mod rand;
mod strategy;
mod token;

pub use clock::{Clock, ManualClock, MonoTime, SystemClock};
pub use config::{LeaseConfig, LeaseConfigBuilder, MAX_TTL, MIN_TTL, OnLost, Timing};
#[cfg(feature = "tokio")]
pub use driver::{LeaseManager, LeaseState, LossSignal};
pub use error::{AcquireError, ConfigError, Reason, StartError};
pub use fixed::{PodOrdinal, StaticSlot};
pub use gate::{Closed, GateView, LeaseGate};
pub use machine::{LossCause, LossEvent};
pub use memory::Memory;
pub use pool::{MAX_POOL_SIZE, PoolName, PoolSpec, default_holder};
pub use strategy::{
    BoxFuture, Capabilities, DynStrategy, Fence, Grant, Release, Renewal, Strategy,
};
pub use token::Token;
