//! The one place that turns a store URL into a running [`LeaseManager`],
//! through `leasehold`'s registry of drivers: nothing here names a backend.
//! The campaign adds its own settings on top of the URL (its key prefix,
//! its namespace), and reaches each store's fenced writes and wipes through
//! the store's [`Harness`]. The runs use
//! `sqlite://`, `postgres://`, `mysql://`, `redis://`,
//! `etcd://host:port[,host:port…]` and `k8s://host:port` (a Kubernetes API
//! server without TLS or credentials: the fake API server).

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold::drivers::{Harness, MemoryConfig};
use leasehold::{DurabilityPolicy, LeaseConfig, LeaseManager, StoreConfig};

pub use leasehold::drivers::resource;

/// How a worker's strategies accept the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// The stores' restart guard (off only for a control run that shows
    /// what the guard prevents).
    pub restart_guard: bool,
    /// Promise that every process of the pool uses the run's one TTL and
    /// `max_clock_skew`: the opt-in that accepts a store that can forget.
    /// True for the usual runs, where it holds; a mixed fleet breaks it.
    pub assume_one_timing: bool,
    /// **Unsafe control**: PostgreSQL lease (and fenced-write) sessions keep
    /// the server's `synchronous_commit` instead of turning it on, so a
    /// crashed backend loses acknowledged claims and renewals.
    pub keep_server_synchronous_commit: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            restart_guard: true,
            assume_one_timing: true,
            keep_server_synchronous_commit: false,
        }
    }
}

impl Options {
    /// The durability policy these options say, for every store alike: a
    /// usual run's workers share one TTL and skew, so a server that forgets
    /// (the lossy runs) is accepted with the guard waiting out that one
    /// span; a mixed fleet cannot promise it and is refused there; a
    /// control run turns the guards off.
    pub fn policy(&self) -> DurabilityPolicy {
        match (self.restart_guard, self.assume_one_timing) {
            (false, _) => DurabilityPolicy::Throwaway,
            (true, true) => DurabilityPolicy::OneTimingPerPool,
            (true, false) => DurabilityPolicy::Durable,
        }
    }

    /// `config` as a worker with these options opens it.
    fn apply(&self, config: StoreConfig) -> Result<StoreConfig, String> {
        let config = config
            .set("durability", self.policy().name())
            .map_err(|e| e.to_string())?;
        self.keep_synchronous_commit(config)
    }

    /// `config` with the unsafe control knob of PostgreSQL's lease (and
    /// fenced-write) sessions, where the control asks for it: a key the SQL
    /// driver takes without listing it, refused by every other store.
    fn keep_synchronous_commit(&self, config: StoreConfig) -> Result<StoreConfig, String> {
        if !self.keep_server_synchronous_commit {
            return Ok(config);
        }
        config
            .set("unsafe_keep_server_synchronous_commit", "true")
            .map_err(|e| e.to_string())
    }
}

/// The key prefix of the campaign's Valkey/Redis keys (the lease strategy's
/// too) and of its etcd lease keys.
pub(crate) const PREFIX: &str = "campaign";

/// The namespace of the campaign's Kubernetes Leases (its fence objects'
/// too).
const K8S_NAMESPACE: &str = "default";

/// Reads `url` (no network) through `leasehold`'s registry, with the
/// campaign's key prefix and namespace where the store takes them. An
/// in-process store cannot be shared by the workers, which are processes.
fn parse(url: &str) -> Result<StoreConfig, String> {
    let mut config = StoreConfig::from_url(url).map_err(|e| e.to_string())?;
    if config.backend::<MemoryConfig>().is_some() {
        return Err(format!(
            "store URL {url}: the workers are processes of their own and cannot share an \
             in-process store"
        ));
    }
    for (key, value) in [("prefix", PREFIX), ("namespace", K8S_NAMESPACE)] {
        if config.takes(key) {
            config = config.set(key, value).map_err(|e| e.to_string())?;
        }
    }
    Ok(config)
}

/// Connects to the store at `url`, prepares `config`'s pool where the store
/// needs it, and starts a manager (which waits for the first lease), with
/// the strategy accepting the store as `options` says.
pub async fn start_manager(
    url: &str,
    config: LeaseConfig,
    options: &Options,
) -> Result<LeaseManager, String> {
    let op_timeout = (config.timing().ttl() / 4).max(Duration::from_millis(100));
    // etcd, and etcd behind the API server, keep every acknowledged write
    // (Raft, fsync): no restart guard to turn off there.
    let store = options
        .apply(parse(url)?.op_timeout(op_timeout))?
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    store
        .operator()
        .prepare(Some(config.pool()))
        .await
        .map_err(|e| format!("ensure pool: {e}"))?;
    LeaseManager::start(store, config)
        .await
        .map_err(|e| format!("start: {e}"))
}

/// Declares the run's `pools` new on the store at `url`, before any worker
/// starts. A run's pools are fresh, with no holder yet, so their first
/// claims need not wait out the span that a pool whose records are gone
/// waits (the wipe guard cannot tell a new pool from a wiped one).
pub async fn declare_new(
    url: &str,
    options: &Options,
    pools: &[String],
    slots: u32,
    ttl: Duration,
) -> Result<(), String> {
    let store = options
        .apply(parse(url)?)?
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    for name in pools {
        let pool = leasehold::PoolName::new(name.clone()).map_err(|e| e.to_string())?;
        let spec = leasehold::PoolSpec::new(pool, slots, ttl).map_err(|e| e.to_string())?;
        store
            .operator()
            .prepare_new_pool(&spec)
            .await
            .map_err(|e| format!("declare pool {name} new: {e}"))?;
    }
    Ok(())
}

