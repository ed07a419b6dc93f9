//! What the server keeps of the leases: eviction, persistence, replication.

use std::fmt;
use std::time::Duration;

use leasehold_core::DurabilityRisk;

/// What the server's configuration, read at connect (`CONFIG GET`), says
/// about keeping the pool's keys. `None` fields are unknown: `CONFIG` is
/// disabled, renamed or denied (managed services often do that).
///
/// See the crate README's durability table for what each setting guarantees.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Persistence {
    /// `maxmemory-policy`: anything but `noeviction` may evict leases and the
    /// fences hash.
    pub maxmemory_policy: Option<String>,
    /// The policy may evict and [`ValkeyConfig::allow_eviction`](crate::ValkeyConfig::allow_eviction)
    /// accepted it.
    pub eviction_allowed: bool,
    /// `appendonly`: the append-only file (AOF) is on.
    pub appendonly: Option<bool>,
    /// `appendfsync`: `always`, `everysec` or `no`.
    pub appendfsync: Option<String>,
    /// `no-appendfsync-on-rewrite`: while a snapshot or an AOF rewrite runs
    /// in a child process, the server skips its fsyncs (with `always` and
    /// with `everysec`), so its durability is that of `appendfsync no` for
    /// as long as the child runs; and Valkey 8.1 confirmed to `WAITAOF` a
    /// write it had not fsynced meanwhile. Only `no` keeps what the other
    /// two settings promise.
    pub no_appendfsync_on_rewrite: Option<bool>,
    /// `save`: the RDB snapshot schedule (empty: no snapshots).
    pub save: Option<String>,
    /// The `WAIT` after claims and renewals: replicas and timeout.
    pub wait: Option<(u32, Duration)>,
    /// `CONFIG GET` was refused to the user (`NOPERM`): the ACL rule that
    /// grants it, `+config|get`. The settings then read unknown, which
    /// counts as not durable.
    pub config_denied: Option<String>,
}

impl Persistence {
    /// Nothing known (before the probe, or with `CONFIG` unavailable).
    pub(crate) fn unknown(wait: Option<(u32, Duration)>) -> Self {
        Self {
            maxmemory_policy: None,
            eviction_allowed: false,
            appendonly: None,
            appendfsync: None,
            no_appendfsync_on_rewrite: None,
            save: None,
            wait,
            config_denied: None,
        }
    }

    /// Whether the policy may evict keys (`None`: unknown).
    pub fn evicts(&self) -> Option<bool> {
        self.maxmemory_policy
            .as_deref()
            .map(|p| !p.eq_ignore_ascii_case("noeviction"))
    }

    /// Whether the server persists what it acknowledged (AOF or RDB
    /// snapshots; `None`: unknown).
    pub fn persists(&self) -> Option<bool> {
        match (self.appendonly, self.save.as_deref()) {
            (Some(true), _) => Some(true),
            (_, Some(save)) if !save.trim().is_empty() => Some(true),
            (Some(false), Some(_)) => Some(false),
            _ => None,
        }
    }

    /// Whether every acknowledged write is on disk before the answer: AOF on
    /// with `appendfsync always` and `no-appendfsync-on-rewrite no` (false
    /// when unknown). Anything less lets a restart forget leases, so the
    /// restart guard applies.
    pub fn keeps_every_write(&self) -> bool {
        self.appendonly == Some(true)
            && self.fsyncs_during_rewrites()
            && self
                .appendfsync
                .as_deref()
                .is_some_and(|f| f.eq_ignore_ascii_case("always"))
    }

    /// Whether the server fsyncs while a child process writes a snapshot or
    /// rewrites the AOF (`no-appendfsync-on-rewrite no`; false when
    /// unknown). With `yes` it skips those fsyncs, answers writes and
    /// `WAITAOF` anyway, and a crash of the machine meanwhile loses them.
    pub fn fsyncs_during_rewrites(&self) -> bool {
        self.no_appendfsync_on_rewrite == Some(false)
    }

    /// Whether the append-only file is on with `appendfsync everysec`: a
    /// write reaches the disk within about a second, or as soon as a client
    /// asks with `WAITAOF`, so a claim can wait until what it relies on is on
    /// disk. Not with `appendfsync no`: there Redis 8.2 and Valkey 8.1 never
    /// confirm a connection's writes to `WAITAOF`, so a claim that waits
    /// would wait forever (such a server is refused like one without AOF).
    /// Nor with `no-appendfsync-on-rewrite yes`: there `WAITAOF` can confirm
    /// a write the server has not fsynced (seen on Valkey 8.1).
    pub fn fsyncs_on_request(&self) -> bool {
        self.appendonly == Some(true)
            && self.fsyncs_during_rewrites()
            && self
                .appendfsync
                .as_deref()
                .is_some_and(|f| f.eq_ignore_ascii_case("everysec"))
    }

