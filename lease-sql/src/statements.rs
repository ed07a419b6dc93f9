//! Every statement the lease operations send, built once per strategy from
//! the validated table name; the parts that differ per engine come from its
//! [`Dialect`].

use leasehold_core::{MAX_TTL, PoolSpec};

use crate::dialect::Dialect;
use crate::ident::{TableName, hex};

/// The columns of a leasehold-sql 0.1 lease table
/// (`migrations/<engine>/0001_leasehold_leases.sql`).
pub(crate) const COLUMNS: [&str; 8] = [
    "pool",
    "slot",
    "token",
    "fence",
    "holder",
    "expires_at",
    "acquired_at",
    "renewed_at",
];

/// The hand-over floor columns added in 0.2
/// (`migrations/<engine>/0002_leasehold_floor.sql`; `ensure_table` adds them
/// to a 0.1 table): `floor_ms`, the slot's floor (Unix ms, DESIGN.md rule 8:
/// the highest timestamp any holder may have issued), and `grant_floor_ms`,
/// the floor the slot had when its current holder claimed it (what the claim
/// returns; a column because SQLite's `RETURNING` sees only new values).
pub(crate) const FLOOR_COLUMNS: [&str; 2] = ["floor_ms", "grant_floor_ms"];

/// The restart-span column added in 0.3
/// (`migrations/<engine>/0003_leasehold_span.sql`; `ensure_table` adds it):
/// `span_ms`, the longest restart span (TTL plus twice `max_clock_skew`, ms)
/// of any holder that claimed the slot. A server that can forget holds
/// claims back for the largest over the pool's rows after it restarts
/// (DESIGN.md rule 12), so a holder with a longer TTL or skew than the
/// claimer is waited out too.
pub(crate) const SPAN_COLUMNS: [&str; 1] = ["span_ms"];

/// The ID-format column added in 0.3
/// (`migrations/<engine>/0005_leasehold_id_format.sql`; `ensure_table` adds
/// it): `id_format`, the canonical text of the ID format a pool's holders
/// generate, on the pool's own row ([`POOL_ROW`]); NULL on slot rows.
pub(crate) const ID_FORMAT_COLUMNS: [&str; 1] = ["id_format"];

/// The slot number of a pool's own row, which records the pool's ID format.
///
/// Why a row per pool and not a column on the slot rows: the check must be
/// decided on one row that every claim of the pool meets. With the format
/// on the slot rows, a claim of slot 3 would have to look for another
/// format on the other rows, and that read (a statement snapshot in
/// PostgreSQL READ COMMITTED, a consistent read in InnoDB) does not see a
/// concurrent claim of slot 5 that has not committed yet: two formats could
/// each claim a slot of a fresh pool. The pool's row is instead inserted by
/// the first claim that declares a format, and a second inserter of the same
/// key waits for the first to commit (PostgreSQL's speculative insertion,
/// InnoDB's duplicate-key lock, SQLite's single writer) and then finds its
/// row; the claim reads the record in a later statement of the same
/// transaction, and a record once written is never changed, so what the
/// claim read cannot go stale before it commits.
///
/// The number lies beyond every slot a pool can have (at most
/// [`leasehold_core::MAX_POOL_SIZE`]) and fits every engine's slot column,
/// so no claim, count, renewal, revoke or inspection of slots reaches the
/// row (inspection bounds it explicitly, and its fence stays 0 as well).
pub(crate) const POOL_ROW: u32 = 2_147_483_647;

/// The slot number of a pool's record row: in `acquired_at`, since when
/// claims may trust that the pool's rows were not deleted while holders ran
/// (see [`Statements::record_pool`]). A row apart from [`POOL_ROW`], whose
/// insertion decides which ID format a pool records first. Like it, beyond
/// every slot a pool can have, with fence 0; the lowest of a pool's own
/// rows, so `slot < RECORD_ROW` selects slot rows only.
pub(crate) const RECORD_ROW: u32 = POOL_ROW - 1;

