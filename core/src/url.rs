//! The shape every store URL shares, taken apart once so that each backend's
//! `from_url` only says what its parts mean:
//! `scheme://[user[:password]@]host[:port][,host[:port]…][/path][?option=value&…]`.
//!
//! Backends own their schemes and the meaning of the parts; this module only
//! splits, percent-decodes, checks ports, and words the errors alike. Errors
//! never quote the URL itself (it may carry a password), only the part at
//! fault.
//!
//! ```
//! use leasehold_core::url::StoreUrl;
//! let mut url = StoreUrl::parse(
//!     "etcd://ids:s%40cret@10.0.0.1:2379,10.0.0.2:2379?op_timeout=2s",
//!     &["etcd", "etcds"],
//!     "etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…]",
//! )?;
//! assert_eq!(url.scheme(), "etcd");
//! assert_eq!(url.password(), Some("s@cret"));
//! assert_eq!(url.hosts(), ["10.0.0.1:2379", "10.0.0.2:2379"]);
//! let timeout = url.take_duration("op_timeout")?;
//! assert_eq!(timeout, Some(std::time::Duration::from_secs(2)));
//! url.refuse_unknown_options("op_timeout, prefix")?;
//! # Ok::<(), leasehold_core::ConfigError>(())
//! ```

use std::time::Duration;

use crate::error::ConfigError;

/// A store URL split into its parts (see the [module docs](self)).
#[derive(Clone, PartialEq, Eq)]
pub struct StoreUrl {
    scheme: String,
    written_scheme: String,
    authority: String,
    user: Option<String>,
    password: Option<String>,
    hosts: Vec<String>,
    path: String,
    /// Options not taken yet: (decoded key, decoded value, as written).
    options: Vec<(String, String, String)>,
}

