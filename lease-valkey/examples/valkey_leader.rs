//! Leader election on Valkey/Redis: the invoice scheduler of six replicas in
//! one process (`leasehold_conformance::scheduler`). Exactly one replica
//! leads and bills hours, every replica observes who leads, the leader is
//! killed, another takes over with a bigger fence, and the killed leader's
//! late write is refused by a fenced write script in the same server.
//!
//! ```sh
//! cargo run -p leasehold-valkey --example valkey_leader -- --url redis://127.0.0.1:6379
//! LEASEHOLD_VALKEY_URL=redis://127.0.0.1:6379 cargo run -p leasehold-valkey --example valkey_leader
//! ```
//! It asserts its outcome and exits non-zero if anything went wrong.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use leasehold_conformance::scheduler::{self, Ledger, Report};
use leasehold_core::{BoxFuture, DurabilityPolicy, FenceStamp};
use leasehold_valkey::{ValkeyConfig, ValkeyStrategy};

/// The fenced write: refuses a fence below the stored one (fences compared
/// as decimal strings: longer is bigger, then byte order, exact for every
/// `u64`), else stores the fence and the bill in the same atomic step.
/// KEYS: the ledger hash. ARGV: fence, hour, replica. Returns 1 when written.
const FENCED_BILL: &str = r"
local stored = redis.call('HGET', KEYS[1], 'fence')
local f = ARGV[1]
if stored and (#stored > #f or (#stored == #f and stored > f)) then
  return 0
end
redis.call('HSET', KEYS[1], 'fence', f, 'hour.' .. ARGV[2], ARGV[3])
return 1
";

/// A hash in the same server, one per leader pool (fences are per slot).
struct ValkeyLedger {
    client: fred::clients::Client,
    key: String,
}

impl ValkeyLedger {
    async fn call<R: fred::types::FromValue>(
        &self,
        cmd: &'static str,
        args: Vec<Value>,
    ) -> Result<R, String> {
        let command = CustomCommand::new_static(cmd, ClusterHash::Random, false);
        self.client
            .custom::<R, Value>(command, args)
            .await
            .map_err(|e| format!("{cmd}: {e}"))
    }
}

impl Ledger for ValkeyLedger {
    fn bill<'a>(
        &'a self,
        hour: u32,
        replica: &'a str,
        stamp: &'a FenceStamp,
    ) -> BoxFuture<'a, Result<bool, String>> {
        // This key is written by the one slot of one leader pool only, so
        // its fences are comparable and the number is all it keeps.
        let fence = stamp.fence();
        Box::pin(async move {
            let args: Vec<Value> = vec![
                FENCED_BILL.into(),
                1_i64.into(),
                self.key.as_str().into(),
                fence.0.to_string().into(),
                hour.to_string().into(),
                replica.into(),
            ];
            let written: i64 = self.call("EVAL", args).await?;
            Ok(written == 1)
        })
    }
}

/// The scheduler on the server at `url`.
pub async fn run(url: &str) -> Result<Report, String> {
    let connect = || async {
        ValkeyStrategy::connect(
            ValkeyConfig::new(url)
                .op_timeout(Duration::from_secs(2))
                // Every replica of the scheduler uses the same TTL and
                // max_clock_skew, so a server that can forget acknowledged
                // writes (a test server without persistence) is accepted,
                // with the restart guard on. Without the promise, run the
                // server with appendonly yes and appendfsync always.
                .durability(DurabilityPolicy::OneTimingPerPool),
        )
        .await
    };
    let first = connect().await.map_err(|e| {
        format!(
            "{e}; start Valkey or Redis (e.g. `valkey-server --port 6380`) and pass its URL with \
             --url or LEASEHOLD_VALKEY_URL"
        )
    })?;
    println!("{} via the {} path", first.server(), first.path());
    let pool = leasehold_conformance::fresh_pool_name();
    let ledger = Arc::new(ValkeyLedger {
        client: first.client().clone(),
        key: format!("{{leasehold-examples:{pool}}}:invoices"),
    });
    let report = scheduler::run(
        pool.as_str(),
        Duration::from_secs(2),
        |_| async move { connect().await.map_err(|e| e.to_string()) },
        ledger.clone(),
    )
    .await;
    let _: Result<i64, _> = ledger.call("DEL", vec![ledger.key.as_str().into()]).await;
    report
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> ExitCode {
    scheduler::exit(match scheduler::url_arg("LEASEHOLD_VALKEY_URL") {
        Some(url) => run(&url).await,
        None => Err("no server given; start Valkey or Redis and pass --url redis://host:port (or set LEASEHOLD_VALKEY_URL)".into()),
    })
}
