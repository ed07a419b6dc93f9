//! What a claim or renewal waits for after its mark: the fsync of the
//! append-only file (`WAITAOF`) or replicas (`WAIT`), sent in one pipeline
//! with the mark that proves the lease's writes came first.

use std::sync::atomic::Ordering;
use std::time::Duration;

use fred::prelude::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use leasehold_core::Grant;

use super::{BACKSTOP_SLACK, PoolKeys, ValkeyStrategy};
use crate::error::{Failure, classify};

impl ValkeyStrategy {
    /// With [`ValkeyConfig::wait_for_replicas`]: proves that `grant`'s
    /// claim or renewal reached that many replicas, by [`Self::wait_after_mark`]
    /// with `WAIT replicas timeout`. `Err` says why fewer than asked may
    /// have it.
    pub(super) async fn wait_for_replicas(
        &self,
        keys: &PoolKeys,
        grant: &Grant,
    ) -> Result<(), String> {
        let Some((replicas, timeout)) = self.inner.config.wait else {
            return Ok(());
        };
        self.wait_after_mark(keys, grant, Wait::Replicas { replicas, timeout })
            .await
    }

    /// On a server that fsyncs on request, proves that `grant`'s claim, and
    /// the pool's recorded span and ID format it relies on, are on disk, by
    /// [`Self::wait_after_mark`] with `WAITAOF 1 0 t`. Then raises
    /// `span_fsynced` to `span` so that later claims of no longer a span
    /// need not wait. `t` is three quarters of the operation timeout, so
    /// the server answers before the client gives up. `Err` says why the
    /// claim may not be on disk.
    pub(super) async fn wait_for_fsync(
        &self,
        keys: &PoolKeys,
        grant: &Grant,
        span: &str,
    ) -> Result<(), String> {
        let timeout = self.inner.config.op_timeout * 3 / 4;
        self.wait_after_mark(keys, grant, Wait::Fsync { timeout })
            .await?;
        // Only an optimisation: if it is lost, later claims wait again.
        let _ = self
            .eval(
                &self.inner.scripts.raise_fsynced_span,
                vec![keys.fences.clone()],
                vec![span.to_owned()],
            )
            .await;
        Ok(())
    }

    /// Proves that what the scripts wrote for `grant` so far (its claim or
    /// renewal, and what they rely on) reached the disk or the replicas, as
    /// `wait` asks: one pipeline on one connection (and Cluster node: the
    /// pool's) sends the mark script (`scripts::MARK_LEASE`: a write of
    /// this connection, made only while the server's data holds the lease)
    /// and the wait, which answers for this connection's writes so far. The
    /// append-only file and the replication stream keep writes in order, so
    /// once the mark is fsynced or on the replicas, the claim or renewal
    /// before it is too. The claim or renewal itself may have gone out on a
    /// connection that has since been replaced: a wait alone, sent after
    /// it, would then answer at once for a connection that wrote nothing.
    /// `Err` says why it may not be proven.
    async fn wait_after_mark(
        &self,
        keys: &PoolKeys,
        grant: &Grant,
        wait: Wait,
    ) -> Result<(), String> {
        #[cfg(feature = "stats")]
        if self
            .inner
            .reconnect_before_wait
            .swap(false, Ordering::Relaxed)
        {
            let _ = self.inner.client.force_reconnection().await;
        }
        // EVAL, not EVALSHA: a lost script cache would cost a second
        // pipeline, and a second wait.
        let mark = vec![
            self.inner.scripts.mark_lease.body.into(),
            3.into(),
            keys.fences.as_str().into(),
            keys.leases.as_str().into(),
            keys.slot_key(grant.slot).into(),
            grant.slot.to_string().into(),
            grant.token.to_hex().into(),
        ];
        let hash = ClusterHash::Custom(fred::util::redis_keyslot(keys.fences.as_bytes()));
        let name = wait.command();
        let mut answers = self
            .pipeline(vec![
                ("EVAL", ClusterHash::Offset(2), mark),
                (name, hash, wait.args()),
            ])
            .await?
            .into_iter();
        match answers.next() {
            Some(Ok(Value::Integer(1))) => {}
            Some(Ok(Value::Integer(0))) => {
                return Err(format!("the lease was gone before {}", wait.what()));
            }
            Some(Ok(v)) => return Err(format!("the mark before {name} answered {v:?}")),
            Some(Err(f)) => return Err(format!("the mark before {name} failed: {}", f.text())),
            None => return Err(format!("no answer to the mark before {name}")),
        }
        match answers.next() {
            Some(Ok(v)) => wait.judge(&v),
            Some(Err(f)) => Err(format!("{name} failed: {}", f.text())),
            None => Err(format!("no answer to {name}")),
        }
    }

