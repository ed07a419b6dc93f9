//! The Kubernetes driver: `k8s://`, `k8s+http://`, `k8s+https://`,
//! `kubernetes://`, read into [`KubeConfig`].

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use leasehold_core::credentials::CredentialSource;
use leasehold_core::drivers::{
    ConnectError, Driver, DriverConfig, bool_value, duration_value, unknown_key,
};
use leasehold_core::{BoxFuture, Operate};

use crate::{KubeConfig, KubeError, KubeStrategy};

/// Kubernetes Leases (`coordination.k8s.io/v1`).
pub static DRIVER: KubeDriver = KubeDriver;

/// The driver of [`DRIVER`].
#[derive(Clone, Copy, Debug)]
pub struct KubeDriver;

impl Driver for KubeDriver {
    fn store(&self) -> &'static str {
        "Kubernetes"
    }

    fn schemes(&self) -> &'static [&'static str] {
        KubeConfig::SCHEMES
    }

    fn parse_url(&self, url: &str) -> Result<Box<dyn DriverConfig>, ConnectError> {
        KubeConfig::from_url(url)
            .map(|c| Box::new(c) as Box<dyn DriverConfig>)
            .map_err(|e| match e {
                KubeError::Config(c) => ConnectError::bad_url(url, c),
                other => ConnectError::bad_url(url, other),
            })
    }

    fn http_form(&self, tls: bool) -> Option<&'static str> {
        Some(if tls {
            "k8s+https://HOST:6443 (or k8s:// alone, for the kubeconfig's server and \
             credentials) for a Kubernetes API server"
        } else {
            "k8s://HOST:PORT for a Kubernetes API server in plain HTTP (kubectl proxy)"
        })
    }
}

/// The option keys [`KubeConfig`] takes by key and value.
const KEYS: &[&str] = &[
    "op_timeout",
    "refuse_at_connect",
    "durability",
    "namespace",
    "kubeconfig",
    "preflight",
];

impl DriverConfig for KubeConfig {
    fn clone_config(&self) -> Box<dyn DriverConfig> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let this = self.clone();
        *self = match key {
            "op_timeout" => this.op_timeout(duration_value(key, value)?),
            // It never forgets: every policy is accepted, and none changes
            // anything.
            "durability" => value
                .parse::<leasehold_core::DurabilityPolicy>()
                .map(|_| this)?,
            // The API server keeps what it acknowledged (etcd below it):
            // there is no server to refuse for its durability.
            "refuse_at_connect" => bool_value(key, value).map(|_| this)?,
            "namespace" => {
                crate::config::check_namespace(value).map_err(|e| e.to_string())?;
                this.namespace(value)
            }
            "kubeconfig" => this.or_kubeconfig(value),
            "preflight" => this.preflight(bool_value(key, value)?),
            _ => return Err(unknown_key("Kubernetes", key, KEYS)),
        };
        Ok(())
    }

    fn keys(&self) -> &'static [&'static str] {
        KEYS
    }

    fn look_only(&mut self, _timeout: Duration) -> Result<(), ConnectError> {
        Ok(())
    }

    fn credentials(&mut self, source: CredentialSource) -> Result<(), String> {
        Err(format!(
            "{} cannot be used with Kubernetes, which takes no password; its credentials come \
             from the kubeconfig or the pod's service account (tokens, client certificates, \
             exec plugins, which kube refreshes itself)",
            source.describe()
        ))
    }

    fn connect(
        self: Box<Self>,
        shown: String,
    ) -> BoxFuture<'static, Result<Arc<dyn Operate>, ConnectError>> {
        Box::pin(async move {
            match KubeStrategy::connect(*self).await {
                Ok(s) => Ok(Arc::new(s) as Arc<dyn Operate>),
                Err(e) => Err(connect_error(&shown, e)),
            }
        })
    }

    #[cfg(feature = "harness")]
    fn harness(
        &self,
    ) -> Option<BoxFuture<'static, Result<Box<dyn leasehold_core::drivers::Harness>, String>>> {
        Some(Box::pin(crate::harness::KubeHarness::connect(self.clone())))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// What a failed connect means to the caller.
fn connect_error(shown: &str, e: KubeError) -> ConnectError {
    let url = shown.to_owned();
    match e {
        KubeError::Config(c) => ConnectError::BadUrl {
            url,
            why: c.to_string(),
        },
        e @ KubeError::Connect { .. } => ConnectError::Unreachable {
            message: format!("{shown}: {e}"),
            url,
        },
        e @ KubeError::Unauthorized { .. } => ConnectError::Authentication {
            message: format!("{shown}: {e}"),
            url,
        },
        e => ConnectError::Refused {
            message: format!("{shown}: {e}"),
            url,
        },
    }
}
