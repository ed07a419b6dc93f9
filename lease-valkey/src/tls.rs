//! TLS: what a `rediss://` or `valkeys://` URL asks for, the rustls client
//! configuration it becomes at connect, what the handshakes saw, and the
//! failures a connect names with their fix.
//!
//! Every TLS connection verifies the server's certificate chain and its host
//! name (or IP address) against the CA file of `?ca=`, else the system's
//! root certificates; there is no setting that turns verification off, and
//! a TLS URL never falls back to plain text.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use leasehold_core::ConfigError;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore,
    SignatureScheme,
};

use crate::error::{TlsFailure, ValkeyError};

/// The TLS files a configuration names: paths only, read at `connect`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TlsFiles {
    /// The CA certificates (PEM) to verify the server against; `None`: the
    /// system's roots.
    pub(crate) ca: Option<PathBuf>,
    /// The client certificate chain and its private key (PEM), for mutual
    /// TLS.
    pub(crate) client: Option<(PathBuf, PathBuf)>,
}

impl TlsFiles {
    pub(crate) fn is_empty(&self) -> bool {
        self.ca.is_none() && self.client.is_none()
    }

    /// The URL options that name these files, for messages: `ca=, cert=`.
    pub(crate) fn options(&self) -> String {
        let mut out = Vec::new();
        if self.ca.is_some() {
            out.push("ca=");
        }
        if self.client.is_some() {
            out.push("cert=");
            out.push("key=");
        }
        out.join(", ")
    }
}

/// Whether a URL scheme asks for TLS: `rediss`, `valkeys`, and their
/// `-sentinel` and `-cluster` forms.
pub(crate) fn scheme_uses_tls(scheme: &str) -> bool {
    let scheme = scheme.to_ascii_lowercase();
    scheme.starts_with("rediss") || scheme.starts_with("valkeys")
}

/// The scheme `fred` parses a URL of `scheme` with: `redis`, `redis-sentinel`
/// or `redis-cluster` (TLS is set on the client configuration instead, so
/// that `fred` never builds a connector of its own).
pub(crate) fn scheme_for_fred(scheme: &str) -> &'static str {
    let scheme = scheme.to_ascii_lowercase();
    if scheme.ends_with("-sentinel") {
        "redis-sentinel"
    } else if scheme.ends_with("-cluster") {
        "redis-cluster"
    } else {
        "redis"
    }
}

/// What a TLS connection trusts and presents, and what its handshakes saw:
/// [`ValkeyStrategy::tls`](crate::ValkeyStrategy::tls).
///
/// Every connection verifies the server: its certificate chain against
/// [`TlsInfo::ca`] (or the system's roots) and its host name or IP address
/// against the certificate's names. There is no unverified TLS.
#[derive(Clone, Debug)]
pub struct TlsInfo {
    ca: Option<PathBuf>,
    system_roots: usize,
    client_cert: Option<PathBuf>,
    seen: Arc<Handshakes>,
}

impl TlsInfo {
    /// The CA file the server is verified against (`?ca=`); `None`: the
    /// system's root certificates ([`TlsInfo::system_roots`]).
    pub fn ca(&self) -> Option<&Path> {
        self.ca.as_deref()
    }

    /// How many system root certificates the server is verified against
    /// (0 when [`TlsInfo::ca`] names a file).
    pub fn system_roots(&self) -> usize {
        self.system_roots
    }

    /// The client certificate presented when the server asks for one
    /// (`?cert=`), for mutual TLS.
    pub fn client_cert(&self) -> Option<&Path> {
        self.client_cert.as_deref()
    }

    /// The protocol of the latest verified handshake: `TLS 1.3` or `TLS
    /// 1.2` (`None` before any, or after resumed handshakes only).
    pub fn protocol(&self) -> Option<&'static str> {
        match self.seen.version.load(Ordering::Relaxed) {
            12 => Some("TLS 1.2"),
            13 => Some("TLS 1.3"),
            _ => None,
        }
    }

    /// Whether the server asked this client for a certificate in a
    /// handshake so far (mutual TLS).
    pub fn client_cert_asked(&self) -> bool {
        self.seen.asked_for_client_cert.load(Ordering::Relaxed)
    }
}

