//! Running the built `reconciler-host` from the repository's root, as the
//! CLI tests do.

use std::path::PathBuf;
use std::process::{Command, Output};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}

/// Runs the host with the compile cache the test binaries share (entries
/// are keyed by content and written atomically).
pub fn host(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_reconciler-host"))
        .current_dir(root())
        .arg("--compile-cache")
        .arg(root().join("target/test-compile-cache"))
        .args(args)
        .output()
        .expect("run reconciler-host")
}
