//! What connect checks of the server: its durability settings, its
//! replication (a replica is refused; a primary that can split brain is
//! reported, or refused on request), and that the restart guard can read
//! when it started; and the watch that reads the same settings again while
//! the strategy runs, judged the same way.
//!
//! A setting read once would be trusted forever: an operator's later
//! `SET GLOBAL read_only = ON`, `SET GLOBAL innodb_flush_log_at_trx_commit
//! = 0`, `ALTER SYSTEM SET fsync = off` and a reload, or a server demoted to
//! a replica, would go unseen. The claim or renewal that finds a quarter of
//! its pool's TTL passed since the last read reads them again (one round
//! trip, one caller for the whole backend), and the judgement connect made
//! is made again on what it reads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock};
use std::time::{Duration, Instant};

use leasehold_core::{Durability, Reason, Replication};
use sqlx::Row;

use super::Leases;
use crate::config::SqlConfig;
use crate::dialect::with_sqlx_bounds;
use crate::error::SqlError;
use crate::failure::Failure;

/// What of the configuration the judgement of the server's settings uses.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Policy {
    require_durable: bool,
    restart_guard: bool,
    assume_one_timing: bool,
    refuse_split_brain: bool,
}

impl Policy {
    pub(crate) fn of(config: &SqlConfig) -> Self {
        Self {
            require_durable: config.require_durable,
            restart_guard: config.restart_guard,
            assume_one_timing: config.assume_one_timing,
            refuse_split_brain: config.refuse_split_brain,
        }
    }
}

/// What the server's settings were judged to be, at connect or at the
/// latest re-read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Judgement {
    /// Whether the server keeps acknowledged writes across a crash.
    pub(crate) durability: Durability,
    /// The server's replication, with what `connect` refuses for it.
    pub(crate) replication: Replication,
    /// What `connect` refuses (the first refusal's text): kept when told
    /// not to refuse at connect, or found by a re-read. Every claim
    /// answers it.
    pub(crate) refusal: Option<String>,
    /// Why the server is no longer the primary (a replica, or read-only):
    /// every renewal answers it too.
    pub(crate) not_primary: Option<String>,
    /// The opt-in (as its URL option) that accepted a server that can
    /// forget acknowledged writes.
    pub(crate) opt_in: Option<&'static str>,
    /// Whether PostgreSQL's commits wait for synchronous standbys (see
    /// `notice.rs`).
    pub(crate) sync_standbys: bool,
}

/// The latest judgement of the server's settings and when they were read:
/// what the doctor reports and what claims and renewals answer.
#[derive(Debug)]
pub(crate) struct Watched {
    judged: RwLock<Judgement>,
    /// Read on every operation that may wait for a standby, so kept apart
    /// from the lock.
    sync_standbys: AtomicBool,
    /// When the settings were last read (or the read under way began), in
    /// µs since `base`.
    read_at: AtomicU64,
    base: Instant,
    pub(crate) policy: Policy,
}

impl Watched {
    pub(crate) fn new(policy: Policy, sync_standbys: bool) -> Self {
        Self {
            judged: RwLock::new(Judgement {
                sync_standbys,
                ..Judgement::default()
            }),
            sync_standbys: AtomicBool::new(sync_standbys),
            read_at: AtomicU64::new(0),
            base: Instant::now(),
            policy,
        }
    }

