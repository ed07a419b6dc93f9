//! Watch-based loss detection: report a deleted or rewritten slot key as soon
//! as etcd sends the event, without waiting for the next renewal.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use etcd_client::{EventType, WatchOptions};
use leasehold_core::{Fence, Grant, LeaseManager, LeaseState, PoolName, Reason};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::keys;
use crate::strategy::EtcdStrategy;

/// A watch on one grant's slot key. As a future it resolves with the reason
/// once etcd reports the key deleted (lease revoked or expired, key deleted)
/// or rewritten by someone else; it never resolves while the key stays ours.
///
/// A broken watch connection is not a loss: the watch reconnects (from the
/// revision after the grant, so no event is missed) and the renewals decide
/// what an unreachable cluster means. Dropping the `LossWatch` stops it.
#[must_use = "a LossWatch reports nothing unless it is awaited or polled"]
pub struct LossWatch {
    rx: oneshot::Receiver<Reason>,
    task: JoinHandle<()>,
}

impl LossWatch {
    /// The loss, if it has been reported already (does not wait).
    pub fn try_lost(&mut self) -> Option<Reason> {
        self.rx.try_recv().ok()
    }
}

impl Future for LossWatch {
    type Output = Reason;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Reason> {
        match Pin::new(&mut self.rx).poll(cx) {
            Poll::Ready(Ok(reason)) => Poll::Ready(reason),
            // The task only ends by reporting a loss or being aborted by our
            // own drop: a closed channel means "never lost".
            Poll::Ready(Err(_)) | Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for LossWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::fmt::Debug for LossWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LossWatch")
            .field("running", &!self.task.is_finished())
            .finish()
    }
}

enum Pass {
    Lost(Reason),
    /// The stream broke or was cancelled: reconnect after a pause.
    Broken,
    /// Resume from this revision at once (after a compaction check).
    Resume(i64),
}

impl EtcdStrategy {
    /// Watches `grant`'s slot key in `pool`: see [`LossWatch`].
    ///
    /// Must be called inside a tokio runtime (it spawns the watch task).
    pub fn watch_loss(&self, pool: &PoolName, grant: &Grant) -> LossWatch {
        self.watch_slot(pool, grant.slot, grant.fence)
    }

    /// Watches `slot` of `pool` held with `fence` (the key's create revision),
    /// as shown by [`LeaseState::Held`] or [`LeaseGate::view`]: see
    /// [`LossWatch`]. When the loss is reported, renewals of that grant through
    /// this strategy answer `Lost` at once, without a round trip.
    ///
    /// [`LeaseGate::view`]: leasehold_core::LeaseGate::view
    pub fn watch_slot(&self, pool: &PoolName, slot: u32, fence: Fence) -> LossWatch {
        let (tx, rx) = oneshot::channel();
        let key = self.slot_key(pool, slot);
        let fence = i64::try_from(fence.0).unwrap_or(i64::MAX);
        let this = self.clone();
        let task = tokio::spawn(async move {
            let reason = this.watch_until_lost(&key, fence).await;
            this.inner.lost.flag(key, fence);
            let _ = tx.send(reason);
        });
        LossWatch { rx, task }
    }

