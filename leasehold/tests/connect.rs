//! URLs reach the backend that owns their scheme, refusals say what to do,
//! and a connected store is both a lease strategy and an operator handle.

use std::time::Duration;

use leasehold::operate::doctor;
use leasehold::{
    ConnectError, DurabilityPolicy, Floor, LeaseConfig, LeaseManager, PoolName, PoolSpec, STORES,
    StoreConfig, Strategy, Verdict, schemes_text,
};

/// Which backend's configuration `url` reads into, by its type.
fn kind(url: &str) -> &'static str {
    let config = StoreConfig::from_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    if config
        .backend::<leasehold::drivers::MemoryConfig>()
        .is_some()
    {
        return "memory";
    }
    #[cfg(feature = "_sql")]
    if config.backend::<leasehold::sql::SqlConfig>().is_some() {
        return "sql";
    }
    #[cfg(feature = "valkey")]
    if config
        .backend::<leasehold::valkey::ValkeyConfig>()
        .is_some()
    {
        return "valkey";
    }
    #[cfg(feature = "etcd")]
    if config.backend::<leasehold::etcd::EtcdConfig>().is_some() {
        return "etcd";
    }
    #[cfg(feature = "k8s")]
    if config.backend::<leasehold::k8s::KubeConfig>().is_some() {
        return "kube";
    }
    "other"
}

fn refusal(url: &str) -> ConnectError {
    match StoreConfig::from_url(url) {
        Ok(c) => panic!("{url} was accepted: {c:?}"),
        Err(e) => e,
    }
}

/// The table of schemes is the backends' own: a scheme a backend reads is
/// listed under its feature, and nothing else is.
#[test]
fn the_scheme_table_is_each_backends_own() {
    let listed = |feature: &str| -> Vec<&str> {
        STORES
            .iter()
            .filter(|r| r.feature == feature)
            .flat_map(|r| r.schemes.iter().copied())
            .collect()
    };
    #[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    {
        let mut sql = [listed("postgres"), listed("mysql"), listed("sqlite")].concat();
        let mut theirs = leasehold::sql::SqlConfig::SCHEMES.to_vec();
        sql.sort_unstable();
        theirs.sort_unstable();
        assert_eq!(sql, theirs);
    }
    #[cfg(feature = "valkey")]
    assert_eq!(listed("valkey"), leasehold::valkey::ValkeyConfig::SCHEMES);
    #[cfg(feature = "etcd")]
    assert_eq!(listed("etcd"), leasehold::etcd::EtcdConfig::SCHEMES);
    #[cfg(feature = "k8s")]
    assert_eq!(listed("k8s"), leasehold::k8s::KubeConfig::SCHEMES);
    let _ = listed;
}

#[test]
fn each_scheme_reaches_its_backend() {
    let mut cases = vec![("memory://x", "memory"), ("MEMORY://", "memory")];
    if cfg!(feature = "sqlite") {
        cases.extend([("sqlite://ids.sqlite", "sql"), ("sqlite:ids.sqlite", "sql")]);
    }
    if cfg!(feature = "postgres") {
        cases.extend([("postgres://u@h/db", "sql"), ("POSTGRESQL://u@h/db", "sql")]);
    }
    if cfg!(feature = "mysql") {
        cases.extend([("mysql://u@h/db", "sql"), ("mariadb://u@h/db", "sql")]);
    }
    if cfg!(feature = "valkey") {
        cases.extend([
            ("redis://h:6379", "valkey"),
            ("valkey://h", "valkey"),
            (
                "redis-sentinel://s1,s2:26380?sentinelServiceName=ids",
                "valkey",
            ),
            ("valkey-sentinel://s1?sentinelServiceName=ids", "valkey"),
            ("rediss://h:6380?ca=/etc/ca.crt", "valkey"),
            ("valkeys://h?ca=/ca&cert=/c&key=/k", "valkey"),
            (
                "rediss-sentinel://s1?sentinelServiceName=ids&ca=/ca",
                "valkey",
            ),
            ("valkeys-cluster://n1:7000,n2:7001", "valkey"),
        ]);
    }
    if cfg!(feature = "etcd") {
        cases.push(("etcd://a:2379,b:2379", "etcd"));
    }
    if cfg!(feature = "k8s") {
        cases.extend([("k8s://h:8001/ids", "kube"), ("kubernetes://", "kube")]);
    }
    for (url, want) in cases {
        assert_eq!(kind(url), want, "{url}");
    }
}

