//! Store URLs: the schemes this backend accepts and what their parts mean.

use leasehold_core::ConfigError;
use leasehold_core::url::StoreUrl;

use crate::config::{ValkeyConfig, check_prefix};
use crate::error::ValkeyError;

/// The accepted shape, quoted by every URL error.
const FORM: &str = "redis://[USER:PASSWORD@]HOST[:PORT][/DB] or valkey://…, with options ?prefix=NAME&op_timeout=1s";

impl ValkeyConfig {
    /// The URL schemes [`ValkeyConfig::from_url`] accepts. `rediss` and
    /// `valkeys` are known but refused: this build has no TLS.
    pub const SCHEMES: &[&str] = &["redis", "rediss", "valkey", "valkeys"];

    /// Settings from a store URL (see the crate README, "URL"):
    /// `redis://[USER:PASSWORD@]HOST[:PORT][/DB]` or `valkey://…` (port 6379
    /// by default), with the options `prefix=NAME`
    /// ([`ValkeyConfig::key_prefix`]) and `op_timeout=500ms` or `=2s`
    /// ([`ValkeyConfig::op_timeout`]).
    ///
    /// `rediss://` and `valkeys://` are refused: they ask for TLS, and this
    /// crate's client is built without it, so it would connect in plain
    /// text.
    ///
    /// Errors ([`ValkeyError::Config`]) name what is accepted: an unknown
    /// scheme, a missing host, a bad port or database, an unknown option, an
    /// invalid prefix.
    ///
    /// ```
    /// use leasehold_valkey::ValkeyConfig;
    /// let config = ValkeyConfig::from_url("valkey://cache.internal:6379?prefix=ids")?;
    /// assert_eq!(config.prefix(), "ids");
    /// # Ok::<(), leasehold_valkey::ValkeyError>(())
    /// ```
    pub fn from_url(url: &str) -> Result<Self, ValkeyError> {
        let mut parts = StoreUrl::parse(url, Self::SCHEMES, FORM)?;
        refuse_tls(parts.scheme())?;
        parts.require_one_host(FORM)?;
        let db = parts.path().trim_end_matches('/');
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
        parts.refuse_unknown_options("prefix, op_timeout")?;
        let mut config = Self::new(parts.rebuild("redis"));
        if let Some(prefix) = prefix {
            check_prefix(&prefix)?;
            config = config.key_prefix(prefix);
        }
        if let Some(timeout) = op_timeout {
            config = config.op_timeout(timeout);
        }
        Ok(config)
    }
}

/// Refuses a scheme that asks for TLS (`rediss`, `valkeys`): this build of
/// leasehold-valkey has none, and fred would connect in plain text, password
/// included. Checked by [`ValkeyConfig::from_url`] and again at `connect`,
/// whatever built the config.
pub(crate) fn refuse_tls(scheme: &str) -> Result<(), ValkeyError> {
    let scheme = scheme.to_ascii_lowercase();
    if matches!(scheme.as_str(), "rediss" | "valkeys") {
        return Err(ConfigError::described(
            "url",
            format!(
                "{scheme}:// asks for TLS, which this build of leasehold-valkey cannot do (it \
                 would connect in plain text); use redis:// or valkey:// on a trusted \
                 network or through a TLS tunnel"
            ),
        )
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::DEFAULT_OP_TIMEOUT;

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
        ] {
            let c = ValkeyConfig::from_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(
                (c.url.as_str(), c.prefix.as_str(), c.op_timeout),
                (for_fred, prefix, op_timeout),
                "{url}"
            );
        }
    }

    #[test]
    fn refused_urls_say_what_is_accepted() {
        for (url, needle) in [
            (
                "reddis://h:6379",
                "unknown scheme \"reddis\"; expected one of redis, rediss, valkey, valkeys",
            ),
            ("h:6379", "it has no scheme; expected one of redis"),
            ("redis://", "redis:// needs a host"),
            ("valkey://:pw@/0", "valkey:// needs a host"),
            ("redis://h:65536", "bad port \"65536\""),
            ("redis://h1,h2", "takes one host"),
            ("redis://h/db1", "a database number from 0 to 255"),
            (
                "redis://h?prefx=a",
                "unknown query option \"prefx\"; this URL takes prefix, op_timeout",
            ),
            ("redis://h?prefix=a{b}", "invalid `key_prefix`"),
            (
                "redis://h?op_timeout=1",
                "op_timeout=500ms or op_timeout=2s",
            ),
            ("rediss://h:6379", "rediss:// asks for TLS"),
            ("valkeys://h:6379", "valkeys:// asks for TLS"),
            ("REDISS://h:6379", "rediss:// asks for TLS"),
        ] {
            let e = ValkeyConfig::from_url(url).unwrap_err().to_string();
            assert!(e.contains(needle), "{url}: {e}");
        }
    }

    /// A config built without `from_url` is refused at `connect` too, before
    /// anything is sent: fred would otherwise connect in plain text.
    #[tokio::test]
    async fn connect_refuses_a_tls_url_it_cannot_honour() {
        for url in ["rediss://:pw@127.0.0.1:1", "valkeys://127.0.0.1:1"] {
            match crate::ValkeyStrategy::connect(ValkeyConfig::new(url)).await {
                Err(e) => assert!(e.to_string().contains("asks for TLS"), "{url}: {e}"),
                Ok(_) => panic!("{url}: connected"),
            }
        }
    }
}
