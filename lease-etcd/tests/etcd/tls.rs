//! Mutual TLS, on a server that takes TLS connections only and asks every
//! client for a certificate (`--client-cert-auth`): the loss watch works
//! over it, and each way TLS can fail is refused at connect with an error
//! that names the cause and the fix.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_conformance::servers::{self, ServerKind};
use leasehold_conformance::tls::{Pair, Pki};
use leasehold_conformance::{Target, ensure, trials};
use leasehold_etcd::{EtcdConfig, EtcdError, EtcdStrategy};

use super::EtcdBackend;

/// The report label of the suite on etcd 3.5 over mutual TLS.
pub(crate) const MTLS_LABEL: &str = "etcd35-mtls";

/// Registers the TLS tests, and the watch tests over TLS, on `target`.
pub(crate) fn register(target: Target) -> Target {
    use super::tests::{
        guard_closes_the_manager_gate_when_the_watch_sees_a_deletion, watch_reports_a_deleted_key,
        watch_survives_dropped_connections_then_reports_loss,
    };
    trials!(target;
        watch_reports_a_deleted_key,
        watch_survives_dropped_connections_then_reports_loss,
        guard_closes_the_manager_gate_when_the_watch_sees_a_deletion,
        the_server_is_verified_and_shows_no_key,
        plain_text_to_a_tls_only_server_says_use_etcds,
        a_server_certificate_of_another_ca_is_refused,
        a_client_certificate_of_another_ca_is_refused_by_the_server,
        a_missing_client_certificate_is_refused_by_the_server,
        an_expired_or_misnamed_server_certificate_is_refused,
    )
}

fn pki() -> Result<&'static Pki, String> {
    Pki::shared()
}

fn addr(b: &EtcdBackend) -> Result<SocketAddr, String> {
    b.addr.ok_or_else(|| format!("no address in {}", b.url))
}

/// `etcds://ADDR` with `ca=`, and `cert=` and `key=` when `client` is given.
fn url(addr: SocketAddr, ca: &Path, client: Option<&Pair>) -> String {
    let mut url = format!("etcds://{addr}?ca={}", ca.display());
    if let Some(pair) = client {
        url.push_str(&format!(
            "&cert={}&key={}",
            pair.cert.display(),
            pair.key.display()
        ));
    }
    url
}

/// Connects with `url`: the error, or a failure when it connected.
async fn refused(url: &str) -> Result<EtcdError, String> {
    let config = EtcdConfig::from_url(url).map_err(|e| e.to_string())?;
    match EtcdStrategy::connect(config.op_timeout(Duration::from_secs(5))).await {
        Ok(_) => Err(format!("{url} connected")),
        Err(e) => Ok(e),
    }
}

/// `e` is the TLS error and its text holds every one of `needles`.
fn says(e: &EtcdError, needles: &[&str]) -> Result<(), String> {
    ensure!(matches!(e, EtcdError::Tls { .. }), "not a TLS error: {e:?}");
    let text = e.to_string();
    for needle in needles {
        ensure!(text.contains(needle), "{needle:?} missing from: {text}");
    }
    eprintln!("refused, as it should be: {text}");
    Ok(())
}

/// The row's own URL connects and acquires, and neither the configuration
/// nor the strategy shows what the key file holds.
async fn the_server_is_verified_and_shows_no_key(b: Arc<EtcdBackend>) -> Result<(), String> {
    use leasehold_core::{Floor, Strategy};
    let config = b.config()?;
    let leases = EtcdStrategy::connect(config.clone())
        .await
        .map_err(|e| e.to_string())?;
    let pool = leasehold_conformance::fresh_pool(1, Duration::from_secs(10))?;
    super::declare_new(&leases, &pool).await?;
    let grant = leases
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    leases.release(&pool, &grant, Floor::NONE).await;
    let key = std::fs::read_to_string(&pki()?.client.key).map_err(|e| e.to_string())?;
    for shown in [
        format!("{config:?}"),
        format!("{leases:?}"),
        leases.identity(),
    ] {
        for line in key.lines().filter(|l| !l.starts_with("-----")) {
            ensure!(!shown.contains(line), "key material in {shown}");
        }
    }
    Ok(())
}

/// `etcd://` to a server that takes TLS only: the plain-text connection
/// breaks, and the error says the server speaks TLS and to write etcds://.
async fn plain_text_to_a_tls_only_server_says_use_etcds(b: Arc<EtcdBackend>) -> Result<(), String> {
    let addr = addr(&b)?;
    let e = refused(&format!("etcd://{addr}")).await?;
    says(
        &e,
        &[
            &format!("the server at {addr} takes TLS only"),
            "write etcds://",
            "ca=",
        ],
    )
}

/// A client that trusts only another CA refuses the server.
async fn a_server_certificate_of_another_ca_is_refused(b: Arc<EtcdBackend>) -> Result<(), String> {
    let p = pki()?;
    let e = refused(&url(addr(&b)?, &p.other_ca, Some(&p.client))).await?;
    says(
        &e,
        &[
            "is not signed by a CA this client trusts",
            &format!("the CA in ca={}", p.other_ca.display()),
            "give ca= the certificate of the CA that signed the etcd server's certificate",
        ],
    )
}

