//! Store URLs: the schemes this backend accepts and what their parts mean.

use leasehold_core::ConfigError;
use leasehold_core::url::StoreUrl;

use crate::config::EtcdConfig;
use crate::error::EtcdError;

/// The accepted shape, quoted by every URL error.
const FORM: &str = "etcd://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]…] (etcds:// for TLS), with \
                    options ?prefix=NAME&op_timeout=3s";

/// etcd's client port, when a host names none.
const DEFAULT_PORT: u16 = 2379;

impl EtcdConfig {
    /// The URL schemes [`EtcdConfig::from_url`] accepts.
    pub const SCHEMES: &[&str] = &["etcd", "etcds"];

    /// Settings from a store URL (see the crate README, "URL"):
    /// `etcd://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]…]`, one endpoint per
    /// member (port 2379 by default), the user and password percent-decoded
    /// ([`EtcdConfig::user`]); `etcds://` for TLS (needs the `tls`
    /// feature). Options: `prefix=NAME` ([`EtcdConfig::prefix`]) and
    /// `op_timeout=500ms` or `=2s` ([`EtcdConfig::op_timeout`]).
    ///
    /// Errors ([`EtcdError::Config`]) name what is accepted: an unknown
    /// scheme, a missing host, a bad port, a path, an unknown option.
    ///
    /// ```
    /// use leasehold_etcd::EtcdConfig;
    /// let config = EtcdConfig::from_url("etcd://ids:s3cret@10.0.0.1:2379,10.0.0.2?prefix=svc/ids")?;
    /// assert!(!format!("{config:?}").contains("s3cret"));
    /// # Ok::<(), leasehold_etcd::EtcdError>(())
    /// ```
    pub fn from_url(url: &str) -> Result<Self, EtcdError> {
        let mut parts = StoreUrl::parse(url, Self::SCHEMES, FORM)?;
        let tls = parts.scheme() == "etcds";
        if tls && !cfg!(feature = "tls") {
            return Err(ConfigError::described(
                "url",
                "etcds:// needs TLS, which this build leaves out: enable leasehold-etcd's `tls` \
                 feature, or use etcd:// on a trusted network",
            )
            .into());
        }
        if parts.hosts().is_empty() {
            return Err(ConfigError::described(
                "url",
                format!("{}:// needs a host; expected {FORM}", parts.scheme()),
            )
            .into());
        }
        if !parts.path().trim_matches('/').is_empty() {
            return Err(ConfigError::described(
                "url",
                format!(
                    "etcd URLs take no path ({:?}); give the key prefix as ?prefix=NAME",
                    parts.path()
                ),
            )
            .into());
        }
        let proto = if tls { "https" } else { "http" };
        let endpoints: Vec<String> = parts
            .hosts()
            .iter()
            .map(|host| {
                let has_port = match host.rsplit_once(']') {
                    Some((_, tail)) => tail.starts_with(':'),
                    None => host.contains(':'),
                };
                if has_port {
                    format!("{proto}://{host}")
                } else {
                    format!("{proto}://{host}:{DEFAULT_PORT}")
                }
            })
            .collect();
        let user = match (parts.user(), parts.password()) {
            (None, _) => None,
            (Some(""), _) => {
                return Err(ConfigError::described(
                    "url",
                    "the URL has a password but no user name; give both: etcd://USER:PASSWORD@HOST",
                )
                .into());
            }
            (Some(name), password) => Some((name.to_owned(), password.unwrap_or("").to_owned())),
        };
        let prefix = parts.take("prefix");
        let op_timeout = parts.take_duration("op_timeout")?;
        let password_file = parts.take("password_file");
        parts.refuse_unknown_options("prefix, op_timeout, password_file")?;
        let mut config = Self::new(endpoints);
        if let Some((name, password)) = user {
            config = config.user(name, password);
        }
        if let Some(path) = password_file {
            config = config.password_file(path);
        }
        if let Some(prefix) = prefix {
            config = config.prefix(prefix);
        }
        if let Some(timeout) = op_timeout {
            config = config.op_timeout(timeout);
        }
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{DEFAULT_OP_TIMEOUT, DEFAULT_PREFIX};

    /// `password_file` names the user's password; it needs the user, and
    /// no password besides.
    #[test]
    fn a_password_file_needs_a_user_and_no_password() {
        let c = EtcdConfig::from_url("etcd://ids@h:2379?password_file=/run/s/pw").unwrap();
        assert_eq!(
            c.password_file.as_deref(),
            Some(std::path::Path::new("/run/s/pw"))
        );
        assert!(format!("{c:?}").contains("/run/s/pw"));
        for (url, needle) in [
            ("etcd://h:2379?password_file=/p", "it needs a user name"),
            (
                "etcd://ids:pw@h:2379?password_file=/p",
                "a password is given too",
            ),
        ] {
            let e = EtcdConfig::from_url(url).unwrap_err().to_string();
            assert!(e.contains(needle), "{url}: {e}");
        }
    }

    #[test]
    fn accepted_urls_set_the_fields() {
        for (url, endpoints, user, prefix, op_timeout) in [
            (
                "etcd://127.0.0.1:2379",
                &["http://127.0.0.1:2379"][..],
                None,
                DEFAULT_PREFIX,
                DEFAULT_OP_TIMEOUT,
            ),
            (
                "ETCD://a,b:2380,[::1]",
                &["http://a:2379", "http://b:2380", "http://[::1]:2379"][..],
                None,
                DEFAULT_PREFIX,
                DEFAULT_OP_TIMEOUT,
            ),
            (
                "etcd://ids:p%40ss@h:2379/?prefix=svc/ids/&op_timeout=2s",
                &["http://h:2379"][..],
                Some(("ids", "p@ss")),
                "svc/ids",
                Duration::from_secs(2),
            ),
            (
                "etcd://root@h:1",
                &["http://h:1"][..],
                Some(("root", "")),
                DEFAULT_PREFIX,
                DEFAULT_OP_TIMEOUT,
            ),
        ] {
            let c = EtcdConfig::from_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            let got_user = c.user.as_ref().map(|(n, p)| (n.as_str(), p.expose()));
            assert_eq!(
                (
                    c.endpoints.iter().map(String::as_str).collect::<Vec<_>>(),
                    got_user,
                    c.prefix.as_str(),
                    c.op_timeout
                ),
                (endpoints.to_vec(), user, prefix, op_timeout),
                "{url}"
            );
        }
    }

    #[test]
    fn refused_urls_say_what_is_accepted() {
        let mut cases = vec![
            (
                "etc://h:2379",
                "unknown scheme \"etc\"; expected one of etcd, etcds",
            ),
            (
                "http://h:2379",
                "unknown scheme \"http\"; expected one of etcd, etcds",
            ),
            ("h:2379", "it has no scheme; expected one of etcd, etcds"),
            ("etcd://", "etcd:// needs a host"),
            ("etcd://u:p@", "etcd:// needs a host"),
            ("etcd://h:2379,h:x", "bad port \"x\" of host \"h\""),
            ("etcd://h:2379/ids", "give the key prefix as ?prefix=NAME"),
            ("etcd://:pw@h:2379", "a password but no user name"),
            ("etcd://h?prefix=has%20space", "invalid `prefix`"),
            ("etcd://h?op_timeout=3", "op_timeout=500ms or op_timeout=2s"),
            (
                "etcd://h?timeout=3s",
                "unknown query option \"timeout\"; this URL takes prefix, op_timeout",
            ),
        ];
        if !cfg!(feature = "tls") {
            cases.push(("etcds://h:2379", "enable leasehold-etcd's `tls` feature"));
        }
        for (url, needle) in cases {
            let e = EtcdConfig::from_url(url).unwrap_err().to_string();
            assert!(e.contains(needle), "{url}: {e}");
        }
    }
}
