//! What a run's `--backend` names: a store that needs no server (a
//! driver's scheme), a kind of the test servers' table, or one of the
//! campaign's own shapes of servers.

use std::path::Path;

use leasehold_conformance::servers::{Family, ServerKind};

/// What a run's `--backend` names.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Choice {
    /// A store that needs no server, by its driver's scheme (`sqlite`, or a
    /// scheme a program added to the registry): a fresh one in the run's
    /// directory.
    Local(&'static dyn leasehold::drivers::Driver),
    /// A server of the test servers' table, by its kind's name or alias
    /// (`postgres15`, `postgres`, `redis7`, `etcd34`, …).
    Server(ServerKind),
    /// Three etcd 3.5 members started by the run (`etcd-cluster`).
    EtcdCluster,
    /// The FAKE Kubernetes API server, in the runner (`k8s-fake`, `k8s`).
    FakeApi,
}

impl Choice {
    /// The family of the server kind chosen, if one was.
    pub(crate) fn family(self) -> Option<Family> {
        match self {
            Choice::Server(kind) => Some(kind.family()),
            _ => None,
        }
    }
}

/// What `backend` names: a driver's scheme first, then a server kind, then
/// the campaign's own shapes.
pub(crate) fn choice(backend: &str) -> Option<Choice> {
    if let Some(driver) = local_driver(backend) {
        return Some(Choice::Local(driver));
    }
    if let Some(kind) = ServerKind::named(backend) {
        return Some(Choice::Server(kind));
    }
    match backend {
        "etcd-cluster" | "etcd35x3" => Some(Choice::EtcdCluster),
        "k8s-fake" | "k8s" => Some(Choice::FakeApi),
        _ => None,
    }
}

/// The server kind chosen when it is of `family`, else `default`.
pub(crate) fn kind_of(chosen: Choice, family: Family, default: ServerKind) -> ServerKind {
    match chosen {
        Choice::Server(kind) if kind.family() == family => kind,
        _ => default,
    }
}

/// The driver of `backend` where it is the scheme of a store that needs no
/// server (SQLite, or a driver a program added to the registry): the run
/// opens a fresh one in its directory.
pub(crate) fn local_driver(backend: &str) -> Option<&'static dyn leasehold::drivers::Driver> {
    leasehold::registry()
        .iter()
        .filter_map(|row| row.driver)
        .find(|d| d.schemes().contains(&backend))
        .filter(|d| d.local_url(Path::new(".")).is_some())
}