impl fmt::Display for TlsInfo {
    /// `TLS 1.3, server verified (chain and host name) against the CA in
    /// /etc/ids/ca.crt, client certificate /etc/ids/client.crt`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.protocol().unwrap_or("TLS"))?;
        f.write_str(", server verified (chain and host name) against ")?;
        match &self.ca {
            Some(ca) => write!(f, "the CA in {}", ca.display())?,
            None => write!(f, "the system's {} root certificates", self.system_roots)?,
        }
        match &self.client_cert {
            Some(cert) => write!(f, ", client certificate {}", cert.display()),
            None => f.write_str(", no client certificate"),
        }
    }
}

/// What the handshakes of one client saw: the latest failed certificate
/// check, the protocol of the latest verified one, and whether the server
/// asked for a client certificate. Read when a connect fails, to name the
/// cause, and by [`TlsInfo::protocol`].
#[derive(Debug, Default)]
pub(crate) struct Handshakes {
    refused: Mutex<Option<(String, rustls::Error)>>,
    verified: AtomicBool,
    version: AtomicU8,
    asked_for_client_cert: AtomicBool,
}

/// The TLS of one client: the rustls configuration `fred` connects with, and
/// what its handshakes saw.
pub(crate) struct Tls {
    pub(crate) config: ClientConfig,
    pub(crate) info: TlsInfo,
}

impl Tls {
    /// Reads the files and builds the client configuration: the `ring`
    /// provider, TLS 1.2 and 1.3, the server verified against `files.ca` or
    /// the system's roots, the client certificate when the server asks.
    pub(crate) fn new(files: &TlsFiles) -> Result<Self, ValkeyError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let seen = Arc::new(Handshakes::default());
        let (roots, system_roots) = match &files.ca {
            Some(ca) => (ca_roots(ca)?, 0),
            None => system_roots()?,
        };
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| {
                tls_config_error(
                    "ca",
                    &format!("the trusted roots cannot verify anything: {e}"),
                )
            })?;
        let client = match &files.client {
            Some((cert, key)) => Some(Loaded {
                stamp: stamp(cert, key),
                key: Arc::new(client_key(cert, key, &provider)?),
            }),
            None => None,
        };
        let resolver = ClientCert {
            files: files.client.clone(),
            provider: provider.clone(),
            loaded: Mutex::new(client),
            seen: seen.clone(),
        };
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_config_error("url", &format!("no TLS protocol version: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Witnessed {
                inner: webpki,
                seen: seen.clone(),
            }))
            .with_client_cert_resolver(Arc::new(resolver));
        // Every connection makes a full handshake: a resumed session would
        // skip the server's certificate check and the client certificate,
        // so a rotated certificate on either side would not be seen.
        // Connections are long-lived; a handshake costs a round trip.
        config.resumption = rustls::client::Resumption::disabled();
        Ok(Self {
            config,
            info: TlsInfo {
                ca: files.ca.clone(),
                system_roots,
                client_cert: files.client.as_ref().map(|(c, _)| c.clone()),
                seen,
            },
        })
    }

    /// The cause of a failed connect, from what the handshakes saw: a
    /// refused server certificate, or a connection `closed` (an I/O error,
    /// not a server's answer such as a wrong password) after a handshake in
    /// which the server asked for a client certificate. `None`: no
    /// handshake says why (the caller probes the server in plain text).
    pub(crate) fn failure(&self, reason: &str, closed: bool) -> Option<TlsFailure> {
        let seen = &self.info.seen;
        let refused = seen
            .refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some((name, e)) = refused {
            return Some(self.certificate_failure(&name, &e));
        }
        if closed
            && seen.verified.load(Ordering::Relaxed)
            && seen.asked_for_client_cert.load(Ordering::Relaxed)
        {
            let reason = reason.to_owned();
            return Some(match &self.info.client_cert {
                None => TlsFailure::ClientCertRequired { reason },
                Some(cert) => TlsFailure::ClientCertRefused {
                    cert: cert.clone(),
                    reason,
                },
            });
        }
        None
    }

    /// Whether a handshake got as far as a verified server certificate.
    pub(crate) fn any_verified(&self) -> bool {
        self.info.seen.verified.load(Ordering::Relaxed)
    }

    fn certificate_failure(&self, name: &str, e: &rustls::Error) -> TlsFailure {
        let rustls::Error::InvalidCertificate(e) = e else {
            return TlsFailure::BadCertificate {
                detail: e.to_string(),
            };
        };
        let detail = e.to_string();
        match e {
            CertificateError::UnknownIssuer => TlsFailure::UnknownIssuer {
                trusted: match &self.info.ca {
                    Some(ca) => format!("the CA in ca={}", ca.display()),
                    None => format!(
                        "any of the system's {} root certificates (no ?ca= given)",
                        self.info.system_roots
                    ),
                },
            },
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                TlsFailure::Expired { detail }
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                TlsFailure::NotYetValid { detail }
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                TlsFailure::WrongHost {
                    name: name.to_owned(),
                    detail,
                }
            }
            _ => TlsFailure::BadCertificate { detail },
        }
    }
}

