//! Certificates for the TLS-only test servers, made per run with `rcgen`
//! (no program needed): a CA that signs a server certificate and a client
//! certificate, and the material of each way TLS should fail — another CA,
//! a client certificate that CA signed, an expired server certificate and
//! one for another host name.
//!
//! ```
//! use leasehold_conformance::tls::{CLIENT_NAME, Pki};
//!
//! let dir = std::env::temp_dir().join(format!("pki-doc-{}", std::process::id()));
//! let pki = Pki::generate(&dir)?;
//! assert!(std::fs::read_to_string(&pki.ca)?.starts_with("-----BEGIN CERTIFICATE-----"));
//! assert!(std::fs::read_to_string(&pki.client.key)?.contains("PRIVATE KEY"));
//! assert_eq!(CLIENT_NAME, "leasehold");
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Every server certificate names `localhost` and `127.0.0.1`, so a client
//! that verifies the host name (`sslmode=verify-full`, `VERIFY_IDENTITY`,
//! rustls) accepts either address. Keys are ECDSA P-256 in PKCS #8 PEM,
//! which OpenSSL (PostgreSQL, MariaDB, Redis), Go (etcd) and rustls all read.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

/// The common name of the client certificate, and so the user name a server
/// that maps certificates to users (PostgreSQL `cert`, MariaDB `REQUIRE
/// SUBJECT`) knows the client by.
pub const CLIENT_NAME: &str = "leasehold";

/// The common name of the lease user's client certificate
/// ([`Pki::lease_client`]): a user with the lease privileges only, known
/// by its certificate like [`CLIENT_NAME`].
pub const LEASE_CLIENT_NAME: &str = "leasehold_lease";

/// A certificate and its private key, as PEM files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pair {
    /// The certificate.
    pub cert: PathBuf,
    /// Its private key (PKCS #8).
    pub key: PathBuf,
}

/// The files of one run's certificates (see the [module docs](self)).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Pki {
    /// The directory that holds every file.
    pub dir: PathBuf,
    /// The CA every server and the client trust.
    pub ca: PathBuf,
    /// The servers' certificate: `localhost` and `127.0.0.1`, signed by
    /// [`Pki::ca`], for server authentication.
    pub server: Pair,
    /// The client's certificate: common name [`CLIENT_NAME`], signed by
    /// [`Pki::ca`], for client authentication.
    pub client: Pair,
    /// The lease user's certificate: common name [`LEASE_CLIENT_NAME`],
    /// signed by [`Pki::ca`], for client authentication.
    pub lease_client: Pair,
    /// Another CA, which signed nothing a server presents: a client that
    /// trusts only it must refuse every server ("wrong CA").
    pub other_ca: PathBuf,
    /// A client certificate of [`CLIENT_NAME`] signed by
    /// [`Pki::other_ca`]: a server must refuse it.
    pub stranger: Pair,
    /// A server certificate signed by [`Pki::ca`] for `localhost` and
    /// `127.0.0.1` that expired on 2021-01-01.
    pub expired: Pair,
    /// A server certificate signed by [`Pki::ca`] for `wrong.invalid`
    /// only: a client that verifies the host name must refuse it.
    pub wrong_host: Pair,
}

