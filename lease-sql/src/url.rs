//! Store URLs: the schemes this backend accepts and what their parts mean.

use leasehold_core::ConfigError;
use leasehold_core::url::{
    StoreUrl, bool_option, duration_option, percent_decode, scheme_of, unknown_option,
};

use crate::config::SqlConfig;
use crate::engine::Engine;
use crate::error::SqlError;
use crate::ident::TableName;

/// The accepted shapes, quoted by every URL error.
const FORM: &str = "postgres://USER[:PASSWORD]@HOST[:PORT]/DB, mysql://… (MariaDB too) or \
                    sqlite://PATH, with options ?table=NAME&op_timeout=2s&password_file=PATH";

/// The options leasehold reads from the query (and removes before sqlx sees it).
const OWN_OPTIONS: &str = "table, op_timeout, password_file, durability, \
                           assume_one_timing_per_pool, restart_guard, require_durable, \
                           refuse_split_brain";

/// The opt-ins a URL may carry: `durability=…`, and the others each
/// `=true` or `=false`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct OptIns {
    one_timing: Option<bool>,
    restart_guard: Option<bool>,
    require_durable: Option<bool>,
    refuse_split_brain: Option<bool>,
    durability: Option<leasehold_core::DurabilityPolicy>,
}

impl OptIns {
    /// Reads (and takes) each opt-in of `parts`.
    fn take(parts: &mut StoreUrl) -> Result<Self, ConfigError> {
        Ok(Self {
            one_timing: parts.take_bool("assume_one_timing_per_pool")?,
            restart_guard: parts.take_bool("restart_guard")?,
            require_durable: parts.take_bool("require_durable")?,
            refuse_split_brain: parts.take_bool("refuse_split_brain")?,
            durability: parts.take_durability()?,
        })
    }

    /// Reads `key=value` if it is an opt-in (`false`: it is not).
    fn read(&mut self, key: &str, value: &str) -> Result<bool, ConfigError> {
        let slot = match key {
            "assume_one_timing_per_pool" => (&mut self.one_timing, "assume_one_timing_per_pool"),
            "restart_guard" => (&mut self.restart_guard, "restart_guard"),
            "require_durable" => (&mut self.require_durable, "require_durable"),
            "refuse_split_brain" => (&mut self.refuse_split_brain, "refuse_split_brain"),
            "durability" => {
                self.durability = Some(value.parse().map_err(|_| {
                    ConfigError::new(
                        "durability",
                        format!("{value:?}"),
                        "durability=durable, durability=one-timing-per-pool or \
                         durability=throwaway",
                    )
                })?);
                return Ok(true);
            }
            _ => return Ok(false),
        };
        *slot.0 = Some(bool_option(slot.1, value)?);
        Ok(true)
    }

    /// `config` with the opt-ins given. The deprecated switches are read
    /// through their setters, so that a URL keeps meaning what it meant
    /// for as long as they are kept.
    #[allow(deprecated)]
    fn apply(self, mut config: SqlConfig) -> SqlConfig {
        // The policy first: the older switches, when given too, adjust it.
        if let Some(policy) = self.durability {
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
        if let Some(yes) = self.refuse_split_brain {
            config = config.refuse_split_brain(yes);
        }
        config
    }

    /// What to say of a URL that carries the deprecated options, `config`
    /// being what it reads as. `None` when it carries none.
    fn deprecation(&self, config: &SqlConfig) -> Option<String> {
        leasehold_core::url::DeprecatedSwitches {
            policy: self.durability,
            one_timing: self.one_timing,
            restart_guard: self.restart_guard,
            require_durable: self.require_durable,
        }
        .warning(
            config.require_durable,
            config.restart_guard,
            config.assume_one_timing,
        )
    }
}

/// Logs, once for the URL, that it carries deprecated options (`text`, from
/// [`OptIns::deprecation`]).
fn warn_deprecated(url: &str, text: &str) {
    #[cfg(feature = "tracing")]
    tracing::warn!(store = %leasehold_core::url::redacted(url), "{text}");
    #[cfg(not(feature = "tracing"))]
    let _ = (url, text);
}

/// sqlx 0.8's own connection options, per engine: passed through as written.
const POSTGRES_OPTIONS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];
const MYSQL_OPTIONS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslca",
    "ssl-ca",
    "charset",
    "collation",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "socket",
    "timezone",
    "time-zone",
];
const SQLITE_OPTIONS: &[&str] = &["mode", "cache", "immutable", "vfs"];

