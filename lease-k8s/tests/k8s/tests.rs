//! Kubernetes-specific tests, each on a private **fake** API server that the
//! target's backend starts for it ([`FakeBackend::private`]): fault switches
//! are per server, so tests never disturb each other.
//!
//! Which API-server behaviour each relies on, and whether that behaviour was
//! seen on a running kube-apiserver or only read in its source, is stated in
//! `lease-k8s/fake/src/store.rs` and `lease-k8s/fake/tests/semantics.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_conformance::{Target, ensure, trials};
use leasehold_core::{AcquireError, Floor, PoolName, PoolSpec, Release, Renewal, Strategy, Token};
use leasehold_k8s::{KubeConfig, KubeError, KubeStrategy, OrdinalLease};
use leasehold_k8s_fake::{FakeApiServer, Fault, RvFormat, Verb};
use serde_json::json;

use super::FakeBackend;

type Outcome = Result<(), String>;

/// Registers the Kubernetes-specific tests on `target`.
pub(crate) fn register(target: Target) -> Target {
    trials!(target;
        acquire_is_two_round_trips_renew_and_release_one,
        never_puts_and_never_deletes,
        lease_carries_labels_holder_and_floor,
        renewals_always_move_the_resource_version,
        bad_pool_name_is_a_final_error,
        ttl_below_one_second_is_a_final_error,
        foreign_lease_with_our_name_is_a_final_error,
        missing_namespace_is_a_final_error,
        missing_rbac_names_the_verb,
        non_integer_resource_version_is_a_final_error,
        unreachable_server_at_connect_is_a_connect_error,
        ambiguous_create_is_ours_when_the_get_says_so,
        lost_answer_is_adopted_by_the_next_acquisition,
        throttled_acquire_is_retryable_and_says_retry_after,
        renew_under_server_errors_is_retry_never_lost,
        renew_whose_answer_was_lost_is_harmless,
        deleted_lease_is_lost_and_recreated_with_a_bigger_fence,
        revoke_leaves_a_tombstone_until_the_lease_would_have_ended,
        a_fresh_process_waits_a_lease_duration_before_a_takeover,
        ordinal_lease_pins_the_slot_and_refuses_a_twin,
        floor_is_kept_on_the_lease_and_handed_over,
        floor_survives_a_takeover_after_expiry,
        lost_renewal_answer_with_a_floor_raise_is_learned_and_renewed,
        debug_output_shows_no_token,
        kubeconfig_credentials_never_show,
    )
}

pub(crate) struct Private {
    fake: FakeApiServer,
}

impl FakeBackend {
    /// Another fake API server of this build, for one test alone.
    pub(crate) fn private(&self) -> Result<Private, String> {
        Ok(Private {
            fake: FakeApiServer::start().map_err(|e| e.to_string())?,
        })
    }
}

impl Private {
    fn config(&self) -> KubeConfig {
        KubeConfig::url(self.fake.url())
            .namespace("default")
            .op_timeout(Duration::from_secs(1))
            .takeover_margin(Duration::from_millis(200))
    }

    async fn connect(&self) -> Result<KubeStrategy, String> {
        KubeStrategy::connect(self.config())
            .await
            .map_err(|e| e.to_string())
    }

    /// A fresh pool of `size` slots, declared new: its first claim has no
    /// wipe guard to wait out.
    pub(crate) async fn new_pool(&self, size: u32, ttl: Duration) -> Result<PoolSpec, String> {
        super::new_pool(&self.connect().await?, size, ttl).await
    }

    fn lease(&self, pool: &PoolSpec, slot: u32) -> serde_json::Value {
        self.fake
            .lease("default", &leasehold_k8s::lease_name(pool.name(), slot))
            .unwrap_or(serde_json::Value::Null)
    }

    fn requests(&self) -> [u64; 6] {
        [
            Verb::List,
            Verb::Get,
            Verb::Create,
            Verb::Patch,
            Verb::Update,
            Verb::Delete,
        ]
        .map(|v| self.fake.requests(v))
    }
}

fn delta(before: [u64; 6], after: [u64; 6]) -> u64 {
    after.iter().zip(before).map(|(a, b)| a - b).sum()
}