/// The token a revoke leaves in place of the holder's: all zeros, which
/// `Token::random` (128 bits from the OS) never matches in practice. The
/// tombstone keeps the revoked lease's expiry, so the slot stays taken until
/// then, and the holder's renewal, which matches its own token, is `Lost`.
pub(crate) const TOMBSTONE: [u8; 16] = [0; 16];

/// The longest holder identity stored (longer ones are cut on a char boundary).
pub(crate) const HOLDER_MAX: usize = 255;

/// Statements for one engine and table.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) table: String,
    /// Binds the TTL, the ceiling, pool, slot and token; answers the
    /// server's time when it renewed (unused where
    /// [`Dialect::RENEW_AS_TEXT`]).
    pub(crate) renew: String,
    /// Binds what was issued, pool, slot and token.
    pub(crate) release: String,
    /// Binds the pool and slot.
    pub(crate) revoke: String,
    /// Binds the pool and the pool's size.
    pub(crate) count: String,
    /// Binds the pool: every slot ever claimed, with its token, fence,
    /// holder, floor, and the µs until expiry, since renewal and since the
    /// claim, on the server's clock.
    pub(crate) inspect: String,
    /// Binds the pool and its size: the lowest free slot whose floor or
    /// fence a claim cannot trust, with its floor and fence as text and
    /// whether each is usable (1 or 0). A claim picks the lowest free slot
    /// and claims it only when both are, so this names what held it back.
    pub(crate) damaged: String,
    /// Binds pool, slot and token: the floor, as text, of a live lease of
    /// that token whose floor a renewal cannot trust; what a renewal that
    /// matched no row reads to say why.
    pub(crate) damaged_floor: String,
    /// The server as it described itself (picks the restart guard's source).
    version: String,
    /// Whether claims wait out the restart guard (set at connect: the server
    /// can forget acknowledged writes and the guard is not turned off).
    pub(crate) guarded: bool,
    /// Whether claims wait out the promotion guard (set at connect: the
    /// engine reads its incarnation and the guard is not turned off).
    pub(crate) promotion_guarded: bool,
    /// Whether claims wait out a pool whose record is gone (set at connect:
    /// on unless the restart guard is turned off).
    pub(crate) wipe_guarded: bool,
}

impl Statements {
    pub(crate) fn new<D: Dialect>(table: &TableName, version: &str) -> Self {
        let t = table.quoted(D::QUOTE);
        let now = D::NOW;
        let p = D::param;
        // Renew and release match (pool, slot, token) on a lease the database
        // still considers live: a renewal whose answer was lost is safe to
        // retry. Each writes the floor in the same statement (rule 8): renew
        // raises it to the holder's ceiling, release sets it to what was issued.
        // A renewal raises only a floor it can trust: over a damaged one
        // it matches no row (`Lost`), and the floor stays as found, for an
        // operator to repair, rather than turning into this holder's
        // ceiling, which can be below the floor the slot had when it was
        // claimed (the holder may still be waiting for its clock to pass
        // it).
        let usable_floor = D::usable_floor();
        let expires = D::expires_after(&D::ttl_param(1));
        let raised = D::greatest("floor_ms", &D::floor_param(2));
        let (pool, slot, token) = (p(3), p(4), p(5));
        let renew = format!(
            "UPDATE {t} SET expires_at = {expires}, renewed_at = {now}, floor_ms = {raised} \
             WHERE pool = {pool} AND slot = {slot} AND token = {token} AND expires_at > {now} \
             AND {usable_floor} RETURNING {}",
            D::NOW_MICROS
        );
        let issued = D::floor_param(1);
        let (pool, slot, token) = (p(2), p(3), p(4));
        let release = format!(
            "UPDATE {t} SET token = NULL, expires_at = {now}, floor_ms = {issued} \
             WHERE pool = {pool} AND slot = {slot} AND token = {token} AND expires_at > {now}"
        );
        // A tombstone in place of a live lease's token, keeping its expiry.
        let (pool, slot) = (p(1), p(2));
        let revoke = format!(
            "UPDATE {t} SET token = {} WHERE pool = {pool} AND slot = {slot} \
             AND token IS NOT NULL AND expires_at > {now}",
            D::token_literal(&hex(&TOMBSTONE))
        );
        let count = format!("SELECT COUNT(*) FROM {t} WHERE pool = {pool} AND slot < {slot}");
        let inspect = format!(
            "SELECT slot, token, fence, holder, floor_ms, {}, {}, {} FROM {t} \
             WHERE pool = {} AND fence > 0 AND slot < {RECORD_ROW} ORDER BY slot",
            D::micros_between(now, "expires_at"),
            D::micros_between("renewed_at", now),
            D::micros_between("acquired_at", now),
            p(1)
        );
        let usable_fence = D::usable_fence();
        let damaged = format!(
            "SELECT slot, {}, {}, {}, {} FROM {t} \
             WHERE pool = {} AND slot < {} AND (token IS NULL OR expires_at <= {now}) \
             AND NOT ({usable_floor} AND {usable_fence}) ORDER BY slot LIMIT 1",
            D::shown("floor_ms"),
            D::shown("fence"),
            D::shown(&format!("CASE WHEN {usable_floor} THEN 1 ELSE 0 END")),
            D::shown(&format!("CASE WHEN {usable_fence} THEN 1 ELSE 0 END")),
            p(1),
            p(2)
        );
        let damaged_floor = format!(
            "SELECT {} FROM {t} WHERE pool = {} AND slot = {} AND token = {} \
             AND expires_at > {now} AND NOT ({usable_floor})",
            D::shown("floor_ms"),
            p(1),
            p(2),
            p(3)
        );
        Self {
            table: t,
            renew,
            release,
            revoke,
            count,
            inspect,
            damaged,
            damaged_floor,
            version: version.to_owned(),
            guarded: false,
            promotion_guarded: false,
            wipe_guarded: false,
        }
    }