/// A configuration error about a TLS option (`ca`, `cert`, `key`).
fn tls_config_error(option: &'static str, text: &str) -> ValkeyError {
    ConfigError::described(option, text.to_owned()).into()
}

/// Every certificate of a PEM file, or an error naming the option and the
/// path.
fn read_certificates(
    option: &'static str,
    path: &Path,
    what: &str,
) -> Result<Vec<CertificateDer<'static>>, ValkeyError> {
    let shown = path.display();
    let bad = |why: String| {
        tls_config_error(
            option,
            &format!("{option}={shown}: {why}; give a PEM file of {what}"),
        )
    };
    // Read first, so that a missing file says so plainly.
    let bytes = std::fs::read(path).map_err(|e| bad(format!("cannot read the file ({e})")))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("not a PEM certificate file ({e})")))?;
    if certs.is_empty() {
        return Err(bad("no certificate in it".into()));
    }
    Ok(certs)
}

/// The roots of `ca=`: every certificate in the file.
fn ca_roots(path: &Path) -> Result<RootCertStore, ValkeyError> {
    let what = "the CA certificates that signed the server's certificate";
    let mut roots = RootCertStore::empty();
    for cert in read_certificates("ca", path, what)? {
        roots.add(cert).map_err(|e| {
            tls_config_error(
                "ca",
                &format!(
                    "ca={}: a certificate in it is no usable CA certificate ({e}); give a PEM \
                     file of {what}",
                    path.display()
                ),
            )
        })?;
    }
    Ok(roots)
}

/// The system's root certificates (rustls-native-certs: the platform's
/// store; on Linux the files `SSL_CERT_FILE`/`SSL_CERT_DIR` or the
/// distribution's bundle name). Files that cannot be read are skipped as
/// long as some certificate is found.
fn system_roots() -> Result<(RootCertStore, usize), ValkeyError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map_or_else(|| "none found".to_owned(), ToString::to_string);
        return Err(tls_config_error(
            "ca",
            &format!(
                "no ?ca= given and no system root certificate could be loaded ({why}); give the \
                 CA that signed the server's certificate as ?ca=PATH, or install the system's \
                 CA bundle (Debian: ca-certificates) or point SSL_CERT_FILE at one"
            ),
        ));
    }
    Ok((roots, added))
}

/// The client certificate chain of `cert=` with the private key of `key=`,
/// checked to belong together. Errors name the option and the path, never
/// the key's contents.
fn client_key(
    cert: &Path,
    key: &Path,
    provider: &rustls::crypto::CryptoProvider,
) -> Result<CertifiedKey, ValkeyError> {
    let chain = read_certificates(
        "cert",
        cert,
        "the client certificate (and any intermediates), signed by a CA the server trusts",
    )?;
    let shown = key.display();
    let bad = |why: String| {
        tls_config_error(
            "key",
            &format!(
                "key={shown}: {why}; give the PEM file of the client certificate's private key \
                 (PKCS #8, PKCS #1 or SEC1)"
            ),
        )
    };
    let bytes = std::fs::read(key).map_err(|e| bad(format!("cannot read the file ({e})")))?;
    let private = PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => bad("no private key in it".into()),
        _ => bad("not a PEM private key file".into()),
    })?;
    CertifiedKey::from_der(chain, private, provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => tls_config_error(
            "key",
            &format!(
                "key={shown} is not the private key of the certificate in cert={}; give the \
                 key the certificate was made for",
                cert.display()
            ),
        ),
        _ => bad(format!("the key cannot sign ({e})")),
    })
}

/// The standard verifier, recording what it decided.
#[derive(Debug)]
struct Witnessed {
    inner: Arc<WebPkiServerVerifier>,
    seen: Arc<Handshakes>,
}