    async fn watch_until_lost(&self, key: &str, fence: i64) -> Reason {
        let mut from = fence.saturating_add(1);
        let mut pause = Duration::from_millis(50);
        loop {
            match self.watch_pass(key, fence, from).await {
                Pass::Lost(reason) => return reason,
                Pass::Resume(revision) => from = revision,
                Pass::Broken => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    /// One watch stream from revision `from`, until a loss or a break.
    async fn watch_pass(&self, key: &str, fence: i64, from: i64) -> Pass {
        let options = WatchOptions::new().with_start_revision(from);
        let watched = self
            .call("Watch", |mut c| {
                let options = options.clone();
                async move { c.watch(key, Some(options)).await }
            })
            .await;
        let Ok(mut stream) = watched else {
            return Pass::Broken;
        };
        loop {
            // No timeout here: a watch is silent while nothing happens. A dead
            // connection is found by HTTP/2 keep-alive pings (the op timeout).
            let resp = match stream.message().await {
                Ok(Some(resp)) => resp,
                Ok(None) | Err(_) => return Pass::Broken,
            };
            for event in resp.events() {
                let Some(kv) = event.kv() else { continue };
                return Pass::Lost(Reason::new(match event.event_type() {
                    EventType::Delete => format!(
                        "slot key {key} was deleted at revision {} (lease revoked or expired, or \
                         deleted by hand)",
                        kv.mod_revision()
                    ),
                    EventType::Put if kv.value() == keys::TOMBSTONE.as_bytes() => format!(
                        "slot key {key} was revoked by an operator at revision {} (it stays \
                         taken until the revoked lease expires)",
                        kv.mod_revision()
                    ),
                    EventType::Put if kv.create_revision() != fence => format!(
                        "slot key {key} was re-created by another holder at revision {}",
                        kv.create_revision()
                    ),
                    EventType::Put => format!(
                        "slot key {key} was rewritten by someone else at revision {}",
                        kv.mod_revision()
                    ),
                }));
            }
            if resp.canceled() {
                if resp.compact_revision() <= 0 {
                    return Pass::Broken;
                }
                // History before the compaction is gone: look at the key now.
                return self.check_after_compaction(key, fence).await;
            }
        }
    }

    async fn check_after_compaction(&self, key: &str, fence: i64) -> Pass {
        let read = self
            .call("Range", |mut c| async move { c.get(key, None).await })
            .await;
        match read {
            Ok(resp) => match (resp.kvs().first(), resp.header()) {
                (Some(found), _) if found.value() == keys::TOMBSTONE.as_bytes() => Pass::Lost(
                    Reason::new(format!("slot key {key} was revoked by an operator")),
                ),
                (Some(found), Some(header)) if found.create_revision() == fence => {
                    Pass::Resume(header.revision() + 1)
                }
                (Some(found), _) => Pass::Lost(Reason::new(format!(
                    "slot key {key} now has create revision {} (ours {fence})",
                    found.create_revision()
                ))),
                (None, _) => Pass::Lost(Reason::new(format!("slot key {key} no longer exists"))),
            },
            Err(_) => Pass::Broken,
        }
    }

    /// Wires the watch to a running [`LeaseManager`] that uses this strategy:
    /// for every lease the manager holds, watch its slot key; when etcd
    /// reports it deleted or rewritten, report the loss through the manager's
    /// [`LossSignal`](leasehold_core::LossSignal). The gate closes at once
    /// (generation stops within milliseconds of the event, not at the next
    /// renewal) and the manager runs its loss callback and re-acquires.
    ///
    /// Keep the returned [`LossGuard`] alive as long as the manager; dropping
    /// it stops the watching. Must be called inside a tokio runtime.
    pub fn guard(&self, manager: &LeaseManager) -> LossGuard {
        let this = self.clone();
        let states = manager.subscribe();
        let gate = manager.gate();
        let signal = manager.loss_signal();
        let pool = manager.pool().name().clone();
        LossGuard {
            task: tokio::spawn(async move { this.guard_loop(states, gate, signal, pool).await }),
        }
    }

    async fn guard_loop(
        &self,
        mut states: tokio::sync::watch::Receiver<LeaseState>,
        gate: leasehold_core::LeaseGate,
        signal: leasehold_core::LossSignal,
        pool: PoolName,
    ) {
        loop {
            let state = states.borrow_and_update().clone();
            let view = gate.view();
            let (slot, fence) = match state {
                LeaseState::Stopped => return,
                // Watch the grant the gate shows, once state and gate agree on it.
                LeaseState::Held { slot, fence, .. }
                    if view.slot == slot && view.fence == fence =>
                {
                    (slot, fence)
                }
                _ => {
                    if states.changed().await.is_err() {
                        return;
                    }
                    continue;
                }
            };
            let holds = |s: &LeaseState| matches!(s, LeaseState::Held { slot: s2, fence: f2, .. } if *s2 == slot && *f2 == fence);
            let reported = tokio::select! {
                reason = self.watch_slot(&pool, slot, fence) => {
                    signal.report(view.epoch, reason);
                    true
                }
                closed = async {
                    loop {
                        if states.changed().await.is_err() {
                            return true;
                        }
                        if !holds(&states.borrow()) {
                            return false;
                        }
                    }
                } => {
                    if closed {
                        return; // the manager is gone
                    }
                    false
                }
            };
            // After a report, wait until the manager has moved past this grant.
            while reported && holds(&states.borrow_and_update()) {
                if states.changed().await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Keeps [`EtcdStrategy::guard`] watching; stops it when dropped.
#[must_use = "the guard stops watching when dropped"]
pub struct LossGuard {
    task: JoinHandle<()>,
}

impl Drop for LossGuard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::fmt::Debug for LossGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LossGuard")
            .field("running", &!self.task.is_finished())
            .finish()
    }
}