    /// The pool's longest restart span in microseconds, as an SQL integer
    /// expression: the largest `span_ms` any holder of the pool claimed with,
    /// or this claimer's own ([`PoolSpec::restart_span`]: its TTL plus twice
    /// its `max_clock_skew`) if that is longer.
    fn span_micros<D: Dialect>(&self, spec: &PoolSpec) -> String {
        D::greatest(
            &span_millis(spec).saturating_mul(1000).to_string(),
            &format!(
                "COALESCE((SELECT MAX(span_ms) FROM {} WHERE pool = '{}'), 0) * 1000",
                self.table,
                spec.name().as_str()
            ),
        )
    }

    /// The promotion guard's record, written ahead of a claim in the
    /// claim's own round trip: the table's row of [`INCARNATION_POOL`] holds
    /// the server's incarnation (in `holder`) and when a claim first saw it
    /// (in `acquired_at`). A missing record is created (with a time long
    /// past on a server that never changed, or where the engine cannot tell
    /// a first incarnation: a fresh table waits for nothing); a record of
    /// another incarnation is replaced with now. Nothing is written, or
    /// locked, when the record is current ([`Dialect::record_incarnation`]).
    fn record_incarnation<D: Dialect>(&self) -> Option<String> {
        if !self.promotion_guarded {
            return None;
        }
        let inc = D::incarnation(&self.version)?;
        let (cur, long_ago) = (inc.current, inc.long_ago);
        let since = match inc.first {
            Some(first) => format!(
                "CASE WHEN {cur} = {first} THEN {long_ago} ELSE {} END",
                D::NOW
            ),
            None => long_ago.to_owned(),
        };
        Some(D::record_incarnation(
            &self.table,
            &incarnation_row(),
            &format!("'{INCARNATION_POOL}', {POOL_ROW}, {cur}, {since}"),
            cur,
        ))
    }