impl Pki {
    /// Makes every certificate and key into `dir` (created if missing).
    /// Key files are readable by their owner only.
    ///
    /// # Errors
    /// A certificate could not be made or a file not written.
    pub fn generate(dir: &Path) -> Result<Self, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        fn err(what: &'static str) -> impl Fn(rcgen::Error) -> String {
            move |e| format!("making the {what}: {e}")
        }
        let ca = certified_ca("leasehold test CA").map_err(err("test CA"))?;
        let other = certified_ca("leasehold other CA").map_err(err("other CA"))?;
        let local = [
            SanType::DnsName("localhost".try_into().map_err(err("server names"))?),
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        ];
        let server = leaf(&ca, "localhost", &local, Use::Server, false).map_err(err("server"))?;
        let client =
            leaf(&ca, CLIENT_NAME, &[], Use::Client, false).map_err(err("client certificate"))?;
        let lease_client = leaf(&ca, LEASE_CLIENT_NAME, &[], Use::Client, false)
            .map_err(err("lease user's client certificate"))?;
        let stranger = leaf(&other, CLIENT_NAME, &[], Use::Client, false)
            .map_err(err("other CA's client certificate"))?;
        let expired = leaf(&ca, "localhost", &local, Use::Server, true)
            .map_err(err("expired certificate"))?;
        let elsewhere = [SanType::DnsName(
            "wrong.invalid".try_into().map_err(err("other host name"))?,
        )];
        let wrong_host = leaf(&ca, "wrong.invalid", &elsewhere, Use::Server, false)
            .map_err(err("other host's certificate"))?;
        let write = |name: &str, text: &str, private: bool| -> Result<PathBuf, String> {
            let path = dir.join(name);
            std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
            if private {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
            Ok(path)
        };
        let pair = |name: &str, (cert, key): (String, String)| -> Result<Pair, String> {
            Ok(Pair {
                cert: write(&format!("{name}.crt"), &cert, false)?,
                key: write(&format!("{name}.key"), &key, true)?,
            })
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            ca: write("ca.crt", &ca.pem(), false)?,
            other_ca: write("other-ca.crt", &other.pem(), false)?,
            server: pair("server", server)?,
            client: pair("client", client)?,
            lease_client: pair("lease-client", lease_client)?,
            stranger: pair("stranger", stranger)?,
            expired: pair("expired", expired)?,
            wrong_host: pair("wrong-host", wrong_host)?,
        })
    }

    /// These certificates, with `server` as the pair a server presents
    /// instead of [`Pki::server`] (for a server that presents
    /// [`Pki::expired`] or [`Pki::wrong_host`]).
    pub fn presenting(&self, server: &Pair) -> Self {
        Self {
            server: server.clone(),
            ..self.clone()
        }
    }

    /// This process's certificates, made once into a directory of its own
    /// under the system's temp dir (left there for the servers still
    /// reading them; a few kilobytes).
    ///
    /// # Errors
    /// As [`Pki::generate`] (the error is kept and returned to every caller).
    pub fn shared() -> Result<&'static Self, String> {
        static SHARED: OnceLock<Result<Pki, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| {
                let dir =
                    std::env::temp_dir().join(format!("leasehold-pki-{}", std::process::id()));
                Self::generate(&dir)
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// What a leaf certificate is for.
#[derive(Clone, Copy)]
enum Use {
    Server,
    Client,
}

fn certified_ca(name: &str) -> Result<CertifiedIssuer<'static, KeyPair>, rcgen::Error> {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate()?)
}

/// A certificate signed by `issuer` and its key, as PEM text.
fn leaf(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    name: &str,
    names: &[SanType],
    purpose: Use,
    expired: bool,
) -> Result<(String, String), rcgen::Error> {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.subject_alt_names = names.to_vec();
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![match purpose {
        Use::Server => ExtendedKeyUsagePurpose::ServerAuth,
        Use::Client => ExtendedKeyUsagePurpose::ClientAuth,
    }];
    params.use_authority_key_identifier_extension = true;
    if expired {
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    }
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each file is where the struct says, and keys are private.
    #[test]
    fn every_file_is_written() {
        use std::os::unix::fs::PermissionsExt;
        let pki = Pki::shared().expect("certificates");
        let pairs = [
            &pki.server,
            &pki.client,
            &pki.stranger,
            &pki.expired,
            &pki.wrong_host,
        ];
        for file in [&pki.ca, &pki.other_ca]
            .into_iter()
            .chain(pairs.iter().map(|p| &p.cert))
        {
            let text = std::fs::read_to_string(file).expect("certificate file");
            assert!(text.starts_with("-----BEGIN CERTIFICATE-----"), "{file:?}");
        }
        for pair in pairs {
            let mode = std::fs::metadata(&pair.key)
                .expect("key")
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "{:?} is readable by others", pair.key);
        }
        assert_ne!(
            std::fs::read(&pki.ca).ok(),
            std::fs::read(&pki.other_ca).ok()
        );
    }
}