#[test]
fn refusals_name_the_fix() {
    let e = refusal("postgress://u:secret@h/db");
    assert_eq!(
        e.to_string(),
        format!(
            "bad store URL postgress://u:***@h/db: unknown scheme \"postgress\"; use one of {}",
            schemes_text()
        )
    );
    assert!(!e.is_retryable());
    #[cfg(all(feature = "postgres", feature = "mysql", feature = "valkey"))]
    assert!(refusal("localhost:5432").to_string().contains(
        "it has no scheme; use one of postgres, postgresql, mysql, mariadb, sqlite (SQL); redis,"
    ));
    // An HTTP(S) address: how to write it for each store reached so.
    #[cfg(all(feature = "etcd", feature = "k8s"))]
    {
        let text = refusal("https://h:2379").to_string();
        assert!(
            text.contains(
                "say which store the address is: etcds://HOST:2379?ca=CA.crt for etcd over TLS, \
                 or k8s+https://HOST:6443"
            ),
            "{text}"
        );
        let text = refusal("http://h:2379").to_string();
        assert!(
            text.contains("etcd://HOST:2379 for etcd, or k8s://HOST:PORT"),
            "{text}"
        );
    }
}

/// The schemes an unknown scheme's refusal lists are exactly those this
/// build accepts: a store whose feature is off is not offered.
#[test]
fn the_unknown_scheme_list_is_what_this_build_accepts() {
    let text = schemes_text();
    let words: Vec<&str> = text
        .split([',', ' ', ';', '(', ')'])
        .filter(|w| !w.is_empty())
        .collect();
    for row in STORES {
        for scheme in row.schemes {
            assert_eq!(
                words.contains(scheme),
                row.compiled(),
                "{scheme} (feature {:?}) in {text}",
                row.feature
            );
        }
    }
    let e = refusal("ftp://h/x");
    assert!(e.to_string().ends_with(&text), "{e}");
    // The backends' own refusals come through, naming the accepted form.
    #[cfg(feature = "valkey")]
    assert!(
        refusal("redis://h:99999")
            .to_string()
            .contains("bad port \"99999\"")
    );
    // TLS files on a plain-text URL would be ignored: refused, naming the
    // scheme that reads them.
    #[cfg(feature = "valkey")]
    assert!(
        refusal("redis://h?ca=/etc/ca.crt")
            .to_string()
            .contains("ca= ask for TLS, but redis:// connects in plain text; write rediss://")
    );
    #[cfg(feature = "etcd")]
    assert!(
        refusal("etcd://h?tabel=x")
            .to_string()
            .contains("unknown query option \"tabel\"")
    );
}

/// A URL that asks for TLS is checked before anything is sent: the modes
/// that do not verify the server are refused naming the one that does, and
/// a file it names that is not there is named with its option.
#[cfg(all(feature = "postgres", feature = "mysql"))]
#[tokio::test]
async fn a_tls_url_that_cannot_be_verified_is_refused_naming_the_fix() {
    for (url, fix) in [
        (
            "postgres://u@h/db?sslmode=require",
            "use sslmode=verify-full",
        ),
        (
            "mysql://u@h/db?ssl-mode=REQUIRED",
            "use ssl-mode=VERIFY_IDENTITY",
        ),
    ] {
        let e = refusal(url);
        assert!(matches!(e, ConnectError::BadUrl { .. }), "{url}: {e:?}");
        assert!(e.to_string().contains(fix), "{url}: {e}");
    }
    let url = "postgres://u@127.0.0.1:1/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.crt";
    let e = StoreConfig::from_url(url)
        .unwrap()
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(e, ConnectError::BadUrl { .. }) && !e.is_retryable(),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("sslrootcert=/nonexistent/ca.crt: no such file"),
        "{e}"
    );
}

/// Every store whose feature is off is refused with the feature to turn on.
#[test]
fn a_store_left_out_of_the_build_names_its_feature() {
    for row in STORES.iter().filter(|r| !r.compiled()) {
        let url = format!("{}://h/x", row.schemes[0]);
        let text = refusal(&url).to_string();
        assert!(
            text.contains(&format!("enable the `{}` feature", row.feature)),
            "{text}"
        );
        assert!(!text.contains(" a etcd"), "{text}");
    }
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn an_unreachable_store_is_retryable_and_names_the_url() {
    let e = StoreConfig::from_url("postgres://u:secret@127.0.0.1:1/db")
        .unwrap()
        .op_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("postgres://u:***@127.0.0.1:1/db"), "{text}");
    assert!(!text.contains("secret"), "{text}");
}

