//! Least privilege: what a lease user needs after an admin has run
//! `prepare` (or the migrations), the statements that create one, and the
//! GRANT a refused operation names (the crate README, "Least privilege").
//!
//! The lease operations read, insert and update rows of the lease table,
//! and nothing else: `SELECT` (the claim's scan, inspect, the schema
//! check's column list), `INSERT` (a pool's missing rows, filled in by a
//! claim when a pool grew, and the pool's record of its ID format and of
//! the server's timeline or identity) and `UPDATE` (claim, renew, release,
//! revoke). What the durability and promotion checks read needs no grant
//! of its own on the engines tested here (PostgreSQL 15 and 18, MariaDB
//! 10.11): `current_setting`, `pg_postmaster_start_time()`,
//! `pg_current_wal_lsn()` and `pg_walfile_name()` are executable by
//! `PUBLIC`, and MariaDB's `@@` variables and
//! `information_schema.GLOBAL_STATUS` are readable by every user. A server
//! whose admin revoked one of those functions from `PUBLIC` refuses with
//! the `GRANT EXECUTE` to add.

use leasehold_core::ConfigError;

use crate::engine::Engine;
use crate::ident::TableName;

/// One privilege a lease user lacks, with the statement an admin runs to
/// give it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MissingGrant {
    /// What the lease operations do with it.
    pub needed_for: &'static str,
    /// The `GRANT … TO …` statement, with the table and user filled in.
    pub grant: String,
}

/// The table privileges of a lease user, in the order of the GRANT.
pub(crate) const TABLE_PRIVILEGES: [(&str, &str); 3] = [
    (
        "SELECT",
        "reading the lease table: the claim's scan, inspect, the schema check",
    ),
    (
        "INSERT",
        "adding a pool's missing rows and its records of the ID format and of the server's \
         timeline or identity",
    ),
    ("UPDATE", "claiming, renewing, releasing and revoking slots"),
];

/// The statements an admin runs to create the lease user `user` with
/// password `password` on `engine`, for the lease table `table` (in the
/// database `database`, which MySQL/MariaDB grants name; PostgreSQL's
/// grant names the table as the admin's search path finds it, the schema
/// `public` by default, which every role may use).
///
/// The user holds only what the lease operations need: `SELECT`, `INSERT`
/// and `UPDATE` on the lease table. It cannot create or alter tables, so
/// `prepare` (`SqlStrategy::ensure_pool`, `ensure_table`) and the
/// migrations are run by an admin. These are the statements the crate's
/// tests create their lease users with, and the crate README shows them.
///
/// ```
/// use leasehold_sql::{Engine, TableName, lease_user_sql};
/// let sql = lease_user_sql(
///     Engine::Postgres,
///     &TableName::default(),
///     "leasehold",
///     "leasehold_lease",
///     "change-me",
/// )
/// .unwrap();
/// assert_eq!(
///     sql[1],
///     "GRANT SELECT, INSERT, UPDATE ON TABLE \"leasehold_leases\" TO \"leasehold_lease\""
/// );
/// ```
///
/// # Errors
/// `user` is not 1 to 63 characters of `a-z 0-9 _` starting with a letter
/// or `_`, or `engine` is SQLite (a file, which has no users).
pub fn lease_user_sql(
    engine: Engine,
    table: &TableName,
    database: &str,
    user: &str,
    password: &str,
) -> Result<Vec<String>, ConfigError> {
    if TableName::new(user).is_err() {
        return Err(ConfigError::new(
            "user",
            format!("{user:?}"),
            "1 to 63 characters of a-z, 0-9 and '_', starting with a letter or '_'",
        ));
    }
    let all: Vec<&str> = TABLE_PRIVILEGES.iter().map(|(p, _)| *p).collect();
    match engine {
        Engine::Postgres => {
            let account = format!("\"{user}\"");
            Ok(vec![
                format!(
                    "CREATE ROLE {account} LOGIN PASSWORD '{}'",
                    password.replace('\'', "''")
                ),
                grant(engine, &all, &table_of(engine, None, table), &account),
            ])
        }
        Engine::MySql => {
            let account = format!("'{user}'@'%'");
            let password = password.replace('\\', "\\\\").replace('\'', "''");
            Ok(vec![
                format!("CREATE USER {account} IDENTIFIED BY '{password}'"),
                grant(
                    engine,
                    &all,
                    &table_of(engine, Some(database), table),
                    &account,
                ),
            ])
        }
        _ => Err(ConfigError::described(
            "engine",
            "SQLite is a file: it has no users or grants; its file's permissions decide who \
             may take leases",
        )),
    }
}

