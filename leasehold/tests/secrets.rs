//! No secret in any output of the facade, on every store it builds: a
//! password planted in the URL's user info, in its query string
//! (`?password=`), in a password file (`password_file=`) and answered by a
//! credentials callback never shows in `StoreConfig`'s `Debug`, `Store`'s
//! `Debug` and `shown_url`, the doctor's lines, any `ConnectError` (a wrong
//! password, an unreachable host, an option the URL does not take, a
//! failing callback, a missing password file), or any `tracing` span or
//! event and metric of a manager holding, renewing and releasing
//! (`leasehold_conformance::secrets`).
//!
//! Where the store checks passwords the secret is the real one (a user made
//! with it on a private server: PostgreSQL asks every user but its admin
//! for a password, a MariaDB user, a Valkey/Redis ACL user, etcd with auth
//! on), so the paths that connect are exercised with it. A server that
//! cannot be provided is reported as ignored, and fails under `CI=true`.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use leasehold::credentials::Credentials;
use leasehold::operate::doctor;
use leasehold::{ConnectError, DurabilityPolicy, StoreConfig};
use leasehold_conformance::secrets::{self, Secret, Shown, in_query, in_user_info};
use leasehold_conformance::servers::{ServerKind, find_binary, provide};
use libtest_mimic::{Arguments, Failed, Trial};

#[macro_use]
#[path = "common/accounts.rs"]
mod accounts;
use accounts::{Accounts, Family, fresh};

type Outcome = Result<(), String>;

/// A store under test: its URLs with the secret in each form, and which
/// forms must connect.
struct Target {
    /// The user whose password is the secret, without a password.
    base: String,
    /// The secret in the user info.
    user_info: String,
    /// The secret as `?password=`.
    query: String,
    /// Which forms the store takes (and must then connect with):
    /// user info, query string, password file, callback.
    takes: [bool; 4],
    /// A user whose password is not the secret, the secret in its user
    /// info (a wrong password).
    wrong: Option<String>,
    /// The secret in the user info of a host nothing listens on.
    unreachable: Option<String>,
    /// The servers, kept running.
    _keep: Vec<Box<dyn Any + Send>>,
}

/// The settings of a throwaway store: short timeouts, no restart guard.
fn tuned(config: StoreConfig) -> StoreConfig {
    config
        .op_timeout(Duration::from_secs(3))
        .map(|c: leasehold::sql::SqlConfig| c.durability(DurabilityPolicy::Throwaway))
        .map(|c: leasehold::valkey::ValkeyConfig| c.durability(DurabilityPolicy::Throwaway))
}

fn with_option(url: &str, option: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{option}")
}

/// `config` connected, used and shown: `Store`'s `Debug` and URL, the
/// doctor's lines, a manager holding, renewing and releasing.
async fn use_store(what: &str, config: StoreConfig, shown: &mut Shown) -> Outcome {
    shown.debug(&format!("StoreConfig ({what})"), &config);
    let store = tuned(config)
        .connect()
        .await
        .map_err(|e| format!("{what}: connect: {e}"))?;
    shown.debug(&format!("Store ({what})"), &store);
    shown.text(&format!("Store::shown_url ({what})"), store.shown_url());
    shown.text(&format!("describe ({what})"), &store.operator().describe());
    let pool = leasehold_conformance::fresh_pool(2, Duration::from_secs(10))?;
    store
        .operator()
        .prepare(Some(&pool))
        .await
        .map_err(|e| format!("{what}: prepare: {e}"))?;
    for check in doctor(store.operator()).await {
        shown.text(&format!("doctor ({what})"), &check.to_string());
    }
    secrets::exercise(Arc::new(store), shown)
        .await
        .map_err(|e| format!("{what}: {e}"))
}

/// `config` refused at connect; its error noted.
async fn refused(
    what: &str,
    config: StoreConfig,
    shown: &mut Shown,
) -> Result<ConnectError, String> {
    shown.debug(&format!("StoreConfig ({what})"), &config);
    match tuned(config).connect().await {
        Ok(store) => Err(format!("{what}: connected to {}", store.shown_url())),
        Err(e) => {
            shown.both(&format!("ConnectError ({what})"), &e);
            shown.text(&format!("ConnectError::url ({what})"), e.url());
            Ok(e)
        }
    }
}