    /// The promotion guard's microseconds until grants resume for `spec`:
    /// the pool's restart span after the claim that first saw the server's
    /// current incarnation (a full span from now if no record of it is
    /// there: conservative). A record older than any restart span can be
    /// ([`LONGEST_SPAN_MICROS`]), as a never-changed server's is, answers
    /// at once without reading the pool's spans, which every row the pool's
    /// claimers are changing would make each claim reconstruct.
    fn promotion_resume_in<D: Dialect>(&self, spec: &PoolSpec) -> Option<String> {
        if !self.promotion_guarded {
            return None;
        }
        let inc = D::incarnation(&self.version)?;
        let span = self.span_micros::<D>(spec);
        Some(format!(
            "COALESCE((SELECT CASE WHEN {} > {LONGEST_SPAN_MICROS} THEN -1 ELSE {} END \
             FROM {} WHERE {} AND holder = {}), {span})",
            D::micros_between("acquired_at", D::NOW),
            D::micros_until("acquired_at", &span),
            self.table,
            incarnation_row(),
            inc.current,
        ))
    }

    /// The wipe guard's microseconds until grants resume for `spec`: the
    /// pool's restart span after its record's time, the record being the
    /// `acquired_at` of the pool's record row ([`RECORD_ROW`]; see
    /// [`Statements::record_pool`]). A pool without a record (no row, one
    /// without a time, or one written for another table of the same name:
    /// [`Dialect::table_identity`]) answers a full span: its rows may have
    /// been deleted, with every lease of it, while holders still generate,
    /// and nothing says since when, so nothing is granted until a claim has
    /// recorded when it first saw them gone and a span has passed since. A
    /// record older than any restart span ([`LONGEST_SPAN_MICROS`]: a pool
    /// declared new, or recorded long ago) answers at once, without reading
    /// the pool's spans.
    fn pool_resume_in<D: Dialect>(&self, spec: &PoolSpec) -> Option<String> {
        if !self.wipe_guarded {
            return None;
        }
        let span = self.span_micros::<D>(spec);
        let since = D::micros_between("acquired_at", D::NOW);
        Some(format!(
            "COALESCE((SELECT CASE WHEN acquired_at IS NULL THEN {span} \
             WHEN {since} > {LONGEST_SPAN_MICROS} THEN -1 ELSE ({span}) - {since} END \
             FROM {} WHERE {} AND {}), {span})",
            self.table,
            record_row(spec.name().as_str()),
            self.same_table::<D>(),
        ))
    }

    /// The condition that a record row was written for this very table
    /// ([`Dialect::table_identity`], kept in `holder`): always true where
    /// the engine has no identity.
    fn same_table<D: Dialect>(&self) -> String {
        match D::table_identity(&self.table) {
            Some(identity) => format!("COALESCE(holder = {identity}, 1 = 0)"),
            None => "1 = 1".to_owned(),
        }
    }

    /// Binds nothing: one row of what the guards read (doctor), for
    /// `pool` or, without one, for no pool: the server's time
    /// ([`Dialect::NOW_MICROS`]); the restart guard's microseconds until
    /// grants resume with no span and with the pool's longest recorded one
    /// (0 and 0 when the guard is off); that span in ms; the promotion
    /// guard's record (its incarnation, its age in µs) and the server's
    /// incarnation now (NULL when the guard is off); the pool's record rows,
    /// those written for this table, and the age of its record in µs.
    pub(crate) fn guard_reading<D: Dialect>(&self, pool: Option<&str>) -> String {
        let t = &self.table;
        // Pool names hold no `~`: no pool's rows meet this one.
        let pool = pool.unwrap_or("~none");
        let zero = D::micros_between(D::NOW, D::NOW);
        let span = format!("COALESCE((SELECT MAX(span_ms) FROM {t} WHERE pool = '{pool}'), 0)");
        let (restart_start, restart_span) = match self.guarded {
            true => (
                D::resume_in_micros("0", &self.version).unwrap_or_else(|| zero.clone()),
                D::resume_in_micros(&format!("{span} * 1000"), &self.version)
                    .unwrap_or_else(|| zero.clone()),
            ),
            false => (zero.clone(), zero.clone()),
        };
        let current = match (self.promotion_guarded, D::incarnation(&self.version)) {
            (true, Some(inc)) => D::format_text(inc.current),
            _ => format!("(SELECT {} FROM {t} WHERE 1 = 0)", D::format_text("holder")),
        };
        let age = D::micros_between("acquired_at", D::NOW);
        let inc = incarnation_row();
        let rec = record_row(pool);
        let same = self.same_table::<D>();
        format!(
            "SELECT {now}, {restart_start}, {restart_span},              (SELECT MAX(span_ms) FROM {t} WHERE pool = '{pool}'),              (SELECT {holder} FROM {t} WHERE {inc}),              (SELECT {age} FROM {t} WHERE {inc}),              {current},              (SELECT COUNT(*) FROM {t} WHERE {rec}),              (SELECT COUNT(*) FROM {t} WHERE {rec} AND {same}),              (SELECT {age} FROM {t} WHERE {rec} AND {same})",
            now = D::NOW_MICROS,
            holder = D::format_text("holder"),
        )
    }

