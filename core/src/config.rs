//! Validated lease configuration.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, DEFAULT_MAX_CLOCK_SKEW, SystemClock};
use crate::error::ConfigError;
use crate::events::{Acquired, Hooks, LeaseEvent, Waiting};
use crate::loss::LossEvent;
use crate::pool::{IdFormat, MAX_TTL, PoolName, PoolSpec, check_size, check_ttl, default_holder};

/// Called after generation has stopped, when a lease is lost.
pub type OnLost = Arc<dyn Fn(&LossEvent) + Send + Sync>;

/// How far two hosts' clocks may drift apart per unit of time, in parts per
/// million: each side may run up to 500 ppm fast or slow (the most NTP slews
/// a clock), so one host's TTL may last 1000 ppm less than the other's.
pub const CLOCK_RATE_BOUND_PPM: u64 = 1_000;

/// Two ticks of the coarsest clock tick generation accepts (10 ms): the
/// slack for a coarse clock reading and for timers near a deadline.
pub const COARSE_CLOCK_SLACK: Duration = Duration::from_millis(20);

/// The smallest safety margin that covers what it must, for a lease of `ttl`
/// on a store whose clock and TTLs count in steps of `store_resolution`:
/// `ttl × CLOCK_RATE_BOUND_PPM / 10⁶ + store_resolution + COARSE_CLOCK_SLACK`.
///
/// The holder's local deadline is `sent_at + ttl − margin`, measured on its
/// clock; the store expires the lease `ttl` after it processed the request,
/// measured on the store's clock, rounded to its resolution. The margin must
/// cover the two clocks' rate difference over a whole TTL, the rounding, and
/// the granularity of the clock generation reads (DESIGN.md, timing rule 2).
///
/// ```
/// use leasehold_core::min_safety_margin;
/// use std::time::Duration;
/// let m = min_safety_margin(Duration::from_secs(30), Duration::from_millis(1));
/// assert_eq!(m, Duration::from_millis(30 + 1 + 20));
/// ```
pub fn min_safety_margin(ttl: Duration, store_resolution: Duration) -> Duration {
    let drift = Duration::from_nanos(
        u64::try_from(ttl.as_nanos() * u128::from(CLOCK_RATE_BOUND_PPM) / 1_000_000)
            .unwrap_or(u64::MAX),
    );
    drift + store_resolution + COARSE_CLOCK_SLACK
}

/// Checks `margin` against [`min_safety_margin`]; the error names the minimum
/// and why.
pub(crate) fn check_margin(
    ttl: Duration,
    margin: Duration,
    store_resolution: Duration,
) -> Result<(), ConfigError> {
    let min = min_safety_margin(ttl, store_resolution);
    if margin < min || margin > ttl / 2 {
        return Err(ConfigError::new(
            "safety_margin",
            format!("{margin:?}"),
            format!(
                "{min:?} to ttl/2 ({:?}): the margin must cover the clock-rate difference of \
                 two hosts over one TTL ({CLOCK_RATE_BOUND_PPM} ppm of {ttl:?}), the store's time \
                 resolution ({store_resolution:?}) and coarse-clock ticks \
                 ({COARSE_CLOCK_SLACK:?}); raise the margin or the TTL",
                ttl / 2
            ),
        ));
    }
    Ok(())
}

/// The lease timings, validated. Build them with [`LeaseConfig::builder`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timing {
    ttl: Duration,
    renew_interval: Duration,
    safety_margin: Duration,
    acquire_timeout: Duration,
    backoff_initial: Duration,
    backoff_max: Duration,
    max_clock_skew: Duration,
}

impl Timing {
    /// The lease time asked of the store.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
    /// Renew this long after the last renewal was sent.
    pub fn renew_interval(&self) -> Duration {
        self.renew_interval
    }
    /// Stop generating this long before the store-side expiry could be reached.
    pub fn safety_margin(&self) -> Duration {
        self.safety_margin
    }
    /// How long `start` waits for the first lease.
    pub fn acquire_timeout(&self) -> Duration {
        self.acquire_timeout
    }
    /// The first retry delay; doubles per attempt.
    pub fn backoff_initial(&self) -> Duration {
        self.backoff_initial
    }
    /// The largest retry delay.
    pub fn backoff_max(&self) -> Duration {
        self.backoff_max
    }
    /// How far this host's clock may be behind a slot's floor: generation
    /// waits up to this long for its clock to pass the floor, and refuses
    /// beyond it.
    pub fn max_clock_skew(&self) -> Duration {
        self.max_clock_skew
    }
    /// The local deadline of a lease of `ttl` whose request was sent at
    /// `sent_at` (DESIGN.md, timing rule 2). The one place it is computed.
    pub fn deadline(&self, sent_at: crate::MonoTime, ttl: Duration) -> crate::MonoTime {
        if crate::plant::active(crate::plant::Plant::NoMargin) {
            return sent_at + ttl;
        }
        sent_at + ttl - self.safety_margin
    }
}

