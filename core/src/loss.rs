//! Why a lease was lost, as reported to the loss callback and the state watch.

use crate::error::Reason;
use crate::strategy::Fence;

/// Why a lease was lost.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossCause {
    /// The store positively rejected the renewal (or a store watch saw the
    /// lease go).
    Rejected(Reason),
    /// The local deadline passed without a confirmed renewal.
    DeadlinePassed {
        /// The last uncertain renewal's reason, if any.
        last_retry: Option<Reason>,
    },
    /// The store's clock ran ahead of the local clock between two confirmed
    /// operations by more than the margin allows (DESIGN.md, rule 11): the
    /// store may expire the lease before the local deadline.
    StoreClockJumped {
        /// How far ahead, beyond clock-rate and resolution allowances.
        by: std::time::Duration,
    },
}

/// Passed to the loss callback. Generation has already stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LossEvent {
    /// The slot that was lost.
    pub slot: u32,
    /// Its fence.
    pub fence: Fence,
    /// Why.
    pub cause: LossCause,
    /// True when a new lease will be acquired (dynamic strategies).
    pub reacquiring: bool,
}
