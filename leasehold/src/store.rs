//! A connected store: a lease [`Strategy`] and an [`Operate`] handle in one.

use std::fmt;
use std::sync::Arc;

use leasehold_core::drivers::Driver;
use leasehold_core::{
    AcquireError, Capabilities, Floor, Grant, InspectError, Memory, Operate, PoolSpec, Release,
    Renewal, SlotInfo, Strategy,
};

/// A connected store, from [`connect`](crate::connect): give it (or a
/// clone: clones share the connection) to a
/// [`LeaseManager`](crate::LeaseManager) or an
/// [`Elector`](crate::Elector), and operate it through
/// [`Store::operator`]. Whatever its backend, it is one type: the backend's
/// strategy behind one `Arc` ([`Store::strategy`] gives it back), each call
/// one boxed future, as [`DynStrategy`](crate::DynStrategy) makes them.
#[derive(Clone)]
pub struct Store {
    inner: Arc<dyn Operate>,
    shown: String,
    driver: &'static dyn Driver,
}

impl Store {
    pub(crate) fn new(inner: Arc<dyn Operate>, shown: String, driver: &'static dyn Driver) -> Self {
        Self {
            inner,
            shown,
            driver,
        }
    }

    /// The operator's handle: describe, ping, slots, revoke, prepare, checks.
    pub fn operator(&self) -> &dyn Operate {
        &*self.inner
    }

    /// The store's URL, redacted ([`crate::url::redacted`]).
    pub fn shown_url(&self) -> &str {
        &self.shown
    }

    /// The store's name in messages (`SQL`, `Valkey/Redis`, `etcd`), as its
    /// driver says.
    pub fn store(&self) -> &'static str {
        self.driver.store()
    }

    /// The backend's own strategy, when it is an `S`: the SQL strategy for
    /// its sqlx pool and fence tables (`leasehold::sql::SqlStrategy`), the
    /// etcd strategy for its client and loss watches, ….
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = leasehold::connect("memory://strategy-doc").await?;
    /// assert!(store.strategy::<leasehold::Memory>().is_some());
    /// # Ok::<(), leasehold::ConnectError>(()) }).unwrap();
    /// ```
    pub fn strategy<S: 'static>(&self) -> Option<&S> {
        (*self.inner).as_any().downcast_ref()
    }

    /// The in-process store, when it is one.
    pub fn memory(&self) -> Option<&Memory> {
        self.strategy()
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
        self.inner.acquire_dyn(pool, ceiling).await
    }

    async fn renew(&self, pool: &PoolSpec, grant: &Grant, ceiling: Floor) -> Renewal {
        self.inner.renew_dyn(pool, grant, ceiling).await
    }

    async fn release(&self, pool: &PoolSpec, grant: &Grant, issued: Floor) -> Release {
        self.inner.release_dyn(pool, grant, issued).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities_dyn()
    }

    fn identity(&self) -> String {
        self.inner.identity_dyn()
    }

    async fn inspect(&self, pool: &PoolSpec) -> Result<Vec<SlotInfo>, InspectError> {
        self.inner.inspect_dyn(pool).await
    }
}
