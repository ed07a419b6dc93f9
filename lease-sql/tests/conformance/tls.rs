//! TLS and mutual TLS, against the TLS-only servers of the `-tls` rows
//! (PostgreSQL: `hostssl` lines only, `cert` authentication; MariaDB:
//! `require_secure_transport`, a user `REQUIRE SUBJECT`): the connection is
//! verified TLS, and each way it can go wrong is refused at connect with an
//! error that names the cause and the fix. A verified URL to a plain server
//! does not fall back to plain text.
//!
//! Each refusal is printed into the test log: it is what a user reads.

use std::sync::Arc;

use leasehold_conformance::ensure;
use leasehold_conformance::servers::{ServerKind, provide_tls_presenting};
use leasehold_conformance::tls::{Pair, Pki};
use leasehold_core::DurabilityPolicy;
use leasehold_sql::{Engine, SqlConfig, SqlError, SqlStrategy};

use super::Sql;

/// The TLS options of an engine, as its users write them.
struct Options {
    mode: &'static str,
    verified: &'static str,
    ca: &'static str,
    cert: &'static str,
    key: &'static str,
    /// The modes that encrypt without checking the server's name.
    unverified: [&'static str; 2],
    off: &'static str,
}

fn options(url: &str) -> Options {
    if Engine::from_url(url) == Engine::MySql {
        Options {
            mode: "ssl-mode",
            verified: "VERIFY_IDENTITY",
            ca: "ssl-ca",
            cert: "ssl-cert",
            key: "ssl-key",
            unverified: ["REQUIRED", "VERIFY_CA"],
            off: "DISABLED",
        }
    } else {
        Options {
            mode: "sslmode",
            verified: "verify-full",
            ca: "sslrootcert",
            cert: "sslcert",
            key: "sslkey",
            unverified: ["require", "verify-ca"],
            off: "disable",
        }
    }
}

/// `url` with the query option `key` set to `value`, or taken out.
fn with(url: &str, key: &str, value: Option<&str>) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut pairs: Vec<String> = query
        .split('&')
        .filter(|p| !p.is_empty() && p.split('=').next() != Some(key))
        .map(str::to_owned)
        .collect();
    if let Some(value) = value {
        pairs.push(format!("{key}={value}"));
    }
    if pairs.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", pairs.join("&"))
    }
}

fn path(p: &std::path::Path) -> String {
    p.display().to_string()
}

fn pki() -> Result<&'static Pki, String> {
    Pki::shared()
}

/// The error connecting to `url` answers (`case` names it for the
/// messages); it is printed, and must be final.
async fn refusal(case: &str, url: &str) -> Result<SqlError, String> {
    let config = SqlConfig::new(url).durability(DurabilityPolicy::Throwaway);
    match SqlStrategy::connect(config).await {
        Ok(s) => {
            s.close().await;
            Err(format!("{case}: connected"))
        }
        Err(e) => {
            eprintln!("{case}:\n  {e}");
            ensure!(!e.is_retryable(), "{case}: a retryable error: {e:?}");
            Ok(e)
        }
    }
}

/// `e` is a `SqlError::Tls` whose message holds each of `needles`.
fn tls_error(case: &str, e: &SqlError, needles: &[&str]) -> Result<(), String> {
    ensure!(
        matches!(e, SqlError::Tls { .. }),
        "{case}: not a TLS error: {e:?}"
    );
    contains(case, e, needles)
}

fn contains(case: &str, e: &SqlError, needles: &[&str]) -> Result<(), String> {
    let text = e.to_string();
    for needle in needles {
        ensure!(
            text.contains(needle),
            "{case}: {needle:?} missing from: {text}"
        );
    }
    Ok(())
}

/// The row's URL reaches the server over TLS, verified, with the client
/// certificate: the server says so of the session.
pub(super) async fn the_connection_is_verified_tls_with_a_client_certificate(
    b: Arc<Sql>,
) -> Result<(), String> {
    let o = options(&b.url);
    ensure!(
        b.url.contains(&format!("{}={}", o.mode, o.verified)),
        "the row's URL does not ask for verified TLS: {}",
        b.url
    );
    let s = b.strategy().await?;
    let e = |e: sqlx::Error| e.to_string();
    let version: String = match s.engine() {
        Engine::Postgres => sqlx::query_scalar(
            "SELECT version FROM pg_stat_ssl WHERE pid = pg_backend_pid() AND ssl \
                 AND client_dn IS NOT NULL",
        )
        .fetch_one(s.postgres().ok_or("no pool")?)
        .await
        .map_err(e)?,
        _ => {
            let row: (String, String) = sqlx::query_as("SHOW STATUS LIKE 'Ssl_version'")
                .fetch_one(s.mysql().ok_or("no pool")?)
                .await
                .map_err(e)?;
            row.1
        }
    };
    s.close().await;
    ensure!(
        version.starts_with("TLSv1."),
        "the session's TLS: {version:?}"
    );
    Ok(())
}

