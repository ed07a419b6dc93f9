//! Why a lease was lost, as reported to the loss callback and the state watch.

use std::fmt;

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

impl fmt::Display for LossCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Rejected(reason) => write!(f, "the store rejected the renewal: {reason}"),
            Self::DeadlinePassed { last_retry: None } => {
                f.write_str("the local deadline passed without a confirmed renewal")
            }
            Self::DeadlinePassed {
                last_retry: Some(reason),
            } => write!(
                f,
                "the local deadline passed without a confirmed renewal (last attempt: {reason})"
            ),
            Self::StoreClockJumped { by } => write!(
                f,
                "the store's clock ran {by:?} ahead of this host's between two renewals, so the \
                 store could expire the lease before the local deadline"
            ),
        }
    }
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
