//! What connect reads of the server's replication, in the same round trip
//! as its durability settings: a server that is a replica is refused (a
//! client sent to a standby, or to a read-only replica a privileged user
//! could still write to, where the primary never sees it), and a primary
//! whose replicas are asynchronous can split brain (DESIGN.md, the
//! durability and failover table): after a failover it goes on confirming
//! claims and renewals to the clients a partition left with it.
//!
//! What a least-privileged lease user can read: PostgreSQL's
//! `pg_is_in_recovery()` and the rows of `pg_stat_replication` (one per WAL
//! sender, its details hidden without `pg_read_all_stats`, which the count
//! does not need); MariaDB's `information_schema.GLOBAL_STATUS` and the
//! system variables. MySQL 8 keeps the count of connected replicas behind
//! `REPLICATION CLIENT` and semi-synchronous replication in a plugin: only
//! `read_only` and `super_read_only` are read there, and a primary's
//! replicas are not judged.

use leasehold_core::{Replication, SplitBrainRisk};

use crate::engine::Engine;

/// What the server's replication columns said.
pub(super) struct Judged {
    pub(super) replication: Replication,
    /// Why the server is a replica (what was found, then the fix), when
    /// it is one.
    pub(super) replica: Option<(String, String)>,
    /// Whether commits wait for synchronous standbys (PostgreSQL's
    /// `synchronous_standby_names` is set).
    pub(super) sync_standbys: bool,
}

/// The select list (text columns) that [`judge`] reads, for `engine` at
/// `version` (as the server described itself at connect). `None`: nothing
/// to read (SQLite: one file, no replica).
pub(super) fn columns(engine: Engine, version: &str) -> Option<&'static str> {
    match engine {
        Engine::Postgres => Some(
            "CAST(pg_is_in_recovery() AS TEXT), \
             CAST((SELECT count(*) FROM pg_stat_replication) AS TEXT), \
             current_setting('synchronous_standby_names'), \
             current_setting('synchronous_commit'), \
             current_setting('lc_messages')",
        ),
        Engine::MySql if version.contains("MariaDB") => Some(
            "CAST(@@read_only AS CHAR), \
             (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
              WHERE VARIABLE_NAME = 'SLAVES_RUNNING'), \
             (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
              WHERE VARIABLE_NAME = 'SLAVES_CONNECTED'), \
             CAST(@@rpl_semi_sync_master_enabled AS CHAR), \
             (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
              WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_STATUS')",
        ),
        Engine::MySql => Some("CAST(@@read_only AS CHAR), CAST(@@super_read_only AS CHAR)"),
        _ => None,
    }
}

/// How many columns [`columns`] selects.
pub(super) fn count(engine: Engine, version: &str) -> usize {
    columns(engine, version).map_or(0, |c| c.matches(", ").count() + 1)
}

/// Judges the values of [`columns`] (in its order; an absent value is
/// empty).
pub(super) fn judge(engine: Engine, version: &str, values: &[String]) -> Judged {
    let get = |i: usize| values.get(i).map_or("", |v| v.trim());
    match engine {
        Engine::Postgres => postgres(version, [get(0), get(1), get(2), get(3), get(4)]),
        Engine::MySql if version.contains("MariaDB") => {
            mariadb(version, [get(0), get(1), get(2), get(3), get(4)])
        }
        Engine::MySql => mysql(version, [get(0), get(1)]),
        _ => Judged {
            replication: Replication::new("one file: no replica, no split brain"),
            replica: None,
            sync_standbys: false,
        },
    }
}

/// What clients of a replicated store are given instead of one server's
/// address.
const FOLLOWS_THE_PRIMARY: &str = "point the URL at the primary, or at an address that follows \
                                   it (a virtual IP, or a proxy that routes to the primary only)";

fn on(value: &str) -> bool {
    !matches!(
        value.to_ascii_uppercase().as_str(),
        "" | "0" | "OFF" | "FALSE"
    )
}

