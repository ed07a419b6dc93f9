//! What a process accepts of a store that can forget writes it acknowledged.

use std::fmt;
use std::str::FromStr;

/// What a process accepts of a store that can forget writes it acknowledged
/// (a server without `fsync`, Valkey/Redis without `appendfsync always`), the
/// same words for every backend: `SqlConfig::durability`,
/// `ValkeyConfig::durability`, `EtcdConfig::durability`,
/// `KubeConfig::durability`, the URL option `durability=…` of every store,
/// and `StoreConfig::set("durability", …)`. etcd and Kubernetes never forget
/// (Raft, fsync): every case is accepted there and changes nothing.
///
/// It replaces three switches whose combinations meant different things per
/// store: `require_durable`, `assume_one_timing_per_pool` and `restart_guard`
/// (deprecated, still read as before until a later release; the crates'
/// CHANGELOGs map each to its case).
///
/// ```
/// use leasehold_core::DurabilityPolicy;
/// let p: DurabilityPolicy = "one-timing-per-pool".parse()?;
/// assert_eq!(p, DurabilityPolicy::OneTimingPerPool);
/// assert_eq!(DurabilityPolicy::default().to_string(), "durable");
/// assert!("fast".parse::<DurabilityPolicy>().unwrap_err().contains("durable, one-timing-per-pool, throwaway"));
/// # Ok::<(), String>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DurabilityPolicy {
    /// The default. A server that can forget acknowledged writes is refused
    /// at connect, naming each setting and its fix; one weakened after
    /// connect refuses claims from the next reading of its settings. The
    /// restart and promotion guards run on every server (DESIGN.md rule 12).
    /// Nothing is risked.
    #[default]
    Durable,
    /// A server that can forget is accepted, with the restart and promotion
    /// guards on, on the promise that **every process of each pool uses the
    /// same TTL and `max_clock_skew`**. What is risked when the promise is
    /// broken: a crash that also loses the pool's recorded span leaves the
    /// guard waiting only the claimer's own span, and a holder with a longer
    /// one may still generate with the slot the claimer is granted:
    /// duplicate IDs until the longer lease's deadline.
    OneTimingPerPool,
    /// A server that can forget is accepted, and the restart and promotion
    /// guards are off: a restart or a failover that loses a lease hands its
    /// slot to a second holder at once, and both mint the same IDs. Only for
    /// a throwaway server never restarted nor failed over while leases are
    /// held (tests, benchmarks), or a process that never claims.
    Throwaway,
}

impl DurabilityPolicy {
    /// Every case, in the order of the risk taken.
    pub const ALL: [DurabilityPolicy; 3] = [Self::Durable, Self::OneTimingPerPool, Self::Throwaway];

    /// Its name in URLs and on command lines: `durable`,
    /// `one-timing-per-pool`, `throwaway`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Durable => "durable",
            Self::OneTimingPerPool => "one-timing-per-pool",
            Self::Throwaway => "throwaway",
        }
    }

    /// The policy that says what the deprecated switches say together:
    /// `Durable` where a server that can forget is refused (the defaults,
    /// and whatever `require_durable` is set beside), `Throwaway` with the
    /// guards off (the one-timing promise is moot then), `OneTimingPerPool`
    /// with the promise.
    pub fn of_switches(require_durable: bool, restart_guard: bool, one_timing: bool) -> Self {
        if require_durable || (restart_guard && !one_timing) {
            Self::Durable
        } else if !restart_guard {
            Self::Throwaway
        } else {
            Self::OneTimingPerPool
        }
    }
}

impl fmt::Display for DurabilityPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DurabilityPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("durability={s:?}: give one of durable, one-timing-per-pool, throwaway")
            })
    }
}
