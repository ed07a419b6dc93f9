//! The fault campaign's [`Harness`] on Kubernetes: the resource of a slot is
//! a Lease object of its own (`leasehold-fence-<pool>-<slot>`, never a lease
//! of the pool: it carries no pool label) whose annotations hold the last
//! accepted fence and the log of accepted fences; a write is a
//! compare-and-swap on the object's `resourceVersion` (a conflict reads
//! again), so the log's order is the store's order. The wipe deletes each
//! pool's Leases by its label, one by one in name order, as `kubectl delete
//! leases -l leasehold/pool=<pool>` does (the incarnation record sorts
//! first).

use std::collections::BTreeMap;
use std::time::Duration;

use kube::Error;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, TypeMeta};
use leasehold_core::BoxFuture;
use leasehold_core::drivers::{Harness, resource};

use crate::{KubeConfig, POOL_LABEL};

const FENCE_ANNOTATION: &str = "harness.leasehold.dev/fence";
const LOG_ANNOTATION: &str = "harness.leasehold.dev/log";

/// A Kubernetes store's harness: a client of its own, with the defaults of
/// `kube` (its retries too) and short timeouts, which takes no lease.
pub(crate) struct KubeHarness {
    api: Api<DynamicObject>,
}

impl KubeHarness {
    /// Connects to the API server `config` names by address (`k8s://HOST:PORT`).
    pub(crate) async fn connect(config: KubeConfig) -> Result<Box<dyn Harness>, String> {
        let server = config.server_url().ok_or(
            "harness connect: the harness needs the API server's address (k8s://HOST:PORT)",
        )?;
        let uri = server
            .parse()
            .map_err(|e| format!("harness connect: {server}: {e}"))?;
        let namespace = config.namespace.clone().unwrap_or_else(|| "default".into());
        let mut kube = kube::Config::new(uri);
        kube.default_namespace.clone_from(&namespace);
        kube.read_timeout = Some(Duration::from_secs(2));
        kube.write_timeout = Some(Duration::from_secs(2));
        let client = kube::Client::try_from(kube).map_err(|e| format!("harness connect: {e}"))?;
        let kind =
            ApiResource::from_gvk(&GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"));
        Ok(Box::new(Self {
            api: Api::namespaced_with(client, &namespace, &kind),
        }))
    }

    fn name(pool: &str, slot: u32) -> String {
        format!("leasehold-fence-{pool}-{slot}")
    }

    async fn delete(&self, name: &str) -> Result<(), String> {
        match self.api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(format!("delete Lease {name}: {e}")),
        }
    }

    async fn prepare(&self, pools: &[String], slots: u32) -> Result<(), String> {
        for pool in pools {
            for slot in 0..slots {
                self.delete(&Self::name(pool, slot)).await?;
            }
        }
        Ok(())
    }

    async fn write(&self, pool: &str, slot: u32, fence: u64) -> Result<bool, String> {
        let name = Self::name(pool, slot);
        loop {
            let current = match self.api.get(&name).await {
                Ok(o) => Some(o),
                Err(Error::Api(s)) if s.code == 404 => None,
                Err(e) => return Err(e.to_string()),
            };
            let Some(mut obj) = current else {
                let mut obj = DynamicObject {
                    types: Some(TypeMeta {
                        api_version: "coordination.k8s.io/v1".into(),
                        kind: "Lease".into(),
                    }),
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        ..ObjectMeta::default()
                    },
                    data: serde_json::json!({ "spec": {} }),
                };
                let notes = obj
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default);
                notes.insert(FENCE_ANNOTATION.into(), fence.to_string());
                notes.insert(LOG_ANNOTATION.into(), fence.to_string());
                match self.api.create(&PostParams::default(), &obj).await {
                    Ok(_) => return Ok(true),
                    // Created by another writer meanwhile: compare with it.
                    Err(Error::Api(s)) if s.code == 409 => continue,
                    Err(e) => return Err(e.to_string()),
                }
            };
            let notes = obj
                .metadata
                .annotations
                .get_or_insert_with(Default::default);
            let stored: u64 = notes
                .get(FENCE_ANNOTATION)
                .map_or(Ok(0), |v| v.parse())
                .map_err(|e| format!("{name}: stored fence: {e}"))?;
            if stored > fence {
                return Ok(false);
            }
            notes.insert(FENCE_ANNOTATION.into(), fence.to_string());
            let log = notes.entry(LOG_ANNOTATION.into()).or_default();
            if !log.is_empty() {
                log.push(',');
            }
            log.push_str(&fence.to_string());
            // resourceVersion stays as read: the update is refused with a
            // conflict if anyone wrote in between.
            match self.api.replace(&name, &PostParams::default(), &obj).await {
                Ok(_) => return Ok(true),
                Err(Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    async fn accepted(
        &self,
        pools: &[String],
        slots: u32,
    ) -> Result<BTreeMap<String, Vec<u64>>, String> {
        let mut out = BTreeMap::new();
        for pool in pools {
            for slot in 0..slots {
                let obj = match self.api.get(&Self::name(pool, slot)).await {
                    Ok(o) => o,
                    Err(Error::Api(s)) if s.code == 404 => continue,
                    Err(e) => return Err(e.to_string()),
                };
                let log = obj
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(LOG_ANNOTATION))
                    .cloned()
                    .unwrap_or_default();
                let fences = log
                    .split(',')
                    .filter(|f| !f.is_empty())
                    .map(|f| f.parse().map_err(|e| format!("fence log {f:?}: {e}")))
                    .collect::<Result<Vec<u64>, String>>()?;
                if !fences.is_empty() {
                    out.insert(resource(pool, slot), fences);
                }
            }
        }
        Ok(out)
    }

    async fn wipe_pools(&self, pools: &[String]) -> Result<(), String> {
        for pool in pools {
            let selector = format!("{POOL_LABEL}={pool}");
            let list = self
                .api
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| format!("list the Leases of {pool}: {e}"))?;
            let mut names: Vec<String> = list
                .items
                .into_iter()
                .filter_map(|o| o.metadata.name)
                .collect();
            names.sort();
            for name in names {
                self.delete(&name).await?;
            }
        }
        Ok(())
    }
}

impl Harness for KubeHarness {
    fn prepare_fences<'a>(
        &'a self,
        pools: &'a [String],
        slots: u32,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(self.prepare(pools, slots))
    }

    fn fenced_write<'a>(
        &'a self,
        pool: &'a str,
        slot: u32,
        fence: u64,
    ) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(self.write(pool, slot, fence))
    }

    fn accepted_fences<'a>(
        &'a self,
        pools: &'a [String],
        slots: u32,
    ) -> BoxFuture<'a, Result<BTreeMap<String, Vec<u64>>, String>> {
        Box::pin(self.accepted(pools, slots))
    }

    fn wipe<'a>(&'a self, pools: &'a [String]) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(self.wipe_pools(pools))
    }
}
