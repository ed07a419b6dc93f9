//! What the client shows the API server and trusts, for messages; and what
//! a failed TLS handshake means, found by type in an error's source chain
//! (kube says only "client error (Connect)").

use std::path::Path;

/// Why a connection failed, and what to do, when TLS (or its lack) did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TlsFailure {
    /// What happened.
    pub(crate) what: String,
    /// What to do.
    pub(crate) fix: String,
}

/// How a client reaches the API server, in words: what it verifies the
/// server against and which credentials it sends. Never a secret: paths and
/// field names only.
#[derive(Clone, Debug, Default)]
pub(crate) struct Shown {
    /// What the server's certificate must chain to.
    pub(crate) trust: String,
    /// The client certificate it shows, if any (a path or the field name).
    pub(crate) certificate: Option<String>,
    /// The credentials it sends, in words ("the client certificate
    /// /path/client.crt", "a bearer token from tokenFile /path").
    pub(crate) credentials: String,
}

impl Shown {
    /// From a client configuration, and the kubeconfig file it was read
    /// from when there is one (for the certificate authority's path, which
    /// `kube::Config` does not keep).
    pub(crate) fn of(config: &kube::Config, kubeconfig: Option<&Path>) -> Self {
        let of_file = kubeconfig
            .map(|p| format!(" of the kubeconfig {}", p.display()))
            .unwrap_or_default();
        let trust = match (&config.root_cert_file, &config.root_cert) {
            (Some(file), _) => format!("the CA in {}", file.display()),
            (None, Some(_)) => match kubeconfig.and_then(certificate_authority) {
                Some(ca) => format!("the certificate-authority {ca}{of_file}"),
                None => format!("the cluster's certificate-authority{of_file}"),
            },
            (None, None) => format!(
                "the system's root certificates (the cluster{of_file} names no \
                 certificate-authority)"
            ),
        };
        let auth = &config.auth_info;
        let certificate = match (&auth.client_certificate, &auth.client_certificate_data) {
            (Some(path), _) => Some(path.clone()),
            (None, Some(_)) => Some("client-certificate-data".to_owned()),
            (None, None) => None,
        };
        let mut sent = Vec::new();
        if let Some(cert) = &certificate {
            sent.push(format!("the client certificate {cert}"));
        }
        if auth.token.is_some() {
            sent.push("a bearer token (token)".to_owned());
        }
        if let Some(file) = &auth.token_file {
            sent.push(format!("a bearer token from tokenFile {file}"));
        }
        if auth.exec.is_some() || auth.auth_provider.is_some() {
            sent.push("the credentials of an exec or auth-provider plugin".to_owned());
        }
        if auth.username.is_some() {
            sent.push("a user name and password".to_owned());
        }
        let credentials = if sent.is_empty() {
            "no credentials".to_owned()
        } else {
            sent.join(" and ")
        };
        Self {
            trust,
            certificate,
            credentials,
        }
    }
}

/// The `certificate-authority` path (or the words for its `-data` form) of
/// the current context's cluster in the kubeconfig at `path`.
fn certificate_authority(path: &Path) -> Option<String> {
    let file = kube::config::Kubeconfig::read_from(path).ok()?;
    let context = file.current_context.as_deref()?;
    let cluster = file
        .contexts
        .iter()
        .find(|c| c.name == context)?
        .context
        .as_ref()?
        .cluster
        .clone();
    let cluster = file
        .clusters
        .iter()
        .find(|c| c.name == cluster)?
        .cluster
        .as_ref()?;
    match (
        &cluster.certificate_authority,
        &cluster.certificate_authority_data,
    ) {
        (Some(path), _) => Some(path.clone()),
        (None, Some(_)) => Some("in certificate-authority-data".to_owned()),
        (None, None) => None,
    }
}

/// The first `T` in `e`'s source chain, looking inside `io::Error`s too
/// (whose `source` skips the error they wrap).
fn find<'a, T: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(found) = err.downcast_ref::<T>() {
            return Some(found);
        }
        if let Some(inner) = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            let inner: &(dyn std::error::Error + 'static) = inner;
            if let Some(found) = find::<T>(inner) {
                return Some(found);
            }
        }
        next = err.source();
    }
    None
}

