//! The operator's handle on an etcd lease store: what `leasehold status`,
//! `revoke` and `doctor` do, through core's [`Operate`].

use etcd_client::StatusResponse;
use leasehold_core::{
    BoxFuture, Check, Durability, Operate, OperateError, PoolName, PoolSpec, Reason, Verdict,
};

use crate::error::{Class, classify};
use crate::{EtcdError, EtcdStrategy};

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

    fn checks(&self) -> BoxFuture<'_, Vec<Check>> {
        Box::pin(async move {
            let mut checks = server_checks(self.status().await);
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
