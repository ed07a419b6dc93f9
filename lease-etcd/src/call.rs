//! Sending one etcd request: bounded by the operation timeout, and sent
//! again after a broken connection only when that is safe.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use etcd_client::Client;

use crate::error::{Class, broken_connection, classify, never_sent, timed_out};
use crate::strategy::EtcdStrategy;

/// What the calls of one operation sent.
#[derive(Default)]
pub(crate) struct Sent {
    /// Requests sent (each is one round trip).
    pub(crate) requests: u64,
    /// A request was sent again after an attempt that may have reached etcd.
    pub(crate) replayed: bool,
    /// The last call failed on a connection that broke under it: the request
    /// may or may not have reached etcd.
    pub(crate) broken: bool,
}

/// Whether a request that may have reached etcd can be sent again.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replay {
    /// Reads, keep-alives, revokes, grants with a chosen id and writes
    /// guarded by the token: a second send changes nothing a first one that
    /// landed did not.
    Safe,
    /// Only an attempt that provably never left is sent again.
    NeverSent,
}

impl EtcdStrategy {
    /// A refusal (`permission denied`) with what the user's role needs
    /// ([`LeaseRole`](crate::LeaseRole)): every request leasehold sends
    /// touches keys under the prefix, or needs no permission.
    fn with_grant_to_add(&self, class: Class) -> Class {
        match class {
            Class::Denied(m) if m.contains("permission denied") => {
                let role = crate::LeaseRole::new(&self.inner.prefix);
                Class::Denied(format!(
                    "{m}; the user's role needs read-write on the keys under '{}': as root, {}",
                    role.key_prefix(),
                    role.grant_command("ROLE")
                ))
            }
            other => other,
        }
    }

    /// Runs one etcd request bounded by the operation timeout (the client's
    /// own timeout is the first line; this is the backstop). `request` gets a
    /// handle on the shared client. It is sent again, while the timeout
    /// allows, whenever etcd gave no final answer: the balancer may pick a
    /// live endpoint next. Only for requests that are safe to repeat
    /// ([`Replay::Safe`]).
    pub(crate) async fn call<T, F, Fut>(&self, what: &'static str, request: F) -> Result<T, Class>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.call_counted(what, &mut Sent::default(), Replay::Safe, request)
            .await
    }

    /// [`Self::call`] under `replay`, recording what was sent in `sent`.
    pub(crate) async fn call_counted<T, F, Fut>(
        &self,
        what: &'static str,
        sent: &mut Sent,
        replay: Replay,
        mut request: F,
    ) -> Result<T, Class>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = tokio::time::Instant::now() + self.inner.op_timeout;
        let mut attempts = 0u64;
        let mut maybe_reached = false;
        sent.broken = false;
        loop {
            self.inner.stats.rpcs.fetch_add(1, Ordering::Relaxed);
            sent.requests += 1;
            sent.replayed |= maybe_reached;
            attempts += 1;
            let attempt = request(self.inner.client.clone());
            let e = match tokio::time::timeout_at(deadline, attempt).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => e,
                Err(_) => return Err(timed_out(what, self.inner.op_timeout)),
            };
            let not_sent = never_sent(&e);
            let class = classify(&e, &self.inner.transport, &self.inner.hosts);
            sent.broken = !not_sent && broken_connection(&e);
            let again = match (replay, &class) {
                // A TLS mistake fails the same way on every attempt.
                (_, Class::Tls(_)) => false,
                (Replay::Safe, _) => not_sent || matches!(class, Class::Uncertain(_)),
                (Replay::NeverSent, _) => not_sent,
            };
            let now = tokio::time::Instant::now();
            // Bounded by the deadline; the growing pause bounds the count.
            if !again || now >= deadline {
                return Err(self.with_grant_to_add(class));
            }
            maybe_reached |= !not_sent;
            // Another endpoint may answer; a short pause keeps a cluster that
            // refuses everywhere from being hammered.
            let pause = Duration::from_millis(5 * attempts);
            tokio::time::sleep_until((now + pause).min(deadline)).await;
        }
    }

    /// Revokes lease `id` and waits for etcd to confirm it is gone (revoked
    /// now or before). Once it is, no key is attached to it, and no put with
    /// it still in flight can land: etcd refuses a put on a missing lease.
    pub(crate) async fn revoke_confirmed(&self, id: i64, sent: &mut Sent) -> bool {
        let revoked = self
            .call_counted("LeaseRevoke", sent, Replay::Safe, |mut c| async move {
                c.lease_revoke(id).await
            })
            .await;
        matches!(revoked, Ok(_) | Err(Class::NotFound(_)))
    }

    /// Revokes a lease in the background (an acquisition that did not use it).
    pub(crate) fn revoke_in_background(&self, id: i64) {
        let this = self.clone();
        tokio::spawn(async move {
            let _ = this
                .call(
                    "LeaseRevoke",
                    |mut c| async move { c.lease_revoke(id).await },
                )
                .await;
        });
    }
}
