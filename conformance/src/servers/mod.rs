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
mod processes;
mod server;
mod settings;

pub use discovery::{find_binary, servers_dir, short_version};
pub use kinds::{
    Binary, IN_PROCESS_LABELS, K8S_FAKE_LABEL, K8S_REAL_LABEL, KINDS, Kind, Launch, ServerKind,
    labels, wheels,
};
pub use local::free_port;
pub use server::{Detached, Origin, Server};
pub use settings::Settings;

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

/// Runs the provider chain for `kind`, starting a local binary with
/// [`Settings::Fast`]: for tests that never restart the store. Prints one loud
/// line saying what was used.
pub fn provide(kind: ServerKind) -> Result<Server, Missing> {
    provide_with(kind, Settings::Fast)
}

/// Runs the provider chain for `kind`, starting a local binary with
/// `settings` (see [`Settings`] for what each means per family and which tests
/// may use it). A URL from the environment is used as it is, and a container
/// runs with its image's defaults: [`Server::settings`] is `None` then, and the
/// server cannot be restarted. Prints one loud line saying what was used.
pub fn provide_with(kind: ServerKind, settings: Settings) -> Result<Server, Missing> {
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
        Some(bin) => match start_local(kind, &bin, settings) {
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