/// LIST + POST on a fresh pool, LIST + merge PATCH on a released slot, one
/// PATCH per renewal and per release.
async fn acquire_is_two_round_trips_renew_and_release_one(b: Arc<FakeBackend>) -> Outcome {
    let p = b.private()?;
    let s = p.connect().await?;
    let pool = p.new_pool(8, Duration::from_secs(30)).await?;
    let before = p.requests();
    let g = s
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        delta(before, p.requests()) == 2,
        "acquire (create) took {} requests",
        delta(before, p.requests())
    );
    let before = p.requests();
    let r = s.renew(&pool, &g, Floor::NONE).await;
    ensure!(matches!(r, Renewal::Renewed { .. }), "renew: {r:?}");
    ensure!(
        delta(before, p.requests()) == 1,
        "renew took {} requests",
        delta(before, p.requests())
    );
    let before = p.requests();
    ensure!(
        s.release(&pool, &g, g.floor).await == Release::Released,
        "release"
    );
    ensure!(
        delta(before, p.requests()) == 1,
        "release took {} requests",
        delta(before, p.requests())
    );
    // Fill the pool but one released slot: the next acquisition patches it.
    let one = PoolSpec::new(pool.name().clone(), 1, pool.ttl()).map_err(|e| e.to_string())?;
    let g1 = s
        .acquire(&one, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    s.release(&one, &g1, g1.floor).await;
    let before = p.requests();
    let g2 = s
        .acquire(&one, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        delta(before, p.requests()) == 2,
        "acquire (takeover) took {} requests",
        delta(before, p.requests())
    );
    ensure!(g2.fence > g1.fence, "fence {} after {}", g2.fence, g1.fence);
    Ok(())
}

/// The Role grants no `update` and no `delete`: the strategy uses neither.
async fn never_puts_and_never_deletes(b: Arc<FakeBackend>) -> Outcome {
    let p = b.private()?;
    let s = p.connect().await?;
    let pool = p.new_pool(2, Duration::from_secs(30)).await?;
    for _ in 0..3 {
        let g = s
            .acquire(&pool, Floor::NONE)
            .await
            .map_err(|e| e.to_string())?;
        s.renew(&pool, &g, Floor::NONE).await;
        s.release(&pool, &g, g.floor).await;
    }
    ensure!(p.fake.requests(Verb::Update) == 0, "a PUT was sent");
    ensure!(p.fake.requests(Verb::Delete) == 0, "a DELETE was sent");
    Ok(())
}

async fn lease_carries_labels_holder_and_floor(b: Arc<FakeBackend>) -> Outcome {
    let p = b.private()?;
    let s = p.connect().await?;
    let pool = p
        .new_pool(1, Duration::from_millis(1500))
        .await?
        .with_holder("web-0");
    let g = s
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    let lease = p.lease(&pool, g.slot);
    let meta = &lease["metadata"];
    ensure!(
        meta["labels"]["leasehold/pool"] == pool.name().as_str(),
        "labels {}",
        meta["labels"]
    );
    ensure!(
        meta["labels"]["leasehold/slot"] == "0",
        "labels {}",
        meta["labels"]
    );
    ensure!(
        meta["annotations"]["leasehold/floor"].is_string(),
        "annotations {}",
        meta["annotations"]
    );
    let holder = lease["spec"]["holderIdentity"].as_str().unwrap_or("");
    ensure!(
        holder == format!("web-0_{}", g.token.to_hex()),
        "holder {holder}"
    );
    ensure!(
        lease["spec"]["leaseDurationSeconds"] == 2,
        "1.5 s rounds up to 2: {}",
        lease["spec"]
    );
    ensure!(
        rv_of(meta) == Some(g.fence.0),
        "fence {} rv {}",
        g.fence,
        meta["resourceVersion"]
    );
    Ok(())
}

