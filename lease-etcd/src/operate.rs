//! The operator's handle on an etcd lease store: what `leasehold status`,
//! `revoke` and `doctor` do, through core's [`Operate`].

use std::time::Duration;

use etcd_client::StatusResponse;
use leasehold_core::{
    BoxFuture, Check, Durability, Guard, Operate, OperateError, PoolName, PoolSpec, Reason, Verdict,
};

use crate::error::{Class, classify};
use crate::tls::{ClientCert, Transport, Trust};
use crate::{EtcdError, EtcdStrategy, LeaseRole};

impl EtcdStrategy {
    /// One `STATUS` request to the client's current endpoint.
    async fn status(&self) -> Result<StatusResponse, OperateError> {
        let mut client = self.client().clone();
        match tokio::time::timeout(self.op_timeout(), client.status()).await {
            Ok(Ok(status)) => Ok(status),
            Ok(Err(e)) => {
                if let Class::Tls(failure) = classify(&e, &self.inner.transport, &self.inner.hosts)
                {
                    return Err(OperateError::NeedsFix {
                        what: format!("TLS to etcd failed: {}", failure.what),
                        fix: failure.fix,
                    });
                }
                // A gRPC error without its debug dump of nested sources.
                let text = e.to_string();
                let short = text.split(", source:").next().unwrap_or(&text);
                Err(OperateError::Unreachable(Reason::new(short.to_owned())))
            }
            Err(_) => Err(OperateError::Unreachable(Reason::new(format!(
                "no answer within {:.1} s (op_timeout)",
                self.op_timeout().as_secs_f64()
            )))),
        }
    }
}

impl EtcdStrategy {
    /// TLS: its version and what verified the server; plain text is a
    /// warning unless every endpoint is on this machine.
    async fn tls_check(&self) -> Check {
        match &self.inner.transport {
            Transport::Plain => {
                let remote: Vec<&str> = self
                    .inner
                    .hosts
                    .split(", ")
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
                            "plain text to {}: the password, its token and every lease cross \
                             the network unencrypted and unauthenticated",
                            remote.join(", ")
                        ),
                    )
                    .fix("use etcds:// with ca= (and cert=/key= where the server asks)")
                }
            }
            Transport::Tls { trust, client } => {
                let against = match trust {
                    Trust::CaFile(ca) => format!("the CA in {}", ca.display()),
                    Trust::SystemRoots => "the system's root certificates".to_owned(),
                    Trust::Given => "the TlsOptions given in code".to_owned(),
                };
                let cert = match client {
                    ClientCert::File(c) => format!("client certificate {}", c.display()),
                    ClientCert::None => "no client certificate".to_owned(),
                    ClientCert::Given => "the client identity given in code".to_owned(),
                };
                let version = self.tls_version().await;
                Check::new(
                    Verdict::Ok,
                    "tls",
                    format!(
                        "{version}, server verified (chain and host name) against {against}, \
                         {cert}"
                    ),
                )
            }
        }
    }

    /// The version a handshake of its own agrees on (`TLS`, with why not,
    /// where none could be made).
    #[cfg(feature = "tls")]
    async fn tls_version(&self) -> String {
        let (Some(files), Some(endpoint)) = (&self.inner.tls_files, self.inner.endpoints.first())
        else {
            return "TLS".to_owned();
        };
        match crate::tls::handshake_version(endpoint, files, self.op_timeout()).await {
            Ok(version) => version.to_owned(),
            Err(why) => format!("TLS (version not read: {why})"),
        }
    }

    #[cfg(not(feature = "tls"))]
    async fn tls_version(&self) -> String {
        "TLS".to_owned()
    }

    /// The user's roles against the lease role ([`LeaseRole`]): read-write
    /// on every key under the prefix. A user may read itself and its own
    /// roles (etcd 3.4+), so no root is needed.
    async fn grants_check(&self) -> Check {
        let Some(user) = self.inner.user.clone() else {
            return Check::new(
                Verdict::NotApplicable,
                "grants",
                "no user in the URL: etcd's auth is off, so every client may read and write \
                 every key",
            );
        };
        let role = LeaseRole::new(&self.inner.prefix);
        let answer = self
            .call("UserGet", |mut c| {
                let user = user.clone();
                async move { c.user_get(user).await }
            })
            .await;
        let roles = match answer {
            Ok(r) => r.roles().to_vec(),
            Err(class) => {
                return Check::new(
                    Verdict::Warn,
                    "grants",
                    format!("the user's roles could not be read: {}", class.reason()),
                );
            }
        };
        if roles.iter().any(|r| r == "root") {
            return Check::new(
                Verdict::Warn,
                "grants",
                format!("user {user:?} has the root role: it may change every key and user"),
            )
            .fix(format!(
                "hold leases as a user whose role has only read-write on '{}' ({})",
                role.key_prefix(),
                role.grant_command("ROLE")
            ));
        }
        let mut permissions = Vec::new();
        for name in &roles {
            let answer = self
                .call("RoleGet", |mut c| {
                    let name = name.clone();
                    async move { c.role_get(name).await }
                })
                .await;
            match answer {
                Ok(r) => permissions.extend(r.permissions()),
                Err(class) => {
                    return Check::new(
                        Verdict::Warn,
                        "grants",
                        format!("role {name:?} could not be read: {}", class.reason()),
                    );
                }
            }
        }
        if role.covered_by(&permissions) {
            Check::new(
                Verdict::Ok,
                "grants",
                format!(
                    "user {user:?} (roles {}) may read and write the keys under '{}'",
                    roles.join(", "),
                    role.key_prefix()
                ),
            )
        } else {
            let named = roles.first().map_or("ROLE", String::as_str);
            Check::new(
                Verdict::Fail,
                "grants",
                format!(
                    "no role of user {user:?} ({}) gives read-write on the keys under '{}'",
                    if roles.is_empty() {
                        "none".to_owned()
                    } else {
                        roles.join(", ")
                    },
                    role.key_prefix()
                ),
            )
            .fix(format!(
                "as root: {}{}",
                role.grant_command(named),
                if roles.is_empty() {
                    format!(" and etcdctl user grant-role {user} ROLE")
                } else {
                    String::new()
                }
            ))
        }
    }
}

