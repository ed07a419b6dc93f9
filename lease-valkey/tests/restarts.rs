//! Store restarts on Redis 8.2 (HSETEX path), Redis 7.0 and Valkey 8.1
//! (script path) (`leasehold_conformance::restarts`): on a private
//! [`Settings::Durable`] server (the append-only file, fsynced before every
//! reply) a fence never repeats and a lease survives a crash; a private
//! [`Settings::Lossy`] one (no persistence) is refused with the defaults, and
//! with the one-timing opt-in the restart guard keeps a second holder off the
//! slot for the pool's longest span, and longer for a larger skew.
//!
//! Valkey-specific, on a second private lossy server per kind
//! (`<kind>-lossy-forgets`): a fence is never issued twice after the server
//! forgot it, and the guard waits out the longest span the pool recorded,
//! not the claimer's own.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use leasehold_conformance::restarts::{Stores, restartable_server, target};
use leasehold_conformance::servers::{Server, ServerKind, Settings};
use leasehold_conformance::suite::STARVED;
use leasehold_conformance::{Glue, Outcome, Store, Target, ensure, fresh_pool};
use leasehold_core::{
    AcquireError, BoxFuture, DurabilityPolicy, Floor, Grant, PoolSpec, Release, StaticSlot,
    Strategy,
};
use leasehold_valkey::{ValkeyConfig, ValkeyError, ValkeyStrategy};

struct Valkey;

/// Every pool of these tests uses one TTL and the default skew, so a lossy
/// server is accepted on that promise (a durable one needs no opt-in).
fn config(url: &str) -> ValkeyConfig {
    ValkeyConfig::new(url)
        .key_prefix("lhrestart")
        .durability(DurabilityPolicy::OneTimingPerPool)
}

async fn connect(url: &str) -> Result<ValkeyStrategy, String> {
    // The path is probed, as in production: HSETEX on Redis 8, scripts on
    // the others.
    connect_patiently(config(url)).await
}

impl Stores for Valkey {
    /// With the library's defaults: a durable server is accepted, a lossy
    /// one refused.
    fn connect<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<Store, String>> {
        Box::pin(async move {
            let s = connect_patiently(ValkeyConfig::new(url).key_prefix("lhrestart")).await?;
            Ok(Arc::new(s) as Store)
        })
    }

    /// Every test's pool is new (a fresh random name): said so, so that
    /// its first claim is not held back as a possibly wiped pool's.
    fn prepare<'a>(
        &'a self,
        url: &'a str,
        pool: &'a PoolSpec,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            // Accepted on a lossy server too (the one-timing opt-in).
            let s = connect(url).await?;
            s.declare_new_pool(pool).await.map_err(|e| e.to_string())
        })
    }

    /// `CONFIG SET appendonly no` (the server's command line still says
    /// `yes`): nothing written meanwhile reaches the append-only file, so a
    /// crash surely loses it, and the restart loads the file as it was.
    fn weaken_until_restart<'a>(
        &'a self,
        url: &'a str,
    ) -> BoxFuture<'a, Result<Option<bool>, String>> {
        Box::pin(async move {
            let s = connect(url).await?;
            cmd(
                &s,
                "CONFIG",
                vec!["SET".into(), "appendonly".into(), "no".into()],
            )
            .await?;
            Ok(Some(true))
        })
    }

    fn connect_one_timing<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<Store, String>> {
        Box::pin(async move { Ok(Arc::new(connect(url).await?) as Store) })
    }

    /// A snapshot (`SAVE`): a server without the append-only file loads it
    /// when it starts again.
    fn make_durable_now<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let s = connect(url).await?;
            cmd(&s, "SAVE", vec![]).await.map(drop)
        })
    }

    fn reports_lossy<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<Option<bool>, String>> {
        Box::pin(async move {
            let s = connect(url).await?;
            Ok(Some(!s.persistence().keeps_every_write()))
        })
    }
}

/// A lossy server the Valkey-specific tests crash and restart; they take
/// turns with it.
struct Forgetful {
    url: String,
    server: tokio::sync::Mutex<Server>,
}

/// Picks none of the suite's behaviours (a fixed slot's capabilities): the
/// suite runs in the `conformance` binary.
impl Glue for Forgetful {
    fn connect(&self) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async { Ok(Arc::new(StaticSlot::new(0)) as Store) })
    }
}

async fn cmd(s: &ValkeyStrategy, name: &'static str, args: Vec<Value>) -> Result<Value, String> {
    s.client()
        .custom::<Value, Value>(
            CustomCommand::new_static(name, ClusterHash::FirstKey, false),
            args,
        )
        .await
        .map_err(|e| format!("{name}: {e}"))
}

