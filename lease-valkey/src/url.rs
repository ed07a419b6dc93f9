//! Store URLs: the schemes this backend accepts and what their parts mean.

use std::path::PathBuf;

use leasehold_core::ConfigError;
use leasehold_core::url::StoreUrl;

use crate::config::{ValkeyConfig, check_prefix};
use crate::error::ValkeyError;
use crate::tls::{TlsFiles, scheme_uses_tls};

/// The accepted shape, quoted by every URL error.
const FORM: &str = "redis://[USER:PASSWORD@]HOST[:PORT][/DB] or valkey://…, over TLS rediss:// or valkeys:// with ?ca=PATH (and &cert=PATH&key=PATH for mutual TLS), with options ?prefix=NAME&op_timeout=1s (through Sentinel: redis-sentinel://SENTINEL[:PORT][,SENTINEL[:PORT]…][/DB]?sentinelServiceName=NAME, over TLS rediss-sentinel://; a Cluster: redis-cluster://NODE[:PORT][,NODE[:PORT]…], over TLS rediss-cluster://)";

/// The accepted shape of a Cluster URL.
const CLUSTER_FORM: &str = "redis-cluster://[USER:PASSWORD@]NODE[:PORT][,NODE[:PORT]…] (or valkey-cluster://…, over TLS rediss-cluster:// or valkeys-cluster://; more nodes also as ?node=HOST:PORT; no database: a Cluster has only 0), with options prefix and op_timeout (and ca, cert, key over TLS)";

/// The data servers' default port, for a Cluster node written without one.
const SERVER_PORT: u16 = 6379;

/// The accepted shape of a URL through Sentinel.
const SENTINEL_FORM: &str = "redis-sentinel://[USER:PASSWORD@]SENTINEL[:PORT][,SENTINEL[:PORT]…][/DB]?sentinelServiceName=NAME (or valkey-sentinel://…, over TLS rediss-sentinel:// or valkeys-sentinel://; more Sentinels also as &node=HOST:PORT), with options prefix and op_timeout (and ca, cert, key over TLS)";

/// Sentinel's default port, for a Sentinel written without one.
const SENTINEL_PORT: u16 = 26379;

/// The options every URL takes, and those a TLS URL takes too.
const OPTIONS: &str = "prefix, op_timeout, password_file, durability, \
                       assume_one_timing_per_pool, restart_guard, require_durable, \
                       allow_eviction, refuse_split_brain";
const TLS_OPTIONS: &str = "prefix, op_timeout, password_file, durability, \
                           assume_one_timing_per_pool, restart_guard, require_durable, \
                           allow_eviction, refuse_split_brain, ca, cert, key";

/// The durability options a URL may carry: `durability=…`, and the
/// deprecated switches, each `=true` or `=false`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct DurabilityOptions {
    policy: Option<leasehold_core::DurabilityPolicy>,
    one_timing: Option<bool>,
    restart_guard: Option<bool>,
    require_durable: Option<bool>,
}

impl DurabilityOptions {
    /// Reads (and takes) each of `parts`.
    fn take(parts: &mut StoreUrl) -> Result<Self, ConfigError> {
        Ok(Self {
            policy: parts.take_durability()?,
            one_timing: parts.take_bool("assume_one_timing_per_pool")?,
            restart_guard: parts.take_bool("restart_guard")?,
            require_durable: parts.take_bool("require_durable")?,
        })
    }

    /// `config` with the options given: the policy first, then the
    /// deprecated switches, which adjust it, through their setters, so that
    /// a URL keeps meaning what it meant for as long as they are kept.
    #[allow(deprecated)]
    fn apply(self, mut config: ValkeyConfig) -> ValkeyConfig {
        if let Some(policy) = self.policy {
            config = config.durability(policy);
        }
        if let Some(yes) = self.one_timing {
            config = config.assume_one_timing_per_pool(yes);
        }
        if let Some(on) = self.restart_guard {
            config = config.restart_guard(on);
        }
        if let Some(yes) = self.require_durable {
            config = config.require_durable(yes);
        }
        config
    }

    /// What to say of a URL that carries the deprecated options, `config`
    /// being what it reads as. `None` when it carries none.
    fn deprecation(&self, config: &ValkeyConfig) -> Option<String> {
        leasehold_core::url::DeprecatedSwitches {
            policy: self.policy,
            one_timing: self.one_timing,
            restart_guard: self.restart_guard,
            require_durable: self.require_durable,
        }
        .warning(
            config.require_durable,
            config.restart_guard,
            config.one_timing,
        )
    }
}

impl ValkeyConfig {
    /// The URL schemes [`ValkeyConfig::from_url`] accepts: plain text, and
    /// TLS (`rediss`, `valkeys`, and their `-sentinel` and `-cluster` forms).
    pub const SCHEMES: &[&str] = &[
        "redis",
        "rediss",
        "valkey",
        "valkeys",
        "redis-sentinel",
        "rediss-sentinel",
        "valkey-sentinel",
        "valkeys-sentinel",
        "redis-cluster",
        "rediss-cluster",
        "valkey-cluster",
        "valkeys-cluster",
    ];