impl SqlConfig {
    /// The URL schemes [`SqlConfig::from_url`] accepts.
    pub const SCHEMES: &[&str] = &["postgres", "postgresql", "mysql", "mariadb", "sqlite"];

    /// Settings from a store URL (see the crate README, "URL"):
    /// `postgres://USER[:PASSWORD]@HOST[:PORT]/DB` (or `postgresql://`),
    /// `mysql://…` or `mariadb://…`, `sqlite://PATH` (or `sqlite:PATH`),
    /// with the options `table=NAME` ([`SqlConfig::table`]) and
    /// `op_timeout=500ms` or `=2s` ([`SqlConfig::op_timeout`]) and
    /// `password_file=PATH` ([`SqlConfig::password_file`]: the password,
    /// read for every new connection; not with a password in the URL, nor
    /// for SQLite), and the opt-ins, so that one URL carries what an
    /// application accepts to the tools that check it (`leasehold doctor`):
    /// `durability=durable`, `=one-timing-per-pool` or `=throwaway`
    /// ([`SqlConfig::durability`]) and `refuse_split_brain=true` or `=false`
    /// ([`SqlConfig::refuse_split_brain`]). sqlx's own options (`sslmode`, `application_name`,
    /// SQLite's `mode`, …) pass through to it as written.
    ///
    /// The deprecated options `assume_one_timing_per_pool`, `restart_guard`
    /// and `require_durable` (each `=true` or `=false`) are still read, after
    /// `durability=` when both are given, as their deprecated setters read
    /// them; a URL that has any logs one `tracing` warning (the `tracing`
    /// feature) naming the `durability=` option to write instead.
    ///
    /// Errors ([`SqlError::Config`]) name what is accepted: an unknown
    /// scheme, a missing host, a bad port, an unknown option, an invalid
    /// table name, a TLS mode that does not verify the server (`require`,
    /// `verify-ca`, `REQUIRED`, `VERIFY_CA`: the crate README, "TLS").
    ///
    /// ```
    /// use leasehold_sql::SqlConfig;
    /// let config = SqlConfig::from_url("postgres://app@db.internal/app?table=machine_ids")?;
    /// assert_eq!(config.url(), "postgres://app@db.internal/app");
    /// let e = SqlConfig::from_url("postgress://app@db.internal/app").unwrap_err();
    /// assert!(e.to_string().contains("expected one of postgres, postgresql,"));
    /// # Ok::<(), leasehold_sql::SqlError>(())
    /// ```
    pub fn from_url(url: &str) -> Result<Self, SqlError> {
        // `sqlite:PATH` (sqlx's form without `//`) carries no authority.
        let sqlite_short = sqlite_short(url).is_some_and(|rest| !rest.starts_with("//"));
        let scheme = if sqlite_short {
            "sqlite".to_owned()
        } else {
            scheme_of(url, Self::SCHEMES, FORM)?
        };
        let (passed_on, table, op_timeout, password_file, opt_ins) = if scheme == "sqlite" {
            let (passed_on, table, op_timeout, opt_ins) = sqlite(url)?;
            (passed_on, table, op_timeout, None, opt_ins)
        } else {
            let mut parts = StoreUrl::parse(url, Self::SCHEMES, FORM)?;
            parts.require_one_host(FORM)?;
            let table = parts.take("table");
            let op_timeout = parts.take_duration("op_timeout")?;
            let password_file = parts.take("password_file");
            if password_file.is_some() && has_password(&parts) {
                return Err(two_passwords("password_file=PATH").into());
            }
            let opt_ins = OptIns::take(&mut parts)?;
            let (engine, theirs) = match scheme.as_str() {
                "postgres" | "postgresql" => (Engine::Postgres, POSTGRES_OPTIONS),
                _ => (Engine::MySql, MYSQL_OPTIONS),
            };
            check_options(parts.options().map(|(k, _)| k), theirs, &scheme)?;
            // The TLS mode, as early as the URL is read (`connect` checks
            // the one sqlx will use, and the files).
            for (key, value) in parts.options() {
                if key == "sslmode" || key == "ssl-mode" {
                    crate::tls::mode(engine, key, value)?;
                }
            }
            (
                parts.rebuild(parts.written_scheme()),
                table,
                op_timeout,
                password_file,
                opt_ins,
            )
        };
        let mut config = opt_ins.apply(Self::new(passed_on));
        if let Some(text) = opt_ins.deprecation(&config) {
            warn_deprecated(url, &text);
        }
        if let Some(path) = password_file {
            config = config.password_file(path);
        }
        if let Some(table) = table {
            config = config.table(TableName::new(table)?.as_str());
        }
        if let Some(timeout) = op_timeout {
            config = config.op_timeout(timeout);
        }
        Ok(config)
    }