    /// Binds nothing: 1 when `pool` has its record (its record row with a
    /// time, written for this table), 0 when not.
    pub(crate) fn pool_recorded<D: Dialect>(&self, pool: &str) -> String {
        format!(
            "SELECT COUNT(*) FROM {} WHERE {} AND acquired_at IS NOT NULL AND {}",
            self.table,
            record_row(pool),
            self.same_table::<D>(),
        )
    }

    /// The statements that write `pool`'s record: its record row ([`RECORD_ROW`])
    /// with `since` (an SQL time: now for a pool first seen without a
    /// record, [`Dialect::LONG_AGO`] for a pool declared new) in
    /// `acquired_at`, and the table's identity, where the engine has one
    /// ([`Dialect::table_identity`]), in `holder`. The row is inserted if
    /// missing; a row without a time (written by hand) or written for
    /// another table of the same name (a restored one) gets `since`; a
    /// record of this table keeps its time, unless `overwrite` (a pool
    /// declared new: nothing waits).
    pub(crate) fn record_pool<D: Dialect>(
        &self,
        pool: &str,
        since: &str,
        overwrite: bool,
    ) -> [String; 2] {
        let t = &self.table;
        let row = record_row(pool);
        let identity = D::table_identity(t).unwrap_or_else(|| "NULL".to_owned());
        let unless = if overwrite {
            String::new()
        } else {
            format!(
                " AND NOT (acquired_at IS NOT NULL AND {})",
                self.same_table::<D>()
            )
        };
        [
            D::insert_missing(
                t,
                "pool, slot, acquired_at, holder",
                &format!("('{pool}', {RECORD_ROW}, {since}, {identity})"),
                "pool, slot",
            ),
            format!(
                "UPDATE {t} SET acquired_at = {since}, holder = {identity} WHERE {row}{unless}"
            ),
        ]
    }

    /// The restart guard's microseconds until grants resume for `spec` (see
    /// [`Dialect::resume_in_micros`]), when the guard is on.
    ///
    /// The guard spans the pool's longest restart span: the largest
    /// `span_ms` any holder of the pool claimed with, or this claimer's own
    /// ([`PoolSpec::restart_span`]: its TTL plus twice its `max_clock_skew`)
    /// if that is longer. By then every lease of the server's previous run
    /// has passed its holder's deadline, and since the floor a lost renewal
    /// would have raised may be lost too, a new holder starts later, on any
    /// clock within the pool's skew bound, than the last timestamp those
    /// holders could issue.
    pub(crate) fn resume_in<D: Dialect>(&self, spec: &PoolSpec) -> Option<String> {
        let restart = if self.guarded {
            D::resume_in_micros(&self.span_micros::<D>(spec), &self.version)
        } else {
            None
        };
        [
            self.promotion_resume_in::<D>(spec),
            self.pool_resume_in::<D>(spec),
        ]
        .into_iter()
        .flatten()
        .fold(restart, |all, b| match all {
            Some(a) => Some(D::greatest(&a, &b)),
            None => Some(b),
        })
    }

