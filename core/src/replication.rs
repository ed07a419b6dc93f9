//! How a store replicates, as read at connect, and whether a failover can
//! leave two primaries taking writes (a split brain): the old primary, cut
//! off from the others, goes on confirming claims and renewals to the
//! clients a partition left with it while a promoted replica grants the
//! same slots to everyone else.

use std::fmt;

/// A store's replication as read at connect ([`Operate::replication`](crate::Operate::replication)).
///
/// ```
/// use leasehold_core::{Replication, SplitBrainRisk};
///
/// let single = Replication::default();
/// assert!(single.split_brain.is_none());
/// let pair = Replication::new("primary with 1 streaming standby").with_risk(SplitBrainRisk {
///     setting: "synchronous_standby_names".into(),
///     value: "''".into(),
///     fix: "set synchronous_standby_names".into(),
/// });
/// assert!(pair.to_string().contains("can split brain"), "{pair}");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Replication {
    /// What was found, for a person (`primary, 1 streaming standby`).
    pub found: String,
    /// Set when the store, as configured, can split brain.
    pub split_brain: Option<SplitBrainRisk>,
    /// What `connect` would have refused for replication (a replica, or a
    /// setup that can split brain under `refuse_split_brain`), kept by a
    /// strategy that was told not to refuse at connect: its text.
    pub refusal: Option<String>,
}

/// The setting that lets an old primary keep confirming writes after a
/// failover, and the one that closes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitBrainRisk {
    /// The setting, as the store names it (`synchronous_standby_names`,
    /// `min-replicas-to-write`).
    pub setting: String,
    /// Its value on this server.
    pub value: String,
    /// How to close it.
    pub fix: String,
}

impl Default for Replication {
    /// A store that cannot split brain: every write is decided in one place
    /// (one file, or a quorum), so no cut-off server goes on confirming.
    fn default() -> Self {
        Self::new("cannot split brain: every write is decided in one place (a quorum, or one file)")
    }
}

impl Replication {
    /// `found`, with no risk and no refusal.
    pub fn new(found: impl Into<String>) -> Self {
        Self {
            found: found.into(),
            split_brain: None,
            refusal: None,
        }
    }

    /// The same, able to split brain through `risk`.
    pub fn with_risk(mut self, risk: SplitBrainRisk) -> Self {
        self.split_brain = Some(risk);
        self
    }

    /// The same, with what `connect` would have refused.
    pub fn with_refusal(mut self, refusal: impl Into<String>) -> Self {
        self.refusal = Some(refusal.into());
        self
    }
}

impl fmt::Display for Replication {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.found)?;
        if let Some(r) = &self.split_brain {
            write!(f, "; {r}")?;
        }
        Ok(())
    }
}

impl fmt::Display for SplitBrainRisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "can split brain ({} = {}): after a failover the old primary goes on confirming \
             claims and renewals to the clients a partition left with it, while the promoted \
             replica grants the same slots to the others",
            self.setting, self.value
        )
    }
}
