//! What the host's log looks like where nobody is at a terminal
//! (`kubectl logs`, a file, a pipe): plain text, no colour codes.

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}

#[test]
fn a_log_written_to_a_pipe_has_no_colour_codes() {
    let hostile = root().join("target/test-plugins/hostile.wasm");
    assert!(
        hostile.is_file(),
        "build the plugins first: scripts/build-plugins"
    );
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    let objects = dir.path().join("objects");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::create_dir_all(&objects).unwrap();
    std::fs::copy(&hostile, plugins.join("hostile.wasm")).unwrap();
    // A plugin that fails: the engine logs a warning for it.
    std::fs::write(
        objects.join("failing.yaml"),
        "apiVersion: hostile.example.com/v1\nkind: Hostile\n\
         metadata: {name: failing, namespace: default}\nspec: {mode: error}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_reconciler-host"))
        .arg("--compile-cache")
        .arg(dir.path().join("cache"))
        .args(["simulate", "--plugins-dir"])
        .arg(&plugins)
        .arg("--objects")
        .arg(&objects)
        .env_remove("NO_COLOR")
        .output()
        .expect("run reconciler-host");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("WARN") && log.contains("Hostile default/failing: FAILED"),
        "the failure is logged: {log}"
    );
    assert!(!log.contains('\u{1b}'), "no escape codes: {log:?}");
}