    /// Settings from a store URL (see the crate README, "URL"):
    /// `redis://[USER:PASSWORD@]HOST[:PORT][/DB]` or `valkey://…` (port 6379
    /// by default), with the options `prefix=NAME`
    /// ([`ValkeyConfig::key_prefix`]) and `op_timeout=500ms` or `=2s`
    /// ([`ValkeyConfig::op_timeout`]), and the opt-ins, so that one URL
    /// carries what an application accepts to the tools that check it
    /// (`leasehold doctor`): `durability=durable`, `=one-timing-per-pool` or
    /// `=throwaway` ([`ValkeyConfig::durability`]), and, each `=true` or
    /// `=false`, `allow_eviction` ([`ValkeyConfig::allow_eviction`]) and
    /// `refuse_split_brain` ([`ValkeyConfig::refuse_split_brain`]).
    ///
    /// The deprecated options `assume_one_timing_per_pool`, `restart_guard`
    /// and `require_durable` (each `=true` or `=false`) are still read, after
    /// `durability=` when both are given, as their deprecated setters read
    /// them; a URL that has any logs one `tracing` warning naming the
    /// `durability=` option to write instead.
    ///
    /// Through Sentinel: `redis-sentinel://[USER:PASSWORD@]S1[:PORT][,S2[:PORT]…][/DB]?sentinelServiceName=NAME`
    /// (or `valkey-sentinel://`; Sentinels on port 26379 by default, more of
    /// them also as `&node=HOST:PORT`, as `fred` writes them). The client
    /// asks the Sentinels for the primary of `NAME`, and asks again when its
    /// connection is lost, so it follows a failover; the user and password
    /// are the data servers' (the Sentinels are reached without them). The
    /// claim scripts' promotion guard covers what a failover to an
    /// asynchronous replica forgets (see the crate README, "Failover").
    ///
    /// A Cluster: `redis-cluster://[USER:PASSWORD@]N1[:PORT][,N2[:PORT]…]`
    /// (or `valkey-cluster://`; nodes on port 6379 by default, more of them
    /// also as `?node=HOST:PORT`, as `fred` writes them; no database path
    /// other than `/0`). Any one reachable node is enough: the client reads
    /// the slot map from it and follows `MOVED` redirections, so it follows
    /// a failover. A pool's keys share one hash tag, so each pool lives on
    /// one slot and one primary; the durability check at connect reads every
    /// primary (see [`ValkeyStrategy::connect`](crate::ValkeyStrategy::connect)).
    ///
    /// Over TLS: `rediss://…` or `valkeys://…`, and `rediss-sentinel://…`,
    /// `valkeys-sentinel://…`, `rediss-cluster://…`, `valkeys-cluster://…`,
    /// with the options `ca=PATH` (a PEM file of the CA certificates to
    /// verify the server against, [`ValkeyConfig::tls_ca`]; without it the
    /// system's root certificates) and `cert=PATH&key=PATH` (a client
    /// certificate and its private key, for mutual TLS,
    /// [`ValkeyConfig::tls_client_cert`]). The server's certificate chain and
    /// its host name (or IP address) are verified on every connection, and
    /// nothing falls back to plain text. Through Sentinel, every connection
    /// is TLS with the same files: to the Sentinels and to the primary they
    /// name, whose certificate must name the address the Sentinels announce.
    /// In a Cluster every node is verified against the address the Cluster
    /// announces for it (its `cluster-announce-hostname` if set, else its IP
    /// address). The files are read at `connect`.
    ///
    /// Errors ([`ValkeyError::Config`]) name what is accepted: an unknown
    /// scheme, a missing host, a bad port or database, an unknown option, an
    /// invalid prefix, `cert=` without `key=` (or the reverse), and a TLS
    /// file on a plain-text URL.
    ///
    /// ```
    /// use leasehold_valkey::ValkeyConfig;
    /// let config = ValkeyConfig::from_url("valkey://cache.internal:6379?prefix=ids")?;
    /// assert_eq!(config.prefix(), "ids");
    /// # Ok::<(), leasehold_valkey::ValkeyError>(())
    /// ```
    pub fn from_url(url: &str) -> Result<Self, ValkeyError> {
        let mut parts = StoreUrl::parse(url, Self::SCHEMES, FORM)?;
        let tls = scheme_uses_tls(parts.scheme());
        let sentinel = parts.scheme().ends_with("-sentinel");
        let cluster = parts.scheme().ends_with("-cluster");
        let (service, sentinels) = if sentinel {
            sentinel_parts(&mut parts)?
        } else if cluster {
            (String::new(), cluster_nodes(&mut parts)?)
        } else {
            parts.require_one_host(FORM)?;
            (String::new(), Vec::new())
        };
        let db = parts.path().trim_end_matches('/');
        if cluster && !db.is_empty() && db != "0" {
            return Err(ConfigError::described(
                "url",
                format!(
                    "the database {db:?}: a Cluster has only database 0; expected {CLUSTER_FORM}"
                ),
            )
            .into());
        }
        if !db.is_empty() && db.parse::<u8>().is_err() {
            return Err(ConfigError::new(
                "url",
                format!("the database {db:?}"),
                "a database number from 0 to 255 as the path: redis://HOST:6379/2",
            )
            .into());
        }
        let prefix = parts.take("prefix");
        let op_timeout = parts.take_duration("op_timeout")?;
        let files = tls_files(&mut parts, tls)?;
        let password_file = parts.take("password_file");
        if password_file.is_some() && has_password(&parts) {
            return Err(two_passwords("password_file=PATH").into());
        }
        let durability = DurabilityOptions::take(&mut parts)?;
        let allow_eviction = parts.take_bool("allow_eviction")?;
        let refuse_split_brain = parts.take_bool("refuse_split_brain")?;
        parts.refuse_unknown_options(if tls { TLS_OPTIONS } else { OPTIONS })?;
        let scheme = if tls { "rediss" } else { "redis" };
        let for_fred = if sentinel {
            sentinel_url_for_fred(scheme, url, &parts, &service, &sentinels)
        } else if cluster {
            cluster_url_for_fred(scheme, url, &sentinels)
        } else {
            parts.rebuild(scheme)
        };
        let mut config = Self::new(for_fred);
        config.tls = files;
        if let Some(prefix) = prefix {
            check_prefix(&prefix)?;
            config = config.key_prefix(prefix);
        }
        if let Some(timeout) = op_timeout {
            config = config.op_timeout(timeout);
        }
        if let Some(path) = password_file {
            config = config.password_file(path);
        }
        config = durability.apply(config);
        if let Some(text) = durability.deprecation(&config) {
            tracing::warn!(store = %crate::config::redact(url), "{text}");
        }
        if let Some(allow) = allow_eviction {
            config = config.allow_eviction(allow);
        }
        if let Some(yes) = refuse_split_brain {
            config = config.refuse_split_brain(yes);
        }
        Ok(config)
    }