    /// The acquisition, as one text statement (or, on MySQL, one
    /// multi-statement transaction) carrying every value as a literal: one
    /// round trip even on a fresh connection, where a prepared statement would
    /// need two. Every literal is an integer, hex, or a validated pool name. It
    /// claims the lowest free slot in `from..to`, raises its floor to
    /// `ceiling` and answers slot, fence and the floor from before.
    pub(crate) fn acquire<D: Dialect>(
        &self,
        spec: &PoolSpec,
        token: &[u8; 16],
        ceiling: u64,
        from: u32,
        to: u32,
    ) -> String {
        let t = &self.table;
        let now = D::NOW;
        let pool = spec.name().as_str();
        let range = if from == 0 {
            format!("slot < {to}")
        } else {
            format!("slot >= {from} AND slot < {to}")
        };
        let mut free =
            format!("pool = '{pool}' AND {range} AND (token IS NULL OR expires_at <= {now})");
        // No grant until every lease of the server's previous run, or of
        // the primary it replaced, has expired.
        if let Some(resume_in) = self.resume_in::<D>(spec) {
            free.push_str(&format!(" AND {resume_in} <= 0"));
        }
        let token = D::token_literal(&hex(token));
        let format = spec
            .id_format()
            .map(|f| D::format_literal(&hex(f.text().as_bytes())));
        // `grant_floor_ms` comes first: MySQL assigns left to right, reading
        // columns already assigned; PostgreSQL and SQLite read the old row.
        // The fence is at least the server's clock in microseconds, so a
        // fence the server forgot (a crash before its write was durable, a
        // restore, a truncated table) is never issued again: the restart
        // guard keeps claims back for seconds after such a loss, and the
        // clock has moved past every fence issued before it (DESIGN.md
        // rule 7).
        let set = format!(
            "grant_floor_ms = floor_ms, floor_ms = {}, \
             token = {token}, fence = {}, holder = {}, expires_at = {}, \
             acquired_at = {now}, renewed_at = {now}, span_ms = {}",
            D::greatest("floor_ms", &floor_value(ceiling).to_string()),
            D::greatest("fence + 1", D::NOW_MICROS),
            D::holder_literal(&hex(holder(spec).as_bytes())),
            D::expires_after(&D::ttl_literal(spec.ttl())),
            D::greatest("span_ms", &span_millis(spec).to_string()),
        );
        let usable = format!("{} AND {}", D::usable_floor(), D::usable_fence());
        let claim = D::acquire(
            t,
            pool,
            &free,
            &usable,
            &set,
            &token,
            D::NOW_MICROS,
            format.as_deref(),
        );
        match self.record_incarnation::<D>() {
            Some(record) => format!("{record}; {claim}"),
            None => claim,
        }
    }

    /// The renewal as text with every value a literal, then the rows it
    /// matched and the server's time: one round trip where the engine has no
    /// `UPDATE … RETURNING` ([`Dialect::RENEW_AS_TEXT`]). Every literal is an
    /// integer, hex, or a validated pool name.
    pub(crate) fn renew_text<D: Dialect>(
        &self,
        spec: &PoolSpec,
        slot: u32,
        token: &[u8; 16],
        ceiling: u64,
    ) -> String {
        let (t, now) = (&self.table, D::NOW);
        format!(
            "UPDATE {t} SET expires_at = {}, renewed_at = {now}, floor_ms = {} \
             WHERE pool = '{}' AND slot = {slot} AND token = {} AND expires_at > {now} \
             AND {}; SELECT ROW_COUNT(), {}",
            D::expires_after(&D::ttl_literal(spec.ttl())),
            D::greatest("floor_ms", &floor_value(ceiling).to_string()),
            spec.name().as_str(),
            D::token_literal(&hex(token)),
            D::usable_floor(),
            D::NOW_MICROS,
        )
    }

    /// Inserts the missing rows `from..to` of `pool` (idempotent).
    pub(crate) fn populate<D: Dialect>(&self, pool: &str, from: u32, to: u32) -> String {
        let values: Vec<String> = (from..to).map(|s| format!("('{pool}', {s})")).collect();
        D::insert_missing(&self.table, "pool, slot", &values.join(", "), "pool, slot")
    }
}

