//! HTTPS with authentication, as a kube-apiserver serves it: TLS with the
//! server's certificate; a client certificate is asked for but not required
//! at the TLS layer (the apiserver's `RequestClientCert`), and judged for
//! each request together with a bearer token; a request with neither a
//! certificate the client CA signed nor a known token is answered 401. A
//! plain HTTP request on the HTTPS port is answered as Go's `net/http` does.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime, pem::PemObject};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, Error, RootCertStore, SignatureScheme};

/// How the fake serves HTTPS: its certificate, the CA whose client
/// certificates it accepts, and the bearer tokens it knows.
///
/// ```no_run
/// use leasehold_k8s_fake::{FakeApiServer, Https};
/// let https = Https::new("server.crt", "server.key")
///     .client_ca("ca.crt")
///     .token("s3cret-token", "app");
/// let fake = FakeApiServer::start_https(https).expect("fake API server");
/// assert!(fake.url().starts_with("https://127.0.0.1:"));
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct Https {
    cert: PathBuf,
    key: PathBuf,
    client_ca: Option<PathBuf>,
    tokens: Vec<(String, String)>,
}

impl Https {
    /// Serves with the certificate chain in `cert` and its private key in
    /// `key` (PEM files).
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        Self {
            cert: cert.into(),
            key: key.into(),
            client_ca: None,
            tokens: Vec::new(),
        }
    }

    /// Accepts client certificates this CA signed (a PEM file), as
    /// kube-apiserver's `--client-ca-file`.
    pub fn client_ca(mut self, ca: impl Into<PathBuf>) -> Self {
        self.client_ca = Some(ca.into());
        self
    }

    /// Accepts `Authorization: Bearer <token>` as `user`, as a
    /// kube-apiserver's token file.
    pub fn token(mut self, token: impl Into<String>, user: impl Into<String>) -> Self {
        self.tokens.push((token.into(), user.into()));
        self
    }
}

/// Who a connection or request is, once judged.
pub(crate) struct Auth {
    verifier: Option<Arc<dyn ClientCertVerifier>>,
    tokens: Vec<(String, String)>,
}

impl Auth {
    /// Whether a connection that showed `chain` (if any) and a request that
    /// carries `authorization` (if any) are authenticated.
    pub(crate) fn allows(
        &self,
        chain: Option<&[CertificateDer<'static>]>,
        authorization: Option<&str>,
    ) -> bool {
        let by_certificate = match (&self.verifier, chain) {
            (Some(verifier), Some([end_entity, intermediates @ ..])) => verifier
                .verify_client_cert(end_entity, intermediates, UnixTime::now())
                .is_ok(),
            _ => false,
        };
        let by_token = authorization
            .and_then(|value| value.strip_prefix("Bearer "))
            .is_some_and(|token| self.tokens.iter().any(|(known, _)| known == token.trim()));
        by_certificate || by_token
    }
}

fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    std::fs::read(path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

fn invalid(what: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, what)
}

/// The TLS acceptor and the request judge for `https`.
pub(crate) fn setup(https: &Https) -> std::io::Result<(tokio_rustls::TlsAcceptor, Auth)> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = CertificateDer::pem_slice_iter(&read(&https.cert)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("{}: {e}", https.cert.display())))?;
    let key = PrivateKeyDer::from_pem_slice(&read(&https.key)?)
        .map_err(|e| invalid(format!("{}: {e}", https.key.display())))?;
    let verifier = match &https.client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&read(ca)?) {
                roots
                    .add(cert.map_err(|e| invalid(format!("{}: {e}", ca.display())))?)
                    .map_err(|e| invalid(format!("{}: {e}", ca.display())))?;
            }
            Some(
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| invalid(e.to_string()))?,
            )
        }
        None => None,
    };
    let builder = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(e.to_string()))?;
    let builder = match &verifier {
        Some(verifier) => builder.with_client_cert_verifier(Arc::new(Requesting {
            inner: verifier.clone(),
        })),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| invalid(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        Auth {
            verifier,
            tokens: https.tokens.clone(),
        },
    ))
}

/// Asks for a client certificate and checks that the client holds its key,
/// but leaves whether the CA signed it to each request ([`Auth::allows`]),
/// as kube-apiserver does: a certificate it does not trust is a 401, not a
/// failed handshake.
#[derive(Debug)]
struct Requesting {
    inner: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for Requesting {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// What Go's `net/http` writes to a plain HTTP request on a TLS port, and
/// closes: a kube-apiserver answers so.
pub(crate) const PLAIN_ON_TLS_PORT: &[u8] =
    b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// Whether the first bytes of a connection look like an HTTP request
/// (Go's `tlsRecordHeaderLooksLikeHTTP`).
pub(crate) fn looks_like_http(first: &[u8]) -> bool {
    [&b"GET /"[..], b"HEAD ", b"POST ", b"PUT /", b"OPTIO"]
        .iter()
        .any(|start| first.starts_with(start))
}
