//! What the server is and whether it has `HSETEX` and `WAITAOF`.

use std::fmt;

/// The server product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Product {
    /// Redis.
    Redis,
    /// Valkey.
    Valkey,
}

/// What the probe at connect found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    /// Redis or Valkey.
    pub product: Product,
    /// The product's version as it reports it (`valkey_version` for Valkey,
    /// which reports a compatibility `redis_version` too).
    pub version: String,
    /// Whether `COMMAND INFO HSETEX` knows the command.
    pub hsetex: bool,
    /// Whether `COMMAND INFO WAITAOF` knows the command (Redis 7.2+, Valkey
    /// 7.2+): a claim can wait until the append-only file is fsynced.
    pub waitaof: bool,
}

impl fmt::Display for ServerInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.product {
            Product::Redis => "Redis",
            Product::Valkey => "Valkey",
        };
        write!(f, "{name} {}", self.version)
    }
}

impl ServerInfo {
    /// Reads the `INFO server` section.
    pub(crate) fn from_info(info: &str) -> Self {
        let field = |name: &str| {
            info.lines().find_map(|l| {
                l.strip_prefix(name)
                    .and_then(|r| r.strip_prefix(':'))
                    .map(|v| v.trim().to_owned())
            })
        };
        let valkey = field("server_name").is_some_and(|n| n.eq_ignore_ascii_case("valkey"))
            || field("valkey_version").is_some();
        let version = if valkey {
            field("valkey_version").or_else(|| field("redis_version"))
        } else {
            field("redis_version")
        }
        .unwrap_or_else(|| "(unknown version)".into());
        let product = if valkey {
            Product::Valkey
        } else {
            Product::Redis
        };
        Self {
            product,
            hsetex: Self::version_has_hsetex(product, &version),
            waitaof: Self::version_has_waitaof(&version),
            version,
        }
    }

    /// Redis and Valkey 7.2+ have `WAITAOF`; used when `COMMAND INFO` is not
    /// allowed.
    pub(crate) fn version_has_waitaof(version: &str) -> bool {
        let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        (major, minor) >= (7, 2)
    }

    /// Redis 8+ and Valkey 9+ have `HSETEX`; used when `COMMAND INFO` is
    /// not allowed.
    pub(crate) fn version_has_hsetex(product: Product, version: &str) -> bool {
        let major: u32 = version
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        match product {
            Product::Redis => major >= 8,
            Product::Valkey => major >= 9,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_info() {
        let redis =
            ServerInfo::from_info("# Server\r\nredis_version:8.2.3\r\nredis_git_sha1:0\r\n");
        assert_eq!(redis.to_string(), "Redis 8.2.3");
        assert!(redis.hsetex && redis.waitaof);
        let valkey = ServerInfo::from_info(
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.8\r\n",
        );
        assert_eq!(valkey.to_string(), "Valkey 8.1.8");
        assert!(!valkey.hsetex && valkey.waitaof);
        let old = ServerInfo::from_info("redis_version:7.0.15\n");
        assert!(!old.hsetex && !old.waitaof);
        assert!(ServerInfo::version_has_hsetex(Product::Valkey, "9.0.0"));
    }
}
