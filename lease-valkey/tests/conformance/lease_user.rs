//! The behaviour suite as a lease user: an ACL user with only the rules
//! [`LeaseUserAcl`] gives it (its key prefix, the commands leasehold sends),
//! made by the administrator (the server's default user), who also does
//! what a lease user may not (revoke). And what a missing rule or a wrong
//! password says.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use leasehold_conformance::servers::{Missing, Server, ServerKind, provide};
use leasehold_conformance::{Glue, Outcome, Store, Target, ensure, fresh_pool, trials};
use leasehold_core::{
    BoxFuture, DurabilityPolicy, Floor, IdFormat, PoolSpec, Release, Renewal, Strategy,
};
use leasehold_valkey::{ActivePath, LeaseUserAcl, ValkeyConfig, ValkeyError, ValkeyStrategy};

const PREFIX: &str = "lhuser";
const USER: &str = "lease";
const PASSWORD: &str = "lease-user-secret";

/// Rules that connect, claim, renew and release as a lease user do not
/// use on a server that fsyncs always and has no replicas: `WAIT` and
/// `WAITAOF` and the mark before them (`HINCRBY`; only with
/// `wait_for_replicas`, or a server that fsyncs once a second), `COMMAND INFO` (denied, the version tells), `CONFIG GET`
/// (denied, the settings read unknown: accepted only by `DurabilityPolicy::Throwaway`,
/// tested apart), `EVAL` (only when the script cache was lost), `PTTL` and
/// `HPTTL` (inspection), `PING` and `TIME` (`leasehold doctor`).
const UNUSED_BY_THE_FLOW: &[&str] = &[
    "+wait",
    "+waitaof",
    "+hincrby",
    "+command|info",
    "+config|get",
    "+eval",
    "+pttl",
    "+hpttl",
    "+ping",
    "+time",
];

pub(crate) struct LeaseUser {
    /// The server's URL: its default user, the administrator.
    admin_url: String,
    addr: SocketAddr,
}

impl LeaseUser {
    fn url_as(&self, user: &str, password: &str) -> String {
        self.admin_url
            .replacen("://", &format!("://{user}:{password}@"), 1)
    }

    async fn connect_as(
        &self,
        user: &str,
        password: &str,
        guard: bool,
    ) -> Result<ValkeyStrategy, ValkeyError> {
        ValkeyStrategy::connect(
            ValkeyConfig::from_url(&self.url_as(user, password))?
                .durability(if guard {
                    DurabilityPolicy::Durable
                } else {
                    DurabilityPolicy::Throwaway
                })
                .key_prefix(PREFIX),
        )
        .await
    }

    async fn admin(&self) -> Result<ValkeyStrategy, String> {
        ValkeyStrategy::connect(
            ValkeyConfig::from_url(&self.admin_url)
                .map_err(|e| e.to_string())?
                .durability(DurabilityPolicy::Throwaway)
                .key_prefix(PREFIX),
        )
        .await
        .map_err(|e| e.to_string())
    }
}

/// Makes (or resets) `user` with `password` and `rules`, as the
/// administrator.
pub(crate) async fn set_user(
    admin: &ValkeyStrategy,
    user: &str,
    password: &str,
    rules: &[String],
) -> Outcome {
    let mut args: Vec<Value> = vec!["SETUSER".into(), user.into(), "reset".into(), "on".into()];
    args.push(format!(">{password}").into());
    args.extend(rules.iter().map(|r| Value::from(r.as_str())));
    admin
        .client()
        .custom::<Value, Value>(
            CustomCommand::new_static("ACL", ClusterHash::Random, false),
            args,
        )
        .await
        .map(drop)
        .map_err(|e| format!("ACL SETUSER {user}: {e}"))
}

