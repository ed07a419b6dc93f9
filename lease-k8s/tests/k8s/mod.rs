//! Backends for the suite: the fake API server and a real cluster.

pub(crate) mod damaged;
pub(crate) mod tests;
pub(crate) mod tls;
pub(crate) mod wipe;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use leasehold_conformance::servers::{self, Server};
use leasehold_conformance::{Glue, Store};
use leasehold_core::{BoxFuture, Operate, PoolSpec};
use leasehold_k8s::{KubeConfig, KubeStrategy};
use leasehold_k8s_fake::FakeApiServer;

/// The row of the in-process fake: it must say "fake".
pub(crate) const FAKE_LABEL: &str = servers::K8S_FAKE_LABEL;
/// The row of a real cluster.
pub(crate) const REAL_LABEL: &str = servers::K8S_REAL_LABEL;

/// A fresh pool of `size` slots, declared new through `s`: tests that
/// start on an empty pool do not wait out the wipe guard's span.
pub(crate) async fn new_pool(
    s: &KubeStrategy,
    size: u32,
    ttl: Duration,
) -> Result<PoolSpec, String> {
    let pool = leasehold_conformance::fresh_pool(size, ttl)?;
    s.prepare_new_pool(&pool).await.map_err(|e| e.to_string())?;
    Ok(pool)
}

/// The suite's backend on the fake API server.
#[derive(Clone)]
pub(crate) struct FakeBackend {
    pub(crate) fake: Arc<FakeApiServer>,
    /// Over HTTPS: the kubeconfig the suite connects with, as a user would.
    pub(crate) kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig's directory, removed when the last clone goes.
    _files: Option<Arc<tls::Kubeconfig>>,
}

impl FakeBackend {
    pub(crate) fn start() -> Self {
        Self {
            fake: Arc::new(FakeApiServer::start().expect("the fake API server starts")),
            kubeconfig: None,
            _files: None,
        }
    }

    /// A fake that takes HTTPS only and authenticates every request,
    /// reached through a kubeconfig with the CA and a client certificate
    /// (see [`tls`]).
    pub(crate) fn start_https() -> Result<Self, String> {
        let fake = tls::https_fake(&tls::pki()?.server)?;
        let files = tls::Kubeconfig::new(&fake.url())?;
        Ok(Self {
            fake: Arc::new(fake),
            kubeconfig: Some(files.client_certificate()?),
            _files: Some(Arc::new(files)),
        })
    }

    /// `leasehold-k8s-fake <version> (fake API server in process at <address>; not a
    /// kube-apiserver)`, and how it is reached over HTTPS.
    pub(crate) fn describe(&self) -> String {
        let https = if self.kubeconfig.is_some() {
            " over HTTPS, reached with a client certificate through a kubeconfig"
        } else {
            ""
        };
        format!(
            "leasehold-k8s-fake {} (fake API server in process at {}{https}; not a \
             kube-apiserver)",
            env!("CARGO_PKG_VERSION"),
            self.fake.addr()
        )
    }

    pub(crate) fn config(&self) -> KubeConfig {
        match &self.kubeconfig {
            Some(path) => KubeConfig::from_kubeconfig(path).namespace("default"),
            None => KubeConfig::url(self.fake.url()).namespace("default"),
        }
    }

    pub(crate) async fn strategy(&self) -> Result<KubeStrategy, String> {
        KubeStrategy::connect(self.config())
            .await
            .map_err(|e| e.to_string())
    }
}

impl Glue for FakeBackend {
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
            let config = match &self.kubeconfig {
                // The kubeconfig's server moved to the proxy; TLS still
                // verifies the certificate, which names 127.0.0.1.
                Some(path) => KubeConfig::from_kube(tls::kube_config_at(path, addr).await?),
                None => {
                    KubeConfig::from_url(&format!("k8s://{addr}")).map_err(|e| e.to_string())?
                }
            }
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

    /// Declares the suite's fresh pool new: nobody held it, so its first
    /// claim has no wipe guard to wait out.
    fn prepare<'a>(&'a self, pool: &'a PoolSpec) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.strategy()
                .await?
                .prepare_new_pool(pool)
                .await
                .map_err(|e| e.to_string())
        })
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
/// The fault proxy goes between the client and the API server; TLS still
/// verifies the server's certificate under its own name.
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

    fn with_namespace(&self, c: KubeConfig) -> KubeConfig {
        match &self.namespace {
            Some(ns) => c.namespace(ns.clone()),
            None => c,
        }
    }

    fn config(&self) -> KubeConfig {
        self.with_namespace(KubeConfig::from_kubeconfig(&self.kubeconfig))
    }

    /// The API server URL of the kubeconfig's current context.
    fn server_url(&self) -> Option<String> {
        let file = leasehold_k8s::kube::config::Kubeconfig::read_from(&self.kubeconfig).ok()?;
        let context = file.current_context.as_deref()?;
        let cluster = file
            .contexts
            .iter()
            .find(|c| c.name == context)?
            .context
            .as_ref()?
            .cluster
            .clone();
        file.clusters
            .iter()
            .find(|c| c.name == cluster)?
            .cluster
            .as_ref()?
            .server
            .clone()
    }
}

impl Glue for RealBackend {
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

    fn connect_via(
        &self,
        addr: SocketAddr,
        op_timeout: Duration,
    ) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async move {
            let file = leasehold_k8s::kube::config::Kubeconfig::read_from(&self.kubeconfig)
                .map_err(|e| e.to_string())?;
            let mut config =
                leasehold_k8s::kube::Config::from_custom_kubeconfig(file, &Default::default())
                    .await
                    .map_err(|e| e.to_string())?;
            let host = config.cluster_url.host().unwrap_or("").to_owned();
            let scheme = config
                .cluster_url
                .scheme_str()
                .unwrap_or("https")
                .to_owned();
            config.cluster_url = format!("{scheme}://{addr}")
                .parse()
                .map_err(|e| format!("proxy URL: {e}"))?;
            config.tls_server_name = Some(host);
            let kube = self
                .with_namespace(KubeConfig::from_kube(config))
                .op_timeout(op_timeout);
            let s: Store = Arc::new(
                KubeStrategy::connect(kube)
                    .await
                    .map_err(|e| e.to_string())?,
            );
            Ok(s)
        })
    }

    /// Declares the suite's fresh pool new, as on the fake.
    fn prepare<'a>(&'a self, pool: &'a PoolSpec) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            KubeStrategy::connect(self.config())
                .await
                .map_err(|e| e.to_string())?
                .prepare_new_pool(pool)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn store_addr(&self) -> Option<SocketAddr> {
        let url = self.server_url()?;
        let authority = url.split_once("://")?.1.split('/').next()?.to_owned();
        let with_port = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            authority
        } else {
            format!("{authority}:443")
        };
        std::net::ToSocketAddrs::to_socket_addrs(&with_port)
            .ok()?
            .next()
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
