//! The glue a backend's tests give the suite.

use std::any::Any;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{BoxFuture, DynStrategy, PoolSpec};

/// A connected strategy, boxed.
pub type Store = Arc<dyn DynStrategy>;

/// The glue a backend's tests give the suite: a store under test, described
/// (a URL, a server) so that it can make fresh connections. [`ByDriver`](crate::ByDriver)
/// is this glue for any backend reached through its driver. The suite calls [`Glue::connect`] inside each
/// test's own runtime, and uses a fresh random pool name per test. What the
/// store can do is read from the strategy it connects
/// ([`Strategy::capabilities`](leasehold_core::Strategy::capabilities)).
///
/// `Any` lets a backend-specific test registered with
/// [`Target::with_test`](crate::Target::with_test) get its concrete type back.
pub trait Glue: Any + Send + Sync {
    /// A strategy connected to the store, with the backend's normal settings.
    fn connect(&self) -> BoxFuture<'_, Result<Store, String>>;

    /// A strategy that reaches the store at `addr` (the fault proxy) and gives
    /// up on any single operation after `op_timeout`. Networked backends only.
    fn connect_via(
        &self,
        addr: SocketAddr,
        op_timeout: Duration,
    ) -> BoxFuture<'_, Result<Store, String>> {
        let _ = (addr, op_timeout);
        Box::pin(async { Err("this backend is not networked".to_owned()) })
    }

    /// The store's address, for the fault proxy. Networked backends only.
    fn store_addr(&self) -> Option<SocketAddr> {
        None
    }

    /// Creates whatever a pool needs before acquisition (schema, rows).
    fn prepare<'a>(&'a self, pool: &'a PoolSpec) -> BoxFuture<'a, Result<(), String>> {
        let _ = pool;
        Box::pin(async { Ok(()) })
    }

    /// Deletes `slot`'s lease behind its holder's back, as an operator or a
    /// failover might. `None` when the backend cannot.
    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> Option<BoxFuture<'a, Result<(), String>>> {
        let _ = (pool, slot);
        None
    }
}