impl std::fmt::Debug for StoreUrl {
    /// Never prints the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreUrl")
            .field("scheme", &self.scheme)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("hosts", &self.hosts)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// `url`'s scheme, lowercased, if it is one of `schemes`; otherwise an error
/// that names them and `form`, the accepted shape.
pub fn scheme_of(url: &str, schemes: &[&str], form: &str) -> Result<String, ConfigError> {
    let Some((scheme, _)) = url.split_once("://").filter(|(s, _)| !s.is_empty()) else {
        return Err(ConfigError::described(
            "url",
            format!(
                "it has no scheme; expected one of {}, as in {form}",
                schemes.join(", ")
            ),
        ));
    };
    let lower = scheme.to_ascii_lowercase();
    if schemes.contains(&lower.as_str()) {
        Ok(lower)
    } else {
        Err(unknown_scheme(scheme, schemes, form))
    }
}

/// The error for a scheme outside `schemes`.
pub fn unknown_scheme(scheme: &str, schemes: &[&str], form: &str) -> ConfigError {
    ConfigError::described(
        "url",
        format!(
            "unknown scheme {scheme:?}; expected one of {}, as in {form}",
            schemes.join(", ")
        ),
    )
}

impl StoreUrl {
    /// Splits `url`, whose scheme must be one of `schemes` (compared without
    /// case). `form` is the accepted shape, quoted by every error. Ports are
    /// checked (1 to 65535); a host list may be empty (see
    /// [`StoreUrl::require_one_host`]).
    pub fn parse(url: &str, schemes: &[&str], form: &str) -> Result<Self, ConfigError> {
        let scheme = scheme_of(url, schemes, form)?;
        let (written_scheme, rest) = url.split_once("://").unwrap_or_default();
        if rest.contains('#') {
            return Err(ConfigError::described(
                "url",
                format!("a store URL has no #fragment; expected {form}"),
            ));
        }
        let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
        // The user info ends at the last `@` before the query (as in
        // `redacted`): a password with an unencoded `/` or `@` is read whole,
        // never as a host or a path.
        let (userinfo, after_userinfo) = match before_query.rsplit_once('@') {
            Some((u, rest)) => (Some(u), rest),
            None => (None, before_query),
        };
        let (host_list, path) = after_userinfo
            .split_once('/')
            .unwrap_or((after_userinfo, ""));
        let authority = match userinfo {
            Some(u) => &before_query[..u.len() + 1 + host_list.len()],
            None => host_list,
        };
        let (user, password) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((name, pw)) => (Some(percent_decode(name)), Some(percent_decode(pw))),
                None => (Some(percent_decode(u)), None),
            },
            None => (None, None),
        };
        let hosts: Vec<String> = host_list
            .split(',')
            .filter(|h| !h.is_empty())
            .map(str::to_owned)
            .collect();
        for host in &hosts {
            check_host(host, form)?;
        }
        let options = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                (percent_decode(k), percent_decode(v), pair.to_owned())
            })
            .collect();
        Ok(Self {
            scheme,
            written_scheme: written_scheme.to_owned(),
            authority: authority.to_owned(),
            user,
            password,
            hosts,
            path: path.to_owned(),
            options,
        })
    }

    /// The scheme, lowercased.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The user name, percent-decoded.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The password, percent-decoded.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The hosts as written (`host`, `host:port`, `[v6]:port`), in order.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The path after the authority, without its leading `/`, as written.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The one host, or an error naming `form` when there is none or more
    /// than one.
    pub fn require_one_host(&self, form: &str) -> Result<&str, ConfigError> {
        match self.hosts.as_slice() {
            [one] => Ok(one),
            [] => Err(ConfigError::described(
                "url",
                format!("{}:// needs a host; expected {form}", self.scheme),
            )),
            _ => Err(ConfigError::described(
                "url",
                format!(
                    "{}:// takes one host, not a list of {}; expected {form}",
                    self.scheme,
                    self.hosts.len()
                ),
            )),
        }
    }

    /// Removes the query option `key` and returns its decoded value (the
    /// last one if it is repeated).
    pub fn take(&mut self, key: &str) -> Option<String> {
        let mut found = None;
        self.options.retain(|(k, v, _)| {
            if k == key {
                found = Some(v.clone());
                false
            } else {
                true
            }
        });
        found
    }

    /// Removes the query option `key` and reads it as a duration: a whole
    /// number with the unit `ms` or `s` (`500ms`, `2s`), more than zero.
    pub fn take_duration(&mut self, key: &'static str) -> Result<Option<Duration>, ConfigError> {
        self.take(key).map(|v| duration_option(key, &v)).transpose()
    }

    /// Removes the query option `key` and reads it as a switch: `true` or
    /// `false` (`1`/`0`, `yes`/`no`, `on`/`off` too).
    pub fn take_bool(&mut self, key: &'static str) -> Result<Option<bool>, ConfigError> {
        self.take(key).map(|v| bool_option(key, &v)).transpose()
    }

    /// Removes the query option `durability` and reads it as a
    /// [`DurabilityPolicy`](crate::DurabilityPolicy): `durable`,
    /// `one-timing-per-pool` or `throwaway`.
    pub fn take_durability(&mut self) -> Result<Option<crate::DurabilityPolicy>, ConfigError> {
        self.take("durability")
            .map(|v| {
                v.parse().map_err(|_| {
                    ConfigError::new(
                        "durability",
                        format!("{v:?}"),
                        "durability=durable, durability=one-timing-per-pool or \
                         durability=throwaway",
                    )
                })
            })
            .transpose()
    }

    /// The options not taken so far, decoded, in order.
    pub fn options(&self) -> impl Iterator<Item = (&str, &str)> {
        self.options
            .iter()
            .map(|(k, v, _)| (k.as_str(), v.as_str()))
    }

    /// An error naming the first option not taken so far, if any; `known`
    /// lists the options the URL takes.
    pub fn refuse_unknown_options(&self, known: &str) -> Result<(), ConfigError> {
        match self.options.first() {
            None => Ok(()),
            Some((key, _, _)) => Err(unknown_option(key, known)),
        }
    }

    /// The URL as written, with `scheme` in place of its own and without the
    /// options taken so far (the others stay as written).
    pub fn rebuild(&self, scheme: &str) -> String {
        let mut out = format!("{scheme}://{}", self.authority);
        if !self.path.is_empty() {
            out.push('/');
            out.push_str(&self.path);
        }
        let mut sep = '?';
        for (_, _, written) in &self.options {
            out.push(sep);
            out.push_str(written);
            sep = '&';
        }
        out
    }

    /// The scheme as written (case kept).
    pub fn written_scheme(&self) -> &str {
        &self.written_scheme
    }
}

/// The deprecated durability switches a URL carries (`None`: not given),
/// beside the `durability=` it gives, if any.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeprecatedSwitches {
    /// `durability=`.
    pub policy: Option<crate::DurabilityPolicy>,
    /// `assume_one_timing_per_pool=`.
    pub one_timing: Option<bool>,
    /// `restart_guard=`.
    pub restart_guard: Option<bool>,
    /// `require_durable=`.
    pub require_durable: Option<bool>,
}

