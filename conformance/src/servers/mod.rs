//! Test servers, one provider chain for every backend (DESIGN.md, "Servers for
//! tests"): an explicit URL in the environment → a server binary on this
//! machine, started privately on a free loopback port with a temporary data
//! directory → testcontainers when a Docker daemon answers (feature
//! `testcontainers`). What was used is reported loudly; when nothing works the
//! error names every piece that was tried and how to supply one.
//!
//! A server started from a local binary is started with the [`Settings`]
//! asked for at provisioning ([`provide_with`]; [`provide`] is
//! [`Settings::Fast`]), and can be crashed ([`Server::kill`]) and started
//! again on the same data ([`Server::restart`]): what survives is what the
//! settings promise.

use std::fmt;

mod containers;
mod discovery;
mod kinds;
mod local;
pub mod mariadb;
mod pins;
mod processes;
mod server;
mod settings;
mod starting;

pub use discovery::{find_binary, servers_dir, short_version};
pub use kinds::{
    Binary, Family, IN_PROCESS_LABELS, K8S_FAKE_LABEL, K8S_REAL_LABEL, KINDS, Kind, Launch,
    PG15_ASYNC_LABEL, PG15_SYNC_LABEL, ServerKind, TOPOLOGY_LABELS, VALKEY8_CLUSTER_LABEL,
    VALKEY8_SENTINEL_LABEL, labels, wheels,
};
pub use pins::{Pin, REQUIREMENTS, REQUIREMENTS_FILE, normalise, pins};
pub use server::{Detached, Origin, Server};
pub use settings::Settings;
pub use starting::{
    StartError, free_port, free_ports, listens_on, private_dir, retry_on_taken_port,
    retry_on_taken_port_async, wait_listening,
};

/// The report labels of the behaviour suite on TLS-only servers
/// ([`provide_tls`]) and on the fake Kubernetes API server over HTTPS, each
/// reached with a client certificate.
pub const TLS_LABELS: &[&str] = &[
    "postgres15-tls",              // lease-sql/tests/conformance.rs
    "mariadb-tls",                 // lease-sql/tests/conformance.rs
    "etcd35-mtls",                 // etcd 3.5, clients over TLS only with certificates
    "k8s (fake API server, mTLS)", // the FAKE API server over HTTPS, client certificates
    "redis7-tls",                  // lease-valkey/tests/conformance.rs
];

/// The report labels of the behaviour suite run as a lease user, which may
/// read, insert and update the lease table and nothing else, while an
/// admin prepares.
pub const SQL_LEASE_USER_LABELS: &[&str] = &[
    "postgres15-lease-user",      // lease-sql/tests/conformance.rs
    "postgres-latest-lease-user", // lease-sql/tests/conformance.rs
    "mariadb-lease-user",         // lease-sql/tests/conformance.rs
];

/// The report labels of the behaviour suite run as a lease user: an ACL user
/// (Valkey/Redis) or an etcd user whose one role has read-write on the key
/// prefix: only what a lease user needs, the admin parts of tests (revoke, planted records) done by the
/// administrator.
pub const KV_LEASE_USER_LABELS: &[&str] = &[
    "redis7-lease-user",  // lease-valkey/tests/conformance.rs
    "valkey8-lease-user", // lease-valkey/tests/conformance.rs
    "etcd35-lease-user",  // lease-etcd/tests/conformance.rs
];

use containers::{docker_probe, start_container};
use local::start_local;

/// No server could be provided. The message lists what was tried.
#[derive(Clone, Debug)]
pub struct Missing {
    /// The kind asked for.
    pub kind: ServerKind,
    /// One line per link of the chain.
    pub tried: Vec<String>,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "no {} server available; tried:", self.kind)?;
        for t in &self.tried {
            writeln!(f, "  - {t}")?;
        }
        write!(
            f,
            "fix: set {} to a server URL, or install one: {}",
            self.kind.env_var(),
            self.kind.install_hint()
        )
    }
}

impl std::error::Error for Missing {}

/// A kind asked for with settings no server of that kind can run with
/// ([`ServerKind::settings`]): a mistake in the asking, which no installed
/// program or container would mend. Nothing is looked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unsupported {
    /// The kind asked for.
    pub kind: ServerKind,
    /// The settings asked for.
    pub settings: Settings,
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { kind, settings } = *self;
        let names = |list: Vec<&str>| list.join(", ");
        let theirs = names(kind.settings().iter().map(|s| s.name()).collect());
        let others = names(
            ServerKind::ALL
                .iter()
                .filter(|k| k.settings().contains(&settings))
                .map(|k| k.name())
                .collect(),
        );
        write!(
            f,
            "{kind} cannot run with {settings} settings: {}; {kind} runs with: {theirs}; \
             {settings} settings exist for: {others}",
            kind.row().launch.settings_limit
        )
    }
}

