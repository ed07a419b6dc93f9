//! What a store's guards (DESIGN.md rule 12) hold back, as an operator reads
//! it: the restart guard (the server's start), the promotion guard (the
//! identity a promotion changes, with when a claim first saw it) and the
//! wipe guard (each pool's incarnation record, made by `prepare`). Each
//! backend reads its own ([`Operate::guards`](crate::Operate::guards)), and
//! [`guard_check`] turns a reading into one doctor line with its fix.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::check::{Check, Verdict};

/// Which guard a [`Guard`] reading is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GuardKind {
    /// The restart guard: no claim until the server has been up for the
    /// pool's restart span (a server that can forget what it acknowledged).
    Restart,
    /// The promotion guard: no claim until the pool's restart span has
    /// passed since a claim first saw the server's current identity
    /// (PostgreSQL timeline, MariaDB `@@server_id`, Valkey replication ID).
    Promotion,
    /// The wipe guard: each pool's incarnation record; a claim that finds
    /// it gone waits one restart span.
    Wipe,
}

impl GuardKind {
    /// The doctor line's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Restart => "restart",
            Self::Promotion => "promotion",
            Self::Wipe => "wipe",
        }
    }
}

/// What a guard holds back now.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GuardState {
    /// Claims wait for nothing.
    Open,
    /// Claims wait. `opens_at` is when the guard opens (on the clock that
    /// judges it: the store's, or, where the store has none, the
    /// claimers'), `opens_in` how long that is from the reading; both
    /// `None` where it depends on the waiting claimers' own restart span
    /// (TTL + 2 × `max_clock_skew`), which the store does not hold yet:
    /// it opens one such span after [`Guard::since`].
    Running {
        /// When the guard opens.
        opens_at: Option<SystemTime>,
        /// How long from the reading until then.
        opens_in: Option<Duration>,
    },
    /// The store reads another identity than the record's (`now`): the
    /// next claim records it and, if the change may be a promotion, waits
    /// one restart span from then.
    Changed {
        /// The identity the store has now.
        now: String,
    },
    /// No record yet: what the next claim does about it is in `next`.
    NotRecorded {
        /// What the next claim records, and whether it waits.
        next: String,
    },
    /// The pool's incarnation record is missing: the pool was never
    /// prepared, or its records were wiped. The next claim (or `prepare`)
    /// makes it and waits one restart span.
    Missing,
    /// A record a claim cannot trust: claims are refused until it is
    /// repaired (`what` says what is stored, `fix` how to repair it).
    Damaged {
        /// What is stored.
        what: String,
        /// How to repair it.
        fix: String,
    },
    /// The guard is off here (`why` says why).
    Off {
        /// Why.
        why: String,
    },
}

/// One guard of a store as an operator reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Guard {
    /// Which guard.
    pub kind: GuardKind,
    /// The pool the reading is of (`None`: the whole store).
    pub pool: Option<String>,
    /// What is recorded (`timeline 00000002`, `replication ID 3f2a…`,
    /// `declared new`, `server start`), when something is.
    pub recorded: Option<String>,
    /// When it was recorded: when a claim first saw it, when the server
    /// started, or when the pool's records were first found gone.
    pub since: Option<SystemTime>,
    /// What it holds back now.
    pub state: GuardState,
}

impl Guard {
    /// A reading of `kind`.
    pub fn new(kind: GuardKind, state: GuardState) -> Self {
        Self {
            kind,
            pool: None,
            recorded: None,
            since: None,
            state,
        }
    }

    /// The same reading, of `pool`.
    pub fn pool(mut self, pool: impl Into<String>) -> Self {
        self.pool = Some(pool.into());
        self
    }

    /// The same reading, with what is recorded.
    pub fn recorded(mut self, recorded: impl Into<String>) -> Self {
        self.recorded = Some(recorded.into());
        self
    }

    /// The same reading, recorded at `since`.
    pub fn since(mut self, since: SystemTime) -> Self {
        self.since = Some(since);
        self
    }
}

/// `at` as `2026-12-05T21:30:00.123Z` (UTC, milliseconds).
pub fn utc(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days to a civil date (Howard Hinnant's algorithm), for days >= 0.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

/// Whether `at` is the long-past time a record gets when nothing can wait
/// on it (a pool declared new, a table's first incarnation): before 2000.
pub fn long_past(at: SystemTime) -> bool {
    at < UNIX_EPOCH + Duration::from_secs(946_684_800)
}

struct When(Option<SystemTime>);

impl fmt::Display for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(at) if long_past(at) => f.write_str("long past"),
            Some(at) => f.write_str(&utc(at)),
            None => f.write_str("an unknown time"),
        }
    }
}

