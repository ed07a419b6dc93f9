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

pub mod cluster;
pub mod mariadb;
pub mod postgres;
pub mod sentinel;
