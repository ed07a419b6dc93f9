//! Rotated credentials on real servers. A holder (`LeaseManager`) whose
//! store reads its password from a file (`?password_file=PATH`), or asks a
//! callback (`StoreConfig::credentials`), for every new connection keeps
//! its lease while the server's password changes, the file (or what the
//! callback answers) changes with it, and the server drops every
//! connection of the user (`pg_terminate_backend`, `KILL CONNECTION`,
//! `CLIENT KILL USER`): its renewals go on over new connections made with
//! the new password. A new store connects with the new password, and the
//! old password is refused, so the rotation was real.
//!
//! Each test starts a private server of its own (its users and passwords
//! change); a server that cannot be provided is reported as ignored, and
//! fails under `CI=true`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fred::interfaces::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use leasehold::credentials::Credentials;
use leasehold::sql::sqlx::{self, ConnectOptions, Executor, Row};
use leasehold::{
    Floor, LeaseConfig, LeaseManager, MonoTime, PoolName, PoolSpec, Release, Store, StoreConfig,
    Strategy,
};
use leasehold_conformance::servers::{Origin, Server, ServerKind, provide};
use libtest_mimic::{Arguments, Failed, Trial};

type Outcome = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// How the holder gets its password.
#[derive(Clone, Copy, Debug)]
enum Form {
    /// `?password_file=PATH`, the file rewritten at the rotation.
    File,
    /// `StoreConfig::credentials`, whose answer changes at the rotation.
    Callback,
}

/// The server families the test rotates passwords on.
#[derive(Clone, Copy, Debug)]
enum Family {
    Postgres,
    MariaDb,
    Valkey,
}

/// A private server, its admin access, and the user whose password
/// rotates.
struct Rig {
    server: Server,
    family: Family,
    user: String,
    /// The store URL of `user`, without a password.
    url: String,
    dir: PathBuf,
}

