//! `leasehold doctor`: one line per check, each with a verdict and a fix.

use std::fmt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fred::prelude::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use leasehold_etcd::EtcdStrategy;
use leasehold_k8s::KubeStrategy;
use leasehold_sql::{Engine, SqlError, SqlStrategy, sqlx};
use leasehold_valkey::{ActivePath, ValkeyStrategy};

use crate::StoreArgs;
use crate::error::{CliError, Exit};
use crate::redact;
use crate::store::Store;
use crate::table::duration;

/// How many round trips the latency and clock checks take.
const SAMPLES: usize = 5;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Ok,
    Warn,
    Fail,
    /// The check does not apply to this store (the line says why).
    NotApplicable,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Self::Ok => "ok",
            Self::Warn => "warn",
            Self::Fail => "FAIL",
            Self::NotApplicable => "n/a",
        })
    }
}

struct Check {
    verdict: Verdict,
    name: &'static str,
    detail: String,
    fix: Option<String>,
}

fn check(verdict: Verdict, name: &'static str, detail: impl Into<String>) -> Check {
    Check {
        verdict,
        name,
        detail: detail.into(),
        fix: None,
    }
}

impl Check {
    fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

pub(crate) async fn doctor(args: &StoreArgs) -> Result<Exit, CliError> {
    let secrets = redact::secrets(&args.url);
    println!("leasehold doctor: {}", redact::url(&args.url));
    let store = Store::connect_with(args, false).await?;
    let checks = match &store {
        Store::Sql(s) => sql(s).await,
        Store::Valkey(s) => valkey(s).await,
        Store::Etcd(s) => etcd(s).await,
        Store::Kube(s) => kube(args, s).await,
    };
    let mut fails = 0;
    let mut warns = 0;
    for c in &checks {
        match c.verdict {
            Verdict::Fail => fails += 1,
            Verdict::Warn => warns += 1,
            _ => {}
        }
        let mut line = format!("{:<4}  {:<12}  {}", c.verdict, c.name, c.detail);
        if let Some(fix) = &c.fix {
            line.push_str(" — fix: ");
            line.push_str(fix);
        }
        println!("{}", redact::scrub(&line, &secrets));
    }
    match (fails, warns) {
        (0, 0) => println!("all checks passed"),
        (0, w) => println!("no check failed; {w} warning(s)"),
        (f, w) => println!("{f} check(s) FAILed, {w} warning(s)"),
    }
    Ok(if fails > 0 {
        Exit::CheckFailed
    } else {
        Exit::Ok
    })
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

fn latency_check(samples: Vec<Duration>, what: &str) -> Check {
    if samples.is_empty() {
        return check(Verdict::Fail, "latency", format!("no {what} answered"))
            .fix("check the network path to the store");
    }
    let n = samples.len();
    let m = median(samples);
    let detail = format!("{} median of {n} {what}", duration_ms(m));
    if m < Duration::from_millis(100) {
        check(Verdict::Ok, "latency", detail)
    } else {
        check(Verdict::Warn, "latency", detail).fix(
            "slow round trips eat into the safety margin and the renewal interval: \
             use a store nearer to the holders, or a longer TTL",
        )
    }
}

/// `0.42 ms`, `12.1 ms`.
fn duration_ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn unix_micros_now() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_micros()).unwrap_or(0))
}

/// The offset of this host's clock from the store's, from bracketed
/// readings `(local before µs, store µs, local after µs)`: the reading with
/// the shortest round trip wins.
fn clock_check(readings: &[(i128, i128, i128)]) -> Check {
    let Some(&(t0, server, t1)) = readings.iter().min_by_key(|(t0, _, t1)| t1 - t0) else {
        return check(Verdict::Warn, "clock", "the store's time could not be read");
    };
    let offset_us = (t0 + t1) / 2 - server;
    let bound_us = (t1 - t0) / 2;
    let abs = Duration::from_micros(u64::try_from(offset_us.unsigned_abs()).unwrap_or(u64::MAX));
    let direction = if offset_us >= 0 { "ahead of" } else { "behind" };
    let detail = format!(
        "this host is {} {direction} the store's clock (±{})",
        duration_ms(abs),
        duration_ms(Duration::from_micros(u64::try_from(bound_us).unwrap_or(0)))
    );
    // Judge what the offset is at least: the reading cannot tell apart
    // offsets within half its round trip.
    let bound = Duration::from_micros(u64::try_from(bound_us).unwrap_or(0));
    let least = abs.saturating_sub(bound);
    if least <= Duration::from_millis(100) {
        check(Verdict::Ok, "clock", detail)
    } else if least <= Duration::from_secs(1) {
        check(Verdict::Warn, "clock", detail).fix(
            "sync this host's clock (chrony/NTP); expiry is the store's, but after a hand-over \
             a holder whose clock is behind the slot's floor waits up to max_clock_skew (1 s)",
        )
    } else {
        check(Verdict::Fail, "clock", detail).fix(
            "sync this host's clock (chrony/NTP): beyond max_clock_skew (1 s) a holder refuses \
             to generate IDs after a hand-over until its clock passes the slot's floor",
        )
    }
}

