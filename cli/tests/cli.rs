//! The `leasehold` binary against real private servers (placeholder).
fn main() {}
