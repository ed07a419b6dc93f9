//! What the tests that start this crate's examples share.

use std::path::PathBuf;

/// The example binary `name`, built by `cargo test` next to the running
/// test (an example's binary sits in `examples/` beside the tests' `deps/`).
pub(crate) fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let bin = dir.join("examples").join(name);
    assert!(
        bin.is_file(),
        "{} not found: run the whole package's tests (`cargo test -p leasehold --features full`), \
         which builds the examples, or `cargo build -p leasehold --features full --example {name}` \
         first",
        bin.display()
    );
    bin
}