    /// The latest judgement.
    pub(crate) fn get(&self) -> Judgement {
        self.judged
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// What claims answer, if anything.
    pub(crate) fn refusal(&self) -> Option<String> {
        let judged = self.judged.read().unwrap_or_else(PoisonError::into_inner);
        judged.refusal.clone()
    }

    /// What renewals answer, if anything.
    pub(crate) fn not_primary(&self) -> Option<String> {
        let judged = self.judged.read().unwrap_or_else(PoisonError::into_inner);
        judged.not_primary.clone()
    }

    pub(crate) fn sync_standbys(&self) -> bool {
        self.sync_standbys.load(Ordering::Relaxed)
    }

    /// Keeps `new`; the judgement it replaces.
    fn set(&self, new: Judgement) -> Judgement {
        self.sync_standbys
            .store(new.sync_standbys, Ordering::Relaxed);
        let mut judged = self.judged.write().unwrap_or_else(PoisonError::into_inner);
        std::mem::replace(&mut *judged, new)
    }

    /// Whether the caller is the one to read the settings again: a quarter
    /// of `ttl` has passed since the last read, and no other caller took
    /// the turn first.
    fn due(&self, ttl: Duration) -> bool {
        let now = u64::try_from(self.base.elapsed().as_micros()).unwrap_or(u64::MAX);
        let last = self.read_at.load(Ordering::Relaxed);
        let quarter = u64::try_from((ttl / 4).as_micros()).unwrap_or(u64::MAX);
        now.saturating_sub(last) >= quarter
            && self
                .read_at
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Records a read that began now.
    fn read_now(&self) {
        let now = u64::try_from(self.base.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.read_at.store(now, Ordering::Relaxed);
    }
}

/// What one read of the server's settings answered.
struct Read {
    /// The durability settings (as many as the dialect selects).
    settings: Vec<String>,
    /// The replication columns.
    replication: Vec<String>,
    /// The restart guard's answer, when the engine has a guard (`None`
    /// inside: the server did not tell when it started).
    guard: Option<Option<String>>,
}

/// Why the settings could not be read.
enum Unread {
    Timeout,
    Sql(sqlx::Error),
    Decode(String),
}

with_sqlx_bounds!([impl<D> Leases<D>] {
    /// Reads the durability and replication settings and checks that the
    /// restart guard can read the server's start, in one round trip;
    /// refuses a replica, a server that can forget acknowledged writes when
    /// `config` requires durability, and one that can split brain when
    /// `config` refuses that.
    pub(super) async fn check_server(&mut self, config: &SqlConfig) -> Result<(), SqlError> {
        // A pool whose rows are gone (a truncated or emptied table, a
        // pool's rows deleted) lost its holders' leases while they still
        // generate: on every engine, unless the restart guard is turned off.
        self.sql.wipe_guarded = config.restart_guard
            && !leasehold_core::plant::active(leasehold_core::plant::Plant::NoRestartGuard);
        let version = self.info.version.clone();
        let has_guard = D::resume_in_micros("1000000", &version).is_some();
        // Every server is guarded, durable or not: the settings read now
        // say nothing of those the server ran with before its last restart
        // (a `SET GLOBAL innodb_flush_log_at_trx_commit = 0` is not written
        // to the server's option files, so a crash loses claims and the
        // server comes back durable).
        // (Rule 12 broken on purpose by the campaign's planted bugs; a
        // constant false otherwise.)
        let guarded = has_guard
            && config.restart_guard
            && !leasehold_core::plant::active(leasehold_core::plant::Plant::NoRestartGuard);
        // A promoted standby or a restored backup has a history its clients
        // did not see, whatever its settings: the promotion guard is on
        // wherever the engine can tell (PostgreSQL's timeline, MySQL's and
        // MariaDB's server identity), unless the restart guard is turned off.
        let promotion_guarded = D::incarnation(&version).is_some()
            && config.restart_guard
            && !leasehold_core::plant::active(leasehold_core::plant::Plant::NoRestartGuard);
        self.info.watched.read_now();
        let read = match self.read_settings().await {
            Ok(Some(read)) => read,
            Ok(None) => return Ok(()),
            Err(Unread::Timeout) => return Err(SqlError::Timeout(self.info.op_timeout)),
            Err(Unread::Decode(what)) => {
                return Err(SqlError::Refused {
                    what,
                    fix: "report this as a leasehold bug, with the server version".to_owned(),
                });
            }
            Err(Unread::Sql(e)) => {
                return Err(match D::classify("reading the server's settings", &e) {
                    Failure::Transient(m) | Failure::Contention(m) => {
                        SqlError::Unreachable(Reason::new(m))
                    }
                    Failure::Denied(m) => self.denied(m).await,
                    Failure::Schema(m) | Failure::Final(m) => SqlError::Refused {
                        what: m,
                        fix: "let the lease user read the server's durability and replication \
                              settings and its uptime (MySQL 8: SELECT on \
                              performance_schema.global_status)"
                            .to_owned(),
                    },
                });
            }
        };
        self.sql.guarded = guarded;
        self.sql.promotion_guarded = promotion_guarded;
        let (judgement, refusal) = self.judge(&read);
        if let Some(refusal) = refusal
            && config.refuse_at_connect
        {
            return Err(refusal);
        }
        #[cfg(feature = "tracing")]
        if let (None, Some(risk)) = (&judgement.replication.refusal, &judgement.replication.split_brain) {
            tracing::warn!(
                store = %self.info.identity,
                server = %self.info.version,
                replication = %judgement.replication.found,
                setting = %risk.setting,
                fix = %risk.fix,
                "the lease store can split brain: after a failover the old primary goes on \
                 confirming claims and renewals to the clients a partition left with it; \
                 refuse_split_brain=true refuses such a store at connect"
            );
        }
        #[cfg(feature = "tracing")]
        if !judgement.durability.is_durable() {
            tracing::warn!(
                store = %self.info.identity,
                server = %version,
                durability = %judgement.durability,
                "the lease store can forget leases it acknowledged after a crash; the restart \
                 guard holds grants back after a restart, but a failover is not covered"
            );
        }
        self.info.watched.set(judgement);
        Ok(())
    }

    /// Reads the server's settings again when a quarter of `ttl` has
    /// passed since the last read (at most one caller at a time for the
    /// whole backend: the others go on with the judgement they find), and
    /// judges them as connect did. A read that fails changes nothing: the
    /// operation that follows meets the same trouble and answers it, and
    /// the next read is due a quarter TTL later.
    pub(super) async fn watch_settings(&self, ttl: Duration) {
        if !self.info.watched.due(ttl) {
            return;
        }
        let Ok(Some(read)) = self.read_settings().await else {
            return;
        };
        let (new, _) = self.judge(&read);
        let old = self.info.watched.set(new.clone());
        #[cfg(feature = "tracing")]
        if old != new {
            tracing::warn!(
                store = %self.info.identity,
                server = %self.info.version,
                durability.before = %old.durability,
                durability.now = %new.durability,
                replication.before = %old.replication.found,
                replication.now = %new.replication.found,
                refused.before = old.refusal.as_deref().unwrap_or("nothing"),
                refused.now = new.refusal.as_deref().unwrap_or("nothing"),
                "the lease store's settings changed since they were last read; claims are \
                 refused while refused.now names a refusal, and renewals too while the server \
                 is a replica or read-only"
            );
        }
        #[cfg(not(feature = "tracing"))]
        let _ = old;
    }

    /// The one-round-trip read of the durability settings, the replication
    /// columns and the restart guard's answer; `None` where the engine has
    /// none of them.
    async fn read_settings(&self) -> Result<Option<Read>, Unread> {
        let version = &self.info.version;
        let settings = D::durability_columns(version);
        let replication = super::replication::columns(D::ENGINE, version);
        let replication_n = super::replication::count(D::ENGINE, version);
        let guard = D::resume_in_micros("1000000", version);
        let columns: Vec<String> = settings
            .map(str::to_owned)
            .into_iter()
            .chain(replication.map(str::to_owned))
            .chain(guard.as_ref().map(|g| format!("CAST({g} AS {})", D::TEXT_TYPE)))
            .collect();
        if columns.is_empty() {
            return Ok(None);
        }
        let sql = format!("SELECT {}", columns.join(", "));
        let row = tokio::time::timeout(self.info.op_timeout, self.fetch_one(sqlx::raw_sql(&sql)))
            .await
            .map_err(|_| Unread::Timeout)?
            .map_err(Unread::Sql)?;
        // Every column of the row: the settings (as many as the dialect's
        // query selects), the replication columns, then the guard's answer
        // when there is a guard.
        let values = (0..row.len())
            .map(|i| row.try_get::<Option<String>, _>(i))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                Unread::Decode(format!("reading the server's durability settings ({sql}): {e}"))
            })?;
        let settings_n = values.len() - replication_n - usize::from(guard.is_some());
        let text = |v: &Option<String>| v.clone().unwrap_or_default();
        Ok(Some(Read {
            settings: values.iter().take(settings_n).map(text).collect(),
            replication: values
                .iter()
                .skip(settings_n)
                .take(replication_n)
                .map(text)
                .collect(),
            guard: guard.map(|_| values.last().cloned().flatten()),
        }))
    }

    /// Judges what was read, under the configuration's policy: the
    /// judgement, and the error `connect` answers for it when it refuses
    /// at connect (a replica's refusal first). The same judgement serves
    /// connect and every re-read, so a re-read refuses what connect would.
    fn judge(&self, read: &Read) -> (Judgement, Option<SqlError>) {
        let policy = self.info.watched.policy;
        let judged = super::replication::judge(D::ENGINE, &self.info.version, &read.replication);
        let mut replication = judged.replication;
        let replica = judged.replica.map(|(what, fix)| SqlError::Replica { what, fix });
        let not_primary = replica.as_ref().map(ToString::to_string);
        let replication_refusal = match replica {
            Some(replica) => Some(replica),
            None if policy.refuse_split_brain && replication.split_brain.is_some() => {
                Some(SqlError::SplitBrain(replication.clone()))
            }
            None => None,
        };
        replication.refusal = replication_refusal.as_ref().map(ToString::to_string);
        let durability = Durability {
            risks: D::durability_risks(&read.settings),
        };
        let forgetful = !durability.is_durable();
        // A server that can forget loses, in one crash, the record of the
        // pool's longest restart span with the claims: refused unless the
        // configuration says all holders share one timing, or turns the
        // guard off knowingly. This judgement is the one `connect` makes
        // and the doctor reports.
        let durability_refusal = if policy.require_durable && forgetful {
            Some(SqlError::NotDurable(durability.clone()))
        } else if forgetful && policy.restart_guard && !policy.assume_one_timing {
            Some(SqlError::Forgetful(durability.clone()))
        } else {
            None
        };
        let opt_in = match (forgetful, policy.restart_guard) {
            (false, _) => None,
            (true, false) => Some("durability=throwaway"),
            (true, true) => Some("durability=one-timing-per-pool"),
        };
        let unsupported = (self.sql.guarded && matches!(read.guard, Some(None))).then(|| {
            SqlError::UnsupportedServer {
                what: format!(
                    "{} does not tell when it started, which the restart guard needs",
                    self.info.version
                ),
                fix: "on MySQL 8 enable performance_schema (the default) and let the lease \
                      user read performance_schema.global_status"
                    .to_owned(),
            }
        });
        // Kept, each check reports its own: a refusal for durability comes
        // before a replica's, which the replication line reports.
        let refusal = durability_refusal
            .as_ref()
            .or(unsupported.as_ref())
            .or(replication_refusal.as_ref())
            .map(ToString::to_string);
        let judgement = Judgement {
            durability,
            replication,
            refusal,
            not_primary,
            opt_in,
            sync_standbys: judged.sync_standbys,
        };
        // Answered at connect: a replica's refusal first.
        (
            judgement,
            replication_refusal.or(durability_refusal).or(unsupported),
        )
    }
});