/// The doctor line of `guard`, its fixes naming the store as `url` (the
/// URL as the tool shows it): a running guard is a warning with when it
/// opens, a missing incarnation record a warning with the `prepare` that
/// makes it, a damaged record a FAIL with its repair.
pub fn guard_check(guard: &Guard, url: &str) -> Check {
    let name = guard.kind.name();
    let pool = guard.pool.as_deref().unwrap_or("POOL");
    let of = guard
        .pool
        .as_deref()
        .map_or(String::new(), |p| format!("pool {p}: "));
    let recorded = guard.recorded.as_deref().unwrap_or("nothing");
    let since = When(guard.since);
    let new_pool = format!(
        "leasehold prepare --url {url} --pool {pool} --new-pool --yes, only with every holder \
         of the pool stopped"
    );
    match &guard.state {
        GuardState::Open => {
            let detail = match guard.kind {
                GuardKind::Restart => format!(
                    "{of}the server started at {since}, more than a restart span ago: claims \
                     wait for nothing"
                ),
                GuardKind::Promotion if guard.since.is_none() => {
                    format!("{of}{recorded}, recorded with no wait: claims wait for nothing")
                }
                GuardKind::Promotion => {
                    format!("{of}{recorded}, first seen {since}: claims wait for nothing")
                }
                GuardKind::Wipe => {
                    let since = guard
                        .since
                        .map_or(String::new(), |at| format!(", since {}", When(Some(at))));
                    format!(
                        "{of}incarnation record present ({recorded}{since}): claims wait for \
                         nothing"
                    )
                }
            };
            Check::new(Verdict::Ok, name, detail)
        }
        GuardState::Running { opens_at, opens_in } => {
            let what = match guard.kind {
                GuardKind::Restart => format!("the server started at {since}"),
                GuardKind::Promotion => format!("{recorded} first seen {since}"),
                GuardKind::Wipe => format!("the pool's records were found gone at {since}"),
            };
            let opens = match (opens_at, opens_in) {
                (Some(at), Some(left)) => format!(
                    "guard running: no slot is granted until {} (in {:.1} s)",
                    utc(*at),
                    left.as_secs_f64()
                ),
                (Some(at), None) => {
                    format!("guard running: no slot is granted until {}", utc(*at))
                }
                _ => "guard running: no slot is granted until one restart span (TTL + 2 × \
                      max_clock_skew of the waiting claimers) has passed since then"
                    .to_owned(),
            };
            let check = Check::new(Verdict::Warn, name, format!("{of}{what}; {opens}"));
            match guard.kind {
                GuardKind::Wipe => check.fix(format!(
                    "wait for it; a pool that is new, or whose holders have all stopped, skips \
                     it: {new_pool}"
                )),
                _ => check.fix("wait for it: holders already running renew as usual"),
            }
        }
        GuardState::Changed { now } => Check::new(
            Verdict::Warn,
            name,
            format!(
                "{of}{recorded} recorded, the server has {now}: the next claim records it and, \
                 after a promotion, waits one restart span from then"
            ),
        )
        .fix("if no promotion happened (a planned restart), nothing to do"),
        GuardState::NotRecorded { next } => Check::new(
            Verdict::Ok,
            name,
            format!("{of}nothing recorded yet: {next}"),
        ),
        GuardState::Missing => Check::new(
            Verdict::Warn,
            name,
            format!(
                "{of}no incarnation record (a pool never prepared, or its records wiped): its \
                 next claim makes one and waits one restart span"
            ),
        )
        .fix(format!(
            "leasehold prepare --url {url} --pool {pool} (its claims wait one restart span from \
             then); or {new_pool}"
        )),
        GuardState::Damaged { what, fix } => {
            Check::new(Verdict::Fail, name, format!("{of}{what}")).fix(fix.clone())
        }
        GuardState::Off { why } => Check::new(Verdict::NotApplicable, name, format!("{of}{why}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_names_the_civil_time() {
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let at = UNIX_EPOCH + Duration::from_millis(1_796_506_200_123);
        assert_eq!(utc(at), "2026-12-05T21:30:00.123Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(utc(leap), "2000-02-29T00:00:00.000Z");
    }

    /// Each state has its verdict: running and missing warn with their
    /// fixes, damaged fails, open passes.
    #[test]
    fn guard_checks_warn_of_a_wait_and_a_missing_record_and_fail_a_damaged_one() {
        let at = UNIX_EPOCH + Duration::from_millis(1_796_506_200_123);
        let open = Guard::new(GuardKind::Wipe, GuardState::Open)
            .pool("ids")
            .recorded("declared new")
            .since(UNIX_EPOCH);
        let c = guard_check(&open, "redis://h");
        assert_eq!(c.verdict, Verdict::Ok, "{c}");
        assert!(c.detail.contains("since long past"), "{c}");
        let running = Guard::new(
            GuardKind::Wipe,
            GuardState::Running {
                opens_at: Some(at),
                opens_in: Some(Duration::from_millis(2500)),
            },
        )
        .pool("ids")
        .since(at - Duration::from_secs(3));
        let c = guard_check(&running, "redis://h");
        assert_eq!(c.verdict, Verdict::Warn, "{c}");
        assert!(
            c.detail
                .contains("until 2026-12-05T21:30:00.123Z (in 2.5 s)"),
            "{c}"
        );
        assert!(c.fix.as_deref().unwrap_or("").contains("--new-pool --yes"));
        let missing = Guard::new(GuardKind::Wipe, GuardState::Missing).pool("ids");
        let c = guard_check(&missing, "redis://h");
        assert_eq!(c.verdict, Verdict::Warn, "{c}");
        assert!(
            c.to_string()
                .contains("fix: leasehold prepare --url redis://h --pool ids (its"),
            "{c}"
        );
        let damaged = Guard::new(
            GuardKind::Wipe,
            GuardState::Damaged {
                what: "x".into(),
                fix: "y".into(),
            },
        );
        assert_eq!(guard_check(&damaged, "u").verdict, Verdict::Fail);
    }
}
