//! What an operator does with a store besides holding leases: look at the
//! slots, revoke one, prepare the store, and check that it is fit to hold
//! leases. Every backend implements [`Operate`], so a tool (the `leasehold`
//! CLI) or a health endpoint handles every store the same way.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use leasehold_core::operate::{Operate, Verdict, doctor};
//! use leasehold_core::Memory;
//!
//! let store: Box<dyn Operate> = Box::new(Memory::new());
//! for check in doctor(store.as_ref()).await {
//!     println!("{check}");
//!     assert_ne!(check.verdict, Verdict::Fail, "{check}");
//! }
//! # })
//! ```

use std::fmt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use crate::check::{Check, Verdict};
use crate::guards::Guard;
use crate::{
    BoxFuture, Durability, DynStrategy, InspectError, PoolSpec, Reason, Replication, SlotInfo,
};

/// An operator's handle on a store: object-safe, so a tool keeps one
/// `Box<dyn Operate>` whatever the store.
///
/// Every call is read-only except [`Operate::revoke`] and
/// [`Operate::prepare`]. None of them claims a slot. Every operator handle
/// is a strategy too ([`DynStrategy`]): what it shows of a pool is what its
/// strategy's `inspect` answers.
pub trait Operate: DynStrategy {
    /// The store as an operator names it: its kind and server version
    /// (`PostgreSQL 18.1`, `Valkey 8.1.4`, `etcd`, `Kubernetes (namespace ids)`).
    fn describe(&self) -> String;

    /// What one [`Operate::ping`] sends, for reports (`SELECT 1`, `PING`).
    fn round_trip(&self) -> &'static str;

    /// Which settings let the store forget a write it acknowledged, as read
    /// at connect. A store with no such setting (etcd, Kubernetes) is durable.
    fn durability(&self) -> Durability;

    /// How the store replicates, as read at connect, and whether a failover
    /// can leave an old primary confirming writes (a split brain). The
    /// default: a store that cannot split brain, whose writes are decided
    /// in one place (SQLite's file, etcd's Raft quorum, Kubernetes' etcd).
    fn replication(&self) -> Replication {
        Replication::default()
    }

    /// One round trip to the store.
    fn ping(&self) -> BoxFuture<'_, Result<(), OperateError>>;