/// The record of `pool`'s ID format `literal` (see
/// [`Dialect::format_literal`]) in the lease table `t` (quoted): inserts the
/// pool's row ([`POOL_ROW`]) with it unless the row exists, in which case
/// the format recorded first stays. A concurrent inserter waits for the
/// first to commit and then inserts nothing.
pub(crate) fn record_format<D: Dialect>(t: &str, pool: &str, literal: &str) -> String {
    D::insert_missing(
        t,
        "pool, slot, id_format",
        &format!("('{pool}', {POOL_ROW}, {literal})"),
        "pool, slot",
    )
}

/// The longest restart span any holder can have, in microseconds: a TTL
/// of at most [`MAX_TTL`] plus twice a clock skew of at most the TTL.
pub(crate) const LONGEST_SPAN_MICROS: u128 = MAX_TTL.as_micros() * 3;

/// The name under which the promotion guard keeps the table's record of
/// the server's incarnation (a row of slot [`POOL_ROW`]). Not a valid pool
/// name (`~`), so no pool's rows meet it.
pub(crate) const INCARNATION_POOL: &str = "~incarnation";

/// The condition that selects the promotion guard's record.
fn incarnation_row() -> String {
    pool_row(INCARNATION_POOL)
}

/// The condition that selects `pool`'s record row ([`RECORD_ROW`]).
fn record_row(pool: &str) -> String {
    format!("pool = '{pool}' AND slot = {RECORD_ROW}")
}

/// The condition that selects `pool`'s own row ([`POOL_ROW`]).
pub(crate) fn pool_row(pool: &str) -> String {
    format!("pool = '{pool}' AND slot = {POOL_ROW}")
}

/// The holder's restart span as stored in `span_ms`: whole milliseconds,
/// rounded up.
pub(crate) fn span_millis(spec: &PoolSpec) -> i64 {
    i64::try_from(spec.restart_span().as_micros().div_ceil(1000)).unwrap_or(i64::MAX)
}

