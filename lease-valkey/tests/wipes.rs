//! A wipe of a pool's keys while a holder runs, on private durable servers:
//! Valkey 8.1 (the script path) and Redis 8.2 (the HSETEX path). The
//! servers keep every acknowledged write, so the restart guard is off and
//! what holds claims back is the wipe guard alone.
//!
//! A holder holds a slot; then `FLUSHALL`, `FLUSHDB`, or a deletion of
//! every key of the pool. Nothing on the server says the pool existed, and
//! the holder goes on generating until its next renewal. A second claimer
//! is refused (`StoreRestarted`) until the pool's restart span has passed
//! since a claim first saw the pool gone (`prepare` does not end that wait),
//! and the holder's renewal answers `Lost`. Without the guard the second
//! claim was granted at once (measured: 9.5 ms after a `FLUSHALL`, while the
//! first lease had seconds to run). The control: a pool an operator declared
//! new is granted at its first claim, and one not declared waits a span.

use std::time::{Duration, Instant};

use fred::prelude::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use leasehold_conformance::restarts::wait_out_the_restart_guard;
use leasehold_conformance::servers::{Server, ServerKind, Settings, provide_with};
use leasehold_conformance::{ensure, fresh_pool};
use leasehold_core::{AcquireError, Floor, Grant, Operate, PoolSpec, Renewal, Strategy};
use leasehold_valkey::{ActivePath, ValkeyConfig, ValkeyError, ValkeyStrategy};

/// The lease: long enough that the wipe and the first refused claim come
/// well inside it on a loaded machine, short enough that the span (this
/// plus twice the default 1 s skew) is quickly waited out.
const TTL: Duration = Duration::from_secs(3);

/// How a test wipes the pool.
#[derive(Clone, Copy, Debug)]
enum Wipe {
    FlushAll,
    FlushDb,
    /// `DEL` of every key of the pool: the leases hash, the fences hash and
    /// every slot key.
    PoolKeys,
}

