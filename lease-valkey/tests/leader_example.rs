//! The leader example's scheduler (`examples/valkey_leader.rs`, compiled in here)
//! on the private servers of the provider chain: exactly one leader,
//! observed by every replica; a killed leader replaced with a bigger fence;
//! its late write refused.

#[path = "../examples/valkey_leader.rs"]
#[allow(dead_code, unreachable_pub)]
mod example;

use leasehold_conformance::scheduler::on_server;
use leasehold_conformance::servers::ServerKind;

#[test]
fn leader_example_on_redis8() {
    on_server(
        ServerKind::Redis8,
        |url| async move { example::run(&url).await },
    );
}

#[test]
fn leader_example_on_redis7() {
    on_server(
        ServerKind::Redis7,
        |url| async move { example::run(&url).await },
    );
}

#[test]
fn leader_example_on_valkey8() {
    on_server(ServerKind::Valkey8, |url| async move {
        example::run(&url).await
    });
}
