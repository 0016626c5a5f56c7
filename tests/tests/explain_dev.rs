//! `explain` against `dev`: a running `dev` serves its decision journal on
//! loopback, so `explain` tells why the example PodSet was reconciled and
//! what the embedded API server did with each write, and `--as-case` turns
//! its last reconcile into a golden case that `test` replays.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reconciler_tests::{example_plugin, root};

const HOST: &str = env!("CARGO_BIN_EXE_reconciler-host-under-test");

/// Stops `dev` when the test ends, however it ends.
struct Dev(Child);

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn explain(args: &[&str]) -> (bool, String) {
    let out = Command::new(HOST)
        .arg("explain")
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn explain_reads_a_running_dev_and_turns_a_reconcile_into_a_case() {
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(example_plugin("podset"), plugins.path().join("podset.wasm")).unwrap();
    let objects = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("examples/podset.yaml"),
        objects.path().join("podset.yaml"),
    )
    .unwrap();
    let child = Command::new(HOST)
        .current_dir(root())
        .args(["dev", "--plugins-dir"])
        .arg(plugins.path())
        .arg("--objects")
        .arg(objects.path())
        .args(["--explain-listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut dev = Dev(child);
    let stdout = dev.0.stdout.take().unwrap();
    let marker = "(the journal is served on http://";
    let (tx, rx) = std::sync::mpsc::channel();
    // Read on for the whole run: a full pipe would stop dev.
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(rest) = line.split(marker).nth(1) {
                let _ = tx.send((line.clone(), rest.trim_end_matches(')').to_string()));
            }
        }
    });
    let (line, address) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("dev says where explain reads");
    assert!(
        line.contains("reconciler-host explain KIND/NAMESPACE/NAME --host http://"),
        "the line teaches the command: {line}"
    );
    let host = format!("http://{address}");

    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        let (ok, text) = explain(&["podset/default/example", "--host", &host]);
        if ok && text.contains("status updated") {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "explain never showed the reconcile: {text}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(
        text.contains("why:  PodSet default/example added"),
        "{text}"
    );
    assert!(
        text.contains("api:  apply Deployment default/example: created"),
        "{text}"
    );
    assert!(text.contains("read: list Pod in default"), "{text}");

    let cases = tempfile::tempdir().unwrap();
    let dir = cases.path().to_string_lossy().into_owned();
    let (ok, text) = explain(&["podset/default/example", "--host", &host, "--as-case", &dir]);
    assert!(ok, "{text}");
    // Named as `--record` names its cases.
    let written = cases.path().join("podset/000001-default-example.yaml");
    assert!(written.is_file(), "{text}");
    let again = explain(&["podset/default/example", "--host", &host, "--as-case", &dir]);
    assert!(
        cases
            .path()
            .join("podset/000002-default-example.yaml")
            .is_file(),
        "a second case is numbered on, not written over the first: {}",
        again.1
    );
    let replay = Command::new(HOST)
        .args(["test"])
        .arg(plugins.path().join("podset.wasm"))
        .arg(cases.path().join("podset"))
        .output()
        .unwrap();
    assert!(
        replay.status.success(),
        "{}{}",
        String::from_utf8_lossy(&replay.stdout),
        String::from_utf8_lossy(&replay.stderr)
    );

    let (ok, text) = explain(&["podset/default/never", "--host", &host]);
    assert!(!ok && text.contains("no reconcile of"), "{text}");
    drop(dev);
    let (ok, text) = explain(&["podset/default/example", "--host", &host]);
    assert!(!ok && text.contains("asking"), "no dev: {text}");
}
