//! Errors of connecting and configuring the Kubernetes strategy.

use leasehold_core::ConfigError;

/// Connecting to the API server or checking the setup failed. Every variant
/// but [`KubeError::Connect`] and [`KubeError::Request`] is final: fix the
/// setup, the message says how.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KubeError {
    /// A setting is unusable; the message says which and what to use.
    #[error("invalid Kubernetes lease configuration: {0}")]
    Config(#[from] ConfigError),
    /// TLS, or its lack, stops every connection: a server certificate this
    /// client does not trust (another CA, expired, another host name), a
    /// client certificate refused in the handshake, plain HTTP to a server
    /// that takes HTTPS only. Fix the kubeconfig or the server: the message
    /// says how.
    #[error("cannot connect to the Kubernetes API server at {server}: {what}; {fix}")]
    Tls {
        /// The server URL (without credentials).
        server: String,
        /// What failed.
        what: String,
        /// What to do.
        fix: String,
    },
    /// The API server accepts none of the credentials this client sent
    /// (401 Unauthorized): a client certificate its client CA did not
    /// sign, a wrong or expired token, or none at all.
    #[error(
        "authentication failed: the Kubernetes API server at {server} does not accept this \
         client's credentials (401 \
         Unauthorized; this client sent {credentials}); give the kubeconfig's user a client \
         certificate signed by the cluster's client CA (client-certificate and client-key, or \
         their -data forms) or a valid bearer token (token or tokenFile; in a pod, the service \
         account's)"
    )]
    Unauthorized {
        /// The server URL (without credentials).
        server: String,
        /// What this client sent, in words (paths and field names, never a
        /// secret).
        credentials: String,
    },
    /// The kubeconfig cannot be used: a file it names (certificate
    /// authority, client certificate or key, token file) cannot be read or
    /// used.
    #[error(
        "the kubeconfig {path} cannot be used: {detail}; correct the entry it names, or name \
         another kubeconfig"
    )]
    Kubeconfig {
        /// The kubeconfig file.
        path: String,
        /// What kube reported (it names the entry and the file).
        detail: String,
    },
    /// The client could not be set up or the API server did not answer.
    #[error("cannot reach the Kubernetes API server at {server}: {detail}")]
    Connect {
        /// The server URL (without credentials).
        server: String,
        /// What failed.
        detail: String,
    },
    /// The namespace that should hold the Leases does not exist.
    #[error(
        "namespace {namespace:?} does not exist on {server}; create it (kubectl create namespace \
         {namespace}) or configure the namespace the Leases should live in"
    )]
    MissingNamespace {
        /// The namespace.
        namespace: String,
        /// The server URL (without credentials).
        server: String,
    },
    /// The identity the client runs as may not use a verb on Leases.
    #[error(
        "RBAC: this identity may not `{verb}` coordination.k8s.io/leases in namespace \
         {namespace:?}{detail}; apply lease-k8s/deploy/rbac.yaml (a Role with get, list, create \
         and patch on leases, bound to the pod's ServiceAccount)"
    )]
    Forbidden {
        /// The missing verb.
        verb: &'static str,
        /// The namespace.
        namespace: String,
        /// The server's reason, if it gave one (starts with "; ").
        detail: String,
    },
    /// The API server's resourceVersions are not integers, so they cannot
    /// be fences.
    #[error(
        "the API server answered resourceVersion {rv:?}, which is not an integer; leasehold-k8s \
         uses resourceVersions as fences and needs a kube-apiserver backed by etcd (every release \
         so far, guaranteed from Kubernetes 1.35 by KEP-5504); use another lease store with this \
         server"
    )]
    OpaqueResourceVersion {
        /// What the server answered.
        rv: String,
    },
    /// A request failed (while revoking, or checking the setup).
    #[error("Kubernetes API request {what} failed: {detail}")]
    Request {
        /// Which request.
        what: &'static str,
        /// What went wrong.
        detail: String,
    },
}
