//! Which engine a URL names.

use std::fmt;

/// The database engine behind a [`SqlStrategy`](crate::SqlStrategy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Engine {
    /// PostgreSQL 9.5+ (`postgres://`, `postgresql://`).
    Postgres,
    /// MySQL 8.0.1+ or MariaDB 10.6+ (`mysql://`, `mariadb://`).
    MySql,
    /// SQLite 3.35+ (`sqlite:` URLs and plain file paths); the bundled library is used.
    Sqlite,
}

impl Engine {
    /// The engine a URL (or a plain path, which means SQLite) names.
    pub fn from_url(url: &str) -> Self {
        let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        match scheme.as_deref() {
            Some("postgres" | "postgresql") => Self::Postgres,
            Some("mysql" | "mariadb") => Self::MySql,
            _ => Self::Sqlite,
        }
    }

    /// `postgres`, `mysql` or `sqlite`: also the folder of its migrations.
    pub fn name(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::MySql => "mysql",
            Self::Sqlite => "sqlite",
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engines_from_urls() {
        assert_eq!(Engine::from_url("postgres://u@h/db"), Engine::Postgres);
        assert_eq!(Engine::from_url("postgresql://h"), Engine::Postgres);
        assert_eq!(Engine::from_url("mysql://root@h:1/x"), Engine::MySql);
        assert_eq!(Engine::from_url("mariadb://root@h:1/x"), Engine::MySql);
        assert_eq!(Engine::from_url("sqlite://./x.db"), Engine::Sqlite);
        assert_eq!(Engine::from_url("./x.sqlite"), Engine::Sqlite);
    }
}
