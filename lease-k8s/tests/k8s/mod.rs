//! Backends for the suite: the fake API server and a real cluster.

pub(crate) mod tests;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use leasehold_conformance::servers::Server;
use leasehold_conformance::{Backend, Store};
use leasehold_core::{BoxFuture, Capabilities, PoolSpec};
use leasehold_k8s::{KubeConfig, KubeStrategy};
use leasehold_k8s_fake::FakeApiServer;

/// The row of the in-process fake: it must say "fake".
pub(crate) const FAKE_LABEL: &str = "k8s (fake API server)";
/// The row of a real cluster.
pub(crate) const REAL_LABEL: &str = "k8s (real cluster)";

pub(crate) fn capabilities() -> Capabilities {
    KubeStrategy::CAPABILITIES
}

/// The suite's backend on the fake API server.
#[derive(Clone)]
pub(crate) struct FakeBackend {
    pub(crate) fake: Arc<FakeApiServer>,
}

impl FakeBackend {
    pub(crate) fn start() -> Self {
        Self {
            fake: Arc::new(FakeApiServer::start().expect("the fake API server starts")),
        }
    }

    /// `leasehold-k8s-fake 0.1.0 (fake API server, in process)`.
    pub(crate) fn describe(&self) -> String {
        format!(
            "leasehold-k8s-fake {} (fake API server in process at {}; not a kube-apiserver)",
            env!("CARGO_PKG_VERSION"),
            self.fake.addr()
        )
    }

    pub(crate) fn config(&self) -> KubeConfig {
        KubeConfig::url(self.fake.url()).namespace("default")
    }

    pub(crate) async fn strategy(&self) -> Result<KubeStrategy, String> {
        KubeStrategy::connect(self.config())
            .await
            .map_err(|e| e.to_string())
    }
}

impl Backend for FakeBackend {
    fn connect(&self) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async move {
            let s: Store = Arc::new(self.strategy().await?);
            Ok(s)
        })
    }

    fn connect_via(
        &self,
        addr: SocketAddr,
        op_timeout: Duration,
    ) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async move {
            let config = KubeConfig::url(format!("http://{addr}"))
                .namespace("default")
                .op_timeout(op_timeout);
            let s: Store = Arc::new(
                KubeStrategy::connect(config)
                    .await
                    .map_err(|e| e.to_string())?,
            );
            Ok(s)
        })
    }

    fn store_addr(&self) -> Option<SocketAddr> {
        Some(self.fake.addr())
    }

    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> Option<BoxFuture<'a, Result<(), String>>> {
        Some(Box::pin(async move {
            let revoked = self
                .strategy()
                .await?
                .revoke(pool, slot)
                .await
                .map_err(|e| e.to_string())?;
            if revoked {
                Ok(())
            } else {
                Err(format!("revoke found no holder of slot {slot}"))
            }
        }))
    }
}

/// The suite's backend on a real cluster: `server.url` is a kubeconfig path.
#[derive(Clone)]
pub(crate) struct RealBackend {
    kubeconfig: String,
    namespace: Option<String>,
}

impl RealBackend {
    pub(crate) fn new(server: &Server) -> Self {
        Self {
            kubeconfig: server.url.clone(),
            namespace: std::env::var("LEASEHOLD_K8S_NAMESPACE").ok(),
        }
    }

    fn config(&self) -> KubeConfig {
        let c = KubeConfig::from_kubeconfig(&self.kubeconfig);
        match &self.namespace {
            Some(ns) => c.namespace(ns.clone()),
            None => c,
        }
    }
}

impl Backend for RealBackend {
    fn connect(&self) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async move {
            let s: Store = Arc::new(
                KubeStrategy::connect(self.config())
                    .await
                    .map_err(|e| e.to_string())?,
            );
            Ok(s)
        })
    }

    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> Option<BoxFuture<'a, Result<(), String>>> {
        Some(Box::pin(async move {
            let s = KubeStrategy::connect(self.config())
                .await
                .map_err(|e| e.to_string())?;
            match s.revoke(pool, slot).await {
                Ok(true) => Ok(()),
                Ok(false) => Err(format!("revoke found no holder of slot {slot}")),
                Err(e) => Err(e.to_string()),
            }
        }))
    }
}
