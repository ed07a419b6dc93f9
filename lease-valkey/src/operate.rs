//! The operator's handle on a Valkey/Redis lease store: what `leasehold
//! status`, `revoke` and `doctor` do, through core's [`Operate`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::prelude::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use leasehold_core::operate::refusal_check;
use leasehold_core::{
    BoxFuture, Check, Durability, Guard, Operate, OperateError, PoolSpec, Reason, Verdict,
};

use crate::{ActivePath, Persistence, ValkeyError, ValkeyStrategy};

impl ValkeyStrategy {
    /// One argument-less command on any node, bounded by the operation timeout.
    async fn bare(&self, cmd: &'static str) -> Result<Value, OperateError> {
        let command = CustomCommand::new_static(cmd, ClusterHash::Random, false);
        let call = self.client().custom::<Value, Value>(command, Vec::new());
        match tokio::time::timeout(self.op_timeout(), call).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(OperateError::Unreachable(Reason::new(format!(
                "{cmd}: {e}"
            )))),
            Err(_) => Err(OperateError::Unreachable(Reason::new(format!(
                "{cmd}: no answer within {:?} (op_timeout)",
                self.op_timeout()
            )))),
        }
    }

    fn path_check(&self) -> Check {
        match self.path() {
            ActivePath::Hsetex => Check::new(
                Verdict::Ok,
                "path",
                "HSETEX: one hash per pool with per-field TTLs",
            ),
            ActivePath::Scripts => Check::new(
                Verdict::Ok,
                "path",
                "scripts: one key per slot (SET NX PX and Lua); HSETEX needs Redis 8+ or \
                 Valkey 9+",
            ),
            ActivePath::Unsupported => Check::new(
                Verdict::Fail,
                "path",
                "HSETEX forced on a server without it",
            )
            .fix("use Method::Auto or Method::Scripts"),
        }
    }

    /// TLS: its version and what verified the server; plain text is a
    /// warning unless every server of the URL is on this machine.
    fn tls_check(&self) -> Check {
        if let Some(tls) = self.tls() {
            return Check::new(Verdict::Ok, "tls", tls.to_string());
        }
        let hosts: Vec<String> = self
            .client()
            .client_config()
            .server
            .hosts()
            .into_iter()
            .map(|s| s.host.to_string())
            .collect();
        let remote: Vec<&str> = hosts
            .iter()
            .map(String::as_str)
            .filter(|h| !leasehold_core::url::is_loopback_host(h))
            .collect();
        if remote.is_empty() {
            Check::new(
                Verdict::Ok,
                "tls",
                "plain text, to this machine only (loopback)",
            )
        } else {
            Check::new(
                Verdict::Warn,
                "tls",
                format!(
                    "plain text to {}: the password and every lease cross the network \
                     unencrypted and unauthenticated",
                    remote.join(", ")
                ),
            )
            .fix("use rediss:// (or valkeys://) with the server's TLS port")
        }
    }

    /// The user's ACL against the lease user's ([`ValkeyStrategy::grants`]).
    async fn grants_check(&self) -> Check {
        let acl = self.lease_user_acl();
        let user = self.url_user();
        match self.grants().await {
            Ok(g) if g.missing.is_empty() && g.unchecked.is_none() => Check::new(
                Verdict::Ok,
                "grants",
                format!(
                    "the user may run every command leasehold sends, on the keys {}",
                    &acl.key_pattern()[1..]
                ),
            ),
            Ok(g) if g.missing.is_empty() => {
                Check::new(Verdict::Warn, "grants", g.unchecked.unwrap_or_default())
            }
            Ok(g) => {
                let missing = g.missing.join(" ");
                let more = g.unchecked.map_or(String::new(), |u| format!(" ({u})"));
                Check::new(
                    Verdict::Fail,
                    "grants",
                    format!("the user lacks {missing}{more}"),
                )
                .fix(format!(
                    "as an administrator: ACL SETUSER {user} {missing} (a lease user's whole \
                     ACL: {acl})"
                ))
            }
            Err(e) => Check::new(
                Verdict::Fail,
                "grants",
                format!("the check of the user's ACL failed: {e}"),
            ),
        }
    }

    /// The persistence check: what `connect` refuses under this
    /// configuration FAILs with the refusal's fixes and opt-ins; what it
    /// accepts is `ok`, or a warning naming what accepted it.
    fn persistence_check(&self) -> Check {
        if let Some(refusal) = self.refusal_of("persistence") {
            return refusal_check("persistence", &refusal);
        }
        let d = self.persistence();
        let fix = "appendonly yes, appendfsync always and no-appendfsync-on-rewrite no (CONFIG \
                   SET and the config file)";
        if d.keeps_every_write() {
            return Check::new(
                Verdict::Ok,
                "persistence",
                "AOF with appendfsync always, fsynced while a child process saves too: every \
                 acknowledged write survives a restart",
            );
        }
        let (aof, rdb) = settings(&d);
        let detail = match (self.fsync_claims(), self.opt_in()) {
            (true, _) => format!(
                "{aof}, {rdb}: a crash of the machine can lose the last acknowledged writes; \
                 claims wait for the fsync of the pool's restart span (WAITAOF), and the \
                 restart guard holds claims back after a restart"
            ),
            (false, Some(opt_in @ "durability=throwaway")) => format!(
                "{aof}, {rdb}: a restart can forget leases; accepted by {opt_in}: no restart \
                 guard, so a restart can hand every held slot to a second holder at once"
            ),
            (false, Some(opt_in)) => format!(
                "{aof}, {rdb}: a restart can forget leases; accepted by {opt_in}: the restart \
                 guard holds claims back after a restart for this process's TTL plus twice its \
                 max_clock_skew"
            ),
            (false, None) => format!("{aof}, {rdb}"),
        };
        Check::new(Verdict::Warn, "persistence", detail).fix(fix)
    }

    /// In a Cluster, a `node` line per primary: what it keeps, `ok` when it
    /// keeps every write and evicts nothing, a warning otherwise (the
    /// eviction and persistence lines above judge the weakest, with the
    /// refusal or the opt-in that accepted it). None outside a Cluster.
    fn node_checks(&self) -> Vec<Check> {
        self.node_persistence()
            .into_iter()
            .map(|(node, d)| {
                let (aof, rdb) = settings(&d);
                let policy = d.maxmemory_policy.as_deref().unwrap_or("unknown");
                let kept = d.keeps_every_write() && d.evicts() == Some(false);
                Check::new(
                    if kept { Verdict::Ok } else { Verdict::Warn },
                    "node",
                    format!("{node}: {aof}, {rdb}, maxmemory-policy {policy}"),
                )
            })
            .collect()
    }

    /// The eviction check: an evicting server FAILs with the refusal
    /// `connect` makes, unless the configuration allows eviction (a
    /// warning then).
    fn eviction_check(&self) -> Check {
        let d = self.persistence();
        match (d.evicts(), d.maxmemory_policy.as_deref()) {
            (Some(false), Some(p)) => {
                Check::new(Verdict::Ok, "eviction", format!("maxmemory-policy {p}"))
            }
            (Some(true), Some(p)) => match self.refusal_of("eviction") {
                Some(refusal) => refusal_check("eviction", &refusal),
                None => Check::new(
                    Verdict::Warn,
                    "eviction",
                    format!(
                        "maxmemory-policy {p}: the server may evict a lease (two holders of one \
                         slot) or the fences hash; accepted by allow_eviction=true"
                    ),
                )
                .fix(
                    "CONFIG SET maxmemory-policy noeviction, and set it in valkey.conf / \
                     redis.conf; or give the leases a server of their own",
                ),
            },
            _ => Check::new(
                Verdict::Warn,
                "eviction",
                "maxmemory-policy unknown (CONFIG GET is disabled or denied)",
            )
            .fix("make sure the server runs with maxmemory-policy noeviction"),
        }
    }
}