/// Wipes the lease records of `pools` on the store at `url` while their
/// holders run, the way an operator would (the `wipe` fault), through the
/// store's harness: the records of the wipe guard go with them, so claims
/// wait out a restart span and the holders' renewals answer `Lost` (with
/// `DurabilityPolicy::Throwaway`, SQL and Valkey/Redis grant the slots again
/// at once: the control).
pub async fn wipe(url: &str, pools: &[String]) -> Result<(), String> {
    let harness = parse(url)?
        .harness()
        .await
        .map_err(|e| format!("wipe: {e}"))?;
    harness.wipe(pools).await
}

/// What a store's strategy says of it, before a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The store can forget writes it acknowledged, as the backend judges it
    /// (with the settings its own lease sessions make).
    pub can_forget: bool,
    /// The backend's refusal of a worker connecting with the options probed,
    /// or `None` when it accepts them.
    pub refused: Option<String>,
}

/// Connects to the store at `url` twice: once accepting anything, to read
/// whether it can forget, and once as a worker with `options` would.
pub async fn probe(url: &str, options: &Options) -> Result<Probe, String> {
    let config = options.apply(parse(url)?)?;
    // What the store says of itself (etcd and Kubernetes: durable), read
    // through a connection that accepts anything.
    let any = config
        .clone()
        .set("durability", DurabilityPolicy::Throwaway.name())
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| format!("probing: {e}"))?;
    let can_forget = !any.operator().durability().is_durable();
    close(any).await;
    let refused = match config.connect().await {
        Ok(store) => {
            close(store).await;
            None
        }
        Err(e) => Some(e.to_string()),
    };
    Ok(Probe {
        can_forget,
        refused,
    })
}

/// Closes a store's connections at once (SQL; the others close on drop).
async fn close(store: leasehold::Store) {
    store.operator().close().await;
}

/// Fenced writes through the store's harness: the SQL
/// [`FenceTable`](leasehold::sql::FenceTable), or a fenced key on
/// Valkey/Redis (a script), etcd (a transaction) or Kubernetes (a
/// compare-and-swap on an object's `resourceVersion`), each logging the
/// fences the store accepted in the store's order.
pub struct FenceWriter(Box<dyn Harness>);

impl FenceWriter {
    /// Whether the store at `url` has a harness here: every networked and
    /// file store does.
    pub fn supported(url: &str) -> bool {
        parse(url).is_ok()
    }

    /// Connects for fenced writes, or `None` when the store has no harness.
    pub async fn connect(url: &str) -> Result<Option<Self>, String> {
        Self::connect_with(url, &Options::default()).await
    }

    /// As [`FenceWriter::connect`], with a worker's `options` (a control
    /// run's SQL sessions keep the server's `synchronous_commit` too).
    pub async fn connect_with(url: &str, options: &Options) -> Result<Option<Self>, String> {
        let Ok(config) = parse(url) else {
            return Ok(None);
        };
        let config = options.keep_synchronous_commit(config)?;
        match config.harness().await {
            Ok(harness) => Ok(Some(Self(harness))),
            Err(e) => Err(format!("fence connect: {e}")),
        }
    }

    /// Prepares the store for the fenced writes to the `slots` slots of
    /// `pools` (once, before the workers start): the SQL fence table and
    /// log; elsewhere, what an earlier run of these pools left is removed.
    pub async fn prepare(&self, pools: &[String], slots: u32) -> Result<(), String> {
        self.0.prepare_fences(pools, slots).await
    }

    /// One fenced write with `fence` to the resource of `slot` of `pool`:
    /// `Ok(true)` when the store accepted it (and logged it), `Ok(false)`
    /// when it refused it as stale.
    pub async fn write(&self, pool: &str, slot: u32, fence: u64) -> Result<bool, String> {
        self.0.fenced_write(pool, slot, fence).await
    }

    /// Per resource (see [`resource`]), the fences of the accepted writes in
    /// the store's order, for the `slots` slots of `pools`.
    pub async fn accepted(
        &self,
        pools: &[String],
        slots: u32,
    ) -> Result<BTreeMap<String, Vec<u64>>, String> {
        self.0.accepted_fences(pools, slots).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_url_goes_to_the_backend_of_its_scheme() {
        for (url, store) in [
            ("sqlite:///tmp/run/leases.sqlite", "SQL"),
            ("postgres://postgres@127.0.0.1:5432/postgres", "SQL"),
            ("mysql://root@127.0.0.1:3306/leasehold", "SQL"),
            ("redis://127.0.0.1:6379", "Valkey/Redis"),
            ("valkey://127.0.0.1:6379", "Valkey/Redis"),
            ("etcd://127.0.0.1:2379,127.0.0.1:2380", "etcd"),
            ("k8s://127.0.0.1:8001", "Kubernetes"),
        ] {
            let config = parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            let got = config.store();
            assert_eq!(got, store, "{url}");
            assert!(FenceWriter::supported(url), "{url}");
        }
        for url in ["http://127.0.0.1:2379", "memory://", "127.0.0.1:6379"] {
            assert!(parse(url).is_err(), "{url}");
            assert!(!FenceWriter::supported(url), "{url}");
        }
    }
}
