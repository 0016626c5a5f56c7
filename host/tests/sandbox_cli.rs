//! `inspect`, `simulate` and `dev` with plugins that wait, sleep at load or
//! read randomness and time, as a user runs them.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A test-only plugin (scripts/build-plugins puts them there).
fn test_plugin(name: &str) -> PathBuf {
    let path = root().join(format!("target/test-plugins/{name}.wasm"));
    assert!(
        path.is_file(),
        "{} is missing: build the plugins first with scripts/build-plugins",
        path.display()
    );
    path
}

fn host() -> Command {
    Command::new(env!("CARGO_BIN_EXE_reconciler-host"))
}

/// Runs `command` to the end, failing the test if it takes longer than
/// `limit` (what these tests are about: nothing may hang).
fn output_within(command: &mut Command, limit: Duration) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start reconciler-host");
    let started = Instant::now();
    while child
        .try_wait()
        .expect("wait for reconciler-host")
        .is_none()
    {
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "reconciler-host still running after {limit:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

fn hostile_yaml(name: &str, mode: &str) -> String {
    format!(
        "apiVersion: hostile.example.com/v1\nkind: Hostile\nmetadata: {{name: {name}, namespace: default}}\nspec: {{mode: {mode}}}\n"
    )
}

/// A plugins directory and an objects directory, with a compile cache.
struct Dirs {
    _root: tempfile::TempDir,
    plugins: PathBuf,
    objects: PathBuf,
    cache: PathBuf,
}

impl Dirs {
    fn new(plugins: &[(&str, &str)], objects: &[(&str, &str)]) -> Self {
        let root = tempfile::tempdir().unwrap();
        let dirs = Self {
            plugins: root.path().join("plugins"),
            objects: root.path().join("objects"),
            cache: root.path().join("cache"),
            _root: root,
        };
        std::fs::create_dir_all(&dirs.plugins).unwrap();
        std::fs::create_dir_all(&dirs.objects).unwrap();
        for (built, name) in plugins {
            std::fs::copy(test_plugin(built), dirs.plugins.join(name)).unwrap();
        }
        for (name, mode) in objects {
            dirs.add_object(name, mode);
        }
        dirs
    }

    fn add_object(&self, name: &str, mode: &str) {
        let tmp = self.objects.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, hostile_yaml(name, mode)).unwrap();
        std::fs::rename(&tmp, self.objects.join(format!("{name}.yaml"))).unwrap();
    }

    fn simulate(&self) -> Output {
        output_within(
            host()
                .arg("--compile-cache")
                .arg(&self.cache)
                .args(["--plugin-timeout-ms", "300", "simulate", "--plugins-dir"])
                .arg(&self.plugins)
                .arg("--objects")
                .arg(&self.objects),
            Duration::from_secs(120),
        )
    }
}

#[test]
fn inspect_refuses_a_plugin_whose_metadata_sleeps() {
    let cache = tempfile::tempdir().unwrap();
    let out = output_within(
        host()
            .arg("--compile-cache")
            .arg(cache.path())
            .args(["--plugin-timeout-ms", "300", "inspect"])
            .arg(test_plugin("hostile-sleepy-metadata")),
        Duration::from_secs(60),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("hostile-sleepy-metadata.wasm: metadata did not return within 300 ms"),
        "{err}"
    );
    assert!(err.contains("--plugin-timeout-ms"), "names the knob: {err}");
}

#[test]
fn simulate_refuses_a_sleepy_plugin_times_out_a_sleep_and_serves_the_rest() {
    let dirs = Dirs::new(
        &[
            ("hostile", "hostile.wasm"),
            ("hostile-sleepy-metadata", "sleepy.wasm"),
        ],
        &[("sleeper", "sleep"), ("fine", "ok")],
    );
    let out = dirs.simulate();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a refused plugin fails the run: {stderr}"
    );
    assert!(
        stderr.contains("sleepy.wasm: metadata did not return within 300 ms"),
        "{stderr}"
    );
    assert!(
        stdout.contains("hostile Hostile default/sleeper: FAILED (Timeout"),
        "{stdout}"
    );
    assert!(
        stdout.contains("hostile Hostile default/fine: finalizer hostile.example.com/cleanup added; created ConfigMap default/fine"),
        "{stdout}"
    );
}

