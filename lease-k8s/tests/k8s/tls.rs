//! The **fake** API server over HTTPS, authenticating every request as a
//! kube-apiserver does (a client certificate its client CA signed, or a
//! bearer token it knows; else 401), reached through kubeconfigs written
//! as users write them: the suite runs over a client certificate, a bearer
//! token (inline, `tokenFile`) and the `-data` forms hold leases too, and
//! each way the connection can fail is an error naming cause and fix.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use leasehold_conformance::tls::{Pair, Pki};
use leasehold_conformance::{Target, ensure, trials};
use leasehold_core::{Floor, Release, Renewal, Strategy, Token};
use leasehold_k8s::{KubeConfig, KubeError, KubeStrategy};
use leasehold_k8s_fake::{FakeApiServer, Https};

use super::{FakeBackend, new_pool};

type Outcome = Result<(), String>;

/// The row of the suite on the fake over HTTPS with a client certificate:
/// it says "fake".
pub(crate) const MTLS_LABEL: &str = "k8s (fake API server, mTLS)";

/// The user the fake knows the token by.
const TOKEN_USER: &str = "leasehold-token-user";

/// Registers the HTTPS tests on `target`.
pub(crate) fn register(target: Target) -> Target {
    trials!(target;
        a_bearer_token_holds_renews_and_releases,
        token_file_and_data_fields_are_read,
        a_server_certificate_of_another_ca_is_refused,
        an_expired_or_misnamed_server_certificate_is_refused,
        a_client_certificate_of_another_ca_is_unauthorized,
        a_wrong_or_missing_token_is_unauthorized_and_never_shown,
        plain_http_to_the_https_server_says_use_https,
        kubeconfig_files_that_cannot_be_read_are_named,
    )
}

pub(crate) fn pki() -> Result<&'static Pki, String> {
    Pki::shared()
}

/// This process's token the fakes accept.
fn token() -> &'static str {
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN.get_or_init(|| format!("lh-token-{}", Token::random().to_hex()))
}

/// A fake over HTTPS that shows `server`'s certificate, accepts client
/// certificates the test CA signed and [`token`].
pub(crate) fn https_fake(server: &Pair) -> Result<FakeApiServer, String> {
    let pki = pki()?;
    FakeApiServer::start_https(
        Https::new(&server.cert, &server.key)
            .client_ca(&pki.ca)
            .token(token(), TOKEN_USER),
    )
    .map_err(|e| format!("the fake API server over HTTPS: {e}"))
}

/// Kubeconfig files as users write them: one cluster, one user, one
/// context (namespace `default`), in a directory of their own, removed
/// with this value.
pub(crate) struct Kubeconfig {
    dir: PathBuf,
    server: String,
    cluster: Vec<String>,
}

impl Kubeconfig {
    /// For the API server at `server`, trusting the test CA.
    pub(crate) fn new(server: &str) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!(
            "leasehold-kubeconfig-{}-{}",
            std::process::id(),
            Token::random().to_hex()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        Ok(Self {
            dir,
            server: server.to_owned(),
            cluster: vec![format!("certificate-authority: {}", pki()?.ca.display())],
        })
    }

    /// The cluster's lines instead of `certificate-authority` of the test CA.
    fn cluster(mut self, lines: &[String]) -> Self {
        self.cluster = lines.to_vec();
        self
    }

    /// Writes the kubeconfig with the user's `lines`.
    fn write(&self, name: &str, user: &[String]) -> Result<PathBuf, String> {
        let indent = |lines: &[String]| {
            lines
                .iter()
                .map(|l| format!("    {l}\n"))
                .collect::<String>()
        };
        let user = if user.is_empty() {
            "    {}\n".to_owned()
        } else {
            indent(user)
        };
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             {}users:\n- name: app\n  user:\n{user}contexts:\n- name: fake\n  context:\n    \
             cluster: fake\n    user: app\n    namespace: default\ncurrent-context: fake\n",
            self.server,
            indent(&self.cluster),
        );
        let path = self.dir.join(name);
        std::fs::write(&path, yaml).map_err(|e| e.to_string())?;
        Ok(path)
    }

    /// The test client certificate and key, as files.
    pub(crate) fn client_certificate(&self) -> Result<PathBuf, String> {
        self.certificate("client.yaml", &pki()?.client)
    }

    fn certificate(&self, name: &str, pair: &Pair) -> Result<PathBuf, String> {
        self.write(
            name,
            &[
                format!("client-certificate: {}", pair.cert.display()),
                format!("client-key: {}", pair.key.display()),
            ],
        )
    }
}

impl Drop for Kubeconfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The client configuration of the kubeconfig at `path`, with its server
/// moved to `addr` (a fault proxy): TLS still verifies the server's
/// certificate, which names 127.0.0.1.
pub(crate) async fn kube_config_at(
    path: &Path,
    addr: SocketAddr,
) -> Result<leasehold_k8s::kube::Config, String> {
    let file =
        leasehold_k8s::kube::config::Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
    let mut config = leasehold_k8s::kube::Config::from_custom_kubeconfig(file, &Default::default())
        .await
        .map_err(|e| e.to_string())?;
    config.cluster_url = format!("https://{addr}")
        .parse()
        .map_err(|e| format!("proxy URL: {e}"))?;
    Ok(config)
}

