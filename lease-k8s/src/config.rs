//! Where the API server is, which namespace holds the Leases, and the bounds
//! on every call.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use leasehold_core::ConfigError;

/// How to reach the API server.
#[derive(Clone)]
pub(crate) enum Source {
    /// `kube::Config::infer`: `$KUBECONFIG`, `~/.kube/config`, then the
    /// in-cluster service account.
    Infer,
    /// A kubeconfig file.
    Kubeconfig(PathBuf),
    /// A plain URL without credentials (a local proxy such as `kubectl
    /// proxy`, or a test server).
    Url(String),
    /// A ready `kube::Config`.
    Config(Box<kube::Config>),
}

/// How [`KubeStrategy`](crate::KubeStrategy) reaches the API server and where
/// it keeps the Leases.
///
/// Credentials stay inside `kube::Config` and never appear in `Debug` output,
/// error messages or [`Strategy::identity`](leasehold_core::Strategy::identity).
///
/// ```
/// use leasehold_k8s::KubeConfig;
/// use std::time::Duration;
/// let config = KubeConfig::infer()
///     .namespace("ids")
///     .op_timeout(Duration::from_secs(2));
/// assert!(format!("{config:?}").contains("ids"));
/// ```
#[derive(Clone)]
#[must_use]
pub struct KubeConfig {
    pub(crate) source: Source,
    pub(crate) namespace: Option<String>,
    pub(crate) op_timeout: Duration,
    pub(crate) takeover_margin: Duration,
    pub(crate) preflight: bool,
}

impl KubeConfig {
    pub(crate) fn with(source: Source) -> Self {
        Self {
            source,
            namespace: None,
            op_timeout: DEFAULT_OP_TIMEOUT,
            takeover_margin: DEFAULT_TAKEOVER_MARGIN,
            preflight: true,
        }
    }

    /// The usual chain: `$KUBECONFIG` or `~/.kube/config`, else the pod's
    /// service account (in cluster). The namespace defaults to the one these
    /// name (in a pod: the pod's own namespace).
    pub fn infer() -> Self {
        Self::with(Source::Infer)
    }

    /// The kubeconfig file at `path` (its current context).
    pub fn from_kubeconfig(path: impl Into<PathBuf>) -> Self {
        Self::with(Source::Kubeconfig(path.into()))
    }

    /// The API server at a plain `http://` or `https://` URL that needs no
    /// credentials, such as `kubectl proxy` (`http://127.0.0.1:8001`) or a
    /// test server. For a store URL (`k8s://…`), see [`KubeConfig::from_url`].
    pub fn from_server_url(url: impl Into<String>) -> Self {
        Self::with(Source::Url(url.into()))
    }

    /// The same as [`KubeConfig::from_server_url`], under its older name:
    /// it constructs, it is no getter, and it takes the API server's own
    /// `http(s)://` URL, not a store URL ([`KubeConfig::from_url`]).
    pub fn url(url: impl Into<String>) -> Self {
        Self::from_server_url(url)
    }

    /// A `kube::Config` built by the caller. Its retries are turned off and
    /// its read timeout set from [`Self::op_timeout`] all the same.
    pub fn from_kube(config: kube::Config) -> Self {
        Self::with(Source::Config(Box::new(config)))
    }

    /// The API server's own `http(s)://` URL when this configuration names
    /// one (`k8s://HOST:PORT` names `http://HOST:PORT`); `None` when the
    /// server comes from a kubeconfig, the cluster, or a `kube::Config`.
    /// For a client that talks to the same server beside the strategy.
    #[must_use]
    pub fn server_url(&self) -> Option<&str> {
        match &self.source {
            Source::Url(url) => Some(url),
            _ => None,
        }
    }

    /// The namespace that holds the Leases (default: the source's).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Bounds every request (default
    /// [`KubeStrategy::DEFAULT_OP_TIMEOUT`](crate::KubeStrategy::DEFAULT_OP_TIMEOUT));
    /// a request is also never allowed to outlive the lease it serves.
    pub fn op_timeout(mut self, timeout: Duration) -> Self {
        self.op_timeout = timeout;
        self
    }

    /// Extra time an observer waits past a Lease's duration before taking it
    /// over (default 1 s; 2 % of the duration is added on top, for clock
    /// rates). Raise it when clocks of the nodes may run at rates further
    /// apart.
    pub fn takeover_margin(mut self, margin: Duration) -> Self {
        self.takeover_margin = margin;
        self
    }

    /// Whether [`KubeStrategy::connect`](crate::KubeStrategy::connect) checks
    /// the namespace, the RBAC verbs and the resourceVersion format (default
    /// true). Without it, the same mistakes surface as final errors of the
    /// first acquisition.
    pub fn preflight(mut self, check: bool) -> Self {
        self.preflight = check;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.op_timeout.is_zero() {
            return Err(ConfigError::new(
                "op_timeout",
                "0s",
                "a positive bound such as 3s",
            ));
        }
        if let Some(ns) = &self.namespace {
            check_namespace(ns)?;
        }
        Ok(())
    }
}

/// Waited past a Lease's duration before a takeover, by default.
pub const DEFAULT_TAKEOVER_MARGIN: Duration = Duration::from_secs(1);

/// The default bound on any single request
/// ([`KubeStrategy::DEFAULT_OP_TIMEOUT`](crate::KubeStrategy::DEFAULT_OP_TIMEOUT)).
pub(crate) const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(3);

pub(crate) fn check_namespace(ns: &str) -> Result<(), ConfigError> {
    let b = ns.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-';
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(
            "namespace",
            format!("{ns:?}"),
            "a Kubernetes namespace name: 1 to 63 lowercase letters, digits or '-', starting and \
             ending with a letter or digit",
        ))
    }
}

impl fmt::Debug for KubeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::Infer => "infer".to_owned(),
            Source::Kubeconfig(p) => format!("kubeconfig {}", p.display()),
            Source::Url(u) => format!("url {}", public_url(u)),
            // kube::Config's own Debug would print its auth info.
            Source::Config(c) => format!("kube::Config for {}", c.cluster_url),
        };
        f.debug_struct("KubeConfig")
            .field("source", &source)
            .field("namespace", &self.namespace)
            .field("op_timeout", &self.op_timeout)
            .field("takeover_margin", &self.takeover_margin)
            .field("preflight", &self.preflight)
            .finish()
    }
}

pub(crate) use leasehold_core::url::redacted as public_url;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_credentials() {
        assert_eq!(
            public_url("https://u:p@example.invalid:6443/x?token=t0k"),
            "https://u:***@example.invalid:6443/x?token=***"
        );
        assert_eq!(public_url("http://127.0.0.1:1"), "http://127.0.0.1:1");
    }

    #[test]
    fn debug_shows_no_credentials() {
        let mut kc = kube::Config::new("https://10.0.0.1:6443".parse().unwrap());
        kc.auth_info.token = Some("sekrit-token".to_owned().into());
        let text = format!("{:?}", KubeConfig::from_kube(kc));
        assert!(!text.contains("sekrit"), "{text}");
        let text = format!("{:?}", KubeConfig::url("https://user:pw@example.invalid"));
        assert!(!text.contains("pw"), "{text}");
    }

    #[test]
    fn namespaces_are_checked() {
        assert!(check_namespace("ids").is_ok());
        let e = check_namespace("Ids_1").unwrap_err();
        assert!(e.to_string().contains("lowercase"), "{e}");
        assert!(
            KubeConfig::infer()
                .op_timeout(Duration::ZERO)
                .validate()
                .is_err()
        );
    }
}
