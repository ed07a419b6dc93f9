//! Rows a claim or renewal cannot trust, planted directly in the lease
//! table: a negative floor, a fence at the largest the column holds, and in
//! SQLite (which stores whatever it is given) a floor or fence that is not
//! an integer. Claims refuse the slot with a final error that names the
//! pool, the slot and the repair, and leave the row as found; a renewal
//! over a damaged floor is `Lost` and leaves it too.

use std::sync::Arc;
use std::time::Duration;

use leasehold_conformance::{Target, ensure, fresh_pool, trials};
use leasehold_core::{
    AcquireError, Fence, FenceStamp, Floor, PoolName, PoolSpec, Release, Renewal, Strategy,
};
use leasehold_sql::{Engine, FenceTable, SqlError, SqlStrategy};

use super::{Sql, fresh_table, raw, write_once};

type Outcome = Result<(), String>;

/// Registers the tests on `target`; `sqlite` adds those of values only
/// SQLite can store.
pub(crate) fn register(target: Target, sqlite: bool) -> Target {
    let t = trials!(target;
        a_negative_floor_holds_claims_back_and_ends_a_renewal,
        a_fence_at_the_largest_the_column_holds_holds_claims_back,
        fenced_writes_never_saturate_a_fence_nor_read_a_negative_one_as_0,
    );
    if sqlite {
        trials!(t; a_floor_or_fence_that_is_not_an_integer_holds_claims_back)
    } else {
        t
    }
}

/// The largest value of the engine's fence column.
fn max_fence(s: &SqlStrategy) -> &'static str {
    match s.engine() {
        Engine::MySql => "18446744073709551615",
        _ => "9223372036854775807",
    }
}

/// `column` of `pool`'s slot `slot` as text, and whether its token is NULL.
async fn row(
    s: &SqlStrategy,
    pool: &PoolSpec,
    slot: u32,
    column: &str,
) -> Result<(String, bool), String> {
    let t = s.table();
    let p = pool.name();
    let sql = |text: &str| {
        format!(
            "SELECT CAST({column} AS {text}), CASE WHEN token IS NULL THEN 1 ELSE 0 END \
             FROM {t} WHERE pool = '{p}' AND slot = {slot}"
        )
    };
    let e = |e: sqlx::Error| format!("reading {column}: {e}");
    Ok(match s.engine() {
        Engine::Postgres => {
            let (v, free): (String, i32) = sqlx::query_as(&sql("TEXT"))
                .fetch_one(s.postgres().unwrap())
                .await
                .map_err(e)?;
            (v, free == 1)
        }
        Engine::MySql => {
            let (v, free): (String, i64) = sqlx::query_as(&sql("CHAR"))
                .fetch_one(s.mysql().unwrap())
                .await
                .map_err(e)?;
            (v, free == 1)
        }
        _ => {
            let (v, free): (String, i64) = sqlx::query_as(&sql("TEXT"))
                .fetch_one(s.sqlite().unwrap())
                .await
                .map_err(e)?;
            (v, free == 1)
        }
    })
}

/// Sets `column` of `pool`'s slot `slot` to the SQL expression `value`.
async fn plant(s: &SqlStrategy, pool: &PoolSpec, slot: u32, column: &str, value: &str) -> Outcome {
    let t = s.table();
    raw(
        s,
        &format!(
            "UPDATE {t} SET {column} = {value} WHERE pool = '{}' AND slot = {slot}",
            pool.name()
        ),
    )
    .await
}

/// Expects a claim of `pool` to be refused over slot 0's damaged record,
/// with a message that names the pool, the slot, every one of `needles`
/// and the repair.
async fn expect_refused(s: &SqlStrategy, pool: &PoolSpec, needles: &[&str]) -> Outcome {
    match s.acquire(pool, Floor(1_000)).await {
        Err(e @ AcquireError::DamagedRecord { slot: Some(0), .. }) => {
            ensure!(!e.is_retryable(), "a damaged record must be final: {e}");
            let msg = e.to_string();
            let name = format!("{:?}", pool.name().as_str());
            for needle in [name.as_str(), "slot 0", "UPDATE"].iter().chain(needles) {
                ensure!(msg.contains(needle), "the refusal lacks {needle:?}: {msg}");
            }
            Ok(())
        }
        other => Err(format!(
            "a claim over slot 0's damaged record answered {other:?}; it must be refused"
        )),
    }
}