    /// Commands sent together in one pipeline, one round trip, on one
    /// connection: fred writes them back to back on the connection each
    /// routes to, and a connection that fails on the way fails the rest
    /// (a command is sent at most once), so none of them goes out on
    /// another connection. Bounded by the operation timeout. `Err` when the
    /// pipeline got no answer; otherwise one answer per command.
    async fn pipeline(
        &self,
        commands: Vec<(&'static str, ClusterHash, Vec<Value>)>,
    ) -> Result<Vec<Result<Value, Failure>>, String> {
        self.inner.round_trips.fetch_add(1, Ordering::Relaxed);
        let limit = self.inner.config.op_timeout + BACKSTOP_SLACK;
        let names: Vec<&str> = commands.iter().map(|(cmd, _, _)| *cmd).collect();
        let pipeline = self.inner.client.pipeline();
        for (cmd, hash, args) in commands {
            let command = CustomCommand::new_static(cmd, super::route(hash, &args), false);
            pipeline
                .custom::<Value, Value>(command, args)
                .await
                .map_err(|e| format!("{cmd}: {e}"))?;
        }
        let answers = tokio::time::timeout(limit, pipeline.try_all::<Value>())
            .await
            .map_err(|_| format!("{}: no answer within {limit:?}", names.join(" + ")))?;
        Ok(answers
            .into_iter()
            .map(|r| r.map_err(|e| classify(&e)))
            .collect())
    }

    /// Test hook: the next claim or renewal that waits, for the fsync
    /// (`WAITAOF`) or for replicas (`WAIT`), reconnects (`fred`'s
    /// `force_reconnection`) between its script and the wait, as a dropped
    /// connection would make it do. With the `stats` feature only.
    #[cfg(feature = "stats")]
    pub fn reconnect_before_the_next_wait(&self) {
        self.inner
            .reconnect_before_wait
            .store(true, Ordering::Relaxed);
    }
}

/// What a claim or renewal waits for after its mark
/// ([`ValkeyStrategy::wait_after_mark`]).
#[derive(Clone, Copy, Debug)]
enum Wait {
    /// `WAITAOF 1 0 timeout`: the mark fsynced on this server.
    Fsync { timeout: Duration },
    /// `WAIT replicas timeout`: the mark on that many replicas.
    Replicas { replicas: u32, timeout: Duration },
}

impl Wait {
    fn command(self) -> &'static str {
        match self {
            Self::Fsync { .. } => "WAITAOF",
            Self::Replicas { .. } => "WAIT",
        }
    }

    fn args(self) -> Vec<Value> {
        let ms = |t: Duration| {
            u64::try_from(t.as_millis())
                .unwrap_or(u64::MAX)
                .max(1)
                .to_string()
                .into()
        };
        match self {
            Self::Fsync { timeout } => vec![1.into(), 0.into(), ms(timeout)],
            Self::Replicas { replicas, timeout } => vec![i64::from(replicas).into(), ms(timeout)],
        }
    }

    fn what(self) -> &'static str {
        match self {
            Self::Fsync { .. } => "its fsync could be confirmed",
            Self::Replicas { .. } => "replicas could acknowledge it",
        }
    }

    /// `Ok` when the wait's answer proves enough; otherwise why not.
    fn judge(self, answer: &Value) -> Result<(), String> {
        match self {
            Self::Fsync { timeout } => match answer {
                Value::Array(v) if v.first().and_then(Value::as_i64) >= Some(1) => Ok(()),
                v => Err(format!(
                    "the append-only file was not fsynced within {timeout:?} (WAITAOF answered \
                     {v:?})"
                )),
            },
            Self::Replicas { replicas, timeout } => match answer.as_i64() {
                Some(n) if n >= i64::from(replicas) => Ok(()),
                Some(n) => Err(format!(
                    "only {n} of {replicas} replicas acknowledged it within {timeout:?}"
                )),
                None => Err(format!("WAIT answered {answer:?}")),
            },
        }
    }
}
