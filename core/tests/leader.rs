//! Leader election on the in-process store: six replicas, one leader; the
//! leader dies, another takes over with a bigger fence; the old leader's late
//! write is refused by storage that checks fences.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_core::{Elector, Fence, Leader, LeaderConfig, LeaderInfo, Memory};

/// Storage that checks fences: a write carrying a smaller fence than one it
/// has seen is refused (DESIGN.md, rule 7).
#[derive(Default)]
struct Invoices {
    seen: Fence,
    rows: Vec<(String, Fence)>,
}

impl Invoices {
    fn write(&mut self, row: String, fence: Fence) -> Result<(), Fence> {
        if fence < self.seen {
            return Err(self.seen);
        }
        self.seen = fence;
        self.rows.push((row, fence));
        Ok(())
    }
}

fn config(replica: usize) -> LeaderConfig {
    LeaderConfig::builder("scheduler")
        .holder(format!("replica-{replica}"))
        .ttl(Duration::from_millis(600))
        .renew_interval(Duration::from_millis(100))
        .safety_margin(Duration::from_millis(150))
        .backoff_initial(Duration::from_millis(20))
        .backoff_max(Duration::from_millis(100))
        .acquire_timeout(Duration::from_millis(300))
        .build()
        .unwrap()
}

async fn wait_until(what: &str, f: impl Fn() -> bool) {
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(
            std::time::Instant::now() < give_up,
            "{what}: not within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_replicas_one_leader_then_a_fenced_takeover() {
    let store = Memory::new();
    let invoices = Arc::new(Mutex::new(Invoices::default()));
    let started = Arc::new(AtomicU32::new(0));
    let stopped = Arc::new(AtomicU32::new(0));
    let seen_leaders: Arc<Mutex<Vec<LeaderInfo>>> = Arc::default();
    let mut electors: Vec<Option<Elector>> = (0..6)
        .map(|i| {
            let (invoices, started, stopped, seen) = (
                invoices.clone(),
                started.clone(),
                stopped.clone(),
                seen_leaders.clone(),
            );
            let elector = Leader::builder(store.clone(), config(i))
                .on_started_leading(move |_| {
                    started.fetch_add(1, Ordering::SeqCst);
                })
                .on_stopped_leading(move || {
                    stopped.fetch_add(1, Ordering::SeqCst);
                })
                .on_new_leader(move |info| seen.lock().unwrap().push(info.clone()))
                .campaign(move |leadership| {
                    let invoices = invoices.clone();
                    async move {
                        // The scheduler: bill once per "hour" while leading.
                        let mut hour = 0;
                        while leadership.is_leading() {
                            let row = format!("hour {hour} by replica-{i}");
                            let _ = invoices.lock().unwrap().write(row, leadership.fence());
                            hour += 1;
                            tokio::select! {
                                () = tokio::time::sleep(Duration::from_millis(20)) => {}
                                () = leadership.lost() => break,
                            }
                        }
                    }
                });
            Some(elector)
        })
        .collect();

    let leading = |electors: &Vec<Option<Elector>>| {
        electors
            .iter()
            .enumerate()
            .filter(|(_, e)| e.as_ref().is_some_and(Elector::is_leading))
            .map(|(i, _)| i)
            .collect::<Vec<_>>()
    };
    wait_until("a leader", || leading(&electors).len() == 1).await;
    let first = leading(&electors)[0];
    let first_fence = invoices.lock().unwrap().seen;
    // Every follower observes the same leader.
    wait_until("followers see the leader", || {
        electors.iter().flatten().all(|e| {
            e.leader()
                .is_some_and(|l| l.holder == format!("replica-{first}"))
        })
    })
    .await;
    assert!(leading(&electors).len() <= 1, "two leaders at once");

    // Kill the leader: dropped without shutdown, its lease expires.
    drop(electors[first].take());
    wait_until("a new leader", || {
        let l = leading(&electors);
        l.len() == 1 && l[0] != first
    })
    .await;
    let second = leading(&electors)[0];
    wait_until("the new leader writes", || {
        invoices.lock().unwrap().seen > first_fence
    })
    .await;
    // The old leader's late write, with its old fence, is refused.
    let late = invoices
        .lock()
        .unwrap()
        .write("late write by the old leader".into(), first_fence);
    assert!(late.is_err(), "a stale leader's write was accepted");
    assert!(started.load(Ordering::SeqCst) >= 2);
    assert!(
        seen_leaders
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.holder == format!("replica-{second}"))
    );

    for e in electors.into_iter().flatten() {
        e.shutdown().await;
    }
    assert!(
        stopped.load(Ordering::SeqCst) >= 1,
        "the new leader stopped leading"
    );
    // Every row was written by one leader at a time, fences never going back.
    let rows = invoices.lock().unwrap().rows.clone();
    assert!(rows.windows(2).all(|w| w[0].1 <= w[1].1));
}