/// A negative floor says nothing of what earlier holders stamped (DESIGN.md
/// rule 8): read as 0, the next holder could issue their timestamps again.
/// A claim refuses the slot and leaves the row as found; a holder whose
/// floor turns negative meanwhile loses its lease at the next renewal,
/// which leaves it too (this holder's ceiling can be below the slot's real
/// floor while it waits for its clock); `inspect` names it. A release then
/// writes what the holder knows (its grant's floor and what it issued), a
/// floor the next claim can trust again.
async fn a_negative_floor_holds_claims_back_and_ends_a_renewal(b: Arc<Sql>) -> Outcome {
    let s = b.strategy().await?;
    let pool = fresh_pool(1, Duration::from_secs(60))?;
    s.ensure_new_pool(&pool).await.map_err(|e| e.to_string())?;
    plant(&s, &pool, 0, "floor_ms", "-5").await?;
    expect_refused(&s, &pool, &["floor_ms", "-5"]).await?;
    let (floor, free) = row(&s, &pool, 0, "floor_ms").await?;
    ensure!(
        floor == "-5" && free,
        "the refused claim changed the row: floor {floor}, free {free}"
    );
    // Repaired, claimed, then damaged under the holder.
    plant(&s, &pool, 0, "floor_ms", "7000").await?;
    let g = s
        .acquire(&pool, Floor(1_000))
        .await
        .map_err(|e| e.to_string())?;
    ensure!(g.floor == Floor(7000), "grant floor {:?}", g.floor);
    plant(&s, &pool, 0, "floor_ms", "-5").await?;
    let inspected = s.inspect(&pool).await;
    ensure!(
        inspected
            .as_ref()
            .is_err_and(|e| e.to_string().contains("slot 0") && e.to_string().contains("-5")),
        "inspect over the negative floor answered {inspected:?}"
    );
    match s.renew(&pool, &g, Floor(9_000)).await {
        Renewal::Lost(reason) => {
            let text = reason.to_string();
            for needle in ["floor_ms", "-5", "slot 0", "UPDATE"] {
                ensure!(text.contains(needle), "the loss lacks {needle:?}: {text}");
            }
        }
        other => {
            return Err(format!(
                "a renewal over a negative floor answered {other:?}"
            ));
        }
    }
    let (floor, _) = row(&s, &pool, 0, "floor_ms").await?;
    ensure!(floor == "-5", "the lost renewal wrote floor {floor}");
    let released = s.release(&pool, &g, Floor(8_000)).await;
    ensure!(released == Release::Released, "release: {released:?}");
    let next = s
        .acquire(&pool, Floor(1_000))
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        next.floor == Floor(8_000),
        "after the release the grant floor is {:?}, not what was issued",
        next.floor
    );
    s.close().await;
    Ok(())
}

/// A fence at the largest value the column holds cannot grow (DESIGN.md
/// rule 7): `fence + 1` overflows the column (PostgreSQL and MySQL fail
/// the claim; SQLite turns it into a float that reads back as the same
/// fence). The claim refuses the slot, naming the fence, and leaves the
/// row as found.
async fn a_fence_at_the_largest_the_column_holds_holds_claims_back(b: Arc<Sql>) -> Outcome {
    let s = b.strategy().await?;
    let pool = fresh_pool(1, Duration::from_secs(60))?;
    s.ensure_new_pool(&pool).await.map_err(|e| e.to_string())?;
    let max = max_fence(&s);
    plant(&s, &pool, 0, "fence", max).await?;
    expect_refused(&s, &pool, &["fence", max]).await?;
    let (fence, free) = row(&s, &pool, 0, "fence").await?;
    ensure!(
        fence == max && free,
        "the refused claim changed the row: fence {fence}, free {free}"
    );
    // One below the largest still grows, to the largest.
    let below = if max.starts_with('1') {
        "18446744073709551614"
    } else {
        "9223372036854775806"
    };
    plant(&s, &pool, 0, "fence", below).await?;
    let g = s
        .acquire(&pool, Floor(1_000))
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        g.fence.0.to_string() == max,
        "the fence after {below} is {}",
        g.fence
    );
    s.close().await;
    Ok(())
}