    /// Refuses a credential source the URL contradicts: a password in the
    /// URL too (checked again at `connect`, whatever built the config).
    pub(crate) fn check_credentials(&self) -> Result<(), ValkeyError> {
        let Some(source) = &self.credentials else {
            return Ok(());
        };
        let parts = StoreUrl::parse(&self.url, Self::SCHEMES, FORM)?;
        if has_password(&parts) {
            let other = match source.file() {
                Some(_) => "password_file",
                None => "the credentials callback",
            };
            return Err(two_passwords(other).into());
        }
        Ok(())
    }

    /// The user the URL names, if any.
    pub(crate) fn url_user(&self) -> Option<String> {
        StoreUrl::parse(&self.url, Self::SCHEMES, FORM)
            .ok()
            .and_then(|p| p.user().filter(|u| !u.is_empty()).map(str::to_owned))
    }
}

/// Whether the URL carries a password in its user info.
fn has_password(parts: &StoreUrl) -> bool {
    parts.password().is_some_and(|p| !p.is_empty())
}

/// A password both in the URL and from `other` (a file, a callback).
fn two_passwords(other: &str) -> ConfigError {
    ConfigError::described(
        "url",
        format!(
            "the URL carries a password, and {other} gives one too; give it one way: drop the \
             password from the URL (redis://USER@HOST) and keep it in the file or the callback"
        ),
    )
}

/// The TLS files of a URL (`ca=`, `cert=`, `key=`, taken), which only a
/// TLS URL takes, `cert=` and `key=` together.
fn tls_files(parts: &mut StoreUrl, tls: bool) -> Result<TlsFiles, ValkeyError> {
    let mut take = |option: &'static str| -> Result<Option<PathBuf>, ValkeyError> {
        match parts.take(option) {
            None => Ok(None),
            Some(path) if path.is_empty() => Err(ConfigError::described(
                option,
                format!("{option}= is empty; give the path of a PEM file, as in {option}=/etc/leasehold/{option}.pem"),
            )
            .into()),
            Some(path) => Ok(Some(PathBuf::from(path))),
        }
    };
    let (ca, cert, key) = (take("ca")?, take("cert")?, take("key")?);
    let files = TlsFiles {
        ca,
        client: match (cert, key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (Some(cert), None) => {
                return Err(ConfigError::described(
                    "key",
                    format!(
                        "cert={} is given without key=: mutual TLS needs the client \
                         certificate's private key too; add &key=PATH",
                        cert.display()
                    ),
                )
                .into());
            }
            (None, Some(key)) => {
                return Err(ConfigError::described(
                    "cert",
                    format!(
                        "key={} is given without cert=: mutual TLS needs the client \
                         certificate the key belongs to; add &cert=PATH",
                        key.display()
                    ),
                )
                .into());
            }
        },
    };
    if !tls && !files.is_empty() {
        return Err(plain_with_tls_files(parts.scheme(), &files));
    }
    Ok(files)
}