impl Glue for LeaseUser {
    fn connect(&self) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async move {
            let s = self
                .connect_as(USER, PASSWORD, false)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Arc::new(s) as Store)
        })
    }

    fn connect_via(
        &self,
        addr: SocketAddr,
        op_timeout: Duration,
    ) -> BoxFuture<'_, Result<Store, String>> {
        let url =
            self.url_as(USER, PASSWORD)
                .replacen(&self.addr.to_string(), &addr.to_string(), 1);
        Box::pin(async move {
            let s = ValkeyStrategy::connect(
                ValkeyConfig::from_url(&url)
                    .map_err(|e| e.to_string())?
                    .durability(DurabilityPolicy::Throwaway)
                    .key_prefix(PREFIX)
                    .op_timeout(op_timeout),
            )
            .await
            .map_err(|e| e.to_string())?;
            Ok(Arc::new(s) as Store)
        })
    }

    fn store_addr(&self) -> Option<SocketAddr> {
        Some(self.addr)
    }

    /// Revoking is the administrator's.
    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> Option<BoxFuture<'a, Result<(), String>>> {
        Some(Box::pin(async move {
            let s = self.admin().await?;
            let was = s.revoke(pool, slot).await.map_err(|e| e.to_string())?;
            ensure!(was, "no lease on slot {slot} to revoke");
            Ok(())
        }))
    }
}

/// Connect, claim, renew, release, `PING` and `TIME` as `user`: the first
/// failure's text, or `None` when all went through.
async fn flow(b: &LeaseUser, user: &str) -> Result<Option<String>, String> {
    let s = match b.connect_as(user, PASSWORD, false).await {
        Ok(s) => s,
        Err(e) => return Ok(Some(format!("connect: {e}"))),
    };
    // With an ID format, which the first claim records (`HSETNX`).
    let format = IdFormat::new(1, "lease-user test").map_err(|e| e.to_string())?;
    let pool = fresh_pool(2, Duration::from_secs(30))?.with_id_format(format);
    let grant = match s.acquire(&pool, Floor::NONE).await {
        Ok(g) => g,
        Err(e) => return Ok(Some(format!("acquire: {e}"))),
    };
    if let Renewal::Retry(r) | Renewal::Lost(r) = s.renew(&pool, &grant, Floor::NONE).await {
        return Ok(Some(format!("renew: {r}")));
    }
    if let Release::Retry(r) = s.release(&pool, &grant, Floor::NONE).await {
        return Ok(Some(format!("release: {r}")));
    }
    Ok(None)
}

/// The full ACL works, and with each rule taken away in turn, what fails
/// names the rule, and the ACL check (`grants`, `leasehold doctor`) finds it
/// missing, and nothing else.
async fn each_missing_rule_is_named(b: Arc<LeaseUser>) -> Outcome {
    let admin = b.admin().await?;
    let acl = LeaseUserAcl::for_server(PREFIX, admin.server());
    let all = acl.rules();
    for (i, rule) in all.iter().enumerate() {
        if !(rule.starts_with('+') || rule.starts_with('~')) {
            continue;
        }
        let user = format!("lease-without-{i}");
        let rules: Vec<String> = all.iter().filter(|r| *r != rule).cloned().collect();
        set_user(&admin, &user, PASSWORD, &rules).await?;
        // The script path's claim, renewal and release call no HDEL or
        // HLEN (the HSETEX path's do).
        let unused = UNUSED_BY_THE_FLOW.contains(&rule.as_str())
            || (admin.path() == ActivePath::Scripts && ["+hdel", "+hlen"].contains(&rule.as_str()));
        match flow(&b, &user).await? {
            Some(failure) => ensure!(
                failure.contains(rule.as_str()),
                "without {rule}: {failure}: the rule is not named"
            ),
            None => ensure!(unused, "without {rule} every operation went through"),
        }
        // The ACL check, as doctor runs it: the rule, nothing else.
        if let Ok(s) = b.connect_as(&user, PASSWORD, false).await {
            let g = s.grants().await.map_err(|e| e.to_string())?;
            ensure!(
                g.missing == [rule.clone()],
                "without {rule} the check found {:?} missing ({:?})",
                g.missing,
                g.unchecked
            );
        }
    }
    // The whole ACL: nothing missing.
    set_user(&admin, USER, PASSWORD, &all).await?;
    let s = b
        .connect_as(USER, PASSWORD, false)
        .await
        .map_err(|e| e.to_string())?;
    let g = s.grants().await.map_err(|e| e.to_string())?;
    ensure!(g.complete(), "with the whole ACL: {g:?}");
    ensure!(
        flow(&b, USER).await?.is_none(),
        "with the whole ACL the flow failed"
    );
    Ok(())
}