/// Connects with `config` for the Valkey-specific tests: a server that was
/// just restarted may be slow to answer on a loaded machine, so the
/// operation timeout is generous and an unreachable server is tried again
/// for 30 s.
async fn connect_patiently(config: ValkeyConfig) -> Result<ValkeyStrategy, String> {
    let config = config.op_timeout(Duration::from_secs(10));
    let limit = Instant::now() + Duration::from_secs(30);
    loop {
        match ValkeyStrategy::connect(config.clone()).await {
            Ok(s) => return Ok(s),
            Err(ValkeyError::Unreachable { .. }) if Instant::now() < limit => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(format!("connect: {e}")),
        }
    }
}

/// A field of the pool's fences hash (`None`: absent).
async fn fences_field(
    s: &ValkeyStrategy,
    pool: &PoolSpec,
    field: &str,
) -> Result<Option<String>, String> {
    let fences = s.keys(pool.name()).fences;
    let v = cmd(s, "HGET", vec![fences.into(), field.into()]).await?;
    Ok(v.as_string())
}

/// The server's `uptime_in_seconds`.
async fn uptime(s: &ValkeyStrategy) -> Result<Duration, String> {
    let info = cmd(s, "INFO", vec!["server".into()]).await?;
    let text = info.as_string().unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
        .and_then(|v| v.trim().parse().ok())
        .map(Duration::from_secs)
        .ok_or_else(|| format!("no uptime_in_seconds in INFO server: {text}"))
}

/// Crashes the server (SIGKILL) and starts it again on the same directory.
fn crash_and_restart(server: &mut Server) -> Outcome {
    let what = server.describe();
    tokio::task::block_in_place(|| {
        server.kill().map_err(|e| format!("kill {what}: {e}"))?;
        server.restart().map_err(|e| format!("restart {what}: {e}"))
    })
}

/// Acquires until granted: the restart guard and a server that is still
/// starting only delay it (within the guard's span and 30 s).
async fn acquire_after_guard(s: &ValkeyStrategy, pool: &PoolSpec) -> Result<Grant, String> {
    let deadline = Instant::now() + pool.restart_span() + Duration::from_secs(30);
    loop {
        match s.acquire(pool, Floor::NONE).await {
            Ok(g) => return Ok(g),
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(format!("no grant on {}: {e}", s.server())),
        }
    }
}

/// A server without persistence forgets the fences hash on a crash; the
/// next fence of the slot is still above the one issued before, because a
/// claim's fence is `max(previous + 1, the server's clock in µs)` and the
/// guard makes that claim wait seconds after the restart. With a counter
/// alone it would be issued again (1 before, 1 after): a paused old holder's
/// fenced write would then be accepted next to the new holder's.
async fn a_fence_is_never_issued_twice_after_the_server_forgets(b: Arc<Forgetful>) -> Outcome {
    let mut server = b.server.lock().await;
    let pool = fresh_pool(1, Duration::from_secs(1))?;
    let s = connect_patiently(config(&b.url)).await?;
    let first = acquire_after_guard(&s, &pool).await?;
    drop(s);
    crash_and_restart(&mut server)?;
    let s = connect_patiently(config(&b.url)).await?;
    let fence = fences_field(&s, &pool, "0").await?;
    ensure!(
        fence.is_none(),
        "the server kept the fence {fence:?} across the crash: this test needs one that forgets"
    );
    let next = acquire_after_guard(&s, &pool).await?;
    ensure!(
        next.fence > first.fence,
        "after the server forgot, slot {} was granted fence {}; fence {} was issued before the \
         crash",
        next.slot,
        next.fence,
        first.fence
    );
    Ok(())
}

