//! The behaviour suite as a lease user: an etcd user whose one role has
//! read-write on the key prefix ([`LeaseRole`]) and nothing else, on a
//! private etcd with auth enabled; `root` (the administrator) revokes. And
//! what a missing permission or a wrong password says.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use leasehold_conformance::etcd_cluster::EtcdCluster;
use leasehold_conformance::servers::{Missing, ServerKind};
use leasehold_conformance::{Glue, Outcome, Store, Target, ensure, fresh_pool, trials};
use leasehold_core::{
    AcquireError, BoxFuture, Floor, Guard, GuardKind, GuardState, Operate, PoolSpec, Release,
    Renewal, Strategy, Verdict,
};
use leasehold_etcd::etcd_client::{Client, Permission};
use leasehold_etcd::{EtcdConfig, EtcdError, EtcdStrategy, LeaseRole};

/// The row's label.
pub(crate) const LABEL: &str = "etcd35-lease-user";

const PREFIX: &str = "lhuser";
const ROOT_PASSWORD: &str = "r00t-Secret-pw";
const PASSWORD: &str = "lease-Secret-pw";

pub(crate) struct LeaseUser {
    /// `http://127.0.0.1:PORT`.
    endpoint: String,
    addr: SocketAddr,
}

impl LeaseUser {
    fn config(&self, user: &str, password: &str) -> EtcdConfig {
        EtcdConfig::new([self.endpoint.clone()])
            .user(user, password)
            .prefix(PREFIX)
    }

    async fn connect_as(&self, user: &str) -> Result<EtcdStrategy, String> {
        EtcdStrategy::connect(self.config(user, PASSWORD))
            .await
            .map_err(|e| e.to_string())
    }

    async fn root(&self) -> Result<Client, String> {
        Client::connect(
            [self.endpoint.clone()],
            Some(
                leasehold_etcd::etcd_client::ConnectOptions::new().with_user("root", ROOT_PASSWORD),
            ),
        )
        .await
        .map_err(|e| e.to_string())
    }
}

/// Makes `user` (password [`PASSWORD`]) with the role `role`, which gets
/// `permissions`, as root.
async fn make_user(
    root: &mut Client,
    user: &str,
    role: &str,
    permissions: &[Permission],
) -> Outcome {
    let e = |e: leasehold_etcd::etcd_client::Error| format!("{user}/{role}: {e}");
    root.role_add(role).await.map_err(e)?;
    for p in permissions {
        root.role_grant_permission(role, p.clone())
            .await
            .map_err(e)?;
    }
    root.user_add(user, PASSWORD, None).await.map_err(e)?;
    root.user_grant_role(user, role).await.map_err(e)?;
    Ok(())
}

impl Glue for LeaseUser {
    fn connect(&self) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async move { Ok(Arc::new(self.connect_as("lease").await?) as Store) })
    }

    fn connect_via(
        &self,
        addr: SocketAddr,
        op_timeout: Duration,
    ) -> BoxFuture<'_, Result<Store, String>> {
        let endpoint = self
            .endpoint
            .replacen(&self.addr.to_string(), &addr.to_string(), 1);
        Box::pin(async move {
            let s = EtcdStrategy::connect(
                EtcdConfig::new([endpoint])
                    .user("lease", PASSWORD)
                    .prefix(PREFIX)
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

    /// Every test's pool is new (a fresh random name): said so, as the
    /// lease user, so that its first claim is not held back as a possibly
    /// wiped pool's.
    fn prepare<'a>(&'a self, pool: &'a PoolSpec) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move { super::declare_new(&self.connect_as("lease").await?, pool).await })
    }

    /// Revoking is the administrator's.
    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> Option<BoxFuture<'a, Result<(), String>>> {
        Some(Box::pin(async move {
            let root = EtcdStrategy::connect(self.config("root", ROOT_PASSWORD))
                .await
                .map_err(|e| e.to_string())?;
            match root.revoke(pool, slot).await {
                Ok(true) => Ok(()),
                Ok(false) => Err(format!("revoke: slot {slot} was not held")),
                Err(e) => Err(e.to_string()),
            }
        }))
    }
}

/// The `grants` line of doctor's checks.
async fn grants_line(s: &EtcdStrategy) -> Result<(Verdict, String), String> {
    let checks = s.checks().await;
    let c = checks
        .iter()
        .find(|c| c.name == "grants")
        .ok_or_else(|| format!("no grants check in {checks:?}"))?;
    Ok((
        c.verdict,
        format!("{} — fix: {}", c.detail, c.fix.clone().unwrap_or_default()),
    ))
}

