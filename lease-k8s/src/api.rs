//! The HTTP layer: one request at a time, bounded, classified where it is
//! born (never by matching error text).

use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use k8s_openapi::api::coordination::v1::Lease;
use serde_json::Value;
use tokio::time::Instant;

use crate::config::{KubeConfig, Source, public_url};
use crate::error::KubeError;
use crate::tls::{Shown, TlsFailure};

/// An answer from the API server (any status).
#[derive(Debug)]
pub(crate) struct Resp {
    pub(crate) status: u16,
    pub(crate) body: Bytes,
    /// `Retry-After`, in seconds, on a 429.
    pub(crate) retry_after: Option<u64>,
}

impl Resp {
    pub(crate) fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The Lease in the body.
    pub(crate) fn lease(&self) -> Result<Lease, String> {
        serde_json::from_slice(&self.body)
            .map_err(|e| format!("unreadable Lease in the answer: {e}"))
    }

    /// Whether the body is a Kubernetes `Status` object, as every answer of
    /// an API server's own is (a proxy's or a TLS port's is not).
    pub(crate) fn is_status(&self) -> bool {
        serde_json::from_slice::<Value>(&self.body).is_ok_and(|v| v["kind"] == "Status")
    }

    /// The server's message (a `Status` body), for people.
    pub(crate) fn message(&self) -> String {
        let text = serde_json::from_slice::<Value>(&self.body)
            .ok()
            .and_then(|v| v["message"].as_str().map(str::to_owned))
            .unwrap_or_else(|| {
                String::from_utf8_lossy(&self.body)
                    .chars()
                    .take(200)
                    .collect()
            });
        let mut out = format!("HTTP {}: {text}", self.status);
        if let Some(secs) = self.retry_after {
            out.push_str(&format!(" (Retry-After: {secs}s)"));
        }
        out
    }
}

/// A request that got no answer.
#[derive(Debug)]
pub(crate) enum NoAnswer {
    /// It provably never reached the server (connection refused).
    NotSent(String),
    /// It may have been applied: timed out, connection dropped mid-request.
    Unknown(String),
    /// It never reached the server: the TLS handshake was refused, by this
    /// client or by the server. A setup mistake, not a passing failure.
    Tls(TlsFailure, String),
}

impl NoAnswer {
    pub(crate) fn text(&self) -> &str {
        match self {
            Self::NotSent(m) | Self::Unknown(m) | Self::Tls(_, m) => m,
        }
    }
}

/// The Lease API of one namespace.
pub(crate) struct Api {
    client: kube::Client,
    leases: String,
    pub(crate) namespace: String,
    /// The server URL without credentials, for messages and identities.
    pub(crate) server: String,
    /// The server's `host:port`, to ask whether it speaks TLS.
    pub(crate) authority: String,
    /// The server's host, for TLS messages.
    host: String,
    /// The server URL is `http://`.
    pub(crate) plain: bool,
    /// What the client trusts and sends, in words.
    pub(crate) shown: Shown,
    pub(crate) op_timeout: Duration,
    #[cfg(feature = "stats")]
    pub(crate) requests: std::sync::atomic::AtomicU64,
}

