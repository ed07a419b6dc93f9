//! The checks [`KubeStrategy::connect`](crate::KubeStrategy::connect) runs:
//! RBAC verbs, resourceVersion format, namespace.

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::api::{Api, NoAnswer, Resp};
use crate::error::KubeError;

/// The verbs the strategy uses on Leases: exactly the Role in `deploy/`.
pub const VERBS: [&str; 4] = ["get", "list", "create", "patch"];

/// The name of the Lease a dry-run create uses to prove the namespace exists.
const PROBE: &str = "leasehold-preflight";

pub(crate) async fn run(api: &Api) -> Result<(), KubeError> {
    let deadline = Instant::now() + api.op_timeout;
    // One access review per verb, all at once. A server that refuses access
    // reviews themselves leaves the check to the requests below.
    let (get, list, create, patch) = tokio::join!(
        api.access_review("get", deadline),
        api.access_review("list", deadline),
        api.access_review("create", deadline),
        api.access_review("patch", deadline),
    );
    for (verb, answer) in VERBS.into_iter().zip([get, list, create, patch]) {
        let resp = match answer {
            Ok(resp) => resp,
            Err(e) => return Err(unanswered(api, "access review", e).await),
        };
        if let Some(refusal) = refused(api, &resp).await {
            return Err(refusal);
        }
        if !resp.ok() {
            continue;
        }
        let review: Value = serde_json::from_slice(&resp.body).unwrap_or(Value::Null);
        if review["status"]["allowed"] == Value::Bool(false) {
            let reason = review["status"]["reason"].as_str().unwrap_or("");
            return Err(KubeError::Forbidden {
                verb,
                namespace: api.namespace.clone(),
                detail: if reason.is_empty() {
                    String::new()
                } else {
                    format!("; the server says: {reason}")
                },
            });
        }
    }
    let forbidden = |verb, detail: String| KubeError::Forbidden {
        verb,
        namespace: api.namespace.clone(),
        detail: format!("; the server says: {detail}"),
    };
    let resp = match api.list("", deadline).await {
        Ok(resp) => resp,
        Err(e) => return Err(unanswered(api, "LIST leases", e).await),
    };
    if let Some(refusal) = refused(api, &resp).await {
        return Err(refusal);
    }
    match resp.status {
        200 => {
            let list: Value = serde_json::from_slice(&resp.body).unwrap_or(Value::Null);
            let rv = list["metadata"]["resourceVersion"].as_str().unwrap_or("");
            if rv.parse::<u64>().is_err() {
                return Err(KubeError::OpaqueResourceVersion { rv: rv.to_owned() });
            }
        }
        403 => return Err(forbidden("list", resp.message())),
        _ => {
            return Err(KubeError::Request {
                what: "LIST leases",
                detail: resp.message(),
            });
        }
    }
    let probe = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": PROBE},
        "spec": {"leaseDurationSeconds": 1},
    });
    let resp = match api.create(&probe, true, deadline).await {
        Ok(resp) => resp,
        Err(e) => return Err(unanswered(api, "dry-run create", e).await),
    };
    if let Some(refusal) = refused(api, &resp).await {
        return Err(refusal);
    }
    match resp.status {
        // Created in a dry run (nothing stored), or a probe exists already.
        200 | 201 | 409 => Ok(()),
        404 => Err(KubeError::MissingNamespace {
            namespace: api.namespace.clone(),
            server: api.server.clone(),
        }),
        403 => Err(forbidden("create", resp.message())),
        _ => Err(KubeError::Request {
            what: "dry-run create",
            detail: resp.message(),
        }),
    }
}

/// The error for an answer that says this client cannot be served at all:
/// 401 (no credentials it accepts), or, from a server named with
/// `http://`, a 400 that is no API answer, from a port that answers a TLS
/// handshake (Go's "Client sent an HTTP request to an HTTPS server").
async fn refused(api: &Api, resp: &Resp) -> Option<KubeError> {
    if resp.status == 401 {
        return Some(KubeError::Unauthorized {
            server: api.server.clone(),
            credentials: api.shown.credentials.clone(),
        });
    }
    if api.plain && resp.status == 400 && !resp.is_status() {
        return takes_https_only(api).await;
    }
    None
}

/// The error for a request that got no answer: a refused handshake says
/// why; a plain-HTTP request whose connection broke at a port that answers
/// a TLS handshake says to use HTTPS; anything else is
/// [`KubeError::Connect`].
async fn unanswered(api: &Api, what: &'static str, e: NoAnswer) -> KubeError {
    match e {
        NoAnswer::Tls(failure, _) => KubeError::Tls {
            server: api.server.clone(),
            what: failure.what,
            fix: failure.fix,
        },
        NoAnswer::Unknown(_) if api.plain => match takes_https_only(api).await {
            Some(e) => e,
            None => KubeError::Connect {
                server: api.server.clone(),
                detail: format!("{what}: {}", e.text()),
            },
        },
        e => KubeError::Connect {
            server: api.server.clone(),
            detail: format!("{what}: {}", e.text()),
        },
    }
}

/// [`KubeError::Tls`] when the server's port answers a TLS handshake.
async fn takes_https_only(api: &Api) -> Option<KubeError> {
    crate::tls::speaks_tls(&api.authority, api.op_timeout)
        .await
        .then(|| KubeError::Tls {
            server: api.server.clone(),
            what: format!(
                "the API server at {} takes HTTPS only: this client spoke plain HTTP (an http:// \
                 server in the kubeconfig, or k8s://HOST:PORT) and the server answers a TLS \
                 handshake",
                api.authority
            ),
            fix: "write https:// in the kubeconfig's server, with the cluster's \
                  certificate-authority and the user's client certificate or token"
                .to_owned(),
        })
}

#[cfg(test)]
mod tests {
    /// The shipped Role grants exactly the verbs the strategy uses.
    #[test]
    fn the_shipped_role_has_exactly_the_verbs_used() {
        let yaml = include_str!("../deploy/rbac.yaml");
        let line = yaml
            .lines()
            .find(|l| l.trim_start().starts_with("verbs:"))
            .expect("a verbs line");
        let verbs: Vec<&str> = line
            .split(['[', ']', ',', '"'])
            .map(str::trim)
            .filter(|v| !v.is_empty() && !v.ends_with(':'))
            .collect();
        assert_eq!(verbs, super::VERBS);
    }
}
