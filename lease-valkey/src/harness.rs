//! The fault campaign's [`Harness`] on Valkey/Redis: the resource of a slot
//! is a hash (`fence`, `value`), and the fences of the writes it accepted
//! are appended to a list in the same script, so the list's order is the
//! store's order. Both keys of a pool carry the pool's hash tag under the
//! key prefix (`{<prefix>:<pool>}`, the tag of the pool's lease keys too),
//! so a script touches one cluster slot. The wipe is `FLUSHALL`.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::interfaces::{ClientLike, LuaInterface};
use fred::types::{ClusterHash, CustomCommand, FromValue, Value};
use leasehold_core::drivers::{Harness, resource};
use leasehold_core::{BoxFuture, DurabilityPolicy};

use crate::{ValkeyConfig, ValkeyStrategy};

/// Accepts iff the stored fence is at most the write's (the holder's own
/// repeated writes are accepted), then logs the fence. Fences are compared
/// as decimal strings (length, then text): exact over all of `u64`, where
/// Lua's numbers are doubles.
const FENCED_WRITE: &str = r"
local stored = redis.call('HGET', KEYS[1], 'fence')
local f = ARGV[1]
if stored and (#stored > #f or (#stored == #f and stored > f)) then
  return 0
end
redis.call('HSET', KEYS[1], 'fence', f, 'value', ARGV[2])
redis.call('RPUSH', KEYS[2], f)
return 1
";

/// A Valkey/Redis store's harness: a client of its own, which takes no
/// lease.
pub(crate) struct ValkeyHarness {
    strategy: ValkeyStrategy,
    prefix: String,
}

impl ValkeyHarness {
    pub(crate) async fn connect(config: ValkeyConfig) -> Result<Box<dyn Harness>, String> {
        let prefix = config.prefix().to_owned();
        let strategy = ValkeyStrategy::connect(
            config
                .op_timeout(Duration::from_secs(2))
                // Only fenced writes and wipes go through this client, never
                // a claim: no claim for the restart guard to hold back.
                .durability(DurabilityPolicy::Throwaway),
        )
        .await
        .map_err(|e| format!("harness connect: {e}"))?;
        Ok(Box::new(Self { strategy, prefix }))
    }

    fn keys(&self, pool: &str, slot: u32) -> (String, String) {
        let resource = format!("{{{}:{pool}}}:resource:{slot}", self.prefix);
        let log = format!("{resource}:log");
        (resource, log)
    }

    async fn eval<R: FromValue>(
        &self,
        script: &str,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> Result<R, String> {
        self.strategy
            .client()
            .eval(script, keys, args)
            .await
            .map_err(|e| e.to_string())
    }

    async fn prepare(&self, pools: &[String], slots: u32) -> Result<(), String> {
        for pool in pools {
            let keys: Vec<String> = (0..slots)
                .flat_map(|slot| {
                    let (resource, log) = self.keys(pool, slot);
                    [resource, log]
                })
                .collect();
            self.eval::<i64>("return redis.call('DEL', unpack(KEYS))", keys, Vec::new())
                .await?;
        }
        Ok(())
    }

    async fn write(&self, pool: &str, slot: u32, fence: u64) -> Result<bool, String> {
        let (resource, log) = self.keys(pool, slot);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let value = format!("{}@{now}", std::process::id());
        let accepted: i64 = self
            .eval(
                FENCED_WRITE,
                vec![resource, log],
                vec![fence.to_string(), value],
            )
            .await?;
        Ok(accepted == 1)
    }

    async fn accepted(
        &self,
        pools: &[String],
        slots: u32,
    ) -> Result<BTreeMap<String, Vec<u64>>, String> {
        let mut out = BTreeMap::new();
        for pool in pools {
            for slot in 0..slots {
                let (_, log) = self.keys(pool, slot);
                let log: Vec<String> = self
                    .eval(
                        "return redis.call('LRANGE', KEYS[1], 0, -1)",
                        vec![log],
                        Vec::new(),
                    )
                    .await?;
                if !log.is_empty() {
                    let fences = log
                        .iter()
                        .map(|f| f.parse().map_err(|e| format!("fence log {f:?}: {e}")))
                        .collect::<Result<_, String>>()?;
                    out.insert(resource(pool, slot), fences);
                }
            }
        }
        Ok(out)
    }

    /// `FLUSHALL`: the fenced writes' keys go too (as in a restart of a
    /// server that keeps nothing), so their logs then hold the writes after
    /// the last wipe.
    async fn flush_all(&self) -> Result<(), String> {
        self.strategy
            .client()
            .custom::<Value, Value>(
                CustomCommand::new_static("FLUSHALL", ClusterHash::Random, false),
                Vec::new(),
            )
            .await
            .map(drop)
            .map_err(|e| format!("FLUSHALL: {e}"))
    }
}

impl Harness for ValkeyHarness {
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

    fn wipe<'a>(&'a self, _pools: &'a [String]) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(self.flush_all())
    }
}