impl ServerCertVerifier for Witnessed {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verdict = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        match &verdict {
            Ok(_) => self.seen.verified.store(true, Ordering::Relaxed),
            Err(e) => {
                *self
                    .seen
                    .refused
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) =
                    Some((server_name.to_str().into_owned(), e.clone()));
            }
        }
        verdict
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let verdict = self.inner.verify_tls12_signature(message, cert, dss);
        if verdict.is_ok() {
            self.seen.version.store(12, Ordering::Relaxed);
        }
        verdict
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let verdict = self.inner.verify_tls13_signature(message, cert, dss);
        if verdict.is_ok() {
            self.seen.version.store(13, Ordering::Relaxed);
        }
        verdict
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }

    fn root_hint_subjects(&self) -> Option<&[DistinguishedName]> {
        self.inner.root_hint_subjects()
    }
}

/// The configured client certificate (if any), recording that the server
/// asked for one. The files are read again when they change (their
/// modification time or size), so that a certificate rotated in place (a
/// renewed Kubernetes secret, cert-manager) is presented on every new
/// connection without a restart; until the new pair is complete and
/// consistent (the key the certificate's), the one loaded before is kept.
#[derive(Debug)]
struct ClientCert {
    files: Option<(PathBuf, PathBuf)>,
    provider: Arc<rustls::crypto::CryptoProvider>,
    loaded: Mutex<Option<Loaded>>,
    seen: Arc<Handshakes>,
}

/// A client certificate and key as read, with the files' stamp then.
#[derive(Debug)]
struct Loaded {
    stamp: Option<Stamp>,
    key: Arc<CertifiedKey>,
}

/// The modification times and sizes of the certificate and key files.
type Stamp = [(std::time::SystemTime, u64); 2];

fn stamp(cert: &Path, key: &Path) -> Option<Stamp> {
    let one = |p: &Path| {
        let m = std::fs::metadata(p).ok()?;
        Some((m.modified().ok()?, m.len()))
    };
    Some([one(cert)?, one(key)?])
}

impl ClientCert {
    /// The pair to present: the loaded one, read again first if the files
    /// changed since.
    fn current(&self) -> Option<Arc<CertifiedKey>> {
        let (cert, key) = self.files.as_ref()?;
        let mut loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        let now = stamp(cert, key);
        let changed = now.is_some() && loaded.as_ref().is_none_or(|l| l.stamp != now);
        if changed && let Ok(fresh) = client_key(cert, key, &self.provider) {
            *loaded = Some(Loaded {
                stamp: now,
                key: Arc::new(fresh),
            });
        }
        loaded.as_ref().map(|l| l.key.clone())
    }
}

impl rustls::client::ResolvesClientCert for ClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.seen
            .asked_for_client_cert
            .store(true, Ordering::Relaxed);
        self.current()
    }

    fn has_certs(&self) -> bool {
        self.files.is_some()
    }
}

/// What a server answered to a plain-text `PING`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PlainProbe {
    /// A RESP reply (`+PONG`, `-NOAUTH …`, `-ERR …`): it speaks plain text.
    Answered,
    /// It took the connection and closed it without a RESP reply (or sent
    /// something that is not RESP, such as a TLS alert).
    Closed,
    /// No connection, or no answer in time: it says nothing about TLS.
    Unknown,
}

