//! Users with passwords on private test servers (PostgreSQL, MariaDB,
//! Valkey/Redis): made, given a new password, and disconnected by an admin
//! connection that logs no statement (so no password reaches a `tracing`
//! recorder).
#![allow(dead_code)] // each test uses a part of it

use std::sync::atomic::{AtomicUsize, Ordering};

use fred::interfaces::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use leasehold::sql::sqlx::{self, ConnectOptions, Executor, Row};
use leasehold_conformance::servers::{Origin, Server};

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

type Outcome = Result<(), String>;

/// A name no other test uses: `prefix` and a few hex digits.
pub(crate) fn fresh(prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    format!(
        "{prefix}{:x}{}",
        n ^ std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The server families whose users have passwords here.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Family {
    Postgres,
    MariaDb,
    Valkey,
}

/// A private server and its admin access.
pub(crate) struct Accounts {
    pub(crate) server: Server,
    family: Family,
}

impl Accounts {
    /// `server`, a private one: PostgreSQL's is made to ask every user but
    /// its admin for a password.
    pub(crate) async fn new(server: Server, family: Family) -> Result<Self, String> {
        let accounts = Self { server, family };
        if let Family::Postgres = family {
            accounts.pg_enforce_passwords().await?;
        }
        Ok(accounts)
    }

    /// The store URL of `user`, without a password.
    pub(crate) fn url_of(&self, user: &str) -> String {
        match self.family {
            Family::Postgres => self
                .server
                .url
                .replacen("://postgres@", &format!("://{user}@"), 1),
            Family::MariaDb => self
                .server
                .url
                .replacen("://root@", &format!("://{user}@"), 1),
            Family::Valkey => self
                .server
                .store_url()
                .replacen("://", &format!("://{user}@"), 1),
        }
    }

    // ---- PostgreSQL ----

    async fn pg_admin(&self) -> Result<sqlx::PgConnection, String> {
        let opts: sqlx::postgres::PgConnectOptions =
            self.server.url.parse().map_err(|e| format!("{e}"))?;
        opts.disable_statement_logging()
            .connect()
            .await
            .map_err(|e| format!("admin connection: {e}"))
    }

    /// The private server trusts every local connection: from now on every
    /// user but the admin logs in with a password (SCRAM).
    async fn pg_enforce_passwords(&self) -> Outcome {
        ensure!(
            matches!(self.server.origin, Origin::Binary(_)),
            "the server is not a private one ({}): its pg_hba.conf is not this test's to change",
            self.server.origin
        );
        let mut admin = self.pg_admin().await?;
        let hba: String = sqlx::query_scalar("SHOW hba_file")
            .fetch_one(&mut admin)
            .await
            .map_err(|e| e.to_string())?;
        let lines = [
            "local all all trust",
            "host all postgres 127.0.0.1/32 trust",
            "host all all 127.0.0.1/32 scram-sha-256",
            "host all all ::1/128 scram-sha-256",
        ];
        let copy = format!(
            "COPY (SELECT unnest(ARRAY['{}'])) TO '{}'",
            lines.join("','"),
            hba.replace('\'', "''")
        );
        admin
            .execute(copy.as_str())
            .await
            .map_err(|e| e.to_string())?;
        admin
            .execute("SELECT pg_reload_conf()")
            .await
            .map_err(|e| e.to_string())?;
        // The server reloads in the background: wait until a wrong password
        // is refused.
        let probe = fresh("probe");
        let sql = format!("CREATE ROLE \"{probe}\" LOGIN PASSWORD 'right'");
        admin
            .execute(sql.as_str())
            .await
            .map_err(|e| e.to_string())?;
        let wrong: sqlx::postgres::PgConnectOptions = self
            .url_of(&probe)
            .parse::<sqlx::postgres::PgConnectOptions>()
            .map_err(|e| e.to_string())?
            .password("wrong")
            .disable_statement_logging();
        let start = std::time::Instant::now();
        while wrong.connect().await.is_ok() {
            ensure!(
                start.elapsed() < std::time::Duration::from_secs(30),
                "the server still accepts a wrong password: pg_hba.conf was not reloaded"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        Ok(())
    }

    // ---- MariaDB ----

    async fn my_admin(&self) -> Result<sqlx::MySqlConnection, String> {
        let opts: sqlx::mysql::MySqlConnectOptions =
            self.server.url.parse().map_err(|e| format!("{e}"))?;
        opts.disable_statement_logging()
            .connect()
            .await
            .map_err(|e| format!("admin connection: {e}"))
    }

    /// The accounts of the user: one per host a TCP connection from this
    /// machine may be matched to (so no anonymous account takes it).
    fn my_accounts(user: &str) -> Vec<String> {
        ["%", "localhost", "127.0.0.1"]
            .iter()
            .map(|h| format!("'{user}'@'{h}'"))
            .collect()
    }

    // ---- Valkey/Redis ----

    async fn valkey_admin(&self, command: &'static str, words: &[&str]) -> Result<Value, String> {
        let config =
            fred::types::config::Config::from_url(&self.server.url).map_err(|e| e.to_string())?;
        let client = fred::types::Builder::from_config(config)
            .build()
            .map_err(|e| e.to_string())?;
        client.init().await.map_err(|e| e.to_string())?;
        let cmd = CustomCommand::new_static(command, ClusterHash::Random, false);
        let args: Vec<Value> = words.iter().map(|w| (*w).into()).collect();
        let answer = client.custom::<Value, Value>(cmd, args).await;
        let _ = client.quit().await;
        answer.map_err(|e| format!("{command} {}: {e}", words[0]))
    }

    // ---- every family ----

    /// Creates `user` with `password`, allowed everything a holder does.
    pub(crate) async fn create_user(&self, user: &str, password: &str) -> Outcome {
        match self.family {
            Family::Postgres => {
                // A superuser: the lease table is created in `public`.
                let sql = format!("CREATE ROLE \"{user}\" LOGIN SUPERUSER PASSWORD '{password}'");
                let mut admin = self.pg_admin().await?;
                admin
                    .execute(sql.as_str())
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Family::MariaDb => {
                let mut admin = self.my_admin().await?;
                for account in Self::my_accounts(user) {
                    for sql in [
                        format!("CREATE USER {account} IDENTIFIED BY '{password}'"),
                        format!("GRANT ALL ON *.* TO {account}"),
                    ] {
                        admin
                            .execute(sql.as_str())
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                }
            }
            Family::Valkey => {
                let pw = format!(">{password}");
                self.valkey_admin("ACL", &["SETUSER", user, "on", &pw, "~*", "&*", "+@all"])
                    .await?;
            }
        }
        Ok(())
    }

    /// Changes `user`'s password on the server (connections already open
    /// stay open).
    pub(crate) async fn set_password(&self, user: &str, password: &str) -> Outcome {
        match self.family {
            Family::Postgres => {
                let sql = format!("ALTER ROLE \"{user}\" PASSWORD '{password}'");
                let mut admin = self.pg_admin().await?;
                admin
                    .execute(sql.as_str())
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Family::MariaDb => {
                let mut admin = self.my_admin().await?;
                for account in Self::my_accounts(user) {
                    let sql = format!("ALTER USER {account} IDENTIFIED BY '{password}'");
                    admin
                        .execute(sql.as_str())
                        .await
                        .map_err(|e| e.to_string())?;
                }
            }
            Family::Valkey => {
                let pw = format!(">{password}");
                self.valkey_admin("ACL", &["SETUSER", user, "resetpass", &pw])
                    .await?;
            }
        }
        Ok(())
    }

    /// Drops every connection of `user`, server-side; how many there were.
    pub(crate) async fn kill_connections(&self, user: &str) -> Result<i64, String> {
        match self.family {
            Family::Postgres => {
                let sql = format!(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE usename = '{user}'"
                );
                let mut admin = self.pg_admin().await?;
                let row = admin
                    .fetch_one(sql.as_str())
                    .await
                    .map_err(|e| e.to_string())?;
                row.try_get::<i64, _>(0).map_err(|e| e.to_string())
            }
            Family::MariaDb => {
                let mut admin = self.my_admin().await?;
                let sql =
                    format!("SELECT id FROM information_schema.PROCESSLIST WHERE user = '{user}'");
                let rows = admin
                    .fetch_all(sql.as_str())
                    .await
                    .map_err(|e| e.to_string())?;
                let mut killed = 0;
                for row in rows {
                    let id: i64 = row.try_get(0).map_err(|e| e.to_string())?;
                    // A connection may end by itself meanwhile.
                    if admin
                        .execute(format!("KILL CONNECTION {id}").as_str())
                        .await
                        .is_ok()
                    {
                        killed += 1;
                    }
                }
                Ok(killed)
            }
            Family::Valkey => match self.valkey_admin("CLIENT", &["KILL", "USER", user]).await? {
                Value::Integer(n) => Ok(n),
                other => Err(format!("CLIENT KILL USER answered {other:?}")),
            },
        }
    }
}