/// `GRANT privileges ON TABLE table TO account` in `engine`'s spelling
/// (`table` quoted, as [`table_of`] makes it).
pub(crate) fn grant(engine: Engine, privileges: &[&str], table: &str, account: &str) -> String {
    let on = if engine == Engine::Postgres {
        "TABLE "
    } else {
        ""
    };
    format!(
        "GRANT {} ON {on}{table} TO {account}",
        privileges.join(", ")
    )
}

/// The lease table as a GRANT names it: PostgreSQL `"t"`, or `"schema"."t"`
/// when the schema is known; MySQL/MariaDB `` `database`.`t` ``.
pub(crate) fn table_of(engine: Engine, schema: Option<&str>, table: &TableName) -> String {
    match (engine, schema) {
        (Engine::MySql, Some(db)) => {
            format!("`{}`.{}", db.replace('`', "``"), table.quoted('`'))
        }
        (Engine::MySql, None) => table.quoted('`'),
        (_, Some(schema)) => format!("\"{}\".{}", schema.replace('"', "\"\""), table.quoted('"')),
        (_, None) => table.quoted('"'),
    }
}

/// A MySQL/MariaDB account as `CURRENT_USER()` answers it (`user@host`),
/// in the form a GRANT names it (`'user'@'host'`).
pub(crate) fn mysql_account(current_user: &str) -> String {
    let (user, host) = current_user.rsplit_once('@').unwrap_or((current_user, "%"));
    let q = |s: &str| s.replace('\\', "\\\\").replace('\'', "''");
    format!("'{}'@'{}'", q(user), q(host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_user_statements_name_the_table_and_the_user() {
        let t = TableName::new("leases").unwrap();
        let pg = lease_user_sql(Engine::Postgres, &t, "db", "lease", "it's").unwrap();
        assert_eq!(
            pg,
            [
                "CREATE ROLE \"lease\" LOGIN PASSWORD 'it''s'",
                "GRANT SELECT, INSERT, UPDATE ON TABLE \"leases\" TO \"lease\"",
            ]
        );
        let my = lease_user_sql(Engine::MySql, &t, "leasehold", "lease", "a\\b").unwrap();
        assert_eq!(
            my,
            [
                "CREATE USER 'lease'@'%' IDENTIFIED BY 'a\\\\b'",
                "GRANT SELECT, INSERT, UPDATE ON `leasehold`.`leases` TO 'lease'@'%'",
            ]
        );
        assert!(lease_user_sql(Engine::Postgres, &t, "db", "x; DROP", "p").is_err());
        assert!(lease_user_sql(Engine::Sqlite, &t, "db", "lease", "p").is_err());
        assert_eq!(mysql_account("lease@127.0.0.1"), "'lease'@'127.0.0.1'");
    }

    /// The README shows the statements `lease_user_sql` answers (which the
    /// `-lease-user` conformance rows run), for the default table, the
    /// user `leasehold_lease` and the database `leasehold`.
    #[test]
    fn the_readme_shows_the_statements_the_tests_run() {
        let readme = include_str!("../README.md");
        for engine in [Engine::Postgres, Engine::MySql] {
            let sql = lease_user_sql(
                engine,
                &TableName::default(),
                "leasehold",
                "leasehold_lease",
                "change-me",
            )
            .unwrap();
            let block = format!("```sql\n{};\n```", sql.join(";\n"));
            assert!(
                readme.contains(&block),
                "the README's \"Least privilege\" lacks, for {engine}:\n{block}"
            );
        }
    }
}