fn postgres(version: &str, [recovery, senders, standbys, commit, lc]: [&str; 5]) -> Judged {
    let sync_standbys = !standbys.is_empty();
    if recovery == "true" {
        return Judged {
            replication: Replication::new(format!(
                "{version} is a standby (pg_is_in_recovery() is true)"
            )),
            replica: Some((
                format!(
                    "{version} is a standby (pg_is_in_recovery() is true), so leases on it are \
                     refused: a client sent to a standby holds no lease the primary knows"
                ),
                format!(
                    "{FOLLOWS_THE_PRIMARY}: HAProxy or PgBouncer checking pg_is_in_recovery(), \
                     or the primary's host"
                ),
            )),
            sync_standbys,
        };
    }
    let senders: u64 = senders.parse().unwrap_or(0);
    let found = format!(
        "primary with {senders} WAL sender(s) (streaming standbys or base backups, from \
         pg_stat_replication), synchronous_standby_names = '{standbys}', the lease \
         connections' synchronous_commit = {commit}, lc_messages = '{lc}'"
    );
    let replication = Replication::new(found);
    let waits = !matches!(commit, "local" | "off");
    let risk = if senders > 0 && standbys.is_empty() {
        Some(SplitBrainRisk {
            setting: "synchronous_standby_names".to_owned(),
            value: "''".to_owned(),
            fix: SYNCHRONOUS.to_owned(),
        })
    } else if senders > 0 && !waits {
        Some(SplitBrainRisk {
            setting: "synchronous_commit".to_owned(),
            value: commit.to_owned(),
            fix: SYNCHRONOUS.to_owned(),
        })
    } else if sync_standbys && waits && !english(lc) {
        // A commit whose wait for the standbys is cancelled (the operation
        // timed out) is acknowledged with a warning, on the primary only;
        // the lease operations know that warning by its English text
        // (`notice.rs`), so in another language such a commit counts as
        // done.
        Some(SplitBrainRisk {
            setting: "lc_messages".to_owned(),
            value: format!("'{lc}'"),
            fix: "let the lease connections get the server's messages in English, so a \
                  commit whose wait for the synchronous standbys was cancelled is recognised: \
                  ALTER SYSTEM SET lc_messages = 'C' and SELECT pg_reload_conf(), or ALTER ROLE \
                  <lease user> SET lc_messages = 'C', by a superuser; on PostgreSQL 15+ a \
                  superuser can instead GRANT SET ON PARAMETER lc_messages TO <lease user>, who \
                  then runs ALTER ROLE CURRENT_USER SET lc_messages = 'C' (new connections take \
                  it)"
            .to_owned(),
        })
    } else {
        None
    };
    Judged {
        replication: match risk {
            None => replication,
            Some(risk) => replication.with_risk(risk),
        },
        replica: None,
        sync_standbys,
    }
}

/// How a PostgreSQL primary's commits come to wait for a standby.
const SYNCHRONOUS: &str = "on the primary set synchronous_standby_names (e.g. 'ANY 1 (s1, s2)' \
                           or '*') and leave synchronous_commit on (or remote_write, \
                           remote_apply) for the lease user: a commit then waits for a \
                           standby, which an old primary cut off from its standbys never gets";

/// Whether PostgreSQL's `lc_messages` gives its messages in English: unset
/// (the server's environment, which the lease connections cannot see, is
/// taken as English), `C`, `POSIX`, `C.<encoding>`, or an `en` locale.
fn english(lc: &str) -> bool {
    let lc = lc.to_ascii_lowercase();
    lc.is_empty() || lc == "c" || lc == "posix" || lc.starts_with("c.") || lc.starts_with("en")
}

