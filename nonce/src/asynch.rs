//! Waiting for a value without blocking the runtime's thread (`next_async`).

use std::time::Duration;

use crate::error::{GenerateError, TryNextError};

/// A wait shorter than this yields to the runtime's other tasks instead of
/// sleeping: tokio's timer counts whole milliseconds and would turn the wait
/// for the next millisecond into one to two.
const SLEEP_FROM: Duration = Duration::from_millis(1);

/// Calls `try_next` until it hands out a value or refuses; where it would
/// wait, sleeps (or yields) for the time it says, then calls it again, so
/// every value comes from a call that checked the gate at a fresh reading.
pub(crate) async fn until_ready<T>(
    try_next: impl Fn() -> Result<T, TryNextError>,
) -> Result<T, GenerateError> {
    loop {
        match try_next() {
            Ok(value) => return Ok(value),
            Err(TryNextError::Refused(e)) => return Err(e),
            Err(TryNextError::WouldWait { retry_in, .. }) if retry_in < SLEEP_FROM => {
                tokio::task::yield_now().await;
            }
            Err(TryNextError::WouldWait { retry_in, .. }) => tokio::time::sleep(retry_in).await,
        }
    }
}
