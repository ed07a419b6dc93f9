//! The checks [`KubeStrategy::connect`](crate::KubeStrategy::connect) runs:
//! RBAC verbs, resourceVersion format, namespace.

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::api::{Api, NoAnswer};
use crate::error::KubeError;

/// The verbs the strategy uses on Leases: exactly the Role in `deploy/`.
pub const VERBS: [&str; 4] = ["get", "list", "create", "patch"];

/// The name of the Lease a dry-run create uses to prove the namespace exists.
const PROBE: &str = "leasehold-preflight";

pub(crate) async fn run(api: &Api) -> Result<(), KubeError> {
    let deadline = Instant::now() + api.op_timeout;
    let no_answer = |what: &'static str, e: NoAnswer| KubeError::Connect {
        server: api.server.clone(),
        detail: format!("{what}: {}", e.text()),
    };
    // One access review per verb, all at once. A server that refuses access
    // reviews themselves leaves the check to the requests below.
    let (get, list, create, patch) = tokio::join!(
        api.access_review("get", deadline),
        api.access_review("list", deadline),
        api.access_review("create", deadline),
        api.access_review("patch", deadline),
    );
    for (verb, answer) in VERBS.into_iter().zip([get, list, create, patch]) {
        let resp = answer.map_err(|e| no_answer("access review", e))?;
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
    let resp = api
        .list("", deadline)
        .await
        .map_err(|e| no_answer("LIST leases", e))?;
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
    let resp = api
        .create(&probe, true, deadline)
        .await
        .map_err(|e| no_answer("dry-run create", e))?;
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