/// A leader configuration whose lease outlives every wait below (30 s): a
/// follower that leads within the waits got a released lease, not an
/// expired one. Followers retry every 50 ms at most.
fn long_lease(replica: &str) -> LeaderConfig {
    LeaderConfig::builder("long-lease")
        .holder(replica)
        .ttl(Duration::from_secs(30))
        .backoff_initial(Duration::from_millis(10))
        .backoff_max(Duration::from_millis(50))
        .acquire_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
}

/// When the leader's future returns, its term ends and the lease is
/// released: a follower leads long before the lease could have expired, and
/// the elector whose future returned no longer says it leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_lead_returns_the_lease_is_released_and_a_follower_leads() {
    let store = Memory::new();
    let (done_tx, done_rx) = tokio::sync::watch::channel(false);
    let first = Leader::campaign(store.clone(), long_lease("first"), move |_leadership| {
        let mut done = done_rx.clone();
        async move {
            // The job's work ends early (say, it failed and returned).
            let _ = done.wait_for(|d| *d).await;
        }
    });
    wait_until("the first elector leads", || first.is_leading()).await;
    let second = Leader::campaign(
        store.clone(),
        long_lease("second"),
        |leadership| async move {
            leadership.lost().await;
        },
    );
    let asked = std::time::Instant::now();
    done_tx.send_replace(true);
    wait_until("the follower leads", || second.is_leading()).await;
    assert!(
        asked.elapsed() < Duration::from_secs(25),
        "the follower led only after {:?}: the lease expired instead of being released",
        asked.elapsed()
    );
    assert!(
        !first.is_leading(),
        "the elector whose future returned still says it leads"
    );
    second.shutdown().await;
    first.shutdown().await;
}

/// `LeaderInfo::held_for` is how long the leader has held the lease, at the
/// moment it is read: never less than the time since this process saw
/// itself leading, never more than the time since it began campaigning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_for_is_how_long_the_leader_has_held_the_lease() {
    let store = Memory::new();
    let campaigned = std::time::Instant::now();
    let elector = Leader::builder(store.clone(), long_lease("leader"))
        .observe_every(Duration::from_millis(20))
        .campaign(|leadership| async move { leadership.lost().await });
    wait_until("it leads", || elector.is_leading()).await;
    let leading = std::time::Instant::now();
    wait_until("half a second of leading", || {
        leading.elapsed() >= Duration::from_millis(500)
    })
    .await;
    let at_least = leading.elapsed();
    let info = elector
        .leader()
        .expect("the elector observes itself leading");
    let held = info
        .held_for()
        .expect("this process knows how long it has led");
    let at_most = campaigned.elapsed();
    assert!(
        at_least <= held && held <= at_most,
        "held_for is {held:?}: it has led for at least {at_least:?} and at most {at_most:?}"
    );
    elector.shutdown().await;
}

/// A fixed slot is no election: every replica configured with slot 0 would
/// hold it at once. An elector on a strategy that does not coordinate
/// refuses to campaign, with a final error that says what to use instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elector_on_a_fixed_slot_refuses_to_campaign() {
    use leasehold_core::StaticSlot;
    let electors: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|who| {
            Leader::campaign(StaticSlot::new(0), long_lease(who), |l| async move {
                l.lost().await;
            })
        })
        .collect();
    for e in &electors {
        let r = tokio::time::timeout(Duration::from_secs(20), e.wait_leading())
            .await
            .expect("wait_leading answers");
        let err = r.expect_err("an elector on a fixed slot led");
        assert!(err.to_string().contains("coordinate"), "{err}");
    }
    for e in electors {
        e.shutdown().await;
    }
}
