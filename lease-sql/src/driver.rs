//! The SQL engines' drivers: one per engine, each compiled in by its
//! feature, all reading into [`SqlConfig`].

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use leasehold_core::credentials::CredentialSource;
use leasehold_core::drivers::{
    ConnectError, Driver, DriverConfig, bool_value, duration_value, unknown_key,
};
use leasehold_core::{BoxFuture, Operate};

use crate::{SqlConfig, SqlError, SqlStrategy};

/// PostgreSQL: `postgres://`, `postgresql://`.
#[cfg(feature = "postgres")]
pub static POSTGRES: SqlDriver = SqlDriver {
    schemes: &["postgres", "postgresql"],
};

/// MySQL and MariaDB: `mysql://`, `mariadb://`.
#[cfg(feature = "mysql")]
pub static MYSQL: SqlDriver = SqlDriver {
    schemes: &["mysql", "mariadb"],
};

/// SQLite files: `sqlite://PATH` (and sqlx's `sqlite:PATH`).
#[cfg(feature = "sqlite")]
pub static SQLITE: SqlDriver = SqlDriver {
    schemes: &["sqlite"],
};

/// The driver of one SQL engine ([`POSTGRES`], [`MYSQL`], [`SQLITE`]).
#[derive(Debug)]
pub struct SqlDriver {
    schemes: &'static [&'static str],
}

impl Driver for SqlDriver {
    fn store(&self) -> &'static str {
        "SQL"
    }

    fn schemes(&self) -> &'static [&'static str] {
        self.schemes
    }

    fn parse_url(&self, url: &str) -> Result<Box<dyn DriverConfig>, ConnectError> {
        SqlConfig::from_url(url)
            .map(|c| Box::new(c) as Box<dyn DriverConfig>)
            .map_err(|e| match e {
                SqlError::Config(c) => ConnectError::bad_url(url, c),
                other => ConnectError::bad_url(url, other),
            })
    }

    /// SQLite's: a database file in `dir`.
    fn local_url(&self, dir: &std::path::Path) -> Option<String> {
        (self.schemes == ["sqlite"])
            .then(|| format!("sqlite://{}", dir.join("leases.sqlite").display()))
    }
}

/// The option keys [`SqlConfig`] takes by key and value.
const KEYS: &[&str] = &[
    "op_timeout",
    "refuse_at_connect",
    "durability",
    "table",
    "max_connections",
    "refuse_split_brain",
];

impl DriverConfig for SqlConfig {
    fn clone_config(&self) -> Box<dyn DriverConfig> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let this = self.clone();
        *self = match key {
            "op_timeout" => this.op_timeout(duration_value(key, value)?),
            "durability" => this.durability(value.parse()?),
            "refuse_at_connect" => this.refuse_at_connect(bool_value(key, value)?),
            "refuse_split_brain" => this.refuse_split_brain(bool_value(key, value)?),
            "table" => {
                crate::ident::TableName::new(value.to_owned()).map_err(|e| e.to_string())?;
                this.table(value)
            }
            "max_connections" => match value.parse::<u32>() {
                Ok(n) if n > 0 => this.max_connections(n),
                _ => {
                    return Err(format!(
                        "option max_connections={value:?}: give a whole number above zero"
                    ));
                }
            },
            // Unsafe, for the fault campaign's control run only, and so not
            // among the keys a tool lists (`SqlConfig`'s hidden setter of
            // the same name says what it breaks).
            "unsafe_keep_server_synchronous_commit" => {
                this.unsafe_keep_server_synchronous_commit(bool_value(key, value)?)
            }
            _ => return Err(unknown_key("SQL", key, KEYS)),
        };
        Ok(())
    }

    fn keys(&self) -> &'static [&'static str] {
        KEYS
    }

    fn look_only(&mut self, _timeout: Duration) -> Result<(), ConnectError> {
        if let Some(file) = self.sqlite_path() {
            look_at_file(&leasehold_core::url::redacted(&self.url), file)?;
        }
        *self = self.clone().max_connections(2).refuse_at_connect(false);
        Ok(())
    }

    fn credentials(&mut self, source: CredentialSource) -> Result<(), String> {
        if self.sqlite_path().is_some() {
            return Err(format!(
                "{} cannot be used with SQLite, which takes no password; protect the database \
                 file with file permissions instead",
                source.describe()
            ));
        }
        *self = self.clone().credential_source(source);
        Ok(())
    }

    fn connect(
        self: Box<Self>,
        shown: String,
    ) -> BoxFuture<'static, Result<Arc<dyn Operate>, ConnectError>> {
        Box::pin(async move {
            match SqlStrategy::connect(*self).await {
                Ok(s) => Ok(Arc::new(s) as Arc<dyn Operate>),
                Err(e) => Err(connect_error(&shown, e)),
            }
        })
    }

    #[cfg(feature = "harness")]
    fn harness(
        &self,
    ) -> Option<BoxFuture<'static, Result<Box<dyn leasehold_core::drivers::Harness>, String>>> {
        Some(Box::pin(crate::harness::SqlHarness::connect(self.clone())))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// A tool that only looks opens the SQLite file the holders use, and no