impl Api {
    /// Builds the client: retries off, a read timeout, connect and write
    /// timeouts, all from the operation timeout.
    pub(crate) async fn connect(config: &KubeConfig) -> Result<Self, KubeError> {
        let fail = |server: &str, detail: String| KubeError::Connect {
            server: server.to_owned(),
            detail,
        };
        let mut kc = match &config.source {
            Source::Infer => kube::Config::infer().await.map_err(|e| {
                fail(
                    "(inferred)",
                    format!(
                        "no kubeconfig and not in a cluster: {e}; set KUBECONFIG, or run in a pod \
                         with a service account"
                    ),
                )
            })?,
            Source::Kubeconfig(path) => {
                let unusable = |detail: String| KubeError::Kubeconfig {
                    path: path.display().to_string(),
                    detail,
                };
                let file = kube::config::Kubeconfig::read_from(path)
                    .map_err(|e| unusable(format!("cannot read it: {e}")))?;
                kube::Config::from_custom_kubeconfig(file, &Default::default())
                    .await
                    .map_err(|e| unusable(e.to_string()))?
            }
            Source::Url(url) => {
                let uri = url
                    .parse()
                    .map_err(|e| fail(&public_url(url), format!("not a URL: {e}")))?;
                kube::Config::new(uri)
            }
            Source::Config(c) => (**c).clone(),
        };
        let server = public_url(&kc.cluster_url.to_string());
        let kubeconfig = match &config.source {
            Source::Kubeconfig(path) => Some(path.as_path()),
            _ => None,
        };
        let shown = Shown::of(&kc, kubeconfig);
        let plain = kc.cluster_url.scheme_str() == Some("http");
        let host = kc.cluster_url.host().unwrap_or_default().to_owned();
        let authority = kc.cluster_url.authority().map_or_else(
            || host.clone(),
            |a| match a.port_u16() {
                Some(_) => a.as_str().to_owned(),
                None => format!("{}:{}", a.as_str(), if plain { 80 } else { 443 }),
            },
        );
        kc.default_retry = false;
        kc.read_timeout = Some(config.op_timeout);
        kc.reset_reader_on_write = true;
        kc.connect_timeout = Some(config.op_timeout);
        kc.write_timeout = Some(config.op_timeout);
        let namespace = config
            .namespace
            .clone()
            .unwrap_or_else(|| kc.default_namespace.clone());
        crate::config::check_namespace(&namespace)?;
        let client = kube::Client::try_from(kc).map_err(|e| match kubeconfig {
            // Reading what the kubeconfig names (a token file) failed.
            Some(path) => KubeError::Kubeconfig {
                path: path.display().to_string(),
                detail: e.to_string(),
            },
            None => fail(&server, format!("cannot build the client: {e}")),
        })?;
        Ok(Self {
            client,
            leases: format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"),
            namespace,
            server,
            authority,
            host,
            plain,
            shown,
            op_timeout: config.op_timeout,
            #[cfg(feature = "stats")]
            requests: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Sends one request, bounded by `deadline` and the operation timeout.
    async fn call(
        &self,
        method: http::Method,
        uri: String,
        content_type: Option<&'static str>,
        body: Vec<u8>,
        deadline: Instant,
    ) -> Result<Resp, NoAnswer> {
        #[cfg(feature = "stats")]
        self.requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let bound = deadline.min(Instant::now() + self.op_timeout);
        let budget = bound.saturating_duration_since(Instant::now());
        let mut builder = http::Request::builder().method(method).uri(uri);
        if let Some(ct) = content_type {
            builder = builder.header(CONTENT_TYPE, ct);
        }
        let request = builder
            .body(kube::client::Body::from(body))
            .map_err(|e| NoAnswer::NotSent(format!("cannot build the request: {e}")))?;
        let exchange = async {
            let resp = self
                .client
                .send(request)
                .await
                .map_err(|e| classify(e, &self.shown, &self.host))?;
            let status = resp.status().as_u16();
            let retry_after = resp
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok());
            let body = resp
                .into_body()
                .collect_bytes()
                .await
                .map_err(|e| NoAnswer::Unknown(format!("the answer was cut off: {e}")))?;
            Ok(Resp {
                status,
                body,
                retry_after,
            })
        };
        match tokio::time::timeout_at(bound, exchange).await {
            Ok(r) => r,
            Err(_) => Err(NoAnswer::Unknown(format!("no answer within {budget:?}"))),
        }
    }

    pub(crate) async fn list(&self, selector: &str, deadline: Instant) -> Result<Resp, NoAnswer> {
        let uri = format!("{}?labelSelector={}", self.leases, encode(selector));
        self.call(http::Method::GET, uri, None, Vec::new(), deadline)
            .await
    }

    pub(crate) async fn get(&self, name: &str, deadline: Instant) -> Result<Resp, NoAnswer> {
        let uri = format!("{}/{name}", self.leases);
        self.call(http::Method::GET, uri, None, Vec::new(), deadline)
            .await
    }

    pub(crate) async fn create(
        &self,
        lease: &Value,
        dry_run: bool,
        deadline: Instant,
    ) -> Result<Resp, NoAnswer> {
        let uri = if dry_run {
            format!("{}?dryRun=All", self.leases)
        } else {
            self.leases.clone()
        };
        let body = serde_json::to_vec(lease).unwrap_or_default();
        self.call(
            http::Method::POST,
            uri,
            Some("application/json"),
            body,
            deadline,
        )
        .await
    }

    pub(crate) async fn json_patch(
        &self,
        name: &str,
        ops: &Value,
        deadline: Instant,
    ) -> Result<Resp, NoAnswer> {
        let uri = format!("{}/{name}", self.leases);
        let body = serde_json::to_vec(ops).unwrap_or_default();
        self.call(
            http::Method::PATCH,
            uri,
            Some("application/json-patch+json"),
            body,
            deadline,
        )
        .await
    }

    pub(crate) async fn merge_patch(
        &self,
        name: &str,
        patch: &Value,
        deadline: Instant,
    ) -> Result<Resp, NoAnswer> {
        let uri = format!("{}/{name}", self.leases);
        let body = serde_json::to_vec(patch).unwrap_or_default();
        self.call(
            http::Method::PATCH,
            uri,
            Some("application/merge-patch+json"),
            body,
            deadline,
        )
        .await
    }

    /// A SelfSubjectAccessReview: may this identity use `verb` on Leases here?
    pub(crate) async fn access_review(
        &self,
        verb: &str,
        deadline: Instant,
    ) -> Result<Resp, NoAnswer> {
        let review = serde_json::json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {
                "namespace": self.namespace,
                "verb": verb,
                "group": "coordination.k8s.io",
                "resource": "leases",
            }},
        });
        let body = serde_json::to_vec(&review).unwrap_or_default();
        self.call(
            http::Method::POST,
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews".to_owned(),
            Some("application/json"),
            body,
            deadline,
        )
        .await
    }
}

/// Percent-encodes a label selector for the query string.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Classifies a client error: a handshake rustls refused, or a refused
/// connection, provably never reached the server (typed checks on the
/// source chain); anything else may have.
fn classify(e: kube::Error, shown: &Shown, host: &str) -> NoAnswer {
    if let Some(failure) = crate::tls::explain(&e, shown, host) {
        let text = format!("TLS: {}; {}", failure.what, failure.fix);
        return NoAnswer::Tls(failure, text);
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return NoAnswer::NotSent(format!("connection refused: {e}"));
        }
        source = err.source();
    }
    NoAnswer::Unknown(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_encoded() {
        assert_eq!(encode("leasehold/pool=a.b"), "leasehold%2Fpool%3Da.b");
    }
}
