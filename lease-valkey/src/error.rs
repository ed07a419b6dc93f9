//! Errors, and the classification of every failure where it is born.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use fred::error::{Error as FredError, ErrorKind};
use leasehold_core::ConfigError;

/// Why [`ValkeyStrategy::connect`](crate::ValkeyStrategy::connect) or an
/// administrative call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ValkeyError {
    /// A setting is invalid: the URL, the key prefix (1 to 64 characters of
    /// `A-Z a-z 0-9 _ - . :`) or a zero operation timeout. Final.
    #[error("invalid Valkey lease configuration: {0}")]
    Config(#[from] ConfigError),
    /// The server did not answer in time, or the connection failed.
    #[error(
        "cannot reach {url} (gave up after {timeout:?}): {reason}; check that the server runs and the address is right"
    )]
    Unreachable {
        /// The URL, without credentials.
        url: String,
        /// The operation timeout.
        timeout: Duration,
        /// What went wrong.
        reason: String,
    },
    /// TLS failed, or the server takes only TLS and the URL is plain text:
    /// the server's certificate was refused (not signed by a trusted CA,
    /// expired, for another host name), the server refused the client
    /// certificate or asked for one that was not given, or one side speaks
    /// TLS and the other plain text. Final until the configuration or the
    /// certificates are fixed; the message names the fix. Nothing falls back
    /// to plain text.
    #[error("{}", tls_text(url, failure))]
    Tls {
        /// The URL, without credentials.
        url: String,
        /// What failed, and the fix.
        failure: TlsFailure,
    },
    /// The server may evict keys (`maxmemory-policy` is not `noeviction`),
    /// and [`ValkeyConfig::allow_eviction`](crate::ValkeyConfig::allow_eviction)
    /// was not set. Final. The message is a short first line, then the
    /// reason, the fix and the opt-in, one per line.
    #[error("{}", eviction_text(server, policy))]
    Eviction {
        /// The server, e.g. `Redis 7.0.15`.
        server: String,
        /// The policy it reported.
        policy: String,
    },
    /// The server may forget writes it acknowledged (it does not run
    /// `appendonly yes` with `appendfsync always`, nor `appendonly yes` with
    /// `appendfsync everysec` on a server with `WAITAOF`, each with
    /// `no-appendfsync-on-rewrite no`, or `CONFIG GET` could not read them). A restart would then lose the pool's recorded restart
    /// span with its leases, so the restart guard cannot know how long the
    /// holders it forgot may still generate: refused unless the
    /// [`ValkeyConfig::durability`](crate::ValkeyConfig::durability) policy
    /// is `OneTimingPerPool` or `Throwaway`, and always with the deprecated
    /// [`ValkeyConfig::require_durable`](crate::ValkeyConfig::require_durable)`(true)`. Final.
    /// The message is a short first line, then the settings found, the
    /// fixes this server can take (`appendfsync everysec` only where it has
    /// `WAITAOF`) and the opt-ins, one per line.
    #[error("{}", not_durable_text(server, settings, durability, *required, *waitaof))]
    NotDurable {
        /// The server, e.g. `Redis 7.0.15`.
        server: String,
        /// The settings read: `appendonly …, appendfsync …,
        /// no-appendfsync-on-rewrite …`.
        settings: String,
        /// What `connect` read.
        durability: String,
        /// The deprecated
        /// [`ValkeyConfig::require_durable`](crate::ValkeyConfig::require_durable)`(true)`
        /// was set: no opt-in accepts the server.
        required: bool,
        /// The server has `WAITAOF` (Redis and Valkey 7.2+), so `appendfsync
        /// everysec` is a fix too.
        waitaof: bool,
    },
    /// A plain URL names a replica (`INFO replication`: `role:slave`): its
    /// writes are refused (`READONLY`) or, on a writable replica, dropped at
    /// the next resync, and never the primary's. Final: `fix` says what to
    /// give instead (the primary's address, or a Sentinel URL). The message
    /// is a first line, then the fix.
    #[error("{what}\n  - fix: {fix}")]
    Replica {
        /// What the server is, as read at connect.
        what: String,
        /// What to give instead.
        fix: String,
    },
    /// The server is a primary whose replicas can split brain (after a
    /// failover it goes on confirming claims and renewals to the clients a
    /// partition left with it), and
    /// [`ValkeyConfig::refuse_split_brain`](crate::ValkeyConfig::refuse_split_brain)
    /// is set. Final: the message names the setting that closes it. The
    /// message is a first line, then what was found and the fix.
    #[error("{}", split_brain_text(.0))]
    SplitBrain(leasehold_core::Replication),
    /// The server refused the credentials (`WRONGPASS`: a wrong user or
    /// password; `NOAUTH`: a password is needed and none was given). Final
    /// until the URL, its `password_file` or the server's users change.
    #[error(
        "authentication failed at {url}: {reason}; check the user and the password (in the URL, \
         its password_file or the credentials callback), and that the user exists on the server \
         and is on (ACL LIST)"
    )]
    Authentication {
        /// The URL, without credentials.
        url: String,
        /// The server's answer.
        reason: String,
    },
    /// The password file or the credentials callback
    /// ([`ValkeyConfig::password_file`](crate::ValkeyConfig::password_file),
    /// [`ValkeyConfig::credentials`](crate::ValkeyConfig::credentials)) did
    /// not answer when the first connection needed it. Retryable: the next
    /// `connect` asks again.
    #[error("cannot connect to {store}: {error}")]
    Credentials {
        /// The server, as [`leasehold_core::url::redacted`] shows its URL.
        store: String,
        /// What failed, and the fix.
        error: leasehold_core::credentials::CredentialsError,
    },
    /// The user may not run a command the library needs (`NOPERM`, or a
    /// script's call refused): the message names the ACL rules to add
    /// ([`LeaseUserAcl`](crate::LeaseUserAcl)). Final until granted.
    #[error("{server} refused {command} to this user: {explained}")]
    Denied {
        /// The server, e.g. `Redis 7.0.15`.
        server: String,
        /// The command.
        command: &'static str,
        /// The refusal, with the rules to grant.
        explained: String,
    },
    /// [`ValkeyStrategy::declare_new_pool`](crate::ValkeyStrategy::declare_new_pool)
    /// refused: the pool is in use (a slot has a live lease) or its fences
    /// hash is marked lost. Nothing was written. Final until the cause is
    /// gone; the message says what to do.
    #[error("pool {pool} was not declared new: {why}")]
    NotNew {
        /// The pool.
        pool: String,
        /// Why, and what to do.
        why: String,
    },
    /// The server answered with an error.
    #[error("{server} answered {command} with an error: {reason}")]
    Server {
        /// The server, e.g. `Redis 7.0.15`.
        server: String,
        /// The command.
        command: &'static str,
        /// The server's error.
        reason: String,
    },
}