/// `AOF on (appendfsync everysec)`, `RDB snapshots off`.
fn settings(d: &Persistence) -> (String, String) {
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
    (aof, rdb)
}

/// `TIME`'s answer: seconds and microseconds, as integers or strings.
fn time_of(v: &Value) -> Option<SystemTime> {
    let Value::Array(parts) = v else { return None };
    let num = |v: &Value| -> Option<u64> {
        match v {
            Value::Integer(i) => u64::try_from(*i).ok(),
            other => other.as_string()?.parse().ok(),
        }
    };
    let secs = num(parts.first()?)?;
    let micros = num(parts.get(1)?)?;
    Some(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros))
}

fn from_valkey(e: ValkeyError) -> OperateError {
    match e {
        e @ ValkeyError::Unreachable { .. } => {
            OperateError::Unreachable(Reason::new(e.to_string()))
        }
        other => OperateError::Store(Reason::new(other.to_string())),
    }
}

impl Operate for ValkeyStrategy {
    /// The server, and over TLS what the connection verified: `Redis 7.0.15
    /// over TLS 1.3, server verified (chain and host name) against the CA in
    /// /etc/ids/ca.crt, client certificate /etc/ids/client.crt`.
    fn describe(&self) -> String {
        match self.tls() {
            Some(tls) => format!("{} over {tls}", self.server()),
            None => self.server().to_string(),
        }
    }