    /// The SQLite database file (or `:memory:`) this configuration names;
    /// `None` for the other engines.
    pub fn sqlite_path(&self) -> Option<&str> {
        sqlite_path(&self.url)
    }
}

/// What follows `sqlite:` (any case) at the start of `url`, if it starts so.
/// Split where `:` is, never at a byte count: a path may start with any
/// character.
fn sqlite_short(url: &str) -> Option<&str> {
    url.split_once(':')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("sqlite"))
        .map(|(_, rest)| rest)
}

/// The part of an SQLite URL (or plain path) that names the file.
pub(crate) fn sqlite_path(url: &str) -> Option<&str> {
    let rest = match url.split_once("://") {
        Some((s, rest)) if s.eq_ignore_ascii_case("sqlite") => rest,
        Some(_) => return None,
        None => sqlite_short(url).unwrap_or(url),
    };
    Some(rest.split('?').next().unwrap_or(""))
}

/// An SQLite URL: the file, then the options (leasehold's taken out).
type SqliteParts = (String, Option<String>, Option<std::time::Duration>, OptIns);

fn sqlite(url: &str) -> Result<SqliteParts, SqlError> {
    let file = sqlite_path(url).unwrap_or("");
    if file.is_empty() {
        return Err(ConfigError::described(
            "url",
            "sqlite:// needs the path of the database file: sqlite://PATH (sqlite://./ids.db, \
             sqlite:///var/lib/app/ids.db) or sqlite::memory:",
        )
        .into());
    }
    let (before, query) = url.split_once('?').unwrap_or((url, ""));
    let (mut table, mut op_timeout, mut kept) = (None, None, Vec::new());
    let mut opt_ins = OptIns::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode(value);
        match key {
            "table" => table = Some(value),
            "op_timeout" => op_timeout = Some(duration_option("op_timeout", &value)?),
            "password_file" => return Err(sqlite_has_no_password().into()),
            _ if opt_ins.read(key, &value)? => {}
            _ => kept.push(pair),
        }
    }
    check_options(
        kept.iter()
            .map(|p| p.split_once('=').map_or(*p, |(k, _)| k)),
        SQLITE_OPTIONS,
        "sqlite",
    )?;
    let passed_on = if kept.is_empty() {
        before.to_owned()
    } else {
        format!("{before}?{}", kept.join("&"))
    };
    Ok((passed_on, table, op_timeout, opt_ins))
}

/// Whether the URL carries a password: in its user info or as sqlx's
/// `password=` option.
fn has_password(parts: &StoreUrl) -> bool {
    parts.password().is_some_and(|p| !p.is_empty()) || parts.options().any(|(k, _)| k == "password")
}

/// A password both in the URL and from `other` (a file, a callback).
fn two_passwords(other: &str) -> ConfigError {
    ConfigError::described(
        "url",
        format!(
            "the URL carries a password, and {other} gives one too; give it one way: drop the \
             password from the URL (user info or ?password=) and keep it in the file or the \
             callback"
        ),
    )
}