impl DeprecatedSwitches {
    /// What to say of a URL that carries them, given the switches it reads
    /// as (`require_durable`, `restart_guard`, `one_timing`, as the
    /// backend's configuration holds them): the options (with
    /// `durability=`, which they adjust, when given too) and the
    /// `durability=` to write instead. `None` when it carries none.
    pub fn warning(
        &self,
        require_durable: bool,
        restart_guard: bool,
        one_timing: bool,
    ) -> Option<String> {
        let deprecated: Vec<String> = [
            ("assume_one_timing_per_pool", self.one_timing),
            ("restart_guard", self.restart_guard),
            ("require_durable", self.require_durable),
        ]
        .into_iter()
        .filter_map(|(key, value)| value.map(|v| format!("{key}={v}")))
        .collect();
        if deprecated.is_empty() {
            return None;
        }
        let given: Vec<String> = self
            .policy
            .map(|p| format!("durability={p}"))
            .into_iter()
            .chain(deprecated)
            .collect();
        Some(format!(
            "the URL options assume_one_timing_per_pool, restart_guard and require_durable are \
             deprecated and go in a later release: this URL's {} says durability={}; write \
             that instead",
            given.join("&"),
            crate::DurabilityPolicy::of_switches(require_durable, restart_guard, one_timing)
        ))
    }
}

/// The error for a query option a URL does not take; `known` lists those
/// it does.
pub fn unknown_option(key: &str, known: &str) -> ConfigError {
    ConfigError::described(
        "url",
        format!("unknown query option {key:?}; this URL takes {known}"),
    )
}

fn check_host(host: &str, form: &str) -> Result<(), ConfigError> {
    let (name, port) = if let Some(v6) = host.strip_prefix('[') {
        match v6.split_once(']') {
            Some((_, "")) => (host, None),
            Some((_, tail)) => match tail.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => (host, Some(tail)),
            },
            None => {
                return Err(ConfigError::described(
                    "url",
                    format!("host {host:?} lacks its closing ']'; expected {form}"),
                ));
            }
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    if name.is_empty() {
        return Err(ConfigError::described(
            "url",
            format!("{host:?} has a port but no host; expected {form}"),
        ));
    }
    if let Some(port) = port
        && !matches!(port.parse::<u16>(), Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(ConfigError::described(
            "url",
            format!(
                "bad port {port:?} of host {name:?}: give a number from 1 to 65535, as in {form}"
            ),
        ));
    }
    Ok(())
}

/// The value of the switch option `key`: `true` or `false` (`1`/`0`,
/// `yes`/`no`, `on`/`off` too, in any case).
pub fn bool_option(key: &'static str, value: &str) -> Result<bool, ConfigError> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(ConfigError::new(
            key,
            format!("{value:?}"),
            format!("{key}=true or {key}=false"),
        )),
    }
}

/// The value of the duration option `key`: a whole number with the unit
/// `ms` or `s` (`500ms`, `2s`), more than zero.
pub fn duration_option(key: &'static str, value: &str) -> Result<Duration, ConfigError> {
    parse_duration(value).ok_or_else(|| {
        ConfigError::new(
            key,
            format!("{value:?}"),
            format!(
                "a whole number of milliseconds or seconds above zero, with its unit: \
                 {key}=500ms or {key}=2s"
            ),
        )
    })
}

pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    let (digits, unit) = match text.strip_suffix("ms") {
        Some(d) => (d, 1),
        None => (text.strip_suffix('s')?, 1000),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ms = digits.parse::<u64>().ok()?.checked_mul(unit)?;
    (ms > 0).then(|| Duration::from_millis(ms))
}

