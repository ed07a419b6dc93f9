//! The etcd backend for the suite, and helpers shared by the etcd tests.

pub(crate) mod cluster;
pub(crate) mod damaged;
pub(crate) mod tests;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_conformance::servers::{Server, ServerKind};
use leasehold_conformance::{Backend, Store};
use leasehold_core::{BoxFuture, PoolSpec};
use leasehold_etcd::{EtcdConfig, EtcdStrategy};

/// What the suite knows of an etcd server: its URL.
#[derive(Clone)]
pub(crate) struct EtcdBackend {
    pub(crate) url: String,
    pub(crate) addr: Option<SocketAddr>,
    pub(crate) kind: ServerKind,
}

impl EtcdBackend {
    pub(crate) fn new(server: &Server) -> Self {
        Self {
            url: server.url.clone(),
            addr: server.addr(),
            kind: server.kind,
        }
    }

    pub(crate) async fn leases(&self) -> Result<EtcdStrategy, String> {
        EtcdStrategy::connect(EtcdConfig::new([self.url.clone()]))
            .await
            .map_err(|e| e.to_string())
    }
}

impl Backend for EtcdBackend {
    fn connect(&self) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async move { Ok(Arc::new(self.leases().await?) as Store) })
    }

    fn connect_via(
        &self,
        addr: SocketAddr,
        op_timeout: Duration,
    ) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async move {
            let leases = EtcdStrategy::connect(
                EtcdConfig::from_url(&format!("etcd://{addr}"))
                    .map_err(|e| e.to_string())?
                    .op_timeout(op_timeout),
            )
            .await
            .map_err(|e| e.to_string())?;
            Ok(Arc::new(leases) as Store)
        })
    }

    fn store_addr(&self) -> Option<SocketAddr> {
        self.addr
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