/// A write that changes nothing keeps the resourceVersion (seen), which an
/// observer would read as "not renewed": every renewal must change the Lease.
async fn renewals_always_move_the_resource_version(b: Arc<FakeBackend>) -> Outcome {
    let p = b.private()?;
    let s = p.connect().await?;
    let pool = p.new_pool(1, Duration::from_secs(30)).await?;
    let g = s
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    let mut last = g.fence.0;
    for _ in 0..5 {
        let (a, b) = tokio::join!(
            s.renew(&pool, &g, Floor::NONE),
            s.renew(&pool, &g, Floor::NONE)
        );
        ensure!(
            matches!((&a, &b), (Renewal::Renewed { .. }, Renewal::Renewed { .. })),
            "{a:?} {b:?}"
        );
        let rv: u64 = p.lease(&pool, 0)["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .ok_or("no rv")?;
        ensure!(
            rv >= last + 2,
            "two renewals moved the rv from {last} to {rv}"
        );
        last = rv;
    }
    Ok(())
}

async fn bad_pool_name_is_a_final_error(b: Arc<FakeBackend>) -> Outcome {
    let p = b.private()?;
    let s = p.connect().await?;
    let creates = p.fake.requests(Verb::Create);
    for name in ["My_Ids", "ids-", "a.-b"] {
        let pool = PoolSpec::new(
            PoolName::new(name).map_err(|e| e.to_string())?,
            4,
            Duration::from_secs(5),
        )
        .map_err(|e| e.to_string())?;
        match s.acquire(&pool, Floor::NONE).await {
            Err(e @ AcquireError::BadIdentifier { .. }) => {
                ensure!(!e.is_retryable(), "retryable: {e}");
                ensure!(e.to_string().contains("lowercase"), "unclear: {e}");
            }
            other => return Err(format!("pool {name:?}: {other:?}")),
        }
    }
    ensure!(
        p.fake.requests(Verb::Create) == creates,
        "a bad name reached the server"
    );
    Ok(())
}

async fn ttl_below_one_second_is_a_final_error(b: Arc<FakeBackend>) -> Outcome {
    let p = b.private()?;
    let s = p.connect().await?;
    let pool = p.new_pool(1, Duration::from_millis(500)).await?;
    match s.acquire(&pool, Floor::NONE).await {
        Err(e @ AcquireError::Misconfigured { .. }) => {
            ensure!(e.to_string().contains("at least 1s"), "unclear: {e}");
            Ok(())
        }
        other => Err(format!("{other:?}")),
    }
}

async fn foreign_lease_with_our_name_is_a_final_error(b: Arc<FakeBackend>) -> Outcome {
    let p = b.private()?;
    let s = p.connect().await?;
    let pool = p.new_pool(1, Duration::from_secs(5)).await?;
    let creates = p.fake.requests(Verb::Create);
    let name = leasehold_k8s::lease_name(pool.name(), 0);
    p.fake.insert_raw(
        "default",
        &name,
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "default", "resourceVersion": "7", "uid": "u"},
            "spec": {"holderIdentity": "someone-else", "leaseDurationSeconds": 15},
        }),
    );
    match s.acquire(&pool, Floor::NONE).await {
        Err(e @ AcquireError::BadIdentifier { .. }) => {
            ensure!(!e.is_retryable(), "retryable: {e}");
            let text = e.to_string();
            ensure!(
                text.contains(&name) && text.contains("not made by leasehold"),
                "unclear: {text}"
            );
        }
        other => return Err(format!("{other:?}")),
    }
    // One create met the foreign object (409); nothing was written.
    ensure!(
        p.fake.requests(Verb::Create) == creates + 1,
        "creates: {}",
        p.fake.requests(Verb::Create) - creates
    );
    Ok(())
}

async fn missing_namespace_is_a_final_error(b: Arc<FakeBackend>) -> Outcome {
    let p = b.private()?;
    match KubeStrategy::connect(p.config().namespace("nope")).await {
        Err(e @ KubeError::MissingNamespace { .. }) => {
            ensure!(
                e.to_string().contains("kubectl create namespace nope"),
                "unclear: {e}"
            );
        }
        other => return Err(format!("connect: {other:?}")),
    }
    // Without the preflight, the first acquisition says the same, finally.
    let s = KubeStrategy::connect(p.config().namespace("nope").preflight(false))
        .await
        .map_err(|e| e.to_string())?;
    match s
        .acquire(&p.new_pool(2, Duration::from_secs(5)).await?, Floor::NONE)
        .await
    {
        Err(e) if !e.is_retryable() && e.to_string().contains("does not exist") => {}
        other => return Err(format!("acquire: {other:?}")),
    }
    match KubeStrategy::connect(p.config().namespace("Bad_NS")).await {
        Err(e @ KubeError::Config(_)) => ensure!(e.to_string().contains("namespace"), "{e}"),
        other => return Err(format!("bad namespace name: {other:?}")),
    }
    Ok(())
}