/// One URL gives a lease strategy and an operator handle on the same store:
/// what the manager holds, the operator sees and can revoke.
#[tokio::test]
async fn a_memory_store_holds_leases_and_answers_its_operator() {
    let store = leasehold::connect("memory://shared").await.unwrap();
    let again = leasehold::connect("memory://shared").await.unwrap();
    let other = leasehold::connect("memory://other").await.unwrap();
    let config = LeaseConfig::builder("ids")
        .pool_size(4)
        .ttl(Duration::from_secs(5))
        .build()
        .unwrap();
    let pool = config.pool().clone();
    let manager = LeaseManager::start(store.clone(), config).await.unwrap();
    let slot = manager.gate().view().slot;
    let seen = again.operator().slots(&pool).await.unwrap();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].slot, slot);
    assert!(seen[0].holder.is_some());
    assert!(other.operator().slots(&pool).await.unwrap().is_empty());
    assert_eq!(again.operator().pools().await.unwrap(), ["ids"]);
    assert!(again.operator().revoke(&pool, slot).await.unwrap());
    assert!(!again.operator().revoke(&pool, slot).await.unwrap());
    for check in doctor(store.operator()).await {
        assert_ne!(check.verdict, Verdict::Fail, "{check}");
    }
    drop(manager);
}

/// The store is a strategy: a direct claim through it answers like the
/// backend's own.
#[tokio::test]
async fn a_store_claims_through_its_backend() {
    let store = leasehold::connect("memory://direct").await.unwrap();
    let pool = PoolSpec::new(PoolName::new("p").unwrap(), 1, Duration::from_secs(5)).unwrap();
    let grant = store.acquire(&pool, Floor(1)).await.unwrap();
    assert_eq!(grant.slot, 0);
    assert!(store.acquire(&pool, Floor(1)).await.is_err());
    assert!(store.identity().starts_with("memory:"));
}

