//! Leader election on a one-slot pool: followers learn the leader, and no
//! two electors lead at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_core::{Elector, Fence, Leader, LeaderConfig};

use super::context::{Ctx, short_ttl};
use super::{Outcome, STARVED};
use crate::glue::Glue;

/// On a leader pool (one slot), every elector, followers included,
/// learns the leader's holder identity and fence from `inspect`
/// (`Elector::leader`), and agrees with the leader's own term. A leadership
/// that changed hands while waiting (a machine too slow to renew) proves
/// nothing either way: starved.
pub async fn followers_observe_the_leader_and_its_fence(b: Arc<dyn Glue>) -> Outcome {
    let ttl = {
        let store = b.connect().await?;
        short_ttl(&store.capabilities_dyn()).max(Duration::from_secs(2))
    };
    let ctx = Ctx::new(b, 1, Some(ttl)).await?;
    let terms: Arc<std::sync::Mutex<Vec<(String, Fence)>>> = Arc::default();
    let mut electors: Vec<Elector> = Vec::new();
    for i in 0..3 {
        let holder = format!("replica-{i}");
        let config = LeaderConfig::builder(ctx.pool.name().as_str())
            .holder(holder.clone())
            .ttl(ttl)
            .renew_interval(ttl / 4)
            .safety_margin(ttl / 5)
            .acquire_timeout(ttl)
            .build()
            .map_err(|e| e.to_string())?;
        let terms = terms.clone();
        let elector = Leader::builder(ctx.another().await?, config)
            .observe_every(ttl / 8)
            .on_started_leading(move |l| {
                terms
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((holder.clone(), l.fence()));
            })
            .campaign(|leadership| async move { leadership.lost().await });
        electors.push(elector);
    }
    let give_up = Instant::now() + ttl * 10 + Duration::from_secs(10);
    let outcome = loop {
        let terms = terms
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let seen: Vec<_> = electors.iter().map(Elector::leader).collect();
        let agreed = match terms.last() {
            Some((holder, fence)) => seen.iter().all(|l| {
                l.as_ref()
                    .is_some_and(|l| &l.holder == holder && l.fence == *fence)
            }),
            None => false,
        };
        if agreed && terms.len() == 1 {
            break Ok(());
        }
        if terms.len() > 1 {
            break Err(format!(
                "{STARVED}leadership changed hands while waiting: {terms:?}"
            ));
        }
        if Instant::now() >= give_up {
            break Err(format!(
                "the electors did not agree on the leader {terms:?}: they observed {seen:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let leading = electors.iter().filter(|e| e.is_leading()).count();
    for e in electors {
        e.shutdown().await;
    }
    outcome?;
    ensure!(leading <= 1, "{leading} electors led at once");
    Ok(())
}

/// One observation of a term from inside it: between `before` and `after`
/// (readings of the test's monotonic clock around the call), the term's
/// `is_leading` answered true.
#[derive(Clone, Copy, Debug)]
struct Seen {
    before: Instant,
    after: Instant,
}

/// What the electors of [`electors_never_lead_at_once`] saw of their terms:
/// per term (elector, fence), every instant it said it led.
type TermLog = Arc<std::sync::Mutex<Vec<((usize, Fence), Vec<Seen>)>>>;

/// Two terms that surely led at one same instant, if any. A term is one
/// stretch of time (its gate closes for good when it ends), so a term seen
/// leading at two observations led at every instant between them: surely
/// from the end of its first observation to the start of its last. Two such
/// stretches of different terms that overlap are two leaders at once. A
/// stalled machine only shortens the stretches (the readings bracket every
/// call), so it can hide an overlap, never invent one.
fn overlapping_terms(log: &[((usize, Fence), Vec<Seen>)]) -> Option<String> {
    let stretches: Vec<_> = log
        .iter()
        .filter_map(|(term, seen)| {
            let (first, last) = (seen.first()?, seen.last()?);
            (first.after <= last.before).then_some((*term, first.after, last.before))
        })
        .collect();
    for (i, (a, a_from, a_to)) in stretches.iter().enumerate() {
        for (b, b_from, b_to) in &stretches[i + 1..] {
            if a.0 != b.0 && a_from.max(b_from) < a_to.min(b_to) {
                return Some(format!(
                    "elector {} (fence {}) and elector {} (fence {}) both led for {:?}",
                    a.0,
                    a.1,
                    b.0,
                    b.1,
                    *a_to.min(b_to) - *a_from.max(b_from)
                ));
            }
        }
    }
    None
}

/// Several electors campaign for one pool with a plain configuration (the
/// leader's own, which has no size): at most one leads at every instant
/// observed, while leadership changes hands by a graceful shutdown and by a
/// leader that dies without releasing. Each term records, from inside, every
/// instant it says it leads; the terms' stretches must never overlap (see
/// `overlapping_terms` in this module, which a loaded machine cannot fool).
pub async fn electors_never_lead_at_once(b: Arc<dyn Glue>) -> Outcome {
    let ttl = {
        let store = b.connect().await?;
        short_ttl(&store.capabilities_dyn()).max(Duration::from_secs(1))
    };
    let ctx = Ctx::new(b, 1, Some(ttl)).await?;
    let log: TermLog = Arc::default();
    let mut electors: Vec<Option<Elector>> = Vec::new();
    for i in 0..4 {
        let config = LeaderConfig::builder(ctx.pool.name().as_str())
            .holder(format!("replica-{i}"))
            .ttl(ttl)
            .renew_interval(ttl / 4)
            .safety_margin(ttl / 5)
            .acquire_timeout(ttl)
            .build()
            .map_err(|e| e.to_string())?;
        let log = log.clone();
        let elector = Leader::campaign(ctx.another().await?, config, move |leadership| {
            let log = log.clone();
            async move {
                let term = (i, leadership.fence());
                loop {
                    let before = Instant::now();
                    let leading = leadership.is_leading();
                    let after = Instant::now();
                    if !leading {
                        break;
                    }
                    {
                        let mut log = log
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        match log.iter_mut().find(|(t, _)| *t == term) {
                            Some((_, seen)) => seen.push(Seen { before, after }),
                            None => log.push((term, vec![Seen { before, after }])),
                        }
                    }
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(2)) => {}
                        () = leadership.lost() => break,
                    }
                }
            }
        });
        electors.push(Some(elector));
    }
    let outcome = hand_leadership_around(&mut electors, &log, ttl).await;
    for e in electors.into_iter().flatten() {
        e.shutdown().await;
    }
    let log = log
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    if let Some(two) = overlapping_terms(&log) {
        return Err(format!("two leaders at once: {two}"));
    }
    outcome
}

/// Waits for a leader three times, ending its leadership after it has been
/// seen leading a while: first by a graceful shutdown (the lease is released
/// and another elector may claim it at once), then by dropping it (no
/// release: the lease runs out).
async fn hand_leadership_around(
    electors: &mut [Option<Elector>],
    log: &TermLog,
    ttl: Duration,
) -> Outcome {
    let limit = ttl * 10 + Duration::from_secs(10);
    for round in 0..3 {
        let give_up = Instant::now() + limit;
        let leader = loop {
            // A term seen leading over at least a quarter of the TTL, of an
            // elector still running.
            let found = log
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .iter()
                .filter(|((i, _), _)| electors[*i].is_some())
                .find(|(_, seen)| {
                    seen.first()
                        .zip(seen.last())
                        .is_some_and(|(f, l)| l.before.duration_since(f.after) >= ttl / 4)
                })
                .map(|((i, _), _)| *i);
            if let Some(i) =
                found.filter(|i| electors[*i].as_ref().is_some_and(Elector::is_leading))
            {
                break i;
            }
            if Instant::now() >= give_up {
                return Err(format!(
                    "round {round}: no elector led for {:?} within {limit:?}",
                    ttl / 4
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let elector = electors[leader].take().ok_or("elector gone")?;
        if round == 0 {
            elector.shutdown().await;
        } else {
            drop(elector);
        }
    }
    Ok(())
}
