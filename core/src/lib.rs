#![doc = include_str!("../README.md")]
// The crate's features, from the `## ` comments of its Cargo.toml, after the
// README; docs.rs builds with every feature and marks each item with the
// features it needs.
#![cfg_attr(feature = "document-features", doc = "## Features\n")]
#![cfg_attr(feature = "document-features", doc = document_features::document_features!())]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

#[cfg(feature = "tokio")]
mod cache;
mod check;
mod clock;
mod config;
pub mod credentials;
pub mod drivers;
mod durability_policy;
mod error;
pub mod events;
mod fixed;
mod gate;
pub mod guards;
mod health;
#[cfg(feature = "tokio")]
mod leader;
#[cfg(feature = "tokio")]
mod leader_config;
mod loss;
pub mod machine;
#[cfg(feature = "tokio")]
mod manager;
mod memory;
pub mod observed;
#[cfg(feature = "tokio")]
pub mod opening;
pub mod operate;
#[doc(hidden)]
pub mod plant;
mod pool;
pub mod rand;
mod replication;
mod strategy;
#[cfg(feature = "tokio")]
mod telemetry;
#[cfg(feature = "test-util")]
#[doc(hidden)]
pub mod testing;
mod token;
pub mod url;
#[cfg(feature = "tokio")]
mod wait;

pub use clock::{Clock, ManualClock, MonoTime, SystemClock, UnixOffset, unique_wall_micros};
pub use config::{
    CLOCK_RATE_BOUND_PPM, COARSE_CLOCK_SLACK, LeaseConfig, LeaseConfigBuilder, OnLost, Timing,
    min_safety_margin,
};
pub use durability_policy::DurabilityPolicy;
pub use error::{AcquireError, ConfigError, Durability, DurabilityRisk, Reason, StartError};
pub use events::{LeaseEvent, WaitCause};
pub use fixed::{PodOrdinal, StaticSlot};
pub use gate::{
    AttachError, Attachment, Closed, DEFAULT_MAX_CLOCK_SKEW, GateView, GenerationState, LeaseGate,
    Opening,
};
pub use guards::{Guard, GuardKind, GuardState};
pub use health::{Condition, Health};
#[cfg(feature = "tokio")]
pub use leader::{Elector, Leader, LeaderBuilder, LeaderInfo, Leadership};
#[cfg(feature = "tokio")]
pub use leader_config::{LeaderConfig, LeaderConfigBuilder};
pub use loss::{LossCause, LossEvent};
#[cfg(feature = "tokio")]
pub use manager::{LeaseManager, LeaseState, LossSignal};
pub use memory::Memory;
#[cfg(feature = "tokio")]
pub use opening::{OpenStore, StoreWait};
pub use operate::{Check, Operate, OperateError, Verdict};
pub use pool::{IdFormat, MAX_POOL_SIZE, MAX_TTL, MIN_TTL, PoolName, PoolSpec, default_holder};
pub use replication::{Replication, SplitBrainRisk};
pub use strategy::{
    BoxFuture, Capabilities, DynStrategy, Fence, FenceStamp, Floor, Grant, InspectError, Release,
    Renewal, SlotInfo, Strategy,
};
pub use token::Token;
#[cfg(feature = "tokio")]
pub use wait::NotReady;
