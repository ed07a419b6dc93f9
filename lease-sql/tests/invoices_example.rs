//! The fencing walk-through (`examples/invoices.rs`, compiled in here, and
//! quoted by the guide's leader page) on a SQLite file: a frozen leader's
//! writes are refused after its successor has billed, and nothing is billed
//! twice. The example asserts every step itself.

#[path = "../examples/invoices.rs"]
#[allow(dead_code, unreachable_pub)]
mod example;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_is_fenced_off_on_sqlite() {
    let dir = std::env::temp_dir().join(format!("leasehold-invoices-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("billing.sqlite").display());
    let result = example::act(&url).await.map_err(|e| e.to_string());
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result.unwrap();
}
