//! The one place that turns a store URL into a running [`LeaseManager`]: the
//! glue to each backend crate's public API (adapt it here when those APIs
//! change). Each backend reads the URLs of its own schemes (its
//! `SCHEMES` and `from_url`); the campaign adds its own settings on top.
//! The runs use `sqlite://`, `postgres://`, `mysql://`, `redis://`,
//! `etcd://host:port[,host:port…]` and `k8s://host:port` (a Kubernetes API
//! server without TLS or credentials: the fake API server).

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold::etcd::{self as leasehold_etcd, EtcdConfig};
use leasehold::k8s::{self as leasehold_k8s, KubeConfig};
use leasehold::sql::{self as leasehold_sql, SqlConfig};
use leasehold::valkey::{self as leasehold_valkey, ValkeyConfig};
use leasehold::drivers::MemoryConfig;
use leasehold::{FenceStamp, LeaseConfig, LeaseManager, MonoTime, StoreConfig};

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
    fn sql(&self, config: SqlConfig) -> SqlConfig {
        config
            .assume_one_timing_per_pool(self.assume_one_timing)
            .restart_guard(self.restart_guard)
            .unsafe_keep_server_synchronous_commit(self.keep_server_synchronous_commit)
    }

    fn valkey(&self, config: ValkeyConfig) -> ValkeyConfig {
        config
            .restart_guard(self.restart_guard)
            // A usual run's workers share one TTL and skew, so a server
            // that forgets (the lossy runs) is accepted with the guard
            // waiting out that one span; a mixed fleet cannot promise it
            // and is refused there.
            .assume_one_timing_per_pool(self.restart_guard && self.assume_one_timing)
    }
}

/// The key prefix of the campaign's Valkey/Redis keys (the lease strategy's
/// too) and of its etcd lease keys.
pub(crate) const PREFIX: &str = "campaign";

/// The namespace of the campaign's Kubernetes Leases (its fence objects'
/// too).
const K8S_NAMESPACE: &str = "default";