// ---- SQL ----

async fn sql_i64(s: &SqlStrategy, sql: &str) -> Result<i64, sqlx::Error> {
    if let Some(p) = s.postgres() {
        sqlx::query_scalar(sql).fetch_one(p).await
    } else if let Some(p) = s.mysql() {
        sqlx::query_scalar(sql).fetch_one(p).await
    } else if let Some(p) = s.sqlite() {
        sqlx::query_scalar(sql).fetch_one(p).await
    } else {
        Ok(0)
    }
}

async fn sql(s: &SqlStrategy) -> Vec<Check> {
    let engine = s.engine();
    let table = s.table().as_str().to_owned();
    let mut checks = vec![
        check(Verdict::Ok, "server", s.server_version()),
        check(
            Verdict::Ok,
            "path",
            format!("SQL lease table {table} ({engine}), one statement per operation"),
        ),
    ];
    // The library's own check: the columns and the fix are its own.
    checks.push(match s.check_schema().await {
        Ok(()) => check(
            Verdict::Ok,
            "schema",
            format!(
                "lease table {table} present, with the floor, restart-span and ID-format columns"
            ),
        ),
        Err(SqlError::MissingSchema { what, fix }) => check(Verdict::Fail, "schema", what).fix(fix),
        Err(e) => check(
            Verdict::Fail,
            "schema",
            format!("cannot read the columns of {table}: {e}"),
        ),
    });
    let d = s.durability();
    checks.push(if d.is_durable() {
        check(Verdict::Ok, "durability", d.to_string())
    } else {
        let risks: Vec<String> = d
            .risks
            .iter()
            .map(|r| format!("{} = {} ({})", r.setting, r.value, r.loses))
            .collect();
        let fixes: Vec<&str> = d.risks.iter().map(|r| r.fix.as_str()).collect();
        check(
            Verdict::Warn,
            "durability",
            format!(
                "can forget acknowledged writes: {}; applications are refused unless they \
                 opt in (SqlConfig::assume_one_timing_per_pool or restart_guard(false))",
                risks.join("; ")
            ),
        )
        .fix(fixes.join("; "))
    });
    // The server's clock, read as each engine's lease statements read it.
    let now_sql = match engine {
        Engine::Postgres => {
            Some("SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)")
        }
        Engine::MySql => Some("SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)"),
        _ => None,
    };
    match now_sql {
        None => checks.push(check(
            Verdict::NotApplicable,
            "clock",
            "SQLite has no server: every holder reads its own host's clock, on the one machine \
             that has the file",
        )),
        Some(q) => {
            let mut readings = Vec::new();
            for _ in 0..SAMPLES {
                let t0 = unix_micros_now();
                if let Ok(server) = sql_i64(s, q).await {
                    readings.push((t0, i128::from(server), unix_micros_now()));
                }
            }
            checks.push(clock_check(&readings));
        }
    }
    let mut samples = Vec::new();
    for _ in 0..SAMPLES {
        let t = Instant::now();
        if s.ping().await.is_ok() {
            samples.push(t.elapsed());
        }
    }
    checks.push(latency_check(samples, "SELECT 1"));
    checks
}

// ---- Valkey / Redis ----

async fn valkey_call(s: &ValkeyStrategy, cmd: &'static str) -> Result<Value, String> {
    let command = CustomCommand::new_static(cmd, ClusterHash::Random, false);
    s.client()
        .custom::<Value, Value>(command, Vec::new())
        .await
        .map_err(|e| e.to_string())
}