/// A connection without TLS (the user wrote `sslmode=disable`): the server
/// takes only TLS, and the error says to connect with the verified mode.
pub(super) async fn a_connection_without_tls_is_refused_and_the_fix_is_named(
    b: Arc<Sql>,
) -> Result<(), String> {
    let o = options(&b.url);
    let mut url = with(&b.url, o.mode, Some(o.off));
    for option in [o.ca, o.cert, o.key] {
        url = with(&url, option, None);
    }
    let e = refusal("a connection without TLS", &url).await?;
    // The server answers as it does to a login it lets in by no rule
    // (PostgreSQL: no pg_hba.conf entry; MariaDB: 1045), so the error is an
    // authentication failure whose fix names TLS first.
    ensure!(
        matches!(
            e,
            SqlError::Refused { .. } | SqlError::Authentication { .. }
        ),
        "{e:?}"
    );
    contains(
        "a connection without TLS",
        &e,
        &[
            "does not ask for TLS",
            "takes only TLS",
            &format!("{}={}", o.mode, o.verified),
        ],
    )
}

/// The client trusts another CA than the one that signed the server's
/// certificate.
pub(super) async fn a_server_certificate_from_an_untrusted_ca_is_refused(
    b: Arc<Sql>,
) -> Result<(), String> {
    let o = options(&b.url);
    let url = with(&b.url, o.ca, Some(&path(&pki()?.other_ca)));
    let e = refusal("a wrong CA", &url).await?;
    tls_error(
        "a wrong CA",
        &e,
        &[
            "is not signed by a CA this client trusts",
            &path(&pki()?.other_ca),
            &format!("set {} to the file of the CA", o.ca),
        ],
    )
}

/// A server started to present `pair`: its URL's error.
async fn presenting(case: &str, b: &Sql, pair: fn(&Pki) -> &Pair) -> Result<SqlError, String> {
    let kind = match Engine::from_url(&b.url) {
        Engine::MySql => ServerKind::MariaDb,
        _ => ServerKind::Postgres15,
    };
    let server = tokio::task::spawn_blocking(move || provide_tls_presenting(kind, pair))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let e = refusal(case, &server.url).await;
    tokio::task::spawn_blocking(move || drop(server))
        .await
        .map_err(|e| e.to_string())?;
    e
}

/// The server presents a certificate that expired (signed by the trusted
/// CA, for the right host).
pub(super) async fn an_expired_server_certificate_is_refused(b: Arc<Sql>) -> Result<(), String> {
    let e = presenting("an expired certificate", &b, |p| &p.expired).await?;
    tls_error(
        "an expired certificate",
        &e,
        &[
            "the server's certificate has expired",
            "renew the server's certificate",
        ],
    )
}

/// The server presents a certificate for another host name (signed by
/// the trusted CA).
pub(super) async fn a_server_certificate_for_another_host_is_refused(
    b: Arc<Sql>,
) -> Result<(), String> {
    let e = presenting("a certificate for another host", &b, |p| &p.wrong_host).await?;
    tls_error(
        "a certificate for another host",
        &e,
        &[
            "the server's certificate is not for 127.0.0.1",
            "wrong.invalid",
            "connect by a name the certificate lists",
        ],
    )
}

/// The client shows a certificate of the right name signed by a CA the
/// server does not trust.
pub(super) async fn a_client_certificate_the_server_does_not_trust_is_refused(
    b: Arc<Sql>,
) -> Result<(), String> {
    let o = options(&b.url);
    let stranger = &pki()?.stranger;
    let url = with(&b.url, o.cert, Some(&path(&stranger.cert)));
    let url = with(&url, o.key, Some(&path(&stranger.key)));
    let e = refusal("a client certificate the server does not trust", &url).await?;
    tls_error(
        "a client certificate the server does not trust",
        &e,
        &[
            "the server refused this client's certificate",
            &path(&stranger.cert),
            "signed by a CA of its",
        ],
    )
}