/// A holder with a TTL of 60 s, a restart, a claimer with a TTL of 1 s: the
/// guard holds the claimer back for the pool's span (60 s + 2 × 1 s), not
/// its own (3 s). The span was recorded by an earlier claim of the pool and
/// kept by the server (here a `SAVE`, as RDB snapshots or the append-only
/// file keep it); the 60 s holder's own claim, after it, is forgotten by the
/// crash. (The claimer connects with `DurabilityPolicy::OneTimingPerPool`,
/// the only policy under which a guarded process accepts this server; the promise is broken
/// here on purpose, to show that the recorded span covers what it does
/// not.) Without the recorded span the claimer is granted the slot 3 s
/// after the restart while the 60 s lease is still live: two holders of one
/// slot. The time left that `StoreRestarted` answers is judged against the
/// server's uptime read before and after each claim.
async fn the_guard_waits_out_the_pools_longest_span_after_a_restart(b: Arc<Forgetful>) -> Outcome {
    let mut server = b.server.lock().await;
    let long = fresh_pool(1, Duration::from_secs(60))?;
    let short =
        PoolSpec::new(long.name().clone(), 1, Duration::from_secs(1)).map_err(|e| e.to_string())?;
    let pool_span = long.restart_span();
    // The 60 s holders claim without the guard, so as not to wait a minute
    // of the fresh server's uptime; every claim records its span all the
    // same.
    let holder = connect_patiently(config(&b.url).durability(DurabilityPolicy::Throwaway)).await?;
    let earlier = holder
        .acquire(&long, Floor::NONE)
        .await
        .map_err(|e| format!("the earlier 60 s claim: {e}"))?;
    let r = holder.release(&long, &earlier, Floor::NONE).await;
    ensure!(r == Release::Released, "the earlier release answered {r:?}");
    cmd(&holder, "SAVE", vec![]).await?;
    let sent = Instant::now();
    let live = holder
        .acquire(&long, Floor::NONE)
        .await
        .map_err(|e| format!("the 60 s claim: {e}"))?;
    drop(holder);
    crash_and_restart(&mut server)?;
    let claimer = connect_patiently(config(&b.url)).await?;
    let span = fences_field(&claimer, &long, "span").await?;
    ensure!(
        span.as_deref() == Some("62000"),
        "after the restart the pool's recorded span is {span:?}, not the 62000 ms saved"
    );
    let outcome = async {
        let own = short.restart_span();
        loop {
            let before = uptime(&claimer).await?;
            let r = claimer.acquire(&short, Floor::NONE).await;
            // `uptime_in_seconds` is floored: the uptime is below the next second.
            let after = uptime(&claimer).await? + Duration::from_secs(1);
            match r {
                Err(AcquireError::StoreRestarted { resume_in }) => {
                    ensure!(
                        // The guard counts the whole-second uptime one
                        // second short.
                        pool_span.saturating_sub(after) <= resume_in
                            && resume_in
                                <= (pool_span + Duration::from_secs(1)).saturating_sub(before),
                        "the guard answered {resume_in:?} at an uptime of {before:?} to \
                         {after:?}: not the pool's span of {pool_span:?} less the uptime"
                    );
                    if before > own + Duration::from_secs(1) {
                        return Ok(());
                    }
                }
                Err(AcquireError::Unreachable(_)) => {}
                r => {
                    let at = Instant::now();
                    let what = format!(
                        "a 1 s claimer at an uptime of {before:?} (its own span {own:?}), while \
                         the 60 s lease {} was live, got {r:?}",
                        live.slot
                    );
                    return Err(if at < sent + live.ttl {
                        what
                    } else {
                        format!("{STARVED}{what} (judged {:?} after the claim)", at - sent)
                    });
                }
            }
            if Instant::now() > sent + live.ttl {
                return Err(format!(
                    "{STARVED}the server's uptime did not pass {own:?} within the 60 s lease"
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    .await;
    // Later restarts of this server start empty again.
    cmd(&claimer, "FLUSHALL", vec![]).await?;
    cmd(&claimer, "SAVE", vec![]).await?;
    outcome
}

/// The Valkey-specific restart tests on `kind`'s second lossy server.
fn forgetful(kind: ServerKind) -> Target {
    let label = format!("{}-lossy-forgets", kind.name());
    let server = match restartable_server(kind, Settings::Lossy, &label) {
        Ok(server) => server,
        Err(missing) => return missing,
    };
    let describe = server.describe();
    let backend = Forgetful {
        url: server.url.clone(),
        server: tokio::sync::Mutex::new(server),
    };
    Target::new(label, describe, Arc::new(backend))
        .with_test(
            "a_fence_is_never_issued_twice_after_the_server_forgets",
            a_fence_is_never_issued_twice_after_the_server_forgets,
        )
        .with_test(
            "the_guard_waits_out_the_pools_longest_span_after_a_restart",
            the_guard_waits_out_the_pools_longest_span_after_a_restart,
        )
}

fn main() -> ExitCode {
    // The servers live in the targets' backends and stop when the run ends.
    let mut targets = Vec::new();
    for kind in [ServerKind::Redis8, ServerKind::Redis7, ServerKind::Valkey8] {
        for settings in [Settings::Durable, Settings::Lossy] {
            targets.push(target(kind, settings, Valkey));
        }
        targets.push(forgetful(kind));
    }
    leasehold_conformance::run(targets)
}