fn mariadb(version: &str, [read_only, running, connected, semi, semi_status]: [&str; 5]) -> Judged {
    let running: u64 = running.parse().unwrap_or(0);
    let replica = if on(read_only) {
        Some(format!("{version} is read-only (read_only = {read_only})"))
    } else if running > 0 {
        Some(format!(
            "{version} is a replica ({running} replication connection(s) running)"
        ))
    } else {
        None
    };
    if let Some(what) = replica {
        return Judged {
            replication: Replication::new(what.clone()),
            replica: Some((
                format!(
                    "{what}, so leases on it are refused: a user with SUPER or READ_ONLY ADMIN \
                     could still write there, leases the primary never sees"
                ),
                format!("{FOLLOWS_THE_PRIMARY}: MaxScale or HAProxy checking @@read_only"),
            )),
            sync_standbys: false,
        };
    }
    let connected: u64 = connected.parse().unwrap_or(0);
    let semi_on = on(semi) && on(semi_status);
    let replication = Replication::new(format!(
        "primary with {connected} replica(s) connected (Slaves_connected), \
         rpl_semi_sync_master_enabled = {semi}, Rpl_semi_sync_master_status = {semi_status}"
    ));
    if connected == 0 || semi_on {
        return Judged {
            replication,
            replica: None,
            sync_standbys: false,
        };
    }
    let (setting, value) = if on(semi) {
        ("Rpl_semi_sync_master_status", semi_status)
    } else {
        ("rpl_semi_sync_master_enabled", semi)
    };
    Judged {
        replication: replication.with_risk(SplitBrainRisk {
            setting: setting.to_owned(),
            value: value.to_owned(),
            fix: "SET GLOBAL rpl_semi_sync_master_enabled = ON on the primary and \
                  rpl_semi_sync_slave_enabled = ON on the replicas, with \
                  rpl_semi_sync_master_timeout longer than the leases' TTL (once it runs out \
                  the primary goes on alone, asynchronously)"
                .to_owned(),
        }),
        replica: None,
        sync_standbys: false,
    }
}

