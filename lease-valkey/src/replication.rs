//! What connect reads of the server's replication (`INFO replication`,
//! `CONFIG GET min-replicas-to-write`): a plain URL naming a replica is
//! refused (its writes are refused or, where a replica is writable, lost at
//! the next resync; either way not the primary's), and a primary with
//! replicas that confirms writes alone can split brain: after a failover
//! it goes on confirming claims and renewals to the clients a partition left
//! with it, while the promoted replica grants the same slots to the others.
//! `min-replicas-to-write 1` (with `min-replicas-max-lag` below the pool's
//! span) makes the old primary refuse writes once its replicas are gone
//! (`NOREPLICAS`, a `Retry` for a renewal), and so does
//! [`ValkeyConfig::wait_for_replicas`](crate::ValkeyConfig::wait_for_replicas):
//! a claim or renewal then counts only once a replica has it.

use std::time::Duration;

use leasehold_core::{Replication, SplitBrainRisk};

/// What `INFO replication` and `CONFIG GET` said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Read {
    /// `role`: `master` or `slave`.
    pub(crate) role: String,
    /// `connected_slaves`.
    pub(crate) replicas: u64,
    /// `master_host:master_port` of a replica.
    pub(crate) primary: Option<String>,
    /// `min-replicas-to-write` (`None`: `CONFIG GET` unavailable).
    pub(crate) min_replicas: Option<u64>,
    /// `min-replicas-max-lag`.
    pub(crate) max_lag: Option<String>,
}

impl Read {
    /// Reads the `INFO replication` section.
    pub(crate) fn from_info(info: &str) -> Self {
        let field = |name: &str| {
            info.lines().find_map(|l| {
                l.strip_prefix(name)
                    .and_then(|r| r.strip_prefix(':'))
                    .map(|v| v.trim().to_owned())
            })
        };
        let primary = match (field("master_host"), field("master_port")) {
            (Some(host), Some(port)) => Some(format!("{host}:{port}")),
            (Some(host), None) => Some(host),
            _ => None,
        };
        Self {
            role: field("role").unwrap_or_default(),
            replicas: field("connected_slaves")
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
            primary,
            min_replicas: None,
            max_lag: None,
        }
    }

    /// Whether the server is a replica.
    pub(crate) fn is_replica(&self) -> bool {
        self.role.eq_ignore_ascii_case("slave") || self.role.eq_ignore_ascii_case("replica")
    }
}

/// What a replica refused at connect says: what it is, then the fix.
pub(crate) fn replica_text(server: &str, read: &Read) -> (String, String) {
    let of = read
        .primary
        .as_deref()
        .map_or(String::new(), |p| format!(" of {p}"));
    (
        format!(
            "{server} is a replica{of} (INFO replication: role:{}), so leases on it are refused: \
             its writes are the primary's to make",
            read.role
        ),
        "give the primary's address, or a Sentinel URL (redis-sentinel://S1,S2,S3?\
         sentinelServiceName=NAME) whose client always asks for the primary"
            .to_owned(),
    )
}

/// Judges a primary's replication: can it confirm a write that no replica
/// has, once its replicas are cut off? `wait` is the configured
/// `wait_for_replicas`.
pub(crate) fn judge(read: &Read, wait: Option<(u32, Duration)>) -> Replication {
    if read.replicas == 0 {
        return Replication::new("primary with no replica connected (INFO replication)");
    }
    let min = read.min_replicas.map_or_else(
        || "unknown (CONFIG GET unavailable)".to_owned(),
        |n| n.to_string(),
    );
    let lag = read.max_lag.as_deref().unwrap_or("unknown");
    let waits = wait.filter(|(n, _)| *n > 0);
    let mut found = format!(
        "primary with {} replica(s) connected, min-replicas-to-write {min}, \
         min-replicas-max-lag {lag}",
        read.replicas
    );
    if let Some((n, timeout)) = waits {
        found.push_str(&format!(
            ", claims and renewals wait for {n} replica(s) (WAIT, {timeout:?})"
        ));
    }
    let replication = Replication::new(found);
    if waits.is_some() || read.min_replicas.is_some_and(|n| n > 0) {
        return replication;
    }
    replication.with_risk(SplitBrainRisk {
        setting: "min-replicas-to-write".to_owned(),
        value: min,
        fix: "on every data server set min-replicas-to-write 1 and min-replicas-max-lag below \
              the pools' span (TTL plus twice max_clock_skew), with CONFIG SET and in \
              valkey.conf / redis.conf: a primary cut off from its replicas then refuses \
              writes (NOREPLICAS); or ValkeyConfig::wait_for_replicas(1, timeout)"
            .to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_info_replication() {
        let replica = Read::from_info(
            "# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\nmaster_port:6380\r\n\
             connected_slaves:0\r\n",
        );
        assert!(replica.is_replica());
        assert_eq!(replica.primary.as_deref(), Some("127.0.0.1:6380"));
        let primary = Read::from_info("# Replication\r\nrole:master\r\nconnected_slaves:2\r\n");
        assert!(!primary.is_replica());
        assert_eq!(primary.replicas, 2);
    }

    /// A primary with replicas splits brain unless it needs a replica to
    /// write, or the claims wait for one; one without replicas cannot.
    #[test]
    fn a_primary_with_replicas_that_writes_alone_can_split_brain() {
        let read = |replicas, min| Read {
            role: "master".into(),
            replicas,
            primary: None,
            min_replicas: min,
            max_lag: Some("10".into()),
        };
        let risk = judge(&read(1, Some(0)), None).split_brain.expect("a risk");
        assert_eq!(
            (risk.setting.as_str(), risk.value.as_str()),
            ("min-replicas-to-write", "0")
        );
        assert!(judge(&read(1, None), None).split_brain.is_some());
        assert!(judge(&read(1, Some(1)), None).split_brain.is_none());
        assert!(judge(&read(0, Some(0)), None).split_brain.is_none());
        let wait = Some((1, Duration::from_millis(200)));
        assert!(judge(&read(1, Some(0)), wait).split_brain.is_none());
    }
}
