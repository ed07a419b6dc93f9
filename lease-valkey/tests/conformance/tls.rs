//! The TLS row's own tests, on its TLS-only server (Debian's Redis 7 with
//! `--tls-auth-clients yes`) and on TLS servers of their own presenting the
//! certificates each failure needs: every way TLS must fail is refused at
//! connect with a typed error that names the cause and the fix, a TLS URL
//! never falls back to plain text, and a verified connection says so.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::ClientLike;
use leasehold_conformance::tls::Pki;
use leasehold_conformance::{Outcome, Target, ensure, fresh_pool, trials};
use leasehold_core::{DurabilityPolicy, Floor, Operate, Release, Strategy, Verdict};
use leasehold_valkey::{TlsFailure, ValkeyConfig, ValkeyError, ValkeyStrategy};

use super::{OwnServer, Valkey, cmd};

/// Long enough for a handshake on a loaded machine; every failure below is
/// answered by the server well before it.
const OP_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS tests, added to the TLS row.
pub(super) fn trials(t: Target) -> Target {
    trials!(t;
        a_verified_connection_says_so_and_reads_the_server,
        host_names_and_ip_addresses_are_verified,
        plain_text_to_a_tls_only_server_names_rediss,
        a_server_certificate_from_another_ca_is_refused,
        an_expired_server_certificate_is_refused,
        a_server_certificate_for_another_host_is_refused,
        a_client_certificate_the_server_does_not_trust_is_refused,
        a_missing_client_certificate_is_refused,
        a_tls_url_never_falls_back_to_plain_text,
        a_tls_sentinel_leads_to_the_tls_primary,
        a_tls_cluster_is_verified_node_by_node,
        a_password_goes_over_tls_and_a_wrong_one_is_no_tls_failure,
        a_client_certificate_rotated_in_place_is_presented_on_reconnect,
    )
}

fn pki() -> Result<&'static Pki, String> {
    Pki::shared()
}

/// `rediss://HOST:PORT` with `query` (the TLS options).
fn url(host: &str, port: u16, query: &str) -> String {
    format!("rediss://{host}:{port}?{query}")
}

/// The options of a client that trusts `ca` and presents the run's client
/// certificate.
fn with_client(ca: &std::path::Path) -> Result<String, String> {
    let pki = pki()?;
    Ok(format!(
        "ca={}&cert={}&key={}",
        ca.display(),
        pki.client.cert.display(),
        pki.client.key.display()
    ))
}

/// For a TLS URL to a plain-text server: its hello can go unanswered until
/// the operation timeout (the server waits for the end of what it takes for
/// an inline command), and the plain-text `PING` after it is answered at
/// once on loopback. Shorter than [`OP_TIMEOUT`], which three tests would
/// otherwise each wait out.
const TO_PLAIN_TIMEOUT: Duration = Duration::from_secs(5);

async fn connect(url: &str) -> Result<ValkeyStrategy, ValkeyError> {
    connect_within(url, OP_TIMEOUT).await
}

async fn connect_within(url: &str, timeout: Duration) -> Result<ValkeyStrategy, ValkeyError> {
    let config = ValkeyConfig::from_url(url)?
        .durability(DurabilityPolicy::Throwaway)
        .op_timeout(timeout);
    ValkeyStrategy::connect(config).await
}

/// Expects `connect` to fail with the TLS failure `want` names, in a
/// message that holds each of `needles` (the cause and the fix).
fn expect_tls(
    r: Result<ValkeyStrategy, ValkeyError>,
    want: &str,
    is: impl Fn(&TlsFailure) -> bool,
    needles: &[&str],
) -> Outcome {
    let e = match r {
        Ok(s) => return Err(format!("{want}: connected to {}", s.describe())),
        Err(e) => e,
    };
    let msg = e.to_string();
    match &e {
        ValkeyError::Tls { failure, .. } if is(failure) => {}
        _ => return Err(format!("{want}: another error: {msg} ({e:?})")),
    }
    for needle in needles {
        ensure!(
            msg.contains(needle),
            "{want}: {needle:?} missing from: {msg}"
        );
    }
    Ok(())
}