/// The error for TLS files on a plain-text URL: they would be ignored and
/// the connection made in plain text.
pub(crate) fn plain_with_tls_files(scheme: &str, files: &TlsFiles) -> ValkeyError {
    let tls_scheme = match scheme.split_once('-') {
        Some((base, rest)) => format!("{base}s-{rest}"),
        None => format!("{scheme}s"),
    };
    ConfigError::described(
        "url",
        format!(
            "{} ask for TLS, but {scheme}:// connects in plain text; write {tls_scheme}:// to \
             connect over TLS",
            files.options()
        ),
    )
    .into()
}

/// Refuses TLS options (`ca=`, `cert=`, `key=`) in the query of a URL
/// given to [`ValkeyConfig::new`]: `fred` does not read them, so the
/// connection would not use them.
pub(crate) fn refuse_unread_tls_options(url: &str) -> Result<(), ValkeyError> {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let unread: Vec<&str> = query
        .split('&')
        .map(|pair| pair.split_once('=').map_or(pair, |(k, _)| k))
        .filter(|key| matches!(*key, "ca" | "cert" | "key"))
        .collect();
    if unread.is_empty() {
        return Ok(());
    }
    Err(ConfigError::described(
        "url",
        format!(
            "{}= in a URL given to ValkeyConfig::new would not be read (the URL goes to fred as \
             it is, and fred has no such option); use ValkeyConfig::from_url, which reads them, \
             or ValkeyConfig::tls_ca and ValkeyConfig::tls_client_cert",
            unread.join("=, ")
        ),
    )
    .into())
}

/// The service name and the Sentinels (`host:port`) of a Sentinel URL:
/// the hosts of the authority, then every `node=` option (both taken).
fn sentinel_parts(parts: &mut StoreUrl) -> Result<(String, Vec<String>), ValkeyError> {
    let service = parts.take("sentinelServiceName").unwrap_or_default();
    if service.is_empty() {
        return Err(ConfigError::described(
            "url",
            format!(
                "{}:// needs the Sentinels' name of the primary: ?sentinelServiceName=NAME; \
                 expected {SENTINEL_FORM}",
                parts.scheme()
            ),
        )
        .into());
    }
    let mut sentinels: Vec<String> = parts.hosts().to_vec();
    sentinels.extend(
        parts
            .options()
            .filter(|(k, _)| *k == "node")
            .map(|(_, v)| v.to_owned()),
    );
    parts.take("node");
    if sentinels.is_empty() {
        return Err(ConfigError::described(
            "url",
            format!(
                "{}:// needs at least one Sentinel; expected {SENTINEL_FORM}",
                parts.scheme()
            ),
        )
        .into());
    }
    let sentinels = sentinels
        .into_iter()
        .map(|h| with_port(&h, SENTINEL_PORT, "Sentinel", SENTINEL_FORM))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((service, sentinels))
}

/// The nodes (`host:port`) of a Cluster URL: the hosts of the authority,
/// then every `node=` option (taken).
fn cluster_nodes(parts: &mut StoreUrl) -> Result<Vec<String>, ValkeyError> {
    let mut nodes: Vec<String> = parts.hosts().to_vec();
    nodes.extend(
        parts
            .options()
            .filter(|(k, _)| *k == "node")
            .map(|(_, v)| v.to_owned()),
    );
    parts.take("node");
    if nodes.is_empty() {
        return Err(ConfigError::described(
            "url",
            format!(
                "{}:// needs at least one node; expected {CLUSTER_FORM}",
                parts.scheme()
            ),
        )
        .into());
    }
    nodes
        .into_iter()
        .map(|h| with_port(&h, SERVER_PORT, "Cluster node", CLUSTER_FORM))
        .collect()
}

