//! A pool file deleted while its holder generates (an operator's mistake):
//! the wipe guard holds claims back for the pool's restart span, and
//! without it the held slot goes to a second holder at once.

use std::time::Duration;

use leasehold::{AcquireError, Floor, Operate, PoolName, PoolSpec, Renewal, Strategy};
use leasehold_lockdir::LockDir;

fn pool() -> PoolSpec {
    PoolSpec::new(PoolName::new("wiped").unwrap(), 1, Duration::from_secs(30)).unwrap()
}

/// A holder of the pool's one slot, then the pool's file deleted: what a
/// rival's claim answers, and the holder's next renewal.
async fn claim_after_a_wipe(name: &str, guard: bool) -> (Result<u32, AcquireError>, Renewal) {
    let dir = std::env::temp_dir().join(format!("lockdir-wipe-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = LockDir::open(&dir, Duration::from_secs(5))
        .unwrap()
        .with_wipe_guard(guard);
    let pool = pool();
    store.prepare_new_pool(&pool).await.unwrap();
    let held = store.acquire(&pool, Floor(1)).await.unwrap();
    std::fs::remove_file(dir.join("wiped.pool")).unwrap();
    let rival = store.acquire(&pool, Floor(1)).await.map(|g| g.slot);
    let renewal = store.renew(&pool, &held, Floor(2)).await;
    let _ = std::fs::remove_dir_all(&dir);
    (rival, renewal)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_pool_file_grants_nothing_for_the_pools_restart_span() {
    let (rival, renewal) = claim_after_a_wipe("guarded", true).await;
    match rival {
        Err(AcquireError::StoreRestarted { resume_in }) => {
            assert!(resume_in <= pool().restart_span(), "{resume_in:?}");
            assert!(resume_in > pool().ttl(), "{resume_in:?}");
        }
        other => panic!("the held slot was granted again after the wipe: {other:?}"),
    }
    assert!(matches!(renewal, Renewal::Lost(_)), "{renewal:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_wipe_guard_a_deleted_pool_file_hands_the_held_slot_out_at_once() {
    // The control: what the guard prevents. The holder still believes it
    // holds slot 0 until its next renewal, and the rival is granted it.
    let (rival, renewal) = claim_after_a_wipe("unguarded", false).await;
    assert_eq!(rival, Ok(0));
    assert!(matches!(renewal, Renewal::Lost(_)), "{renewal:?}");
}