async fn missing_rbac_names_the_verb(b: Arc<FakeBackend>) -> Outcome {
    for verb in [Verb::Get, Verb::List, Verb::Create, Verb::Patch] {
        let p = b.private()?;
        p.fake.faults().set(verb, Fault::Forbidden);
        match KubeStrategy::connect(p.config()).await {
            Err(e @ KubeError::Forbidden { .. }) => {
                let text = e.to_string();
                ensure!(
                    text.contains(&format!("`{}`", verb.rbac())),
                    "{verb}: {text}"
                );
                ensure!(text.contains("deploy/rbac.yaml"), "no fix: {text}");
            }
            other => return Err(format!("{verb}: {other:?}")),
        }
    }
    // Without the preflight, a 403 on the write is a final acquisition error.
    let p = b.private()?;
    let s = KubeStrategy::connect(p.config().preflight(false))
        .await
        .map_err(|e| e.to_string())?;
    let pool = super::new_pool(&s, 2, Duration::from_secs(5)).await?;
    p.fake.faults().set(Verb::Create, Fault::Forbidden);
    match s.acquire(&pool, Floor::NONE).await {
        Err(e) if !e.is_retryable() && e.to_string().contains("`create`") => Ok(()),
        other => Err(format!("acquire: {other:?}")),
    }
}

async fn non_integer_resource_version_is_a_final_error(b: Arc<FakeBackend>) -> Outcome {
    let p = b.private()?;
    p.fake.set_rv_format(RvFormat::Opaque("v".into()));
    match KubeStrategy::connect(p.config()).await {
        Err(e @ KubeError::OpaqueResourceVersion { .. }) => {
            ensure!(e.to_string().contains("not an integer"), "{e}");
        }
        other => return Err(format!("connect: {other:?}")),
    }
    let s = KubeStrategy::connect(p.config().preflight(false))
        .await
        .map_err(|e| e.to_string())?;
    let pool = super::new_pool(&s, 2, Duration::from_secs(5)).await?;
    match s.acquire(&pool, Floor::NONE).await {
        Err(e @ AcquireError::UnsupportedServer { .. }) => {
            ensure!(
                !e.is_retryable() && e.to_string().contains("not an integer"),
                "{e}"
            );
            Ok(())
        }
        other => Err(format!("acquire: {other:?}")),
    }
}

async fn unreachable_server_at_connect_is_a_connect_error(_b: Arc<FakeBackend>) -> Outcome {
    let port = leasehold_conformance::servers::free_port();
    let config =
        KubeConfig::url(format!("http://127.0.0.1:{port}")).op_timeout(Duration::from_millis(500));
    match KubeStrategy::connect(config).await {
        Err(e @ KubeError::Connect { .. }) => {
            ensure!(e.to_string().contains(&port.to_string()), "{e}");
            Ok(())
        }
        other => Err(format!("{other:?}")),
    }
}

/// A POST answered 504 after it was applied: one GET finds our holder, and
/// the grant is ours with the stored resourceVersion as fence.
async fn ambiguous_create_is_ours_when_the_get_says_so(b: Arc<FakeBackend>) -> Outcome {
    let p = b.private()?;
    let s = p.connect().await?;
    let pool = p.new_pool(1, Duration::from_secs(30)).await?;
    p.fake
        .faults()
        .set_times(Verb::Create, Fault::ApplyThenStatus(504), 1);
    let g = s
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    let lease = p.lease(&pool, 0);
    ensure!(
        rv_of(&lease["metadata"]) == Some(g.fence.0),
        "fence {} for {}",
        g.fence,
        lease
    );
    let r = s.renew(&pool, &g, Floor::NONE).await;
    ensure!(matches!(r, Renewal::Renewed { .. }), "renew: {r:?}");
    Ok(())
}