impl std::error::Error for Unsupported {}

/// Why [`provide_with`] gave no server.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum ProvideError {
    /// The kind cannot run with the settings asked for; nothing was tried.
    Unsupported(Unsupported),
    /// No server of the kind could be had here; the chain was tried.
    Missing(Missing),
}

impl fmt::Display for ProvideError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unsupported(e) => e.fmt(f),
            Self::Missing(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ProvideError {}

/// Runs the provider chain for `kind`, starting a local binary with
/// [`Settings::Fast`] (which every kind runs with): for tests that never
/// restart the store. Prints one loud line saying what was used.
pub fn provide(kind: ServerKind) -> Result<Server, Missing> {
    chain(kind, Settings::Fast)
}

/// Runs the provider chain for `kind`, starting a local binary with
/// `settings` (see [`Settings`] for what each means per family and which tests
/// may use it). A URL from the environment is used as it is, and a container
/// runs with its image's defaults: [`Server::settings`] is `None` then, and the
/// server cannot be restarted. Prints one loud line saying what was used.
///
/// Settings the kind cannot run with ([`ServerKind::settings`]: a lossy etcd)
/// are [`ProvideError::Unsupported`], whatever this machine has.
pub fn provide_with(kind: ServerKind, settings: Settings) -> Result<Server, ProvideError> {
    if !kind.settings().contains(&settings) {
        let unsupported = Unsupported { kind, settings };
        eprintln!("leasehold: {unsupported}");
        return Err(ProvideError::Unsupported(unsupported));
    }
    chain(kind, settings).map_err(ProvideError::Missing)
}

/// A server of `kind` that takes TLS connections only and asks every client
/// for a certificate, signed by this process's CA ([`crate::tls::Pki::shared`]),
/// started from a local binary with [`Settings::Fast`]. Its
/// [`Server::url`] connects over verified TLS with the client certificate
/// ([`Launch::tls_url`]); the certificates' files are in
/// [`Pki::shared`](crate::tls::Pki::shared) for the tests that connect
/// otherwise. No URL from the environment or container stands in for it.
/// Prints one loud line saying what was used.
pub fn provide_tls(kind: ServerKind) -> Result<Server, Missing> {
    tls_only(kind, crate::tls::Pki::shared(), Settings::Fast)
}

/// [`provide_tls`], started with `settings`: [`Settings::Durable`] for a
/// server the library accepts without an opt-in (what a deployment runs),
/// as the tests of `leasehold doctor`'s whole verdict need.
pub fn provide_tls_with(kind: ServerKind, settings: Settings) -> Result<Server, Missing> {
    tls_only(kind, crate::tls::Pki::shared(), settings)
}

/// [`provide_tls`], but the server presents `server` (one of the shared
/// [`Pki`](crate::tls::Pki)'s server certificates, such as
/// [`Pki::expired`](crate::tls::Pki::expired) or
/// [`Pki::wrong_host`](crate::tls::Pki::wrong_host)) instead of
/// [`Pki::server`](crate::tls::Pki::server): for the tests of a client
/// that must refuse it. Its [`Server::url`] is the same shape as
/// [`provide_tls`]'s.
pub fn provide_tls_presenting(
    kind: ServerKind,
    server: impl FnOnce(&crate::tls::Pki) -> &crate::tls::Pair,
) -> Result<Server, Missing> {
    let pki = crate::tls::Pki::shared().map(|pki| {
        // A restart reads the files again: the value lives as long as the
        // process (a few hundred bytes per server started).
        let presenting: &'static crate::tls::Pki = Box::leak(Box::new(pki.presenting(server(pki))));
        presenting
    });
    tls_only(kind, pki, Settings::Fast)
}

/// Starts a TLS-only server of `kind` with the certificates `pki` and
/// `settings`.
fn tls_only(
    kind: ServerKind,
    pki: Result<&'static crate::tls::Pki, String>,
    settings: Settings,
) -> Result<Server, Missing> {
    let mut tried = vec![format!(
        "${}: not read for a TLS-only server",
        kind.env_var()
    )];
    let started = match (kind.row().launch.tls_url, find_binary(kind)) {
        (None, _) => Err(format!(
            "no TLS-only {kind} server can be started here: {}",
            kind.row().launch.no_tls_reason()
        )),
        (_, None) => Err(format!("local binary: not found ({})", kind.install_hint())),
        (Some(_), Some(bin)) => pki.and_then(|pki| {
            start_local(kind, &bin, settings, Some(pki))
                .map_err(|e| format!("local binary {}: failed to start: {e}", bin.display()))
        }),
    };
    match started {
        Ok(server) => {
            eprintln!(
                "leasehold: {kind}: started {} over TLS only",
                server.describe()
            );
            Ok(server)
        }
        Err(e) => {
            tried.push(e);
            let missing = Missing { kind, tried };
            eprintln!("leasehold: {missing}");
            Err(missing)
        }
    }
}

/// The provider chain: the environment, a local binary, a container.
fn chain(kind: ServerKind, settings: Settings) -> Result<Server, Missing> {
    let mut tried = Vec::new();
    let var = kind.env_var();
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => {
            let server = Server {
                kind,
                version: "(external)".into(),
                url,
                origin: Origin::Env(var),
                settings: None,
                guard: None,
            };
            eprintln!("leasehold: {kind}: using {} from ${var}", server.url);
            return Ok(server);
        }
        _ => tried.push(format!("${var}: unset")),
    }
    match find_binary(kind) {
        Some(bin) => match start_local(kind, &bin, settings, None) {
            Ok(server) => {
                eprintln!("leasehold: {kind}: started {}", server.describe());
                return Ok(server);
            }
            Err(e) => tried.push(format!(
                "local binary {}: failed to start: {e}",
                bin.display()
            )),
        },
        None => tried.push(format!("local binary: not found ({})", kind.install_hint())),
    }
    match docker_probe() {
        Err(why) => tried.push(format!("testcontainers: {why}")),
        Ok(()) => match start_container(kind) {
            Ok(server) => {
                eprintln!("leasehold: {kind}: started {}", server.describe());
                return Ok(server);
            }
            Err(e) => tried.push(format!("testcontainers: {e}")),
        },
    }
    let missing = Missing { kind, tried };
    eprintln!("leasehold: {missing}");
    Err(missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`provide`] asks every kind for [`Settings::Fast`].
    #[test]
    fn every_kind_runs_fast() {
        for kind in ServerKind::ALL {
            assert!(kind.settings().contains(&Settings::Fast), "{kind}");
        }
    }

    /// The PyPI builds of Redis and Valkey have no TLS: no TLS-only server
    /// of theirs is tried, and the reason names the kind that has TLS.
    #[test]
    fn redis_builds_without_tls_are_refused_with_the_reason() {
        for kind in [ServerKind::Redis8, ServerKind::Valkey8] {
            let e = match provide_tls(kind) {
                Err(e) => e.to_string(),
                Ok(s) => panic!("a TLS-only {kind}: {}", s.describe()),
            };
            assert!(
                e.contains("a PyPI build, has no TLS") && e.contains("Redis 7 (redis7) has TLS"),
                "{e}"
            );
        }
    }

    /// A lossy etcd is no missing server: the error names the kind and the
    /// settings, says why, and which combinations exist. Nothing is started.
    #[test]
    fn an_unsupported_pair_is_no_missing_server() {
        let e = match provide_with(ServerKind::Etcd35, Settings::Lossy) {
            Err(ProvideError::Unsupported(e)) => e,
            Err(e) => panic!("another error: {e}"),
            Ok(s) => panic!("a lossy etcd was provided: {}", s.describe()),
        };
        assert_eq!(
            e,
            Unsupported {
                kind: ServerKind::Etcd35,
                settings: Settings::Lossy
            }
        );
        assert_eq!(
            e.to_string(),
            "etcd35 cannot run with lossy settings: etcd has no setting that loses acknowledged \
             writes on a process crash (it fsyncs every commit; --unsafe-no-fsync loses writes \
             only on an OS crash); etcd35 runs with: fast, durable; lossy settings exist for: \
             postgres15, postgres-latest, mariadb, redis8, redis7, valkey8"
        );
        let k8s = Unsupported {
            kind: ServerKind::K8s,
            settings: Settings::Durable,
        };
        assert!(k8s.to_string().contains("k8s runs with: fast;"), "{k8s}");
    }
}