fn fresh(prefix: &str) -> String {
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

impl Rig {
    async fn new(server: Server, family: Family) -> Result<Self, String> {
        let user = fresh("app");
        let url = match family {
            Family::Postgres => server.url.replacen("://postgres@", &format!("://{user}@"), 1),
            Family::MariaDb => server.url.replacen("://root@", &format!("://{user}@"), 1),
            Family::Valkey => server
                .store_url()
                .replacen("://", &format!("://{user}@"), 1),
        };
        let dir = std::env::temp_dir().join(fresh("leasehold-rotation-"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let rig = Self {
            server,
            family,
            user,
            url,
            dir,
        };
        if let Family::Postgres = family {
            rig.pg_enforce_passwords().await?;
        }
        Ok(rig)
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
        admin.execute(copy.as_str()).await.map_err(|e| e.to_string())?;
        admin
            .execute("SELECT pg_reload_conf()")
            .await
            .map_err(|e| e.to_string())?;
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
    fn my_accounts(&self) -> Vec<String> {
        ["%", "localhost", "127.0.0.1"]
            .iter()
            .map(|h| format!("'{}'@'{h}'", self.user))
            .collect()
    }

    // ---- Valkey/Redis ----

    async fn valkey_admin(&self, command: &'static str, words: &[&str]) -> Result<Value, String> {
        let config = fred::types::config::Config::from_url(&self.server.url)
            .map_err(|e| e.to_string())?;
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

    /// Creates the user with `password`, allowed everything a holder does.
    async fn create_user(&self, password: &str) -> Outcome {
        let user = &self.user;
        match self.family {
            Family::Postgres => {
                // A superuser: the lease table is created in `public`.
                let sql = format!("CREATE ROLE \"{user}\" LOGIN SUPERUSER PASSWORD '{password}'");
                let mut admin = self.pg_admin().await?;
                admin.execute(sql.as_str()).await.map_err(|e| e.to_string())?;
            }
            Family::MariaDb => {
                let mut admin = self.my_admin().await?;
                for account in self.my_accounts() {
                    for sql in [
                        format!("CREATE USER {account} IDENTIFIED BY '{password}'"),
                        format!("GRANT ALL ON *.* TO {account}"),
                    ] {
                        admin.execute(sql.as_str()).await.map_err(|e| e.to_string())?;
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

    /// Changes the user's password on the server (connections already
    /// open stay open).
    async fn set_password(&self, password: &str) -> Outcome {
        let user = &self.user;
        match self.family {
            Family::Postgres => {
                let sql = format!("ALTER ROLE \"{user}\" PASSWORD '{password}'");
                let mut admin = self.pg_admin().await?;
                admin.execute(sql.as_str()).await.map_err(|e| e.to_string())?;
            }
            Family::MariaDb => {
                let mut admin = self.my_admin().await?;
                for account in self.my_accounts() {
                    let sql = format!("ALTER USER {account} IDENTIFIED BY '{password}'");
                    admin.execute(sql.as_str()).await.map_err(|e| e.to_string())?;
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

    /// Drops every connection of the user, server-side; how many there were.
    async fn kill_connections(&self) -> Result<i64, String> {
        let user = &self.user;
        match self.family {
            Family::Postgres => {
                let sql = format!(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE usename = '{user}'"
                );
                let mut admin = self.pg_admin().await?;
                let row = admin.fetch_one(sql.as_str()).await.map_err(|e| e.to_string())?;
                row.try_get::<i64, _>(0).map_err(|e| e.to_string())
            }
            Family::MariaDb => {
                let mut admin = self.my_admin().await?;
                let sql = format!("SELECT id FROM information_schema.PROCESSLIST WHERE user = '{user}'");
                let rows = admin.fetch_all(sql.as_str()).await.map_err(|e| e.to_string())?;
                let mut killed = 0;
                for row in rows {
                    let id: i64 = row.try_get(0).map_err(|e| e.to_string())?;
                    // A connection may end by itself meanwhile.
                    if admin.execute(format!("KILL CONNECTION {id}").as_str()).await.is_ok() {
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

    /// The store config of the user, its password from `form`'s source.
    fn config(&self, form: Form, file: &Path, current: &Arc<Mutex<String>>, asked: &Arc<AtomicUsize>) -> Result<StoreConfig, String> {
        let config = match form {
            Form::File => {
                let sep = if self.url.contains('?') { '&' } else { '?' };
                StoreConfig::from_url(&format!("{}{sep}password_file={}", self.url, file.display()))
            }
            Form::Callback => {
                let (current, asked) = (Arc::clone(current), Arc::clone(asked));
                let user = self.user.clone();
                StoreConfig::from_url(&self.url).map(|c| {
                    c.credentials(move || {
                        asked.fetch_add(1, Ordering::SeqCst);
                        let password = current.lock().unwrap_or_else(PoisonError::into_inner).clone();
                        let user = user.clone();
                        async move { Ok::<_, std::io::Error>(Credentials::new(user, password)) }
                    })
                })
            }
        }
        .map_err(|e| e.to_string())?;
        // A private fast server, which can forget: no restart guard.
        Ok(config
            .op_timeout(Duration::from_secs(2))
            .map_sql(|c| c.restart_guard(false))
            .map_valkey(|c| c.restart_guard(false)))
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Polls `check` until it is true, up to `limit`.
async fn until(limit: Duration, what: &str, mut check: impl FnMut() -> bool) -> Outcome {
    let start = Instant::now();
    while !check() {
        ensure!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// The rotation, as the module docs say.
async fn rotation(kind: ServerKind, family: Family, form: Form) -> Outcome {
    let server = provide(kind).map_err(|e| e.to_string())?;
    let rig = Rig::new(server, family).await?;
    let (old, new) = (fresh("Old-pw-"), fresh("New-pw-"));
    rig.create_user(&old).await?;
    let file = rig.dir.join("password");
    std::fs::write(&file, format!("{old}\n")).map_err(|e| e.to_string())?;
    let current = Arc::new(Mutex::new(old.clone()));
    let asked = Arc::new(AtomicUsize::new(0));
    // PostgreSQL reloads pg_hba.conf in the background: connect once the
    // password is asked for (a wrong one refused).
    let wrong = rig.dir.join("wrong");
    std::fs::write(&wrong, "not-the-password").map_err(|e| e.to_string())?;
    let start = Instant::now();
    while rig
        .config(Form::File, &wrong, &current, &asked)?
        .connect()
        .await
        .is_ok()
    {
        ensure!(
            start.elapsed() < Duration::from_secs(30),
            "the server accepts a wrong password for {}: passwords are not checked",
            rig.user
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let store = rig
        .config(form, &file, &current, &asked)?
        .connect()
        .await
        .map_err(|e| format!("connect with the first password: {e}"))?;
    let pool = fresh("rot");
    let losses = Arc::new(AtomicUsize::new(0));
    let lost = Arc::clone(&losses);
    let ttl = Duration::from_secs(6);
    let config = LeaseConfig::builder(pool.as_str())
        .pool_size(4)
        .ttl(ttl)
        .renew_interval(Duration::from_millis(300))
        .on_lost(move |_| {
            lost.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .map_err(|e| e.to_string())?;
    let margin = config.timing().safety_margin();
    store
        .operator()
        .prepare(Some(config.pool()))
        .await
        .map_err(|e| format!("prepare: {e}"))?;
    let manager = LeaseManager::start(store.clone(), config)
        .await
        .map_err(|e| format!("start: {e}"))?;
    let gate = manager.gate().clone();
    let held = gate.view();

    // The rotation: the server's password, then the secret, then every
    // connection of the user dropped.
    rig.set_password(&new).await?;
    std::fs::write(&file, format!("{new}\n")).map_err(|e| e.to_string())?;
    *current.lock().unwrap_or_else(PoisonError::into_inner) = new.clone();
    let asked_before = asked.load(Ordering::SeqCst);
    let killed_at = MonoTime::now();
    let killed = rig.kill_connections().await?;
    ensure!(killed >= 1, "the holder had no connection to drop");

    // A renewal sent after the kill has a deadline past this; it went
    // over a new connection, which only the new password opens.
    let after_kill = killed_at + ttl - margin;
    until(Duration::from_secs(30), "a renewal after the rotation", || {
        gate.deadline() > after_kill
    })
    .await?;
    let now = gate.view();
    ensure!(
        now.epoch == held.epoch && now.slot == held.slot && losses.load(Ordering::SeqCst) == 0,
        "the holder lost its lease: slot {} epoch {} then slot {} epoch {}, {} loss(es)",
        held.slot,
        held.epoch,
        now.slot,
        now.epoch,
        losses.load(Ordering::SeqCst)
    );
    if let Form::Callback = form {
        ensure!(
            asked.load(Ordering::SeqCst) > asked_before,
            "the callback was not asked again after the connections were dropped"
        );
    }

    // A new store connects with the new password and sees the holder.
    let fresh_store = rig
        .config(form, &file, &current, &asked)?
        .connect()
        .await
        .map_err(|e| format!("a new store after the rotation: {e}"))?;
    second_holder(&fresh_store, &pool, held.slot).await?;

    // The old password is refused: the rotation was real.
    let old_file = rig.dir.join("old");
    std::fs::write(&old_file, &old).map_err(|e| e.to_string())?;
    match rig.config(Form::File, &old_file, &current, &asked)?.connect().await {
        Ok(s) => {
            // Valkey/Redis and sqlx connect lazily for the caller's pool;
            // a store that answers a ping with the old password was not
            // rotated.
            ensure!(
                s.operator().ping().await.is_err(),
                "the old password still opens a connection"
            );
        }
        Err(e) => ensure!(
            !e.to_string().contains(&old),
            "the refusal shows the old password: {e}"
        ),
    }

    manager.shutdown().await;
    ensure!(
        losses.load(Ordering::SeqCst) == 0,
        "the holder lost its lease at the end"
    );
    Ok(())
}

/// A second holder on `store`: sees the first holder's slot and takes
/// another.
async fn second_holder(store: &Store, pool: &str, first: u32) -> Outcome {
    let spec = PoolSpec::new(
        PoolName::new(pool).map_err(|e| e.to_string())?,
        4,
        Duration::from_secs(6),
    )
    .map_err(|e| e.to_string())?
    .with_holder("second-holder");
    let slots = store
        .operator()
        .slots(&spec)
        .await
        .map_err(|e| format!("slots: {e}"))?;
    ensure!(
        slots.iter().any(|s| s.slot == first && s.holder.is_some()),
        "the new store does not see slot {first} held: {slots:?}"
    );
    let grant = store
        .acquire(&spec, Floor::NONE)
        .await
        .map_err(|e| format!("a second holder's acquire: {e}"))?;
    ensure!(grant.slot != first, "slot {first} was granted twice");
    let r = store.release(&spec, &grant, Floor::NONE).await;
    ensure!(r == Release::Released, "release: {r:?}");
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = Arguments::from_args();
    let mut trials = Vec::new();
    for (label, kind, family) in [
        ("postgres15", ServerKind::Postgres15, Family::Postgres),
        ("mariadb", ServerKind::MariaDb, Family::MariaDb),
        ("valkey8", ServerKind::Valkey8, Family::Valkey),
        ("redis7", ServerKind::Redis7, Family::Valkey),
    ] {
        for (name, form) in [
            ("password_file_rotates_while_a_holder_runs", Form::File),
            ("callback_rotates_while_a_holder_runs", Form::Callback),
        ] {
            let missing = leasehold_conformance::servers::find_binary(kind).is_none()
                && std::env::var(kind.env_var()).is_err();
            let ignore = missing && !leasehold_conformance::in_ci();
            trials.push(
                Trial::test(format!("{label}::{name}"), move || {
                    let rt = tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(2)
                        .enable_all()
                        .build()
                        .map_err(|e| Failed::from(e.to_string()))?;
                    rt.block_on(rotation(kind, family, form))
                        .map_err(|e| Failed::from(format!("{label} ({form:?}): {e}")))
                })
                .with_ignored_flag(ignore),
            );
        }
    }
    libtest_mimic::run(&args, trials).exit_code()
}