/// The `Tls` message: the URL and the failure with its fix.
fn tls_text(url: &str, failure: &TlsFailure) -> String {
    match failure {
        TlsFailure::ServerWantsTls { .. } => {
            format!("cannot connect to {url} in plain text: {failure}")
        }
        _ => format!("TLS to {url} failed: {failure}"),
    }
}

/// The `SplitBrain` message: a first line, then what was found and the fix.
fn split_brain_text(r: &leasehold_core::Replication) -> String {
    let mut text = "the server can split brain, and refuse_split_brain(true) (the URL option \
                    refuse_split_brain=true) refuses it"
        .to_owned();
    text.push_str(&format!("\n  - found: {}", r.found));
    if let Some(risk) = &r.split_brain {
        text.push_str(&format!(
            "\n  - found: {} = {}\n  - fix: {}",
            risk.setting, risk.value, risk.fix
        ));
    }
    text
}

/// The `Eviction` message: a first line, then the reason, the fix and the
/// opt-in as a list.
fn eviction_text(server: &str, policy: &str) -> String {
    format!(
        "{server} may evict keys (maxmemory-policy {policy}), so leases on it are refused\n  \
         - why: an evicted lease lets a second holder claim its slot while the first still \
         generates IDs, and an evicted fences hash loses the pool's fences and floors\n  \
         - fix: CONFIG SET maxmemory-policy noeviction, and maxmemory-policy noeviction in \
         valkey.conf / redis.conf (so that it survives a restart); or a server of its own for \
         leases\n  \
         - or accept the risk: the URL option allow_eviction=true, or \
         StoreConfig::map(|c: ValkeyConfig| c.allow_eviction(true))"
    )
}