/// Without `+config|get` the durability settings cannot be read: the
/// connect refuses the server as one that may forget (never taken as
/// durable), naming the rule.
async fn unreadable_durability_names_config_get(b: Arc<LeaseUser>) -> Outcome {
    let admin = b.admin().await?;
    let rules: Vec<String> = LeaseUserAcl::for_server(PREFIX, admin.server())
        .rules()
        .into_iter()
        .filter(|r| r != "+config|get")
        .collect();
    set_user(&admin, "lease-no-config", PASSWORD, &rules).await?;
    match b.connect_as("lease-no-config", PASSWORD, true).await {
        Err(e @ ValkeyError::NotDurable { .. }) => {
            let text = e.to_string();
            ensure!(
                text.contains("+config|get") && text.contains("appendonly unknown"),
                "{text}"
            );
            Ok(())
        }
        Err(e) => Err(format!("expected NotDurable, got {e}")),
        Ok(_) => Err("a server whose settings could not be read was accepted".into()),
    }
}

/// A URL that names a database makes the client `SELECT` it: a user
/// without `+select` is told to add it; with it, the flow goes through.
async fn a_database_needs_select(b: Arc<LeaseUser>) -> Outcome {
    let admin = b.admin().await?;
    let acl = LeaseUserAcl::for_server(PREFIX, admin.server());
    set_user(&admin, "lease-db", PASSWORD, &acl.rules()).await?;
    let url = format!("{}/2", b.url_as("lease-db", PASSWORD));
    let connect = || async {
        ValkeyStrategy::connect(
            ValkeyConfig::from_url(&url)
                .map_err(|e| e.to_string())?
                .durability(DurabilityPolicy::Throwaway)
                .key_prefix(PREFIX),
        )
        .await
        .map_err(|e| e.to_string())
    };
    match connect().await {
        Err(e) => ensure!(e.contains("+select") && !e.contains("cannot reach"), "{e}"),
        Ok(_) => return Err("connected to database 2 without +select".into()),
    }
    set_user(&admin, "lease-db", PASSWORD, &acl.select(true).rules()).await?;
    let s = connect().await?;
    let g = s.grants().await.map_err(|e| e.to_string())?;
    ensure!(g.complete(), "with +select: {g:?}");
    Ok(())
}

/// A wrong password says authentication, not "cannot reach".
async fn a_wrong_password_says_authentication(b: Arc<LeaseUser>) -> Outcome {
    match b.connect_as(USER, "not-the-password", false).await {
        Err(e @ ValkeyError::Authentication { .. }) => {
            let text = e.to_string();
            ensure!(
                text.contains("authentication")
                    && !text.contains("cannot reach")
                    && !text.contains("not-the-password"),
                "{text}"
            );
            Ok(())
        }
        Err(e) => Err(format!("expected Authentication, got {e}")),
        Ok(_) => Err("a wrong password was accepted".into()),
    }
}

/// The row `<kind>-lease-user`: the suite as the lease user, on a server of
/// its own.
pub(crate) fn target(kind: ServerKind) -> (Target, Option<Server>) {
    let label = format!("{kind}-lease-user");
    let server = match provide(kind) {
        Ok(s) => s,
        Err(missing) => return (Target::missing(label, missing), None),
    };
    let Some(addr) = server.addr() else {
        let tried = vec![format!("no address in {}", server.url)];
        return (Target::missing(label, Missing { kind, tried }), None);
    };
    let backend = Arc::new(LeaseUser {
        admin_url: server.url.clone(),
        addr,
    });
    // The user, before the run connects.
    let made = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            rt.block_on(async {
                let admin = backend.admin().await?;
                let rules = LeaseUserAcl::for_server(PREFIX, admin.server()).rules();
                set_user(&admin, USER, PASSWORD, &rules).await
            })
        });
    if let Err(why) = made {
        let tried = vec![format!("making the lease user: {why}")];
        return (Target::missing(label, Missing { kind, tried }), None);
    }
    let describe = format!("{} as an ACL lease user", server.describe());
    let t = Target::new(label, describe, backend).with_revoke();
    let t = trials!(t;
        each_missing_rule_is_named,
        unreadable_durability_names_config_get,
        a_wrong_password_says_authentication,
        a_database_needs_select,
    );
    (t, Some(server))
}
