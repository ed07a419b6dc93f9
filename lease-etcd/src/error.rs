//! Errors, and the classification of etcd's answers where they are born.

use leasehold_core::{ConfigError, Reason};
use tonic::Code;

use crate::tls::{TlsFailure, Transport};

/// Connecting or configuring the etcd strategy failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EtcdError {
    /// A setting is unusable; the message says which and what to use.
    #[error("invalid etcd lease configuration: {0}")]
    Config(#[from] ConfigError),
    /// etcd refused the credentials given with [`EtcdConfig::user`](crate::EtcdConfig::user).
    #[error(
        "authentication failed: etcd refused the credentials of user {user:?} ({detail}); check \
         the user name and the password (in the URL or its password_file), and that auth is \
         enabled on the cluster"
    )]
    Auth {
        /// The user name (never the password).
        user: String,
        /// etcd's answer.
        detail: String,
    },
    /// TLS, or its lack, stops every connection: a server certificate this
    /// client does not trust (another CA, expired, another host name), a
    /// client certificate the server refuses or does not get, a plain-text
    /// client at a TLS-only server or the reverse. Fix the setup: the
    /// message says how.
    #[error("cannot connect to etcd at {endpoints}: {what}; {fix}")]
    Tls {
        /// The endpoints, without credentials.
        endpoints: String,
        /// What failed.
        what: String,
        /// What to do.
        fix: String,
    },
    /// The client could not be set up (bad endpoint URL, TLS setup, an
    /// unreachable cluster while authenticating).
    #[error("cannot connect to etcd at {endpoints}: {detail}")]
    Connect {
        /// The endpoints, without credentials.
        endpoints: String,
        /// What failed.
        detail: String,
    },
    /// An operator call ([`EtcdStrategy::revoke`](crate::EtcdStrategy::revoke))
    /// failed or got no answer.
    #[error("etcd {what} failed: {detail}")]
    Request {
        /// The call.
        what: &'static str,
        /// What went wrong.
        detail: String,
    },
}

/// What an etcd error means for a lease operation.
#[derive(Debug)]
pub(crate) enum Class {
    /// Unreachable, timed out, no leader, overloaded: the outcome is unknown.
    Uncertain(String),
    /// etcd positively answered that the lease (or key) does not exist.
    NotFound(String),
    /// A precondition failed; on `LeaseGrant` with a client-chosen id this is
    /// etcd's "lease already exists" (pick another token).
    Precondition(String),
    /// Authentication or permission refused.
    Denied(String),
    /// The request itself was rejected (bad argument, too many txn ops, ...).
    Rejected(String),
    /// No connection could be made because of TLS, or the lack of it: a
    /// setup mistake, not a passing failure.
    Tls(TlsFailure),
}

impl Class {
    pub(crate) fn reason(&self) -> Reason {
        Reason::new(match self {
            Self::Uncertain(m) => format!("etcd unavailable: {m}"),
            Self::NotFound(m) => format!("etcd: not found: {m}"),
            Self::Precondition(m) => format!("etcd: failed precondition: {m}"),
            Self::Denied(m) => format!("etcd refused access: {m}"),
            Self::Rejected(m) => format!("etcd rejected the request: {m}"),
            Self::Tls(failure) => format!("TLS to etcd failed: {failure}"),
        })
    }
}

/// Classifies an `etcd-client` error: a failed TLS handshake by the error
/// types in its source chain ([`crate::tls::explain`]), the rest from its
/// gRPC status code (never from the text, except where `etcd-client` gives
/// no code: see the keep-alive). `transport` and `hosts` say how the client
/// connects, for the TLS messages.
pub(crate) fn classify(e: &etcd_client::Error, transport: &Transport, hosts: &str) -> Class {
    use etcd_client::Error as E;
    if let Some(failure) = crate::tls::explain(e, transport, hosts) {
        return Class::Tls(failure);
    }
    match e {
        E::GRpcStatus(status) => {
            let m = format!("{:?}: {}", status.code(), status.message());
            match status.code() {
                Code::NotFound => Class::NotFound(m),
                Code::FailedPrecondition => Class::Precondition(m),
                Code::PermissionDenied | Code::Unauthenticated => Class::Denied(m),
                Code::InvalidArgument
                | Code::OutOfRange
                | Code::AlreadyExists
                | Code::Unimplemented => Class::Rejected(m),
                Code::Ok
                | Code::Cancelled
                | Code::Unknown
                | Code::DeadlineExceeded
                | Code::ResourceExhausted
                | Code::Aborted
                | Code::Internal
                | Code::Unavailable
                | Code::DataLoss => Class::Uncertain(m),
            }
        }
        E::TransportError(t) => Class::Uncertain(format!("transport: {t}")),
        E::IoError(io) => Class::Uncertain(format!("io: {io}")),
        // etcd answers a keep-alive of an unknown (expired, revoked) lease with
        // TTL 0, which `LeaseClient::keep_alive` reports as this variant; its
        // only other source, a send on the request channel it just created,
        // cannot fail. So the variant itself is the positive answer.
        E::LeaseKeepAliveError(m) => Class::NotFound(format!("keep-alive: {m}")),
        E::WatchError(m) | E::Internal(m) => Class::Uncertain(m.clone()),
        other => Class::Rejected(other.to_string()),
    }
}

/// An operation that did not answer within the operation timeout.
pub(crate) fn timed_out(what: &str, after: std::time::Duration) -> Class {
    Class::Uncertain(format!("{what} did not answer within {after:?}"))
}

/// True when an attempt provably never reached etcd: no connection to the
/// endpoint could be made (tonic's `ConnectError`, or a refused connection:
/// typed checks on the source chain). A request is only written once the
/// connection stands.
pub(crate) fn never_sent(e: &etcd_client::Error) -> bool {
    let mut source = crate::tls::chain_start(e);
    while let Some(err) = source {
        if err.is::<tonic::ConnectError>() {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        source = err.source();
    }
    false
}

/// True when an attempt failed on this side of the wire, on a connection that
/// broke or could not be used (reset, closed, refused), rather than with an
/// answer from etcd: the request may or may not have reached etcd. Statuses
/// that tonic makes from a local error carry it as their source; statuses
/// decoded from etcd's answers carry none.
pub(crate) fn broken_connection(e: &etcd_client::Error) -> bool {
    use std::error::Error as _;
    match e {
        etcd_client::Error::GRpcStatus(status) => status.source().is_some(),
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        _ => false,
    }
}

/// What a claim answers for a failed call of class `class`.
pub(crate) fn acquire_error(class: Class) -> leasehold_core::AcquireError {
    match class {
        Class::Uncertain(_) | Class::NotFound(_) | Class::Precondition(_) => {
            leasehold_core::AcquireError::Unreachable(class.reason())
        }
        Class::Denied(m) => leasehold_core::AcquireError::Misconfigured {
            what: format!("etcd refused access: {m}"),
            fix: "grant the user's role read-write on the key prefix (etcdctl role \
                  grant-permission ROLE readwrite --prefix=true 'PREFIX/'), as the refusal says"
                .to_owned(),
        },
        Class::Tls(failure) => leasehold_core::AcquireError::Misconfigured {
            what: format!("TLS to etcd failed: {}", failure.what),
            fix: failure.fix,
        },
        Class::Rejected(m) => leasehold_core::AcquireError::Misconfigured {
            what: format!("etcd rejected the acquisition: {m}"),
            fix: "if etcd reports too many operations in a txn, lower candidates_per_txn or raise \
                  etcd's --max-txn-ops"
                .to_owned(),
        },
    }
}
