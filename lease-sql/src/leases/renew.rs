//! Renewal and release of a held slot: one statement each, matched on the
//! token.

use std::future::Future;
use std::task::Poll;

use leasehold_core::{Floor, Grant, PoolSpec, Reason, Release, Renewal};
use sqlx::Row;

use super::Leases;
use super::claim::{applied_ttl, store_time};
use crate::dialect::with_sqlx_bounds;
use crate::failure::Failure;
use crate::statements::floor_value;

with_sqlx_bounds!([impl<D> Leases<D>] {
    /// One renewal: the server's time when it renewed (µs since the Unix
    /// epoch), or `None` when the token no longer owns a live lease.
    async fn renew_once(
        &self,
        pool: &PoolSpec,
        grant: &Grant,
        ceiling: Floor,
    ) -> Result<Option<i64>, Failure> {
        let decode = |row: &D::Row, at: usize| -> Result<i64, Failure> {
            row.try_get(at)
                .map_err(|e| D::classify("renew: decoding the answer", &e))
        };
        if D::RENEW_AS_TEXT {
            let sql =
                self.sql
                    .renew_text::<D>(pool, grant.slot, grant.token.as_bytes(), ceiling.0);
            let rows = self
                .timed("renew", self.fetch_all(sqlx::raw_sql(&sql)))
                .await?;
            let row = rows
                .first()
                .ok_or_else(|| Failure::Final("renew: no answer to the row count".to_owned()))?;
            return (decode(row, 0)? > 0).then(|| decode(row, 1)).transpose();
        }
        let q = sqlx::query(&self.sql.renew)
            .bind(D::ttl(pool.ttl()))
            .bind(floor_value(ceiling.0))
            .bind(pool.name().as_str())
            .bind(D::slot(grant.slot))
            .bind(grant.token.as_bytes().as_slice());
        let rows = self.timed("renew", self.fetch_all(q)).await?;
        rows.first().map(|row| decode(row, 0)).transpose()
    }

    pub(super) async fn renew(&self, pool: &PoolSpec, grant: &Grant, ceiling: Floor) -> Renewal {
        // A server that is no longer the primary (a replica, or read-only,
        // where a privileged lease user could still write): the renewal is
        // not tried, or not counted, so the holder's lease runs out at its
        // local deadline rather than being renewed where the primary never
        // sees it. A weakened durability setting does not stop renewals:
        // the restart guard (DESIGN.md rule 12) holds claims back after a
        // crash-restart that loses what such a server acknowledged, so
        // stopping the holders would cost availability and protect nothing
        // more.
        let withheld = || {
            self.info
                .watched
                .not_primary()
                .map(|why| Renewal::Retry(Reason::new(format!("renewal not counted: {why}"))))
        };
        if withheld().is_some() {
            // Only the re-read, when due, can find the server writable again.
            self.watch_settings(pool.ttl()).await;
            if let Some(retry) = withheld() {
                return retry;
            }
            return self.renewal(pool, grant, ceiling).await;
        }
        // The re-read, when due, runs beside the renewal (on another lease
        // connection where there is one), adding no round trip to its
        // time; what it finds still decides this renewal's answer.
        let renewal = beside(
            self.watch_settings(pool.ttl()),
            self.renewal(pool, grant, ceiling),
        )
        .await;
        withheld().unwrap_or(renewal)
    }

    /// One renewal, answered as the holder takes it.
    async fn renewal(&self, pool: &PoolSpec, grant: &Grant, ceiling: Floor) -> Renewal {
        match self.renew_once(pool, grant, ceiling).await {
            Ok(None) => Renewal::Lost(self.lost_reason(pool, grant).await),
            Ok(Some(now)) => Renewal::renewed(applied_ttl::<D>(pool.ttl()))
                .with_store_time(store_time(now)),
            Err(f) => Renewal::Retry(Reason::new(self.failure_text(f).await)),
        }
    }

    pub(super) async fn release(&self, pool: &PoolSpec, grant: &Grant, issued: Floor) -> Release {
        let q = sqlx::query(&self.sql.release)
            .bind(floor_value(issued.0))
            .bind(pool.name().as_str())
            .bind(D::slot(grant.slot))
            .bind(grant.token.as_bytes().as_slice());
        match self.timed("release", self.execute(q)).await {
            Ok(0) => Release::NotHeld,
            Ok(_) => Release::Released,
            Err(f) => Release::Retry(Reason::new(self.failure_text(f).await)),
        }
    }
});

/// Runs `side` and `main` together; `main`'s output once both are done.
async fn beside<T>(side: impl Future<Output = ()>, main: impl Future<Output = T>) -> T {
    let mut side = std::pin::pin!(side);
    let mut main = std::pin::pin!(main);
    let (mut side_done, mut out) = (false, None);
    std::future::poll_fn(|cx| {
        if !side_done {
            side_done = side.as_mut().poll(cx).is_ready();
        }
        if out.is_none()
            && let Poll::Ready(v) = main.as_mut().poll(cx)
        {
            out = Some(v);
        }
        match (side_done, out.take()) {
            (true, Some(v)) => Poll::Ready(v),
            (_, v) => {
                out = v;
                Poll::Pending
            }
        }
    })
    .await
}
