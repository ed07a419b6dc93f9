//! Store URLs: the schemes this backend accepts and what their parts mean.

use std::path::PathBuf;

use leasehold_core::ConfigError;
use leasehold_core::url::StoreUrl;

use crate::config::{KubeConfig, Source, check_namespace};
use crate::error::KubeError;

/// The accepted shape, quoted by every URL error.
const FORM: &str = "k8s://HOST:PORT[/NAMESPACE] (plain HTTP), k8s+https://HOST:PORT[/NAMESPACE], \
                    or k8s:///NAMESPACE for the kubeconfig or in-cluster account, with option \
                    ?op_timeout=3s";

impl KubeConfig {
    /// The URL schemes [`KubeConfig::from_url`] accepts.
    pub const SCHEMES: &[&str] = &["k8s", "k8s+http", "k8s+https", "kubernetes"];

    /// Settings from a store URL (see the crate README, "URL"):
    /// `k8s://HOST:PORT` (also `k8s+http://`, `kubernetes://`) is an API
    /// server reached over plain HTTP without credentials, such as `kubectl
    /// proxy`; `k8s+https://HOST:PORT` the same over TLS; `k8s://` without
    /// a host is [`KubeConfig::infer`]. The path names the namespace
    /// (`k8s://127.0.0.1:8001/ids`, `k8s:///ids`). Option: `op_timeout=500ms`
    /// or `=2s` ([`KubeConfig::op_timeout`]).
    ///
    /// Errors ([`KubeError::Config`]) name what is accepted: an unknown
    /// scheme, credentials in the URL (use a kubeconfig), a bad port or
    /// namespace, an unknown option.
    ///
    /// ```
    /// use leasehold_k8s::KubeConfig;
    /// let config = KubeConfig::from_url("k8s://127.0.0.1:8001/ids?op_timeout=2s")?;
    /// assert!(format!("{config:?}").contains("http://127.0.0.1:8001"));
    /// # Ok::<(), leasehold_k8s::KubeError>(())
    /// ```
    pub fn from_url(url: &str) -> Result<Self, KubeError> {
        let mut parts = StoreUrl::parse(url, Self::SCHEMES, FORM)?;
        if parts.user().is_some() {
            return Err(ConfigError::described(
                "url",
                format!(
                    "{}:// URLs carry no credentials; put them in a kubeconfig \
                     (KubeConfig::from_kubeconfig)",
                    parts.scheme()
                ),
            )
            .into());
        }
        let source = if parts.hosts().is_empty() {
            Source::Infer
        } else {
            let host = parts.require_one_host(FORM)?;
            let proto = if parts.scheme() == "k8s+https" {
                "https"
            } else {
                "http"
            };
            Source::Url(format!("{proto}://{host}"))
        };
        let namespace = parts.path().trim_matches('/').to_owned();
        let op_timeout = parts.take_duration("op_timeout")?;
        // The API server keeps what it acknowledged (etcd below it): every
        // policy is accepted, and none changes anything.
        parts.take_durability()?;
        parts.refuse_unknown_options("op_timeout, durability")?;
        let mut config = Self::with(source);
        if !namespace.is_empty() {
            check_namespace(&namespace)?;
            config = config.namespace(namespace);
        }
        if let Some(timeout) = op_timeout {
            config = config.op_timeout(timeout);
        }
        Ok(config)
    }

    /// Where this configuration would infer (from [`KubeConfig::infer`], or
    /// a URL without a host), reads the kubeconfig file at `path` instead;
    /// one that names its API server or a kubeconfig keeps it. For a tool
    /// whose kubeconfig option completes a `k8s://` URL.
    pub fn or_kubeconfig(mut self, path: impl Into<PathBuf>) -> Self {
        if matches!(self.source, Source::Infer) {
            self.source = Source::Kubeconfig(path.into());
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn source(c: &KubeConfig) -> String {
        match &c.source {
            Source::Infer => "infer".into(),
            Source::Kubeconfig(p) => format!("kubeconfig {}", p.display()),
            Source::Url(u) => u.clone(),
            Source::Config(_) => "config".into(),
        }
    }

    #[test]
    fn accepted_urls_set_the_fields() {
        let default = crate::KubeStrategy::DEFAULT_OP_TIMEOUT;
        for (url, src, namespace, op_timeout) in [
            (
                "k8s://127.0.0.1:8001",
                "http://127.0.0.1:8001",
                None,
                default,
            ),
            (
                "k8s+http://h:8001/ids",
                "http://h:8001",
                Some("ids"),
                default,
            ),
            ("kubernetes://h/ids/", "http://h", Some("ids"), default),
            (
                "k8s+https://10.0.0.1:6443/ids?op_timeout=2s",
                "https://10.0.0.1:6443",
                Some("ids"),
                Duration::from_secs(2),
            ),
            ("k8s://", "infer", None, default),
            ("K8S:///ids", "infer", Some("ids"), default),
        ] {
            let c = KubeConfig::from_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(
                (source(&c).as_str(), c.namespace.as_deref(), c.op_timeout),
                (src, namespace, op_timeout),
                "{url}"
            );
        }
        let c = KubeConfig::from_url("k8s:///ids")
            .unwrap()
            .or_kubeconfig("/k");
        assert_eq!(source(&c), "kubeconfig /k");
        let c = KubeConfig::from_url("k8s://h:1")
            .unwrap()
            .or_kubeconfig("/k");
        assert_eq!(source(&c), "http://h:1");
        assert_eq!(c.server_url(), Some("http://h:1"));
        assert_eq!(
            KubeConfig::from_url("k8s:///ids").unwrap().server_url(),
            None
        );
    }

    #[test]
    fn refused_urls_say_what_is_accepted() {
        for (url, needle) in [
            (
                "k8:///ids",
                "unknown scheme \"k8\"; expected one of k8s, k8s+http, k8s+https, kubernetes",
            ),
            ("https://h:6443", "unknown scheme \"https\""),
            ("h:6443", "it has no scheme; expected one of k8s"),
            (
                "k8s://u:tok@h:6443",
                "carry no credentials; put them in a kubeconfig",
            ),
            ("k8s://h:64k3", "bad port \"64k3\" of host \"h\""),
            ("k8s://a,b", "takes one host"),
            ("k8s://h/Ids_1", "invalid `namespace`"),
            ("k8s://h/a/b", "invalid `namespace`"),
            (
                "k8s://h?namespace=ids",
                "unknown query option \"namespace\"; this URL takes op_timeout, durability",
            ),
            ("k8s://h?op_timeout=2", "op_timeout=500ms or op_timeout=2s"),
        ] {
            let e = KubeConfig::from_url(url).unwrap_err().to_string();
            assert!(e.contains(needle), "{url}: {e}");
        }
    }
}