/// A TLS-only Valkey/Redis (Debian's Redis 7, client certificates
/// required): its `rediss://` URL connects verified and says so; a
/// plain-text URL is refused, final, with the fix (`rediss://`); so is a
/// client certificate the server does not trust.
#[cfg(feature = "valkey")]
#[tokio::test]
async fn a_tls_only_valkey_is_reached_over_tls_and_refuses_plain_text() {
    use leasehold_conformance::servers::{ServerKind, provide_tls};
    let server = match provide_tls(ServerKind::Redis7) {
        Ok(s) => s,
        Err(missing) if !leasehold_conformance::in_ci() => {
            eprintln!("skipped, no TLS-only Redis here: {missing}");
            return;
        }
        Err(missing) => panic!("{missing}"),
    };
    let config = |url: &str| {
        StoreConfig::from_url(url)
            .unwrap_or_else(|e| panic!("{url}: {e}"))
            .op_timeout(Duration::from_secs(10))
            .map(|c: leasehold::valkey::ValkeyConfig| c.durability(DurabilityPolicy::Throwaway))
    };
    let store = config(&server.url).connect().await.unwrap();
    let described = store.operator().describe();
    assert!(
        described.contains(" over TLS 1.3, server verified"),
        "{described}"
    );
    assert!(
        store
            .strategy::<leasehold::valkey::ValkeyStrategy>()
            .and_then(|v| v.tls())
            .is_some()
    );
    let port = server.addr().expect("address").port();
    let plain = format!("redis://127.0.0.1:{port}");
    let e = config(&plain).connect().await.unwrap_err();
    assert!(matches!(e, ConnectError::Refused { .. }), "{e:?}");
    assert!(!e.is_retryable());
    let text = e.to_string();
    assert!(
        text.starts_with(&format!("cannot connect to {plain} in plain text"))
            && text.contains("fix: connect with TLS, rediss://"),
        "{text}"
    );
    let pki = leasehold_conformance::tls::Pki::shared().unwrap();
    let stranger = format!(
        "rediss://127.0.0.1:{port}?ca={}&cert={}&key={}",
        pki.ca.display(),
        pki.stranger.cert.display(),
        pki.stranger.key.display()
    );
    let e = config(&stranger).connect().await.unwrap_err();
    assert!(matches!(e, ConnectError::Refused { .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains("the server refused the client certificate"),
        "{e}"
    );
}

/// `StoreConfig`'s `Debug` and the refusals of `from_url` show no password,
/// whether in the user info or in the query string, for every scheme.
#[test]
fn a_store_config_never_shows_its_password() {
    const PW: &str = "Pl4nted-pw";
    let mut urls = vec![format!("memory://x?password={PW}")];
    for base in [
        #[cfg(feature = "postgres")]
        "postgres://app@db/app",
        #[cfg(feature = "mysql")]
        "mysql://app@db/app",
        #[cfg(feature = "valkey")]
        "redis://app@h:6379",
        #[cfg(feature = "valkey")]
        "valkey://app@h:6379",
        #[cfg(feature = "etcd")]
        "etcd://app@h:2379",
        #[cfg(feature = "k8s")]
        "k8s://app@h:8001",
        #[cfg(feature = "sqlite")]
        "sqlite://ids.sqlite",
    ] {
        urls.push(base.replacen("app@", &format!("app:{PW}@"), 1));
        urls.push(format!("{base}?password={PW}"));
        urls.push(format!("{base}?sslpassword={PW}&token={PW}"));
    }
    for url in urls {
        let shown = match StoreConfig::from_url(&url) {
            Ok(c) => format!("{c:?} {}", c.shown_url()),
            Err(e) => format!("{e:?} {e} {}", e.url()),
        };
        assert!(!shown.contains(PW), "{url}: {shown}");
    }
}

/// A credential source goes to the stores that take one, and the others
/// refuse it at connect, saying why.
#[tokio::test]
async fn a_credential_source_is_refused_where_no_password_is_taken() {
    let e = StoreConfig::from_url("memory://creds")
        .unwrap()
        .password_file("/run/secrets/pw")
        .connect()
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("the password file /run/secrets/pw cannot be used with an in-process store"),
        "{e}"
    );
    #[cfg(feature = "sqlite")]
    {
        let e = StoreConfig::from_url("sqlite://creds.sqlite")
            .unwrap()
            .credentials(|| async {
                Ok::<_, std::io::Error>(leasehold::credentials::Credentials::password_only("x"))
            })
            .connect()
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("the credentials callback cannot be used with SQLite"),
            "{e}"
        );
    }
    #[cfg(feature = "postgres")]
    {
        let config =
            StoreConfig::from_url("postgres://app@db/app?password_file=/run/s/pw").unwrap();
        assert!(format!("{config:?}").contains("PasswordFile(\"/run/s/pw\")"));
        let e = StoreConfig::from_url("postgres://app:pw@db/app")
            .unwrap()
            .password_file("/run/s/pw")
            .connect()
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("the URL carries a password, and password_file gives one too"),
            "{e}"
        );
    }
}

/// The `etcd` feature brings TLS: `etcds://` reads its certificate files
/// (a missing one is named with its option), and is not refused for want
/// of a feature.
#[cfg(feature = "etcd")]
#[test]
fn etcds_urls_are_read_with_tls_compiled_in() {
    let pki = leasehold_conformance::tls::Pki::shared().expect("test certificates");
    let url = format!(
        "etcds://h:2379?ca={}&cert={}&key={}",
        pki.ca.display(),
        pki.client.cert.display(),
        pki.client.key.display()
    );
    assert_eq!(kind(&url), "etcd");
    let text = refusal("etcds://h?ca=/nonexistent/ca.crt").to_string();
    assert!(
        text.contains("cannot read ca=/nonexistent/ca.crt"),
        "{text}"
    );
}

/// The URL option that refuses a store able to split brain reaches the SQL
/// backend through the one URL table; a SQLite file cannot split brain, so
/// it is accepted, and the doctor's replication line passes.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn refuse_split_brain_is_a_url_option_and_a_file_cannot_split_brain() {
    let dir = std::env::temp_dir().join(format!("leasehold-split-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!(
        "sqlite://{}?refuse_split_brain=true",
        dir.join("ids.sqlite").display()
    );
    let store = leasehold::connect(&url).await.expect("a file");
    assert!(store.operator().replication().split_brain.is_none());
    let line = doctor(store.operator())
        .await
        .into_iter()
        .find(|c| c.name == "replication")
        .expect("a replication line");
    assert_eq!(line.verdict, Verdict::Ok, "{line}");
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
    let e = refusal("sqlite://ids.sqlite?refuse_split_brain=maybe");
    assert!(e.to_string().contains("refuse_split_brain=true or"), "{e}");
}
