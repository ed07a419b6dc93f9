//! What a pool's guards hold back, as `leasehold doctor` shows it: the
//! fields of the fences hash the claim scripts' guards read, judged as
//! they judge them, on the server's clock, without writing.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::types::Value;
use leasehold_core::{AcquireError, Guard, GuardKind, GuardState, MAX_TTL, PoolSpec};

use super::{ValkeyStrategy, damaged};
use crate::config::redact;
use crate::error::ValkeyError;

/// The longest restart span any holder can have (a TTL of at most
/// `MAX_TTL` plus twice a skew of at most the TTL): a guard started longer
/// ago than this has ended whatever span the claimers have.
const LONGEST_SPAN_MS: u64 = MAX_TTL.as_millis() as u64 * 3;

/// The script's answer, as text.
struct Fields {
    exists: bool,
    span: String,
    gone_seen: String,
    replid: String,
    replid_seen: String,
    lost: String,
    now_ms: u64,
    current_replid: String,
    uptime: String,
}

fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// Whole milliseconds, as the claim scripts trust them.
fn whole(v: &str) -> Option<u64> {
    (!v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .then(|| v.parse().ok())
        .flatten()
}

impl Fields {
    /// The recorded span, when one is.
    fn span(&self) -> Option<u64> {
        whole(&self.span).filter(|s| *s > 0)
    }

    /// A guard started at `since_ms`: running until `since + span`, on the
    /// server's clock; where no span is recorded, running until the
    /// claimers' own has passed, unless longer than any span can be.
    fn from(&self, since_ms: u64) -> GuardState {
        let passed = self.now_ms.saturating_sub(since_ms);
        match self.span() {
            Some(span) if passed < span => GuardState::Running {
                opens_at: Some(at(since_ms + span)),
                opens_in: Some(Duration::from_millis(span - passed)),
            },
            Some(_) => GuardState::Open,
            None if passed > LONGEST_SPAN_MS => GuardState::Open,
            None => GuardState::Running {
                opens_at: None,
                opens_in: None,
            },
        }
    }
}

impl ValkeyStrategy {
    /// The restart, promotion and wipe guards of `pool` as its fences hash
    /// and the server that holds it say now (one read-only script).
    pub(crate) async fn read_guards(&self, pool: &PoolSpec) -> Result<Vec<Guard>, ValkeyError> {
        let keys = self.keys(pool.name());
        let url = redact(&self.inner.config.url);
        let answer = self
            .eval(
                &self.inner.scripts.guards,
                vec![keys.fences.clone()],
                vec![],
            )
            .await
            .map_err(|f| self.failure_error("EVALSHA (read the pool's guards)", &url, f))?;
        let unexpected = || ValkeyError::Server {
            server: self.inner.server.to_string(),
            command: "EVALSHA (read the pool's guards)",
            reason: format!("unexpected answer {answer:?}"),
        };
        let Value::Array(items) = &answer else {
            return Err(unexpected());
        };
        let text =
            |i: usize| -> String { items.get(i).and_then(Value::as_string).unwrap_or_default() };
        let fields = Fields {
            exists: items.first().and_then(Value::as_i64) == Some(1),
            span: text(1),
            gone_seen: text(2),
            replid: text(3),
            replid_seen: text(4),
            lost: text(5),
            now_ms: whole(&text(6)).ok_or_else(unexpected)?,
            current_replid: text(7),
            uptime: text(8),
        };
        let name = pool.name().as_str();
        let damaged = |field: &str, value: &str| {
            let (what, fix) = match damaged::claim_refused(pool, &keys.fences, None, field, value) {
                AcquireError::DamagedRecord { what, fix, .. } => (what, fix),
                other => (other.to_string(), String::new()),
            };
            GuardState::Damaged { what, fix }
        };
        // A damaged span spoils every guard's wait: each line says so.
        let span_damaged = !fields.span.is_empty() && whole(&fields.span).is_none();
        let mut guards = Vec::new();

        let restart = if self.refusal().is_some() {
            Guard::new(
                GuardKind::Restart,
                GuardState::Off {
                    why: "not in force: claims are refused (the FAIL above); an opt-in in the \
                          URL that accepts the server turns it on"
                        .into(),
                },
            )
        } else if !self.guard_on() {
            Guard::new(
                GuardKind::Restart,
                GuardState::Off {
                    why: "off (durability=throwaway)".into(),
                },
            )
        } else if span_damaged {
            Guard::new(GuardKind::Restart, damaged("span", &fields.span))
        } else {
            match whole(&fields.uptime) {
                Some(up) => {
                    let started = fields.now_ms.saturating_sub(up * 1000);
                    // The uptime can read a second high: the guard counts
                    // one second short, as the claim script does.
                    Guard::new(
                        GuardKind::Restart,
                        fields.from(started.saturating_add(1000)),
                    )
                    .recorded(format!("uptime {up} s"))
                    .since(at(started))
                }
                None => Guard::new(
                    GuardKind::Restart,
                    GuardState::Off {
                        why: "the server's uptime could not be read".into(),
                    },
                ),
            }
        };
        guards.push(restart.pool(name));

        let off = || GuardState::Off {
            why: "off (durability=throwaway)".into(),
        };
        let guarded = self.guard_on();
        let promotion = if !guarded {
            Guard::new(GuardKind::Promotion, off())
        } else if fields.replid.is_empty() {
            Guard::new(
                GuardKind::Promotion,
                GuardState::NotRecorded {
                    next: format!(
                        "the next claim records the server's replication ID {}",
                        fields.current_replid
                    ),
                },
            )
        } else if !fields.replid_seen.is_empty() && whole(&fields.replid_seen).is_none() {
            Guard::new(
                GuardKind::Promotion,
                damaged("replid_seen", &fields.replid_seen),
            )
        } else if span_damaged {
            Guard::new(GuardKind::Promotion, damaged("span", &fields.span))
        } else {
            let recorded = format!("replication ID {}", fields.replid);
            let seen = whole(&fields.replid_seen).unwrap_or(0);
            let state = if fields.replid != fields.current_replid {
                GuardState::Changed {
                    now: format!("replication ID {}", fields.current_replid),
                }
            } else if seen == 0 {
                GuardState::Open
            } else {
                fields.from(seen)
            };
            let g = Guard::new(GuardKind::Promotion, state).recorded(recorded);
            if seen == 0 { g } else { g.since(at(seen)) }
        };
        guards.push(promotion.pool(name));

        let wipe = if !guarded {
            Guard::new(GuardKind::Wipe, off())
        } else if !fields.lost.is_empty() {
            let (what, fix) = match self.fences_lost(pool, &keys.fences) {
                AcquireError::Misconfigured { what, fix } => (what, fix),
                other => (other.to_string(), String::new()),
            };
            Guard::new(GuardKind::Wipe, GuardState::Damaged { what, fix })
        } else if !fields.exists {
            Guard::new(GuardKind::Wipe, GuardState::Missing)
        } else if !fields.gone_seen.is_empty() && whole(&fields.gone_seen).is_none() {
            Guard::new(GuardKind::Wipe, damaged("gone_seen", &fields.gone_seen))
        } else if span_damaged {
            Guard::new(GuardKind::Wipe, damaged("span", &fields.span))
        } else {
            match whole(&fields.gone_seen).unwrap_or(0) {
                0 => Guard::new(GuardKind::Wipe, GuardState::Open).recorded(format!(
                    "fences hash {}: declared new, or kept from before the guard",
                    keys.fences
                )),
                seen => Guard::new(GuardKind::Wipe, fields.from(seen))
                    .recorded(format!(
                        "fences hash {}, made after its records were found gone",
                        keys.fences
                    ))
                    .since(at(seen)),
            }
        };
        guards.push(wipe.pool(name));
        Ok(guards)
    }
}