fn config(path: &Path) -> KubeConfig {
    KubeConfig::from_kubeconfig(path)
        .namespace("default")
        .op_timeout(Duration::from_secs(5))
        .takeover_margin(Duration::from_millis(200))
}

/// Connects through the kubeconfig at `path`; the error, or a failure when
/// it connected.
async fn refused(path: &Path) -> Result<KubeError, String> {
    match KubeStrategy::connect(config(path)).await {
        Ok(_) => Err(format!("{} connected", path.display())),
        Err(e) => Ok(e),
    }
}

/// `text` holds each of `needles`; it is printed, for the record.
fn says(text: &str, needles: &[&str]) -> Outcome {
    for needle in needles {
        ensure!(text.contains(needle), "{needle:?} missing from: {text}");
    }
    eprintln!("refused, as it should be: {text}");
    Ok(())
}

/// One grant held, renewed and released through `path`.
async fn holds(path: &Path) -> Outcome {
    let s = KubeStrategy::connect(config(path))
        .await
        .map_err(|e| e.to_string())?;
    let pool = new_pool(&s, 2, Duration::from_secs(30)).await?;
    let grant = s
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    let renewed = s.renew(&pool, &grant, Floor::NONE).await;
    ensure!(
        matches!(renewed, Renewal::Renewed { .. }),
        "renewal: {renewed:?}"
    );
    let released = s.release(&pool, &grant, Floor::NONE).await;
    ensure!(released == Release::Released, "release: {released:?}");
    Ok(())
}

/// Base64 of `bytes` (standard alphabet, padded), for the `-data` fields.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64_file(path: &Path) -> Result<String, String> {
    std::fs::read(path)
        .map(|bytes| base64(&bytes))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// A kubeconfig whose user has only a bearer token (`token:`) holds,
/// renews and releases on the row's fake.
async fn a_bearer_token_holds_renews_and_releases(b: Arc<FakeBackend>) -> Outcome {
    let kubeconfig = Kubeconfig::new(&b.fake.url())?;
    let path = kubeconfig.write("token.yaml", &[format!("token: {}", token())])?;
    holds(&path).await
}

/// `tokenFile`, `certificate-authority-data` and the client certificate's
/// `-data` forms are read as kube reads them.
async fn token_file_and_data_fields_are_read(b: Arc<FakeBackend>) -> Outcome {
    let pki = pki()?;
    let kubeconfig = Kubeconfig::new(&b.fake.url())?.cluster(&[format!(
        "certificate-authority-data: {}",
        base64_file(&pki.ca)?
    )]);
    let token_file = kubeconfig.dir.join("token");
    std::fs::write(&token_file, token()).map_err(|e| e.to_string())?;
    let by_file = kubeconfig.write(
        "token-file.yaml",
        &[format!("tokenFile: {}", token_file.display())],
    )?;
    holds(&by_file).await?;
    let by_data = kubeconfig.write(
        "data.yaml",
        &[
            format!(
                "client-certificate-data: {}",
                base64_file(&pki.client.cert)?
            ),
            format!("client-key-data: {}", base64_file(&pki.client.key)?),
        ],
    )?;
    holds(&by_data).await
}

/// A kubeconfig that trusts only another CA refuses the server.
async fn a_server_certificate_of_another_ca_is_refused(b: Arc<FakeBackend>) -> Outcome {
    let pki = pki()?;
    let kubeconfig = Kubeconfig::new(&b.fake.url())?
        .cluster(&[format!("certificate-authority: {}", pki.other_ca.display())]);
    let path = kubeconfig.client_certificate()?;
    let e = refused(&path).await?;
    ensure!(matches!(e, KubeError::Tls { .. }), "not a TLS error: {e:?}");
    says(
        &e.to_string(),
        &[
            "is not signed by a CA this client trusts",
            &format!("the certificate-authority {}", pki.other_ca.display()),
            "set the cluster's certificate-authority",
        ],
    )
}

/// A fake that shows an expired certificate, and one that shows a
/// certificate for another host name: both refused, each saying which.
async fn an_expired_or_misnamed_server_certificate_is_refused(_b: Arc<FakeBackend>) -> Outcome {
    let pki = pki()?;
    let expired = https_fake(&pki.expired)?;
    let kubeconfig = Kubeconfig::new(&expired.url())?;
    let e = refused(&kubeconfig.client_certificate()?).await?;
    ensure!(matches!(e, KubeError::Tls { .. }), "not a TLS error: {e:?}");
    says(
        &e.to_string(),
        &[
            "the API server's certificate at 127.0.0.1 expired on 2021-01-01",
            "renew the API server's serving certificate",
        ],
    )?;
    let misnamed = https_fake(&pki.wrong_host)?;
    let kubeconfig = Kubeconfig::new(&misnamed.url())?;
    let e = refused(&kubeconfig.client_certificate()?).await?;
    ensure!(matches!(e, KubeError::Tls { .. }), "not a TLS error: {e:?}");
    says(
        &e.to_string(),
        &[
            "is not valid for the host name \"127.0.0.1\" of the kubeconfig's server",
            "it names wrong.invalid",
            "tls-server-name",
        ],
    )
}