/// The Cluster URL as `fred` reads it (`scheme` is `redis` or `rediss`): the first node in the authority, the
/// others as `node=` options, the user information as written.
fn cluster_url_for_fred(scheme: &str, written: &str, nodes: &[String]) -> String {
    let rest = written.split_once("://").map_or("", |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let mut out = format!("{scheme}-cluster://");
    if let Some((u, _)) = authority.rsplit_once('@') {
        out.push_str(u);
        out.push('@');
    }
    out.push_str(&nodes[0]);
    for (i, node) in nodes[1..].iter().enumerate() {
        out.push_str(if i == 0 { "?node=" } else { "&node=" });
        out.push_str(node);
    }
    out
}

/// `host:port` of a Sentinel or Cluster node (`what`) written `host` or
/// `host:port` (IPv6 literals are refused: `fred` reads a `node=` as
/// `host:port` split at `:`).
fn with_port(host: &str, port: u16, what: &str, form: &str) -> Result<String, ValkeyError> {
    let bad = || {
        ValkeyError::from(ConfigError::described(
            "url",
            format!("the {what} {host:?} is not HOST or HOST:PORT; expected {form}"),
        ))
    };
    if host.starts_with('[') || host.is_empty() {
        return Err(bad());
    }
    match host.split_once(':') {
        None => Ok(format!("{host}:{port}")),
        Some((h, port)) if !h.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {
            Ok(host.to_owned())
        }
        Some(_) => Err(bad()),
    }
}

/// The URL as `fred` reads it (`scheme` is `redis` or `rediss`): the first Sentinel in the authority, the
/// others as `node=` options, and the service name; the user information
/// and database as written.
fn sentinel_url_for_fred(
    scheme: &str,
    written: &str,
    parts: &StoreUrl,
    service: &str,
    sentinels: &[String],
) -> String {
    let rest = written.split_once("://").map_or("", |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let userinfo = authority.rsplit_once('@').map(|(u, _)| u);
    let mut out = format!("{scheme}-sentinel://");
    if let Some(u) = userinfo {
        out.push_str(u);
        out.push('@');
    }
    out.push_str(&sentinels[0]);
    let db = parts.path().trim_end_matches('/');
    if !db.is_empty() {
        out.push('/');
        out.push_str(db);
    }
    out.push_str("?sentinelServiceName=");
    out.push_str(&percent_encode(service));
    for node in &sentinels[1..] {
        out.push_str("&node=");
        out.push_str(node);
    }
    out
}

/// Percent-encodes everything but unreserved characters.
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::DEFAULT_OP_TIMEOUT;

    /// The opt-ins a URL carries reach the configuration, so a tool given
    /// the application's URL judges the server as the application does;
    /// the deprecated ones still set what they set.
    #[test]
    fn the_opt_ins_are_url_options() {
        let c = ValkeyConfig::from_url(
            "redis://h?assume_one_timing_per_pool=true&restart_guard=false&require_durable=1\
             &allow_eviction=yes&refuse_split_brain=true",
        )
        .expect("accepted");
        assert!(c.one_timing && !c.restart_guard && c.require_durable && c.allow_eviction);
        assert!(c.refuse_split_brain);
        assert_eq!(c.url, "redis://h");
        let c = ValkeyConfig::from_url("redis://h").expect("accepted");
        assert!(!c.one_timing && c.restart_guard && !c.require_durable && !c.allow_eviction);
        assert!(!c.refuse_split_brain);
    }

    /// Each durability policy, by URL option and by setter, sets the three
    /// switches as the one they stand for, and never allows eviction.
    #[test]
    fn each_durability_policy_is_the_switches_it_stands_for() {
        use leasehold_core::DurabilityPolicy;
        let switches = |c: &ValkeyConfig| {
            (
                c.restart_guard,
                c.one_timing,
                c.require_durable,
                c.allow_eviction,
            )
        };
        for (word, policy, want) in [
            (
                "durable",
                DurabilityPolicy::Durable,
                (true, false, false, false),
            ),
            (
                "one-timing-per-pool",
                DurabilityPolicy::OneTimingPerPool,
                (true, true, false, false),
            ),
            (
                "throwaway",
                DurabilityPolicy::Throwaway,
                (false, false, false, false),
            ),
        ] {
            let c =
                ValkeyConfig::from_url(&format!("redis://h?durability={word}")).expect("accepted");
            assert_eq!(switches(&c), want, "{word}");
            assert_eq!(c.url, "redis://h");
            let c = ValkeyConfig::from_url(
                "redis://h?assume_one_timing_per_pool=true&restart_guard=false\
                 &require_durable=true",
            )
            .expect("accepted")
            .durability(policy);
            assert_eq!(switches(&c), want, "{policy}");
        }
        let e = ValkeyConfig::from_url("redis://h?durability=fast").unwrap_err();
        assert!(e.to_string().contains("durability=throwaway"), "{e}");
    }

    /// A URL with the deprecated options says so once, naming them and
    /// the `durability=` that reads as they do (or as near: the refusal
    /// `require_durable=true` asks for is `durable`'s); a URL without them
    /// says nothing.
    #[test]
    fn a_deprecated_option_names_the_durability_to_write_instead() {
        let text = |url: &str| {
            let mut parts = StoreUrl::parse(url, ValkeyConfig::SCHEMES, FORM).expect("a URL");
            let options = DurabilityOptions::take(&mut parts).expect("options");
            options.deprecation(&options.apply(ValkeyConfig::new("redis://h")))
        };
        for (query, given, instead) in [
            ("restart_guard=false", "restart_guard=false", "throwaway"),
            (
                "assume_one_timing_per_pool=true&restart_guard=false",
                "assume_one_timing_per_pool=true&restart_guard=false",
                "throwaway",
            ),
            (
                "assume_one_timing_per_pool=true",
                "assume_one_timing_per_pool=true",
                "one-timing-per-pool",
            ),
            ("require_durable=true", "require_durable=true", "durable"),
            (
                "restart_guard=false&require_durable=true",
                "restart_guard=false&require_durable=true",
                "durable",
            ),
            ("restart_guard=true", "restart_guard=true", "durable"),
            (
                "restart_guard=true&durability=throwaway",
                "durability=throwaway&restart_guard=true",
                "durable",
            ),
            (
                "durability=one-timing-per-pool&restart_guard=false",
                "durability=one-timing-per-pool&restart_guard=false",
                "throwaway",
            ),
        ] {
            let said = text(&format!("redis://h?{query}"))
                .unwrap_or_else(|| panic!("{query}: nothing said"));
            assert!(
                said.contains(&format!("this URL's {given} says durability={instead};")),
                "{query}: {said}"
            );
            assert!(said.contains("deprecated"), "{query}: {said}");
        }
        for query in ["durability=throwaway", "allow_eviction=true", "prefix=x"] {
            assert_eq!(text(&format!("redis://h?{query}")), None, "{query}");
        }
    }

    /// `from_url` logs the deprecation as one `tracing` warning per URL read,
    /// however many deprecated options it has, and none for a URL without.
    #[test]
    fn a_url_with_deprecated_options_logs_one_warning() {
        use std::sync::{Arc, Mutex};
        use tracing::field::{Field, Visit};
        use tracing::span::{Attributes, Id, Record};
        use tracing::{Event, Level, Metadata, Subscriber};

        /// The messages of the warnings it is given.
        struct Warnings(Arc<Mutex<Vec<String>>>);
        struct Message(String);
        impl Visit for Message {
            fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        impl Subscriber for Warnings {
            fn enabled(&self, meta: &Metadata<'_>) -> bool {
                *meta.level() == Level::WARN
            }
            fn new_span(&self, _: &Attributes<'_>) -> Id {
                Id::from_u64(1)
            }
            fn record(&self, _: &Id, _: &Record<'_>) {}
            fn record_follows_from(&self, _: &Id, _: &Id) {}
            fn event(&self, event: &Event<'_>) {
                let mut message = Message(String::new());
                event.record(&mut message);
                self.0.lock().unwrap().push(message.0);
            }
            fn enter(&self, _: &Id) {}
            fn exit(&self, _: &Id) {}
        }
        let warnings = |url: &str| {
            let seen = Arc::new(Mutex::new(Vec::new()));
            tracing::subscriber::with_default(Warnings(Arc::clone(&seen)), || {
                ValkeyConfig::from_url(url).expect("accepted")
            });
            seen.lock().unwrap().clone()
        };
        for url in [
            "redis://h?assume_one_timing_per_pool=true&restart_guard=false&require_durable=false",
            "redis-sentinel://s1?sentinelServiceName=m&restart_guard=false",
        ] {
            let seen = warnings(url);
            assert_eq!(seen.len(), 1, "{url}: {seen:?}");
            assert!(seen[0].contains("durability=throwaway"), "{url}: {seen:?}");
        }
        for url in ["redis://h?durability=throwaway", "redis://h"] {
            assert_eq!(warnings(url), Vec::<String>::new(), "{url}");
        }
    }

    #[test]
    fn accepted_urls_set_the_fields() {
        for (url, for_fred, prefix, op_timeout) in [
            (
                "redis://127.0.0.1:6379",
                "redis://127.0.0.1:6379",
                "leasehold",
                DEFAULT_OP_TIMEOUT,
            ),
            ("valkey://h", "redis://h", "leasehold", DEFAULT_OP_TIMEOUT),
            (
                "Valkey://u:p%40w@h:6380/2",
                "redis://u:p%40w@h:6380/2",
                "leasehold",
                DEFAULT_OP_TIMEOUT,
            ),
            (
                "redis://[::1]:6379?prefix=app:v1&op_timeout=500ms",
                "redis://[::1]:6379",
                "app:v1",
                Duration::from_millis(500),
            ),
            (
                "rediss://u:pw@cache.internal:6380/1?prefix=ids",
                "rediss://u:pw@cache.internal:6380/1",
                "ids",
                DEFAULT_OP_TIMEOUT,
            ),
            ("VALKEYS://h", "rediss://h", "leasehold", DEFAULT_OP_TIMEOUT),
        ] {
            let c = ValkeyConfig::from_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(
                (c.url.as_str(), c.prefix.as_str(), c.op_timeout),
                (for_fred, prefix, op_timeout),
                "{url}"
            );
            assert_eq!(c.uses_tls(), for_fred.starts_with("rediss"), "{url}");
            assert!(c.tls.is_empty(), "{url}");
        }
    }

    /// The TLS schemes keep TLS for fred, in each form, and take the files:
    /// the CA, and the client certificate with its key (percent-decoded).
    #[test]
    fn tls_urls_take_the_ca_and_the_client_certificate() {
        for (url, for_fred, ca, client) in [
            (
                "rediss://h:6380?ca=/etc/ids/ca.crt",
                "rediss://h:6380",
                Some("/etc/ids/ca.crt"),
                None,
            ),
            (
                "valkeys://h?cert=/c%20d/client.crt&key=/c%20d/client.key&ca=ca.pem",
                "rediss://h",
                Some("ca.pem"),
                Some(("/c d/client.crt", "/c d/client.key")),
            ),
            (
                "rediss-sentinel://s1,s2:26380?sentinelServiceName=ids&ca=/ca",
                "rediss-sentinel://s1:26379?sentinelServiceName=ids&node=s2:26380",
                Some("/ca"),
                None,
            ),
            (
                "valkeys-sentinel://s1?sentinelServiceName=ids&cert=/c&key=/k",
                "rediss-sentinel://s1:26379?sentinelServiceName=ids",
                None,
                Some(("/c", "/k")),
            ),
            (
                "rediss-cluster://n1:7000,n2:7001?ca=/ca&cert=/c&key=/k",
                "rediss-cluster://n1:7000?node=n2:7001",
                Some("/ca"),
                Some(("/c", "/k")),
            ),
            (
                "valkeys-cluster://n1",
                "rediss-cluster://n1:6379",
                None,
                None,
            ),
        ] {
            let c = ValkeyConfig::from_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(c.url, for_fred, "{url}");
            assert!(c.uses_tls(), "{url}");
            let want = TlsFiles {
                ca: ca.map(PathBuf::from),
                client: client.map(|(c, k)| (PathBuf::from(c), PathBuf::from(k))),
            };
            assert_eq!(c.tls, want, "{url}");
            let (scheme, rest) = c.url.split_once("://").expect("scheme");
            let plain = format!("{}://{rest}", crate::tls::scheme_for_fred(scheme));
            fred::types::config::Config::from_url(&plain)
                .unwrap_or_else(|e| panic!("fred refuses {plain}: {e}"));
        }
    }

    /// A Sentinel URL reaches fred as fred reads it: one Sentinel in the
    /// authority, the others as `node=`, the service name, the user
    /// information and database kept.
    #[test]
    fn sentinel_urls_are_rewritten_for_fred() {
        for (url, for_fred) in [
            (
                "redis-sentinel://127.0.0.1:26380?sentinelServiceName=ids",
                "redis-sentinel://127.0.0.1:26380?sentinelServiceName=ids",
            ),
            (
                "valkey-sentinel://u:p%40w@s1,s2:26380/3?sentinelServiceName=my%20ids&prefix=app",
                "redis-sentinel://u:p%40w@s1:26379/3?sentinelServiceName=my%20ids&node=s2:26380",
            ),
            (
                "redis-sentinel://s1:1?node=s2:2&sentinelServiceName=m&node=s3:3&op_timeout=2s",
                "redis-sentinel://s1:1?sentinelServiceName=m&node=s2:2&node=s3:3",
            ),
        ] {
            let c = ValkeyConfig::from_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(c.url, for_fred, "{url}");
            fred::types::config::Config::from_url(&c.url)
                .unwrap_or_else(|e| panic!("fred refuses {}: {e}", c.url));
        }
    }

    /// A Cluster URL reaches fred as fred reads it: one node in the
    /// authority, the others as `node=`, the user information kept.
    #[test]
    fn cluster_urls_are_rewritten_for_fred() {
        for (url, for_fred) in [
            (
                "redis-cluster://127.0.0.1:7000",
                "redis-cluster://127.0.0.1:7000",
            ),
            (
                "valkey-cluster://u:p%40w@n1,n2:7001/0?prefix=app&node=n3:7002",
                "redis-cluster://u:p%40w@n1:6379?node=n2:7001&node=n3:7002",
            ),
            (
                "redis-cluster://n1:1?node=n2:2&op_timeout=2s",
                "redis-cluster://n1:1?node=n2:2",
            ),
        ] {
            let c = ValkeyConfig::from_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(c.url, for_fred, "{url}");
            let fred = fred::types::config::Config::from_url(&c.url)
                .unwrap_or_else(|e| panic!("fred refuses {}: {e}", c.url));
            assert!(fred.server.is_clustered(), "{}", c.url);
        }
    }

    #[test]
    fn refused_urls_say_what_is_accepted() {
        for (url, needle) in [
            (
                "reddis://h:6379",
                "unknown scheme \"reddis\"; expected one of redis, rediss, valkey, valkeys, \
                 redis-sentinel, rediss-sentinel, valkey-sentinel, valkeys-sentinel, \
                 redis-cluster, rediss-cluster, valkey-cluster, valkeys-cluster",
            ),
            ("h:6379", "it has no scheme; expected one of redis"),
            ("redis://", "redis:// needs a host"),
            ("valkey://:pw@/0", "valkey:// needs a host"),
            ("redis://h:65536", "bad port \"65536\""),
            ("redis://h1,h2", "takes one host"),
            ("redis://h/db1", "a database number from 0 to 255"),
            (
                "redis://h?prefx=a",
                "unknown query option \"prefx\"; this URL takes prefix, op_timeout, password_file",
            ),
            ("redis://h?prefix=a{b}", "invalid `key_prefix`"),
            (
                "redis://h?op_timeout=1",
                "op_timeout=500ms or op_timeout=2s",
            ),
            (
                "redis://h?ca=/ca.crt",
                "invalid `url`: ca= ask for TLS, but redis:// connects in plain text; write \
                 rediss:// to connect over TLS",
            ),
            (
                "valkey-sentinel://h?sentinelServiceName=m&cert=/c&key=/k",
                "cert=, key= ask for TLS, but valkey-sentinel:// connects in plain text; write \
                 valkeys-sentinel://",
            ),
            ("redis-cluster://h?ca=/a", "write rediss-cluster://"),
            (
                "rediss://h?cert=/etc/c.crt",
                "invalid `key`: cert=/etc/c.crt is given without key=",
            ),
            (
                "rediss://h?key=/etc/c.key",
                "invalid `cert`: key=/etc/c.key is given without cert=",
            ),
            ("rediss://h?ca=", "invalid `ca`: ca= is empty"),
            (
                "rediss://h?sslrootcert=/ca",
                "unknown query option \"sslrootcert\"; this URL takes prefix, op_timeout, \
                 password_file, durability, assume_one_timing_per_pool, restart_guard, \
                 require_durable, allow_eviction, refuse_split_brain, ca, cert, key",
            ),
            (
                "redis://h?assume_one_timing_per_pool=maybe",
                "assume_one_timing_per_pool=true or assume_one_timing_per_pool=false",
            ),
            (
                "redis-sentinel://h:26379",
                "needs the Sentinels' name of the primary",
            ),
            (
                "redis-sentinel://?sentinelServiceName=m",
                "needs at least one Sentinel",
            ),
            (
                "redis-sentinel://h:0?sentinelServiceName=m",
                "bad port \"0\"",
            ),
            (
                "redis-sentinel://h?sentinelServiceName=m&node=[::1]:5",
                "is not HOST or HOST:PORT",
            ),
            (
                "redis-sentinel://h?sentinelServiceName=m&sentinelPassword=x",
                "unknown query option \"sentinelPassword\"",
            ),
            ("redis-cluster://h:7000/2", "a Cluster has only database 0"),
            ("redis-cluster://", "needs at least one node"),
            (
                "redis-cluster://h?node=[::1]:5",
                "the Cluster node \"[::1]:5\" is not HOST or HOST:PORT",
            ),
        ] {
            let e = ValkeyConfig::from_url(url).unwrap_err().to_string();
            assert!(e.contains(needle), "{url}: {e}");
        }
    }

    /// `password_file` is taken out of the URL fred reads; a password given
    /// both in the URL and by a file or a callback is refused.
    #[test]
    fn a_password_file_replaces_the_urls_password() {
        let c = ValkeyConfig::from_url("redis://ids@h:6379/1?password_file=/run/s/pw&prefix=p")
            .unwrap();
        assert_eq!(c.url, "redis://ids@h:6379/1");
        assert_eq!(c.url_user().as_deref(), Some("ids"));
        assert_eq!(
            c.credentials.as_ref().and_then(|s| s.file()),
            Some(std::path::Path::new("/run/s/pw"))
        );
        assert!(c.check_credentials().is_ok());
        let e = ValkeyConfig::from_url("redis://:pw@h?password_file=/p")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the URL carries a password, and password_file"),
            "{e}"
        );
        let e = ValkeyConfig::new("redis://u:pw@h")
            .credentials(|| async {
                Ok::<_, std::io::Error>(leasehold_core::credentials::Credentials::password_only(
                    "x",
                ))
            })
            .check_credentials()
            .unwrap_err()
            .to_string();
        assert!(e.contains("the credentials callback gives one too"), "{e}");
    }

    /// A config built without `from_url` with TLS files and a plain-text
    /// URL is refused at `connect`, before anything is opened: the files
    /// would be ignored and the connection made in plain text. So is a URL
    /// given to `new` with TLS options in its query, which fred would not
    /// read.
    #[tokio::test]
    async fn connect_refuses_tls_files_with_a_plain_url() {
        let unread = ValkeyConfig::new("rediss://127.0.0.1:1?ca=/ca.crt&key=/k");
        match crate::ValkeyStrategy::connect(unread).await {
            Err(e) => assert!(
                e.to_string()
                    .contains("ca=, key= in a URL given to ValkeyConfig::new would not be read"),
                "{e}"
            ),
            Ok(_) => panic!("connected"),
        }
        for config in [
            ValkeyConfig::new("redis://:pw@127.0.0.1:1").tls_ca("/ca.crt"),
            ValkeyConfig::new("redis-cluster://127.0.0.1:1").tls_client_cert("/c", "/k"),
        ] {
            match crate::ValkeyStrategy::connect(config.clone()).await {
                Err(e) => assert!(
                    e.to_string().contains("ask for TLS, but redis"),
                    "{config:?}: {e}"
                ),
                Ok(_) => panic!("{config:?}: connected"),
            }
        }
    }
}