/// A write whose answer was lost and whose confirming GET failed: the
/// acquisition is retryable, and the next one adopts the slot the write took
/// instead of leaving it to expire.
async fn lost_answer_is_adopted_by_the_next_acquisition(b: Arc<FakeBackend>) -> Outcome {
    let p = b.private()?;
    let s = p.connect().await?;
    let pool = p.new_pool(1, Duration::from_secs(30)).await?;
    p.fake
        .faults()
        .set_times(Verb::Create, Fault::ApplyThenDrop, 1);
    p.fake.faults().set_times(Verb::Get, Fault::Status(503), 1);
    match s.acquire(&pool, Floor::NONE).await {
        Err(e) if e.is_retryable() => {}
        other => return Err(format!("first acquire: {other:?}")),
    }
    let ghost = p.lease(&pool, 0);
    ensure!(
        ghost["spec"]["holderIdentity"].is_string(),
        "the write did not land: {ghost}"
    );
    let g = s
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| format!("adoption: {e}"))?;
    ensure!(g.slot == 0, "slot {}", g.slot);
    let holder = p.lease(&pool, 0)["spec"]["holderIdentity"].clone();
    ensure!(
        holder == ghost["spec"]["holderIdentity"],
        "adopted {holder} but the ghost was {}",
        ghost["spec"]["holderIdentity"]
    );
    ensure!(
        rv_of(&ghost["metadata"]) == Some(g.fence.0),
        "fence {}",
        g.fence
    );
    Ok(())
}

async fn throttled_acquire_is_retryable_and_says_retry_after(b: Arc<FakeBackend>) -> Outcome {
    let p = b.private()?;
    let s = p.connect().await?;
    let pool = super::new_pool(&s, 2, Duration::from_secs(5)).await?;
    p.fake.faults().set_times(
        Verb::List,
        Fault::TooManyRequests {
            retry_after_secs: 3,
        },
        1,
    );
    match s.acquire(&pool, Floor::NONE).await {
        Err(e) if e.is_retryable() => ensure!(e.to_string().contains("Retry-After: 3s"), "{e}"),
        other => return Err(format!("{other:?}")),
    }
    // The client does not retry by itself: one request was sent.
    ensure!(
        p.fake.requests(Verb::List) == 2,
        "LISTs: {}",
        p.fake.requests(Verb::List)
    );
    s.acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

async fn renew_under_server_errors_is_retry_never_lost(b: Arc<FakeBackend>) -> Outcome {
    let p = b.private()?;
    let s = p.connect().await?;
    let pool = p.new_pool(1, Duration::from_secs(30)).await?;
    let g = s
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    for fault in [
        Fault::Status(500),
        Fault::Status(503),
        Fault::Status(504),
        Fault::ApplyThenStatus(504),
        Fault::Drop,
        Fault::ApplyThenDrop,
        Fault::TooManyRequests {
            retry_after_secs: 1,
        },
        Fault::Forbidden,
    ] {
        p.fake.faults().set_times(Verb::Patch, fault, 1);
        let r = s.renew(&pool, &g, Floor::NONE).await;
        ensure!(matches!(r, Renewal::Retry(_)), "{fault:?}: {r:?}");
    }
    p.fake.faults().set_times(Verb::Patch, Fault::Hang, 1);
    // Bounded on the runtime's own timer (polled after the call), so a
    // starved runtime sees the call's 1 s timeout first: only a hang fails.
    let r = tokio::time::timeout(Duration::from_secs(5), s.renew(&pool, &g, Floor::NONE))
        .await
        .map_err(|_| "a hung renewal still pending after 5 s with a 1 s op timeout".to_string())?;
    ensure!(matches!(r, Renewal::Retry(_)), "hang: {r:?}");
    p.fake
        .faults()
        .set_times(Verb::Patch, Fault::Delay(Duration::from_millis(100)), 1);
    let r = s.renew(&pool, &g, Floor::NONE).await;
    ensure!(
        matches!(r, Renewal::Renewed { .. }),
        "after the faults: {r:?}"
    );
    Ok(())
}

/// A renewal that was applied but whose answer was lost is retried; the
/// `test` on the holder makes the repeat harmless.
async fn renew_whose_answer_was_lost_is_harmless(b: Arc<FakeBackend>) -> Outcome {
    let p = b.private()?;
    let s = p.connect().await?;
    let pool = p.new_pool(1, Duration::from_secs(30)).await?;
    let g = s
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    p.fake
        .faults()
        .set_times(Verb::Patch, Fault::ApplyThenDrop, 1);
    let r = s.renew(&pool, &g, Floor::NONE).await;
    ensure!(matches!(r, Renewal::Retry(_)), "{r:?}");
    let r = s.renew(&pool, &g, Floor::NONE).await;
    ensure!(matches!(r, Renewal::Renewed { .. }), "{r:?}");
    Ok(())
}

/// An operator deletes the Lease: the holder's renewal is `Lost` (PATCH never
/// creates), and the slot's next fence is still bigger (resourceVersions come
/// from one counter and survive the deletion).
async fn deleted_lease_is_lost_and_recreated_with_a_bigger_fence(b: Arc<FakeBackend>) -> Outcome {
    let p = b.private()?;
    let s = p.connect().await?;
    let pool = p.new_pool(1, Duration::from_secs(30)).await?;
    let g = s
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        p.fake
            .delete("default", &leasehold_k8s::lease_name(pool.name(), 0)),
        "delete"
    );
    let r = s.renew(&pool, &g, Floor::NONE).await;
    ensure!(matches!(r, Renewal::Lost(_)), "{r:?}");
    ensure!(
        s.release(&pool, &g, g.floor).await == Release::NotHeld,
        "release after delete"
    );
    ensure!(
        p.lease(&pool, 0).is_null(),
        "a renewal or release re-created the Lease"
    );
    let next = s
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        next.fence > g.fence,
        "fence {} after {}",
        next.fence,
        g.fence
    );
    Ok(())
}