    /// The settings that decide whether every acknowledged write is kept,
    /// as read: `appendonly yes, appendfsync everysec,
    /// no-appendfsync-on-rewrite no` (`unknown` where `CONFIG GET` could not
    /// read them).
    pub fn persistence_settings(&self) -> String {
        let yes_no = |v: Option<bool>| match v {
            Some(true) => "yes",
            Some(false) => "no",
            None => "unknown",
        };
        let denied = self.config_denied.as_deref().map_or(String::new(), |rule| {
            format!(" (CONFIG GET is refused to this user: grant it {rule}, read-only)")
        });
        format!(
            "appendonly {}, appendfsync {}, no-appendfsync-on-rewrite {}{denied}",
            yes_no(self.appendonly),
            self.appendfsync.as_deref().unwrap_or("unknown"),
            yes_no(self.no_appendfsync_on_rewrite),
        )
    }

    /// The settings that can lose an acknowledged write, in core's terms,
    /// each with what it loses and its fix. Settings `CONFIG GET` could not
    /// read count as a risk: nothing shows that they keep the writes.
    pub fn durability(&self) -> leasehold_core::Durability {
        let mut risks = Vec::new();
        if let (Some(true), Some(policy)) = (self.evicts(), self.maxmemory_policy.as_deref()) {
            risks.push(DurabilityRisk {
                setting: "maxmemory-policy".into(),
                value: policy.into(),
                loses: "a lease or the fences hash, when memory is short".into(),
                fix: "CONFIG SET maxmemory-policy noeviction, and set it in the config file".into(),
            });
        }
        if self.appendonly.is_none() && self.save.is_none() {
            risks.push(DurabilityRisk {
                setting: "appendonly/appendfsync".into(),
                value: "unknown (CONFIG GET is disabled or denied)".into(),
                loses: "possibly every lease, fence and floor at a restart".into(),
                fix: "check with the provider that appendonly is yes and appendfsync always".into(),
            });
        } else if self.persists() == Some(false) {
            risks.push(DurabilityRisk {
                setting: "appendonly/save".into(),
                value: "no persistence".into(),
                loses: "every lease, fence and floor at a restart".into(),
                fix: "appendonly yes and appendfsync always".into(),
            });
        } else if self.appendonly != Some(true) && self.persists() == Some(true) {
            risks.push(DurabilityRisk {
                setting: "save".into(),
                value: self.save.clone().unwrap_or_default(),
                loses: "the writes since the last snapshot, at a restart".into(),
                fix: "appendonly yes and appendfsync always".into(),
            });
        } else if self.appendonly == Some(true)
            && !self
                .appendfsync
                .as_deref()
                .is_some_and(|f| f.eq_ignore_ascii_case("always"))
        {
            risks.push(DurabilityRisk {
                setting: "appendfsync".into(),
                value: self.appendfsync.clone().unwrap_or_else(|| "unknown".into()),
                loses: "the writes not yet fsynced (about the last second), at a crash of the \
                        machine"
                    .into(),
                fix: "appendfsync always".into(),
            });
        }
        if self.appendonly == Some(true) && !self.fsyncs_during_rewrites() {
            risks.push(DurabilityRisk {
                setting: "no-appendfsync-on-rewrite".into(),
                value: match self.no_appendfsync_on_rewrite {
                    Some(true) => "yes".into(),
                    _ => "unknown".into(),
                },
                loses: "the writes acknowledged while a snapshot or an AOF rewrite runs (their \
                        fsyncs are skipped, and WAITAOF may confirm them anyway), at a crash of \
                        the machine"
                    .into(),
                fix: "CONFIG SET no-appendfsync-on-rewrite no, and set it in the config file"
                    .into(),
            });
        }
        leasehold_core::Durability { risks }
    }

    /// The warning to show when the server may lose leases by eviction
    /// (set only when [`ValkeyConfig::allow_eviction`](crate::ValkeyConfig::allow_eviction)
    /// let the connection through).
    pub fn warning(&self) -> Option<String> {
        let policy = self.maxmemory_policy.as_deref()?;
        self.eviction_allowed.then(|| {
            format!(
                "WARNING: maxmemory-policy is {policy}: the server may evict a lease (two \
                 holders of one slot) or the fences hash (the pool's fences and floors; claims \
                 then refuse); set maxmemory-policy noeviction"
            )
        })
    }
}

