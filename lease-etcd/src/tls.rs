//! TLS to etcd: the `ca=`, `cert=` and `key=` files of an `etcds://` URL,
//! read and checked; and what a failed handshake means, found by type in an
//! error's source chain (tonic says only "transport error").

// Without the `tls` feature every connection is `Transport::Plain`, and the
// rest of this module is only the shape the messages share.
#![cfg_attr(not(feature = "tls"), allow(dead_code))]

use std::path::PathBuf;

use leasehold_core::ConfigError;

/// The certificate files an `etcds://` URL names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TlsFiles {
    /// The CA the server's certificate must chain to (`ca=`); without it,
    /// the system's roots.
    pub(crate) ca: Option<PathBuf>,
    /// The client certificate (`cert=`), shown to a server that asks.
    pub(crate) cert: Option<PathBuf>,
    /// Its private key (`key=`).
    pub(crate) key: Option<PathBuf>,
}

/// What the server is verified against, for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Trust {
    /// The CA certificate file of `ca=`.
    CaFile(PathBuf),
    /// The platform's root certificates (`tls-roots`).
    SystemRoots,
    /// Whatever `TlsOptions` the caller passed to `EtcdConfig::tls`.
    Given,
}

/// Which client certificate this client shows, for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ClientCert {
    /// None: a server with `--client-cert-auth` refuses the connection.
    None,
    /// The certificate file of `cert=`.
    File(PathBuf),
    /// Whatever `TlsOptions` the caller passed to `EtcdConfig::tls`.
    Given,
}

/// How this client reaches etcd, for the messages of failed connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    /// `etcd://`: plain text.
    Plain,
    /// `etcds://`: TLS.
    Tls {
        /// What the server's certificate must chain to.
        trust: Trust,
        /// What this client shows when asked.
        client: ClientCert,
    },
}

impl TlsFiles {
    /// The files as messages name them.
    pub(crate) fn transport(&self) -> Transport {
        Transport::Tls {
            trust: match &self.ca {
                Some(ca) => Trust::CaFile(ca.clone()),
                None => Trust::SystemRoots,
            },
            client: match &self.cert {
                Some(cert) => ClientCert::File(cert.clone()),
                None => ClientCert::None,
            },
        }
    }

    /// `cert=` and `key=` come together.
    pub(crate) fn check_pairs(&self) -> Result<(), ConfigError> {
        match (&self.cert, &self.key) {
            (Some(cert), None) => Err(ConfigError::described(
                "key",
                format!(
                    "cert={} is given without key=; give the client certificate's private key \
                     as key=/path/to/client.key too",
                    cert.display()
                ),
            )),
            (None, Some(key)) => Err(ConfigError::described(
                "cert",
                format!(
                    "key={} is given without cert=; give the client certificate as \
                     cert=/path/to/client.crt too",
                    key.display()
                ),
            )),
            _ => Ok(()),
        }
    }
}

impl std::fmt::Display for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::CaFile(path) => write!(f, "the CA in ca={}", path.display()),
            Self::SystemRoots => f.write_str("the system's root certificates (no ca= given)"),
            Self::Given => f.write_str("the CA certificates given in TlsOptions"),
        }
    }
}

/// Why a connection failed, and what to do, when it was TLS (or the lack of
/// it) that failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TlsFailure {
    /// What happened.
    pub(crate) what: String,
    /// What to do.
    pub(crate) fix: String,
}

impl std::fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}; {}", self.what, self.fix)
    }
}

/// The first error in `e`'s source chain, looking inside `io::Error`s too
/// (whose `source` skips the error they wrap).
#[cfg(feature = "tls")]
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

/// The start of `e`'s source chain, past `etcd-client`'s own wrapper
/// (whose `source` is empty).
pub(crate) fn chain_start(e: &etcd_client::Error) -> Option<&(dyn std::error::Error + 'static)> {
    match e {
        etcd_client::Error::GRpcStatus(status) => Some(status),
        etcd_client::Error::TransportError(t) => Some(t),
        etcd_client::Error::IoError(io) => Some(io),
        _ => None,
    }
}