async fn revoke_leaves_a_tombstone_until_the_lease_would_have_ended(
    b: Arc<FakeBackend>,
) -> Outcome {
    let p = b.private()?;
    let holder = p.connect().await?;
    let pool = p.new_pool(1, Duration::from_secs(1)).await?;
    let g = holder
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    let floor_before = p.lease(&pool, 0)["metadata"]["annotations"]["leasehold/floor"].clone();
    let rival = p.connect().await?;
    let t0 = Instant::now();
    ensure!(
        rival.revoke(&pool, 0).await.map_err(|e| e.to_string())?,
        "nobody revoked"
    );
    ensure!(
        !rival.revoke(&pool, 0).await.map_err(|e| e.to_string())?,
        "revoked a tombstone"
    );
    let lease = p.lease(&pool, 0);
    ensure!(
        lease["spec"]["holderIdentity"]
            .as_str()
            .is_some_and(|h| h.starts_with("revoked/")),
        "{lease}"
    );
    ensure!(
        lease["metadata"]["annotations"]["leasehold/floor"] == floor_before,
        "floor changed: {lease}"
    );
    let r = holder.renew(&pool, &g, Floor::NONE).await;
    ensure!(matches!(r, Renewal::Lost(_)), "renew after revoke: {r:?}");
    // Nobody takes the slot before a lease duration has passed.
    let taken = loop {
        match rival.acquire(&pool, Floor::NONE).await {
            Ok(g) => break g,
            Err(e) if e.is_retryable() && t0.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(format!("no takeover: {e}")),
        }
    };
    ensure!(
        t0.elapsed() >= pool.ttl(),
        "taken over {:?} after the revoke",
        t0.elapsed()
    );
    ensure!(
        taken.fence > g.fence,
        "fence {} after {}",
        taken.fence,
        g.fence
    );
    Ok(())
}

/// A process that never saw a Lease change cannot know how old it is: it
/// waits a full lease duration (on its own clock) from its first sighting.
async fn a_fresh_process_waits_a_lease_duration_before_a_takeover(b: Arc<FakeBackend>) -> Outcome {
    let p = b.private()?;
    let pool = p.new_pool(1, Duration::from_secs(1)).await?;
    let old = p.connect().await?;
    let g = old
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    // The old holder stops renewing; the Lease may already look stale to a
    // wall clock, but the newcomer has not observed it yet.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let fresh = p.connect().await?;
    let t0 = Instant::now();
    match fresh.acquire(&pool, Floor::NONE).await {
        Err(AcquireError::PoolExhausted { .. }) => {}
        other => return Err(format!("first sighting: {other:?}")),
    }
    let taken = loop {
        match fresh.acquire(&pool, Floor::NONE).await {
            Ok(g) => break g,
            Err(e) if e.is_retryable() && t0.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(format!("no takeover: {e}")),
        }
    };
    ensure!(
        t0.elapsed() >= pool.ttl(),
        "took over {:?} after the first sighting",
        t0.elapsed()
    );
    ensure!(taken.fence > g.fence, "fence");
    ensure!(
        matches!(old.renew(&pool, &g, Floor::NONE).await, Renewal::Lost(_)),
        "old holder not lost"
    );
    Ok(())
}

