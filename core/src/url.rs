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
        let (authority, path) = before_query.split_once('/').unwrap_or((before_query, ""));
        let (userinfo, host_list) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
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

fn parse_duration(text: &str) -> Option<Duration> {
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

/// `url` as a library may show it (in `Debug`, identities, errors, logs):
/// without user info, query string or fragment, since a password can hide
/// in any of them; scheme, hosts and path kept. A URL without a scheme (a
/// plain SQLite path) loses only what precedes an `@` and what follows a
/// `?` or `#`.
///
/// ```
/// use leasehold_core::url::shown;
/// assert_eq!(shown("postgres://u:secret@h:5/db?sslmode=require"), "postgres://h:5/db");
/// assert_eq!(shown("redis://:pw@h:1#x"), "redis://h:1");
/// assert_eq!(shown("sqlite:///tmp/ids.sqlite?mode=rwc"), "sqlite:///tmp/ids.sqlite");
/// ```
pub fn shown(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    let (authority, path) = match rest.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (rest, None),
    };
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let mut out = String::with_capacity(url.len());
    if let Some(scheme) = scheme {
        out.push_str(scheme);
        out.push_str("://");
    }
    out.push_str(host);
    if let Some(path) = path {
        out.push('/');
        out.push_str(path);
    }
    out
}

/// `url` as an operator's tool prints it: the password replaced by `***`,
/// the user, hosts, path and options kept (they say which store was meant).
///
/// ```
/// use leasehold_core::url::masked;
/// assert_eq!(masked("postgres://ids:s3cret@h/db?sslmode=require"), "postgres://ids:***@h/db?sslmode=require");
/// assert_eq!(masked("etcd://h:2379"), "etcd://h:2379");
/// ```
pub fn masked(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => format!("{scheme}://{userinfo}@{host}{tail}"),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
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