/// A client certificate another CA signed is refused with 401, as a
/// kube-apiserver refuses it; the error names the certificate sent.
async fn a_client_certificate_of_another_ca_is_unauthorized(b: Arc<FakeBackend>) -> Outcome {
    let pki = pki()?;
    let kubeconfig = Kubeconfig::new(&b.fake.url())?;
    let path = kubeconfig.certificate("stranger.yaml", &pki.stranger)?;
    let e = refused(&path).await?;
    ensure!(
        matches!(e, KubeError::Unauthorized { .. }),
        "not a 401 error: {e:?}"
    );
    says(
        &e.to_string(),
        &[
            "does not accept this client's credentials (401 Unauthorized",
            &format!("the client certificate {}", pki.stranger.cert.display()),
            "signed by the cluster's client CA",
        ],
    )
}

/// A wrong token and no credentials at all are refused with 401; the
/// error says what was sent and never shows the token.
async fn a_wrong_or_missing_token_is_unauthorized_and_never_shown(b: Arc<FakeBackend>) -> Outcome {
    let kubeconfig = Kubeconfig::new(&b.fake.url())?;
    let wrong = format!("wrong-{}", token());
    for (name, user, sent) in [
        (
            "wrong-token.yaml",
            vec![format!("token: {wrong}")],
            "this client sent a bearer token (token)",
        ),
        (
            "nothing.yaml",
            Vec::new(),
            "this client sent no credentials",
        ),
    ] {
        let e = refused(&kubeconfig.write(name, &user)?).await?;
        ensure!(
            matches!(e, KubeError::Unauthorized { .. }),
            "not a 401 error: {e:?}"
        );
        for shown in [e.to_string(), format!("{e:?}")] {
            ensure!(!shown.contains(&wrong), "the token shows in {shown}");
        }
        says(
            &e.to_string(),
            &[sent, "or a valid bearer token (token or tokenFile"],
        )?;
    }
    Ok(())
}

/// `http://` to the HTTPS server: the fake answers the plain request as a
/// kube-apiserver does (400, "Client sent an HTTP request to an HTTPS
/// server."), and the error says the server takes HTTPS and to write
/// https://. Nothing falls back to plain HTTP.
async fn plain_http_to_the_https_server_says_use_https(b: Arc<FakeBackend>) -> Outcome {
    let plain = b.fake.url().replacen("https://", "http://", 1);
    let kubeconfig = Kubeconfig::new(&plain)?.cluster(&[]);
    let path = kubeconfig.client_certificate()?;
    let e = refused(&path).await?;
    ensure!(matches!(e, KubeError::Tls { .. }), "not a TLS error: {e:?}");
    says(
        &e.to_string(),
        &[
            &format!("the API server at {} takes HTTPS only", b.fake.addr()),
            "write https:// in the kubeconfig's server",
        ],
    )?;
    let url = KubeConfig::from_url(&format!("k8s://{}/default", b.fake.addr()))
        .map_err(|e| e.to_string())?;
    match KubeStrategy::connect(url.op_timeout(Duration::from_secs(5))).await {
        Err(e @ KubeError::Tls { .. }) => says(&e.to_string(), &["takes HTTPS only"]),
        Err(e) => Err(format!("k8s:// to the HTTPS server: not a TLS error: {e}")),
        Ok(_) => Err("k8s:// connected to the HTTPS server".into()),
    }
}

/// A certificate authority or token file the kubeconfig names but that
/// cannot be read: a final error naming the kubeconfig and the file.
async fn kubeconfig_files_that_cannot_be_read_are_named(b: Arc<FakeBackend>) -> Outcome {
    let kubeconfig = Kubeconfig::new(&b.fake.url())?;
    let missing = kubeconfig.dir.join("missing");
    let without_ca = Kubeconfig::new(&b.fake.url())?
        .cluster(&[format!("certificate-authority: {}", missing.display())]);
    let no_ca = without_ca.client_certificate()?;
    let no_token = kubeconfig.write(
        "no-token-file.yaml",
        &[format!("tokenFile: {}", missing.display())],
    )?;
    for (path, entry) in [(no_ca, "certificate authority"), (no_token, "token file")] {
        let e = refused(&path).await?;
        ensure!(
            matches!(e, KubeError::Kubeconfig { .. }),
            "not a kubeconfig error: {e:?}"
        );
        says(
            &e.to_string(),
            &[
                &format!("the kubeconfig {} cannot be used", path.display()),
                entry,
                &missing.display().to_string(),
            ],
        )?;
    }
    Ok(())
}
