#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

mod faults;
mod https;
mod store;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use serde_json::{Value, json};

pub use faults::{Fault, Faults, Verb};
pub use https::Https;
use store::{Answer, Store, failure};
pub use store::{RvFormat, is_dns1123_subdomain, is_micro_time};

/// What [`FakeApiServer::describe`] says: the word "fake" is part of it.
pub const DESCRIPTION: &str =
    "fake API server (leasehold-k8s-fake, in process; not a kube-apiserver)";

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/";
const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";

struct Shared {
    store: Mutex<Store>,
    faults: Faults,
    requests: [AtomicU64; 7],
    /// Requests answered 401 (no certificate the client CA signed, no
    /// known token).
    unauthorized: AtomicU64,
}

/// How connections are served: plain HTTP, or HTTPS with authentication.
#[derive(Clone)]
enum Serve {
    Plain,
    Https(tokio_rustls::TlsAcceptor, Arc<https::Auth>),
}

impl Shared {
    fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn verb_index(verb: Verb) -> usize {
    match verb {
        Verb::List => 0,
        Verb::Get => 1,
        Verb::Create => 2,
        Verb::Patch => 3,
        Verb::Update => 4,
        Verb::Delete => 5,
        Verb::AccessReview => 6,
    }
}

/// A running fake API server on its own thread and runtime; it stops when
/// dropped. Usable from any runtime (or none).
pub struct FakeApiServer {
    addr: SocketAddr,
    https: bool,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeApiServer {
    /// Starts a fake on a free loopback port, with the namespace `default`,
    /// over plain HTTP without authentication.
    pub fn start() -> std::io::Result<Self> {
        Self::serve(Serve::Plain)
    }

    /// Starts a fake that takes HTTPS only, as a kube-apiserver does: its
    /// certificate from `https`, and every request authenticated by a
    /// client certificate the client CA signed or by a known bearer token,
    /// else answered 401 (see [`Https`]).
    pub fn start_https(https: Https) -> std::io::Result<Self> {
        let (acceptor, auth) = https::setup(&https)?;
        Self::serve(Serve::Https(acceptor, Arc::new(auth)))
    }

    fn serve(serve: Serve) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let https = matches!(serve, Serve::Https(..));
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::new()),
            faults: Faults::default(),
            requests: Default::default(),
            unauthorized: AtomicU64::new(0),
        });
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let serving = shared.clone();
        let thread = std::thread::Builder::new()
            .name("fake-apiserver".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("fake API server runtime");
                rt.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)
                        .expect("fake API server socket");
                    tokio::select! {
                        () = accept_loop(listener, serving, serve) => {}
                        _ = stopped => {}
                    }
                });
            })?;
        Ok(Self {
            addr,
            https,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`, or `https://…` for one started with
    /// [`FakeApiServer::start_https`].
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// One line for reports; always says "fake".
    pub fn describe(&self) -> String {
        format!("{DESCRIPTION} at {}", self.url())
    }

    /// Requests answered 401 so far (HTTPS only).
    pub fn unauthorized(&self) -> u64 {
        self.shared.unauthorized.load(Ordering::Relaxed)
    }

    /// The fault switches.
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// Makes `ns` exist (only `default` exists at start).
    pub fn add_namespace(&self, ns: &str) {
        self.shared.store().namespaces.insert(ns.to_owned());
    }

    /// Switches how new resourceVersions are written.
    pub fn set_rv_format(&self, format: RvFormat) {
        self.shared.store().rv_format = format;
    }

    /// The stored Lease `name` in `ns`, as JSON.
    pub fn lease(&self, ns: &str, name: &str) -> Option<Value> {
        self.shared
            .store()
            .leases
            .get(&(ns.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Every stored Lease of `ns`, by name.
    pub fn leases(&self, ns: &str) -> Vec<(String, Value)> {
        self.shared
            .store()
            .leases
            .iter()
            .filter(|((n, _), _)| n == ns)
            .map(|((_, name), v)| (name.clone(), v.clone()))
            .collect()
    }

    /// Stores `obj` as Lease `name` exactly as given (no validation, no new
    /// resourceVersion): for foreign or malformed objects in tests.
    pub fn insert_raw(&self, ns: &str, name: &str, obj: Value) {
        self.shared
            .store()
            .leases
            .insert((ns.to_owned(), name.to_owned()), obj);
    }

    /// Deletes a Lease as an operator would (`kubectl delete lease`); true
    /// when it existed.
    pub fn delete(&self, ns: &str, name: &str) -> bool {
        self.shared.store().delete(ns, name).status == 200
    }

    /// Requests received for `verb` so far (faulted ones included).
    pub fn requests(&self, verb: Verb) -> u64 {
        self.shared.requests[verb_index(verb)].load(Ordering::Relaxed)
    }

    /// Requests received so far, every verb.
    pub fn total_requests(&self) -> u64 {
        self.shared
            .requests
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for FakeApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeApiServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

async fn accept_loop(listener: tokio::net::TcpListener, shared: Arc<Shared>, serve: Serve) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let (shared, serve) = (shared.clone(), serve.clone());
        connections.spawn(async move {
            match serve {
                Serve::Plain => connection(stream, shared, None).await,
                Serve::Https(acceptor, auth) => {
                    let Some(stream) = handshake(stream, &acceptor).await else {
                        return;
                    };
                    let chain = stream.get_ref().1.peer_certificates().map(<[_]>::to_vec);
                    let judge = Judge { auth, chain };
                    connection(stream, shared, Some(Arc::new(judge))).await;
                }
            }
        });
        while connections.try_join_next().is_some() {}
    }
}

/// The TLS handshake of one connection; a plain HTTP request is answered as
/// Go's `net/http` answers it on a TLS port, and nothing is served.
async fn handshake(
    stream: tokio::net::TcpStream,
    acceptor: &tokio_rustls::TlsAcceptor,
) -> Option<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
    use tokio::io::AsyncWriteExt;
    let mut first = [0u8; 5];
    let seen = stream.peek(&mut first).await.ok()?;
    if https::looks_like_http(&first[..seen]) {
        let mut stream = stream;
        let _ = stream.write_all(https::PLAIN_ON_TLS_PORT).await;
        let _ = stream.shutdown().await;
        return None;
    }
    acceptor.accept(stream).await.ok()
}

/// What an HTTPS connection showed, judged for each of its requests.
struct Judge {
    auth: Arc<https::Auth>,
    chain: Option<Vec<rustls::pki_types::CertificateDer<'static>>>,
}

impl Judge {
    fn allows(&self, req: &Request<Incoming>) -> bool {
        let authorization = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        self.auth.allows(self.chain.as_deref(), authorization)
    }
}

/// Serves one connection's requests.
async fn connection<S>(stream: S, shared: Arc<Shared>, judge: Option<Arc<Judge>>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // A handler that must drop the connection sends on `kill`; the
    // connection future is then dropped, which closes the socket.
    let (kill, mut killed) = tokio::sync::mpsc::channel::<()>(1);
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let (shared, kill, judge) = (shared.clone(), kill.clone(), judge.clone());
        async move {
            if let Some(judge) = &judge
                && !judge.allows(&req)
            {
                shared.unauthorized.fetch_add(1, Ordering::Relaxed);
                return Ok::<_, Infallible>(respond(failure(401, "Unauthorized", "Unauthorized")));
            }
            Ok::<_, Infallible>(handle(&shared, req, &kill).await)
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    tokio::select! {
        _ = conn => {}
        _ = killed.recv() => {}
    }
}

/// What a request asks for, once routed.
enum Route {
    List(String),
    Create(String),
    Get(String, String),
    Patch(String, String),
    Put(String, String),
    Delete(String, String),
    AccessReview,
}

impl Route {
    fn verb(&self) -> Verb {
        match self {
            Self::List(_) => Verb::List,
            Self::Create(_) => Verb::Create,
            Self::Get(..) => Verb::Get,
            Self::Patch(..) => Verb::Patch,
            Self::Put(..) => Verb::Update,
            Self::Delete(..) => Verb::Delete,
            Self::AccessReview => Verb::AccessReview,
        }
    }
}

fn route(method: &hyper::Method, path: &str) -> Option<Route> {
    use hyper::Method as M;
    if path == ACCESS_REVIEWS && method == M::POST {
        return Some(Route::AccessReview);
    }
    let rest = path.strip_prefix(LEASES)?;
    let parts: Vec<&str> = rest.split('/').collect();
    match (method, parts.as_slice()) {
        (&M::GET, [ns, "leases"]) => Some(Route::List((*ns).to_owned())),
        (&M::POST, [ns, "leases"]) => Some(Route::Create((*ns).to_owned())),
        (m, [ns, "leases", name]) => {
            let (ns, name) = ((*ns).to_owned(), (*name).to_owned());
            match *m {
                M::GET => Some(Route::Get(ns, name)),
                M::PATCH => Some(Route::Patch(ns, name)),
                M::PUT => Some(Route::Put(ns, name)),
                M::DELETE => Some(Route::Delete(ns, name)),
                _ => None,
            }
        }
        _ => None,
    }
}

fn query_param(query: Option<&str>, key: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn handle(
    shared: &Shared,
    req: Request<Incoming>,
    kill: &tokio::sync::mpsc::Sender<()>,
) -> Response<Full<Bytes>> {
    let Some(route) = route(req.method(), req.uri().path()) else {
        return respond(failure(
            404,
            "NotFound",
            format!(
                "the fake API server does not serve {} {}",
                req.method(),
                req.uri().path()
            ),
        ));
    };
    let verb = route.verb();
    shared.requests[verb_index(verb)].fetch_add(1, Ordering::Relaxed);
    let query = req.uri().query().map(str::to_owned);
    let content_type = req
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return respond(failure(400, "BadRequest", "unreadable body")),
    };
    let fault = shared.faults.take(verb);
    let mut apply_then = None;
    match fault {
        None => {}
        Some(Fault::Status(code)) => {
            return respond(failure(
                code,
                "InternalError",
                format!("fault switch: {code}"),
            ));
        }
        Some(Fault::Drop) => return drop_connection(kill).await,
        Some(Fault::Hang) => std::future::pending().await,
        Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
        Some(Fault::Forbidden) => {
            return respond(failure(
                403,
                "Forbidden",
                format!(
                    "leases.coordination.k8s.io is forbidden: User \"system:serviceaccount:fake:fake\" \
                     cannot {verb} resource \"leases\" in API group \"coordination.k8s.io\""
                ),
            ));
        }
        Some(Fault::TooManyRequests { retry_after_secs }) => {
            let mut r = respond(failure(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
            ));
            r.headers_mut().insert(
                hyper::header::RETRY_AFTER,
                hyper::header::HeaderValue::from(retry_after_secs),
            );
            return r;
        }
        Some(f @ (Fault::ApplyThenStatus(_) | Fault::ApplyThenDrop)) => apply_then = Some(f),
    }
    let answer = apply(shared, route, query.as_deref(), &content_type, &body);
    match apply_then {
        Some(Fault::ApplyThenStatus(code)) => respond(failure(
            code,
            "Timeout",
            format!("fault switch: applied, then answered {code}"),
        )),
        Some(_) => drop_connection(kill).await,
        None => respond(answer),
    }
}

fn apply(
    shared: &Shared,
    route: Route,
    query: Option<&str>,
    content_type: &str,
    body: &[u8],
) -> Answer {
    let mut store = shared.store();
    match route {
        Route::List(ns) => store.list(&ns, query_param(query, "labelSelector").as_deref()),
        Route::Create(ns) => {
            let dry_run = query_param(query, "dryRun").is_some_and(|v| v == "All");
            store.create(&ns, body, dry_run)
        }
        Route::Get(ns, name) => store.get(&ns, &name),
        Route::Patch(ns, name) => store.patch(&ns, &name, content_type, body),
        Route::Put(ns, name) => store.put(&ns, &name, body),
        Route::Delete(ns, name) => store.delete(&ns, &name),
        Route::AccessReview => {
            drop(store);
            access_review(shared, body)
        }
    }
}

fn access_review(shared: &Shared, body: &[u8]) -> Answer {
    let Ok(mut review) = serde_json::from_slice::<Value>(body) else {
        return failure(400, "BadRequest", "unable to decode the access review");
    };
    let attrs = &review["spec"]["resourceAttributes"];
    let verb = attrs["verb"].as_str().unwrap_or("");
    let leases = attrs["group"] == "coordination.k8s.io" && attrs["resource"] == "leases";
    let allowed = leases && Verb::from_rbac(verb).is_some_and(|v| !shared.faults.forbidden(v));
    review["status"] = json!({
        "allowed": allowed,
        "reason": if allowed { "fake: allowed" } else { "fake: the verb is switched to Forbidden" },
    });
    review["apiVersion"] = json!("authorization.k8s.io/v1");
    review["kind"] = json!("SelfSubjectAccessReview");
    Answer {
        status: 201,
        body: review,
    }
}

async fn drop_connection(kill: &tokio::sync::mpsc::Sender<()>) -> Response<Full<Bytes>> {
    let _ = kill.send(()).await;
    std::future::pending().await
}

fn respond(answer: Answer) -> Response<Full<Bytes>> {
    let body = serde_json::to_vec(&answer.body).unwrap_or_default();
    Response::builder()
        .status(answer.status)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}