/// The `order:` list under an object's status in a simulate report.
fn status_order(report: &str, name: &str) -> Vec<String> {
    let doc = report
        .split("\n---\n")
        .find(|d| d.contains(&format!("  name: {name}\n")) && d.contains("kind: Hostile"))
        .unwrap_or_else(|| panic!("no Hostile {name} in\n{report}"));
    doc.split("order:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no status.order in\n{doc}"))
        .lines()
        .map_while(|l| l.strip_prefix("  - "))
        .map(str::to_string)
        .collect()
}

#[test]
fn simulate_prints_the_same_for_a_plugin_that_reads_random_and_time() {
    let dirs = Dirs::new(
        &[("hostile", "hostile.wasm")],
        &[
            ("first", "nondeterministic"),
            ("second", "nondeterministic"),
        ],
    );
    let runs: Vec<String> = (0..2)
        .map(|_| {
            let out = dirs.simulate();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        })
        .collect();
    assert_eq!(runs[0], runs[1], "two runs print the same, byte for byte");
    let report = &runs[0];
    // The plugin slept 10 ms between two readings of its clock.
    assert_eq!(
        report.matches("elapsedNanos: 10000000\n").count(),
        2,
        "{report}"
    );
    let (first, second) = (
        status_order(report, "first"),
        status_order(report, "second"),
    );
    assert_eq!(first.len(), 16);
    assert_ne!(first, second, "two objects, two random streams");
}

/// Lines of a running `dev`, as they come.
struct DevOutput {
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl DevOutput {
    /// Waits for a line containing all of `needles`.
    fn wait_for(&mut self, needles: &[&str], limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if needles.iter().all(|n| line.contains(n)) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "no line with {needles:?} within {limit:?}; dev printed:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }
}

#[cfg(unix)]
#[test]
fn dev_refuses_a_plugin_whose_metadata_sleeps_and_keeps_serving() {
    let dirs = Dirs::new(&[("hostile", "hostile.wasm")], &[("first", "ok")]);
    let mut child = host()
        .arg("--compile-cache")
        .arg(&dirs.cache)
        .args(["--plugin-timeout-ms", "300", "dev", "--plugins-dir"])
        .arg(&dirs.plugins)
        .arg("--objects")
        .arg(&dirs.objects)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start reconciler-host dev");
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut dev = DevOutput {
        lines,
        seen: Vec::new(),
    };
    let within = Duration::from_secs(60);
    dev.wait_for(&["created ConfigMap default/first"], within);

    // Dropped in the way an editor saves: written aside, renamed into place.
    let tmp = dirs.plugins.join(".sleepy.wasm.tmp");
    std::fs::copy(test_plugin("hostile-sleepy-metadata"), &tmp).unwrap();
    std::fs::rename(&tmp, dirs.plugins.join("sleepy.wasm")).unwrap();
    dev.wait_for(
        &[
            "error:",
            "sleepy.wasm",
            "metadata did not return within 300 ms",
        ],
        within,
    );

    // The host is not frozen: an object added afterwards is reconciled.
    dirs.add_object("second", "ok");
    dev.wait_for(&["created ConfigMap default/second"], within);

    stop(&mut child);
}

#[cfg(unix)]
fn stop(child: &mut std::process::Child) {
    let pid = i32::try_from(child.id()).expect("a pid fits in i32");
    // SAFETY: kill takes no pointers; the pid is our own child's.
    unsafe {
        libc::kill(pid, libc::SIGINT);
    }
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("dev did not stop on SIGINT");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
