//! The quickstart: a machine ID from a lease in a SQLite file (or any store
//! with `--url`, whose feature is on), a few nonces made with it, renewal in
//! the background, release on Ctrl-C.
//!
//! ```sh
//! cargo run --example quickstart
//! cargo run --example quickstart --features postgres -- --url postgres://postgres@127.0.0.1:5432/postgres
//! cargo run --example quickstart -- --for-secs 10      # exits (and releases) by itself
//! ```

use std::process::ExitCode;
use std::time::Duration;

use leasehold::nonce::{Layout, Sortable64};
use leasehold::{LeaseConfig, LeaseManager, MonoTime, StoreConfig, Strategy};

const DEFAULT_URL: &str = "sqlite://leasehold-quickstart.sqlite";

struct Args {
    url: String,
    pool: String,
    size: u32,
    for_secs: Option<u64>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        url: DEFAULT_URL.to_owned(),
        pool: "machine-ids".to_owned(),
        size: 512,
        for_secs: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => args.url = value()?,
            "--pool" => args.pool = value()?,
            "--size" => args.size = value()?.parse().map_err(|e| format!("--size: {e}"))?,
            "--for-secs" => {
                args.for_secs = Some(value()?.parse().map_err(|e| format!("--for-secs: {e}"))?);
            }
            "-h" | "--help" => {
                return Err(
                    "usage: quickstart [--url sqlite://FILE|postgres://…|mysql://…|redis://…|etcd://…] \
                            [--pool NAME] [--size N] [--for-secs N]"
                        .to_owned(),
                );
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quickstart: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    // The scheme picks the store; its cargo feature compiles it in.
    let store = StoreConfig::from_url(&args.url)?
        .op_timeout(Duration::from_secs(2))
        .connect()
        .await?;
    // The ID layout is declared with the lease: the store records it for
    // the pool and refuses a process of another layout, whose IDs could be
    // equal to these.
    let layout = Layout::default64();
    let config = LeaseConfig::builder(args.pool.as_str())
        .pool_size(args.size)
        .ttl(Duration::from_secs(15))
        .id_format(layout.id_format())
        .build()?;
    // Idempotent: creates what the store needs (a SQL table and the pool's
    // rows) the first time only.
    store.operator().prepare(Some(config.pool())).await?;
    println!(
        "store: {} ({}), pool {:?} of {} slots",
        store.operator().describe(),
        store.identity(),
        args.pool,
        args.size
    );
    let timing = config.timing().clone();
    let manager = LeaseManager::start(store, config).await?;
    let gate = manager.gate();
    let view = gate.view();
    let left = view.deadline.saturating_since(MonoTime::now());
    println!(
        "slot={} fence={} lease deadline in {:.1} s (ttl {:?}, renewed every {:?})",
        view.slot,
        view.fence,
        left.as_secs_f64(),
        timing.ttl(),
        timing.renew_interval()
    );

    // Nonces made with the machine ID; the generator refuses once the lease is gone.
    let nonces = Sortable64::with_layout(gate.clone(), layout)?;
    let made: Vec<_> = (0..3).map(|_| nonces.next()).collect::<Result<_, _>>()?;
    for (i, n) in made.iter().enumerate() {
        println!("nonce {i}: {n}");
    }
    let parts = nonces.decode(made[0]);
    let age = std::time::SystemTime::now()
        .duration_since(parts.time)
        .unwrap_or_default();
    println!(
        "decoded nonce 0: slot {}, made {} ms ago ({} ms after the layout's epoch), counter {}",
        parts.slot,
        age.as_millis(),
        parts.millis,
        parts.counter
    );
    assert_eq!(
        parts.slot, view.slot,
        "a nonce carries the slot that made it"
    );

    // Listen for Ctrl-C before saying so: a SIGINT that arrives before the
    // handler is in place would kill the process without releasing.
    #[cfg(unix)]
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    println!("holding the lease (renewing in the background); Ctrl-C releases it");
    let stop = async {
        match args.for_secs {
            Some(secs) => tokio::time::sleep(Duration::from_secs(secs)).await,
            None => std::future::pending().await,
        }
    };
    #[cfg(unix)]
    let interrupted = async {
        interrupt.recv().await;
        Ok::<(), std::io::Error>(())
    };
    #[cfg(not(unix))]
    let interrupted = tokio::signal::ctrl_c();
    tokio::select! {
        r = interrupted => r?,
        () = stop => {}
    }
    let slot = gate.view().slot;
    let released = manager.shutdown().await;
    println!("released slot {slot}: {released:?}");
    Ok(())
}