/// SQLite stores text or a float in an INTEGER column as it is given, and
/// text compares above every number: `MAX(floor_ms, ceiling)` would keep
/// it, and reading it as a number would fail after the claim had written.
/// Claims refuse the slot before they write, renewals end the lease, both
/// naming the value.
async fn a_floor_or_fence_that_is_not_an_integer_holds_claims_back(b: Arc<Sql>) -> Outcome {
    let s = b.strategy().await?;
    let pool = fresh_pool(1, Duration::from_secs(60))?;
    s.ensure_new_pool(&pool).await.map_err(|e| e.to_string())?;
    for (column, value, shown) in [
        ("floor_ms", "'abc'", "'abc'"),
        ("floor_ms", "1.5", "1.5"),
        ("fence", "'x'", "'x'"),
    ] {
        plant(&s, &pool, 0, column, value).await?;
        expect_refused(&s, &pool, &[column, shown]).await?;
        let (now, free) = row(&s, &pool, 0, column).await?;
        ensure!(
            free && now == value.trim_matches('\''),
            "the refused claim changed {column}: {now}, free {free}"
        );
        plant(&s, &pool, 0, column, "0").await?;
    }
    let g = s
        .acquire(&pool, Floor(1_000))
        .await
        .map_err(|e| e.to_string())?;
    plant(&s, &pool, 0, "floor_ms", "'abc'").await?;
    match s.renew(&pool, &g, Floor(9_000)).await {
        Renewal::Lost(reason) => ensure!(
            reason.to_string().contains("'abc'"),
            "the loss does not name the floor: {reason}"
        ),
        other => return Err(format!("a renewal over floor 'abc' answered {other:?}")),
    }
    s.close().await;
    Ok(())
}

/// A fence the fence table's column cannot hold (above `i64::MAX` on
/// PostgreSQL and SQLite) was saturated to the largest it holds, so two
/// such fences compared equal and a stale one passed; it is refused
/// instead. A negative fence in the table (which every fence passes, and
/// which something other than leasehold wrote) was cited as 0 when a write
/// was refused; it is named instead.
async fn fenced_writes_never_saturate_a_fence_nor_read_a_negative_one_as_0(b: Arc<Sql>) -> Outcome {
    let s = b.strategy().await?;
    let t = fresh_table("fences");
    let fences = FenceTable::new(t.clone()).map_err(|e| e.to_string())?;
    fences.ensure(&s).await.map_err(|e| e.to_string())?;
    let billing = PoolName::new("billing").map_err(|e| e.to_string())?;
    let stamp = |f: u64| FenceStamp::new(billing.clone(), 0, Fence(f));
    let signed = s.engine() != Engine::MySql;
    let r = write_once(&s, &fences, "big", None, &stamp(i64::MAX as u64)).await?;
    ensure!(r.is_ok(), "fence i64::MAX: {r:?}");
    let r = write_once(&s, &fences, "big", None, &stamp(u64::MAX)).await?;
    match (signed, &r) {
        (true, Err(e @ SqlError::Config(_))) => ensure!(
            e.to_string().contains(&u64::MAX.to_string()),
            "the refusal does not name the fence: {e}"
        ),
        (false, Ok(())) => {}
        _ => return Err(format!("fence u64::MAX on {:?}: {r:?}", s.engine())),
    }
    // Written by something else: another pool's negative fence.
    raw(
        &s,
        &format!("INSERT INTO {t} (resource, fence, pool, slot) VALUES ('neg', -5, 'other', 0)"),
    )
    .await
    .or_else(|e| if signed { Err(e) } else { Ok(()) })?;
    if signed {
        let r = write_once(&s, &fences, "neg", None, &stamp(7)).await?;
        match r {
            Err(e @ SqlError::FenceSchema { .. }) => ensure!(
                e.to_string().contains("-5"),
                "the refusal does not name the fence: {e}"
            ),
            other => return Err(format!("a write over fence -5: {other:?}")),
        }
    }
    s.close().await;
    Ok(())
}
