//! The least a lease user needs: its ACL rules, and the check of them that
//! `doctor` and a refused command run.

use std::fmt;

use crate::server::ServerInfo;

/// Which servers need a command.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Needs {
    /// Every server.
    Always,
    /// Servers with `HSETEX` (the HSETEX path; `HPTTL` comes with it).
    Hsetex,
    /// Servers with `WAITAOF` (Redis and Valkey 7.2+).
    Waitaof,
    /// A Cluster: the client reads the slot map and the cluster's state.
    Cluster,
    /// Through Sentinel: the client asks the primary its role.
    Sentinel,
    /// A URL that names a database: the client selects it.
    Select,
}

/// One rule of the lease user's ACL: the rule, which servers need it, and a
/// call that needs it (for `redis.acl_check_cmd`; `K` stands for a key of
/// the prefix).
struct Rule {
    rule: &'static str,
    needs: Needs,
    probe: &'static [&'static str],
}

/// Every command the library sends, at the top level or from its scripts.
const RULES: &[Rule] = &[
    // The connect: the probe, the durability settings, the scripts.
    rule("+ping", Needs::Always, &["ping"]),
    rule("+info", Needs::Always, &["info", "server"]),
    rule("+command|info", Needs::Always, &["command", "info", "get"]),
    rule("+config|get", Needs::Always, &["config", "get", "save"]),
    rule(
        "+script|load",
        Needs::Always,
        &["script", "load", "return 1"],
    ),
    // Claims, renewals, releases, revokes, inspection: one script each.
    rule("+evalsha", Needs::Always, &["evalsha", "0", "1", "K"]),
    rule("+eval", Needs::Always, &["eval", "return 1", "1", "K"]),
    rule("+time", Needs::Always, &["time"]),
    // The commands the scripts call (scripts run with the user's rights).
    rule("+get", Needs::Always, &["get", "K"]),
    rule("+set", Needs::Always, &["set", "K", "v"]),
    rule("+del", Needs::Always, &["del", "K"]),
    rule("+exists", Needs::Always, &["exists", "K"]),
    rule("+pexpire", Needs::Always, &["pexpire", "K", "1"]),
    rule("+pttl", Needs::Always, &["pttl", "K"]),
    rule("+hget", Needs::Always, &["hget", "K", "f"]),
    rule("+hset", Needs::Always, &["hset", "K", "f", "v"]),
    rule("+hsetnx", Needs::Always, &["hsetnx", "K", "f", "v"]),
    rule("+hdel", Needs::Always, &["hdel", "K", "f"]),
    rule("+hexists", Needs::Always, &["hexists", "K", "f"]),
    rule("+hincrby", Needs::Always, &["hincrby", "K", "f", "1"]),
    rule("+hlen", Needs::Always, &["hlen", "K"]),
    rule(
        "+hsetex",
        Needs::Hsetex,
        &["hsetex", "K", "PX", "1", "FIELDS", "1", "f", "v"],
    ),
    rule("+hpttl", Needs::Hsetex, &["hpttl", "K", "FIELDS", "1", "f"]),
    // Waits after claims and renewals: for the fsync (servers that fsync
    // once a second), for replicas (`wait_for_replicas`).
    rule("+waitaof", Needs::Waitaof, &["waitaof", "1", "0", "1"]),
    rule("+wait", Needs::Always, &["wait", "1", "1"]),
    rule("+cluster|slots", Needs::Cluster, &["cluster", "slots"]),
    rule("+cluster|info", Needs::Cluster, &["cluster", "info"]),
    rule("+role", Needs::Sentinel, &["role"]),
    rule("+select", Needs::Select, &["select", "0"]),
];

const fn rule(rule: &'static str, needs: Needs, probe: &'static [&'static str]) -> Rule {
    Rule { rule, needs, probe }
}

/// The ACL of a lease user: what the library sends, on the keys of one key
/// prefix, and nothing else (no other key, no channel, no administrative
/// command). [`LeaseUserAcl::setuser`] is the command an administrator runs;
/// the crate README quotes it, and the tests run it.
///
/// Scripts run with the rights of the user who calls them, so the commands
/// the scripts call are granted one by one. `ACL SETUSER` refuses a command
/// the server does not have, so the rules follow the server:
/// [`LeaseUserAcl::new`] is for a server with `HSETEX` and `WAITAOF`
/// (Redis 8+, Valkey 9+), [`LeaseUserAcl::for_server`] for the one a
/// strategy connected to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseUserAcl {
    prefix: String,
    hsetex: bool,
    waitaof: bool,
    cluster: bool,
    sentinel: bool,
    select: bool,
}