impl fmt::Display for Persistence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unknown = "unknown";
        write!(
            f,
            "maxmemory-policy {}",
            self.maxmemory_policy.as_deref().unwrap_or(unknown)
        )?;
        match self.appendonly {
            Some(true) => {
                write!(
                    f,
                    ", AOF on (appendfsync {}",
                    self.appendfsync.as_deref().unwrap_or(unknown)
                )?;
                match self.no_appendfsync_on_rewrite {
                    Some(false) => f.write_str(")")?,
                    Some(true) => f.write_str(", no fsync while a child process saves)")?,
                    None => f.write_str(", no-appendfsync-on-rewrite unknown)")?,
                }
            }
            Some(false) => f.write_str(", AOF off")?,
            None => f.write_str(", AOF unknown")?,
        }
        match self.save.as_deref() {
            Some(s) if s.trim().is_empty() => f.write_str(", RDB snapshots off")?,
            Some(s) => write!(f, ", RDB snapshots (save {s:?})")?,
            None => f.write_str(", RDB snapshots unknown")?,
        }
        if self.persists() == Some(false) {
            f.write_str(" (a restart loses leases, fences and floors)")?;
        }
        match self.wait {
            Some((n, t)) => write!(f, ", WAIT {n} replicas within {t:?}")?,
            None => f.write_str(", no WAIT")?,
        }
        if let Some(w) = self.warning() {
            write!(f, "; {w}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What can lose a write is a risk, and so is what could not be read.
    #[test]
    fn durability_names_each_setting_that_can_lose_a_write() {
        let mut d = Persistence::unknown(None);
        let risks = |d: &Persistence| -> Vec<String> {
            d.durability()
                .risks
                .into_iter()
                .map(|r| r.setting)
                .collect()
        };
        assert_eq!(risks(&d), ["appendonly/appendfsync"]);
        d.maxmemory_policy = Some("noeviction".into());
        d.appendonly = Some(true);
        d.appendfsync = Some("always".into());
        d.save = Some(String::new());
        assert_eq!(
            risks(&d),
            ["no-appendfsync-on-rewrite"],
            "unread, it is a risk"
        );
        d.no_appendfsync_on_rewrite = Some(true);
        assert_eq!(risks(&d), ["no-appendfsync-on-rewrite"]);
        d.no_appendfsync_on_rewrite = Some(false);
        assert!(d.durability().is_durable(), "{:?}", d.durability());
        d.appendfsync = Some("everysec".into());
        assert_eq!(risks(&d), ["appendfsync"]);
        d.no_appendfsync_on_rewrite = Some(true);
        assert_eq!(risks(&d), ["appendfsync", "no-appendfsync-on-rewrite"]);
        d.no_appendfsync_on_rewrite = Some(false);
        d.appendonly = Some(false);
        assert_eq!(risks(&d), ["appendonly/save"]);
        d.save = Some("3600 1".into());
        assert_eq!(risks(&d), ["save"]);
        d.maxmemory_policy = Some("allkeys-lru".into());
        assert_eq!(risks(&d), ["maxmemory-policy", "save"]);
    }

    fn text_has(d: &Persistence, part: &str) -> bool {
        d.to_string().contains(part)
    }

    #[test]
    fn describes_settings() {
        let mut d = Persistence::unknown(None);
        assert_eq!(d.evicts(), None);
        assert_eq!(d.persists(), None);
        assert!(d.to_string().starts_with("maxmemory-policy unknown"));
        d.maxmemory_policy = Some("allkeys-lru".into());
        d.appendonly = Some(false);
        d.save = Some(String::new());
        assert_eq!(d.evicts(), Some(true));
        assert_eq!(d.persists(), Some(false));
        assert_eq!(d.warning(), None);
        d.eviction_allowed = true;
        let text = d.to_string();
        assert!(
            text.contains("WARNING") && text.contains("allkeys-lru"),
            "{text}"
        );
        assert!(text.contains("a restart loses"), "{text}");
        d.appendonly = Some(true);
        d.appendfsync = Some("everysec".into());
        // Unread, the setting that skips fsyncs during rewrites may be on.
        assert!(!d.fsyncs_on_request() && !d.keeps_every_write());
        d.no_appendfsync_on_rewrite = Some(false);
        assert!(d.fsyncs_on_request() && !d.keeps_every_write());
        assert_eq!(
            d.persistence_settings(),
            "appendonly yes, appendfsync everysec, no-appendfsync-on-rewrite no"
        );
        d.appendfsync = Some("no".into());
        assert!(!d.fsyncs_on_request() && !d.keeps_every_write());
        d.appendfsync = Some("always".into());
        assert!(!d.fsyncs_on_request() && d.keeps_every_write());
        d.no_appendfsync_on_rewrite = Some(true);
        assert!(
            !d.keeps_every_write(),
            "always, but not while a child saves"
        );
        assert!(text_has(&d, "no fsync while a child process saves"));
        d.appendfsync = Some("everysec".into());
        assert!(
            !d.fsyncs_on_request(),
            "WAITAOF can confirm unsynced writes"
        );
        d.appendfsync = Some("always".into());
        d.no_appendfsync_on_rewrite = Some(false);
        d.wait = Some((1, Duration::from_millis(100)));
        let text = d.to_string();
        assert!(text.contains("AOF on (appendfsync always)"), "{text}");
        assert!(text.contains("WAIT 1 replicas"), "{text}");
        assert_eq!(d.persists(), Some(true));
        d.maxmemory_policy = Some("noeviction".into());
        assert_eq!(d.evicts(), Some(false));
    }
}