/// Sends `PING` in plain text to `host:port` and reads what comes back,
/// within `timeout`. Sends nothing else (no credentials).
pub(crate) async fn probe_plain(host: &str, port: u16, timeout: std::time::Duration) -> PlainProbe {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect((host, port)).await.ok()?;
        if stream.write_all(b"PING\r\n").await.is_err() {
            return Some(PlainProbe::Closed);
        }
        let mut first = [0u8; 1];
        Some(match stream.read(&mut first).await {
            Ok(1) if matches!(first[0], b'+' | b'-') => PlainProbe::Answered,
            Ok(_) => PlainProbe::Closed,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::UnexpectedEof
                        | std::io::ErrorKind::BrokenPipe
                ) =>
            {
                PlainProbe::Closed
            }
            Err(_) => PlainProbe::Unknown,
        })
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(Some(answer)) => answer,
        Ok(None) | Err(_) => PlainProbe::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes() {
        for (scheme, tls, fred) in [
            ("redis", false, "redis"),
            ("rediss", true, "redis"),
            ("VALKEYS", true, "redis"),
            ("valkey-sentinel", false, "redis-sentinel"),
            ("rediss-sentinel", true, "redis-sentinel"),
            ("valkeys-cluster", true, "redis-cluster"),
            ("redis-cluster", false, "redis-cluster"),
        ] {
            assert_eq!(scheme_uses_tls(scheme), tls, "{scheme}");
            assert_eq!(scheme_for_fred(scheme), fred, "{scheme}");
        }
    }

    /// Each missing or unusable file is a configuration error naming the
    /// option and the path.
    #[test]
    fn bad_files_name_the_option_and_the_path() {
        let dir = std::env::temp_dir().join(format!("leasehold-valkey-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let missing = dir.join("missing.pem");
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "").expect("write");
        let not_pem = dir.join("garbage.pem");
        std::fs::write(&not_pem, "-----BEGIN CERTIFICATE-----\nnot base64!\n").expect("write");
        let files = |ca: Option<&Path>, client: Option<(&Path, &Path)>| TlsFiles {
            ca: ca.map(Path::to_path_buf),
            client: client.map(|(c, k)| (c.to_path_buf(), k.to_path_buf())),
        };
        let error = |f: TlsFiles| match Tls::new(&f) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{f:?} accepted"),
        };
        let m = missing.display().to_string();
        let e = error(files(Some(&missing), None));
        assert!(
            e.contains(&format!("invalid `ca`: ca={m}: cannot read the file")),
            "{e}"
        );
        let e = error(files(Some(&empty), None));
        assert!(e.contains("no certificate in it"), "{e}");
        let e = error(files(Some(&not_pem), None));
        assert!(
            e.contains("invalid `ca`") && e.contains("not a PEM certificate file"),
            "{e}"
        );
        let e = error(files(None, Some((&missing, &empty))));
        assert!(e.contains(&format!("invalid `cert`: cert={m}")), "{e}");

        let pki = leasehold_conformance::tls::Pki::shared().expect("certificates");
        let (cert, key) = (&pki.client.cert, &pki.client.key);
        let e = error(files(Some(&pki.ca), Some((cert, &missing))));
        assert!(
            e.contains(&format!("invalid `key`: key={m}: cannot read the file")),
            "{e}"
        );
        let e = error(files(Some(&pki.ca), Some((cert, &empty))));
        assert!(
            e.contains("invalid `key`") && e.contains("no private key in it"),
            "{e}"
        );
        let e = error(files(Some(&pki.ca), Some((cert, &pki.stranger.key))));
        assert!(
            e.contains(&format!(
                "invalid `key`: key={} is not the private key of the certificate in cert={}",
                pki.stranger.key.display(),
                cert.display()
            )),
            "{e}"
        );
        // A key in place of the CA, and a certificate in place of the key.
        let e = error(files(Some(key), None));
        assert!(
            e.contains("invalid `ca`") && e.contains("no certificate in it"),
            "{e}"
        );
        let e = error(files(Some(&pki.ca), Some((cert, cert))));
        assert!(
            e.contains("invalid `key`") && e.contains("no private key in it"),
            "{e}"
        );
        // No key's contents in any message.
        let secret = std::fs::read_to_string(key).expect("key");
        let body = secret.lines().nth(1).expect("a line of the key");
        assert!(!e.contains(body));

        let tls = Tls::new(&files(Some(&pki.ca), Some((cert, key)))).expect("good files");
        assert_eq!(tls.info.ca(), Some(pki.ca.as_path()));
        assert_eq!(tls.info.client_cert(), Some(cert.as_path()));
        assert_eq!(tls.info.protocol(), None);
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Without `ca=`, the system's roots; a machine without any says what
    /// to do.
    #[test]
    fn without_a_ca_the_system_roots_are_trusted() {
        match Tls::new(&TlsFiles::default()) {
            Ok(tls) => {
                assert!(tls.info.system_roots() > 0);
                assert_eq!(tls.info.ca(), None);
                let shown = tls.info.to_string();
                assert!(
                    shown.contains("root certificates, no client certificate"),
                    "{shown}"
                );
            }
            Err(e) => {
                let e = e.to_string();
                assert!(
                    e.contains("no system root certificate could be loaded")
                        && e.contains("?ca=PATH"),
                    "{e}"
                );
            }
        }
    }
}