fn mysql(version: &str, [read_only, super_read_only]: [&str; 2]) -> Judged {
    let setting = if on(super_read_only) {
        Some("super_read_only")
    } else if on(read_only) {
        Some("read_only")
    } else {
        None
    };
    match setting {
        Some(setting) => {
            let what = format!("{version} is read-only ({setting} = ON)");
            Judged {
                replication: Replication::new(what.clone()),
                replica: Some((
                    format!(
                        "{what}, so leases on it are refused: it is a replica, or a primary \
                         being failed over"
                    ),
                    format!("{FOLLOWS_THE_PRIMARY}: MySQL Router or HAProxy"),
                )),
                sync_standbys: false,
            }
        }
        None => Judged {
            replication: Replication::new(
                "writable; its replicas are not read (MySQL keeps them behind REPLICATION \
                 CLIENT, and semi-synchronous replication in a plugin)",
            ),
            replica: None,
            sync_standbys: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_column_count_matches_what_each_engine_reads() {
        assert_eq!(count(Engine::Postgres, "PostgreSQL 15.14"), 5);
        assert_eq!(count(Engine::MySql, "MariaDB 10.11.19-MariaDB"), 5);
        assert_eq!(count(Engine::MySql, "MySQL 8.4.0"), 2);
        assert_eq!(count(Engine::Sqlite, "SQLite 3.46.0"), 0);
    }

    /// A standby is refused; a primary with standbys and no synchronous
    /// one can split brain, and one whose lease sessions do not wait for
    /// standbys too; a synchronous one or none cannot.
    #[test]
    fn postgres_standbys_and_primaries_are_judged_by_what_a_commit_waits_for() {
        let pg = |v: &[&str]| judge(Engine::Postgres, "PostgreSQL 15", &strings(v));
        let standby = pg(&["true", "0", "", "on"]);
        assert!(standby.replica.is_some());
        let risk = |j: Judged| j.replication.split_brain.map(|r| r.setting);
        assert_eq!(
            risk(pg(&["false", "1", "", "on"])).as_deref(),
            Some("synchronous_standby_names")
        );
        assert_eq!(
            risk(pg(&["false", "2", "*", "local"])).as_deref(),
            Some("synchronous_commit")
        );
        assert_eq!(risk(pg(&["false", "1", "*", "on"])), None);
        assert_eq!(risk(pg(&["false", "0", "", "on"])), None);
    }

    /// A primary whose commits wait for synchronous standbys can be told a
    /// commit is done that is on the primary only (the wait cancelled):
    /// the warning that says so is recognised by its English text, so
    /// messages in another language let it split brain.
    #[test]
    fn postgres_lc_messages_not_in_english_lets_a_synchronous_primary_split_brain() {
        let pg = |v: &[&str]| judge(Engine::Postgres, "PostgreSQL 15", &strings(v));
        let risk = |lc: &str| {
            pg(&["false", "1", "*", "on", lc])
                .replication
                .split_brain
                .map(|r| (r.setting, r.value, r.fix))
        };
        for english in [
            "",
            "C",
            "POSIX",
            "C.UTF-8",
            "en_US.UTF-8",
            "en_GB",
            "English_United States.1252",
        ] {
            assert_eq!(risk(english), None, "{english}");
        }
        for other in ["de_DE.UTF-8", "fr_FR", "sv_SE.utf8"] {
            let (setting, value, fix) = risk(other).expect(other);
            assert_eq!(setting, "lc_messages");
            assert_eq!(value, format!("'{other}'"));
            assert!(fix.contains("ALTER SYSTEM SET lc_messages = 'C'"), "{fix}");
            assert!(fix.contains("ALTER ROLE"), "{fix}");
            assert!(fix.contains("GRANT SET ON PARAMETER lc_messages"), "{fix}");
        }
        // Waiting for standbys with no WAL sender connected: commits wait
        // until cancelled, so the language matters there too.
        let unsent = pg(&["false", "0", "*", "on", "de_DE.UTF-8"]);
        assert!(unsent.sync_standbys);
        assert_eq!(
            unsent.replication.split_brain.map(|r| r.setting).as_deref(),
            Some("lc_messages")
        );
        // Commits that do not wait for standbys are not cancelled there.
        assert!(
            pg(&["false", "0", "*", "local", "de_DE.UTF-8"])
                .replication
                .split_brain
                .is_none()
        );
        assert!(
            pg(&["false", "0", "", "on", "de_DE.UTF-8"])
                .replication
                .split_brain
                .is_none()
        );
    }

    #[test]
    fn mariadb_read_only_or_replicating_is_a_replica_and_async_replicas_split_brain() {
        let m = |v: &[&str]| judge(Engine::MySql, "MariaDB 10.11", &strings(v));
        assert!(m(&["1", "0", "0", "0", "OFF"]).replica.is_some());
        assert!(m(&["0", "1", "0", "0", "OFF"]).replica.is_some());
        let primary = m(&["0", "0", "1", "0", "OFF"]);
        assert!(primary.replica.is_none());
        let risk = primary.replication.split_brain.expect("async replica");
        assert_eq!(risk.setting, "rpl_semi_sync_master_enabled");
        // Semi-synchronous, but fallen back to asynchronous after a timeout.
        let fallen = m(&["0", "0", "1", "1", "OFF"]).replication.split_brain;
        assert_eq!(fallen.unwrap().setting, "Rpl_semi_sync_master_status");
        assert!(
            m(&["0", "0", "1", "1", "ON"])
                .replication
                .split_brain
                .is_none()
        );
        assert!(
            m(&["0", "0", "0", "0", "OFF"])
                .replication
                .split_brain
                .is_none()
        );
    }

    #[test]
    fn mysql_read_only_or_super_read_only_is_refused() {
        let m = |v: &[&str]| judge(Engine::MySql, "MySQL 8.4.0", &strings(v));
        assert!(m(&["1", "1"]).replica.is_some());
        assert!(m(&["1", "0"]).replica.is_some());
        assert!(m(&["0", "0"]).replica.is_none());
    }
}
