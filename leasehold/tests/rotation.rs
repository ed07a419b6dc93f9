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

use leasehold::credentials::Credentials;
use leasehold::{
    DurabilityPolicy, Floor, LeaseConfig, LeaseManager, MonoTime, PoolName, PoolSpec, Release,
    Store, StoreConfig, Strategy,
};
use leasehold_conformance::servers::{Server, ServerKind, provide};
use libtest_mimic::{Arguments, Failed, Trial};

#[macro_use]
#[path = "common/accounts.rs"]
mod accounts;
use accounts::{Accounts, Family, fresh};

type Outcome = Result<(), String>;

/// How the holder gets its password.
#[derive(Clone, Copy, Debug)]
enum Form {
    /// `?password_file=PATH`, the file rewritten at the rotation.
    File,
    /// `StoreConfig::credentials`, whose answer changes at the rotation.
    Callback,
}

/// The test's user on a private server, and where its secrets live.
struct Rig {
    accounts: Accounts,
    user: String,
    /// The store URL of `user`, without a password.
    url: String,
    dir: PathBuf,
}

impl Rig {
    async fn new(server: Server, family: Family) -> Result<Self, String> {
        let accounts = Accounts::new(server, family).await?;
        let user = fresh("app");
        let url = accounts.url_of(&user);
        let dir = std::env::temp_dir().join(fresh("leasehold-rotation-"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        Ok(Self {
            accounts,
            user,
            url,
            dir,
        })
    }

    /// The store config of the user, its password from `form`'s source.
    fn config(
        &self,
        form: Form,
        file: &Path,
        current: &Arc<Mutex<String>>,
        asked: &Arc<AtomicUsize>,
    ) -> Result<StoreConfig, String> {
        let config = match form {
            Form::File => {
                let sep = if self.url.contains('?') { '&' } else { '?' };
                StoreConfig::from_url(&format!(
                    "{}{sep}password_file={}",
                    self.url,
                    file.display()
                ))
            }
            Form::Callback => {
                let (current, asked) = (Arc::clone(current), Arc::clone(asked));
                let user = self.user.clone();
                StoreConfig::from_url(&self.url).map(|c| {
                    c.credentials(move || {
                        asked.fetch_add(1, Ordering::SeqCst);
                        let password = current
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .clone();
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
            .map(|c: leasehold::sql::SqlConfig| c.durability(DurabilityPolicy::Throwaway))
            .map(|c: leasehold::valkey::ValkeyConfig| c.durability(DurabilityPolicy::Throwaway)))
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
    rig.accounts.create_user(&rig.user, &old).await?;
    let file = rig.dir.join("password");
    std::fs::write(&file, format!("{old}\n")).map_err(|e| e.to_string())?;
    let current = Arc::new(Mutex::new(old.clone()));
    let asked = Arc::new(AtomicUsize::new(0));
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
    rig.accounts.set_password(&rig.user, &new).await?;
    std::fs::write(&file, format!("{new}\n")).map_err(|e| e.to_string())?;
    *current.lock().unwrap_or_else(PoisonError::into_inner) = new.clone();
    let asked_before = asked.load(Ordering::SeqCst);
    let killed_at = MonoTime::now();
    let killed = rig.accounts.kill_connections(&rig.user).await?;
    ensure!(killed >= 1, "the holder had no connection to drop");

    // A renewal sent after the kill has a deadline past this; it went
    // over a new connection, which only the new password opens.
    let after_kill = killed_at + ttl - margin;
    until(
        Duration::from_secs(30),
        "a renewal after the rotation",
        || gate.deadline() > after_kill,
    )
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
    match rig
        .config(Form::File, &old_file, &current, &asked)?
        .connect()
        .await
    {
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