/// A credential source for SQLite, which has no password.
fn sqlite_has_no_password() -> ConfigError {
    ConfigError::described(
        "url",
        "SQLite has no password: password_file and credentials callbacks are for PostgreSQL and \
         MySQL/MariaDB; protect the database file with file permissions instead",
    )
}

impl SqlConfig {
    /// Refuses a credential source the URL contradicts: a password in the
    /// URL too, or an SQLite database (checked again at connect, whatever
    /// built the config).
    pub(crate) fn check_credentials(&self) -> Result<(), SqlError> {
        let Some(source) = &self.credentials else {
            return Ok(());
        };
        if sqlite_path(&self.url).is_some() {
            return Err(sqlite_has_no_password().into());
        }
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
}

fn check_options<'a>(
    mut keys: impl Iterator<Item = &'a str>,
    theirs: &[&str],
    scheme: &str,
) -> Result<(), SqlError> {
    match keys.find(|k| !theirs.contains(k) && !k.starts_with("options[")) {
        None => Ok(()),
        Some(key) => Err(unknown_option(
            key,
            &format!(
                "{OWN_OPTIONS}, and sqlx's options for {scheme}: {}",
                theirs.join(", ")
            ),
        )
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::DEFAULT_OP_TIMEOUT;
    use crate::ident::DEFAULT_TABLE;

    /// The opt-ins a URL carries reach the configuration (and not sqlx),
    /// so a tool given the application's URL judges the server as the
    /// application does; the deprecated ones still set what they set.
    #[test]
    fn the_opt_ins_are_url_options() {
        for url in [
            "postgres://app@db/app?assume_one_timing_per_pool=true&restart_guard=false\
             &require_durable=1",
            "mysql://app@db/app?require_durable=yes&restart_guard=off\
             &assume_one_timing_per_pool=on",
            "sqlite://./ids.db?assume_one_timing_per_pool=true&restart_guard=false\
             &require_durable=true&refuse_split_brain=true",
        ] {
            let c = SqlConfig::from_url(url).expect("accepted");
            assert!(
                c.assume_one_timing && !c.restart_guard && c.require_durable,
                "{url}: {c:?}"
            );
            assert_eq!(
                c.refuse_split_brain,
                url.contains("refuse_split_brain"),
                "{url}"
            );
            assert!(!c.url().contains("restart_guard"), "{url}: {}", c.url());
        }
        let c = SqlConfig::from_url("postgres://app@db/app").expect("accepted");
        assert!(!c.assume_one_timing && c.restart_guard && !c.require_durable);
        assert!(!c.refuse_split_brain);
    }

    /// Each durability policy, by URL option and by setter, sets the three
    /// switches as the one they stand for: `durable` the defaults,
    /// `one-timing-per-pool` the opt-in, `throwaway` the guards off; the
    /// older switches given too adjust it; a word that is none is refused
    /// with the three.
    #[test]
    fn each_durability_policy_is_the_switches_it_stands_for() {
        use leasehold_core::DurabilityPolicy;
        let switches = |c: &SqlConfig| (c.restart_guard, c.assume_one_timing, c.require_durable);
        for (word, policy, want) in [
            ("durable", DurabilityPolicy::Durable, (true, false, false)),
            (
                "one-timing-per-pool",
                DurabilityPolicy::OneTimingPerPool,
                (true, true, false),
            ),
            (
                "throwaway",
                DurabilityPolicy::Throwaway,
                (false, false, false),
            ),
        ] {
            for url in [
                format!("postgres://app@db/app?durability={word}"),
                format!("sqlite://./ids.db?durability={word}"),
            ] {
                let c = SqlConfig::from_url(&url).expect("accepted");
                assert_eq!(switches(&c), want, "{url}");
                assert!(!c.url().contains("durability"), "{url}: {}", c.url());
            }
            let c = SqlConfig::from_url(
                "postgres://app@db/app?assume_one_timing_per_pool=true&restart_guard=false\
                 &require_durable=true",
            )
            .expect("accepted")
            .durability(policy);
            assert_eq!(switches(&c), want, "{policy}");
        }
        assert_eq!(
            switches(&SqlConfig::new("postgres://app@db/app")),
            switches(
                &SqlConfig::new("postgres://app@db/app").durability(DurabilityPolicy::Durable)
            )
        );
        let c = SqlConfig::from_url("postgres://app@db/app?durability=durable&restart_guard=false")
            .expect("accepted");
        assert_eq!(switches(&c), (false, false, false));
        let e = SqlConfig::from_url("postgres://app@db/app?durability=fast").unwrap_err();
        assert!(
            e.to_string().contains("durability=one-timing-per-pool"),
            "{e}"
        );
    }

    /// A URL with the deprecated options says so once, naming them and
    /// the `durability=` that reads as they do (or as near: the refusal
    /// `require_durable=true` asks for is `durable`'s); a URL without them
    /// says nothing.
    #[test]
    fn a_deprecated_option_names_the_durability_to_write_instead() {
        let text = |url: &str| {
            let mut parts = StoreUrl::parse(url, SqlConfig::SCHEMES, FORM).expect("a URL");
            let opt_ins = OptIns::take(&mut parts).expect("opt-ins");
            opt_ins.deprecation(&opt_ins.apply(SqlConfig::new("postgres://app@db/app")))
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
                "assume_one_timing_per_pool=true&require_durable=true",
                "assume_one_timing_per_pool=true&require_durable=true",
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
            let said = text(&format!("postgres://app@db/app?{query}"))
                .unwrap_or_else(|| panic!("{query}: nothing said"));
            assert!(
                said.contains(&format!("this URL's {given} says durability={instead};")),
                "{query}: {said}"
            );
            assert!(said.contains("deprecated"), "{query}: {said}");
        }
        for query in ["durability=throwaway", "refuse_split_brain=true", "table=x"] {
            assert_eq!(
                text(&format!("postgres://app@db/app?{query}")),
                None,
                "{query}"
            );
        }
    }

    /// `from_url` logs the deprecation as one `tracing` warning per URL read,
    /// however many deprecated options it has, and none for a URL without.
    #[cfg(feature = "tracing")]
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
                SqlConfig::from_url(url).expect("accepted")
            });
            seen.lock().unwrap().clone()
        };
        for url in [
            "postgres://app@db/app?assume_one_timing_per_pool=true&restart_guard=false\
             &require_durable=false",
            "sqlite://./ids.db?restart_guard=false",
        ] {
            let seen = warnings(url);
            assert_eq!(seen.len(), 1, "{url}: {seen:?}");
            assert!(seen[0].contains("durability=throwaway"), "{url}: {seen:?}");
        }
        for url in [
            "postgres://app@db/app?durability=throwaway",
            "sqlite://./ids.db",
        ] {
            assert_eq!(warnings(url), Vec::<String>::new(), "{url}");
        }
    }

    #[test]
    fn accepted_urls_set_the_fields() {
        let s = |ms| Duration::from_millis(ms);
        for (url, passed_on, table, op_timeout) in [
            (
                "postgres://app:pw@db.internal/app",
                "postgres://app:pw@db.internal/app",
                DEFAULT_TABLE,
                DEFAULT_OP_TIMEOUT,
            ),
            (
                "postgresql://app@db:5433/app?sslmode=verify-full&table=ids&op_timeout=2s",
                "postgresql://app@db:5433/app?sslmode=verify-full",
                "ids",
                s(2000),
            ),
            (
                "POSTGRES://app@[::1]:5432/app?op_timeout=250ms",
                "POSTGRES://app@[::1]:5432/app",
                DEFAULT_TABLE,
                s(250),
            ),
            (
                "mysql://root@127.0.0.1:3306/x?ssl-mode=disabled",
                "mysql://root@127.0.0.1:3306/x?ssl-mode=disabled",
                DEFAULT_TABLE,
                DEFAULT_OP_TIMEOUT,
            ),
            (
                "mysql://app@db/x?ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.crt&ssl-cert=/c.crt&\
                 ssl-key=/c.key&table=t2",
                "mysql://app@db/x?ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.crt&ssl-cert=/c.crt&\
                 ssl-key=/c.key",
                "t2",
                DEFAULT_OP_TIMEOUT,
            ),
            (
                "mariadb://root@h/x?table=machine_ids",
                "mariadb://root@h/x",
                "machine_ids",
                DEFAULT_OP_TIMEOUT,
            ),
            (
                "sqlite://./ids.db?mode=rwc&table=t1",
                "sqlite://./ids.db?mode=rwc",
                "t1",
                DEFAULT_OP_TIMEOUT,
            ),
            (
                "sqlite:///var/lib/app/ids.db",
                "sqlite:///var/lib/app/ids.db",
                DEFAULT_TABLE,
                DEFAULT_OP_TIMEOUT,
            ),
            (
                "sqlite:ids.db?op_timeout=3s",
                "sqlite:ids.db",
                DEFAULT_TABLE,
                s(3000),
            ),
            (
                "sqlite::memory:",
                "sqlite::memory:",
                DEFAULT_TABLE,
                DEFAULT_OP_TIMEOUT,
            ),
        ] {
            let c = SqlConfig::from_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(
                (c.url(), c.table.as_str(), c.op_timeout),
                (passed_on, table, op_timeout),
                "{url}"
            );
        }
    }

    #[test]
    fn refused_urls_say_what_is_accepted() {
        for (url, needle) in [
            (
                "postgress://app@db/app",
                "unknown scheme \"postgress\"; expected one of postgres, postgresql, mysql, \
                 mariadb, sqlite",
            ),
            ("mysqll://root@h/x", "unknown scheme \"mysqll\""),
            (
                "db.internal:5432/app",
                "it has no scheme; expected one of postgres",
            ),
            ("postgres:///app", "postgres:// needs a host"),
            ("mysql://root@/x", "mysql:// needs a host"),
            (
                "postgres://app@db:5x432/app",
                "bad port \"5x432\" of host \"db\"",
            ),
            ("postgres://a@h1,h2/app", "takes one host"),
            (
                "postgres://app@db/app?tabel=ids",
                "unknown query option \"tabel\"; this URL takes table, op_timeout, \
                 password_file, durability, assume_one_timing_per_pool, restart_guard, \
                 require_durable, refuse_split_brain, and sqlx's options for postgres: sslmode",
            ),
            (
                "postgres://app@db/app?restart_guard=maybe",
                "restart_guard=true or restart_guard=false",
            ),
            (
                "sqlite://./x.db?require_durable=2",
                "require_durable=true or require_durable=false",
            ),
            (
                "mysql://root@h/x?prefix=a",
                "unknown query option \"prefix\"",
            ),
            (
                "sqlite://./x.db?sslmode=require",
                "sqlx's options for sqlite: mode",
            ),
            (
                "postgres://app@db/app?op_timeout=2",
                "op_timeout=500ms or op_timeout=2s",
            ),
            (
                "sqlite://x.db?op_timeout=soon",
                "op_timeout=500ms or op_timeout=2s",
            ),
            ("postgres://app@db/app?table=Bad-Name", "invalid `table`"),
            (
                "postgres://app@db/app?sslmode=require",
                "invalid `sslmode`: sslmode=require encrypts without checking the server's \
                 certificate",
            ),
            (
                "postgres://app@db/app?sslmode=verify-ca&sslrootcert=/ca.crt",
                "checks who signed the server's certificate but not the host name",
            ),
            (
                "postgres://app@db/app?ssl-mode=REQUIRE",
                "use sslmode=verify-full",
            ),
            ("postgres://app@db/app?sslmode=verify_full", "no TLS mode"),
            (
                "mysql://root@h/x?ssl-mode=REQUIRED",
                "invalid `ssl-mode`: ssl-mode=REQUIRED encrypts without checking",
            ),
            (
                "mariadb://root@h/x?sslmode=verify_ca",
                "use ssl-mode=VERIFY_IDENTITY",
            ),
            ("sqlite://", "sqlite:// needs the path of the database file"),
            ("sqlite:?mode=ro", "needs the path"),
        ] {
            let e = SqlConfig::from_url(url).unwrap_err().to_string();
            assert!(e.contains(needle), "{url}: {e}");
            assert!(!e.contains("feature"), "{url}: {e}");
        }
    }

    /// `password_file` is leasehold's, never sqlx's; a password given both
    /// in the URL and by a file or a callback is refused, and SQLite takes
    /// none.
    #[test]
    fn a_password_file_replaces_the_urls_password() {
        let c = SqlConfig::from_url(
            "postgres://app@db/app?password_file=/run/s/pw&application_name=ids",
        )
        .unwrap();
        assert_eq!(c.url(), "postgres://app@db/app?application_name=ids");
        assert_eq!(
            c.credentials.as_ref().and_then(|s| s.file()),
            Some(std::path::Path::new("/run/s/pw"))
        );
        assert!(c.check_credentials().is_ok());
        for url in [
            "postgres://app:pw@db/app?password_file=/run/s/pw",
            "postgres://app@db/app?password=pw&password_file=/run/s/pw",
            "mysql://app:pw@db/app?password_file=/run/s/pw",
        ] {
            let e = SqlConfig::from_url(url).unwrap_err().to_string();
            assert!(
                e.contains("the URL carries a password, and password_file"),
                "{url}: {e}"
            );
            assert!(!e.contains("pw@") && !e.contains("=pw"), "{url}: {e}");
        }
        let e = SqlConfig::from_url("sqlite://x.db?password_file=/p").unwrap_err();
        assert!(e.to_string().contains("SQLite has no password"), "{e}");
        let callback = || async {
            Ok::<_, std::io::Error>(leasehold_core::credentials::Credentials::password_only("x"))
        };
        for (url, needle) in [
            (
                "postgres://app:pw@db/app",
                "the credentials callback gives one too",
            ),
            ("sqlite://x.db", "SQLite has no password"),
        ] {
            let e = SqlConfig::new(url)
                .credentials(callback)
                .check_credentials()
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{url}: {e}");
        }
    }

    #[test]
    fn sqlite_paths() {
        for (url, path) in [
            ("sqlite://./x.db?mode=ro", Some("./x.db")),
            ("sqlite:x.db", Some("x.db")),
            ("./x.sqlite", Some("./x.sqlite")),
            ("postgres://h/db", None),
        ] {
            assert_eq!(SqlConfig::new(url).sqlite_path(), path, "{url}");
        }
    }

    /// A path is split where its parts are, never at a byte count: a
    /// non-ASCII character where the scheme `sqlite:` would end (byte 7)
    /// once made `sqlite_path` panic.
    #[test]
    fn non_ascii_paths_are_read_whole() {
        for (url, path) in [
            ("/tmp/aé.db", "/tmp/aé.db"),
            ("sqliteé.db", "sqliteé.db"),
            ("données/ids.sqlite", "données/ids.sqlite"),
            ("sqlite:aé.db?mode=rwc", "aé.db"),
            ("SQLITE:é", "é"),
            ("sqlite://./идентификаторы.db", "./идентификаторы.db"),
            ("🦀🦀.db", "🦀🦀.db"),
        ] {
            assert_eq!(SqlConfig::new(url).sqlite_path(), Some(path), "{url}");
        }
        for (url, passed_on) in [
            ("sqlite:aé.db?mode=rwc&table=t", "sqlite:aé.db?mode=rwc"),
            ("sqlite://./données.db", "sqlite://./données.db"),
            ("sqlite:é", "sqlite:é"),
        ] {
            let c = SqlConfig::from_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(c.url(), passed_on, "{url}");
        }
        // Not a scheme this backend takes, whatever follows.
        for url in ["sqlité://x.db", "é://x"] {
            let e = SqlConfig::from_url(url).unwrap_err().to_string();
            assert!(e.contains("unknown scheme"), "{url}: {e}");
        }
    }
}
