//! What connect checks of the server: its durability settings, its
//! replication (a replica is refused; a primary that can split brain is
//! reported, or refused on request), and that the restart guard can read
//! when it started.

use leasehold_core::{Durability, Reason};
use sqlx::Row;

use super::Backend;
use crate::config::SqlConfig;
use crate::dialect::with_sqlx_bounds;
use crate::error::SqlError;
use crate::failure::Failure;

with_sqlx_bounds!([impl<D> Backend<D>] {
    /// Reads the durability and replication settings and checks that the
    /// restart guard can read the server's start, in one round trip;
    /// refuses a replica, a server that can forget acknowledged writes when
    /// `config` requires durability, and one that can split brain when
    /// `config` refuses that.
    pub(super) async fn check_server(&mut self, config: &SqlConfig) -> Result<(), SqlError> {
        // A pool whose rows are gone (a truncated or emptied table, a
        // pool's rows deleted) lost its holders' leases while they still
        // generate: on every engine, unless the restart guard is turned off.
        self.sql.wipe_guarded = config.restart_guard
            && !leasehold_core::plant::active(leasehold_core::plant::Plant::NoRestartGuard);
        let version = self.info.version.clone();
        let settings = D::durability_columns(&version);
        let replication = super::replication::columns(D::ENGINE, &version);
        let replication_n = super::replication::count(D::ENGINE, &version);
        let guard = D::resume_in_micros("1000000", &version);
        let columns: Vec<String> = settings
            .map(str::to_owned)
            .into_iter()
            .chain(replication.map(str::to_owned))
            .chain(guard.as_ref().map(|g| format!("CAST({g} AS {})", D::TEXT_TYPE)))
            .collect();
        if columns.is_empty() {
            return Ok(());
        }
        let sql = format!("SELECT {}", columns.join(", "));
        let read =
            tokio::time::timeout(self.info.op_timeout, self.fetch_one(sqlx::raw_sql(&sql)))
                .await
                .map_err(|_| SqlError::Timeout(self.info.op_timeout))?;
        let row = match read {
            Ok(row) => row,
            Err(e) => {
                return Err(match D::classify("reading the server's settings", &e) {
                    Failure::Transient(m) | Failure::Contention(m) => {
                        SqlError::Unreachable(Reason::new(m))
                    }
                    Failure::Denied(m) => self.denied(m).await,
                    Failure::Schema(m) | Failure::Final(m) => SqlError::Refused {
                        what: m,
                        fix: "let the lease user read the server's durability and replication \
                              settings and its uptime (MySQL 8: SELECT on \
                              performance_schema.global_status)"
                            .to_owned(),
                    },
                });
            }
        };
        // Every column of the row: the settings (as many as the dialect's
        // query selects), the replication columns, then the guard's answer
        // when there is a guard.
        let values = (0..row.len())
            .map(|i| row.try_get::<Option<String>, _>(i))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| SqlError::Refused {
                what: format!("reading the server's durability settings ({sql}): {e}"),
                fix: "report this as a leasehold bug, with the server version".to_owned(),
            })?;
        let settings_n = values.len() - replication_n - usize::from(guard.is_some());
        let text = |v: &Option<String>| v.clone().unwrap_or_default();
        let settings_read: Vec<String> = values.iter().take(settings_n).map(text).collect();
        let replication_read: Vec<String> = values
            .iter()
            .skip(settings_n)
            .take(replication_n)
            .map(text)
            .collect();
        // A replica's refusal is answered first; kept (for a look), it comes
        // after any refusal for durability, so each check reports its own.
        let replication_refusal = self.check_replication(config, &replication_read)?;
        self.info.durability = Durability {
            risks: D::durability_risks(&settings_read),
        };
        let forgetful = !self.info.durability.is_durable();
        // A server that can forget loses, in one crash, the record of the
        // pool's longest restart span with the claims: refused unless the
        // configuration says all holders share one timing, or turns the
        // guard off knowingly. This judgement is the one `connect` makes
        // and the doctor reports.
        let refusal = if config.require_durable && forgetful {
            Some(SqlError::NotDurable(self.info.durability.clone()))
        } else if forgetful && config.restart_guard && !config.assume_one_timing {
            Some(SqlError::Forgetful(self.info.durability.clone()))
        } else {
            None
        };
        self.info.opt_in = match (forgetful, config.restart_guard) {
            (false, _) => None,
            (true, false) => Some("restart_guard=false"),
            (true, true) => Some("assume_one_timing_per_pool=true"),
        };
        if let Some(refusal) = refusal {
            self.refuse(config, refusal)?;
        }
        // Every server is guarded, durable or not: the settings read now
        // say nothing of those the server ran with before its last restart
        // (a `SET GLOBAL innodb_flush_log_at_trx_commit = 0` is not written
        // to the server's option files, so a crash loses claims and the
        // server comes back durable).
        // (Rule 12 broken on purpose by the campaign's planted bugs; a
        // constant false otherwise.)
        self.sql.guarded = guard.is_some()
            && config.restart_guard
            && !leasehold_core::plant::active(leasehold_core::plant::Plant::NoRestartGuard);
        // A promoted standby or a restored backup has a history its clients
        // did not see, whatever its settings: the promotion guard is on
        // wherever the engine can tell (PostgreSQL's timeline, MySQL's and
        // MariaDB's server identity), unless the restart guard is turned off.
        self.sql.promotion_guarded = D::incarnation(&version).is_some()
            && config.restart_guard
            && !leasehold_core::plant::active(leasehold_core::plant::Plant::NoRestartGuard);
        if self.sql.guarded && values.last().is_none_or(Option::is_none) {
            self.refuse(
                config,
                SqlError::UnsupportedServer {
                    what: format!(
                        "{version} does not tell when it started, which the restart guard needs"
                    ),
                    fix: "on MySQL 8 enable performance_schema (the default) and let the lease \
                          user read performance_schema.global_status"
                        .to_owned(),
                },
            )?;
        }
        if let Some(refusal) = replication_refusal {
            self.refuse(config, refusal)?;
        }
        #[cfg(feature = "tracing")]
        if !self.info.durability.is_durable() {
            tracing::warn!(
                store = %self.info.identity,
                server = %version,
                durability = %self.info.durability,
                "the lease store can forget leases it acknowledged after a crash; the restart \
                 guard holds grants back after a restart, but a failover is not covered"
            );
        }
        Ok(())
    }

    /// Judges the replication columns read at connect: a replica is
    /// refused, and so is a primary that can split brain when `config`
    /// says so (answered at once, or, when `config` says not to refuse at
    /// connect, returned for [`Self::refuse`] to keep); otherwise such a
    /// primary is a warning.
    fn check_replication(
        &mut self,
        config: &SqlConfig,
        read: &[String],
    ) -> Result<Option<SqlError>, SqlError> {
        let judged = super::replication::judge(D::ENGINE, &self.info.version, read);
        self.info.replication = judged.replication;
        let refusal = match judged.replica {
            Some((what, fix)) => Some(SqlError::Replica { what, fix }),
            None if config.refuse_split_brain && self.info.replication.split_brain.is_some() => {
                Some(SqlError::SplitBrain(self.info.replication.clone()))
            }
            None => None,
        };
        if let Some(refusal) = refusal {
            if config.refuse_at_connect {
                return Err(refusal);
            }
            self.info.replication.refusal = Some(refusal.to_string());
            return Ok(Some(refusal));
        }
        #[cfg(feature = "tracing")]
        if let Some(risk) = &self.info.replication.split_brain {
            tracing::warn!(
                store = %self.info.identity,
                server = %self.info.version,
                replication = %self.info.replication.found,
                setting = %risk.setting,
                fix = %risk.fix,
                "the lease store can split brain: after a failover the old primary goes on \
                 confirming claims and renewals to the clients a partition left with it; \
                 refuse_split_brain=true refuses such a store at connect"
            );
        }
        Ok(None)
    }

    /// Answers `refusal`, or keeps it (the first) when the configuration
    /// says not to refuse at connect.
    fn refuse(&mut self, config: &SqlConfig, refusal: SqlError) -> Result<(), SqlError> {
        if config.refuse_at_connect {
            return Err(refusal);
        }
        if self.info.refusal.is_none() {
            self.info.refusal = Some(refusal.to_string());
        }
        Ok(())
    }
});
