//! The least a lease user needs: one role with read-write on the key
//! prefix, and the check of it that `doctor` runs.

use etcd_client::{Permission, PermissionType};

/// The role of an etcd lease user: read-write on every key under the key
/// prefix (`<prefix>/`), and nothing else. Leases need no permission: a
/// user may grant, keep alive and look up leases, and revoke one whose keys
/// it may write (etcd checks the keys attached to it). `STATUS`, which
/// `connect` and `leasehold doctor` send, needs none either. The
/// administrator (`root`) makes users and roles and enables auth.
///
/// [`LeaseRole::etcdctl`] is what an administrator runs; the crate README
/// quotes it, and the tests grant the same with [`LeaseRole::permission`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRole {
    prefix: String,
}

impl LeaseRole {
    /// The role for keys under `prefix` (a trailing `/` is ignored, as in
    /// [`EtcdConfig::prefix`](crate::EtcdConfig::prefix)).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into().trim_end_matches('/').to_owned(),
        }
    }

    /// The keys the role needs: `<prefix>/` and every key that starts
    /// with it.
    pub fn key_prefix(&self) -> String {
        format!("{}/", self.prefix)
    }

    /// The permission to grant the role: read-write on
    /// [`LeaseRole::key_prefix`], as a prefix.
    pub fn permission(&self) -> Permission {
        Permission::read_write(self.key_prefix()).with_prefix()
    }

    /// The grant that a refusal asks for: `etcdctl role grant-permission
    /// ROLE readwrite --prefix=true 'ids/'`.
    pub fn grant_command(&self, role: &str) -> String {
        format!(
            "etcdctl role grant-permission {role} readwrite --prefix=true '{}'",
            self.key_prefix()
        )
    }

    /// What an administrator runs (as `root`, with `--user root`) to make
    /// the role `role` and the user `user`, who is asked for its password.
    pub fn etcdctl(&self, user: &str, role: &str) -> Vec<String> {
        vec![
            format!("etcdctl role add {role}"),
            self.grant_command(role),
            format!("etcdctl user add {user}"),
            format!("etcdctl user grant-role {user} {role}"),
        ]
    }

    /// Whether `permissions` (of every role a user has) let it read and
    /// write every key under the prefix.
    pub fn covered_by(&self, permissions: &[Permission]) -> bool {
        let start = self.key_prefix().into_bytes();
        // The end of the prefix's range: `<prefix>0` ('0' follows '/').
        let mut end = start.clone();
        if let Some(last) = end.last_mut() {
            *last += 1;
        }
        let covers = |kind: PermissionType| {
            permissions.iter().any(|p| {
                let range_end = p.range_end();
                let kinds =
                    p.get_type() == kind as i32 || p.get_type() == PermissionType::Readwrite as i32;
                // An empty end is one key; "\0" is every key from `key` on.
                let reaches = range_end == [0] || (!range_end.is_empty() && range_end >= &end[..]);
                kinds && p.key() <= &start[..] && reaches
            })
        };
        covers(PermissionType::Read) && covers(PermissionType::Write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Permissions as etcd answers `RoleGet` (with their range ends: the
    /// client computes a prefix's end only when it sends one).
    #[test]
    fn the_prefix_is_covered_by_its_permission_only() {
        let role = LeaseRole::new("ids/");
        assert_eq!(role.key_prefix(), "ids/");
        let prefix = |p: Permission, key: &str| {
            let mut end = key.as_bytes().to_vec();
            *end.last_mut().unwrap() += 1;
            p.with_range_end(end)
        };
        assert!(role.covered_by(&[prefix(Permission::read_write("ids/"), "ids/")]));
        assert!(role.covered_by(&[Permission::read_write("\0").with_range_end("\0")]));
        assert!(role.covered_by(&[
            prefix(Permission::read("ids/"), "ids/"),
            prefix(Permission::write("i"), "i"),
        ]));
        assert!(!role.covered_by(&[prefix(Permission::read("ids/"), "ids/")]));
        assert!(!role.covered_by(&[Permission::read_write("ids/")]));
        assert!(!role.covered_by(&[prefix(Permission::read_write("ids/a"), "ids/a")]));
        assert!(!role.covered_by(&[]));
    }

    /// The README's "Least privilege" section quotes these commands as
    /// they are.
    #[test]
    fn the_readme_quotes_the_role() {
        let readme = include_str!("../README.md");
        for line in LeaseRole::new("ids").etcdctl("ids", "ids") {
            assert!(
                readme.lines().any(|l| l == line),
                "the README does not quote\n{line}"
            );
        }
    }
}