/// A validated configuration: pool, size, holder, timings, callbacks.
///
/// ```
/// use leasehold_core::LeaseConfig;
/// use std::time::Duration;
/// let config = LeaseConfig::builder("machine-ids")
///     .pool_size(512)
///     .ttl(Duration::from_secs(30))
///     .build()
///     .unwrap();
/// assert_eq!(config.timing().renew_interval(), Duration::from_secs(10));
///
/// let err = LeaseConfig::builder("ids").pool_size(0).build().unwrap_err();
/// assert_eq!(err.field(), "pool_size");
/// assert!(err.to_string().contains("1 to"));
/// ```
#[derive(Clone)]
pub struct LeaseConfig {
    pub(crate) pool: PoolSpec,
    pub(crate) timing: Timing,
    /// The callbacks, and whether renewals are reported.
    pub(crate) hooks: Hooks,
    /// Where the driver sends events besides the callbacks: an elector's
    /// channel, shared by its lease managers; `None`, a channel of the
    /// manager's own.
    #[cfg(feature = "tokio")]
    pub(crate) events: Option<tokio::sync::broadcast::Sender<LeaseEvent>>,
    /// The wall clock ceilings and floors are computed with (by the
    /// driver, the `tokio` feature).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) clock: Arc<dyn Clock>,
}

impl LeaseConfig {
    /// Starts a configuration for the pool `name`.
    pub fn builder(name: impl Into<String>) -> LeaseConfigBuilder {
        LeaseConfigBuilder {
            name: name.into(),
            size: 512,
            holder: None,
            ttl: Duration::from_secs(30),
            renew_interval: None,
            safety_margin: None,
            acquire_timeout: Duration::from_secs(30),
            backoff_initial: Duration::from_millis(100),
            backoff_max: None,
            max_clock_skew: None,
            id_format: None,
            hooks: Hooks::default(),
            clock: None,
        }
    }

    /// The pool.
    pub fn pool(&self) -> &PoolSpec {
        &self.pool
    }

    /// The timings.
    pub fn timing(&self) -> &Timing {
        &self.timing
    }
}

impl fmt::Debug for LeaseConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseConfig")
            .field("pool", &self.pool)
            .field("timing", &self.timing)
            .field("on_lost", &self.hooks.on_lost.is_some())
            .field("report_renewals", &self.hooks.renewals)
            .finish()
    }
}

/// Builds a [`LeaseConfig`]; [`LeaseConfigBuilder::build`] validates every field.
#[must_use]
pub struct LeaseConfigBuilder {
    name: String,
    size: u32,
    holder: Option<String>,
    ttl: Duration,
    renew_interval: Option<Duration>,
    safety_margin: Option<Duration>,
    acquire_timeout: Duration,
    backoff_initial: Duration,
    backoff_max: Option<Duration>,
    max_clock_skew: Option<Duration>,
    id_format: Option<IdFormat>,
    hooks: Hooks,
    clock: Option<Arc<dyn Clock>>,
}