async fn ordinal_lease_pins_the_slot_and_refuses_a_twin(b: Arc<FakeBackend>) -> Outcome {
    let p = b.private()?;
    let pool = p.new_pool(8, Duration::from_secs(30)).await?;
    let first = OrdinalLease::with_slot(p.connect().await?, 3);
    let twin = OrdinalLease::with_slot(p.connect().await?, 3);
    let g = first
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(g.slot == 3, "slot {}", g.slot);
    match twin.acquire(&pool, Floor::NONE).await {
        Err(e @ AcquireError::Contention(_)) => {
            ensure!(e.to_string().contains("same ordinal"), "unclear: {e}");
        }
        other => return Err(format!("twin: {other:?}")),
    }
    ensure!(
        first.release(&pool, &g, g.floor).await == Release::Released,
        "release"
    );
    let g2 = twin
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(g2.slot == 3 && g2.fence > g.fence, "twin got {g2:?}");
    let far = OrdinalLease::with_slot(p.connect().await?, 8);
    match far.acquire(&pool, Floor::NONE).await {
        Err(e) if !e.is_retryable() => Ok(()),
        other => Err(format!("ordinal outside the pool: {other:?}")),
    }
}

async fn debug_output_shows_no_token(b: Arc<FakeBackend>) -> Outcome {
    let p = b.private()?;
    let s = p.connect().await?;
    let pool = p.new_pool(1, Duration::from_secs(30)).await?;
    let g = s
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    let hex = g.token.to_hex();
    for text in [
        format!("{s:?}"),
        format!("{g:?}"),
        format!("{:?}", p.config()),
    ] {
        ensure!(!text.contains(&hex), "the token shows in {text}");
    }
    Ok(())
}