/// The `NotDurable` message: a first line, then the settings found, the
/// fixes this server can take, and the opt-ins (or why none applies).
fn not_durable_text(
    server: &str,
    settings: &str,
    durability: &str,
    required: bool,
    waitaof: bool,
) -> String {
    let mut text = format!(
        "{server} can lose writes it acknowledged, so leases on it are refused\n  \
         - found (CONFIG GET): {settings}; {durability}\n  \
         - why: after a restart it may have forgotten leases that holders still use, and the \
         longest TTL and max_clock_skew of the pool's holders, so it could hand a slot to a \
         second holder while the first still generates IDs\n  \
         - fix: set appendonly yes, appendfsync always and no-appendfsync-on-rewrite no \
         (CONFIG SET, and in valkey.conf / redis.conf)"
    );
    if waitaof {
        text.push_str(
            "\n  - or fix: appendonly yes, appendfsync everysec and no-appendfsync-on-rewrite no \
             (this server has WAITAOF: claims then wait for the fsync of what they rely on)",
        );
    } else {
        text.push_str(&format!(
            "\n  - (appendfsync everysec is not enough on {server}: it lacks WAITAOF, which \
             Redis and Valkey 7.2+ have)"
        ));
    }
    if required {
        text.push_str(
            "\n  - require_durable(true) is set (the URL option require_durable=true), so \
             neither durability=one-timing-per-pool nor durability=throwaway accepts it",
        );
    } else {
        text.push_str(
            "\n  - or accept the risk, if every process of each pool uses the same TTL and \
             max_clock_skew: the URL option durability=one-timing-per-pool, or \
             durability(DurabilityPolicy::OneTimingPerPool) (the restart guard then waits out \
             this process's TTL plus twice its max_clock_skew after a restart)\n  \
             - or, for a throwaway server never restarted while leases are held: the URL option \
             durability=throwaway, or durability(DurabilityPolicy::Throwaway) (no guard: a \
             restart can hand every held slot to a second holder at once)",
        );
    }
    text
}

/// A refusal and what to grant: `NOPERM …; grant the user +evalsha (ACL
/// SETUSER ids +evalsha; …)`.
pub(crate) fn refusal_text(
    refusal: &str,
    rules: &[String],
    user: &str,
    acl: &crate::LeaseUserAcl,
) -> String {
    if rules.is_empty() {
        format!(
            "{refusal}; a lease user needs these ACL rules (ACL SETUSER {user} {acl}), as \
             leasehold doctor checks"
        )
    } else {
        let rules = rules.join(" ");
        format!(
            "{refusal}; grant the user {rules} (ACL SETUSER {user} {rules}); all a lease user \
             needs: {acl}"
        )
    }
}

/// Whether a script's error says the server refused one of its calls to
/// the user (`redis.call` under an ACL): Redis 7 answers `ERR The user
/// executing the script can't run this command or subcommand` (or `access
/// at least one of the keys`), Valkey 8 `ERR ACL failure in script: …`.
fn script_call_refused(details: &str) -> bool {
    details.contains("user executing the script can't") || details.contains("ACL failure in script")
}

/// What a failed command means for a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The answer was lost or never came (connection, timeout, a server that is
    /// loading, busy, read-only or failing over): the outcome is unknown.
    Transient(String),
    /// The server does not have the script cached (after a restart or
    /// `SCRIPT FLUSH`): send it again.
    NoScript,
    /// Authentication or permission: a configuration problem.
    Denied(String),
    /// The server answered with an error that no retry changes (wrong type,
    /// syntax, unknown command).
    Rejected(String),
}

impl Failure {
    /// The text to report.
    pub(crate) fn text(&self) -> &str {
        match self {
            Self::Transient(s) | Self::Denied(s) | Self::Rejected(s) => s,
            Self::NoScript => "NOSCRIPT: the script is not cached on the server",
        }
    }
}

/// Server error codes (the first word of a RESP error reply) that no retry
/// changes: a generic error (syntax, unknown command, script error) or a key
/// of the wrong type.
const REJECTED_CODES: &[&str] = &["ERR", "WRONGTYPE", "EXECABORT"];

/// Server error codes that mean authentication or permission.
const DENIED_CODES: &[&str] = &["NOPERM", "NOAUTH", "WRONGPASS"];

/// Server error codes that mean authentication: a wrong user or password,
/// or none given to a server that wants one.
const AUTHENTICATION_CODES: &[&str] = &["NOAUTH", "WRONGPASS"];

/// Whether `e` is the server refusing the credentials (`WRONGPASS`,
/// `NOAUTH`, or what `fred` reports as an authentication error), from its
/// kind and the reply's error code.
pub(crate) fn is_authentication(e: &FredError) -> bool {
    *e.kind() == ErrorKind::Auth || is_authentication_reply(e.details())
}

/// Whether an error's text carries a server reply with an authentication
/// code (as a word of its own: `fred` puts its kind before the reply).
pub(crate) fn is_authentication_reply(text: &str) -> bool {
    text.split_whitespace()
        .take(3)
        .any(|word| AUTHENTICATION_CODES.contains(&word.trim_matches(':')))
}

