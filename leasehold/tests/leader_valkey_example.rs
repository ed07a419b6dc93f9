//! `examples/leader_valkey.rs` (compiled in here) against the private
//! servers of the provider chain: every hour billed once, by one leader at a
//! time, across a hand-over. A missing server is said loudly, and fails
//! under `CI=true`.

#[path = "../examples/leader_valkey.rs"]
#[allow(dead_code, unreachable_pub)]
mod example;

use leasehold_conformance::servers::{ServerKind, Settings, provide_with};

fn on(kind: ServerKind) {
    // Durable settings: the example connects with the library's defaults, as
    // a user's would, and those refuse a server that can forget.
    let server = match provide_with(kind, Settings::Durable) {
        Ok(server) => server,
        Err(missing) if !leasehold_conformance::in_ci() => {
            return eprintln!("NOT RUN on {}: {missing}", kind.name());
        }
        Err(missing) => panic!("{missing}"),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let by = runtime.block_on(example::run(&server.url, 3)).unwrap();
    // Every hour from the first is billed exactly once (the script numbers
    // them), by one of the two replicas; the shut-down leader's successor
    // billed after it (a loaded machine may hand leadership over more often:
    // that is the design working).
    assert!(by.len() >= 6, "{by:?}");
    assert!(by.iter().all(|b| b == "a" || b == "b"), "{by:?}");
    assert!(
        by.windows(2).any(|w| w[0] != w[1]),
        "one replica billed every hour: {by:?}"
    );
}

#[test]
fn leader_valkey_example_on_valkey8() {
    on(ServerKind::Valkey8);
}

#[test]
fn leader_valkey_example_on_redis7() {
    on(ServerKind::Redis7);
}