fn server_checks(status: Result<StatusResponse, OperateError>) -> Vec<Check> {
    match status {
        Ok(st) => vec![
            Check::new(Verdict::Ok, "server", format!("etcd {}", st.version())),
            if st.leader() != 0 {
                Check::new(
                    Verdict::Ok,
                    "cluster",
                    format!("a Raft leader is elected (term {})", st.raft_term()),
                )
            } else {
                Check::new(
                    Verdict::Fail,
                    "cluster",
                    "no Raft leader: writes cannot commit",
                )
                .fix("bring a quorum of members back")
            },
        ],
        Err(e) => vec![Check::new(
            Verdict::Fail,
            "server",
            format!("STATUS failed: {e}"),
        )],
    }
}

impl Operate for EtcdStrategy {
    fn describe(&self) -> String {
        "etcd".into()
    }

    fn round_trip(&self) -> &'static str {
        "STATUS request"
    }

    fn durability(&self) -> Durability {
        // A write is answered once a quorum has it in its fsynced Raft log.
        Durability::default()
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), OperateError>> {
        Box::pin(async move { self.status().await.map(drop) })
    }

    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> BoxFuture<'a, Result<bool, OperateError>> {
        Box::pin(async move {
            EtcdStrategy::revoke(self, pool, slot)
                .await
                .map_err(|e| match e {
                    e @ (EtcdError::Connect { .. } | EtcdError::Tls { .. }) => {
                        OperateError::Unreachable(Reason::new(e.to_string()))
                    }
                    other => OperateError::Store(Reason::new(other.to_string())),
                })
        })
    }

    /// Makes each pool's incarnation key (`<prefix>/<pool>/~incarnation`).
    /// Where it is missing, the pool's records may have been wiped with
    /// holders still running, which looks the same as a pool never used:
    /// it is made with a guard, and claims wait the pool's restart span
    /// (TTL + 2 × `max_clock_skew`), or only 2 × `max_clock_skew` on a
    /// cluster where nothing of the key prefix exists and no etcd lease is
    /// held. [`Operate::prepare_new_pool`] (`leasehold prepare --new-pool`)
    /// skips the wait for a pool an operator knows is new.
    fn prepare<'a>(
        &'a self,
        pool: Option<&'a PoolSpec>,
    ) -> BoxFuture<'a, Result<Option<Duration>, OperateError>> {
        Box::pin(async move {
            match pool {
                None => Ok(None),
                Some(pool) => self
                    .prepare_pool(pool)
                    .await
                    .map(|wait| Some(wait).filter(|w| !w.is_zero()))
                    .map_err(operate_error),
            }
        })
    }

    /// Makes `pool`'s incarnation key with no guard, and takes away a guard
    /// a claim set: claims go on at once. Only with every holder of the
    /// pool stopped.
    fn prepare_new_pool<'a>(
        &'a self,
        pool: &'a PoolSpec,
    ) -> BoxFuture<'a, Result<(), OperateError>> {
        Box::pin(async move { self.declare_new(pool).await.map_err(operate_error) })
    }

    /// The wipe guard of `pool` (etcd forgets nothing it acknowledged, and
    /// a promotion loses nothing: no restart or promotion guard).
    fn guards<'a>(
        &'a self,
        pool: Option<&'a PoolSpec>,
    ) -> BoxFuture<'a, Result<Vec<Guard>, OperateError>> {
        Box::pin(async move {
            match pool {
                None => Ok(Vec::new()),
                Some(pool) => self
                    .read_guard(pool)
                    .await
                    .map(|g| vec![g])
                    .map_err(operate_error),
            }
        })
    }

    fn checks(&self) -> BoxFuture<'_, Vec<Check>> {
        Box::pin(async move {
            let mut checks = server_checks(self.status().await);
            checks.push(self.tls_check().await);
            checks.push(self.grants_check().await);
            let example = PoolName::new("POOL").map_or_else(
                |_| String::new(),
                |pool| self.slot_key(&pool, 0).replace("POOL/0", "<pool>/<slot>"),
            );
            checks.push(Check::new(
                Verdict::Ok,
                "path",
                format!(
                    "a key per slot ({example} …) bound to an etcd lease; revisions are the fences"
                ),
            ));
            checks.push(Check::new(
                Verdict::NotApplicable,
                "durability",
                "etcd answers a write once a quorum has it in its fsynced Raft log (a member \
                 started with --unsafe-no-fsync would not; the API does not show it)",
            ));
            checks.push(Check::new(
                Verdict::NotApplicable,
                "clock",
                "etcd has no wall-clock API: lease TTLs count on the leader's clock, and holders \
                 never compare their wall clocks with it",
            ));
            checks
        })
    }
}

/// An operator call's failure, from the class of etcd's answer.
fn operate_error(class: Class) -> OperateError {
    match class {
        Class::Uncertain(_) => OperateError::Unreachable(class.reason()),
        Class::Tls(failure) => OperateError::NeedsFix {
            what: format!("TLS to etcd failed: {}", failure.what),
            fix: failure.fix,
        },
        other => OperateError::Store(other.reason()),
    }
}
