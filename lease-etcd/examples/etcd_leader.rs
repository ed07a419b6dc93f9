//! Leader election on etcd: the invoice scheduler of six replicas in one
//! process (`leasehold_conformance::scheduler`). Exactly one replica leads
//! and bills hours, every replica observes who leads, the leader is killed,
//! another takes over with a bigger fence, and the killed leader's late
//! write is refused by a transaction that compares the stored fence.
//!
//! ```sh
//! cargo run -p leasehold-etcd --example etcd_leader -- --url http://127.0.0.1:2379
//! LEASEHOLD_ETCD_URL=http://127.0.0.1:2379 cargo run -p leasehold-etcd --example etcd_leader
//! ```
//! It asserts its outcome and exits non-zero if anything went wrong.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use leasehold_conformance::scheduler::{self, Ledger, Report};
use leasehold_core::{BoxFuture, FenceStamp};
use leasehold_etcd::{EtcdConfig, EtcdStrategy};

/// Keys under `prefix` in the same cluster, one ledger per leader pool
/// (fences are per slot): `fence` holds the biggest fence that wrote, as 20
/// zero-padded digits so that etcd's byte-wise compare orders it
/// numerically.
struct EtcdLedger {
    client: etcd_client::Client,
    prefix: String,
}

impl Ledger for EtcdLedger {
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
            let key = format!("{}fence", self.prefix);
            let ours = format!("{:020}", fence.0);
            // Refused when a bigger fence is stored; otherwise (a smaller or
            // equal one, or none: a missing key fails every value compare)
            // the fence and the bill are written in the same transaction.
            let txn = Txn::new()
                .when([Compare::value(
                    key.clone(),
                    CompareOp::Greater,
                    ours.clone(),
                )])
                .or_else([
                    TxnOp::put(key, ours, None),
                    TxnOp::put(format!("{}hour/{hour}", self.prefix), replica, None),
                ]);
            let resp = self
                .client
                .clone()
                .txn(txn)
                .await
                .map_err(|e| format!("fenced write: {e}"))?;
            Ok(!resp.succeeded())
        })
    }
}

/// The scheduler on the cluster at `url`.
pub async fn run(url: &str) -> Result<Report, String> {
    let connect = || async { EtcdStrategy::connect(EtcdConfig::new([url])).await };
    let unreachable = |e: String| {
        format!(
            "cannot reach etcd at {url}: {e}; start etcd (e.g. `etcd --data-dir /tmp/etcd`) and \
             pass its URL with --url or LEASEHOLD_ETCD_URL"
        )
    };
    let first = connect().await.map_err(|e| unreachable(e.to_string()))?;
    let mut client = first.client().clone();
    // Connecting sends nothing: ask once, so an absent server says so now.
    match tokio::time::timeout(Duration::from_secs(3), client.get("probe", None)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(unreachable(e.to_string())),
        Err(_) => return Err(unreachable("no answer within 3s".into())),
    }
    let pool = leasehold_conformance::fresh_pool_name();
    let prefix = format!("leasehold-examples/{pool}/");
    let ledger = Arc::new(EtcdLedger {
        client: client.clone(),
        prefix: prefix.clone(),
    });
    let report = scheduler::run(
        pool.as_str(),
        EtcdStrategy::MIN_TTL,
        |_| async move { connect().await.map_err(|e| e.to_string()) },
        ledger,
    )
    .await;
    let _ = client
        .delete(
            prefix,
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await;
    report
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> ExitCode {
    scheduler::exit(match scheduler::url_arg("LEASEHOLD_ETCD_URL") {
        Some(url) => run(&url).await,
        None => Err("no server given; start etcd and pass --url http://host:2379 (or set LEASEHOLD_ETCD_URL)".into()),
    })
}
