//! The leader example's scheduler (`examples/etcd_leader.rs`, compiled in here)
//! on the private servers of the provider chain: exactly one leader,
//! observed by every replica; a killed leader replaced with a bigger fence;
//! its late write refused.

#[path = "../examples/etcd_leader.rs"]
#[allow(dead_code, unreachable_pub)]
mod example;

use leasehold_conformance::scheduler::on_server;
use leasehold_conformance::servers::ServerKind;

#[test]
fn leader_example_on_etcd35() {
    on_server(
        ServerKind::Etcd35,
        |url| async move { example::run(&url).await },
    );
}