/// The server refuses a client certificate another CA signed.
async fn a_client_certificate_of_another_ca_is_refused_by_the_server(
    b: Arc<EtcdBackend>,
) -> Result<(), String> {
    let p = pki()?;
    let e = refused(&url(addr(&b)?, &p.ca, Some(&p.stranger))).await?;
    says(
        &e,
        &[
            &format!(
                "refused the client certificate cert={}",
                p.stranger.cert.display()
            ),
            "signed by the CA the server trusts for clients (its --trusted-ca-file)",
        ],
    )
}

/// Without a client certificate, a server with `--client-cert-auth`
/// refuses the connection; the error says to add `cert=` and `key=`.
async fn a_missing_client_certificate_is_refused_by_the_server(
    b: Arc<EtcdBackend>,
) -> Result<(), String> {
    let p = pki()?;
    let e = refused(&url(addr(&b)?, &p.ca, None)).await?;
    says(
        &e,
        &[
            "asks every client for a certificate (--client-cert-auth) and this client has none",
            "add the client certificate and its key to the URL",
            "cert=",
            "key=",
        ],
    )
}

/// A private etcd shows an expired certificate, then (etcd reads its
/// certificate files again for every new connection) one for another host
/// name: the client refuses both, and says which and what to do.
async fn an_expired_or_misnamed_server_certificate_is_refused(
    b: Arc<EtcdBackend>,
) -> Result<(), String> {
    let p = pki()?;
    let server = Presenting::start(b.kind, p, &p.expired)?;
    let e = refused(&url(server.addr, &p.ca, Some(&p.client))).await?;
    says(
        &e,
        &[
            "the server's certificate at 127.0.0.1 expired on 2021-01-01",
            "renew the etcd server's certificate",
        ],
    )?;
    server.show(&p.wrong_host)?;
    let e = refused(&url(server.addr, &p.ca, Some(&p.client))).await?;
    says(
        &e,
        &[
            "is not valid for the host name \"127.0.0.1\" in the URL",
            "wrong.invalid",
            "connect by a name the certificate lists",
        ],
    )
}

/// A one-member etcd that takes TLS only and shows the certificate in
/// `shown.crt` and `shown.key` of its directory; killed and removed on drop.
struct Presenting {
    child: Child,
    dir: PathBuf,
    addr: SocketAddr,
}

impl Presenting {
    fn start(kind: ServerKind, pki: &Pki, pair: &Pair) -> Result<Self, String> {
        let bin = servers::find_binary(kind).ok_or_else(|| format!("no {kind} binary"))?;
        let [port, peer] = <[u16; 2]>::try_from(servers::free_ports(2)?)
            .map_err(|_| "two free ports".to_owned())?;
        let dir = std::env::temp_dir().join(format!(
            "leasehold-etcd-presenting-{}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        // Shown before the start: etcd checks the files as it starts.
        Self::copy(&dir, pair)?;
        let log = std::fs::File::create(dir.join("etcd.log")).map_err(|e| e.to_string())?;
        let child = Command::new(&bin)
            .arg("--name=p0")
            .arg(format!("--data-dir={}", dir.join("data").display()))
            .arg(format!("--listen-client-urls=https://127.0.0.1:{port}"))
            .arg(format!("--advertise-client-urls=https://127.0.0.1:{port}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
            ))
            .arg(format!("--initial-cluster=p0=http://127.0.0.1:{peer}"))
            .arg(format!("--cert-file={}", dir.join("shown.crt").display()))
            .arg(format!("--key-file={}", dir.join("shown.key").display()))
            .arg(format!("--trusted-ca-file={}", pki.ca.display()))
            .arg("--client-cert-auth")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        let server = Self {
            child,
            dir,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect_timeout(&server.addr, Duration::from_millis(200))
            .is_err()
        {
            if Instant::now() > deadline {
                return Err(format!(
                    "etcd on {} did not open its port: {}",
                    server.addr,
                    std::fs::read_to_string(server.dir.join("etcd.log")).unwrap_or_default()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(server)
    }

    /// Copies `pair` to `shown.crt` and `shown.key`, each by a rename, so
    /// that etcd never reads half a file.
    fn copy(dir: &Path, pair: &Pair) -> Result<(), String> {
        for (from, name) in [(&pair.cert, "shown.crt"), (&pair.key, "shown.key")] {
            let staged = dir.join(format!("{name}.new"));
            std::fs::copy(from, &staged).map_err(|e| format!("{}: {e}", from.display()))?;
            std::fs::rename(&staged, dir.join(name)).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Shows `pair` to every new connection from now on.
    fn show(&self, pair: &Pair) -> Result<(), String> {
        Self::copy(&self.dir, pair)
    }
}

impl Drop for Presenting {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