impl LeaseConfigBuilder {
    /// Slots are `0..size` (default 512, the default nonce layout's 9 bits).
    pub fn pool_size(mut self, size: u32) -> Self {
        self.size = size;
        self
    }
    /// The holder identity stored with the lease (default `host/pid`).
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(holder.into());
        self
    }
    /// Lease time asked of the store (default 30 s; 100 ms to 24 h).
    ///
    /// Each claim also records the pool's **restart span**, TTL + 2 ×
    /// [`max_clock_skew`](Self::max_clock_skew), in the store. On a store
    /// that can forget, the backend's restart guard (on unless the
    /// [`DurabilityPolicy`](crate::DurabilityPolicy) is `Throwaway`) grants
    /// nothing after a restart until the longest span recorded for the pool
    /// has passed: a longer TTL here is a longer pause after such a restart.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// Renewal period (default ttl/3; 10 ms to ttl/2, and below ttl − safety margin).
    pub fn renew_interval(mut self, every: Duration) -> Self {
        self.renew_interval = Some(every);
        self
    }
    /// Margin kept below the store's expiry (default ttl/10, at least 50 ms;
    /// from [`min_safety_margin`] to ttl/2; `LeaseManager::start` checks it
    /// again with the store's time resolution).
    pub fn safety_margin(mut self, margin: Duration) -> Self {
        self.safety_margin = Some(margin);
        self
    }
    /// How long `start` waits for the first lease (default 30 s; 1 ms to 24 h).
    /// A store whose restart guard holds grants back says until when
    /// ([`AcquireError::StoreRestarted`](crate::AcquireError::StoreRestarted)):
    /// that wait does not count, and the timeout counts from when the guard
    /// opens, so a guard longer than the timeout (the default span, 32 s, is)
    /// is waited out instead of failing the start.
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }
    /// First retry delay (default 100 ms; 1 ms to the maximum backoff).
    pub fn backoff_initial(mut self, delay: Duration) -> Self {
        self.backoff_initial = delay;
        self
    }
    /// Largest retry delay (default min(ttl/4, 5 s); up to the ttl).
    pub fn backoff_max(mut self, delay: Duration) -> Self {
        self.backoff_max = Some(delay);
        self
    }
    /// How far this host's clock may be behind a slot's floor (the previous
    /// holder's last timestamp) before generation refuses (default 1 s, or
    /// the TTL when shorter; up to the TTL). Within it, generation waits for
    /// the clock to pass the floor. Counted twice in the pool's restart span
    /// (see [`ttl`](Self::ttl)).
    pub fn max_clock_skew(mut self, skew: Duration) -> Self {
        self.max_clock_skew = Some(skew);
        self
    }
    /// Declares the ID format this process generates (with
    /// `leasehold-nonce`: `Layout::id_format`). The store records the pool's
    /// format and refuses a process that declares another one, naming both
    /// ([`AcquireError::OtherIdFormat`](crate::AcquireError::OtherIdFormat));
    /// and a generator of another layout cannot attach to this manager's
    /// gate. Without it, nothing is recorded or checked across processes
    /// (only the generators of one gate are compared).
    pub fn id_format(mut self, format: IdFormat) -> Self {
        self.id_format = Some(format);
        self
    }
    /// The wall clock the manager computes the ceilings it reports to the
    /// store with (default [`SystemClock`], the process's clock): give it
    /// the one your generators stamp timestamps with, so both read one
    /// clock. With `leasehold-nonce`, `AsClock(time.clone())` for the time
    /// source `time` the generators were built with. A generator whose wall
    /// clock is ahead of the manager's by more than the time left to the
    /// deadline stamps past the ceiling and refuses (`leasehold-nonce`'s
    /// `GenerateError::PastCeiling`); one behind it
    /// waits for the slot's floor. Only the clock's Unix offset is used:
    /// deadlines stay on [`MonoTime`](crate::MonoTime), the gate's clock.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }
    /// Called when a lease is lost, after generation has stopped
    /// ([`LeaseEvent::Lost`]). Runs on the lease manager's task: keep it
    /// short. A panic in it is caught; the driver goes on.
    pub fn on_lost(mut self, f: impl Fn(&LossEvent) + Send + Sync + 'static) -> Self {
        self.hooks.on_lost = Some(Arc::new(f));
        self
    }
    /// Called when a new grant is held, once the gate is open with it
    /// ([`LeaseEvent::Acquired`]); for the first lease, before
    /// `LeaseManager::start` returns. Runs on the lease manager's task: keep
    /// it short. A panic in it is caught; the driver goes on.
    pub fn on_acquired(mut self, f: impl Fn(&Acquired) + Send + Sync + 'static) -> Self {
        self.hooks.on_acquired = Some(Arc::new(f));
        self
    }
    /// Called when generation has to wait until a known time
    /// ([`LeaseEvent::Waiting`]): the store's restart guard holds grants
    /// back, or this host's clock is behind a new grant's floor. Runs on the
    /// lease manager's task: keep it short. A panic in it is caught.
    pub fn on_waiting(mut self, f: impl Fn(&Waiting) + Send + Sync + 'static) -> Self {
        self.hooks.on_waiting = Some(Arc::new(f));
        self
    }
    /// Called with every [`LeaseEvent`] (renewals only with
    /// [`report_renewals`](Self::report_renewals)), after the callback of
    /// its kind; may be given more than once. Runs on the lease manager's
    /// task, from the first attempt to acquire on (during `start` too): keep
    /// it short. A panic in it is caught; the driver goes on.
    pub fn on_event(mut self, f: impl Fn(&LeaseEvent) + Send + Sync + 'static) -> Self {
        self.hooks.on_event.push(Arc::new(f));
        self
    }
    /// Also report every confirmed renewal ([`LeaseEvent::Renewed`], one
    /// per renew interval) to [`on_event`](Self::on_event) and to
    /// subscribers. Off by default.
    pub fn report_renewals(mut self, on: bool) -> Self {
        self.hooks.renewals = on;
        self
    }

    /// Validates and builds. The error names the field and its allowed range.
    pub fn build(self) -> Result<LeaseConfig, ConfigError> {
        let name = PoolName::new(self.name)?;
        check_size(self.size)?;
        check_ttl(self.ttl)?;
        let ttl = self.ttl;
        let margin = self
            .safety_margin
            .unwrap_or_else(|| (ttl / 10).max(Duration::from_millis(50)).min(ttl / 2));
        check_margin(ttl, margin, Duration::ZERO)?;
        let renew = self.renew_interval.unwrap_or(ttl / 3);
        if renew < Duration::from_millis(10) || renew > ttl / 2 || renew >= ttl - margin {
            return Err(ConfigError::new(
                "renew_interval",
                format!("{renew:?}"),
                format!(
                    "10ms to ttl/2 ({:?}) and below ttl - safety_margin ({:?})",
                    ttl / 2,
                    ttl - margin
                ),
            ));
        }
        if !(Duration::from_millis(1)..=MAX_TTL).contains(&self.acquire_timeout) {
            return Err(ConfigError::new(
                "acquire_timeout",
                format!("{:?}", self.acquire_timeout),
                "1ms to 24h",
            ));
        }
        let backoff_max = self.backoff_max.unwrap_or_else(|| {
            (ttl / 4)
                .min(Duration::from_secs(5))
                .max(self.backoff_initial)
        });
        if backoff_max > ttl.max(self.backoff_initial) {
            return Err(ConfigError::new(
                "backoff_max",
                format!("{backoff_max:?}"),
                format!("backoff_initial to ttl ({ttl:?})"),
            ));
        }
        if self.backoff_initial < Duration::from_millis(1) || self.backoff_initial > backoff_max {
            return Err(ConfigError::new(
                "backoff_initial",
                format!("{:?}", self.backoff_initial),
                format!("1ms to backoff_max ({backoff_max:?})"),
            ));
        }
        let max_clock_skew = self
            .max_clock_skew
            .unwrap_or(DEFAULT_MAX_CLOCK_SKEW.min(ttl));
        if max_clock_skew > ttl {
            return Err(ConfigError::new(
                "max_clock_skew",
                format!("{max_clock_skew:?}"),
                format!("0 to the ttl ({ttl:?})"),
            ));
        }
        Ok(LeaseConfig {
            pool: PoolSpec {
                name,
                size: self.size,
                ttl,
                holder: self.holder.unwrap_or_else(default_holder),
                max_clock_skew,
                id_format: self.id_format,
            },
            timing: Timing {
                ttl,
                renew_interval: renew,
                safety_margin: margin,
                acquire_timeout: self.acquire_timeout,
                backoff_initial: self.backoff_initial,
                backoff_max,
                max_clock_skew,
            },
            hooks: self.hooks,
            #[cfg(feature = "tokio")]
            events: None,
            clock: self.clock.unwrap_or_else(|| Arc::new(SystemClock)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(b: LeaseConfigBuilder) -> &'static str {
        b.build().unwrap_err().field()
    }

    #[test]
    fn every_bad_value_names_its_field() {
        let b = || LeaseConfig::builder("p");
        assert_eq!(field_of(LeaseConfig::builder("bad name")), "pool");
        assert_eq!(field_of(b().pool_size(0)), "pool_size");
        assert_eq!(field_of(b().pool_size(u32::MAX)), "pool_size");
        assert_eq!(field_of(b().ttl(Duration::from_millis(5))), "ttl");
        assert_eq!(field_of(b().safety_margin(Duration::ZERO)), "safety_margin");
        assert_eq!(
            field_of(b().max_clock_skew(Duration::from_secs(31))),
            "max_clock_skew"
        );
        assert_eq!(
            field_of(b().safety_margin(Duration::from_secs(20))),
            "safety_margin"
        );
        assert_eq!(
            field_of(b().renew_interval(Duration::from_secs(20))),
            "renew_interval"
        );
        assert_eq!(
            field_of(b().acquire_timeout(Duration::ZERO)),
            "acquire_timeout"
        );
        assert_eq!(
            field_of(b().backoff_max(Duration::from_secs(60))),
            "backoff_max"
        );
        assert_eq!(
            field_of(b().backoff_initial(Duration::ZERO)),
            "backoff_initial"
        );
        let msg = b()
            .ttl(Duration::from_millis(5))
            .build()
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("`ttl`") && msg.contains("100ms to 24h"),
            "{msg}"
        );
    }

    /// Rule 2's deadline: the send time plus the TTL, less the margin. The
    /// campaign's planted bugs can change it only in a build with the
    /// `planted-bugs` feature and only when one is planted; none is here.
    #[test]
    fn the_deadline_counts_from_the_send_time_less_the_margin() {
        let t = LeaseConfig::builder("p")
            .ttl(Duration::from_secs(2))
            .safety_margin(Duration::from_millis(200))
            .build()
            .unwrap()
            .timing()
            .clone();
        let sent = crate::MonoTime::from_nanos(5_000_000_000);
        assert_eq!(
            t.deadline(sent, Duration::from_secs(2)),
            crate::MonoTime::from_nanos(6_800_000_000)
        );
        assert!(!crate::plant::active(crate::plant::Plant::NoMargin));
    }

    #[test]
    fn defaults_are_consistent() {
        let c = LeaseConfig::builder("p").build().unwrap();
        let t = c.timing();
        assert!(t.renew_interval() < t.ttl() - t.safety_margin());
        assert!(t.backoff_initial() <= t.backoff_max());
        assert_eq!(t.max_clock_skew(), DEFAULT_MAX_CLOCK_SKEW);
        assert_eq!(c.pool().size, 512);
    }

    #[test]
    fn the_pool_spec_carries_the_skew_a_restart_guard_must_wait_out() {
        let c = LeaseConfig::builder("p")
            .ttl(Duration::from_secs(60))
            .max_clock_skew(Duration::from_secs(30))
            .build()
            .unwrap();
        assert_eq!(c.pool().max_clock_skew(), Duration::from_secs(30));
        assert_eq!(c.pool().restart_span(), Duration::from_secs(120));
        let d = LeaseConfig::builder("p")
            .ttl(Duration::from_secs(5))
            .build()
            .unwrap();
        assert_eq!(d.pool().restart_span(), Duration::from_secs(7));
        let short =
            PoolSpec::new(PoolName::new("p").unwrap(), 1, Duration::from_millis(500)).unwrap();
        assert_eq!(short.max_clock_skew(), Duration::from_millis(500));
        assert!(
            short
                .clone()
                .with_max_clock_skew(Duration::from_secs(1))
                .is_err()
        );
    }
}

#[cfg(test)]
mod margin_tests {
    use super::*;

    /// DESIGN.md timing rule 2's margin: below the minimum is refused, and the
    /// message names the minimum and why.
    #[test]
    fn a_margin_below_the_minimum_names_the_minimum_and_why() {
        let ttl = Duration::from_secs(60);
        let min = min_safety_margin(ttl, Duration::ZERO);
        assert_eq!(min, Duration::from_millis(60 + 20));
        let ok = LeaseConfig::builder("p")
            .ttl(ttl)
            .safety_margin(min)
            .build();
        assert!(ok.is_ok(), "{ok:?}");
        let err = LeaseConfig::builder("p")
            .ttl(ttl)
            .safety_margin(min - Duration::from_millis(1))
            .build()
            .unwrap_err();
        assert_eq!(err.field(), "safety_margin");
        let msg = err.to_string();
        assert!(msg.contains("80ms") && msg.contains("ppm"), "{msg}");
        // A coarser store clock raises the minimum.
        assert!(check_margin(ttl, min, Duration::from_secs(1)).is_err());
        assert!(check_margin(ttl, min + Duration::from_secs(1), Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn the_default_margin_meets_the_minimum_for_every_ttl() {
        for ms in [100, 101, 500, 1_000, 30_000, 3_600_000, 86_400_000] {
            let ttl = Duration::from_millis(ms);
            let c = LeaseConfig::builder("p").ttl(ttl).build();
            assert!(c.is_ok(), "ttl {ttl:?}: {c:?}");
        }
    }
}
