//! What a misbehaving plugin does to the commands a user runs: requeues that
//! would spin or overflow, a status too deep to read back, and twin plugins,
//! through `simulate`, `dev` and `inspect` with the compiled hostile plugin.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `target/test-plugins/<name>.wasm` (scripts/build-plugins puts them there).
fn test_plugin(name: &str) -> PathBuf {
    let path = root()
        .join("target/test-plugins")
        .join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "build the plugins first: scripts/build-plugins"
    );
    path
}

/// A plugins directory holding `(plugin, file name)` copies, and an objects
/// directory with a Hostile object `h-<mode>` per mode.
struct Setup {
    plugins: tempfile::TempDir,
    objects: tempfile::TempDir,
    cache: tempfile::TempDir,
}

impl Setup {
    fn new(plugins: &[(&str, &str)], modes: &[&str]) -> Self {
        let setup = Self {
            plugins: tempfile::tempdir().unwrap(),
            objects: tempfile::tempdir().unwrap(),
            cache: tempfile::tempdir().unwrap(),
        };
        for (plugin, file) in plugins {
            std::fs::copy(test_plugin(plugin), setup.plugin(file)).unwrap();
        }
        for mode in modes {
            std::fs::write(
                setup.objects.path().join(format!("{mode}.yaml")),
                format!(
                    "apiVersion: hostile.example.com/v1\nkind: Hostile\nmetadata: {{name: h-{mode}, namespace: default}}\nspec: {{mode: {mode}}}\n"
                ),
            )
            .unwrap();
        }
        setup
    }

    fn plugin(&self, file: &str) -> PathBuf {
        self.plugins.path().join(file)
    }

    fn host(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_reconciler-host"));
        command.arg("--compile-cache").arg(self.cache.path());
        command
    }

    fn simulate(&self, advance: &str) -> Output {
        self.host()
            .arg("simulate")
            .arg("--plugins-dir")
            .arg(self.plugins.path())
            .arg("--objects")
            .arg(self.objects.path())
            .args(["--advance", advance])
            .output()
            .expect("run reconciler-host")
    }

    /// `dev --until-settled`, killed (and failed) if it runs past `limit`.
    fn dev_until_settled(&self, limit: Duration) -> Output {
        let mut child = self
            .host()
            .arg("dev")
            .arg("--plugins-dir")
            .arg(self.plugins.path())
            .arg("--objects")
            .arg(self.objects.path())
            .arg("--until-settled")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start reconciler-host dev");
        let started = Instant::now();
        while child.try_wait().expect("poll dev").is_none() {
            if started.elapsed() > limit {
                let _ = child.kill();
                let output = child.wait_with_output().expect("dev's output");
                panic!(
                    "dev --until-settled did not return within {limit:?}:\n{}\n{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        child.wait_with_output().expect("dev's output")
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The `# reconciles` lines of a simulation about `object`.
fn reconciles_of<'a>(stdout: &'a str, object: &str) -> Vec<&'a str> {
    let needle = format!("default/{object}:");
    stdout
        .lines()
        .take_while(|l| !l.starts_with("# events"))
        .filter(|l| l.contains(&needle))
        .collect()
}

#[test]
fn simulate_rate_limits_a_requeue_of_zero() {
    let setup = Setup::new(&[("hostile", "hostile.wasm")], &["requeue-zero"]);
    let out = setup.simulate("1m");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(!stdout.contains("NOT SETTLED"), "{stdout}");
    let lines = reconciles_of(&stdout, "h-requeue-zero");
    // At +0s (twice: the finalizer's change), 1, 2, 5, 10, 21 and 42 s.
    assert!(
        (4..=10).contains(&lines.len()),
        "a bounded number of reconciles in a minute: {lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("requeue in 32s")),
        "backing off: {lines:#?}"
    );
}

#[test]
fn simulate_clamps_a_requeue_of_u64_max_instead_of_crashing() {
    let setup = Setup::new(&[("hostile", "hostile.wasm")], &["requeue-max", "ok"]);
    let out = setup.simulate("0s");
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    let lines = reconciles_of(&stdout, "h-requeue-max");
    assert!(
        lines.last().is_some_and(|l| l.ends_with("requeue in 24h")),
        "{lines:#?}"
    );
}

#[test]
fn simulate_refuses_a_status_too_deep_and_serves_the_rest() {
    let setup = Setup::new(&[("hostile", "hostile.wasm")], &["deep-status", "ok"]);
    let out = setup.simulate("5s");
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "no crash: {stdout}\n{}",
        text(&out.stderr)
    );
    let deep = reconciles_of(&stdout, "h-deep-status");
    assert!(
        deep[0].contains(
            "FAILED (NestedTooDeep, 1 in a row, retry in 1s): status is nested 127 levels deep, more than the 64 levels a response may nest"
        ),
        "{deep:#?}"
    );
    assert!(
        reconciles_of(&stdout, "h-ok")[0].contains("created ConfigMap default/h-ok"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Warning NestedTooDeep Hostile default/h-deep-status"),
        "{stdout}"
    );
}

#[test]
fn dev_until_settled_returns_with_a_plugin_requeueing_at_zero() {
    let setup = Setup::new(&[("hostile", "hostile.wasm")], &["requeue-zero", "ok"]);
    let out = setup.dev_until_settled(Duration::from_secs(60));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("hostile Hostile default/h-requeue-zero: finalizer hostile.example.com/cleanup added; created ConfigMap default/h-requeue-zero; requeue in 1s"),
        "{stdout}"
    );
}

fn rival_setup() -> Setup {
    Setup::new(
        &[
            ("hostile", "a-hostile.wasm"),
            ("hostile-rival", "b-rival.wasm"),
        ],
        &["ok"],
    )
}

fn rival_refusal(setup: &Setup) -> String {
    format!(
        "error: {}: plugin rival reconciles hostile.example.com/v1 Hostile, which plugin hostile from {} already reconciles: a primary kind has one plugin",
        setup.plugin("b-rival.wasm").display(),
        setup.plugin("a-hostile.wasm").display()
    )
}

#[test]
fn simulate_refuses_the_later_of_two_plugins_for_one_kind_by_file_and_serves_the_first() {
    let setup = rival_setup();
    let out = setup.simulate("0s");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains(&rival_refusal(&setup)), "{stderr}");
    assert!(
        reconciles_of(&stdout, "h-ok")[0]
            .starts_with("[+0s] hostile Hostile default/h-ok: finalizer hostile.example.com/cleanup added; created ConfigMap"),
        "served by the first: {stdout}"
    );
}

#[test]
fn dev_refuses_the_same_rival_the_same_way() {
    let setup = rival_setup();
    let out = setup.dev_until_settled(Duration::from_secs(60));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains(&rival_refusal(&setup)), "{stdout}");
    assert!(
        stdout
            .contains("hostile Hostile default/h-ok: finalizer hostile.example.com/cleanup added"),
        "{stdout}"
    );
}