async fn valkey(s: &ValkeyStrategy) -> Vec<Check> {
    let server = s.server().to_string();
    let d = s.durability();
    let mut checks = vec![check(Verdict::Ok, "server", server.clone())];
    checks.push(match s.path() {
        ActivePath::Hsetex => check(
            Verdict::Ok,
            "path",
            "HSETEX: one hash per pool with per-field TTLs",
        ),
        ActivePath::Scripts => check(
            Verdict::Ok,
            "path",
            "scripts: one key per slot (SET NX PX and Lua); HSETEX needs Redis 8+ or Valkey 9+",
        ),
        _ => check(
            Verdict::Fail,
            "path",
            "HSETEX forced on a server without it",
        )
        .fix("use Method::Auto or Method::Scripts"),
    });
    checks.push(match (d.evicts(), d.maxmemory_policy.as_deref()) {
        (Some(false), Some(p)) => check(Verdict::Ok, "eviction", format!("maxmemory-policy {p}")),
        (Some(true), Some(p)) => check(
            Verdict::Fail,
            "eviction",
            format!(
                "maxmemory-policy {p}: the server may evict a lease (two holders of one slot) \
                 or the fences hash"
            ),
        )
        .fix(
            "CONFIG SET maxmemory-policy noeviction, and set it in valkey.conf / redis.conf; or \
             give the leases a server of their own",
        ),
        _ => check(
            Verdict::Warn,
            "eviction",
            "maxmemory-policy unknown (CONFIG GET is disabled or denied)",
        )
        .fix("make sure the server runs with maxmemory-policy noeviction"),
    });
    let aof = match (d.appendonly, d.appendfsync.as_deref()) {
        (Some(true), Some(f)) => format!("AOF on (appendfsync {f})"),
        (Some(true), None) => "AOF on".to_owned(),
        (Some(false), _) => "AOF off".to_owned(),
        (None, _) => "AOF unknown".to_owned(),
    };
    let rdb = match d.save.as_deref() {
        Some(s) if s.trim().is_empty() => "RDB snapshots off".to_owned(),
        Some(s) => format!("RDB snapshots (save {s:?})"),
        None => "RDB snapshots unknown".to_owned(),
    };
    let fix_persist = "appendonly yes and appendfsync always (CONFIG SET and the config file)";
    checks.push(if d.keeps_every_write() {
        check(
            Verdict::Ok,
            "persistence",
            "AOF with appendfsync always: every acknowledged write survives a restart",
        )
    } else {
        match d.persists() {
            Some(true) if d.fsyncs_on_request() && s.server().waitaof => check(
                Verdict::Warn,
                "persistence",
                format!(
                    "{aof}, {rdb}: a crash of the machine can lose the last acknowledged writes; \
                     claims wait for the fsync of the pool's restart span (WAITAOF), and the \
                     restart guard holds claims back after a restart"
                ),
            )
            .fix(fix_persist),
            Some(true) => check(
                Verdict::Warn,
                "persistence",
                format!(
                    "{aof}, {rdb}: a crash can lose the last acknowledged writes; processes are \
                     refused unless they opt in (assume_one_timing_per_pool or \
                     restart_guard(false)), and the restart guard then holds claims back after \
                     a restart"
                ),
            )
            .fix(fix_persist),
            Some(false) => check(
                Verdict::Warn,
                "persistence",
                format!(
                    "{aof}, {rdb}: a restart loses every lease and floor; processes are refused \
                     unless they opt in (assume_one_timing_per_pool or restart_guard(false)), \
                     and the restart guard then holds claims back after a restart"
                ),
            )
            .fix(fix_persist),
            None => check(
                Verdict::Warn,
                "persistence",
                format!("{aof}, {rdb} (CONFIG GET is disabled or denied)"),
            )
            .fix(fix_persist),
        }
    });
    let mut readings = Vec::new();
    for _ in 0..SAMPLES {
        let t0 = unix_micros_now();
        if let Ok(Value::Array(parts)) = valkey_call(s, "TIME").await {
            let t1 = unix_micros_now();
            let num = |v: &Value| -> Option<i128> {
                match v {
                    Value::Integer(i) => Some(i128::from(*i)),
                    other => other.as_string()?.parse().ok(),
                }
            };
            if let (Some(secs), Some(us)) =
                (parts.first().and_then(num), parts.get(1).and_then(num))
            {
                readings.push((t0, secs * 1_000_000 + us, t1));
            }
        }
    }
    checks.push(clock_check(&readings));
    let mut samples = Vec::new();
    for _ in 0..SAMPLES {
        let t = Instant::now();
        if valkey_call(s, "PING").await.is_ok() {
            samples.push(t.elapsed());
        }
    }
    checks.push(latency_check(samples, "PINGs"));
    checks
}

