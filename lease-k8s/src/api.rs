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
}

impl NoAnswer {
    pub(crate) fn text(&self) -> &str {
        match self {
            Self::NotSent(m) | Self::Unknown(m) => m,
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
                let file = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                    fail(
                        &path.display().to_string(),
                        format!("cannot read the kubeconfig: {e}"),
                    )
                })?;
                kube::Config::from_custom_kubeconfig(file, &Default::default())
                    .await
                    .map_err(|e| {
                        fail(
                            &path.display().to_string(),
                            format!("unusable kubeconfig: {e}"),
                        )
                    })?
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
        let client = kube::Client::try_from(kc)
            .map_err(|e| fail(&server, format!("cannot build the client: {e}")))?;
        Ok(Self {
            client,
            leases: format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"),
            namespace,
            server,
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
            let resp = self.client.send(request).await.map_err(classify)?;
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

/// Classifies a client error: a refused connection provably never reached
/// the server (typed check on the `io::Error` in the source chain); anything
/// else may have.
fn classify(e: kube::Error) -> NoAnswer {
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
