//! The operator's handle on Leases in a Kubernetes namespace: what
//! `leasehold status`, `revoke` and `doctor` do, through core's [`Operate`].

use std::time::{Duration, Instant};

use leasehold_core::{
    AcquireError, BoxFuture, Check, Durability, Guard, Operate, OperateError, PoolSpec, Reason,
    Verdict,
};

use crate::{KubeError, KubeStrategy};

/// A Lease name no slot, pool format or preflight uses: a GET of it is a
/// round trip that reads nothing (its answer is 404).
const PING: &str = "leasehold-ping";

fn from_kube(e: KubeError) -> OperateError {
    match e {
        e @ KubeError::Connect { .. } => OperateError::Unreachable(Reason::new(e.to_string())),
        other => OperateError::Store(Reason::new(other.to_string())),
    }
}

fn from_acquire(e: AcquireError) -> OperateError {
    match e {
        e @ AcquireError::Unreachable(_) => OperateError::Unreachable(Reason::new(e.to_string())),
        other => OperateError::Store(Reason::new(other.to_string())),
    }
}

fn duration(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

impl Operate for KubeStrategy {
    fn describe(&self) -> String {
        format!("Kubernetes (namespace {})", self.namespace())
    }

    fn round_trip(&self) -> &'static str {
        "GET of a Lease"
    }

    fn durability(&self) -> Durability {
        // The API server keeps Leases in etcd.
        Durability::default()
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), OperateError>> {
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + self.op_timeout();
            match self.api().get(PING, deadline).await {
                Ok(resp) if resp.ok() || resp.status == 404 => Ok(()),
                Ok(resp) => Err(OperateError::Store(Reason::new(resp.message()))),
                Err(e) => Err(OperateError::Unreachable(Reason::new(e.text().to_owned()))),
            }
        })
    }

    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> BoxFuture<'a, Result<bool, OperateError>> {
        Box::pin(async move {
            KubeStrategy::revoke(self, pool, slot)
                .await
                .map_err(from_kube)
        })
    }

    /// Makes `pool`'s incarnation record (`leasehold-<pool>--incarnation`).
    /// Where it is missing, the pool's Leases may have been wiped with
    /// holders still running, which looks the same as a pool never used:
    /// it is made with a guard, and claims wait the pool's restart span
    /// (TTL + 2 × `max_clock_skew`). [`Operate::prepare_new_pool`]
    /// (`leasehold prepare --new-pool`) skips the wait for a pool an
    /// operator knows is new.
    fn prepare<'a>(
        &'a self,
        pool: Option<&'a PoolSpec>,
    ) -> BoxFuture<'a, Result<Option<Duration>, OperateError>> {
        Box::pin(async move {
            match pool {
                None => Ok(None),
                Some(pool) => self
                    .prepare_pool(pool)
                    .await
                    .map(|wait| Some(wait).filter(|w| !w.is_zero()))
                    .map_err(from_acquire),
            }
        })
    }

    /// Makes `pool`'s incarnation record declared new, taking away a guard
    /// a claim set: claims go on at once. Only with every holder of the
    /// pool stopped.
    fn prepare_new_pool<'a>(
        &'a self,
        pool: &'a PoolSpec,
    ) -> BoxFuture<'a, Result<(), OperateError>> {
        Box::pin(async move { self.declare_new(pool).await.map_err(from_acquire) })
    }

    /// The wipe guard of `pool` (the API server's etcd forgets nothing it
    /// acknowledged: no restart or promotion guard).
    fn guards<'a>(
        &'a self,
        pool: Option<&'a PoolSpec>,
    ) -> BoxFuture<'a, Result<Vec<Guard>, OperateError>> {
        Box::pin(async move {
            match pool {
                None => Ok(Vec::new()),
                Some(pool) => self
                    .read_guard(pool)
                    .await
                    .map(|g| vec![g])
                    .map_err(from_acquire),
            }
        })
    }

    fn checks(&self) -> BoxFuture<'_, Vec<Check>> {
        Box::pin(async move {
            let server = Check::new(
                Verdict::Ok,
                "server",
                format!(
                    "the API server answers; Leases in namespace {} (its version is not read)",
                    self.namespace()
                ),
            );
            // The connect preflight: one access review per verb, a LIST
            // (resourceVersion format) and a dry-run create (the namespace).
            let t = Instant::now();
            let rbac = match crate::preflight::run(self.api()).await {
                Ok(()) => Check::new(
                    Verdict::Ok,
                    "rbac",
                    format!(
                        "get, list, create and patch on leases allowed; resourceVersions are \
                         integers; the namespace exists (preflight took {})",
                        duration(t.elapsed())
                    ),
                ),
                // Its errors say what to do already.
                Err(e @ (KubeError::Forbidden { .. } | KubeError::MissingNamespace { .. })) => {
                    Check::new(Verdict::Fail, "rbac", e.to_string())
                }
                Err(e) => Check::new(Verdict::Fail, "rbac", e.to_string()).fix(
                    "apply lease-k8s/deploy/rbac.yaml (a Role with get, list, create, patch on \
                     coordination.k8s.io leases) bound to this identity",
                ),
            };
            vec![
                server,
                rbac,
                Check::new(
                    Verdict::NotApplicable,
                    "durability",
                    "the API server keeps Leases in etcd",
                ),
                Check::new(
                    Verdict::NotApplicable,
                    "clock",
                    "each observer times a Lease's expiry on its own monotonic clock from when it \
                     saw renewTime change; wall clocks are not compared",
                ),
            ]
        })
    }
}