/// Every output, as the module docs say.
async fn never_shown(target: Target, secret: Secret) -> Outcome {
    let mut shown = Shown::new(&secret);
    let [user_info, query, file, callback] = target.takes;
    // The secret in the URL: used where the store takes it, refused (and
    // checked) where it does not.
    for (form, url, takes) in [
        ("user info", &target.user_info, user_info),
        ("query string", &target.query, query),
    ] {
        match StoreConfig::from_url(url) {
            Ok(config) if takes => use_store(form, config, &mut shown).await?,
            Ok(config) => drop(refused(form, config, &mut shown).await?),
            Err(e) => {
                ensure!(!takes, "{form}: refused: {e}");
                shown.both(&format!("ConnectError (from_url, {form})"), &e);
            }
        }
        match StoreConfig::from_url(&with_option(url, "bogus=1")) {
            Ok(c) => return Err(format!("{form}: an unknown option was accepted: {c:?}")),
            Err(e) => {
                shown.both(&format!("ConnectError (an unknown option, {form})"), &e);
            }
        }
    }
    // The secret in a password file.
    let dir = std::env::temp_dir().join(fresh("leasehold-secrets-"));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let path = dir.join("password");
    std::fs::write(&path, format!("{}\n", secret.as_str())).map_err(|e| e.to_string())?;
    let with_file = with_option(&target.base, &format!("password_file={}", path.display()));
    let config = StoreConfig::from_url(&with_file);
    let outcome = async {
        match config {
            Ok(config) if file => use_store("password_file", config, &mut shown).await?,
            Ok(config) => drop(refused("password_file", config, &mut shown).await?),
            Err(e) => {
                ensure!(!file, "password_file: refused: {e}");
                shown.both("ConnectError (from_url, password_file)", &e);
            }
        }
        if file {
            let missing = with_option(
                &target.base,
                &format!("password_file={}", dir.join("missing").display()),
            );
            let config = StoreConfig::from_url(&missing).map_err(|e| e.to_string())?;
            let e = refused("a missing password file", config, &mut shown).await?;
            ensure!(
                e.to_string().contains("the password file") && e.to_string().contains("missing"),
                "a missing password file answered: {e}"
            );
        }
        Ok::<_, String>(())
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    outcome?;
    // The secret from a callback.
    let base = StoreConfig::from_url(&target.base).map_err(|e| e.to_string())?;
    let answer = secret.as_str().to_owned();
    let config = base.clone().credentials(move || {
        let password = answer.clone();
        async move { Ok::<_, std::io::Error>(Credentials::password_only(password)) }
    });
    if callback {
        use_store("callback", config, &mut shown).await?;
        let failing = base.credentials(|| async {
            Err::<Credentials, _>(std::io::Error::other("the token service is down"))
        });
        let e = refused("a failing callback", failing, &mut shown).await?;
        ensure!(
            e.is_retryable()
                && e.to_string()
                    .contains("the credentials callback failed: the token service is down"),
            "a failing callback answered: {e}"
        );
    } else {
        refused("callback", config, &mut shown).await?;
    }
    for (what, url) in [
        ("a wrong password", &target.wrong),
        ("an unreachable host", &target.unreachable),
    ] {
        let Some(url) = url else { continue };
        match StoreConfig::from_url(url) {
            Ok(config) => drop(refused(what, config, &mut shown).await?),
            Err(e) => {
                shown.both(&format!("ConnectError (from_url, {what})"), &e);
            }
        }
    }
    let checked = shown.count();
    ensure!(checked >= 12, "only {checked} texts checked");
    shown.traces().metrics().verdict()
}

/// A private server of `kind` with a user whose password is `secret`.
async fn server_target(
    kind: ServerKind,
    family: Family,
    secret: &Secret,
) -> Result<Target, String> {
    let server = provide(kind).map_err(|e| e.to_string())?;
    let port = server.addr().ok_or("no address")?.port();
    let accounts = Accounts::new(server, family).await?;
    let (user, other) = (fresh("good"), fresh("other"));
    accounts.create_user(&user, secret.as_str()).await?;
    accounts.create_user(&other, &fresh("Other-pw-")).await?;
    let base = accounts.url_of(&user);
    let user_info = in_user_info(&base, &user, secret.as_str());
    let takes_query = matches!(family, Family::Postgres);
    Ok(Target {
        query: in_query(&base, secret.as_str()),
        wrong: Some(in_user_info(
            &accounts.url_of(&other),
            &other,
            secret.as_str(),
        )),
        unreachable: Some(user_info.replacen(&format!(":{port}"), ":1", 1)),
        user_info,
        base,
        takes: [true, takes_query, true, true],
        _keep: vec![Box::new(accounts)],
    })
}

/// A private etcd with auth on: `root`'s password is `secret`.
async fn etcd_target(kind: ServerKind, secret: &Secret) -> Result<Target, String> {
    use leasehold::etcd::etcd_client::Client;
    let cluster = leasehold_conformance::etcd_cluster::EtcdCluster::start_kind(kind, 1)?;
    let endpoint = cluster.endpoints()[0].clone();
    let host = endpoint.trim_start_matches("http://").to_owned();
    let start = std::time::Instant::now();
    let other = fresh("other");
    loop {
        let attempt = async {
            let mut admin = Client::connect([endpoint.clone()], None)
                .await
                .map_err(|e| e.to_string())?;
            admin
                .user_add("root", secret.as_str(), None)
                .await
                .map_err(|e| e.to_string())?;
            admin
                .user_grant_role("root", "root")
                .await
                .map_err(|e| e.to_string())?;
            admin
                .user_add(other.as_str(), "Other-pw", None)
                .await
                .map_err(|e| e.to_string())?;
            admin.auth_enable().await.map_err(|e| e.to_string())?;
            Ok::<_, String>(())
        };
        match attempt.await {
            Ok(()) => break,
            Err(e) if start.elapsed() > Duration::from_secs(30) => {
                return Err(format!("etcd auth set-up: {e}"));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let base = format!("etcd://root@{host}");
    Ok(Target {
        user_info: in_user_info(&base, "root", secret.as_str()),
        query: in_query(&base, secret.as_str()),
        wrong: Some(format!("etcd://{other}:{}@{host}", secret.as_str())),
        unreachable: Some(format!("etcd://root:{}@127.0.0.1:1", secret.as_str())),
        base,
        // etcd reads a password file at connect; a callback is refused.
        takes: [true, false, true, false],
        _keep: vec![Box::new(cluster)],
    })
}

/// An SQLite file: no password at all; every form is refused or ignored.
fn sqlite_target(secret: &Secret) -> Result<Target, String> {
    let dir = std::env::temp_dir().join(fresh("leasehold-secrets-sqlite-"));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let base = format!("sqlite://{}/ids.sqlite", dir.display());
    Ok(Target {
        user_info: in_user_info(&base, "app", secret.as_str()),
        query: in_query(&base, secret.as_str()),
        wrong: None,
        unreachable: None,
        base,
        takes: [false, false, false, false],
        _keep: Vec::new(),
    })
}

/// Kubernetes: its URLs carry no credentials (they come from the
/// kubeconfig); every form is refused, and nothing listens on port 1.
fn k8s_target(secret: &Secret) -> Target {
    let base = "k8s://127.0.0.1:1/ids".to_owned();
    Target {
        user_info: in_user_info(&base, "app", secret.as_str()),
        query: in_query(&base, secret.as_str()),
        wrong: None,
        unreachable: Some(format!("k8s://127.0.0.1:1/ids?token={}", secret.as_str())),
        base,
        takes: [false, false, false, false],
        _keep: Vec::new(),
    }
}

fn main() -> std::process::ExitCode {
    let args = Arguments::from_args();
    // Installed before anything runs: every span, event and metric of the
    // process is checked.
    let _ = secrets::capture();
    let _ = secrets::capture_metrics();
    type Make = fn(
        Secret,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Target, String>> + Send>,
    >;
    let cases: Vec<(&str, Option<ServerKind>, Make)> = vec![
        ("sqlite", None, |s| {
            Box::pin(async move { sqlite_target(&s) })
        }),
        ("postgres15", Some(ServerKind::Postgres15), |s| {
            Box::pin(
                async move { server_target(ServerKind::Postgres15, Family::Postgres, &s).await },
            )
        }),
        ("mariadb", Some(ServerKind::MariaDb), |s| {
            Box::pin(async move { server_target(ServerKind::MariaDb, Family::MariaDb, &s).await })
        }),
        ("valkey8", Some(ServerKind::Valkey8), |s| {
            Box::pin(async move { server_target(ServerKind::Valkey8, Family::Valkey, &s).await })
        }),
        ("redis7", Some(ServerKind::Redis7), |s| {
            Box::pin(async move { server_target(ServerKind::Redis7, Family::Valkey, &s).await })
        }),
        ("etcd35", Some(ServerKind::Etcd35), |s| {
            Box::pin(async move { etcd_target(ServerKind::Etcd35, &s).await })
        }),
        ("k8s", None, |s| Box::pin(async move { Ok(k8s_target(&s)) })),
    ];
    let trials = cases
        .into_iter()
        .map(|(label, kind, make)| {
            let missing = kind
                .is_some_and(|k| find_binary(k).is_none() && std::env::var(k.env_var()).is_err());
            let ignore = missing && !leasehold_conformance::in_ci();
            Trial::test(format!("{label}::no_secret_in_any_output"), move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .map_err(|e| Failed::from(e.to_string()))?;
                rt.block_on(async {
                    let secret = Secret::new();
                    let target = make(secret.clone()).await?;
                    never_shown(target, secret).await
                })
                .map_err(|e| Failed::from(format!("{label}: {e}")))
            })
            .with_ignored_flag(ignore)
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}
