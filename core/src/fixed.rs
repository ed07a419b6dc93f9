//! Deterministic slots: fixed by configuration or by the environment.

use crate::error::{AcquireError, ConfigError};
use crate::pool::PoolSpec;
use crate::strategy::{Capabilities, Fence, Floor, Grant, Release, Renewal, Strategy};
use crate::token::Token;

/// A fence for slots nobody coordinates: microseconds of wall-clock time,
/// strictly growing within the process. It grows across restarts only as far as
/// the wall clock does; a deterministic slot has no store to do better.
fn wall_clock_fence() -> Fence {
    Fence(crate::clock::unique_wall_micros())
}

fn fixed_acquire(slot: u32, pool: &PoolSpec, source: &str) -> Result<Grant, AcquireError> {
    if slot >= pool.size {
        return Err(AcquireError::Misconfigured {
            what: format!(
                "{source} gives slot {slot}, outside pool {} of size {}",
                pool.name, pool.size
            ),
            fix: format!(
                "raise the pool size above {slot} or give this node a slot below {}",
                pool.size
            ),
        });
    }
    // No store keeps a floor for a fixed slot: a successor on the same slot
    // relies on its own clock (see DESIGN.md, timing rule 8).
    Ok(Grant::new(
        slot,
        Token::random(),
        wall_clock_fence(),
        pool.ttl,
    ))
}

/// A fixed slot, for example a node's index in a known host list.
///
/// Nothing checks that two nodes were given different slots: that is the
/// deployment's promise. The lease never expires and is never re-acquired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticSlot {
    slot: u32,
}

impl StaticSlot {
    /// The slot `slot`.
    pub fn new(slot: u32) -> Self {
        Self { slot }
    }

    /// The position of `host` in `hosts`.
    ///
    /// ```
    /// use leasehold_core::StaticSlot;
    /// let s = StaticSlot::from_host_list("b", &["a", "b", "c"]).unwrap();
    /// assert_eq!(s.slot(), 1);
    /// assert!(StaticSlot::from_host_list("z", &["a"]).is_err());
    /// ```
    pub fn from_host_list(host: &str, hosts: &[&str]) -> Result<Self, ConfigError> {
        hosts
            .iter()
            .position(|h| *h == host)
            .and_then(|i| u32::try_from(i).ok())
            .map(Self::new)
            .ok_or_else(|| {
                ConfigError::new(
                    "host",
                    format!("{host:?}"),
                    format!("one of the configured hosts {hosts:?}"),
                )
            })
    }

    /// The slot.
    pub fn slot(&self) -> u32 {
        self.slot
    }
}

impl Strategy for StaticSlot {
    async fn acquire(&self, pool: &PoolSpec, _ceiling: Floor) -> Result<Grant, AcquireError> {
        fixed_acquire(self.slot, pool, "the static slot")
    }
    async fn renew(&self, pool: &PoolSpec, _grant: &Grant, _ceiling: Floor) -> Renewal {
        Renewal::renewed(pool.ttl)
    }
    async fn release(&self, _pool: &PoolSpec, _grant: &Grant, _issued: Floor) -> Release {
        Release::Released
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::fixed()
    }
    fn identity(&self) -> String {
        format!("static:{}", self.slot)
    }
}

/// The trailing number of an environment variable, such as a StatefulSet pod
/// name (`ids-3` → slot 3).
///
/// ```
/// use leasehold_core::PodOrdinal;
/// assert_eq!(PodOrdinal::parse("POD_NAME", "ids-3", 16).unwrap().slot(), 3);
/// let err = PodOrdinal::parse("POD_NAME", "ids", 16).unwrap_err();
/// assert!(err.to_string().contains("POD_NAME"));
/// assert!(PodOrdinal::parse("POD_NAME", "ids-16", 16).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodOrdinal {
    var: String,
    slot: u32,
}

impl PodOrdinal {
    /// Reads `var` (for example `POD_NAME`, set from `metadata.name` through the
    /// downward API) and takes its trailing number, which must be below `max`.
    pub fn from_env(var: &str, max: u32) -> Result<Self, ConfigError> {
        let value = std::env::var(var).map_err(|_| {
            ConfigError::new(
                "pod_ordinal",
                format!("environment variable {var} is unset or not UTF-8"),
                format!(
                    "a pod name ending in -N, set {var} from metadata.name with the downward API"
                ),
            )
        })?;
        Self::parse(var, &value, max)
    }

    /// Parses `value` as if read from `var`.
    pub fn parse(var: &str, value: &str, max: u32) -> Result<Self, ConfigError> {
        let digits = value.rsplit_once('-').map_or(value, |(_, tail)| tail);
        let slot: u32 = digits.parse().map_err(|_| {
            ConfigError::new(
                "pod_ordinal",
                format!("{var}={value:?} does not end in -N"),
                "a StatefulSet pod name such as ids-3",
            )
        })?;
        if slot >= max {
            return Err(ConfigError::new(
                "pod_ordinal",
                format!("{var}={value:?} gives ordinal {slot}"),
                format!(
                    "an ordinal below the pool size {max}; raise the pool size or lower the replicas"
                ),
            ));
        }
        Ok(Self {
            var: var.to_owned(),
            slot,
        })
    }