impl LeaseUserAcl {
    /// The rules for keys under `prefix` on a server with `HSETEX` and
    /// `WAITAOF` (Redis 8+, Valkey 9+), one server (no Cluster, no
    /// Sentinel).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            hsetex: true,
            waitaof: true,
            cluster: false,
            sentinel: false,
            select: false,
        }
    }

    /// The rules for keys under `prefix` on `server`: without `+hsetex` and
    /// `+hpttl` where it has no `HSETEX` (Redis 7, Valkey 8), without
    /// `+waitaof` before 7.2.
    pub fn for_server(prefix: impl Into<String>, server: &ServerInfo) -> Self {
        Self {
            hsetex: server.hsetex,
            waitaof: server.waitaof,
            ..Self::new(prefix)
        }
    }

    /// For a Cluster: `+cluster|slots` and `+cluster|info` too (the
    /// client reads the slot map and the cluster's state).
    pub fn cluster(mut self, yes: bool) -> Self {
        self.cluster = yes;
        self
    }

    /// Through Sentinel: `+role` on the data servers too (the client asks
    /// the primary the Sentinels named whether it is one).
    pub fn sentinel(mut self, yes: bool) -> Self {
        self.sentinel = yes;
        self
    }

    /// For a URL that names a database (`redis://HOST/2`): `+select` too.
    pub fn select(mut self, yes: bool) -> Self {
        self.select = yes;
        self
    }

    /// The key pattern: every key of the prefix (`{<prefix>:<pool>}:…`).
    pub fn key_pattern(&self) -> String {
        format!("~{{{}:*", self.prefix)
    }

    fn applies(&self, needs: Needs) -> bool {
        match needs {
            Needs::Always => true,
            Needs::Hsetex => self.hsetex,
            Needs::Waitaof => self.waitaof,
            Needs::Cluster => self.cluster,
            Needs::Sentinel => self.sentinel,
            Needs::Select => self.select,
        }
    }

    fn command_rules(&self) -> impl Iterator<Item = &'static Rule> + '_ {
        RULES.iter().filter(|r| self.applies(r.needs))
    }

    /// The rules, in the order `ACL SETUSER` takes them: `resetkeys`, the
    /// key pattern, `resetchannels`, `-@all`, then one `+command` each.
    pub fn rules(&self) -> Vec<String> {
        ["resetkeys".to_owned(), self.key_pattern()]
            .into_iter()
            .chain(["resetchannels".to_owned(), "-@all".to_owned()])
            .chain(self.command_rules().map(|r| r.rule.to_owned()))
            .collect()
    }

    /// The command an administrator runs to make (or reset) the user
    /// `user`, its password left as `>PASSWORD`: `ACL SETUSER ids on
    /// >PASSWORD resetkeys ~{ids:* resetchannels -@all +ping …`.
    pub fn setuser(&self, user: &str) -> String {
        format!("ACL SETUSER {user} on >PASSWORD {self}")
    }

    /// The Lua script that checks every rule with `redis.acl_check_cmd`
    /// (Redis and Valkey 7+) for the user who runs it, `KEYS[1]` standing
    /// for a key of the prefix; it answers the rules refused, or `nil` where
    /// the server cannot check.
    pub(crate) fn check_script(&self) -> String {
        let mut lua = String::from(
            "if not redis.acl_check_cmd then return nil end\n\
             local K = KEYS[1]\nlocal missing = {}\n\
             local function check(rule, ...)\n\
               local ok, allowed = pcall(redis.acl_check_cmd, ...)\n\
               if ok and not allowed then missing[#missing + 1] = rule end\n\
             end\n",
        );
        for r in self.command_rules() {
            let args: Vec<String> = r
                .probe
                .iter()
                .map(|a| {
                    if *a == "K" {
                        "K".to_owned()
                    } else {
                        format!("'{a}'")
                    }
                })
                .collect();
            lua.push_str(&format!("check('{}', {})\n", r.rule, args.join(", ")));
        }
        lua.push_str("return missing\n");
        lua
    }

    /// The key the check script is given: in the prefix, in no pool.
    pub(crate) fn check_key(&self) -> String {
        format!("{{{}:~grants}}", self.prefix)
    }

    /// The rule that grants what a server's `NOPERM` answer refused, when
    /// the answer names it: `+evalsha` for "no permissions to run the
    /// 'evalsha' command", the key pattern for "access one of the keys".
    pub(crate) fn rule_for(&self, refusal: &str) -> Option<String> {
        let lower = refusal.to_ascii_lowercase();
        // Redis: "access one of the keys", in a script "access at least one
        // of the keys"; Valkey: "access a key".
        if lower.contains("of the keys") || lower.contains("access a key") {
            return Some(self.key_pattern());
        }
        // Redis and Valkey at the top level, Valkey in a script ("ACL failure
        // in script: User ids has no permissions to run the 'set' command");
        // Redis's scripts do not name the command.
        let (_, rest) = lower.split_once("permissions to run the '")?;
        let (command, _) = rest.split_once('\'')?;
        Some(format!("+{command}"))
    }
}

