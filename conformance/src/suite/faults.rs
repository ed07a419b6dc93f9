//! A networked store behind the fault proxy: silence and dropped
//! connections answer `Retry` promptly, never `Lost`, and renewal recovers
//! once the fault heals.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_core::{Floor, Renewal};

use super::Outcome;
use super::context::Ctx;
use crate::glue::Glue;
use crate::proxy::{Fault, FaultProxy};

const OP_TIMEOUT: Duration = Duration::from_secs(1);

async fn proxied(b: &Arc<dyn Glue>) -> Result<(FaultProxy, Ctx), String> {
    let addr = b
        .store_addr()
        .ok_or("networked backend without a store address")?;
    let proxy = FaultProxy::start(addr).await.map_err(|e| e.to_string())?;
    let mut ctx = Ctx::new(b.clone(), 2, Some(Duration::from_secs(30))).await?;
    ctx.store = b.connect_via(proxy.addr(), OP_TIMEOUT).await?;
    Ok((proxy, ctx))
}

/// Renewal through a silent connection answers `Retry` within the operation
/// timeout (plus slack), never hangs and never answers `Lost`.
pub async fn silent_store_gives_retry_within_timeout(b: Arc<dyn Glue>) -> Outcome {
    renewals_under_fault_give_prompt_retry(b, Fault::Blackhole).await
}

/// Renewal while connections are being reset answers `Retry`, never `Lost`.
pub async fn dropped_connections_give_retry(b: Arc<dyn Glue>) -> Outcome {
    renewals_under_fault_give_prompt_retry(b, Fault::Drop).await
}

/// Under `fault`, two renewals in a row answer `Retry` within three
/// operation timeouts each.
///
/// "Within" is judged on the runtime's own timer, not by wall-clock readings:
/// `tokio::time::timeout` polls the call before its own timer, so when a
/// loaded machine starves the runtime past both the call's operation timeout
/// and the test's bound, the call's timeout is seen first and answers in time.
/// Only a call that is still pending once three operation timeouts have passed
/// on that timer (a hang, or a timeout not applied) fails.
async fn renewals_under_fault_give_prompt_retry(b: Arc<dyn Glue>, fault: Fault) -> Outcome {
    let (proxy, ctx) = proxied(&b).await?;
    let grant = ctx.acquire().await?;
    proxy.set(fault);
    for _ in 0..2 {
        let r = tokio::time::timeout(
            OP_TIMEOUT * 3,
            ctx.store.renew_dyn(&ctx.pool, &grant, Floor::NONE),
        )
        .await
        .map_err(|_| {
            format!(
                "renewal under {fault:?} still pending after {:?} (operation timeout {OP_TIMEOUT:?})",
                OP_TIMEOUT * 3
            )
        })?;
        ensure!(
            matches!(r, Renewal::Retry(_)),
            "renewal under {fault:?} answered {r:?}"
        );
    }
    Ok(())
}

/// Acquisition through a silent or dropped connection fails with a retryable
/// error within three operation timeouts (judged on the runtime's timer, as
/// in [`silent_store_gives_retry_within_timeout`]).
pub async fn unreachable_store_acquire_is_retryable(b: Arc<dyn Glue>) -> Outcome {
    let (proxy, ctx) = proxied(&b).await?;
    for fault in [Fault::Blackhole, Fault::Drop] {
        proxy.set(fault);
        let r = tokio::time::timeout(
            OP_TIMEOUT * 3,
            ctx.store.acquire_dyn(&ctx.pool, Floor::NONE),
        )
        .await
        .map_err(|_| {
            format!(
                "acquire under {fault:?} still pending after {:?} (operation timeout {OP_TIMEOUT:?})",
                OP_TIMEOUT * 3
            )
        })?;
        match r {
            Err(e) if e.is_retryable() => {}
            other => return Err(format!("acquire under {fault:?} answered {other:?}")),
        }
    }
    Ok(())
}

/// After a partition heals, renewal of a still-valid lease answers `Renewed`.
pub async fn renewal_recovers_after_the_fault_heals(b: Arc<dyn Glue>) -> Outcome {
    let (proxy, ctx) = proxied(&b).await?;
    let grant = ctx.acquire().await?;
    proxy.set(Fault::Blackhole);
    let r = ctx.store.renew_dyn(&ctx.pool, &grant, Floor::NONE).await;
    ensure!(
        matches!(r, Renewal::Retry(_)),
        "silent store answered {r:?}"
    );
    proxy.set(Fault::Drop);
    proxy.set(Fault::Pass);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match ctx.store.renew_dyn(&ctx.pool, &grant, Floor::NONE).await {
            Renewal::Renewed { .. } => return Ok(()),
            Renewal::Retry(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            other => return Err(format!("after healing, renewal answered {other:?}")),
        }
    }
}