/// The row's URL verifies the server against the run's CA and presents the
/// client certificate: the strategy says so (`tls()`, `describe`), the
/// probes at connect read the server over TLS (`INFO`, `CONFIG GET`: the
/// persistence settings are known), and the scripts loaded over TLS grant
/// and release.
async fn a_verified_connection_says_so_and_reads_the_server(b: Arc<Valkey>) -> Outcome {
    let pki = pki()?;
    let s = connect(&b.url).await.map_err(|e| e.to_string())?;
    let tls = s.tls().ok_or("a rediss:// connection without TLS info")?;
    ensure!(
        tls.ca() == Some(pki.ca.as_path()) && tls.system_roots() == 0,
        "trusted roots: {tls}"
    );
    ensure!(
        tls.client_cert() == Some(pki.client.cert.as_path()) && tls.client_cert_asked(),
        "client certificate: {tls}"
    );
    ensure!(
        tls.protocol() == Some("TLS 1.3"),
        "protocol {:?}",
        tls.protocol()
    );
    let described = s.describe();
    let want = format!(
        "{} over TLS 1.3, server verified (chain and host name) against the CA in {}, client \
         certificate {}",
        s.server(),
        pki.ca.display(),
        pki.client.cert.display()
    );
    ensure!(described == want, "describe: {described}\n  want: {want}");
    ensure!(
        b.version.contains(&s.server().version),
        "INFO server read {} on {}",
        s.server(),
        b.version
    );
    let kept = s.persistence();
    ensure!(
        kept.appendonly == Some(false) && kept.maxmemory_policy.as_deref() == Some("noeviction"),
        "CONFIG GET over TLS read {kept:?}"
    );
    // Doctor: the server on its line, the TLS on the `tls` line.
    let checks = s.checks().await;
    let server = s.server().to_string();
    let tls_part = want
        .strip_prefix(&format!("{server} over "))
        .unwrap_or(&want);
    ensure!(
        checks
            .iter()
            .any(|c| c.name == "server" && c.verdict == Verdict::Ok && c.detail == server)
            && checks
                .iter()
                .any(|c| c.name == "tls" && c.verdict == Verdict::Ok && c.detail == tls_part),
        "checks {checks:?}"
    );
    ensure!(
        checks
            .iter()
            .all(|c| !c.detail.contains("disabled or denied")),
        "checks {checks:?}"
    );
    let p = fresh_pool(2, Duration::from_secs(30))?;
    let g = s
        .acquire(&p, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    cmd(&s, "SCRIPT", vec!["FLUSH".into()]).await?;
    ensure!(
        s.release(&p, &g, Floor::NONE).await == Release::Released,
        "release after SCRIPT FLUSH over TLS"
    );
    Ok(())
}

/// The server's certificate names `localhost` and `127.0.0.1`: a URL with
/// either host is verified and connects.
async fn host_names_and_ip_addresses_are_verified(b: Arc<Valkey>) -> Outcome {
    let pki = pki()?;
    for host in ["localhost", "127.0.0.1"] {
        let s = connect(&url(host, b.addr.port(), &with_client(&pki.ca)?))
            .await
            .map_err(|e| format!("{host}: {e}"))?;
        ensure!(s.tls().is_some(), "{host}: no TLS");
    }
    Ok(())
}

/// A plain-text URL to the TLS-only server (which resets the connection)
/// is refused, and the message says to connect with `rediss://`.
async fn plain_text_to_a_tls_only_server_names_rediss(b: Arc<Valkey>) -> Outcome {
    let plain = format!("redis://127.0.0.1:{}", b.addr.port());
    expect_tls(
        connect(&plain).await,
        "plain text to a TLS-only server",
        |f| matches!(f, TlsFailure::ServerWantsTls { server } if *server == b.addr.to_string()),
        &[
            &format!(
                "cannot connect to {plain} in plain text: {} took the connection",
                b.addr
            ),
            "takes only TLS",
            "fix: connect with TLS, rediss://",
        ],
    )
}

/// A client that trusts another CA refuses the server.
async fn a_server_certificate_from_another_ca_is_refused(b: Arc<Valkey>) -> Outcome {
    let pki = pki()?;
    let other = pki.other_ca.display().to_string();
    expect_tls(
        connect(&url(
            "127.0.0.1",
            b.addr.port(),
            &with_client(&pki.other_ca)?,
        ))
        .await,
        "a server signed by another CA",
        |f| matches!(f, TlsFailure::UnknownIssuer { .. }),
        &[
            &format!("is not signed by the CA in ca={other}"),
            "fix: give the CA that signed it as ?ca=PATH",
        ],
    )
}

/// A server presenting an expired certificate (signed by the trusted CA) is
/// refused.
async fn an_expired_server_certificate_is_refused(b: Arc<Valkey>) -> Outcome {
    let pki = pki()?;
    let bin = b.binary.as_deref().ok_or("no local server binary")?;
    let own = OwnServer::start_tls(bin, &pki.expired, &pki.ca)?;
    expect_tls(
        connect(&url("127.0.0.1", own.port, &with_client(&pki.ca)?)).await,
        "an expired server certificate",
        |f| matches!(f, TlsFailure::Expired { .. }),
        &["has expired", "fix: renew the server's certificate"],
    )
}

/// A server presenting a certificate for another host name (signed by the
/// trusted CA) is refused.
async fn a_server_certificate_for_another_host_is_refused(b: Arc<Valkey>) -> Outcome {
    let pki = pki()?;
    let bin = b.binary.as_deref().ok_or("no local server binary")?;
    let own = OwnServer::start_tls(bin, &pki.wrong_host, &pki.ca)?;
    for host in ["127.0.0.1", "localhost"] {
        expect_tls(
            connect(&url(host, own.port, &with_client(&pki.ca)?)).await,
            "a certificate for another host",
            |f| matches!(f, TlsFailure::WrongHost { name, .. } if name == host),
            &[
                &format!("does not name {host}"),
                "wrong.invalid",
                "fix: connect by a host name or address the certificate names",
            ],
        )?;
    }
    Ok(())
}

/// A client certificate signed by a CA the server does not trust is
/// refused by the server, and the error names the certificate.
async fn a_client_certificate_the_server_does_not_trust_is_refused(b: Arc<Valkey>) -> Outcome {
    let pki = pki()?;
    let query = format!(
        "ca={}&cert={}&key={}",
        pki.ca.display(),
        pki.stranger.cert.display(),
        pki.stranger.key.display()
    );
    let cert = pki.stranger.cert.display().to_string();
    expect_tls(
        connect(&url("127.0.0.1", b.addr.port(), &query)).await,
        "a client certificate from another CA",
        |f| matches!(f, TlsFailure::ClientCertRefused { cert: c, .. } if *c == pki.stranger.cert),
        &[
            &format!("the server refused the client certificate {cert}"),
            "fix: use a client certificate signed by a CA the server trusts",
        ],
    )
}

/// No client certificate where the server requires one (`tls-auth-clients
/// yes`): refused, and the message says to add `cert=` and `key=`.
async fn a_missing_client_certificate_is_refused(b: Arc<Valkey>) -> Outcome {
    let pki = pki()?;
    let query = format!("ca={}", pki.ca.display());
    expect_tls(
        connect(&url("127.0.0.1", b.addr.port(), &query)).await,
        "no client certificate",
        |f| matches!(f, TlsFailure::ClientCertRequired { .. }),
        &[
            "the server asked for a client certificate, none was given",
            "fix: add &cert=PATH&key=PATH",
        ],
    )
}

/// Commands by name with their call counts (`calls`, `rejected_calls`,
/// `failed_calls` added), from `INFO commandstats`.
async fn command_counts(s: &ValkeyStrategy) -> Result<BTreeMap<String, u64>, String> {
    let info = cmd(s, "INFO", vec!["commandstats".into()]).await?;
    let text = info.as_string().ok_or("INFO commandstats: no text")?;
    Ok(text
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter_map(|l| {
            let (name, stats) = l.split_once(':')?;
            let calls = stats
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .filter(|(k, _)| k.ends_with("calls"))
                .filter_map(|(_, v)| v.parse::<u64>().ok())
                .sum();
            Some((name.to_owned(), calls))
        })
        .collect())
}

/// A `rediss://` URL with a password, pointed at a plain-text server that
/// requires that password: refused (the server answers in plain text), and
/// the server never received the password or any command of the client's
/// (no `AUTH`, no `HELLO`: only the plain-text `PING` that told the two
/// apart, and this test's own `INFO`).
async fn a_tls_url_never_falls_back_to_plain_text(b: Arc<Valkey>) -> Outcome {
    let pki = pki()?;
    let bin = b.binary.as_deref().ok_or("no local server binary")?;
    let password = "not-sent-in-plain-text";
    let own = OwnServer::start(bin, &["--requirepass", password], &[])?;
    let watcher = ValkeyStrategy::connect(
        ValkeyConfig::new(format!("redis://:{password}@127.0.0.1:{}", own.port))
            .durability(DurabilityPolicy::Throwaway)
            .op_timeout(OP_TIMEOUT),
    )
    .await
    .map_err(|e| format!("the plain-text server: {e}"))?;
    let before = command_counts(&watcher).await?;
    let tls = format!(
        "rediss://:{password}@127.0.0.1:{}?{}",
        own.port,
        with_client(&pki.ca)?
    );
    expect_tls(
        connect_within(&tls, TO_PLAIN_TIMEOUT).await,
        "a TLS URL to a plain-text server",
        |f| matches!(f, TlsFailure::ServerIsPlain { server } if *server == format!("127.0.0.1:{}", own.port)),
        &[
            "answered in plain text, not TLS",
            "nothing falls back to plain text",
            "fix: point the URL at the server's TLS port",
        ],
    )?;
    let after = command_counts(&watcher).await?;
    let changed: Vec<_> = after
        .iter()
        .filter(|(name, n)| before.get(*name) != Some(n))
        .map(|(name, n)| format!("{name}: {:?} -> {n}", before.get(name)))
        .collect();
    ensure!(
        changed
            .iter()
            .all(|c| c.starts_with("info:") || c.starts_with("ping:")),
        "the plain-text server received commands of the TLS client: {changed:?}"
    );
    ensure!(
        changed.iter().any(|c| c.starts_with("ping:")),
        "the plain-text probe's PING did not arrive ({changed:?}): the test proves nothing"
    );
    drop(watcher);
    drop(own);
    Ok(())
}

/// The path as a `&str`, for a server's arguments.
fn arg(path: &Path) -> Result<&str, String> {
    path.to_str()
        .ok_or_else(|| format!("{} is not UTF-8", path.display()))
}

/// A Sentinel of its own, TLS only like the primary it watches (which it
/// reaches over TLS with the run's client certificate), stopped on drop.
struct TlsSentinel {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl TlsSentinel {
    /// Starts `bin --sentinel` watching the primary on `primary` as
    /// `service`, with a quorum of one.
    fn start(bin: &Path, primary: u16, service: &str) -> Result<Self, String> {
        let pki = pki()?;
        let port = leasehold_conformance::servers::free_port();
        let dir = std::env::temp_dir().join(format!(
            "leasehold-valkey-sentinel-{}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let conf = dir.join("sentinel.conf");
        let text = format!(
            "port 0\ntls-port {port}\nbind 127.0.0.1\ndir {}\n\
             tls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n\
             tls-client-cert-file {}\ntls-client-key-file {}\n\
             tls-auth-clients yes\ntls-replication yes\n\
             sentinel monitor {service} 127.0.0.1 {primary} 1\n",
            arg(&dir)?,
            arg(&pki.server.cert)?,
            arg(&pki.server.key)?,
            arg(&pki.ca)?,
            arg(&pki.client.cert)?,
            arg(&pki.client.key)?,
        );
        std::fs::write(&conf, text).map_err(|e| e.to_string())?;
        let log = std::fs::File::create(dir.join("sentinel.log")).map_err(|e| e.to_string())?;
        let child = Command::new(bin)
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::from(log.try_clone().map_err(|e| e.to_string())?))
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        let mut sentinel = Self { child, port, dir };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let limit = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            let log =
                std::fs::read_to_string(sentinel.dir.join("sentinel.log")).unwrap_or_default();
            if let Ok(Some(status)) = sentinel.child.try_wait() {
                return Err(format!("the Sentinel exited with {status}: {log}"));
            }
            ensure!(
                Instant::now() < limit,
                "the Sentinel is not listening after 30 s: {log}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(sentinel)
    }
}

impl Drop for TlsSentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Through a TLS-only Sentinel to a TLS-only primary: every connection is
/// TLS with the URL's files (to the Sentinel, and to the primary it names,
/// verified against the address it announces), a claim is granted and
/// released, and the connection says it is verified TLS. The same URL with
/// a plain-text Sentinel is refused, naming it.
async fn a_tls_sentinel_leads_to_the_tls_primary(b: Arc<Valkey>) -> Outcome {
    let pki = pki()?;
    let bin = b.binary.as_deref().ok_or("no local server binary")?;
    let primary = OwnServer::start_tls(bin, &pki.server, &pki.ca)?;
    let sentinel = TlsSentinel::start(bin, primary.port, "ids")?;
    let url = format!(
        "rediss-sentinel://127.0.0.1:{}?sentinelServiceName=ids&{}",
        sentinel.port,
        with_client(&pki.ca)?
    );
    let s = connect(&url).await.map_err(|e| format!("{url}: {e}"))?;
    ensure!(
        s.describe().contains(" over TLS 1.3, server verified"),
        "{}",
        s.describe()
    );
    let p = fresh_pool(2, Duration::from_secs(30))?;
    let g = s
        .acquire(&p, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        s.release(&p, &g, Floor::NONE).await == Release::Released,
        "release through the Sentinel"
    );
    drop(s);
    let plain = OwnServer::start(bin, &[], &[])?;
    let through_plain = format!(
        "valkeys-sentinel://127.0.0.1:{}?sentinelServiceName=ids&{}",
        plain.port,
        with_client(&pki.ca)?
    );
    let at = format!("127.0.0.1:{}", plain.port);
    expect_tls(
        connect_within(&through_plain, TO_PLAIN_TIMEOUT).await,
        "a TLS Sentinel URL to a plain-text Sentinel",
        |f| matches!(f, TlsFailure::ServerIsPlain { server } if *server == at),
        &[&format!("{at} answered in plain text, not TLS")],
    )?;
    drop(sentinel);
    drop(primary);
    Ok(())
}

/// A one-node TLS Cluster (`tls-cluster yes`, announcing 127.0.0.1): a
/// `rediss-cluster://` URL reads the slot map over TLS and reaches the node
/// it names, verified against that address; a claim is granted and
/// released. The same URL to a plain-text node is refused, naming it.
async fn a_tls_cluster_is_verified_node_by_node(b: Arc<Valkey>) -> Outcome {
    let pki = pki()?;
    let bin = b.binary.as_deref().ok_or("no local server binary")?;
    let node = OwnServer::start_as(
        bin,
        Some((&pki.server, &pki.ca)),
        &[
            "--cluster-enabled",
            "yes",
            "--tls-cluster",
            "yes",
            "--cluster-announce-ip",
            "127.0.0.1",
            "--tls-client-cert-file",
            arg(&pki.client.cert)?,
            "--tls-client-key-file",
            arg(&pki.client.key)?,
        ],
        &[],
    )?;
    let direct = connect(&url("127.0.0.1", node.port, &with_client(&pki.ca)?))
        .await
        .map_err(|e| format!("the node itself: {e}"))?;
    cmd(
        &direct,
        "CLUSTER",
        vec!["ADDSLOTSRANGE".into(), "0".into(), "16383".into()],
    )
    .await?;
    let limit = Instant::now() + Duration::from_secs(60);
    loop {
        let info = cmd(&direct, "CLUSTER", vec!["INFO".into()]).await?;
        let text = info.as_string().unwrap_or_default();
        if text.contains("cluster_state:ok") {
            break;
        }
        ensure!(
            Instant::now() < limit,
            "the one-node Cluster is not ok 60 s after taking every slot: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(direct);
    let cluster = format!(
        "rediss-cluster://127.0.0.1:{}?{}",
        node.port,
        with_client(&pki.ca)?
    );
    let s = connect(&cluster)
        .await
        .map_err(|e| format!("{cluster}: {e}"))?;
    ensure!(
        s.describe().contains(" over TLS 1.3, server verified"),
        "{}",
        s.describe()
    );
    let p = fresh_pool(2, Duration::from_secs(30))?;
    let g = s
        .acquire(&p, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        s.release(&p, &g, Floor::NONE).await == Release::Released,
        "release in the Cluster"
    );
    drop(s);
    let plain = OwnServer::start(bin, &[], &[])?;
    let at = format!("127.0.0.1:{}", plain.port);
    expect_tls(
        connect_within(
            &format!("valkeys-cluster://{at}?{}", with_client(&pki.ca)?),
            TO_PLAIN_TIMEOUT,
        )
        .await,
        "a TLS Cluster URL to a plain-text node",
        |f| matches!(f, TlsFailure::ServerIsPlain { server } if *server == at),
        &[&format!("{at} answered in plain text, not TLS")],
    )?;
    drop(node);
    Ok(())
}

/// A password goes over TLS (mutual TLS and `requirepass`), and a wrong one
/// is refused as a wrong password, not taken for a refused client
/// certificate: the server answered, over a verified connection.
async fn a_password_goes_over_tls_and_a_wrong_one_is_no_tls_failure(b: Arc<Valkey>) -> Outcome {
    let pki = pki()?;
    let bin = b.binary.as_deref().ok_or("no local server binary")?;
    let password = "sent-over-tls";
    let own = OwnServer::start_as(
        bin,
        Some((&pki.server, &pki.ca)),
        &["--requirepass", password],
        &[],
    )?;
    let with = |pw: &str| -> Result<String, String> {
        Ok(format!(
            "rediss://:{pw}@127.0.0.1:{}?{}",
            own.port,
            with_client(&pki.ca)?
        ))
    };
    let s = connect(&with(password)?)
        .await
        .map_err(|e| format!("the right password: {e}"))?;
    ensure!(s.tls().is_some(), "no TLS");
    drop(s);
    match connect(&with("wrong")?).await {
        Ok(_) => Err("a wrong password was accepted".into()),
        Err(e @ ValkeyError::Tls { .. }) => Err(format!("a wrong password taken for TLS: {e}")),
        Err(e) => {
            let msg = e.to_string();
            ensure!(
                msg.contains("WRONGPASS") && !msg.contains("wrong@") && !msg.contains(password),
                "{msg}"
            );
            Ok(())
        }
    }
}

/// Until `ping` answers `ok` (or `Err` for `false`), within a minute.
async fn until_ping(s: &ValkeyStrategy, ok: bool, what: &str) -> Outcome {
    let limit = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = s.ping().await;
        if answer.is_ok() == ok {
            return Ok(());
        }
        ensure!(
            Instant::now() < limit,
            "{what}: PING still answers {answer:?} after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The client certificate's files are read again when they change, for
/// the next connection: with a certificate the server does not trust put
/// in their place, a reconnect is refused; with the trusted one back, the
/// same strategy reconnects and answers, without a restart.
async fn a_client_certificate_rotated_in_place_is_presented_on_reconnect(
    b: Arc<Valkey>,
) -> Outcome {
    let pki = pki()?;
    let dir = std::env::temp_dir().join(format!(
        "leasehold-valkey-rotate-{}-{}",
        std::process::id(),
        b.addr.port()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (cert, key) = (dir.join("client.crt"), dir.join("client.key"));
    // As a mounted secret changes: new files renamed into place.
    let put = |pair: &leasehold_conformance::tls::Pair| -> Outcome {
        for (from, to) in [(&pair.key, &key), (&pair.cert, &cert)] {
            let fresh = to.with_extension("new");
            std::fs::copy(from, &fresh).map_err(|e| e.to_string())?;
            std::fs::rename(&fresh, to).map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    put(&pki.client)?;
    let query = format!(
        "ca={}&cert={}&key={}",
        pki.ca.display(),
        cert.display(),
        key.display()
    );
    let s = connect(&url("127.0.0.1", b.addr.port(), &query))
        .await
        .map_err(|e| e.to_string())?;
    until_ping(&s, true, "connected").await?;
    put(&pki.stranger)?;
    // A reconnect that does not wait for the new connection (which the
    // server refuses).
    let client = s.client().clone();
    tokio::spawn(async move { client.force_reconnection().await });
    until_ping(&s, false, "the untrusted certificate in place").await?;
    put(&pki.client)?;
    until_ping(&s, true, "the trusted certificate back").await?;
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