#[test]
fn a_taken_plugin_name_is_refused_saying_so() {
    let setup = Setup::new(&[("hostile", "a.wasm"), ("hostile", "b.wasm")], &["ok"]);
    let expected = format!(
        "error: {}: plugin name hostile is already used by {}",
        setup.plugin("b.wasm").display(),
        setup.plugin("a.wasm").display()
    );
    let out = setup.simulate("0s");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains(&expected), "{stderr}");
    assert!(!stderr.contains("cannot link"), "{stderr}");
    assert!(
        reconciles_of(&stdout, "h-ok")[0].contains("created ConfigMap default/h-ok"),
        "{stdout}"
    );

    let out = setup.dev_until_settled(Duration::from_secs(60));
    assert!(
        text(&out.stdout).contains(&expected),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn inspect_of_several_plugins_refuses_twins_by_file_and_shows_the_rest() {
    let setup = rival_setup();
    let out = setup
        .host()
        .arg("inspect")
        .arg(setup.plugins.path())
        .output()
        .expect("run reconciler-host");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains(&rival_refusal(&setup)), "{stderr}");
    assert_eq!(stdout.matches("name: hostile\n").count(), 1, "{stdout}");
    assert!(!stdout.contains("name: rival"), "{stdout}");
    assert!(stdout.contains("  maxEvents: 25\n"), "{stdout}");
}

#[test]
fn inspect_names_the_option_a_concurrency_hint_above_the_maximum_needs() {
    let setup = Setup::new(&[("hostile-greedy", "greedy.wasm")], &[]);
    let inspect = |extra: &[&str]| {
        setup
            .host()
            .args(extra)
            .arg("inspect")
            .arg(setup.plugin("greedy.wasm"))
            .output()
            .expect("run reconciler-host")
    };
    let out = inspect(&[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("hints.maxConcurrentReconciles asks for 4096 reconciles, above this host's maximum of 1024 reconciles (raise it with --plugin-concurrency-max)"),
        "{stderr}"
    );
    let out = inspect(&["--plugin-concurrency-max", "4096"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("maxConcurrentReconciles: 4096"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn host_option_defaults_above_their_maxima_are_refused() {
    let setup = Setup::new(&[], &[]);
    for (args, option) in [
        (["--plugin-events", "2000"], "--plugin-events is 2000"),
        (
            ["--plugin-concurrency", "2000"],
            "--plugin-concurrency is 2000",
        ),
        (["--plugin-instances", "1"], "--plugin-instances is 1"),
        (
            ["--admission-instances", "0"],
            "--admission-instances is 0: it must be at least 1",
        ),
    ] {
        let out = setup
            .host()
            .args(args)
            .arg("inspect")
            .arg(Path::new("none.wasm"))
            .output()
            .expect("run reconciler-host");
        assert_eq!(out.status.code(), Some(2));
        assert!(text(&out.stderr).contains(option), "{}", text(&out.stderr));
    }
}
