//! What the lease user may do, found by asking the server (see
//! `privileges.rs`): each privilege the lease operations need is tried with
//! a statement of its kind that touches no row (`WHERE 1 = 0`): the server
//! checks the privilege before it plans the statement, so the probe is
//! refused exactly when the operation would be, whatever granted it (the
//! table, the database, a role, `PUBLIC`). Only a refusal for want of a
//! privilege counts as missing; any other error is the check's own.
//!
//! Also the TLS the lease connections use, for `doctor`.

use leasehold_core::Reason;
use sqlx::Row;

use super::Leases;
use crate::dialect::with_sqlx_bounds;
use crate::engine::Engine;
use crate::error::{CHECK_ACCESS, SqlError};
use crate::failure::Failure;
use crate::privileges::{MissingGrant, TABLE_PRIVILEGES, grant, mysql_account, table_of};

/// One probe: the statement, and the privilege it needs.
struct Probe {
    sql: String,
    needed_for: &'static str,
    /// The privilege, as the GRANT names it.
    privilege: &'static str,
    /// The object of a privilege other than the lease table's (a function,
    /// a system table), as the GRANT names it after `ON`.
    on: Option<&'static str>,
}

/// The functions PostgreSQL's checks call, each executable by `PUBLIC`
/// unless an admin revoked it: the probe, and the GRANT's object.
const PG_FUNCTIONS: [(&str, &str, &str); 4] = [
    (
        "SELECT current_setting('fsync')",
        "FUNCTION current_setting(text)",
        "reading the durability settings at connect (fsync, synchronous_commit, \
         full_page_writes)",
    ),
    (
        "SELECT pg_postmaster_start_time()",
        "FUNCTION pg_postmaster_start_time()",
        "the restart guard: when the server started",
    ),
    (
        "SELECT pg_current_wal_lsn()",
        "FUNCTION pg_current_wal_lsn()",
        "the promotion guard: the timeline the server writes",
    ),
    (
        "SELECT pg_walfile_name('0/0'::pg_lsn)",
        "FUNCTION pg_walfile_name(pg_lsn)",
        "the promotion guard: the timeline the server writes",
    ),
];