/// other: sqlx would create a missing file.
fn look_at_file(shown: &str, file: &str) -> Result<(), ConnectError> {
    if file.contains(":memory:") {
        return Err(ConnectError::BadUrl {
            url: shown.to_owned(),
            why: "give the path of the SQLite file the holders use (sqlite://PATH)".to_owned(),
        });
    }
    if !std::path::Path::new(file).is_file() {
        return Err(ConnectError::Unreachable {
            url: shown.to_owned(),
            message: format!("no SQLite file at {file}; give the file the holders use"),
        });
    }
    Ok(())
}

/// What a failed connect means to the caller: a bad URL, a store not
/// reachable (retryable), credentials refused, or a refusal to fix.
pub(crate) fn connect_error(shown: &str, e: SqlError) -> ConnectError {
    let url = shown.to_owned();
    match e {
        SqlError::Config(c) => ConnectError::BadUrl {
            url,
            why: c.to_string(),
        },
        // Its message names the store already.
        e @ SqlError::Credentials { .. } => ConnectError::Unreachable {
            message: e.to_string(),
            url,
        },
        // Its message says "authentication failed" and names the URL.
        e @ SqlError::Authentication { .. } => ConnectError::Authentication {
            message: e.to_string(),
            url,
        },
        e @ (SqlError::Unreachable(_) | SqlError::Timeout(_)) => ConnectError::Unreachable {
            message: format!("cannot reach {shown}: {e}"),
            url,
        },
        e => ConnectError::Refused {
            message: format!("cannot use {shown}: {e}"),
            url,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TLS failure at connect (an expired or untrusted certificate, a
    /// client certificate refused) is final, in the backend's words.
    #[test]
    fn a_tls_refusal_is_final_and_keeps_its_cause_and_fix() {
        let e = connect_error(
            "postgres://h/db",
            SqlError::Tls {
                what: "connecting to postgres://h/db: the server's certificate has expired".into(),
                fix: "renew the server's certificate".into(),
            },
        );
        assert!(matches!(e, ConnectError::Refused { .. }), "{e:?}");
        assert!(!e.is_retryable());
        assert!(
            e.to_string()
                .ends_with("has expired; renew the server's certificate"),
            "{e}"
        );
    }

    /// Options set by key and value are the URL's, read the same way; a
    /// key SQL does not take is refused with those it takes.
    #[test]
    fn options_by_key_are_the_urls() {
        let mut c: Box<dyn DriverConfig> = Box::new(SqlConfig::new("sqlite://x.db"));
        c.set("table", "ids").unwrap();
        c.set("op_timeout", "750ms").unwrap();
        c.set("max_connections", "3").unwrap();
        let sql = c.as_any().downcast_ref::<SqlConfig>().unwrap();
        assert_eq!(
            (sql.table.as_str(), sql.op_timeout, sql.max_connections),
            ("ids", Duration::from_millis(750), 3)
        );
        let e = c.set("prefix", "x").unwrap_err();
        assert!(e.contains("takes no option \"prefix\""), "{e}");
        assert!(e.contains("table"), "{e}");
        assert!(c.set("op_timeout", "soon").is_err());
        assert!(c.set("table", "no spaces").is_err());
    }
}