/// A floor as stored: Unix ms, capped to the signed 64-bit columns.
pub(crate) fn floor_value(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// `holder` cut to [`HOLDER_MAX`] bytes on a char boundary.
pub(crate) fn holder(spec: &PoolSpec) -> &str {
    let h = spec.holder();
    let end = h
        .char_indices()
        .map(|(at, c)| at + c.len_utf8())
        .take_while(|&end| end <= HOLDER_MAX)
        .last()
        .unwrap_or(0);
    h.get(..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::dialect::FENCE_ISSUER_COLUMNS;

    /// The migrations shipped for one engine, in order.
    #[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    struct Shipped {
        leases: &'static str,
        floor: &'static str,
        span: &'static str,
        issuer: &'static str,
        format: &'static str,
    }

    /// A migration's statements, without its comment lines.
    #[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    fn body(file: &str) -> String {
        file.lines()
            .filter(|l| !l.starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The lease table's migrations (0001, 0002, 0003, 0005) against the
    /// DDL and column additions of `D`.
    #[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    fn lease_migrations_match<D: Dialect>(m: &Shipped) {
        let t = TableName::default().quoted(D::QUOTE);
        // 0001 is the 0.1 table: today's DDL without the floor columns.
        let ddl = D::create_table(&t);
        let v1: Vec<&str> = ddl
            .lines()
            .filter(|l| {
                !l.contains("floor_ms") && !l.contains("span_ms") && !l.contains("id_format")
            })
            .collect();
        assert_eq!(
            body(m.leases).trim().trim_end_matches(';'),
            v1.join("\n"),
            "{} 0001 migration drifted",
            D::ENGINE
        );
        // 0002 adds exactly the floor columns, as `ensure_table` does.
        let adds: Vec<String> = FLOOR_COLUMNS
            .iter()
            .map(|c| format!("{};", D::add_floor_column(&t, c)))
            .collect();
        assert_eq!(
            body(m.floor).trim(),
            adds.join("\n"),
            "{} 0002 migration drifted",
            D::ENGINE
        );
        // 0003 adds exactly the span column.
        let adds: Vec<String> = SPAN_COLUMNS
            .iter()
            .map(|c| format!("{};", D::add_floor_column(&t, c)))
            .collect();
        assert_eq!(
            body(m.span).trim(),
            adds.join("\n"),
            "{} 0003 migration drifted",
            D::ENGINE
        );
        // 0005 adds exactly the ID-format column.
        assert_eq!(
            body(m.format).trim(),
            format!("{};", D::add_format_column(&t)),
            "{} 0005 migration drifted",
            D::ENGINE
        );
        for c in FLOOR_COLUMNS
            .iter()
            .chain(&SPAN_COLUMNS)
            .chain(&ID_FORMAT_COLUMNS)
        {
            assert!(ddl.contains(c), "{} DDL lacks {c}", D::ENGINE);
        }
        let typed = format!("id_format      {}", D::FORMAT_TYPE);
        assert!(ddl.contains(&typed), "{} DDL lacks {typed}", D::ENGINE);
    }

    /// 0004 adds exactly the fence table's issuer columns, as
    /// `FenceTable::ensure` does, and a new fence table has them.
    #[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    fn fence_migration_matches<D: Dialect>(m: &Shipped) {
        let f = TableName::new("leasehold_fences").unwrap().quoted(D::QUOTE);
        let adds: Vec<String> = FENCE_ISSUER_COLUMNS
            .iter()
            .map(|c| format!("{};", D::add_fence_issuer_column(&f, c)))
            .collect();
        assert_eq!(
            body(m.issuer).trim(),
            adds.join("\n"),
            "{} 0004 migration drifted",
            D::ENGINE
        );
        let create = D::create_fence_table(&f);
        for c in FENCE_ISSUER_COLUMNS {
            let typed = format!("{c} {}", D::fence_issuer_type(c));
            assert!(
                create.contains(&typed),
                "{} fence DDL lacks {typed}",
                D::ENGINE
            );
        }
    }

    #[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    #[test]
    fn shipped_migrations_match_the_ddl() {
        fn check<D: Dialect>(m: Shipped) {
            lease_migrations_match::<D>(&m);
            fence_migration_matches::<D>(&m);
        }
        check::<sqlx::Postgres>(Shipped {
            leases: include_str!("../migrations/postgres/0001_leasehold_leases.sql"),
            floor: include_str!("../migrations/postgres/0002_leasehold_floor.sql"),
            span: include_str!("../migrations/postgres/0003_leasehold_span.sql"),
            issuer: include_str!("../migrations/postgres/0004_leasehold_fence_issuer.sql"),
            format: include_str!("../migrations/postgres/0005_leasehold_id_format.sql"),
        });
        check::<sqlx::MySql>(Shipped {
            leases: include_str!("../migrations/mysql/0001_leasehold_leases.sql"),
            floor: include_str!("../migrations/mysql/0002_leasehold_floor.sql"),
            span: include_str!("../migrations/mysql/0003_leasehold_span.sql"),
            issuer: include_str!("../migrations/mysql/0004_leasehold_fence_issuer.sql"),
            format: include_str!("../migrations/mysql/0005_leasehold_id_format.sql"),
        });
        check::<sqlx::Sqlite>(Shipped {
            leases: include_str!("../migrations/sqlite/0001_leasehold_leases.sql"),
            floor: include_str!("../migrations/sqlite/0002_leasehold_floor.sql"),
            span: include_str!("../migrations/sqlite/0003_leasehold_span.sql"),
            issuer: include_str!("../migrations/sqlite/0004_leasehold_fence_issuer.sql"),
            format: include_str!("../migrations/sqlite/0005_leasehold_id_format.sql"),
        });
    }

    #[test]
    fn long_holders_are_cut_on_a_char_boundary() {
        let spec = PoolSpec::new(
            leasehold_core::PoolName::new("p").unwrap(),
            1,
            Duration::from_secs(1),
        )
        .unwrap()
        .with_holder("é".repeat(200));
        let h = holder(&spec);
        assert!(h.len() <= HOLDER_MAX && h.chars().all(|c| c == 'é'));
    }
}