/// The lease user's role is enough (doctor says `ok`); a role that may
/// only read the prefix, one for another prefix, and no role at all each
/// make the claim fail with the grant to add, and doctor FAIL naming it.
async fn a_missing_permission_is_named(b: Arc<LeaseUser>) -> Outcome {
    let role = LeaseRole::new(PREFIX);
    let grant = role.grant_command("ROLE");
    let s = b.connect_as("lease").await?;
    let (verdict, line) = grants_line(&s).await?;
    ensure!(verdict == Verdict::Ok, "the lease user: {line}");
    let mut root = b.root().await?;
    make_user(
        &mut root,
        "reader",
        "reader",
        &[Permission::read(role.key_prefix()).with_prefix()],
    )
    .await?;
    make_user(
        &mut root,
        "elsewhere",
        "elsewhere",
        &[Permission::read_write("other/").with_prefix()],
    )
    .await?;
    root.user_add("roleless", PASSWORD, None)
        .await
        .map_err(|e| e.to_string())?;
    for (user, role_name) in [
        ("reader", "reader"),
        ("elsewhere", "elsewhere"),
        ("roleless", "ROLE"),
    ] {
        let s = b.connect_as(user).await?;
        let pool = fresh_pool(2, Duration::from_secs(10))?;
        match s.acquire(&pool, Floor::NONE).await {
            Err(e @ AcquireError::Misconfigured { .. }) => {
                let text = e.to_string();
                ensure!(
                    text.contains(&grant) && text.contains("permission denied"),
                    "{user}: {text}"
                );
            }
            other => return Err(format!("{user}: the claim answered {other:?}")),
        }
        let (verdict, line) = grants_line(&s).await?;
        ensure!(
            verdict == Verdict::Fail && line.contains(&role.grant_command(role_name)),
            "{user}: doctor said {verdict:?} {line}"
        );
    }
    Ok(())
}

/// A wrong password says authentication, never the password.
async fn a_wrong_password_says_authentication(b: Arc<LeaseUser>) -> Outcome {
    match EtcdStrategy::connect(b.config("lease", "not-the-Secret")).await {
        Err(e @ EtcdError::Auth { .. }) => {
            let text = e.to_string();
            ensure!(
                text.contains("authentication") && !text.contains("not-the-Secret"),
                "{text}"
            );
            Ok(())
        }
        Err(e) => Err(format!("expected Auth, got {e}")),
        Ok(_) => Err("a wrong password was accepted".into()),
    }
}

/// Claims, renewals and releases as the lease user, and the revoke of a
/// lease the user's keys are attached to: leases need no permission of
/// their own.
async fn leases_need_no_permission_of_their_own(b: Arc<LeaseUser>) -> Outcome {
    let s = b.connect_as("lease").await?;
    let pool = fresh_pool(2, Duration::from_secs(10))?;
    super::declare_new(&s, &pool).await?;
    let g = s
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    let r = s.renew(&pool, &g, Floor::NONE).await;
    ensure!(matches!(r, Renewal::Renewed { .. }), "renewal {r:?}");
    let r = s.release(&pool, &g, Floor::NONE).await;
    ensure!(r == Release::Released, "release {r:?}");
    Ok(())
}

/// What doctor shows of a pool's wipe guard, read as the lease user: no
/// incarnation record before `prepare`, a guard running after it, and a
/// record with nothing to wait for once the pool is declared new.
async fn the_lease_user_reads_the_wipe_guard(b: Arc<LeaseUser>) -> Outcome {
    let s = b.connect_as("lease").await?;
    let pool = fresh_pool(2, Duration::from_secs(10))?;
    let state = |guards: Vec<Guard>| -> Result<GuardState, String> {
        match guards.as_slice() {
            [g] if g.kind == GuardKind::Wipe => Ok(g.state.clone()),
            other => Err(format!("guards {other:?}")),
        }
    };
    let read = || async { s.guards(Some(&pool)).await.map_err(|e| e.to_string()) };
    let found = state(read().await?)?;
    ensure!(found == GuardState::Missing, "before prepare: {found:?}");
    s.prepare(Some(&pool)).await.map_err(|e| e.to_string())?;
    let found = state(read().await?)?;
    ensure!(
        matches!(found, GuardState::Running { opens_in: Some(left), .. } if left > Duration::ZERO),
        "after prepare: {found:?}"
    );
    super::declare_new(&s, &pool).await?;
    let found = state(read().await?)?;
    ensure!(found == GuardState::Open, "declared new: {found:?}");
    Ok(())
}

/// The row on a private etcd of `kind` with auth enabled, and the server to
/// keep running until the run ends.
pub(crate) fn target(kind: ServerKind) -> (Target, Option<EtcdCluster>) {
    let missing = |why: String| Missing {
        kind,
        tried: vec![why],
    };
    let server = match EtcdCluster::start_kind(kind, 1) {
        Ok(s) => s,
        Err(why) => return (Target::missing(LABEL, missing(why)), None),
    };
    let backend = Arc::new(LeaseUser {
        endpoint: server.endpoints()[0].clone(),
        addr: server.addrs()[0],
    });
    let made = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            rt.block_on(async {
                super::cluster::leader(&server, Duration::from_secs(30)).await?;
                let mut admin = Client::connect([backend.endpoint.clone()], None)
                    .await
                    .map_err(|e| e.to_string())?;
                admin
                    .user_add("root", ROOT_PASSWORD, None)
                    .await
                    .map_err(|e| e.to_string())?;
                admin
                    .user_grant_role("root", "root")
                    .await
                    .map_err(|e| e.to_string())?;
                make_user(
                    &mut admin,
                    "lease",
                    "lease",
                    &[LeaseRole::new(PREFIX).permission()],
                )
                .await?;
                admin.auth_enable().await.map_err(|e| e.to_string())?;
                Ok::<_, String>(())
            })
        });
    if let Err(why) = made {
        return (
            Target::missing(LABEL, missing(format!("making the lease user: {why}"))),
            None,
        );
    }
    let describe = format!("etcd {} with auth, as a lease user", kind.name());
    let t = Target::new(LABEL, describe, backend).with_revoke();
    let t = trials!(t;
        a_missing_permission_is_named,
        a_wrong_password_says_authentication,
        leases_need_no_permission_of_their_own,
        the_lease_user_reads_the_wipe_guard,
    );
    (t, Some(server))
}