/// A kubeconfig's bearer token never shows — not in `Debug`
/// of the config or the strategy, not in `identity()`, not in an error (an
/// unreachable API server), not in any span or event of a manager holding,
/// renewing and releasing through it (kube's own included).
async fn kubeconfig_credentials_never_show(b: Arc<FakeBackend>) -> Outcome {
    use leasehold_conformance::secrets::{self, Secret, Shown};
    let p = b.private()?;
    let secret = Secret::new();
    let mut shown = Shown::new(&secret);
    let _ = secrets::capture();
    let dir = std::env::temp_dir().join(format!(
        "leasehold-kubeconfig-{}-{}",
        std::process::id(),
        Token::random().to_hex()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let write = |name: &str, server: &str| -> Result<std::path::PathBuf, String> {
        let path = dir.join(name);
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    \
             server: {server}\nusers:\n- name: app\n  user:\n    token: {}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: app\n    \
             namespace: default\ncurrent-context: fake\n",
            secret.as_str()
        );
        std::fs::write(&path, yaml).map_err(|e| e.to_string())?;
        Ok(path)
    };
    let good = write("good.yaml", &p.fake.url())?;
    let dead = write("dead.yaml", "http://127.0.0.1:1")?;
    let config = KubeConfig::from_kubeconfig(&good)
        .op_timeout(Duration::from_secs(1))
        .takeover_margin(Duration::from_millis(200));
    shown.debug("KubeConfig", &config);
    let s = KubeStrategy::connect(config)
        .await
        .map_err(|e| e.to_string())?;
    shown.debug("KubeStrategy", &s);
    secrets::exercise(Arc::new(s), &mut shown).await?;
    match KubeStrategy::connect(
        KubeConfig::from_kubeconfig(&dead).op_timeout(Duration::from_secs(1)),
    )
    .await
    {
        Ok(_) => return Err("connected to port 1".into()),
        Err(e) => {
            shown.both("KubeError (unreachable)", &e);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    shown.traces().metrics().verdict()
}

fn stored_floor(p: &Private, pool: &PoolSpec, slot: u32) -> String {
    p.lease(pool, slot)["metadata"]["annotations"]["leasehold/floor"]
        .as_str()
        .unwrap_or("missing")
        .to_owned()
}

/// acquire stores max(stored, ceiling) and hands back what was stored
/// before; renew raises it, never lowers it; release stores what was issued.
async fn floor_is_kept_on_the_lease_and_handed_over(b: Arc<FakeBackend>) -> Outcome {
    let p = b.private()?;
    let s = p.connect().await?;
    let pool = p.new_pool(1, Duration::from_secs(30)).await?;
    let g = s
        .acquire(&pool, Floor(1_000))
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        g.floor == Floor::NONE,
        "a fresh slot's floor is {}",
        g.floor
    );
    ensure!(
        stored_floor(&p, &pool, 0) == "1000",
        "after acquire: {}",
        stored_floor(&p, &pool, 0)
    );
    for (ceiling, want) in [
        (2_000, "2000"),
        (1_500, "2000"),
        (2_000, "2000"),
        (2_500, "2500"),
    ] {
        let r = s.renew(&pool, &g, Floor(ceiling)).await;
        ensure!(
            matches!(r, Renewal::Renewed { .. }),
            "renew {ceiling}: {r:?}"
        );
        ensure!(
            stored_floor(&p, &pool, 0) == want,
            "after renew {ceiling}: {}",
            stored_floor(&p, &pool, 0)
        );
    }
    ensure!(
        s.release(&pool, &g, Floor(1_700)).await == Release::Released,
        "release"
    );
    ensure!(
        stored_floor(&p, &pool, 0) == "1700",
        "after release: {}",
        stored_floor(&p, &pool, 0)
    );
    let next = p
        .connect()
        .await?
        .acquire(&pool, Floor(100))
        .await
        .map_err(|e| e.to_string())?;
    ensure!(next.floor == Floor(1_700), "handed over {}", next.floor);
    ensure!(
        stored_floor(&p, &pool, 0) == "1700",
        "max(1700, 100): {}",
        stored_floor(&p, &pool, 0)
    );
    Ok(())
}

/// A holder that vanished never reported what it issued: the next holder
/// gets the highest ceiling it reported.
async fn floor_survives_a_takeover_after_expiry(b: Arc<FakeBackend>) -> Outcome {
    let p = b.private()?;
    let pool = p.new_pool(1, Duration::from_secs(1)).await?;
    let old = p.connect().await?;
    let g = old
        .acquire(&pool, Floor(5_000))
        .await
        .map_err(|e| e.to_string())?;
    let r = old.renew(&pool, &g, Floor(9_000)).await;
    ensure!(matches!(r, Renewal::Renewed { .. }), "{r:?}");
    let rival = p.connect().await?;
    let start = Instant::now();
    let taken = loop {
        match rival.acquire(&pool, Floor(6_000)).await {
            Ok(g) => break g,
            Err(e) if e.is_retryable() && start.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(format!("no takeover: {e}")),
        }
    };
    ensure!(taken.floor == Floor(9_000), "handed over {}", taken.floor);
    ensure!(
        stored_floor(&p, &pool, 0) == "9000",
        "stored {}",
        stored_floor(&p, &pool, 0)
    );
    Ok(())
}

/// A renewal that raised the floor was applied but its answer was lost: the
/// next renewal's floor `test` fails, one GET shows the Lease is still ours
/// and what is stored, and the renewal goes through.
async fn lost_renewal_answer_with_a_floor_raise_is_learned_and_renewed(
    b: Arc<FakeBackend>,
) -> Outcome {
    let p = b.private()?;
    let s = p.connect().await?;
    let pool = p.new_pool(1, Duration::from_secs(30)).await?;
    let g = s
        .acquire(&pool, Floor(1_000))
        .await
        .map_err(|e| e.to_string())?;
    p.fake
        .faults()
        .set_times(Verb::Patch, Fault::ApplyThenDrop, 1);
    let r = s.renew(&pool, &g, Floor(3_000)).await;
    ensure!(matches!(r, Renewal::Retry(_)), "{r:?}");
    ensure!(
        stored_floor(&p, &pool, 0) == "3000",
        "the write did not land"
    );
    let r = s.renew(&pool, &g, Floor(4_000)).await;
    ensure!(matches!(r, Renewal::Renewed { .. }), "{r:?}");
    ensure!(
        stored_floor(&p, &pool, 0) == "4000",
        "stored {}",
        stored_floor(&p, &pool, 0)
    );
    Ok(())
}

fn rv_of(meta: &serde_json::Value) -> Option<u64> {
    meta["resourceVersion"].as_str()?.parse().ok()
}
