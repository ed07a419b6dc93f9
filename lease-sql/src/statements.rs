//! Every statement the lease operations send, built once per strategy from
//! the validated table name; the parts that differ per engine come from its
//! [`Dialect`].

use leasehold_core::PoolSpec;

use crate::dialect::Dialect;
use crate::ident::{TableName, hex};

/// The columns a lease table must have.
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

/// The longest holder identity stored (longer ones are cut on a char boundary).
pub(crate) const HOLDER_MAX: usize = 255;

/// Statements for one engine and table.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) table: String,
    /// Binds the TTL, pool, slot and token.
    pub(crate) renew: String,
    /// Binds the pool, slot and token.
    pub(crate) release: String,
    /// Binds the pool and slot.
    pub(crate) revoke: String,
    /// Binds the pool and the pool's size.
    pub(crate) count: String,
}

impl Statements {
    pub(crate) fn new<D: Dialect>(table: &TableName) -> Self {
        let t = table.quoted(D::QUOTE);
        let now = D::NOW;
        let p = D::param;
        // Renew and release match (pool, slot, token) on a lease the database
        // still considers live: a renewal whose answer was lost is safe to retry.
        let expires = D::expires_after(&D::ttl_param(1));
        let (pool, slot, token) = (p(2), p(3), p(4));
        let renew = format!(
            "UPDATE {t} SET expires_at = {expires}, renewed_at = {now} \
             WHERE pool = {pool} AND slot = {slot} AND token = {token} AND expires_at > {now}"
        );
        let (pool, slot, token) = (p(1), p(2), p(3));
        let release = format!(
            "UPDATE {t} SET token = NULL, expires_at = {now} \
             WHERE pool = {pool} AND slot = {slot} AND token = {token} AND expires_at > {now}"
        );
        let revoke = format!("UPDATE {t} SET token = NULL WHERE pool = {pool} AND slot = {slot}");
        let count = format!("SELECT COUNT(*) FROM {t} WHERE pool = {pool} AND slot < {slot}");
        Self {
            table: t,
            renew,
            release,
            revoke,
            count,
        }
    }

    /// The acquisition, as one text statement (or, on MySQL, one
    /// multi-statement transaction) carrying every value as a literal: one
    /// round trip even on a fresh connection, where a prepared statement would
    /// need two. Every literal is an integer, hex, or a validated pool name. It
    /// claims the lowest free slot in `from..to`.
    pub(crate) fn acquire<D: Dialect>(
        &self,
        spec: &PoolSpec,
        token: &[u8; 16],
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
        let free =
            format!("pool = '{pool}' AND {range} AND (token IS NULL OR expires_at <= {now})");
        let token = D::token_literal(&hex(token));
        let set = format!(
            "token = {token}, fence = fence + 1, holder = {}, expires_at = {}, \
             acquired_at = {now}, renewed_at = {now}",
            D::holder_literal(&hex(holder(spec).as_bytes())),
            D::expires_after(&D::ttl_literal(spec.ttl())),
        );
        D::acquire(t, pool, &free, &set, &token)
    }

    /// Inserts the missing rows `from..to` of `pool` (idempotent).
    pub(crate) fn populate<D: Dialect>(&self, pool: &str, from: u32, to: u32) -> String {
        let values: Vec<String> = (from..to).map(|s| format!("('{pool}', {s})")).collect();
        D::insert_missing(&self.table, "pool, slot", &values.join(", "), "pool, slot")
    }
}

/// `holder` cut to [`HOLDER_MAX`] bytes on a char boundary.
pub(crate) fn holder(spec: &PoolSpec) -> &str {
    let h = spec.holder();
    if h.len() <= HOLDER_MAX {
        return h;
    }
    let mut end = HOLDER_MAX;
    while !h.is_char_boundary(end) {
        end -= 1;
    }
    &h[..end]
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    #[test]
    fn shipped_migrations_match_the_ddl() {
        fn check<D: Dialect>(file: &str) {
            let ddl = D::create_table(&TableName::default().quoted(D::QUOTE));
            let body: String = file
                .lines()
                .filter(|l| !l.starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n");
            assert_eq!(
                body.trim().trim_end_matches(';'),
                ddl,
                "{} migration drifted",
                D::ENGINE
            );
        }
        check::<sqlx::Postgres>(include_str!(
            "../migrations/postgres/0001_leasehold_leases.sql"
        ));
        check::<sqlx::MySql>(include_str!(
            "../migrations/mysql/0001_leasehold_leases.sql"
        ));
        check::<sqlx::Sqlite>(include_str!(
            "../migrations/sqlite/0001_leasehold_leases.sql"
        ));
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