/// Classifies a `fred` error where it is born.
///
/// Client-side kinds (I/O, timeout, cancellation, routing, backpressure) are
/// transient. `fred` gives server error replies the kind `Unknown` (or
/// `InvalidArgument`, `Auth`) with the reply as details, and uses `Unknown`
/// for some client-side failures too ("Failed to route command."); a server
/// reply is recognised by the RESP convention that it starts with an
/// upper-case error code, and only the codes listed above count as a
/// rejection. Everything else — `LOADING`, `BUSY`, `READONLY`, `TRYAGAIN`,
/// `MASTERDOWN`, `OOM`, `CLUSTERDOWN`, client-side failures, codes not known
/// here — is transient: the outcome is unknown, so the caller retries.
pub(crate) fn classify(e: &FredError) -> Failure {
    let text = e.to_string();
    let code = e.details().split_whitespace().next().unwrap_or_default();
    let is_code = !code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase());
    match e.kind() {
        ErrorKind::IO
        | ErrorKind::Timeout
        | ErrorKind::Canceled
        | ErrorKind::Backpressure
        | ErrorKind::Cluster
        | ErrorKind::Routing
        | ErrorKind::Protocol => Failure::Transient(text),
        ErrorKind::Auth => Failure::Denied(text),
        _ if is_code && code == "NOSCRIPT" => Failure::NoScript,
        _ if script_call_refused(e.details()) => Failure::Denied(text),
        _ if is_code && DENIED_CODES.contains(&code) => Failure::Denied(text),
        _ if is_code && REJECTED_CODES.contains(&code) => Failure::Rejected(text),
        _ => Failure::Transient(text),
    }
}

/// Why a TLS connection (or a plain one to a TLS-only server) failed, named
/// where it was seen: the certificate check, the client certificate's
/// request, or a plain-text probe of the server after the failure. Each
/// message says what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsFailure {
    /// A plain-text URL (`redis://`), and the server took the connection but
    /// closed it without answering a plain-text `PING`, as a server that
    /// takes only TLS does.
    ServerWantsTls {
        /// The server (or Sentinel) that closed it: `HOST:PORT`.
        server: String,
    },
    /// A TLS URL, and the server answered a plain-text `PING`: the port
    /// takes no TLS. Nothing falls back to plain text.
    ServerIsPlain {
        /// The server (or Sentinel) that answered: `HOST:PORT`.
        server: String,
    },
    /// No TLS handshake completed, for a reason none of the others names.
    Handshake {
        /// What the client saw.
        reason: String,
    },
    /// The server's certificate is not signed by a CA the client trusts.
    UnknownIssuer {
        /// What the client trusts: the `ca=` file or the system's roots.
        trusted: String,
    },
    /// The server's certificate has expired.
    Expired {
        /// The times compared.
        detail: String,
    },
    /// The server's certificate is not valid yet.
    NotYetValid {
        /// The times compared.
        detail: String,
    },
    /// The server's certificate does not name the host (or IP address) the
    /// client connected to.
    WrongHost {
        /// The name the client checked.
        name: String,
        /// The names the certificate holds.
        detail: String,
    },
    /// The server's certificate was refused for another reason (revoked,
    /// not for server authentication, badly signed or encoded).
    BadCertificate {
        /// What the check found.
        detail: String,
    },
    /// The server asked for a client certificate, none was configured, and
    /// it closed the connection after the handshake.
    ClientCertRequired {
        /// What the client saw.
        reason: String,
    },
    /// The server asked for a client certificate, got the configured one,
    /// and closed the connection after the handshake: it refused it.
    ClientCertRefused {
        /// The client certificate presented (`cert=`).
        cert: PathBuf,
        /// What the client saw.
        reason: String,
    },
}