    /// The slot.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The label Kubernetes 1.28+ puts on every StatefulSet pod: its ordinal.
    pub const POD_INDEX_LABEL: &'static str = "apps.kubernetes.io/pod-index";

    /// A StatefulSet pod's slot: its ordinal minus `.spec.ordinals.start`.
    ///
    /// The ordinal comes from `POD_INDEX` (the [`Self::POD_INDEX_LABEL`]
    /// label through the downward API, Kubernetes 1.28+) when it is set, else
    /// from the trailing number of `POD_NAME`. `ORDINALS_START` gives
    /// `.spec.ordinals.start` (default 0): a StatefulSet whose ordinals start
    /// at 5 has pods `-5`, `-6`, ... on slots 0, 1, ...
    pub fn from_statefulset_env(max: u32) -> Result<Self, ConfigError> {
        let get = |var: &str| std::env::var(var).ok().filter(|v| !v.trim().is_empty());
        let start = match get("ORDINALS_START") {
            None => 0,
            Some(v) => v.trim().parse().map_err(|_| {
                ConfigError::new(
                    "pod_ordinal",
                    format!("ORDINALS_START={v:?} is not a number"),
                    "the StatefulSet's .spec.ordinals.start, such as 0",
                )
            })?,
        };
        match (get("POD_INDEX"), get("POD_NAME")) {
            (Some(index), _) => Self::parse_ordinal("POD_INDEX", &index, start, max),
            (None, Some(name)) => Self::parse_ordinal("POD_NAME", &name, start, max),
            (None, None) => Err(ConfigError::new(
                "pod_ordinal",
                "neither POD_INDEX nor POD_NAME is set",
                format!(
                    "POD_INDEX from the {} label, or POD_NAME from metadata.name, through the \
                     downward API",
                    Self::POD_INDEX_LABEL
                ),
            )),
        }
    }

    /// Parses `value` (a pod index such as `3`, or a pod name such as
    /// `ids-3`) as if read from `var`, and subtracts `start`
    /// (`.spec.ordinals.start`).
    ///
    /// ```
    /// use leasehold_core::PodOrdinal;
    /// assert_eq!(PodOrdinal::parse_ordinal("POD_INDEX", "7", 5, 16).unwrap().slot(), 2);
    /// assert_eq!(PodOrdinal::parse_ordinal("POD_NAME", "ids-5", 5, 16).unwrap().slot(), 0);
    /// let below = PodOrdinal::parse_ordinal("POD_INDEX", "4", 5, 16).unwrap_err();
    /// assert!(below.to_string().contains("ordinals.start"));
    /// ```
    pub fn parse_ordinal(
        var: &str,
        value: &str,
        start: u32,
        max: u32,
    ) -> Result<Self, ConfigError> {
        let ordinal = Self::parse(var, value, u32::MAX)?.slot;
        let slot = ordinal.checked_sub(start).ok_or_else(|| {
            ConfigError::new(
                "pod_ordinal",
                format!("{var}={value:?} gives ordinal {ordinal}, below ORDINALS_START={start}"),
                "ORDINALS_START equal to the StatefulSet's .spec.ordinals.start",
            )
        })?;
        if slot >= max {
            return Err(ConfigError::new(
                "pod_ordinal",
                format!("{var}={value:?} gives slot {slot} (ordinal {ordinal} - start {start})"),
                format!(
                    "a slot below the pool size {max}; raise the pool size or lower the replicas"
                ),
            ));
        }
        Ok(Self {
            var: var.to_owned(),
            slot,
        })
    }
}

impl Strategy for PodOrdinal {
    async fn acquire(&self, pool: &PoolSpec, _ceiling: Floor) -> Result<Grant, AcquireError> {
        fixed_acquire(
            self.slot,
            pool,
            &format!("the pod ordinal from {}", self.var),
        )
    }
    async fn renew(&self, pool: &PoolSpec, _grant: &Grant, _ceiling: Floor) -> Renewal {
        Renewal::renewed(pool.ttl)
    }
    async fn release(&self, _pool: &PoolSpec, _grant: &Grant, _issued: Floor) -> Release {
        Release::Released
    }
    fn capabilities(&self) -> Capabilities {
        StaticSlot::new(self.slot).capabilities()
    }
    fn identity(&self) -> String {
        format!("pod-ordinal:{}:{}", self.var, self.slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_grow() {
        let a = wall_clock_fence();
        let b = wall_clock_fence();
        assert!(b > a);
    }

    #[test]
    fn pod_ordinal_rejects_garbage() {
        assert!(PodOrdinal::parse("P", "ids-x", 4).is_err());
        assert!(PodOrdinal::parse("P", "", 4).is_err());
        assert_eq!(PodOrdinal::parse("P", "7", 8).unwrap().slot(), 7);
        assert_eq!(PodOrdinal::parse("P", "web-a-2", 8).unwrap().slot(), 2);
    }
}