/// `%XX` sequences replaced by their bytes (invalid UTF-8 replaced).
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `host`, as a URL names it, is this machine: `localhost`, an
/// address in `127.0.0.0/8` or `::1` (bracketed or not). Plain text to such
/// a host crosses no network, which is why the doctors' `tls` checks pass it.
pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `url` as anything may show it (`Debug`, identities, errors, logs, the
/// `leasehold` tool): the one redaction every store URL goes through. It
/// hides every secret and keeps everything an operator needs to tell which
/// store was meant:
///
/// - the password of the user info becomes `***` (the user name stays);
/// - the value of every query option that carries a secret becomes `***`
///   (see [`is_secret_option`]: `password`, `pass`, `token`, `sslkey`,
///   `sslpassword`, `auth_token`, `sentinelPassword`, …; the option's name
///   stays);
/// - a `#fragment` becomes `#***` (no store URL has one; a password written
///   unencoded may have cut the URL there);
/// - the scheme, hosts, ports, path and every other option stay as written.
///
/// The user info ends at the last `@` before the query, so a password with
/// an unencoded `/` or `@` is hidden whole. A URL without a scheme (a plain
/// SQLite path) has no user info: only its query and fragment are read.
///
/// ```
/// use leasehold_core::url::redacted;
/// assert_eq!(
///     redacted("postgres://app:s3cret@db:5432/app?sslmode=verify-full&password=s3cret"),
///     "postgres://app:***@db:5432/app?sslmode=verify-full&password=***"
/// );
/// assert_eq!(redacted("redis://:pw@h:1/2?prefix=ids"), "redis://:***@h:1/2?prefix=ids");
/// assert_eq!(redacted("etcd://h:2379?password_file=/run/secrets/etcd"), "etcd://h:2379?password_file=/run/secrets/etcd");
/// assert_eq!(redacted("sqlite:///tmp/ids.sqlite?mode=rwc"), "sqlite:///tmp/ids.sqlite?mode=rwc");
/// ```
pub fn redacted(url: &str) -> String {
    let parts = Parts::of(url);
    let mut out = String::with_capacity(url.len());
    out.push_str(parts.scheme);
    if let Some((user, password)) = parts.userinfo {
        out.push_str(user);
        if let Some(password) = password {
            out.push(':');
            if !password.is_empty() {
                out.push_str("***");
            }
        }
        out.push('@');
    }
    out.push_str(parts.rest);
    if let Some(query) = parts.query {
        out.push('?');
        for (i, pair) in query.split('&').enumerate() {
            if i > 0 {
                out.push('&');
            }
            match pair.split_once('=') {
                Some((key, value)) if !value.is_empty() && is_secret_option(key) => {
                    out.push_str(key);
                    out.push_str("=***");
                }
                _ => out.push_str(pair),
            }
        }
    }
    if let Some(fragment) = parts.fragment {
        out.push('#');
        if !fragment.is_empty() {
            out.push_str("***");
        }
    }
    out
}

/// The secrets [`redacted`] hides in `url`, each as written and, when it
/// differs, percent-decoded: what no output may contain. For a last check
/// of text that came from elsewhere (a driver's error message) before it is
/// printed.
///
/// ```
/// use leasehold_core::url::secrets;
/// assert_eq!(secrets("mysql://u:p%40ss@h/db?sslkey=/k.pem&x=1"), ["p%40ss", "p@ss", "/k.pem"]);
/// ```
pub fn secrets(url: &str) -> Vec<String> {
    let parts = Parts::of(url);
    let mut written: Vec<&str> = Vec::new();
    if let Some((_, Some(password))) = parts.userinfo.filter(|(_, p)| p != &Some("")) {
        written.push(password);
    }
    if let Some(query) = parts.query {
        written.extend(
            query
                .split('&')
                .filter_map(|pair| pair.split_once('='))
                .filter(|(key, value)| !value.is_empty() && is_secret_option(key))
                .map(|(_, value)| value),
        );
    }
    if let Some(fragment) = parts.fragment.filter(|f| !f.is_empty()) {
        written.push(fragment);
    }
    let mut out = Vec::new();
    for w in written {
        for s in [w.to_owned(), percent_decode(w)] {
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    out
}

/// Whether the query option `key` (as written, or percent-encoded) carries
/// a secret, whose value [`redacted`] hides: a name that, lowercased and
/// without `-` and `_`, ends in `password`, `passwd`, `pass`, `pwd`,
/// `token`, `secret` or `key` (`sslkey`, `ssl-key`, `key`: a TLS client
/// key), but not one that names a file (`password_file`, `passfile`),
/// whose value is a path an operator needs to see.
///
/// ```
/// use leasehold_core::url::is_secret_option;
/// for key in ["password", "pass", "token", "sslkey", "ssl-key", "sslpassword", "auth_token", "sentinelPassword", "key"] {
///     assert!(is_secret_option(key), "{key}");
/// }
/// for key in ["password_file", "sslmode", "sslrootcert", "user", "prefix", "table"] {
///     assert!(!is_secret_option(key), "{key}");
/// }
/// ```
pub fn is_secret_option(key: &str) -> bool {
    let name: String = percent_decode(key)
        .chars()
        .filter(|c| !matches!(c, '-' | '_'))
        .flat_map(char::to_lowercase)
        .collect();
    !name.ends_with("file")
        && [
            "password", "passwd", "pass", "pwd", "token", "secret", "key",
        ]
        .iter()
        .any(|end| name.ends_with(end))
}

/// The pieces of a URL [`redacted`] and [`secrets`] read, as written.
struct Parts<'a> {
    /// `scheme://`, or empty.
    scheme: &'a str,
    /// The user and, after a `:`, the password.
    userinfo: Option<(&'a str, Option<&'a str>)>,
    /// Hosts and path.
    rest: &'a str,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

impl<'a> Parts<'a> {
    fn of(url: &'a str) -> Self {
        let (scheme, after) = match url.find("://") {
            Some(i) => url.split_at(i + 3),
            None => ("", url),
        };
        // The user info ends at the last `@` before the query: a password
        // may hold an unencoded `/`, `@` or `#`, never hidden by halves.
        let query_at = after.find('?').unwrap_or(after.len());
        let (userinfo, after) = match after[..query_at].rfind('@') {
            Some(at) if !scheme.is_empty() => {
                let userinfo = &after[..at];
                let parsed = match userinfo.split_once(':') {
                    Some((user, password)) => (user, Some(password)),
                    None => (userinfo, None),
                };
                (Some(parsed), &after[at + 1..])
            }
            _ => (None, after),
        };
        let (before_fragment, fragment) = match after.split_once('#') {
            Some((b, f)) => (b, Some(f)),
            None => (after, None),
        };
        let (rest, query) = match before_fragment.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (before_fragment, None),
        };
        Self {
            scheme,
            userinfo,
            rest,
            query,
            fragment,
        }
    }
}

/// The same as [`redacted`] (the one redaction); kept for callers written
/// before it.
pub fn shown(url: &str) -> String {
    redacted(url)
}

/// The same as [`redacted`] (the one redaction); kept for callers written
/// before it.
pub fn masked(url: &str) -> String {
    redacted(url)
}

#[cfg(test)]
mod tests {
    use super::is_loopback_host;

    #[test]
    fn loopback_hosts_are_this_machine() {
        for h in [
            "localhost",
            "LocalHost",
            "127.0.0.1",
            "127.1.2.3",
            "::1",
            "[::1]",
        ] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in ["10.0.0.1", "cache.internal", "::2", "[::2]", ""] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }

    use super::*;

    const FORM: &str = "x://HOST:PORT";

    #[test]
    fn parts_are_split_and_decoded() {
        let mut u = StoreUrl::parse(
            "X://a%40b:p%3Aw@h1:1,[::1]:2/some/path?k=v%20w&flag&o=1",
            &["x"],
            FORM,
        )
        .unwrap();
        assert_eq!(u.scheme(), "x");
        assert_eq!(u.written_scheme(), "X");
        assert_eq!((u.user(), u.password()), (Some("a@b"), Some("p:w")));
        assert_eq!(u.hosts(), ["h1:1", "[::1]:2"]);
        assert_eq!(u.path(), "some/path");
        assert_eq!(u.take("k").as_deref(), Some("v w"));
        assert_eq!(u.take("flag").as_deref(), Some(""));
        assert_eq!(u.rebuild("y"), "y://a%40b:p%3Aw@h1:1,[::1]:2/some/path?o=1");
        let e = u.refuse_unknown_options("k, flag").unwrap_err().to_string();
        assert!(
            e.contains("unknown query option \"o\"; this URL takes k, flag"),
            "{e}"
        );
        assert!(!format!("{u:?}").contains("p:w"));
    }

    /// A password with an unencoded `/` or `@` is read as the password, not
    /// as a host or a path, so no error quotes a piece of it.
    #[test]
    fn the_user_info_ends_at_the_last_at_sign() {
        let u = StoreUrl::parse("x://u:pa/ss@w@h:1/db?k=a@b", &["x"], FORM).unwrap();
        assert_eq!((u.user(), u.password()), (Some("u"), Some("pa/ss@w")));
        assert_eq!((u.hosts(), u.path()), (&["h:1".to_owned()][..], "db"));
        assert_eq!(u.rebuild("y"), "y://u:pa/ss@w@h:1/db?k=a@b");
    }

    /// One rule for every URL: the password and the secret options hidden,
    /// everything else kept as written.
    #[test]
    fn redaction_hides_every_secret_and_keeps_the_rest() {
        for (url, shown) in [
            (
                "postgres://app:s3cret@db:5432/app?sslmode=verify-full",
                "postgres://app:***@db:5432/app?sslmode=verify-full",
            ),
            (
                "postgres://app@db/app?password=s3cret&application_name=x",
                "postgres://app@db/app?password=***&application_name=x",
            ),
            (
                "mysql://u@h/db?ssl-key=/k.pem&ssl-ca=/ca.pem&PASS=xq1&pwd=yq2",
                "mysql://u@h/db?ssl-key=***&ssl-ca=/ca.pem&PASS=***&pwd=***",
            ),
            (
                "redis-sentinel://:pw@s1:26379/2?sentinelServiceName=m&node=s2:1&sentinelPassword=zq3",
                "redis-sentinel://:***@s1:26379/2?sentinelServiceName=m&node=s2:1&sentinelPassword=***",
            ),
            (
                "etcd://root:pw@a:2379,b:2379?prefix=p&token=tq4&auth_token=uq5&api%2Dkey=vq6",
                "etcd://root:***@a:2379,b:2379?prefix=p&token=***&auth_token=***&api%2Dkey=***",
            ),
            ("postgres://u:pa/ss@w@h/db", "postgres://u:***@h/db"),
            ("redis://:@h:1", "redis://:@h:1"),
            ("redis://user@h:1?password=", "redis://user@h:1?password="),
            ("x://h/p#fragq7", "x://h/p#***"),
            ("sqlite:ids.db?password=pw", "sqlite:ids.db?password=***"),
            (
                "./ids.db?password=pw&mode=rwc",
                "./ids.db?password=***&mode=rwc",
            ),
            ("sqlite:///data/me@host/x.db", "sqlite:///data/me@host/x.db"),
            (
                "postgres://h/db?password_file=/run/secrets/pg",
                "postgres://h/db?password_file=/run/secrets/pg",
            ),
            ("k8s://", "k8s://"),
        ] {
            assert_eq!(redacted(url), shown, "{url}");
            for secret in secrets(url) {
                assert!(!redacted(url).contains(&secret), "{url}: {secret}");
            }
        }
        assert_eq!(
            secrets("postgres://u:p%40w@h/db?password=a%20b&sslmode=x"),
            ["p%40w", "p@w", "a%20b", "a b"]
        );
        assert!(secrets("postgres://u@h/db?sslmode=require").is_empty());
    }

    #[test]
    fn durations_need_a_unit() {
        for (text, ms) in [("500ms", Some(500)), ("2s", Some(2000)), ("0s", None)] {
            let mut u = StoreUrl::parse(&format!("x://h?t={text}"), &["x"], FORM).unwrap();
            match ms {
                Some(ms) => assert_eq!(
                    u.take_duration("t").unwrap(),
                    Some(Duration::from_millis(ms))
                ),
                None => assert!(u.take_duration("t").is_err()),
            }
        }
        for bad in ["3", "1.5s", "s", "-1s", "2m"] {
            let mut u = StoreUrl::parse(&format!("x://h?t={bad}"), &["x"], FORM).unwrap();
            let e = u.take_duration("t").unwrap_err().to_string();
            assert!(e.contains("t=500ms or t=2s"), "{bad}: {e}");
        }
    }

    #[test]
    fn refused_urls_name_the_fix() {
        for (url, needle) in [
            (
                "h:1",
                "it has no scheme; expected one of x, y, as in x://HOST:PORT",
            ),
            ("://h", "it has no scheme"),
            ("z://h", "unknown scheme \"z\"; expected one of x, y"),
            ("x://h:port", "bad port \"port\" of host \"h\""),
            ("x://h:0", "bad port \"0\""),
            ("x://h:70000", "bad port \"70000\""),
            ("x://h:+1", "bad port \"+1\""),
            ("x://:1", "has a port but no host"),
            ("x://[::1", "closing ']'"),
            ("x://h#f", "no #fragment"),
        ] {
            let e = StoreUrl::parse(url, &["x", "y"], FORM)
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{url}: {e}");
        }
        let u = StoreUrl::parse("x:///p", &["x"], FORM).unwrap();
        let e = u.require_one_host(FORM).unwrap_err().to_string();
        assert!(
            e.contains("x:// needs a host; expected x://HOST:PORT"),
            "{e}"
        );
        let u = StoreUrl::parse("x://a,b", &["x"], FORM).unwrap();
        assert!(u.require_one_host(FORM).is_err());
    }
}
