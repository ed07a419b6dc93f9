//! A connected store: a lease [`Strategy`] and an [`Operate`] handle in one.

use std::fmt;

use leasehold_core::{
    AcquireError, Capabilities, Floor, Grant, InspectError, Memory, Operate, PoolSpec, Release,
    Renewal, SlotInfo, Strategy,
};
#[cfg(feature = "etcd")]
use leasehold_etcd::EtcdStrategy;
#[cfg(feature = "k8s")]
use leasehold_k8s::KubeStrategy;
#[cfg(feature = "_sql")]
use leasehold_sql::SqlStrategy;
#[cfg(feature = "valkey")]
use leasehold_valkey::ValkeyStrategy;

#[derive(Clone)]
pub(crate) enum Inner {
    Memory(Memory),
    #[cfg(feature = "_sql")]
    Sql(SqlStrategy),
    #[cfg(feature = "valkey")]
    Valkey(ValkeyStrategy),
    #[cfg(feature = "etcd")]
    Etcd(EtcdStrategy),
    #[cfg(feature = "k8s")]
    Kube(KubeStrategy),
}

/// The same expression on whichever backend the store is.
macro_rules! each {
    ($store:expr, $s:ident => $e:expr) => {
        match &$store.inner {
            Inner::Memory($s) => $e,
            #[cfg(feature = "_sql")]
            Inner::Sql($s) => $e,
            #[cfg(feature = "valkey")]
            Inner::Valkey($s) => $e,
            #[cfg(feature = "etcd")]
            Inner::Etcd($s) => $e,
            #[cfg(feature = "k8s")]
            Inner::Kube($s) => $e,
        }
    };
}

/// A connected store, from [`connect`](crate::connect): give it (or a
/// clone: clones share the connection) to a
/// [`LeaseManager`](crate::LeaseManager) or an
/// [`Elector`](crate::Elector), and operate it through
/// [`Store::operator`]. Calls go straight to the backend's strategy, with no
/// boxing.
#[derive(Clone)]
pub struct Store {
    inner: Inner,
    shown: String,
}

impl Store {
    pub(crate) fn new(inner: Inner, shown: String) -> Self {
        Self { inner, shown }
    }

    /// The operator's handle: describe, ping, slots, revoke, prepare, checks.
    pub fn operator(&self) -> &dyn Operate {
        each!(self, s => s as &dyn Operate)
    }

    /// The store's URL, redacted ([`crate::url::redacted`]).
    pub fn shown_url(&self) -> &str {
        &self.shown
    }

    /// The in-process store, when it is one.
    pub fn memory(&self) -> Option<&Memory> {
        match &self.inner {
            Inner::Memory(s) => Some(s),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// The SQL strategy (its sqlx pool for fenced writes, its fence tables),
    /// when the store is SQL.
    #[cfg(feature = "_sql")]
    pub fn sql(&self) -> Option<&SqlStrategy> {
        match &self.inner {
            Inner::Sql(s) => Some(s),
            _ => None,
        }
    }

    /// The Valkey/Redis strategy, when the store is one.
    #[cfg(feature = "valkey")]
    pub fn valkey(&self) -> Option<&ValkeyStrategy> {
        match &self.inner {
            Inner::Valkey(s) => Some(s),
            _ => None,
        }
    }

    /// The etcd strategy (its client, loss watches), when the store is etcd.
    #[cfg(feature = "etcd")]
    pub fn etcd(&self) -> Option<&EtcdStrategy> {
        match &self.inner {
            Inner::Etcd(s) => Some(s),
            _ => None,
        }
    }

    /// The Kubernetes strategy, when the store is Kubernetes.
    #[cfg(feature = "k8s")]
    pub fn kube(&self) -> Option<&KubeStrategy> {
        match &self.inner {
            Inner::Kube(s) => Some(s),
            _ => None,
        }
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("url", &self.shown)
            .field("store", &self.operator().describe())
            .finish_non_exhaustive()
    }
}

impl Strategy for Store {
    async fn acquire(&self, pool: &PoolSpec, ceiling: Floor) -> Result<Grant, AcquireError> {
        each!(self, s => s.acquire(pool, ceiling).await)
    }

    async fn renew(&self, pool: &PoolSpec, grant: &Grant, ceiling: Floor) -> Renewal {
        each!(self, s => s.renew(pool, grant, ceiling).await)
    }

    async fn release(&self, pool: &PoolSpec, grant: &Grant, issued: Floor) -> Release {
        each!(self, s => s.release(pool, grant, issued).await)
    }

    fn capabilities(&self) -> Capabilities {
        each!(self, s => s.capabilities())
    }

    fn identity(&self) -> String {
        each!(self, s => s.identity())
    }

    async fn inspect(&self, pool: &PoolSpec) -> Result<Vec<SlotInfo>, InspectError> {
        each!(self, s => s.inspect(pool).await)
    }
}