    /// The store's wall clock, when leases are timed by it: `Ok(None)` (the
    /// default) for a store whose holders never compare their clocks with
    /// the store's (SQLite, etcd, Kubernetes).
    fn store_time(&self) -> BoxFuture<'_, Result<Option<SystemTime>, OperateError>> {
        Box::pin(std::future::ready(Ok(None)))
    }

    /// What the store holds for each slot of `pool` that has ever been used
    /// (the same answer as [`Strategy::inspect`](crate::Strategy::inspect)).
    fn slots<'a>(
        &'a self,
        pool: &'a PoolSpec,
    ) -> BoxFuture<'a, Result<Vec<SlotInfo>, InspectError>> {
        self.inspect_dyn(pool)
    }

    /// Revokes the lease on `slot` of `pool` behind its holder's back without
    /// ever granting the slot twice: the slot stays taken until the revoked
    /// lease would have expired, and the holder's next renewal is refused.
    /// `Ok(false)` when there was no live lease to revoke.
    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> BoxFuture<'a, Result<bool, OperateError>>;

    /// The pools the store holds leases for, sorted, when it can list them.
    fn pools(&self) -> BoxFuture<'_, Result<Vec<String>, OperateError>> {
        let what = format!("{} cannot list its pools; name the pool", self.describe());
        Box::pin(std::future::ready(Err(OperateError::Unsupported(what))))
    }

    /// How many slots `pool` has, where the store itself keeps that (SQL:
    /// the rows [`Operate::prepare`] made for it), so a tool need not be told.
    /// `None` where the size lives only in the holders' configuration (every
    /// other store: a slot exists once a claim takes it), and for a pool the
    /// store has no slots of: the default.
    fn pool_size<'a>(&'a self, pool: &'a str) -> BoxFuture<'a, Result<Option<u32>, OperateError>> {
        let _ = pool;
        Box::pin(std::future::ready(Ok(None)))
    }

    /// Closes the store's connections at once, for a process about to end
    /// or a tool done with the store (its clones then fail their calls). A
    /// store whose connections close when it is dropped does nothing: the
    /// default.
    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    /// Creates what the store needs before leases can be claimed (a table,
    /// its migrations, the rows or records of `pool`), idempotently, and
    /// answers how long `pool`'s claims are held back by its wipe guard:
    /// `Some(wait)` where the pool's records were not on the store (a pool
    /// never used, or one wiped while holders may still run: the store
    /// cannot tell them apart), so that no slot of it is granted for `wait`
    /// ([`Operate::prepare_new_pool`] skips that for a pool an operator
    /// knows is new); `None` where nothing holds claims back. A store that
    /// needs nothing (its claims create what they use) answers `Ok(None)`
    /// at once: the default.
    fn prepare<'a>(
        &'a self,
        pool: Option<&'a PoolSpec>,
    ) -> BoxFuture<'a, Result<Option<std::time::Duration>, OperateError>> {
        let _ = pool;
        Box::pin(std::future::ready(Ok(None)))
    }

    /// [`Operate::prepare`] for `pool`, declaring it **new**: where the store
    /// keeps a record that holds claims back once a pool's records were
    /// found gone (SQL: a truncated or emptied table, a pool's rows deleted,
    /// a pool never prepared on a table that was there), the pool is
    /// recorded as having nothing to wait for. Only with every holder of
    /// the pool stopped: one still generating could see its IDs issued
    /// again. A store that keeps no such record prepares the pool: the
    /// default.
    fn prepare_new_pool<'a>(
        &'a self,
        pool: &'a PoolSpec,
    ) -> BoxFuture<'a, Result<(), OperateError>> {
        Box::pin(async move { self.prepare(Some(pool)).await.map(drop) })
    }

    /// What the store's guards (DESIGN.md rule 12) hold back, read without
    /// writing: with `pool`, that pool's readings (the restart and
    /// promotion guards with the pool's restart span, and its wipe guard's
    /// incarnation record); without, what the store can tell of itself
    /// (the restart and promotion guards). A store without guards (one
    /// that forgets nothing and keeps no incarnation record) answers
    /// nothing: the default.
    fn guards<'a>(
        &'a self,
        pool: Option<&'a PoolSpec>,
    ) -> BoxFuture<'a, Result<Vec<Guard>, OperateError>> {
        let _ = pool;
        Box::pin(std::future::ready(Ok(Vec::new())))
    }

    /// The store's own checks (server, the lease path, schema, persistence,
    /// permissions), each with a verdict and a fix. [`doctor`] adds the
    /// clock and latency checks every store shares.
    fn checks(&self) -> BoxFuture<'_, Vec<Check>>;
}

/// Why an operator call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OperateError {
    /// This store cannot do it (the text says what to do instead).
    Unsupported(String),
    /// The store did not answer, or not in time. Trying again may succeed.
    Unreachable(Reason),
    /// The store needs a change first (a missing table or column): `fix`
    /// says which call or migration makes it.
    NeedsFix {
        /// What is missing.
        what: String,
        /// How to fix it.
        fix: String,
    },
    /// The store answered with an error.
    Store(Reason),
}

impl OperateError {
    /// True when trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unreachable(_))
    }
}

impl fmt::Display for OperateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unsupported(what) => f.write_str(what),
            Self::Unreachable(r) => write!(f, "cannot reach the store: {r}"),
            Self::NeedsFix { what, fix } => write!(f, "{what}; {fix}"),
            Self::Store(r) => write!(f, "the store answered with an error: {r}"),
        }
    }
}

impl std::error::Error for OperateError {}

/// The durability check every store shares, from [`Operate::durability`]:
/// `ok` when durable, else a warning naming each risk, then `note` (what
/// accepted the store, or what is refused; may be empty). A store that
/// `connect` refuses is a [`refusal_check`] instead.
pub fn durability_check(d: &Durability, note: &str) -> Check {
    if d.is_durable() {
        return Check::new(Verdict::Ok, "durability", d.to_string());
    }
    let risks: Vec<String> = d
        .risks
        .iter()
        .map(|r| format!("{} = {} ({})", r.setting, r.value, r.loses))
        .collect();
    let fixes: Vec<&str> = d.risks.iter().map(|r| r.fix.as_str()).collect();
    Check::new(
        Verdict::Warn,
        "durability",
        if note.is_empty() {
            format!("can forget acknowledged writes: {}", risks.join("; "))
        } else {
            format!(
                "can forget acknowledged writes: {}; {note}",
                risks.join("; ")
            )
        },
    )
    .fix(fixes.join("; "))
}

