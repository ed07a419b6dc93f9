//! An ID service with axum: a machine ID leased from the store at a URL
//! (default a SQLite file), sortable 64-bit IDs made in request handlers
//! without blocking the runtime's threads, and the health probes a load
//! balancer or Kubernetes asks:
//!
//! - `GET /id`: 200 with a new ID, or 503 with `Retry-After` while no
//!   lease is held;
//! - `GET /readyz`: 200 while IDs can be made now, else 503 with
//!   `Retry-After` and why (no lease since when, the store's restart guard
//!   until when, the clock behind the previous holder's last timestamp);
//! - `GET /livez`: 200 while the lease manager can still get a lease by
//!   itself, else 503 (restart the process).
//!
//! ```sh
//! cargo run -p leasehold --example id_service -- sqlite://ids.sqlite 127.0.0.1:8080
//! curl -i http://127.0.0.1:8080/id
//! ```

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Router, serve};
use leasehold::nonce::{Layout, Sortable64};
use leasehold::{Health, LeaseConfig, LeaseEvent, LeaseManager};
use tokio::sync::broadcast::error::RecvError;

// ANCHOR: handlers
/// What the handlers share: the lease and the IDs made under it.
pub struct Service {
    lease: LeaseManager,
    ids: Sortable64,
}

/// `GET /id`: a new ID. `next_async` waits (on the runtime's timer, not
/// the thread) for the next millisecond or a new lease's floor; without a
/// lease it refuses at once, and the answer is 503 with the health's
/// `Retry-After`.
async fn id(State(service): State<Arc<Service>>) -> Response {
    match service.ids.next_async().await {
        Ok(id) => (StatusCode::OK, id.to_string()).into_response(),
        Err(refused) => {
            let health = service.lease.health();
            unavailable(&health, format!("{refused}; {}", health.reason))
        }
    }
}

/// `GET /readyz`: 200 while an ID can be made now, 503 with `Retry-After`
/// and the reason otherwise.
async fn readyz(State(service): State<Arc<Service>>) -> Response {
    let health = service.lease.health();
    if health.ready {
        (StatusCode::OK, health.reason).into_response()
    } else {
        let reason = health.reason.clone();
        unavailable(&health, reason)
    }
}

/// `GET /livez`: 200 while the lease manager can get a lease by itself.
async fn livez(State(service): State<Arc<Service>>) -> Response {
    let health = service.lease.health();
    let status = StatusCode::from_u16(health.live_status()).unwrap_or(StatusCode::OK);
    (status, health.reason).into_response()
}

/// 503 with the health's `Retry-After` (in whole seconds) and `why`.
fn unavailable(health: &Health, why: String) -> Response {
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, why).into_response();
    if let Some(secs) = health.retry_after_secs() {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// The routes.
pub fn router(service: Arc<Service>) -> Router {
    Router::new()
        .route("/id", get(id))
        .route("/readyz", get(readyz))
        .route("/livez", get(livez))
        .with_state(service)
}
// ANCHOR_END: handlers

/// Connects to the store at `url`, prepares the pool and holds a lease of
/// it: the service, ready to serve.
pub async fn start(url: &str) -> Result<Arc<Service>, Box<dyn std::error::Error>> {
    // A pod may start before its store: wait for it (with backoff, a log
    // line per attempt) rather than exit and crash-loop. A refusal (bad
    // credentials, a server that can lose leases) still fails at once.
    let store = leasehold::connect_waiting(url, Duration::from_secs(120)).await?;
    // The layout is declared with the lease: the store records it for the
    // pool and refuses a process whose IDs could equal these.
    let layout = Layout::default64();
    let config = LeaseConfig::builder("order-ids")
        .pool_size(512)
        .ttl(Duration::from_secs(15))
        .id_format(layout.id_format())
        .on_acquired(|lease| eprintln!("machine ID {} (fence {})", lease.slot, lease.fence))
        .on_lost(|loss| eprintln!("machine ID {} lost: {}", loss.slot, loss.cause))
        .build()?;
    store.operator().prepare(Some(config.pool())).await?;
    // Returns once a slot is held: no ID is ever made without a lease.
    let lease = LeaseManager::start(store, config).await?;
    // ANCHOR: events
    // What happens to the lease, for the log. The first subscription begins
    // with `start`; the lease manager never waits for it (a subscriber that falls
    // behind loses the oldest events and is told how many).
    let mut events = lease.events();
    tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(LeaseEvent::Waiting(w)) => eprintln!("waiting {:?}: {}", w.remaining(), w.cause),
                Ok(LeaseEvent::Lost(loss)) => eprintln!("lease lost, IDs refused: {}", loss.cause),
                Ok(event) => eprintln!("{event:?}"),
                Err(RecvError::Lagged(missed)) => eprintln!("{missed} lease events missed"),
                Err(RecvError::Closed) => break, // the lease manager is gone
            }
        }
    });
    // ANCHOR_END: events
    let ids = Sortable64::with_layout(lease.gate(), layout)?;
    Ok(Arc::new(Service { lease, ids }))
}

/// Gives the lease back (the gate closes first), once no handler holds the
/// service any more.
pub async fn stop(service: Arc<Service>) {
    if let Ok(service) = Arc::try_unwrap(service) {
        service.lease.shutdown().await;
    }
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "sqlite://leasehold-ids.sqlite".to_owned());
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let service = start(&url).await?;
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!("serving on http://{}", listener.local_addr()?);
    serve(listener, router(service.clone()))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    stop(service).await;
    Ok(())
}