/// Reads `url` (no network) through `leasehold`'s URL table, with the
/// campaign's key prefix and namespace. An in-process store cannot be
/// shared by the workers, which are processes.
fn parse(url: &str) -> Result<StoreConfig, String> {
    let config = StoreConfig::from_url(url).map_err(|e| e.to_string())?;
    if config.backend::<MemoryConfig>().is_some() {
        return Err(format!(
            "store URL {url}: the workers are processes of their own and cannot share an \
             in-process store"
        ));
    }
    Ok(config
        .map(|c: ValkeyConfig| c.key_prefix(PREFIX))
        .map(|c: EtcdConfig| c.prefix(PREFIX))
        .map(|c: KubeConfig| c.namespace(K8S_NAMESPACE)))
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
    let store = parse(url)?
        .op_timeout(op_timeout)
        .map(|c| options.sql(c))
        .map(|c| options.valkey(c))
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
    let store = parse(url)?
        .map(|c| options.sql(c))
        .map(|c| options.valkey(c))
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
/// holders run, the way an operator would (the `wipe` fault): the records
/// of the wipe guard go with them, so claims wait out a restart span and
/// the holders' renewals answer `Lost` (with `restart_guard(false)`, SQL
/// and Valkey/Redis grant the slots again at once: the control).
pub async fn wipe(url: &str, pools: &[String]) -> Result<(), String> {
    let config = parse(url)?;
    if let Some(sql) = config.backend::<SqlConfig>() {
        wipe_sql(sql.clone()).await
    } else if let Some(valkey) = config.backend::<ValkeyConfig>() {
        wipe_valkey(valkey.clone()).await
    } else if let Some(etcd) = config.backend::<EtcdConfig>() {
        wipe_etcd(etcd.clone(), pools).await
    } else if let Some(kube) = config.backend::<KubeConfig>() {
        wipe_kube(kube.clone(), pools).await
    } else {
        Err(format!("store URL {url}: no wipe for this store"))
    }
}

/// SQL: the whole lease table emptied, `TRUNCATE` (SQLite, which has
/// none: `DELETE` of every row). The run's pools are the table's only
/// ones; the fenced writes' tables are the application's and stay.
async fn wipe_sql(config: SqlConfig) -> Result<(), String> {
    use leasehold_sql::{Engine, sqlx};
    let s = leasehold_sql::SqlStrategy::connect(
        config
            .op_timeout(Duration::from_secs(2))
            .max_connections(1)
            // The wipe takes no lease.
            .restart_guard(false),
    )
    .await
    .map_err(|e| format!("wipe connect: {e}"))?;
    // A table name is letters, digits and underscores (checked on
    // connect): no quoting needed.
    let table = s.table().as_str();
    let sql = match s.engine() {
        Engine::Sqlite => format!("DELETE FROM {table}"),
        _ => format!("TRUNCATE TABLE {table}"),
    };
    let r = if let Some(p) = s.postgres() {
        sqlx::raw_sql(&sql).execute(p).await.map(drop)
    } else if let Some(p) = s.mysql() {
        sqlx::raw_sql(&sql).execute(p).await.map(drop)
    } else if let Some(p) = s.sqlite() {
        sqlx::raw_sql(&sql).execute(p).await.map(drop)
    } else {
        Ok(())
    };
    s.close().await;
    r.map_err(|e| format!("{sql}: {e}"))
}

/// Valkey/Redis: `FLUSHALL`. The fenced writes' keys go too (as in a
/// restart of a server that keeps nothing): their logs then hold the
/// writes after the last wipe.
async fn wipe_valkey(config: ValkeyConfig) -> Result<(), String> {
    use fred::interfaces::ClientLike;
    use fred::types::{ClusterHash, CustomCommand, Value};
    let s = leasehold_valkey::ValkeyStrategy::connect(
        config
            .key_prefix(PREFIX)
            .op_timeout(Duration::from_secs(2))
            // The wipe takes no lease.
            .restart_guard(false),
    )
    .await
    .map_err(|e| format!("wipe connect: {e}"))?;
    s.client()
        .custom::<Value, Value>(
            CustomCommand::new_static("FLUSHALL", ClusterHash::Random, false),
            Vec::new(),
        )
        .await
        .map(drop)
        .map_err(|e| format!("FLUSHALL: {e}"))
}

/// etcd: each pool's key prefix deleted (`etcdctl del --prefix
/// campaign/<pool>/`): slots, floors and the incarnation key. The fenced
/// keys live under a prefix of their own and stay.
async fn wipe_etcd(config: EtcdConfig, pools: &[String]) -> Result<(), String> {
    let s = leasehold_etcd::EtcdStrategy::connect(
        config.prefix(PREFIX).op_timeout(Duration::from_secs(2)),
    )
    .await
    .map_err(|e| format!("wipe connect: {e}"))?;
    for pool in pools {
        s.client()
            .clone()
            .delete(
                format!("{PREFIX}/{pool}/"),
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            )
            .await
            .map_err(|e| format!("delete the prefix of {pool}: {e}"))?;
    }
    Ok(())
}

/// Kubernetes: each pool's Lease objects, by its label, deleted one by one
/// in name order as `kubectl delete leases -l leasehold/pool=<pool>` does
/// (the incarnation record sorts first). The fence objects carry no pool
/// label and stay.
async fn wipe_kube(config: KubeConfig, pools: &[String]) -> Result<(), String> {
    use leasehold_k8s::kube::Error;
    use leasehold_k8s::kube::api::{DeleteParams, ListParams};
    let api = KubeFences::connect(config).await?.api;
    for pool in pools {
        let selector = format!("{}={pool}", leasehold_k8s::POOL_LABEL);
        let list = api
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
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(format!("delete Lease {name}: {e}")),
            }
        }
    }
    Ok(())
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
    let config = parse(url)?.map(|c| options.sql(c));
    if config.backend::<EtcdConfig>().is_some() || config.backend::<KubeConfig>().is_some() {
        // etcd (Raft, fsync) and Kubernetes (etcd behind the API server)
        // keep what they acknowledged.
        return Ok(Probe {
            can_forget: false,
            refused: None,
        });
    }
    let any = config
        .clone()
        .map(|c: SqlConfig| c.restart_guard(false))
        .map(|c: ValkeyConfig| c.restart_guard(false))
        .connect()
        .await
        .map_err(|e| format!("probing: {e}"))?;
    let can_forget = !any.operator().durability().is_durable();
    close(any).await;
    let refused = match config.map(|c| options.valkey(c)).connect().await {
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

/// Closes a SQL store's connections at once (the others close on drop).
async fn close(store: leasehold::Store) {
    if let Some(s) = store.strategy::<leasehold_sql::SqlStrategy>() {
        s.close().await;
    }
}

/// The table where workers log the fenced writes the store accepted, in the
/// store's order (its id grows in commit order per resource: the fence row
/// is locked before the log row is inserted).
const FENCE_LOG: &str = "campaign_fence_log";

/// Fenced writes through the SQL [`FenceTable`](leasehold_sql::FenceTable).
struct SqlFences {
    strategy: leasehold_sql::SqlStrategy,
    table: leasehold_sql::FenceTable,
}

impl SqlFences {
    async fn connect(config: SqlConfig, options: &Options) -> Result<Self, String> {
        let strategy = leasehold_sql::SqlStrategy::connect(
            config
                .unsafe_keep_server_synchronous_commit(options.keep_server_synchronous_commit)
                .op_timeout(Duration::from_secs(2))
                .max_connections(1)
                // Fenced writes only: this connection takes no lease, so a
                // store that forgets has no guard to keep here.
                .restart_guard(false),
        )
        .await
        .map_err(|e| format!("fence connect: {e}"))?;
        Ok(Self {
            strategy,
            table: leasehold_sql::FenceTable::default(),
        })
    }

    /// Creates the fence table and the log (once, before the workers start).
    async fn prepare(&self) -> Result<(), String> {
        use leasehold_sql::Engine;
        self.table
            .ensure(&self.strategy)
            .await
            .map_err(|e| format!("fence table: {e}"))?;
        let sql = match self.strategy.engine() {
            Engine::Postgres => format!(
                "CREATE TABLE IF NOT EXISTS {FENCE_LOG} (id BIGSERIAL PRIMARY KEY, \
                 resource VARCHAR(255) NOT NULL, fence BIGINT NOT NULL)"
            ),
            Engine::MySql => format!(
                "CREATE TABLE IF NOT EXISTS {FENCE_LOG} (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
                 resource VARCHAR(255) NOT NULL, fence BIGINT UNSIGNED NOT NULL) ENGINE = InnoDB"
            ),
            _ => format!(
                "CREATE TABLE IF NOT EXISTS {FENCE_LOG} (id INTEGER PRIMARY KEY AUTOINCREMENT, \
                 resource TEXT NOT NULL, fence INTEGER NOT NULL)"
            ),
        };
        self.execute(&sql).await
    }

    async fn execute(&self, sql: &str) -> Result<(), String> {
        use leasehold_sql::sqlx;
        let r = if let Some(p) = self.strategy.postgres() {
            sqlx::raw_sql(sql).execute(p).await.map(drop)
        } else if let Some(p) = self.strategy.mysql() {
            sqlx::raw_sql(sql).execute(p).await.map(drop)
        } else if let Some(p) = self.strategy.sqlite() {
            sqlx::raw_sql(sql).execute(p).await.map(drop)
        } else {
            Ok(())
        };
        r.map_err(|e| e.to_string())
    }

    /// One fenced write to `resource` with `fence`: `Ok(true)` when the store
    /// accepted it (and logged it), `Ok(false)` when it refused it as stale.
    async fn write(&self, resource: &str, stamp: &FenceStamp) -> Result<bool, String> {
        use leasehold_sql::{SqlError, sqlx};
        let fence = stamp.fence().0;
        let log_fence = i64::try_from(fence).unwrap_or(i64::MAX);
        // Advance the fence and log it in one transaction; the engines
        // differ only in their placeholders and in how the log binds a u64.
        macro_rules! advance_and_log {
            ($pool:expr, $p1:literal, $p2:literal, $logged:expr) => {{
                let mut tx = $pool.begin().await.map_err(|e| e.to_string())?;
                match self.table.advance(&mut *tx, resource, stamp).await {
                    Ok(()) => {
                        sqlx::query(&format!(
                            "INSERT INTO {FENCE_LOG} (resource, fence) VALUES ({}, {})",
                            $p1, $p2
                        ))
                        .bind(resource)
                        .bind($logged)
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| e.to_string())?;
                        tx.commit().await.map_err(|e| e.to_string())?;
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }};
        }
        let advanced = if let Some(p) = self.strategy.postgres() {
            advance_and_log!(p, "$1", "$2", log_fence)
        } else if let Some(p) = self.strategy.mysql() {
            advance_and_log!(p, "?", "?", fence)
        } else if let Some(p) = self.strategy.sqlite() {
            advance_and_log!(p, "?1", "?2", log_fence)
        } else {
            return Ok(false);
        };
        match advanced {
            Ok(()) => Ok(true),
            Err(SqlError::Stale { .. }) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Per resource, the fences of the accepted writes in the store's order.
    async fn accepted(&self) -> Result<BTreeMap<String, Vec<u64>>, String> {
        use leasehold_sql::sqlx;
        let sql = format!("SELECT resource, fence FROM {FENCE_LOG} ORDER BY id");
        let rows: Vec<(String, i64)> = if let Some(p) = self.strategy.postgres() {
            sqlx::query_as(&sql).fetch_all(p).await
        } else if let Some(p) = self.strategy.mysql() {
            sqlx::query_as::<_, (String, u64)>(&sql)
                .fetch_all(p)
                .await
                .map(|v| {
                    v.into_iter()
                        .map(|(r, f)| (r, i64::try_from(f).unwrap_or(i64::MAX)))
                        .collect()
                })
        } else if let Some(p) = self.strategy.sqlite() {
            sqlx::query_as(&sql).fetch_all(p).await
        } else {
            Ok(Vec::new())
        }
        .map_err(|e| e.to_string())?;
        let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for (resource, fence) in rows {
            out.entry(resource)
                .or_default()
                .push(u64::try_from(fence).unwrap_or(0));
        }
        Ok(out)
    }
}

/// Valkey/Redis: the resource of a slot is a hash (`fence`, `value`), and
/// the fences of the writes it accepted are appended to a list in the same
/// script, so the list's order is the store's order. Both keys of a pool
/// carry the pool's hash tag under the campaign's prefix (`{campaign:<pool>}`,
/// the tag of the pool's lease keys too), so a script touches one cluster
/// slot.
struct ValkeyFences {
    strategy: leasehold_valkey::ValkeyStrategy,
}

/// Accepts iff the stored fence is at most the write's (the holder's own
/// repeated writes are accepted), then logs the fence. Fences are compared
/// as decimal strings (length, then text): exact over all of `u64`, where
/// Lua's numbers are doubles.
const VALKEY_FENCED_WRITE: &str = r"
local stored = redis.call('HGET', KEYS[1], 'fence')
local f = ARGV[1]
if stored and (#stored > #f or (#stored == #f and stored > f)) then
  return 0
end
redis.call('HSET', KEYS[1], 'fence', f, 'value', ARGV[2])
redis.call('RPUSH', KEYS[2], f)
return 1
";

fn valkey_keys(pool: &str, slot: u32) -> (String, String) {
    let resource = format!("{{{PREFIX}:{pool}}}:resource:{slot}");
    let log = format!("{resource}:log");
    (resource, log)
}

impl ValkeyFences {
    async fn connect(config: ValkeyConfig) -> Result<Self, String> {
        let strategy = leasehold_valkey::ValkeyStrategy::connect(
            config
                .key_prefix(PREFIX)
                .op_timeout(Duration::from_secs(2))
                // Only the fenced writes go through this connection, never
                // a claim: no claim for the restart guard to hold back.
                .restart_guard(false),
        )
        .await
        .map_err(|e| format!("fence connect: {e}"))?;
        Ok(Self { strategy })
    }

    async fn eval<R: fred::types::FromValue>(
        &self,
        script: &str,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> Result<R, String> {
        use fred::interfaces::LuaInterface;
        self.strategy
            .client()
            .eval(script, keys, args)
            .await
            .map_err(|e| e.to_string())
    }

    /// Removes what an earlier run of the same pools left.
    async fn prepare(&self, pools: &[String], slots: u32) -> Result<(), String> {
        for pool in pools {
            let keys: Vec<String> = (0..slots)
                .flat_map(|slot| {
                    let (resource, log) = valkey_keys(pool, slot);
                    [resource, log]
                })
                .collect();
            self.eval::<i64>("return redis.call('DEL', unpack(KEYS))", keys, Vec::new())
                .await?;
        }
        Ok(())
    }

    async fn write(&self, pool: &str, slot: u32, fence: u64) -> Result<bool, String> {
        let (resource, log) = valkey_keys(pool, slot);
        let value = format!("{}@{}", std::process::id(), MonoTime::now().as_nanos());
        let accepted: i64 = self
            .eval(
                VALKEY_FENCED_WRITE,
                vec![resource, log],
                vec![fence.to_string(), value],
            )
            .await?;
        Ok(accepted == 1)
    }

    /// The accepted fences of `slot` of `pool`, in the store's order.
    async fn log(&self, pool: &str, slot: u32) -> Result<Vec<String>, String> {
        let (_, log) = valkey_keys(pool, slot);
        self.eval(
            "return redis.call('LRANGE', KEYS[1], 0, -1)",
            vec![log],
            Vec::new(),
        )
        .await
    }
}

/// etcd: the resource of a slot is a key holding the last accepted fence
/// (zero-padded to 20 digits, so etcd's byte-wise value compare is numeric),
/// and each accepted write puts a log key in the same transaction; the log
/// keys' create revisions are the store's order.
struct EtcdFences {
    client: etcd_client::Client,
}

/// The prefix of the campaign's fenced keys in etcd.
const ETCD_FENCES: &str = "campaign-fences";

impl EtcdFences {
    async fn connect(config: EtcdConfig) -> Result<Self, String> {
        let strategy = leasehold_etcd::EtcdStrategy::connect(
            config.prefix(PREFIX).op_timeout(Duration::from_secs(2)),
        )
        .await
        .map_err(|e| format!("fence connect: {e}"))?;
        Ok(Self {
            client: strategy.client().clone(),
        })
    }

    async fn prepare(&self, pools: &[String]) -> Result<(), String> {
        for pool in pools {
            self.client
                .clone()
                .delete(
                    format!("{ETCD_FENCES}/{pool}/"),
                    Some(etcd_client::DeleteOptions::new().with_prefix()),
                )
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    async fn write(&self, pool: &str, slot: u32, fence: u64) -> Result<bool, String> {
        use etcd_client::{Compare, CompareOp, Txn, TxnOp};
        let key = format!("{ETCD_FENCES}/{pool}/{slot}");
        let padded = format!("{fence:020}");
        let log = format!(
            "{key}/log/{}-{}",
            std::process::id(),
            MonoTime::now().as_nanos()
        );
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

    /// The accepted fences of `slot` of `pool`, in the store's order.
    async fn log(&self, pool: &str, slot: u32) -> Result<Vec<String>, String> {
        use etcd_client::{GetOptions, SortOrder, SortTarget};
        let r = self
            .client
            .clone()
            .get(
                format!("{ETCD_FENCES}/{pool}/{slot}/log/"),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_sort(SortTarget::Create, SortOrder::Ascend),
                ),
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(r.kvs()
            .iter()
            .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())
            .collect())
    }
}

/// Kubernetes: the resource of a slot is a Lease object of its own
/// (`campaign-fence-<pool>-<slot>`, never a lease of the pool) whose
/// annotations hold the last accepted fence and the log of accepted fences;
/// a write is a compare-and-swap on the object's `resourceVersion` (a
/// conflict reads again), so the log's order is the store's order.
struct KubeFences {
    api: leasehold_k8s::kube::Api<leasehold_k8s::kube::core::DynamicObject>,
}

const FENCE_ANNOTATION: &str = "campaign.leasehold.dev/fence";
const LOG_ANNOTATION: &str = "campaign.leasehold.dev/log";

impl KubeFences {
    /// A client of its own on the API server `config` names, with the
    /// defaults of `kube` (its retries too) and short timeouts.
    async fn connect(config: KubeConfig) -> Result<Self, String> {
        use leasehold_k8s::kube::core::{ApiResource, GroupVersionKind};
        let server = config.server_url().ok_or(
            "fence connect: the fenced writes need the API server's address (k8s://HOST:PORT)",
        )?;
        let uri = server
            .parse()
            .map_err(|e| format!("fence connect: {server}: {e}"))?;
        let mut config = leasehold_k8s::kube::Config::new(uri);
        config.default_namespace = K8S_NAMESPACE.into();
        config.read_timeout = Some(Duration::from_secs(2));
        config.write_timeout = Some(Duration::from_secs(2));
        let client = leasehold_k8s::kube::Client::try_from(config)
            .map_err(|e| format!("fence connect: {e}"))?;
        let kind =
            ApiResource::from_gvk(&GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"));
        Ok(Self {
            api: leasehold_k8s::kube::Api::namespaced_with(client, K8S_NAMESPACE, &kind),
        })
    }

    fn name(pool: &str, slot: u32) -> String {
        format!("campaign-fence-{pool}-{slot}")
    }

    async fn prepare(&self, pools: &[String], slots: u32) -> Result<(), String> {
        use leasehold_k8s::kube::api::DeleteParams;
        for pool in pools {
            for slot in 0..slots {
                match self
                    .api
                    .delete(&Self::name(pool, slot), &DeleteParams::default())
                    .await
                {
                    Ok(_) => {}
                    Err(leasehold_k8s::kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
        }
        Ok(())
    }

    async fn write(&self, pool: &str, slot: u32, fence: u64) -> Result<bool, String> {
        use leasehold_k8s::kube::Error;
        use leasehold_k8s::kube::api::PostParams;
        use leasehold_k8s::kube::core::{DynamicObject, ObjectMeta};
        let name = Self::name(pool, slot);
        loop {
            let current = match self.api.get(&name).await {
                Ok(o) => Some(o),
                Err(Error::Api(s)) if s.code == 404 => None,
                Err(e) => return Err(e.to_string()),
            };
            let Some(mut obj) = current else {
                let mut obj = DynamicObject {
                    types: Some(leasehold_k8s::kube::core::TypeMeta {
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

    /// The accepted fences of `slot` of `pool`, in the store's order (none
    /// when nothing was written to it).
    async fn log(&self, pool: &str, slot: u32) -> Result<Vec<String>, String> {
        let obj = match self.api.get(&Self::name(pool, slot)).await {
            Ok(o) => o,
            Err(leasehold_k8s::kube::Error::Api(s)) if s.code == 404 => return Ok(Vec::new()),
            Err(e) => return Err(e.to_string()),
        };
        let log = obj
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(LOG_ANNOTATION))
            .cloned()
            .unwrap_or_default();
        Ok(log
            .split(',')
            .filter(|f| !f.is_empty())
            .map(str::to_owned)
            .collect())
    }
}

/// The resource of `slot` of `pool`, as the fence logs name it.
pub fn resource(pool: &str, slot: u32) -> String {
    format!("{pool}-{slot}")
}

/// Fenced writes through the store's fenced-write helper: the SQL
/// [`FenceTable`](leasehold_sql::FenceTable), or a fenced key on
/// Valkey/Redis (a script), etcd (a transaction) or Kubernetes (a
/// compare-and-swap on an object's `resourceVersion`).
pub struct FenceWriter(Fences);

enum Fences {
    Sql(SqlFences),
    Valkey(ValkeyFences),
    Etcd(Box<EtcdFences>),
    Kube(Box<KubeFences>),
}

impl FenceWriter {
    /// Whether the store at `url` has a fenced-write helper here: every
    /// backend's has one.
    pub fn supported(url: &str) -> bool {
        parse(url).is_ok()
    }

    /// Connects for fenced writes, or `None` when the store has no helper.
    pub async fn connect(url: &str) -> Result<Option<Self>, String> {
        Self::connect_with(url, &Options::default()).await
    }

    /// As [`FenceWriter::connect`], with a worker's `options` (a control
    /// run's SQL sessions keep the server's `synchronous_commit` too).
    pub async fn connect_with(url: &str, options: &Options) -> Result<Option<Self>, String> {
        let Ok(config) = parse(url) else {
            return Ok(None);
        };
        Ok(Some(Self(if let Some(sql) = config.backend::<SqlConfig>() {
            Fences::Sql(SqlFences::connect(sql.clone(), options).await?)
        } else if let Some(valkey) = config.backend::<ValkeyConfig>() {
            Fences::Valkey(ValkeyFences::connect(valkey.clone()).await?)
        } else if let Some(etcd) = config.backend::<EtcdConfig>() {
            Fences::Etcd(Box::new(EtcdFences::connect(etcd.clone()).await?))
        } else if let Some(kube) = config.backend::<KubeConfig>() {
            Fences::Kube(Box::new(KubeFences::connect(kube.clone()).await?))
        } else {
            return Ok(None);
        })))
    }

    /// Prepares the store for the fenced writes to the `slots` slots of
    /// `pools` (once, before the workers start): the SQL fence table and
    /// log; on Valkey/Redis, what an earlier run of these pools left is
    /// removed.
    pub async fn prepare(&self, pools: &[String], slots: u32) -> Result<(), String> {
        match &self.0 {
            Fences::Sql(f) => f.prepare().await,
            Fences::Valkey(f) => f.prepare(pools, slots).await,
            Fences::Etcd(f) => f.prepare(pools).await,
            Fences::Kube(f) => f.prepare(pools, slots).await,
        }
    }

    /// One fenced write with `fence` to the resource of `slot` of `pool`:
    /// `Ok(true)` when the store accepted it (and logged it), `Ok(false)`
    /// when it refused it as stale.
    pub async fn write(&self, pool: &str, slot: u32, fence: u64) -> Result<bool, String> {
        match &self.0 {
            Fences::Sql(f) => {
                let name = leasehold::PoolName::new(pool).map_err(|e| e.to_string())?;
                let stamp = FenceStamp::new(name, slot, leasehold::Fence(fence));
                f.write(&resource(pool, slot), &stamp).await
            }
            Fences::Valkey(f) => f.write(pool, slot, fence).await,
            Fences::Etcd(f) => f.write(pool, slot, fence).await,
            Fences::Kube(f) => f.write(pool, slot, fence).await,
        }
    }

    /// Per resource (see [`resource`]), the fences of the accepted writes in
    /// the store's order, for the `slots` slots of `pools`.
    pub async fn accepted(
        &self,
        pools: &[String],
        slots: u32,
    ) -> Result<BTreeMap<String, Vec<u64>>, String> {
        if let Fences::Sql(f) = &self.0 {
            return f.accepted().await;
        }
        // The other stores keep one log per slot.
        let mut out = BTreeMap::new();
        for pool in pools {
            for slot in 0..slots {
                let log = match &self.0 {
                    Fences::Valkey(f) => f.log(pool, slot).await?,
                    Fences::Etcd(f) => f.log(pool, slot).await?,
                    Fences::Kube(f) => f.log(pool, slot).await?,
                    Fences::Sql(_) => Vec::new(),
                };
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_url_goes_to_the_backend_of_its_scheme() {
        for (url, store) in [
            ("sqlite:///tmp/run/leases.sqlite", "sql"),
            ("postgres://postgres@127.0.0.1:5432/postgres", "sql"),
            ("mysql://root@127.0.0.1:3306/leasehold", "sql"),
            ("redis://127.0.0.1:6379", "valkey"),
            ("valkey://127.0.0.1:6379", "valkey"),
            ("etcd://127.0.0.1:2379,127.0.0.1:2380", "etcd"),
            ("k8s://127.0.0.1:8001", "k8s"),
        ] {
            let config = parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            let got = if config.backend::<SqlConfig>().is_some() {
                "sql"
            } else if config.backend::<ValkeyConfig>().is_some() {
                "valkey"
            } else if config.backend::<EtcdConfig>().is_some() {
                "etcd"
            } else if config.backend::<KubeConfig>().is_some() {
                "k8s"
            } else {
                "other"
            };
            assert_eq!(got, store, "{url}");
            assert!(FenceWriter::supported(url), "{url}");
        }
        for url in ["http://127.0.0.1:2379", "memory://", "127.0.0.1:6379"] {
            assert!(parse(url).is_err(), "{url}");
            assert!(!FenceWriter::supported(url), "{url}");
        }
    }
}