    fn round_trip(&self) -> &'static str {
        "PING"
    }

    fn durability(&self) -> Durability {
        self.persistence().durability()
    }

    fn replication(&self) -> leasehold_core::Replication {
        ValkeyStrategy::replication(self)
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), OperateError>> {
        Box::pin(async move { self.bare("PING").await.map(drop) })
    }

    fn store_time(&self) -> BoxFuture<'_, Result<Option<SystemTime>, OperateError>> {
        Box::pin(async move {
            let v = self.bare("TIME").await?;
            time_of(&v)
                .map(Some)
                .ok_or_else(|| OperateError::Store(Reason::new(format!("TIME answered {v:?}"))))
        })
    }

    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> BoxFuture<'a, Result<bool, OperateError>> {
        Box::pin(async move {
            ValkeyStrategy::revoke(self, pool, slot)
                .await
                .map_err(from_valkey)
        })
    }

    /// Makes the pool's incarnation record
    /// ([`ValkeyStrategy::prepare_pool`]): a pool whose records are gone
    /// waits one restart span from now (logged), whether it was wiped or
    /// is new; an operator skips that for a new pool with
    /// [`ValkeyStrategy::declare_new_pool`]. Without a pool: nothing.
    fn prepare<'a>(
        &'a self,
        pool: Option<&'a PoolSpec>,
    ) -> BoxFuture<'a, Result<Option<Duration>, OperateError>> {
        Box::pin(async move {
            match pool {
                Some(pool) => self.prepare_pool(pool).await.map_err(from_valkey),
                None => Ok(None),
            }
        })
    }

    /// [`ValkeyStrategy::declare_new_pool`]: the pool's first claim waits
    /// for nothing. Only with every holder of the pool stopped; refused
    /// while a slot of the pool has a lease.
    fn prepare_new_pool<'a>(
        &'a self,
        pool: &'a PoolSpec,
    ) -> BoxFuture<'a, Result<(), OperateError>> {
        Box::pin(async move { self.declare_new_pool(pool).await.map_err(from_valkey) })
    }

    /// The restart, promotion and wipe guards of `pool`, from its fences
    /// hash (the server alone tells nothing of them: each pool keeps its
    /// own records).
    fn guards<'a>(
        &'a self,
        pool: Option<&'a PoolSpec>,
    ) -> BoxFuture<'a, Result<Vec<Guard>, OperateError>> {
        Box::pin(async move {
            match pool {
                None => Ok(Vec::new()),
                Some(pool) => self.read_guards(pool).await.map_err(from_valkey),
            }
        })
    }

    fn checks(&self) -> BoxFuture<'_, Vec<Check>> {
        Box::pin(async move {
            let mut checks = vec![
                Check::new(Verdict::Ok, "server", self.server().to_string()),
                self.tls_check(),
                self.grants_check().await,
                self.path_check(),
                self.eviction_check(),
                self.persistence_check(),
            ];
            checks.extend(self.node_checks());
            checks
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_reads_integers_and_strings() {
        let at = UNIX_EPOCH + Duration::from_micros(1_700_000_000_000_042);
        let ints = Value::Array(vec![Value::Integer(1_700_000_000), Value::Integer(42)]);
        let strings = Value::Array(vec![
            Value::String("1700000000".into()),
            Value::String("42".into()),
        ]);
        assert_eq!(time_of(&ints), Some(at));
        assert_eq!(time_of(&strings), Some(at));
        assert_eq!(time_of(&Value::Null), None);
    }
}
