//! The ordinal-pinned lease: a StatefulSet ordinal picks the slot, a Lease
//! proves it and supplies the fence.

use leasehold_core::{
    AcquireError, Capabilities, Floor, Grant, PodOrdinal, PoolSpec, Release, Renewal, Strategy,
};
use tokio::time::Instant;

use crate::strategy::KubeStrategy;

/// A StatefulSet pod's ordinal as its slot, proven by a Lease.
///
/// [`PodOrdinal`] alone trusts that no two pods share an ordinal. After a
/// force delete (`kubectl delete pod --force`) or a non-graceful node
/// shutdown, the old pod may still run while its replacement starts with the
/// same ordinal; with this strategy only one of them holds the Lease of that
/// slot and generates, and the fence tells their writes apart.
///
/// Acquisition takes only the ordinal's slot: free or released at once,
/// otherwise after the holder stopped renewing for a lease duration (a
/// retryable `Contention` that names the holder and the wait). After a loss
/// the manager tries the same slot again.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use leasehold_core::PodOrdinal;
/// use leasehold_k8s::{KubeConfig, KubeStrategy, OrdinalLease};
/// // POD_INDEX (the pod-index label) or POD_NAME, minus ORDINALS_START.
/// let ordinal = PodOrdinal::from_statefulset_env(512)?;
/// let leases = KubeStrategy::connect(KubeConfig::infer()).await?;
/// let strategy = OrdinalLease::new(leases, &ordinal);
/// # let _ = strategy; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct OrdinalLease {
    leases: KubeStrategy,
    slot: u32,
}

impl OrdinalLease {
    /// Pins `leases` to the slot `ordinal` gives.
    pub fn new(leases: KubeStrategy, ordinal: &PodOrdinal) -> Self {
        Self::with_slot(leases, ordinal.slot())
    }

    /// Pins `leases` to `slot`.
    pub fn with_slot(leases: KubeStrategy, slot: u32) -> Self {
        Self { leases, slot }
    }

    /// The pinned slot.
    pub fn slot(&self) -> u32 {
        self.slot
    }
}

impl Strategy for OrdinalLease {
    async fn acquire(&self, pool: &PoolSpec, ceiling: Floor) -> Result<Grant, AcquireError> {
        self.leases
            .acquire_slot(pool, ceiling, Some(self.slot))
            .await
    }

    async fn renew(&self, pool: &PoolSpec, grant: &Grant, ceiling: Floor) -> Renewal {
        let deadline = Instant::now() + self.leases.op_timeout().min(pool.ttl());
        self.leases
            .renew_grant(pool, grant, Some(ceiling.0), deadline)
            .await
    }

    async fn release(&self, pool: &PoolSpec, grant: &Grant, issued: Floor) -> Release {
        self.leases.release_grant(pool, grant, Some(issued.0)).await
    }

    fn capabilities(&self) -> Capabilities {
        self.leases.capabilities()
    }

    fn identity(&self) -> String {
        format!("{}#ordinal-{}", self.leases.identity(), self.slot)
    }
}