/// The replication check every store shares, from
/// [`Operate::replication`]: FAIL with the refusal's fixes where `connect`
/// refuses the store for its replication (a replica, or a setup that can
/// split brain under `refuse_split_brain`), a warning naming the setting
/// that closes a split brain where one can happen, else `ok`.
pub fn replication_check(r: &Replication) -> Check {
    if let Some(refusal) = &r.refusal {
        return refusal_check("replication", refusal);
    }
    match &r.split_brain {
        None => Check::new(Verdict::Ok, "replication", r.found.clone()),
        Some(risk) => Check::new(Verdict::Warn, "replication", r.to_string()).fix(format!(
            "{}; or refuse such a setup at connect: the URL option refuse_split_brain=true",
            risk.fix
        )),
    }
}

/// A refusal's text split as a [`Check`] shows it: its first line (what was
/// refused), and the lines after it (the settings found, the fixes and the
/// opt-ins, `- ` items), each without its indent, one per line.
pub fn split_refusal(text: &str) -> (String, String) {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default().trim().to_owned();
    let rest: Vec<&str> = lines.map(str::trim).filter(|l| !l.is_empty()).collect();
    (first, rest.join("\n"))
}

/// The check of what a strategy's `connect` refuses (the same text its
/// error shows), FAILed: the store is unfit for leases as configured.
pub fn refusal_check(name: &'static str, refusal: &str) -> Check {
    let (what, fixes) = split_refusal(refusal);
    let check = Check::new(Verdict::Fail, name, what);
    if fixes.is_empty() {
        check
    } else {
        check.fix(fixes)
    }
}

/// How many round trips the clock and latency checks take.
pub const DOCTOR_SAMPLES: usize = 5;

/// Every check of `store`: its own ([`Operate::checks`]) with its
/// replication ([`replication_check`]) after its durability, then the clock
/// (from [`DOCTOR_SAMPLES`] bracketed readings of the store's time) and the
/// latency (the median of [`DOCTOR_SAMPLES`] pings).
pub async fn doctor(store: &dyn Operate) -> Vec<Check> {
    let mut checks = store.checks().await;
    // Beside what the store keeps of a write (its durability or
    // persistence line), else after the store's own checks.
    let at = checks
        .iter()
        .rposition(|c| matches!(c.name, "durability" | "persistence"))
        .map_or(checks.len(), |i| i + 1);
    checks.insert(at, replication_check(&store.replication()));
    let mut readings = Vec::new();
    let mut clockless = false;
    for _ in 0..DOCTOR_SAMPLES {
        let before = SystemTime::now();
        match store.store_time().await {
            Ok(Some(at)) => readings.push((before, at, SystemTime::now())),
            Ok(None) => {
                clockless = true;
                break;
            }
            Err(_) => {}
        }
    }
    if !clockless {
        checks.push(clock_check(&readings));
    }
    let mut samples = Vec::new();
    for _ in 0..DOCTOR_SAMPLES {
        let t = Instant::now();
        if store.ping().await.is_ok() {
            samples.push(t.elapsed());
        }
    }
    checks.push(latency_check(samples, store.round_trip()));
    checks
}

fn micros(t: SystemTime) -> i128 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i128::try_from(d.as_micros()).unwrap_or(i128::MAX),
        Err(e) => -i128::try_from(e.duration().as_micros()).unwrap_or(i128::MAX),
    }
}

/// `0.42 ms`, `12.10 ms`.
fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// The offset of this host's clock from the store's, from bracketed readings
/// `(local before, store, local after)`: the reading with the shortest round
/// trip wins, and the verdict judges the least offset it allows.
pub fn clock_check(readings: &[(SystemTime, SystemTime, SystemTime)]) -> Check {
    let Some((t0, server, t1)) = readings
        .iter()
        .map(|&(a, s, b)| (micros(a), micros(s), micros(b)))
        .min_by_key(|(a, _, b)| b - a)
    else {
        return Check::new(Verdict::Warn, "clock", "the store's time could not be read");
    };
    let offset = (t0 + t1) / 2 - server;
    let bound = Duration::from_micros(u64::try_from((t1 - t0) / 2).unwrap_or(0));
    let abs = Duration::from_micros(u64::try_from(offset.unsigned_abs()).unwrap_or(u64::MAX));
    let direction = if offset >= 0 { "ahead of" } else { "behind" };
    let detail = format!(
        "this host is {} {direction} the store's clock (±{})",
        ms(abs),
        ms(bound)
    );
    // The reading cannot tell apart offsets within half its round trip.
    let least = abs.saturating_sub(bound);
    if least <= Duration::from_millis(100) {
        Check::new(Verdict::Ok, "clock", detail)
    } else if least <= Duration::from_secs(1) {
        Check::new(Verdict::Warn, "clock", detail).fix(
            "sync this host's clock (chrony/NTP); expiry is the store's, but after a hand-over \
             a holder whose clock is behind the slot's floor waits up to max_clock_skew (1 s)",
        )
    } else {
        Check::new(Verdict::Fail, "clock", detail).fix(
            "sync this host's clock (chrony/NTP): beyond max_clock_skew (1 s) a holder refuses \
             to generate IDs after a hand-over until its clock passes the slot's floor",
        )
    }
}

