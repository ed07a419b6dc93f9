//! Replicated topologies on loopback: a store's primary with its replicas,
//! each started privately on its own ports and data directories, torn down
//! when the handle is dropped, and a failover a test can make happen.
//!
//! Each topology says how its clients find the primary after a failover, the
//! way users' clients do: PostgreSQL and MariaDB through an address that is
//! re-pointed at the promoted server (a virtual IP, an HAProxy or MaxScale in
//! production, the conformance [`FaultProxy`](crate::proxy::FaultProxy)
//! here), Valkey/Redis through Sentinel, or as a Cluster whose nodes redirect
//! clients (`MOVED`) to the promoted replica.
//!
//! Where the store's own HA makes the promotion (Sentinel, Cluster), it may
//! make none: a [`FailoverError::NotPromoted`] says what it was seen doing,
//! and the topology is put back as it was, so that the failover can be tried
//! again. A failover that did not happen is never reported as one.

use std::fmt;
use std::time::Duration;

pub mod cluster;
pub mod mariadb;
pub mod postgres;
pub mod sentinel;

/// A failover that happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failover {
    /// How long clients had no primary: from the kill of the old one until
    /// the new one was named.
    pub down: Duration,
    /// Whether the store's HA had made no promotion of its own by the time
    /// the topology asked it for one (`SENTINEL FAILOVER`, `CLUSTER
    /// FAILOVER FORCE`); the promotion may still be its own election's.
    pub forced: bool,
}

/// Why a failover did not happen.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailoverError {
    /// The store's own HA (the Sentinels, the cluster) promoted no replica
    /// in time, asked or not: what it was seen doing. The killed primary was
    /// started again and its replica follows it, so the topology can fail
    /// over again.
    NotPromoted(String),
    /// A step failed; the topology may be left without a replica.
    Failed(String),
}

impl fmt::Display for FailoverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotPromoted(why) => write!(f, "the store's HA promoted no replica: {why}"),
            Self::Failed(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for FailoverError {}

impl From<String> for FailoverError {
    fn from(why: String) -> Self {
        Self::Failed(why)
    }
}

impl From<FailoverError> for String {
    fn from(e: FailoverError) -> Self {
        e.to_string()
    }
}