/// What went wrong with TLS in `e`, if rustls refused the handshake: a
/// certificate the client refused, an alert of the server refusing ours, a
/// server that does not answer in TLS. `host` is the host the client
/// connected to.
#[cfg(feature = "tls")]
pub(crate) fn explain(
    e: &etcd_client::Error,
    transport: &Transport,
    host: &str,
) -> Option<TlsFailure> {
    let Transport::Tls { trust, client } = transport else {
        return None;
    };
    let start = chain_start(e)?;
    // Only what rustls itself refused: an error without one (a connection
    // dropped mid-handshake) may pass, and is no setup mistake.
    find::<rustls::Error>(start).map(|tls| explain_rustls(tls, trust, client, host))
}

/// Without the `tls` feature no connection is TLS.
#[cfg(not(feature = "tls"))]
pub(crate) fn explain(
    _e: &etcd_client::Error,
    _transport: &Transport,
    _host: &str,
) -> Option<TlsFailure> {
    None
}

#[cfg(feature = "tls")]
fn explain_rustls(e: &rustls::Error, trust: &Trust, client: &ClientCert, host: &str) -> TlsFailure {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    let fail = |what: String, fix: &str| TlsFailure {
        what,
        fix: fix.to_owned(),
    };
    match e {
        E::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => fail(
            format!(
                "the server's certificate at {host} is not signed by a CA this client trusts \
                 ({trust})"
            ),
            "give ca= the certificate of the CA that signed the etcd server's certificate (its \
             --cert-file), as a PEM file",
        ),
        E::InvalidCertificate(C::Expired) => fail(
            format!("the server's certificate at {host} has expired"),
            "renew the etcd server's certificate (its --cert-file; etcd reads it again for each \
             new connection), and check this machine's clock",
        ),
        E::InvalidCertificate(C::ExpiredContext { not_after, .. }) => fail(
            format!(
                "the server's certificate at {host} expired on {}",
                utc_date(not_after.as_secs())
            ),
            "renew the etcd server's certificate (its --cert-file; etcd reads it again for each \
             new connection), and check this machine's clock",
        ),
        E::InvalidCertificate(C::NotValidYet | C::NotValidYetContext { .. }) => fail(
            format!("the server's certificate at {host} is not valid yet"),
            "check this machine's clock and the certificate's start date (its notBefore)",
        ),
        E::InvalidCertificate(C::NotValidForName) => fail(
            format!("the server's certificate is not valid for the host name {host:?} in the URL"),
            "connect by a name the certificate lists, or reissue it with this name in its \
             subjectAltName",
        ),
        E::InvalidCertificate(C::NotValidForNameContext { presented, .. }) => fail(
            format!(
                "the server's certificate is not valid for the host name {host:?} in the URL; \
                 it names {}",
                presented
                    .iter()
                    .map(|name| plain_name(name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "connect by a name the certificate lists, or reissue it with this name in its \
             subjectAltName",
        ),
        E::InvalidCertificate(other) => fail(
            format!("the server's certificate at {host} was refused: {other:?}"),
            "give the etcd server a valid certificate signed by the CA in ca=",
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
        ) => match client {
            ClientCert::None => fail(
                format!(
                    "the server at {host} asks every client for a certificate \
                     (--client-cert-auth) and this client has none (it answered {alert:?})"
                ),
                "add the client certificate and its key to the URL: \
                 etcds://HOST?ca=…&cert=/path/client.crt&key=/path/client.key",
            ),
            ClientCert::File(cert) => fail(
                format!(
                    "the server at {host} refused the client certificate cert={} \
                     (it answered {alert:?})",
                    cert.display()
                ),
                "use a client certificate signed by the CA the server trusts for clients (its \
                 --trusted-ca-file), for client authentication, and not expired",
            ),
            ClientCert::Given => fail(
                format!(
                    "the server at {host} refused this client's certificate, or its lack of one \
                     (it answered {alert:?})"
                ),
                "give a client certificate signed by the CA the server trusts for clients (its \
                 --trusted-ca-file)",
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
            "if it takes plain connections only, write etcd:// instead of etcds://",
        ),
        other => fail(
            format!("TLS with the server at {host} failed: {other}"),
            "check ca=, cert= and key=, and the server's --cert-file",
        ),
    }
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

/// The client TLS settings from `files`, each file read now and checked:
/// `ca=` must hold a PEM certificate, `cert=` one and `key=` the private
/// key that goes with it. Errors name the option and the path, never what
/// a key file holds.
#[cfg(feature = "tls")]
pub(crate) fn load(files: &TlsFiles) -> Result<etcd_client::TlsOptions, ConfigError> {
    use etcd_client::{Certificate, Identity, TlsOptions};
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};

    files.check_pairs()?;
    let read = |option: &'static str, path: &PathBuf| {
        std::fs::read(path).map_err(|e| {
            ConfigError::described(
                option,
                format!(
                    "cannot read {option}={}: {e}; give a readable PEM file",
                    path.display()
                ),
            )
        })
    };
    let certificates = |option: &'static str, path: &PathBuf, pem: &[u8]| {
        let found = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_or(0, |certs| certs.len());
        if found == 0 {
            Err(ConfigError::described(
                option,
                format!(
                    "{option}={} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                    path.display()
                ),
            ))
        } else {
            Ok(())
        }
    };
    let mut options = TlsOptions::new();
    match &files.ca {
        Some(path) => {
            let pem = read("ca", path)?;
            certificates("ca", path, &pem)?;
            options = options.ca_certificate(Certificate::from_pem(pem));
        }
        None if cfg!(feature = "tls-roots") => options = options.with_enabled_roots(),
        None => {
            return Err(ConfigError::described(
                "ca",
                "etcds:// without ca= verifies the server against the system's root \
                 certificates, which this build leaves out: give ca=/path/to/ca.crt (the CA \
                 that signed the etcd server's certificate), or enable leasehold-etcd's \
                 `tls-roots` feature",
            ));
        }
    }
    if let (Some(cert_path), Some(key_path)) = (&files.cert, &files.key) {
        let cert = read("cert", cert_path)?;
        certificates("cert", cert_path, &cert)?;
        let key = read("key", key_path)?;
        if PrivateKeyDer::from_pem_slice(&key).is_err() {
            return Err(ConfigError::described(
                "key",
                format!(
                    "key={} holds no PEM private key (-----BEGIN PRIVATE KEY-----, or an RSA or \
                     EC key)",
                    key_path.display()
                ),
            ));
        }
        options = options.identity(Identity::from_pem(cert, key));
    }
    // tonic builds the rustls configuration here, as it will on connect: a
    // key that is not the certificate's (or, without ca=, a system without
    // root certificates) fails now, not at the first request.
    tonic::transport::Endpoint::from_static("https://localhost")
        .tls_config(options.clone())
        .map_err(|e| {
            let cause =
                std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string());
            match (&files.cert, &files.key) {
                (Some(cert), Some(key)) => ConfigError::described(
                    "key",
                    format!(
                        "cert={} and key={} make no usable client identity ({cause}); key= must \
                         be the private key of the certificate in cert=",
                        cert.display(),
                        key.display()
                    ),
                ),
                _ => ConfigError::described(
                    "ca",
                    format!(
                        "no usable certificate to verify the server with ({cause}); give \
                         ca=/path/to/ca.crt"
                    ),
                ),
            }
        })?;
    Ok(options)
}

/// The first of `endpoints` whose server answers on its port the other way
/// than `transport` speaks (a TLS handshake to plain text, plain HTTP/2 to
/// TLS), and what to do; each asked once, bounded by `within`. For a
/// connection that broke: a server that answers the other way is the cause.
#[cfg(feature = "tls")]
pub(crate) async fn other_side(
    endpoints: &[String],
    transport: &Transport,
    within: std::time::Duration,
) -> Option<TlsFailure> {
    for endpoint in endpoints {
        let addr = endpoint
            .split_once("://")
            .map_or(endpoint.as_str(), |(_, a)| a);
        let plain = *transport == Transport::Plain;
        let other = if plain {
            speaks_tls(addr, within).await
        } else {
            speaks_plain_http2(addr, within).await
        };
        if !other {
            continue;
        }
        return Some(if plain {
            TlsFailure {
                what: format!(
                    "the server at {addr} takes TLS only: this client spoke plain text \
                     (etcd://) and the server answers a TLS handshake"
                ),
                fix: "write etcds:// with the CA that signed the server's certificate, and the \
                      client certificate if the server asks for one (--client-cert-auth): \
                      etcds://HOST:2379?ca=/path/ca.crt&cert=/path/client.crt\
                      &key=/path/client.key"
                    .to_owned(),
            }
        } else {
            TlsFailure {
                what: format!(
                    "the server at {addr} takes plain text only: this client began a TLS \
                     handshake (etcds://) and the server answers HTTP/2 without TLS"
                ),
                fix: "turn TLS on in the server (--cert-file, --key-file and https:// in \
                      --listen-client-urls), or write etcd:// on a network you trust"
                    .to_owned(),
            }
        });
    }
    None
}

/// Whether the server at `addr` answers a TLS ClientHello with a TLS record
/// (a handshake or an alert): a plain-text client was refused by a server
/// that takes TLS only. One connection, bounded by `within`.
#[cfg(feature = "tls")]
async fn speaks_tls(addr: &str, within: std::time::Duration) -> bool {
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let probe = async {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .ok()?
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let name = rustls_pki_types::ServerName::try_from("localhost").ok()?;
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

/// Whether the server at `addr` answers the HTTP/2 preface in plain text
/// with a SETTINGS frame, as a plain-text etcd does: a TLS client's
/// handshake was cut off by a server that takes no TLS. One connection,
/// bounded by `within`.
#[cfg(feature = "tls")]
async fn speaks_plain_http2(addr: &str, within: std::time::Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let probe = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        // The client preface, then an empty SETTINGS frame.
        let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        hello.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        stream.write_all(&hello).await.ok()?;
        let mut header = [0u8; 9];
        stream.read_exact(&mut header).await.ok()?;
        // A frame header whose type (the fourth byte) is SETTINGS, on
        // stream 0.
        Some(header[3] == 4 && header[5..] == [0, 0, 0, 0])
    };
    matches!(tokio::time::timeout(within, probe).await, Ok(Some(true)))
}

/// The TLS version a verified handshake with the server at `endpoint`
/// agrees on (`TLS 1.3`), with `files`' CA and client certificate, as the
/// client's own connections verify it (chain and host name); or why none
/// was made. For `leasehold doctor`: tonic does not report it.
#[cfg(feature = "tls")]
pub(crate) async fn handshake_version(
    endpoint: &str,
    files: &TlsFiles,
    within: std::time::Duration,
) -> Result<&'static str, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use std::sync::Arc;

    let addr = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, a)| a)
        .to_owned();
    let host = host_of(&addr)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let Some(ca) = &files.ca else {
        return Err("no ca= file: verified against the system's roots".into());
    };
    let read = |p: &PathBuf| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&read(ca)?) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let mut config = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_slice_iter(&read(cert)?)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let key = PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|e| e.to_string())?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| e.to_string())?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let name = ServerName::try_from(host).map_err(|e| e.to_string())?;
    let handshake = async {
        let tcp = tokio::net::TcpStream::connect(&addr)
            .await
            .map_err(|e| e.to_string())?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(tls.get_ref().1.protocol_version())
    };
    match tokio::time::timeout(within, handshake).await {
        Ok(Ok(Some(rustls::ProtocolVersion::TLSv1_3))) => Ok("TLS 1.3"),
        Ok(Ok(Some(rustls::ProtocolVersion::TLSv1_2))) => Ok("TLS 1.2"),
        Ok(Ok(other)) => Err(format!("an unexpected protocol: {other:?}")),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(format!("no handshake within {within:?}")),
    }
}