/// The latency check: the median of `samples` round trips of `what`.
pub fn latency_check(mut samples: Vec<Duration>, what: &str) -> Check {
    if samples.is_empty() {
        return Check::new(Verdict::Fail, "latency", format!("no {what} answered"))
            .fix("check the network path to the store");
    }
    samples.sort();
    let n = samples.len();
    let median = samples[n / 2];
    let detail = format!("{} median of {n} × {what}", ms(median));
    if median < Duration::from_millis(100) {
        Check::new(Verdict::Ok, "latency", detail)
    } else {
        Check::new(Verdict::Warn, "latency", detail).fix(
            "slow round trips eat into the safety margin and the renewal interval: use a store \
             nearer to the holders, or a longer TTL",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(us: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_micros(us)
    }

    /// The reading with the shortest round trip decides, and an offset the
    /// round trip could explain is not held against the host.
    #[test]
    fn the_clock_check_judges_the_least_offset_of_the_tightest_reading() {
        let base = 1_700_000_000_000_000;
        // A wide reading suggesting 5 s ahead, a tight one suggesting 50 ms.
        let wide = (at(base), at(base - 5_000_000), at(base + 2_000_000));
        let tight = (at(base), at(base - 50_000), at(base + 200));
        let c = clock_check(&[wide, tight]);
        assert_eq!(c.verdict, Verdict::Ok, "{c}");
        assert!(c.detail.contains("ahead of"), "{c}");
        let behind = (at(base), at(base + 3_000_000), at(base + 100));
        let c = clock_check(&[behind]);
        assert_eq!(c.verdict, Verdict::Fail, "{c}");
        assert!(c.detail.contains("behind"), "{c}");
        assert!(c.fix.is_some());
        assert_eq!(clock_check(&[]).verdict, Verdict::Warn);
    }

    /// A store that cannot split brain passes; one that can is a warning
    /// naming the setting that closes it and the opt-in that refuses it;
    /// one `connect` refused for its replication FAILs with the refusal's
    /// lines.
    #[test]
    fn the_replication_check_warns_of_a_split_brain_and_fails_a_refusal() {
        let c = replication_check(&Replication::default());
        assert_eq!(c.verdict, Verdict::Ok, "{c}");
        let risky = Replication::new("primary, 1 replica").with_risk(crate::SplitBrainRisk {
            setting: "min-replicas-to-write".into(),
            value: "0".into(),
            fix: "CONFIG SET min-replicas-to-write 1".into(),
        });
        let c = replication_check(&risky);
        assert_eq!(c.verdict, Verdict::Warn, "{c}");
        let shown = c.to_string();
        for needle in [
            "min-replicas-to-write = 0",
            "CONFIG SET min-replicas-to-write 1",
            "refuse_split_brain=true",
        ] {
            assert!(shown.contains(needle), "{needle} missing: {shown}");
        }
        let refused = risky.with_refusal("a replica is refused\n  - fix: the primary's address");
        let c = replication_check(&refused);
        assert_eq!(c.verdict, Verdict::Fail, "{c}");
        assert_eq!(c.detail, "a replica is refused");
        assert_eq!(c.fix.as_deref(), Some("- fix: the primary's address"));
    }

    #[test]
    fn the_latency_check_takes_the_median() {
        let ms = Duration::from_millis;
        let c = latency_check(vec![ms(1), ms(500), ms(2)], "PING");
        assert_eq!(c.verdict, Verdict::Ok, "{c}");
        assert!(c.detail.contains("2.00 ms median of 3 × PING"), "{c}");
        let c = latency_check(vec![ms(150), ms(500), ms(200)], "PING");
        assert_eq!(c.verdict, Verdict::Warn, "{c}");
        assert_eq!(latency_check(vec![], "PING").verdict, Verdict::Fail);
    }
}