impl fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ServerWantsTls { server } => write!(
                f,
                "{server} took the connection and closed it without answering a plain-text \
                 PING, as a server that takes only TLS does; fix: connect with TLS, \
                 rediss://HOST:PORT (or valkeys://), with ?ca=PATH for the CA that signed the \
                 server's certificate (unless a system root did) and &cert=PATH&key=PATH if it \
                 asks for a client certificate"
            ),
            Self::ServerIsPlain { server } => write!(
                f,
                "{server} answered in plain text, not TLS: this port takes no TLS, and \
                 nothing falls back to plain text; fix: point the URL at the server's TLS port \
                 (its tls-port; through Sentinel, the Sentinels' too), or write redis:// \
                 (valkey://) only on a network you trust"
            ),
            Self::Handshake { reason } => write!(
                f,
                "no TLS handshake completed ({reason}); fix: check that the port is the \
                 server's TLS port and that the server offers TLS 1.2 or 1.3"
            ),
            Self::UnknownIssuer { trusted } => write!(
                f,
                "the server's certificate is not signed by {trusted}; fix: give the CA that \
                 signed it as ?ca=PATH (a PEM file), or have the server present a certificate \
                 signed by a CA the client trusts"
            ),
            Self::Expired { detail } => write!(
                f,
                "the server's certificate has expired ({detail}); fix: renew the server's \
                 certificate (its tls-cert-file) and have the server load it, and check this \
                 machine's clock"
            ),
            Self::NotYetValid { detail } => write!(
                f,
                "the server's certificate is not valid yet ({detail}); fix: check this \
                 machine's clock, or the certificate's start date"
            ),
            Self::WrongHost { name, detail } => write!(
                f,
                "the server's certificate does not name {name} ({detail}); fix: connect by a \
                 host name or address the certificate names, or reissue the certificate with \
                 {name} in its subjectAltName"
            ),
            Self::BadCertificate { detail } => write!(
                f,
                "the server's certificate was refused: {detail}; fix: have the server present \
                 a valid certificate for server authentication, signed by the CA the client \
                 trusts"
            ),
            Self::ClientCertRequired { reason } => write!(
                f,
                "the server asked for a client certificate, none was given, and it closed the \
                 connection ({reason}), as a server with tls-auth-clients yes does; fix: add \
                 &cert=PATH&key=PATH, a client certificate signed by a CA the server trusts \
                 (its tls-ca-cert-file) and its private key"
            ),
            Self::ClientCertRefused { cert, reason } => write!(
                f,
                "the server refused the client certificate {} and closed the connection \
                 ({reason}); fix: use a client certificate signed by a CA the server trusts \
                 (its tls-ca-cert-file), valid now and for client authentication",
                cert.display()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        let io = FredError::new(ErrorKind::IO, "reset");
        assert!(matches!(classify(&io), Failure::Transient(_)));
        let t = FredError::new(ErrorKind::Timeout, "timed out");
        assert!(matches!(classify(&t), Failure::Transient(_)));
        let ns = FredError::new(ErrorKind::Unknown, "NOSCRIPT No matching script.");
        assert_eq!(classify(&ns), Failure::NoScript);
        let busy = FredError::new(ErrorKind::Unknown, "BUSY Redis is busy running a script.");
        assert!(matches!(classify(&busy), Failure::Transient(_)));
        let wt = FredError::new(
            ErrorKind::InvalidArgument,
            "WRONGTYPE Operation against a key",
        );
        assert!(matches!(classify(&wt), Failure::Rejected(_)));
        let perm = FredError::new(ErrorKind::Unknown, "NOPERM this user has no permissions");
        assert!(matches!(classify(&perm), Failure::Denied(_)));
        for refused in [
            "ERR The user executing the script can't run this command or subcommand script: a",
            "ERR ACL failure in script: No permissions to access a key script: a",
        ] {
            let e = FredError::new(ErrorKind::Unknown, refused);
            assert!(matches!(classify(&e), Failure::Denied(_)), "{refused}");
        }
        assert!(
            !is_authentication(&perm),
            "a permission, not the credentials"
        );
        let wrong = FredError::new(
            ErrorKind::Unknown,
            "WRONGPASS invalid username-password pair or user is disabled.",
        );
        assert!(is_authentication(&wrong));
        let none = FredError::new(ErrorKind::Unknown, "NOAUTH Authentication required.");
        assert!(is_authentication(&none));
        let unk = FredError::new(ErrorKind::Unknown, "ERR unknown command 'HSETEX'");
        assert!(matches!(classify(&unk), Failure::Rejected(_)));
        let route = FredError::new(ErrorKind::Unknown, "Failed to route command.");
        assert!(matches!(classify(&route), Failure::Transient(_)));
        let ro = FredError::new(
            ErrorKind::Unknown,
            "READONLY You can't write against a replica.",
        );
        assert!(matches!(classify(&ro), Failure::Transient(_)));
        // A primary short of replicas under `min-replicas-to-write` wrote
        // nothing: a renewal it refuses is retried, never confirmed.
        let noreplicas = FredError::new(
            ErrorKind::Unknown,
            "NOREPLICAS Not enough good replicas to write.",
        );
        assert!(matches!(classify(&noreplicas), Failure::Transient(_)));
    }
}
