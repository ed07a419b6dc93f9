//! Timing rules broken on purpose, for the fault campaign and the simulator
//! only: they show that each rule of DESIGN.md is what they would catch if
//! the rule were broken.
//!
//! Built only with the `planted-bugs` feature, which nothing but the
//! campaign's and the simulator's own `planted-bugs` features enable. Without it [`active`] is a
//! constant `false` that the compiler removes with the code it guards, so
//! the generation path and the driver are what they always are; [`plant`]
//! then refuses.

/// A timing rule broken on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Plant {
    /// Rule 2: the local deadline counts from the answer's arrival instead
    /// of from when the request was sent.
    DeadlineFromArrival,
    /// Rule 2: the local deadline is `sent_at + ttl`, with no safety margin.
    NoMargin,
    /// Rule 4: at the local deadline the driver neither stops generation nor
    /// gives the lease up; it goes on renewing.
    NoStopAtDeadline,
    /// Rule 5: the gate does not close by itself at the deadline; only the
    /// driver closes it.
    GateIgnoresDeadline,
    /// Rule 7: the fenced write path ignores the fence number (any fence of
    /// the resource's pool and slot is accepted).
    FenceUnchecked,
    /// Rule 8: a new grant's floor is ignored (generation starts after the
    /// holder's own clock and history only).
    NoFloor,
    /// Rule 12: a store that can forget grants at once after a restart (no
    /// restart guard).
    NoRestartGuard,
    /// Rule 11: a forward jump of the store's clock between two confirmed
    /// operations goes unnoticed (the lease is kept, its deadline counted
    /// as if the store's expiry had not moved).
    NoStoreClockCheck,
    /// Rule 10: the Unix offset follows the wall clock back when it steps
    /// or slews back, so timestamps and ceilings go down with it.
    OffsetFollowsStepsBack,
    /// Rule 6: a gate that has never been opened lets generation through,
    /// as if startup did not wait for the first grant: IDs on no proven
    /// lease (the gate's empty view: slot 0, fence 0, floor 0).
    GenerateBeforeGrant,
    /// Rule 3: renewals are sent 1 ms before the local deadline instead of
    /// well before it (at most every `ttl/2`).
    RenewAtTheDeadline,
    /// Rule 9: a second generator on a gate whose generator is in use is
    /// given a generation state of its own instead of being refused: two
    /// states stamp one lease's IDs, each blind to the other's.
    SecondGenerationState,
}

impl Plant {
    /// Every plant.
    pub const ALL: [Plant; 12] = [
        Plant::DeadlineFromArrival,
        Plant::NoMargin,
        Plant::NoStopAtDeadline,
        Plant::GateIgnoresDeadline,
        Plant::FenceUnchecked,
        Plant::NoFloor,
        Plant::NoRestartGuard,
        Plant::NoStoreClockCheck,
        Plant::OffsetFollowsStepsBack,
        Plant::GenerateBeforeGrant,
        Plant::RenewAtTheDeadline,
        Plant::SecondGenerationState,
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Plant::DeadlineFromArrival => "deadline-from-arrival",
            Plant::NoMargin => "no-margin",
            Plant::NoStopAtDeadline => "no-stop-at-deadline",
            Plant::GateIgnoresDeadline => "gate-ignores-deadline",
            Plant::FenceUnchecked => "fence-unchecked",
            Plant::NoFloor => "no-floor",
            Plant::NoRestartGuard => "no-restart-guard",
            Plant::NoStoreClockCheck => "no-store-clock-check",
            Plant::OffsetFollowsStepsBack => "offset-follows-steps-back",
            Plant::GenerateBeforeGrant => "generate-before-grant",
            Plant::RenewAtTheDeadline => "renew-at-the-deadline",
            Plant::SecondGenerationState => "second-generation-state",
        }
    }

    /// The timing rule of DESIGN.md it breaks.
    pub fn rule(self) -> u8 {
        match self {
            Plant::DeadlineFromArrival | Plant::NoMargin => 2,
            Plant::NoStopAtDeadline => 4,
            Plant::GateIgnoresDeadline => 5,
            Plant::FenceUnchecked => 7,
            Plant::NoFloor => 8,
            Plant::SecondGenerationState => 9,
            Plant::NoStoreClockCheck => 11,
            Plant::RenewAtTheDeadline => 3,
            Plant::GenerateBeforeGrant => 6,
            Plant::OffsetFollowsStepsBack => 10,
            Plant::NoRestartGuard => 12,
        }
    }

    /// The plant called `name`.
    pub fn from_name(name: &str) -> Option<Plant> {
        Plant::ALL.into_iter().find(|p| p.name() == name)
    }

    #[cfg_attr(not(feature = "planted-bugs"), allow(dead_code))]
    const fn bit(self) -> u32 {
        1 << self as u32
    }
}

/// Whether this build can plant bugs (the `planted-bugs` feature).
pub const BUILT: bool = cfg!(feature = "planted-bugs");

#[cfg(feature = "planted-bugs")]
static PLANTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Whether `plant` is planted in this process. Without the `planted-bugs`
/// feature a constant `false`.
#[inline(always)]
pub fn active(plant: Plant) -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        PLANTED.load(std::sync::atomic::Ordering::Relaxed) & plant.bit() != 0
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        let _ = plant;
        false
    }
}

/// Plants `plant` for the rest of this process. Refused by a build without
/// the `planted-bugs` feature.
pub fn plant(plant: Plant) -> Result<(), NotBuilt> {
    #[cfg(feature = "planted-bugs")]
    {
        PLANTED.fetch_or(plant.bit(), std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        let _ = plant;
        Err(NotBuilt)
    }
}

/// This build cannot plant bugs: it was built without the `planted-bugs`
/// feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotBuilt;

impl std::fmt::Display for NotBuilt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "this build cannot plant bugs: build it with the `planted-bugs` feature \
             (`cargo build -p leasehold-campaign --features planted-bugs`, which \
             `cargo xtask campaign --plant NAME` does)",
        )
    }
}

impl std::error::Error for NotBuilt {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_planted_unless_asked() {
        for p in Plant::ALL {
            assert!(!active(p), "{p:?}");
            assert_eq!(Plant::from_name(p.name()), Some(p));
        }
    }

    #[cfg(not(feature = "planted-bugs"))]
    #[test]
    fn a_build_without_the_feature_refuses_to_plant() {
        assert_eq!(plant(Plant::NoMargin), Err(NotBuilt));
        assert!(!active(Plant::NoMargin));
        assert!(NotBuilt.to_string().contains("--features planted-bugs"));
    }
}