/// What went wrong with TLS in `e`, if rustls refused the handshake; `host`
/// is the host of the server URL. A connection dropped mid-handshake, with
/// no rustls error, is not one: it may pass.
pub(crate) fn explain(e: &kube::Error, shown: &Shown, host: &str) -> Option<TlsFailure> {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    let tls = find::<rustls::Error>(e)?;
    let fail = |what: String, fix: &str| TlsFailure {
        what,
        fix: fix.to_owned(),
    };
    let trust = &shown.trust;
    Some(match tls {
        E::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => fail(
            format!(
                "the API server's certificate at {host} is not signed by a CA this client trusts \
                 ({trust})"
            ),
            "set the cluster's certificate-authority (a PEM file) or certificate-authority-data \
             (base64 PEM) in the kubeconfig to the CA that signed the API server's certificate",
        ),
        E::InvalidCertificate(C::ExpiredContext { not_after, .. }) => fail(
            format!(
                "the API server's certificate at {host} expired on {}",
                utc_date(not_after.as_secs())
            ),
            "renew the API server's serving certificate, and check this machine's clock",
        ),
        E::InvalidCertificate(C::Expired) => fail(
            format!("the API server's certificate at {host} has expired"),
            "renew the API server's serving certificate, and check this machine's clock",
        ),
        E::InvalidCertificate(C::NotValidYet | C::NotValidYetContext { .. }) => fail(
            format!("the API server's certificate at {host} is not valid yet"),
            "check this machine's clock and the certificate's start date (its notBefore)",
        ),
        E::InvalidCertificate(C::NotValidForNameContext { presented, .. }) => fail(
            format!(
                "the API server's certificate is not valid for the host name {host:?} of the \
                 kubeconfig's server; it names {}",
                presented
                    .iter()
                    .map(|name| plain_name(name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "use a server URL with a name the certificate lists, or set tls-server-name in the \
             kubeconfig's cluster",
        ),
        E::InvalidCertificate(C::NotValidForName) => fail(
            format!(
                "the API server's certificate is not valid for the host name {host:?} of the \
                 kubeconfig's server"
            ),
            "use a server URL with a name the certificate lists, or set tls-server-name in the \
             kubeconfig's cluster",
        ),
        E::InvalidCertificate(other) => fail(
            format!("the API server's certificate at {host} was refused: {other:?}"),
            "give the API server a valid certificate signed by the cluster's CA",
        ),
        E::AlertReceived(
            alert @ (A::BadCertificate
            | A::CertificateRequired
            | A::UnknownCA
            | A::AccessDenied
            | A::CertificateUnknown
            | A::UnsupportedCertificate
            | A::CertificateRevoked
            | A::CertificateExpired),
        ) => match &shown.certificate {
            Some(cert) => fail(
                format!(
                    "the server at {host} refused the client certificate {cert} in the TLS \
                     handshake (alert {alert:?})"
                ),
                "give the kubeconfig's user a client certificate signed by the CA the server \
                 trusts for clients, for client authentication, and not expired",
            ),
            None => fail(
                format!(
                    "the server at {host} asks for a client certificate and this client has \
                     none (alert {alert:?})"
                ),
                "give the kubeconfig's user client-certificate and client-key (or their -data \
                 forms)",
            ),
        },
        E::AlertReceived(alert) => fail(
            format!("the server at {host} ended the TLS handshake with the alert {alert:?}"),
            "check the server's log: it may need a TLS version, cipher or name this client does \
             not offer",
        ),
        E::InvalidMessage(_)
        | E::InappropriateMessage { .. }
        | E::InappropriateHandshakeMessage { .. } => fail(
            format!("the server at {host} did not answer in TLS"),
            "if it takes plain HTTP only (such as kubectl proxy), write http:// in the \
             kubeconfig's server (or k8s://HOST:PORT)",
        ),
        other => fail(
            format!("TLS with the API server at {host} failed: {other}"),
            "check the kubeconfig's certificate-authority, client-certificate and client-key",
        ),
    })
}

/// A name as rustls shows it (`DnsName("h")`, `IpAddress(10.0.0.1)`),
/// without the wrapping.
fn plain_name(shown: &str) -> &str {
    shown
        .strip_prefix("DnsName(\"")
        .and_then(|rest| rest.strip_suffix("\")"))
        .or_else(|| {
            shown
                .strip_prefix("IpAddress(")
                .and_then(|rest| rest.strip_suffix(')'))
        })
        .unwrap_or(shown)
}

/// `secs` since the Unix epoch as a UTC date, `2021-01-01`.
fn utc_date(secs: u64) -> String {
    // Howard Hinnant's civil_from_days.
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX) + 719_468;
    let era = days.div_euclid(146_097);
    let doe = days.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Whether the server at `addr` (`host:port`) answers a TLS ClientHello
/// with a TLS record (a handshake or an alert): a plain-HTTP client was
/// refused by a server that takes HTTPS only. One connection, bounded by
/// `within`.
pub(crate) async fn speaks_tls(addr: &str, within: std::time::Duration) -> bool {
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let probe = async {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .ok()?
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("localhost").ok()?;
        let mut hello = Vec::new();
        rustls::ClientConnection::new(Arc::new(config), name)
            .ok()?
            .write_tls(&mut hello)
            .ok()?;
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        stream.write_all(&hello).await.ok()?;
        let mut first = [0u8; 1];
        stream.read_exact(&mut first).await.ok()?;
        // 22: a handshake record (ServerHello), 21: an alert.
        Some(matches!(first[0], 21 | 22))
    };
    matches!(tokio::time::timeout(within, probe).await, Ok(Some(true)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_dates_read_plainly() {
        assert_eq!(plain_name("DnsName(\"wrong.invalid\")"), "wrong.invalid");
        assert_eq!(plain_name("IpAddress(127.0.0.1)"), "127.0.0.1");
        assert_eq!(utc_date(1_609_459_200), "2021-01-01");
    }

    /// Paths and field names only: never a token.
    #[test]
    fn credentials_are_named_never_shown() {
        let mut config = kube::Config::new("https://10.0.0.1:6443".parse().unwrap());
        config.auth_info.token = Some("sekrit-token".to_owned().into());
        config.auth_info.client_certificate = Some("/c.crt".to_owned());
        let shown = Shown::of(&config, None);
        assert_eq!(
            shown.credentials,
            "the client certificate /c.crt and a bearer token (token)"
        );
        assert!(!format!("{shown:?}").contains("sekrit"));
        assert!(
            shown.trust.starts_with("the system's root certificates"),
            "{}",
            shown.trust
        );
    }
}
