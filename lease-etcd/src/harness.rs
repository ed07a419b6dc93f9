//! The fault campaign's [`Harness`] on etcd: the resource of a slot is a key
//! holding the last accepted fence (zero-padded to 20 digits, so etcd's
//! byte-wise value compare is numeric), and each accepted write puts a log
//! key in the same transaction; the log keys' create revisions are the
//! store's order. The fenced keys live under `<prefix>-fences/`, apart from
//! the leases. The wipe deletes each pool's key prefix, as `etcdctl del
//! --prefix <prefix>/<pool>/` would: slots, floors and the incarnation key.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, GetOptions, SortOrder, SortTarget, Txn, TxnOp,
};
use leasehold_core::BoxFuture;
use leasehold_core::drivers::{Harness, resource};

use crate::{EtcdConfig, EtcdStrategy};

/// An etcd store's harness: a client of its own, which takes no lease.
pub(crate) struct EtcdHarness {
    client: Client,
    prefix: String,
}

impl EtcdHarness {
    pub(crate) async fn connect(config: EtcdConfig) -> Result<Box<dyn Harness>, String> {
        let prefix = config.prefix.clone();
        let strategy = EtcdStrategy::connect(config.op_timeout(Duration::from_secs(2)))
            .await
            .map_err(|e| format!("harness connect: {e}"))?;
        Ok(Box::new(Self {
            client: strategy.client().clone(),
            prefix,
        }))
    }

    fn fences(&self) -> String {
        format!("{}-fences", self.prefix)
    }

    async fn delete_prefix(&self, prefix: String) -> Result<(), String> {
        self.client
            .clone()
            .delete(prefix.clone(), Some(DeleteOptions::new().with_prefix()))
            .await
            .map(drop)
            .map_err(|e| format!("delete the prefix {prefix}: {e}"))
    }

    async fn prepare(&self, pools: &[String]) -> Result<(), String> {
        for pool in pools {
            self.delete_prefix(format!("{}/{pool}/", self.fences()))
                .await?;
        }
        Ok(())
    }

    async fn write(&self, pool: &str, slot: u32, fence: u64) -> Result<bool, String> {
        let key = format!("{}/{pool}/{slot}", self.fences());
        let padded = format!("{fence:020}");
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let log = format!("{key}/log/{}-{now}", std::process::id());
        // A value compare on a missing key fails, so the first write is
        // accepted too.
        let txn = Txn::new()
            .when([Compare::value(
                key.clone(),
                CompareOp::Greater,
                padded.clone(),
            )])
            .or_else([
                TxnOp::put(key, padded.clone(), None),
                TxnOp::put(log, padded, None),
            ]);
        let r = self
            .client
            .clone()
            .txn(txn)
            .await
            .map_err(|e| e.to_string())?;
        Ok(!r.succeeded())
    }

    async fn accepted(
        &self,
        pools: &[String],
        slots: u32,
    ) -> Result<BTreeMap<String, Vec<u64>>, String> {
        let mut out = BTreeMap::new();
        for pool in pools {
            for slot in 0..slots {
                let r = self
                    .client
                    .clone()
                    .get(
                        format!("{}/{pool}/{slot}/log/", self.fences()),
                        Some(
                            GetOptions::new()
                                .with_prefix()
                                .with_sort(SortTarget::Create, SortOrder::Ascend),
                        ),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                let fences = r
                    .kvs()
                    .iter()
                    .map(|kv| {
                        let f = String::from_utf8_lossy(kv.value());
                        f.parse().map_err(|e| format!("fence log {f:?}: {e}"))
                    })
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
            self.delete_prefix(format!("{}/{pool}/", self.prefix))
                .await?;
        }
        Ok(())
    }
}

impl Harness for EtcdHarness {
    fn prepare_fences<'a>(
        &'a self,
        pools: &'a [String],
        _slots: u32,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(self.prepare(pools))
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
