//! The hourly invoice job on Valkey/Redis: replicas elect one leader (a pool
//! of one slot), the leader bills one hour after another, and every bill is
//! one script that checks the leader's stamp (fence, pool and slot) and
//! writes in the same atomic step, so a leader paused past its lease cannot
//! write after its successor has. Two replicas run in one process; the
//! leader is shut down and the other takes over.
//!
//! ```sh
//! cargo run -p leasehold --features valkey --example leader_valkey -- redis://127.0.0.1:6379
//! ```

use std::time::{Duration, Instant};

use fred::prelude::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use leasehold::{Elector, Leader, LeaderConfig, Leadership, Store};

// ANCHOR: script
/// The ledger hash.
const LEDGER: &str = "example:invoices";

/// Refused (0) when another pool or slot wrote last, or a bigger fence did
/// (fences compared as decimal strings: longer is bigger, then byte order);
/// else bills the next hour and records the stamp (1). KEYS: the ledger.
/// ARGV: fence, "pool/slot", biller.
const FENCED_BILL: &str = r"
local f, issuer = ARGV[1], ARGV[2]
local seen = redis.call('HGET', KEYS[1], 'fence')
local by = redis.call('HGET', KEYS[1], 'issuer')
if by and by ~= issuer then return 0 end
if seen and (#seen > #f or (#seen == #f and seen > f)) then return 0 end
local hour = tonumber(redis.call('HGET', KEYS[1], 'hours') or '0')
redis.call('HSET', KEYS[1], 'fence', f, 'issuer', issuer, 'hours', hour + 1, 'hour.' .. hour, ARGV[3])
return 1
";
// ANCHOR_END: script

// ANCHOR: bill
/// Bills the next hour with this term's stamp: `Ok(false)` when refused (a
/// newer leader has written: stop leading).
async fn bill(client: &fred::clients::Client, l: &Leadership, me: &str) -> Result<bool, String> {
    let s = l.stamp();
    let args: Vec<Value> = vec![
        FENCED_BILL.into(),
        1_i64.into(),
        LEDGER.into(),
        s.fence().0.to_string().into(),
        format!("{}/{}", s.pool(), s.slot()).into(),
        me.into(),
    ];
    let eval = CustomCommand::new_static("EVAL", ClusterHash::Random, false);
    let written: i64 = client.custom(eval, args).await.map_err(|e| e.to_string())?;
    Ok(written == 1)
}
// ANCHOR_END: bill

/// A field of the ledger (fred's typed commands are features this crate
/// leaves off; a custom command needs none).
async fn field(client: &fred::clients::Client, name: String) -> Result<Option<String>, String> {
    let hget = CustomCommand::new_static("HGET", ClusterHash::Random, false);
    let args: Vec<Value> = vec![LEDGER.into(), name.into()];
    client.custom(hget, args).await.map_err(|e| e.to_string())
}

/// The store's fred client, for the ledger's own commands (add `fred` 10
/// to your dependencies to name its types).
fn valkey_client(store: &Store) -> Result<fred::clients::Client, String> {
    let valkey = store
        .strategy::<leasehold::valkey::ValkeyStrategy>()
        .ok_or("this example needs a redis:// or valkey:// URL")?;
    Ok(valkey.client().clone())
}

// ANCHOR: replica
/// One replica: campaigns, and while it leads bills an "hour" every `every`.
async fn replica(url: &str, me: &'static str, every: Duration) -> Result<Elector, String> {
    let store = leasehold::connect(url).await.map_err(|e| e.to_string())?;
    let client = valkey_client(&store)?;
    let config = LeaderConfig::builder("invoice-job")
        .holder(me)
        .ttl(Duration::from_secs(5));
    Ok(
        Leader::builder(store, config.build().map_err(|e| e.to_string())?)
            .on_started_leading(move |l| println!("{me} leads with {}", l.stamp()))
            .on_error(move |e| eprintln!("{me} can never lead: {e}"))
            .campaign(move |leadership| {
                let client = client.clone();
                // Returning ends the term and releases the lease to a follower.
                async move {
                    while leadership.is_leading() {
                        match bill(&client, &leadership, me).await {
                            Ok(true) => {}
                            Ok(false) => return println!("{me}: refused by its fence"),
                            Err(e) => return eprintln!("{me}: billing failed: {e}"),
                        }
                        tokio::select! {
                            () = tokio::time::sleep(every) => {}
                            () = leadership.lost() => return,
                        }
                    }
                }
            }),
    )
}
// ANCHOR_END: replica

/// Runs two replicas on the server at `url` until `hours` more hours are
/// billed, shuts the leader down, and runs until the other has billed as
/// many more. Returns who billed each hour, from the first.
pub async fn run(url: &str, hours: i64) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let every = Duration::from_millis(100);
    let mut replicas = vec![
        replica(url, "a", every).await?,
        replica(url, "b", every).await?,
    ];
    // The store owns the connection: keep it while its client is used.
    let store = leasehold::connect(url).await?;
    let reader = valkey_client(&store)?;
    let billed = || async {
        let n = field(&reader, "hours".to_owned()).await?;
        n.map_or(Ok(0), |n| n.parse::<i64>().map_err(|e| e.to_string()))
    };
    let start = billed().await?;
    for goal in [start + hours, start + 2 * hours] {
        let give_up = Instant::now() + Duration::from_secs(60);
        let leader = loop {
            let leader = replicas.iter().position(Elector::is_leading);
            if billed().await? >= goal && leader.is_some() {
                break leader;
            }
            if Instant::now() > give_up {
                return Err(format!("fewer than {goal} hours billed within 60 s").into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        if let Some(i) = leader.filter(|_| replicas.len() > 1) {
            replicas.remove(i).shutdown().await; // releases: the other takes over
        }
    }
    for r in replicas {
        r.shutdown().await;
    }
    let mut by = Vec::new();
    for hour in 0..billed().await? {
        by.push(
            field(&reader, format!("hour.{hour}"))
                .await?
                .unwrap_or_default(),
        );
    }
    Ok(by)
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("LEASEHOLD_VALKEY_URL").ok())
        .ok_or("pass a redis:// URL (or set LEASEHOLD_VALKEY_URL)")?;
    for (hour, by) in run(&url, 5).await?.iter().enumerate() {
        println!("hour {hour} billed by {by}");
    }
    Ok(())
}
