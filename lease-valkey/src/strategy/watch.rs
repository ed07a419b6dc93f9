//! The watch: the server's settings, read at connect, are read again with
//! the next claim or renewal at most once per quarter of its pool's TTL
//! (and at most once a second), and judged as `connect` judged them. An
//! operator's later `CONFIG SET maxmemory-policy allkeys-lru`,
//! `appendonly no` or `no-appendfsync-on-rewrite yes`, or a `REPLICAOF`,
//! is seen within that time instead of never:
//!
//! - what `connect` would now refuse is refused to every claim (a final
//!   `AcquireError::Misconfigured` naming the setting and its fix), until a
//!   later reading finds it restored;
//! - a server that became a replica confirms no renewal: renewals answer
//!   `Retry`, so a holder's gate closes when its lease runs out, not later
//!   on the word of a server that is no longer the primary;
//! - a weakened persistence does not stop renewals: a held lease is not
//!   endangered by it, because the restart guard (DESIGN.md rule 12, on for
//!   every server) holds claims back for a span after any restart, so
//!   stopping a fleet's renewals would cost every holder its IDs for
//!   nothing.
//!
//! In a Cluster the reading covers every primary the client knows, so a
//! replica is read as soon as it is promoted: within a quarter TTL, while
//! the promotion guard still holds claims back on it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use super::{Judged, ValkeyStrategy};
use crate::config::redact;

/// The watch reads no more often than this, whatever the TTL.
const MIN_EVERY: Duration = Duration::from_secs(1);

impl ValkeyStrategy {
    /// Reads and judges the server's settings again when the last reading
    /// is older than a quarter of `ttl` (at least [`MIN_EVERY`]); one caller
    /// at a time reads, the others go on with the last reading. A reading
    /// that fails (the server unreachable) leaves the last one standing:
    /// the operation's own answer tells of the outage.
    pub(super) async fn watch(&self, ttl: Duration) {
        let every = millis((ttl / 4).max(MIN_EVERY));
        let now = millis(self.inner.born.elapsed());
        let last = self.inner.read_at.load(Ordering::Acquire);
        if now < last.saturating_add(every)
            || self
                .inner
                .read_at
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return;
        }
        let url = redact(&self.inner.config.url);
        // The whole reading is bounded by one operation timeout, so that a
        // renewal waiting beside it is answered no later than a slow command
        // of its own would be (its deadline counts from its sending, so a
        // late answer costs time, never safety).
        let reading = self.read_settings(&self.inner.server, &url, false);
        let new = match tokio::time::timeout(self.op_timeout(), reading).await {
            Ok(Ok(new)) => new,
            Ok(Err(e)) => {
                tracing::debug!(
                    store = %url,
                    error = %e,
                    "the lease store's settings could not be read again; the last reading stands"
                );
                return;
            }
            Err(_) => {
                tracing::debug!(
                    store = %url,
                    timeout = ?self.op_timeout(),
                    "the lease store's settings were not read again within the operation \
                     timeout; the last reading stands"
                );
                return;
            }
        };
        let old = self.judged();
        let (was, is) = (settings_text(&old), settings_text(&new));
        if was != is {
            tracing::warn!(
                store = %url,
                server = %self.inner.server,
                before = %was,
                now = %is,
                refusal = new.refusals.first().map_or("none", |(_, text)| text.as_str()),
                "the lease store's settings changed since they were last read"
            );
        }
        *self
            .inner
            .judged
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(new);
    }

    /// Test hook: the settings are never read again (the reading at
    /// connect stands), so that a test can weaken the server behind the
    /// claims' back and show what a claim's own checks then do (a `WAITAOF`
    /// that cannot confirm the fsync). With the `stats` feature only.
    #[cfg(feature = "stats")]
    pub fn keep_the_settings_read_at_connect(&self) {
        self.inner.read_at.store(u64::MAX, Ordering::Release);
    }

    /// Why a renewal is not confirmed on this server, as last read: it is a
    /// replica (`None`: it is not).
    pub(super) fn replica_refusal(&self) -> Option<String> {
        let judged = self.judged();
        judged.replica.then(|| {
            format!(
                "{}; a renewal is not confirmed on a replica: the lease runs out unless the \
                 server is a primary again",
                judged.replication.found
            )
        })
    }
}

/// The settings a reading found, in one line, to tell a change.
fn settings_text(judged: &Judged) -> String {
    let d = &judged.durability;
    format!(
        "maxmemory-policy {}, {}; {}",
        d.maxmemory_policy.as_deref().unwrap_or("unknown"),
        d.persistence_settings(),
        judged.replication.found
    )
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