/// The client shows no certificate; the server wants one.
pub(super) async fn a_missing_client_certificate_is_refused_and_named(
    b: Arc<Sql>,
) -> Result<(), String> {
    let o = options(&b.url);
    let url = with(&with(&b.url, o.cert, None), o.key, None);
    let e = refusal("no client certificate", &url).await?;
    ensure!(
        matches!(
            e,
            SqlError::Refused { .. } | SqlError::Tls { .. } | SqlError::Authentication { .. }
        ),
        "{e:?}"
    );
    contains(
        "no client certificate",
        &e,
        &[
            "client certificate",
            &format!("{}=client.crt&{}=client.key", o.cert, o.key),
        ],
    )
}

/// A CA, certificate or key file the URL names that is not there is a
/// configuration error naming the option and the path; so is a file that
/// holds no PEM of its kind, and a certificate without its key.
pub(super) async fn a_missing_or_wrong_file_is_a_configuration_error_naming_it(
    b: Arc<Sql>,
) -> Result<(), String> {
    let o = options(&b.url);
    let nowhere = "/nonexistent/leasehold-tls";
    for option in [o.ca, o.cert, o.key] {
        let file = format!("{nowhere}/{option}.pem");
        let case = format!("{option} names a missing file");
        let e = refusal(&case, &with(&b.url, option, Some(&file))).await?;
        ensure!(matches!(e, SqlError::Config(_)), "{case}: {e:?}");
        contains(&case, &e, &[&format!("{option}={file}"), "no such file"])?;
    }
    // A certificate where the key should be, and the other way round.
    let pki = pki()?;
    let case = format!("{} names a certificate", o.key);
    let e = refusal(&case, &with(&b.url, o.key, Some(&path(&pki.client.cert)))).await?;
    ensure!(matches!(e, SqlError::Config(_)), "{case}: {e:?}");
    contains(&case, &e, &["holds no PEM private key"])?;
    let case = format!("{} names a key", o.ca);
    let e = refusal(&case, &with(&b.url, o.ca, Some(&path(&pki.client.key)))).await?;
    ensure!(matches!(e, SqlError::Config(_)), "{case}: {e:?}");
    contains(&case, &e, &["holds no PEM certificate"])?;
    let case = format!("{} without {}", o.cert, o.key);
    let e = refusal(&case, &with(&b.url, o.key, None)).await?;
    ensure!(matches!(e, SqlError::Config(_)), "{case}: {e:?}");
    contains(&case, &e, &[&format!("is given without {}", o.key)])
}

/// The modes that encrypt without checking who answers, or without
/// checking the host name, are refused before anything is sent, and so is
/// a CA given with the default mode (which would not use it); each error
/// names the verified mode.
pub(super) async fn unverified_tls_modes_are_refused_naming_the_verified_one(
    b: Arc<Sql>,
) -> Result<(), String> {
    let o = options(&b.url);
    let verified = format!("use {}={}", o.mode, o.verified);
    for mode in o.unverified {
        let case = format!("{}={mode}", o.mode);
        let e = refusal(&case, &with(&b.url, o.mode, Some(mode))).await?;
        ensure!(matches!(e, SqlError::Config(_)), "{case}: {e:?}");
        contains(&case, &e, &[&case, &verified])?;
        let from_url = SqlConfig::from_url(&with(&b.url, o.mode, Some(mode)));
        ensure!(
            matches!(from_url, Err(SqlError::Config(_))),
            "SqlConfig::from_url took {case}"
        );
    }
    let case = format!("{} without {}", o.ca, o.mode);
    let e = refusal(&case, &with(&b.url, o.mode, None)).await?;
    ensure!(matches!(e, SqlError::Config(_)), "{case}: {e:?}");
    contains(&case, &e, &["given, so the URL asks for TLS", &verified])
}

/// A URL asking for verified TLS, sent to a server without TLS that would
/// take the same login in plain text: refused, not sent in plain text.
pub(super) async fn a_verified_tls_url_to_a_plain_server_does_not_fall_back(
    b: Arc<Sql>,
) -> Result<(), String> {
    let o = options(&b.url);
    // The plain URL connects: only TLS can make the difference.
    b.strategy().await?.close().await;
    let url = with(&b.url, o.mode, Some(o.verified));
    let url = with(&url, o.ca, Some(&path(&pki()?.ca)));
    let e = refusal("a verified TLS URL to a plain server", &url).await?;
    tls_error(
        "a verified TLS URL to a plain server",
        &e,
        &[
            "never falls back to plain text",
            "turn TLS on in the server",
        ],
    )
}