impl fmt::Display for LeaseUserAcl {
    /// The rules, space-separated, as `ACL SETUSER` takes them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.rules().join(" "))
    }
}

/// What the check of a user's rules found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Grants {
    /// The rules the user lacks, as `ACL SETUSER` takes them.
    pub missing: Vec<String>,
    /// Why some rules could not be checked (the server has no
    /// `redis.acl_check_cmd`, or the check script itself was refused).
    pub unchecked: Option<String>,
}

impl Grants {
    /// Whether every rule was checked and granted.
    pub fn complete(&self) -> bool {
        self.missing.is_empty() && self.unchecked.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::Product;

    #[test]
    fn rules_follow_the_server() {
        let redis7 = ServerInfo {
            product: Product::Redis,
            version: "7.0.15".into(),
            hsetex: false,
            waitaof: false,
        };
        let acl = LeaseUserAcl::for_server("ids", &redis7);
        let rules = acl.rules();
        assert_eq!(
            rules[..4],
            ["resetkeys", "~{ids:*", "resetchannels", "-@all"]
        );
        assert!(!rules.iter().any(|r| r == "+hsetex" || r == "+waitaof"));
        assert!(
            LeaseUserAcl::new("ids")
                .rules()
                .iter()
                .any(|r| r == "+hsetex")
        );
        assert!(
            LeaseUserAcl::new("ids")
                .cluster(true)
                .rules()
                .iter()
                .any(|r| r == "+cluster|slots")
        );
    }

    /// The README's "Least privilege" section quotes these commands as
    /// they are: one source of truth, which the conformance rows run.
    #[test]
    fn the_readme_quotes_the_acl() {
        let readme = include_str!("../README.md");
        let older = |waitaof| ServerInfo {
            product: Product::Redis,
            version: String::new(),
            hsetex: false,
            waitaof,
        };
        let base = LeaseUserAcl::new("ids");
        for acl in [
            base.clone(),
            LeaseUserAcl::for_server("ids", &older(true)),
            LeaseUserAcl::for_server("ids", &older(false)),
        ] {
            let line = acl.setuser("ids");
            assert!(
                readme.lines().any(|l| l == line),
                "the README does not quote\n{line}"
            );
        }
        let added = |with: LeaseUserAcl| -> String {
            let all = base.rules();
            let more: Vec<String> = with
                .rules()
                .into_iter()
                .filter(|r| !all.contains(r))
                .collect();
            more.join(" ")
        };
        for extra in [
            added(base.clone().cluster(true)),
            added(base.clone().sentinel(true)),
            added(base.clone().select(true)),
        ] {
            assert!(readme.contains(&format!("`{extra}`")), "{extra}");
        }
    }

    #[test]
    fn refusals_name_their_rule() {
        let acl = LeaseUserAcl::new("ids");
        assert_eq!(
            acl.rule_for("NOPERM this user has no permissions to run the 'evalsha' command"),
            Some("+evalsha".into())
        );
        assert_eq!(
            acl.rule_for("NOPERM this user has no permissions to run the 'config|get' command"),
            Some("+config|get".into())
        );
        assert_eq!(
            acl.rule_for(
                "NOPERM this user has no permissions to access one of the keys used as arguments"
            ),
            Some("~{ids:*".into())
        );
        assert_eq!(
            acl.rule_for("NOPERM No permissions to access a key"),
            Some("~{ids:*".into())
        );
        assert_eq!(
            acl.rule_for(
                "ERR ACL failure in script: User ids has no permissions to run the 'set' command \
                 script: 2b58, on @user_script:1."
            ),
            Some("+set".into())
        );
        assert_eq!(
            acl.rule_for(
                "ERR The user executing the script can't access at least one of the keys \
                 mentioned in the command arguments"
            ),
            Some("~{ids:*".into())
        );
        assert_eq!(
            acl.rule_for("ERR The user executing the script can't run this command"),
            None
        );
    }
}