/// `host` of `scheme://host:port`, `[v6]` kept in brackets.
pub(crate) fn host_of(endpoint: &str) -> &str {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
    if rest.starts_with('[') {
        return rest.split_inclusive(']').next().unwrap_or(rest);
    }
    match rest.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => rest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_lose_their_wrapping() {
        assert_eq!(plain_name("DnsName(\"wrong.invalid\")"), "wrong.invalid");
        assert_eq!(plain_name("IpAddress(127.0.0.1)"), "127.0.0.1");
        assert_eq!(plain_name("Other"), "Other");
    }

    #[test]
    fn dates_are_utc() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(1_609_459_200), "2021-01-01");
        assert_eq!(utc_date(951_782_400), "2000-02-29");
    }

    #[test]
    fn a_certificate_needs_its_key_and_the_key_its_certificate() {
        let half = TlsFiles {
            cert: Some("/c.crt".into()),
            ..TlsFiles::default()
        };
        let e = half.check_pairs().unwrap_err().to_string();
        assert!(e.contains("cert=/c.crt is given without key="), "{e}");
        let half = TlsFiles {
            key: Some("/c.key".into()),
            ..TlsFiles::default()
        };
        let e = half.check_pairs().unwrap_err().to_string();
        assert!(e.contains("key=/c.key is given without cert="), "{e}");
    }
}