// ---- etcd ----

async fn etcd(s: &EtcdStrategy) -> Vec<Check> {
    let mut client = s.client().clone();
    let mut checks = Vec::new();
    let mut samples = Vec::new();
    let mut status = None;
    for _ in 0..SAMPLES {
        let t = Instant::now();
        match client.status().await {
            Ok(st) => {
                samples.push(t.elapsed());
                status = Some(Ok(st));
            }
            Err(e) => {
                if status.is_none() {
                    status = Some(Err(e.to_string()));
                }
            }
        }
    }
    match &status {
        Some(Ok(st)) => {
            checks.push(check(
                Verdict::Ok,
                "server",
                format!("etcd {}", st.version()),
            ));
            checks.push(if st.leader() != 0 {
                check(
                    Verdict::Ok,
                    "cluster",
                    format!("a Raft leader is elected (term {})", st.raft_term()),
                )
            } else {
                check(
                    Verdict::Fail,
                    "cluster",
                    "no Raft leader: writes cannot commit",
                )
                .fix("bring a quorum of members back")
            });
        }
        Some(Err(e)) => checks.push(check(
            Verdict::Fail,
            "server",
            format!("STATUS failed: {e}"),
        )),
        None => {}
    }
    checks.push(check(
        Verdict::Ok,
        "path",
        format!(
            "a key per slot ({} …) bound to an etcd lease; revisions are the fences",
            s.slot_key(
                &leasehold_core::PoolName::new("POOL").unwrap_or_else(|_| unreachable!()),
                0
            )
            .replace("POOL/0", "<pool>/<slot>")
        ),
    ));
    checks.push(check(
        Verdict::NotApplicable,
        "durability",
        "etcd answers a write once a quorum has it in its fsynced Raft log (a member started \
         with --unsafe-no-fsync would not; the API does not show it)",
    ));
    checks.push(check(
        Verdict::NotApplicable,
        "clock",
        "etcd has no wall-clock API: lease TTLs count on the leader's clock, and holders never \
         compare their wall clocks with it",
    ));
    checks.push(latency_check(samples, "STATUS requests"));
    checks
}

// ---- Kubernetes ----

async fn kube(args: &StoreArgs, s: &KubeStrategy) -> Vec<Check> {
    let mut checks = vec![check(
        Verdict::Ok,
        "server",
        format!(
            "the API server answers; Leases in namespace {} (its version is not read)",
            s.namespace()
        ),
    )];
    // The strategy's own preflight: one access review per verb, a LIST
    // (resourceVersion format) and a dry-run create (the namespace).
    let t = Instant::now();
    checks.push(match Store::connect_with(args, true).await {
        Ok(_) => check(
            Verdict::Ok,
            "rbac",
            format!(
                "get, list, create and patch on leases allowed; resourceVersions are integers; \
                 the namespace exists (preflight took {})",
                duration(t.elapsed())
            ),
        ),
        // The strategy's errors say what to do already.
        Err(e) if e.message.contains("rbac.yaml") => check(Verdict::Fail, "rbac", e.message),
        Err(e) => check(Verdict::Fail, "rbac", e.message).fix(
            "apply lease-k8s/deploy/rbac.yaml (a Role with get, list, create, patch on \
             coordination.k8s.io leases) bound to this identity",
        ),
    });
    checks.push(check(
        Verdict::NotApplicable,
        "durability",
        "the API server keeps Leases in etcd",
    ));
    checks.push(check(
        Verdict::NotApplicable,
        "clock",
        "each observer times a Lease's expiry on its own monotonic clock from when it saw \
         renewTime change; wall clocks are not compared",
    ));
    checks
}