with_sqlx_bounds!([impl<D> Leases<D>] {
    /// The lease user as a GRANT names it, and the lease table as a GRANT
    /// names it (qualified by its schema or database).
    async fn grantee(&self) -> Result<(String, String), Failure> {
        let sql = match D::ENGINE {
            Engine::Postgres => "SELECT quote_ident(CAST(current_user AS TEXT)), \
                                 CAST(current_schema() AS TEXT)",
            Engine::MySql => "SELECT CAST(CURRENT_USER() AS CHAR), CAST(DATABASE() AS CHAR)",
            _ => return Ok((String::new(), self.info.table.as_str().to_owned())),
        };
        let row = self
            .timed("reading the lease user's name", self.fetch_one(sqlx::raw_sql(sql)))
            .await?;
        let get = |i: usize| -> Result<Option<String>, Failure> {
            row.try_get(i)
                .map_err(|e| D::classify("reading the lease user's name", &e))
        };
        let (user, place) = (get(0)?.unwrap_or_default(), get(1)?);
        let account = match D::ENGINE {
            Engine::MySql => mysql_account(&user),
            _ => user,
        };
        Ok((account, table_of(D::ENGINE, place.as_deref(), &self.info.table)))
    }

    /// The probes of this engine, for the lease table `t` (quoted).
    fn probes(&self) -> Vec<Probe> {
        let t = self.sql.table.as_str();
        let (select, insert, update) = match D::ENGINE {
            Engine::Postgres => (
                format!("SELECT 1 FROM {t} WHERE 1 = 0"),
                format!("INSERT INTO {t} (pool, slot) SELECT '', 0 WHERE 1 = 0"),
                format!("UPDATE {t} SET fence = 0 WHERE 1 = 0"),
            ),
            _ => (
                format!("SELECT 1 FROM {t} WHERE 1 = 0"),
                format!("INSERT INTO {t} (pool, slot) SELECT '', 0 FROM DUAL WHERE 1 = 0"),
                format!("UPDATE {t} SET fence = 0 WHERE 1 = 0"),
            ),
        };
        let mut probes: Vec<Probe> = [select, insert, update]
            .into_iter()
            .zip(TABLE_PRIVILEGES)
            .map(|(sql, (privilege, needed_for))| Probe {
                sql,
                needed_for,
                privilege,
                on: None,
            })
            .collect();
        match D::ENGINE {
            Engine::Postgres => {
                probes.extend(PG_FUNCTIONS.iter().map(|&(sql, on, needed_for)| Probe {
                    sql: sql.to_owned(),
                    needed_for,
                    privilege: "EXECUTE",
                    on: Some(on),
                }));
            }
            // MySQL 8 shows the uptime in performance_schema only (MariaDB:
            // information_schema, which every user may read).
            Engine::MySql if !self.info.version.contains("MariaDB") => probes.push(Probe {
                sql: "SELECT VARIABLE_VALUE FROM performance_schema.global_status \
                      WHERE VARIABLE_NAME = 'UPTIME'"
                    .to_owned(),
                needed_for: "the restart guard: the server's uptime",
                privilege: "SELECT",
                on: Some("performance_schema.global_status"),
            }),
            _ => {}
        }
        probes
    }

    /// Every privilege the lease operations need that the lease user
    /// lacks, each with its GRANT; empty when it has them all.
    pub(super) async fn missing_grants(&self) -> Result<Vec<MissingGrant>, Failure> {
        if !D::NETWORKED {
            return Ok(Vec::new());
        }
        let (account, table) = self.grantee().await?;
        let mut missing = Vec::new();
        for probe in self.probes() {
            match self
                .timed("checking a privilege", self.execute(sqlx::raw_sql(&probe.sql)))
                .await
            {
                Ok(_) => {}
                Err(Failure::Denied(_)) => missing.push(MissingGrant {
                    needed_for: probe.needed_for,
                    grant: match probe.on {
                        Some(on) => format!("GRANT {} ON {on} TO {account}", probe.privilege),
                        None => grant(D::ENGINE, &[probe.privilege], &table, &account),
                    },
                }),
                // A function a standby cannot run (PostgreSQL: the WAL
                // position "during recovery") is not refused for want of a
                // privilege: not missing.
                Err(_) if probe.on.is_some() => {}
                Err(f) => return Err(f),
            }
        }
        Ok(missing)
    }

    /// The error of an operation the server refused for want of a
    /// privilege (`message`): what it said, and the GRANT of each privilege
    /// the lease user lacks.
    /// The probes share one operation timeout: a renewal refused for want
    /// of a privilege answers its `Retry` within two of them.
    pub(super) async fn denied(&self, message: String) -> SqlError {
        let budget = self.info.op_timeout;
        let found = tokio::time::timeout(budget, self.missing_grants())
            .await
            .unwrap_or_else(|_| Err(Failure::timeout("finding the missing privilege", budget)));
        let fix = match found {
            Ok(missing) if !missing.is_empty() => grants_fix(&missing),
            Ok(_) => format!(
                "the lease user has every privilege the lease operations need on {}; {CHECK_ACCESS}",
                self.info.table
            ),
            Err(f) => format!(
                "{CHECK_ACCESS} (the crate README, \"Least privilege\"; finding which privilege \
                 is missing failed: {})",
                f.text()
            ),
        };
        SqlError::Refused { what: message, fix }
    }

    /// `message`, followed by the GRANT to add when `f` is a refusal for
    /// want of a privilege: the reason of a renewal or release that must
    /// be retried.
    pub(super) async fn failure_text(&self, f: Failure) -> String {
        match f {
            Failure::Denied(m) => self.denied(m).await.to_string(),
            f => f.text().to_owned(),
        }
    }

    /// The TLS version of the lease connections (`TLSv1.3`), or `None`
    /// when they are plain text.
    pub(super) async fn tls_version(&self) -> Result<Option<String>, SqlError> {
        let sql = match D::ENGINE {
            Engine::Postgres => {
                "SELECT CAST(version AS TEXT) FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
            }
            Engine::MySql if self.info.version.contains("MariaDB") => {
                "SELECT CAST(VARIABLE_VALUE AS CHAR) FROM information_schema.SESSION_STATUS \
                 WHERE VARIABLE_NAME = 'SSL_VERSION'"
            }
            Engine::MySql => {
                "SELECT CAST(VARIABLE_VALUE AS CHAR) FROM performance_schema.session_status \
                 WHERE VARIABLE_NAME = 'Ssl_version'"
            }
            _ => return Ok(None),
        };
        let rows = match self
            .timed("reading the connection's TLS version", self.fetch_all(sqlx::raw_sql(sql)))
            .await
        {
            Ok(rows) => rows,
            Err(Failure::Denied(m)) => return Err(self.denied(m).await),
            Err(f) => return Err(SqlError::Unreachable(Reason::new(f.text().to_owned()))),
        };
        let version: Option<String> = match rows.first() {
            Some(row) => row
                .try_get(0)
                .map_err(|e| SqlError::Unreachable(Reason::new(e.to_string())))?,
            None => None,
        };
        Ok(version.filter(|v| !v.is_empty()))
    }
});

/// The fix that names each missing GRANT.
pub(crate) fn grants_fix(missing: &[MissingGrant]) -> String {
    let statements: Vec<String> = missing
        .iter()
        .map(|m| format!("{} (for {})", m.grant, m.needed_for))
        .collect();
    format!(
        "as the admin, run: {} (the crate README, \"Least privilege\")",
        statements.join("; ")
    )
}
