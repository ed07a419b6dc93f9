//! The etcd backend for the suite, and helpers shared by the etcd tests.

pub(crate) mod cluster;
pub(crate) mod damaged;
pub(crate) mod lease_user;
pub(crate) mod tests;
pub(crate) mod tls;
pub(crate) mod wipe;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_conformance::servers::{Server, ServerKind};
use leasehold_conformance::{Glue, Store};
use leasehold_core::{BoxFuture, PoolSpec};
use leasehold_etcd::{EtcdConfig, EtcdStrategy};

/// What the suite knows of an etcd server: its store URL.
#[derive(Clone)]
pub(crate) struct EtcdBackend {
    /// `etcd://HOST:PORT`, or `etcds://HOST:PORT?ca=…&cert=…&key=…` for a
    /// server that takes TLS only.
    pub(crate) url: String,
    pub(crate) addr: Option<SocketAddr>,
    pub(crate) kind: ServerKind,
}

impl EtcdBackend {
    pub(crate) fn new(server: &Server) -> Self {
        Self {
            url: server.store_url(),
            addr: server.addr(),
            kind: server.kind,
        }
    }

    /// The configuration of this server's URL.
    pub(crate) fn config(&self) -> Result<EtcdConfig, String> {
        EtcdConfig::from_url(&self.url).map_err(|e| e.to_string())
    }

    /// The configuration of this server's URL with `addr` (a fault proxy)
    /// in place of the server's address; TLS still verifies the server's
    /// certificate, which names 127.0.0.1.
    pub(crate) fn config_via(&self, addr: SocketAddr) -> Result<EtcdConfig, String> {
        let own = self.addr.ok_or("no store address")?;
        let url = self.url.replacen(&own.to_string(), &addr.to_string(), 1);
        EtcdConfig::from_url(&url).map_err(|e| e.to_string())
    }

    pub(crate) async fn leases(&self) -> Result<EtcdStrategy, String> {
        EtcdStrategy::connect(self.config()?)
            .await
            .map_err(|e| e.to_string())
    }
}

impl Glue for EtcdBackend {
    fn connect(&self) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async move { Ok(Arc::new(self.leases().await?) as Store) })
    }

    fn connect_via(
        &self,
        addr: SocketAddr,
        op_timeout: Duration,
    ) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async move {
            let leases = EtcdStrategy::connect(self.config_via(addr)?.op_timeout(op_timeout))
                .await
                .map_err(|e| e.to_string())?;
            Ok(Arc::new(leases) as Store)
        })
    }

    fn store_addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// Every test's pool is new (a fresh random name): said so, so that its
    /// first claim is not held back as a possibly wiped pool's.
    fn prepare<'a>(&'a self, pool: &'a PoolSpec) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move { declare_new(&self.leases().await?, pool).await })
    }

    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> Option<BoxFuture<'a, Result<(), String>>> {
        Some(Box::pin(async move {
            let leases = self.leases().await?;
            match leases.revoke(pool, slot).await {
                Ok(true) => Ok(()),
                Ok(false) => Err(format!("revoke: slot {slot} was not held")),
                Err(e) => Err(e.to_string()),
            }
        }))
    }
}

/// Declares `pool` new (`Operate::prepare_new_pool`): a test's fresh pool,
/// whose first claim is then not held back as a possibly wiped pool's.
pub(crate) async fn declare_new(leases: &EtcdStrategy, pool: &PoolSpec) -> Result<(), String> {
    leasehold_core::Operate::prepare_new_pool(leases, pool)
        .await
        .map_err(|e| format!("declare the pool new: {e}"))
}

/// Polls `check` every 10 ms until it is true or `limit` passes; returns the
/// time it took.
pub(crate) async fn until(limit: Duration, mut check: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if check() {
            return Some(start.elapsed());
        }
        if start.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
