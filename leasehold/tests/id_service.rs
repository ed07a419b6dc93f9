//! The ID service example (`examples/id_service.rs`, compiled in here) on a
//! SQLite file, served on a free loopback port and asked over plain
//! HTTP/1.1: its probes say ready and live, and concurrent requests get
//! distinct IDs.

#[path = "../examples/id_service.rs"]
#[allow(dead_code, unreachable_pub)]
mod id_service;

use std::collections::HashSet;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A GET of `path`: the status, the `Retry-After` header and the body.
async fn get(addr: SocketAddr, path: &str) -> (u16, Option<String>, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"));
    let retry_after = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("retry-after")
            .then(|| value.trim().to_owned())
    });
    (status, retry_after, body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_id_service_is_ready_and_hands_out_distinct_ids() {
    let dir = std::env::temp_dir().join(format!("leasehold-id-service-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("ids.sqlite").display());
    let service = id_service::start(&url).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server =
        tokio::spawn(axum::serve(listener, id_service::router(service.clone())).into_future());

    let (status, retry, body) = get(addr, "/readyz").await;
    assert_eq!((status, retry), (200, None), "{body}");
    assert!(body.starts_with("ready"), "{body}");
    assert_eq!(get(addr, "/livez").await.0, 200);

    let requests: Vec<_> = (0..200)
        .map(|_| tokio::spawn(async move { get(addr, "/id").await }))
        .collect();
    let mut ids = HashSet::new();
    for r in requests {
        let (status, _, body) = r.await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(body.len(), 16, "an ID is 16 hex digits: {body:?}");
        assert!(ids.insert(body), "an ID was handed out twice");
    }

    server.abort();
    let _ = server.await;
    id_service::stop(service).await;
    let _ = std::fs::remove_dir_all(&dir);
}