async fn connect(url: &str) -> Result<ValkeyStrategy, String> {
    let config = ValkeyConfig::from_url(url).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match ValkeyStrategy::connect(config.clone()).await {
            Ok(s) => return Ok(s),
            Err(ValkeyError::Unreachable { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(format!("connect: {e}")),
        }
    }
}

async fn cmd(s: &ValkeyStrategy, name: &'static str, args: Vec<Value>) -> Result<Value, String> {
    s.client()
        .custom::<Value, Value>(
            CustomCommand::new_static(name, ClusterHash::Random, false),
            args,
        )
        .await
        .map_err(|e| format!("{name}: {e}"))
}

/// A private durable server of `kind` and its URL with this file's prefix
/// and a generous operation timeout (the machine may be loaded).
fn server(kind: ServerKind) -> Result<(Server, String), String> {
    let server = provide_with(kind, Settings::Durable).map_err(|e| e.to_string())?;
    let url = format!("{}?prefix=lhwipe&op_timeout=5s", server.store_url());
    Ok((server, url))
}

/// The path `kind` takes: HSETEX on Redis 8, scripts on Valkey 8.1.
fn path_of(kind: ServerKind) -> ActivePath {
    if kind == ServerKind::Redis8 {
        ActivePath::Hsetex
    } else {
        ActivePath::Scripts
    }
}

async fn wipe(s: &ValkeyStrategy, pool: &PoolSpec, how: Wipe) -> Result<(), String> {
    match how {
        Wipe::FlushAll => cmd(s, "FLUSHALL", vec![]).await.map(drop),
        Wipe::FlushDb => cmd(s, "FLUSHDB", vec![]).await.map(drop),
        Wipe::PoolKeys => {
            let keys = s.keys(pool.name());
            let mut all: Vec<Value> = vec![keys.leases.clone().into(), keys.fences.clone().into()];
            all.extend((0..pool.size()).map(|n| Value::from(keys.slot_key(n))));
            cmd(s, "DEL", all).await.map(drop)
        }
    }
}

/// A holder holds a slot of a pool declared new, the pool is wiped, and a
/// second claimer is refused until the span; the holder's renewal is `Lost`.
async fn a_wipe_holds_claims_back(kind: ServerKind, how: Wipe) -> Result<(), String> {
    let (_server, url) = server(kind)?;
    let pool = fresh_pool(2, TTL)?;
    let span = pool.restart_span();
    let holder = connect(&url).await?;
    ensure!(
        holder.path() == path_of(kind),
        "{kind} took the {} path",
        holder.path()
    );
    holder
        .declare_new_pool(&pool)
        .await
        .map_err(|e| format!("declare the pool new: {e}"))?;
    // The server started moments ago: its start holds claims back one span
    // (the restart guard), which is not what this shows.
    wait_out_the_restart_guard(&holder, &pool).await?;
    let held_sent = Instant::now();
    let grant = holder
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| format!("the first claim of a pool declared new: {e}"))?;
    wipe(&holder, &pool, how).await?;
    let claimer = connect(&url).await?;
    // What applications call on every start: it must not end the wait.
    let first_sent = Instant::now();
    Operate::prepare(&claimer, Some(&pool))
        .await
        .map_err(|e| format!("prepare after the wipe: {e}"))?;
    let mut refusals = 0u32;
    let deadline = first_sent + span + Duration::from_secs(60);
    let regrant: Grant = loop {
        let r = claimer.acquire(&pool, Floor::NONE).await;
        let answered = Instant::now();
        match r {
            Err(AcquireError::StoreRestarted { resume_in }) => {
                refusals += 1;
                ensure!(
                    resume_in <= span,
                    "the guard asked to wait {resume_in:?}, more than the span {span:?}"
                );
                if refusals == 1 {
                    renewal_is_lost(&holder, &pool, &grant).await?;
                }
            }
            Err(e) if e.is_retryable() => eprintln!("claim: retry ({e})"),
            Err(e) => return Err(format!("the claim after the wipe ({how:?}): {e}")),
            Ok(g) => {
                ensure!(
                    refusals > 0,
                    "slot {} was granted (fence {}) at the first claim after the wipe \
                     ({how:?}), {:?} after the first lease was claimed for {TTL:?} (slot {}): \
                     two holders",
                    g.slot,
                    g.fence,
                    answered - held_sent,
                    grant.slot
                );
                // `prepare` first saw the pool gone after `first_sent`, on
                // the server's clock in whole ms (so up to 1 ms late), and
                // the grant was answered before `answered`: the span lies
                // between.
                ensure!(
                    answered - first_sent + Duration::from_millis(1) >= span,
                    "granted {:?} after the pool was first seen gone: before the span {span:?}",
                    answered - first_sent
                );
                break g;
            }
        }
        ensure!(
            answered < deadline,
            "no grant within {:?} of the wipe",
            deadline - first_sent
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    ensure!(
        regrant.fence > grant.fence || regrant.slot != grant.slot,
        "the fence of slot {} went back across the wipe: {} after {}",
        grant.slot,
        regrant.fence,
        grant.fence
    );
    Ok(())
}

/// The holder's renewal after the wipe answers `Lost`: its token is gone.
async fn renewal_is_lost(s: &ValkeyStrategy, pool: &PoolSpec, grant: &Grant) -> Result<(), String> {
    match s.renew(pool, grant, Floor::NONE).await {
        Renewal::Lost(_) => Ok(()),
        other => Err(format!(
            "the holder's renewal after the wipe answered {other:?}, not Lost"
        )),
    }
}

/// A pool declared new is granted at its first claim; one that is not
/// declared waits a span on its first claim, as after a wipe; and a pool
/// with a live lease is not declared new.
async fn a_new_pool_declared_new_claims_at_once(kind: ServerKind) -> Result<(), String> {
    let (_server, url) = server(kind)?;
    let s = connect(&url).await?;
    let declared = fresh_pool(1, TTL)?;
    s.declare_new_pool(&declared)
        .await
        .map_err(|e| format!("declare the pool new: {e}"))?;
    wait_out_the_restart_guard(&s, &declared).await?;
    let grant = s
        .acquire(&declared, Floor::NONE)
        .await
        .map_err(|e| format!("the first claim of a pool declared new: {e}"))?;
    match s.declare_new_pool(&declared).await {
        Err(ValkeyError::NotNew { .. }) => {}
        other => {
            return Err(format!(
                "a pool whose slot {} is held was declared new: {other:?}",
                grant.slot
            ));
        }
    }
    let undeclared = fresh_pool(1, TTL)?;
    match s.acquire(&undeclared, Floor::NONE).await {
        Err(AcquireError::StoreRestarted { resume_in }) => ensure!(
            resume_in <= undeclared.restart_span(),
            "a pool never used waits {resume_in:?}, more than its span"
        ),
        other => {
            return Err(format!(
                "the first claim of a pool not declared new answered {other:?}, not a wait"
            ));
        }
    }
    Ok(())
}

macro_rules! wipe_tests {
    ($($name:ident: $kind:expr, $how:expr;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            if let Err(e) = a_wipe_holds_claims_back($kind, $how).await {
                panic!("{e}");
            }
        }
    )*};
}

wipe_tests! {
    after_flushall_nothing_is_granted_until_the_span_valkey8: ServerKind::Valkey8, Wipe::FlushAll;
    after_flushdb_nothing_is_granted_until_the_span_valkey8: ServerKind::Valkey8, Wipe::FlushDb;
    after_the_pools_keys_are_deleted_nothing_is_granted_until_the_span_valkey8:
        ServerKind::Valkey8, Wipe::PoolKeys;
    after_flushall_nothing_is_granted_until_the_span_redis8: ServerKind::Redis8, Wipe::FlushAll;
    after_the_pools_keys_are_deleted_nothing_is_granted_until_the_span_redis8:
        ServerKind::Redis8, Wipe::PoolKeys;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_declared_new_is_granted_at_its_first_claim_valkey8() {
    if let Err(e) = a_new_pool_declared_new_claims_at_once(ServerKind::Valkey8).await {
        panic!("{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_declared_new_is_granted_at_its_first_claim_redis8() {
    if let Err(e) = a_new_pool_declared_new_claims_at_once(ServerKind::Redis8).await {
        panic!("{e}");
    }
}
