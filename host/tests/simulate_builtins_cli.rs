//! `reconciler-host simulate` on the examples with the embedded cluster
//! playing the built-in controllers, as a user runs it.

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn simulate(extra: &[&str]) -> String {
    let plugins = root().join("plugins");
    assert!(
        plugins.join("podset.wasm").is_file(),
        "build the plugins first: scripts/build-plugins"
    );
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_reconciler-host"))
        .current_dir(root())
        .args([
            "--compile-cache",
            cache.path().to_str().unwrap(),
            "simulate",
        ])
        .args([
            "--plugins-dir",
            "plugins",
            "--objects",
            "examples",
            "--crds",
            "crds",
        ])
        .args(extra)
        .output()
        .expect("run reconciler-host");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The YAML document of the object `kind` `name` in the printed objects.
fn object<'a>(text: &'a str, kind: &str, name: &str) -> &'a str {
    text.split("---\n")
        .find(|doc| {
            doc.lines().any(|l| l == format!("kind: {kind}"))
                && doc.lines().any(|l| l == format!("  name: {name}"))
        })
        .unwrap_or_else(|| panic!("no {kind} {name} in:\n{text}"))
}

#[test]
fn the_examples_lifecycles_show_and_repeat_byte_for_byte() {
    let first = simulate(&["--advance", "1m"]);
    let second = simulate(&["--advance", "1m"]);
    assert_eq!(first, second, "two runs printed differently");

    let podset = object(&first, "PodSet", "example");
    assert_eq!(podset.matches("  - example-").count(), 3, "{podset}");
    let memcached = object(&first, "Memcached", "cache");
    assert_eq!(memcached.matches("  - cache-").count(), 2, "{memcached}");
    let cluster = object(&first, "KubernetesCluster", "prod");
    assert!(cluster.contains("  phase: Running"), "{cluster}");
    for line in [
        "[+0s]   (cluster) created ReplicaSet default/example-",
        "[+2s]   (cluster) started Pod default/",
        "[+10s]   (cluster) completed Job default/prod-creating-1",
        "Normal OperationSucceeded KubernetesCluster default/prod",
    ] {
        assert!(first.contains(line), "{line:?} missing from:\n{first}");
    }
}

#[test]
fn without_the_built_in_controllers_nothing_acts_on_a_deployment() {
    let text = simulate(&["--advance", "1m", "--no-builtin-controllers"]);
    assert!(!text.contains("(cluster)"), "{text}");
    assert!(!text.contains("kind: ReplicaSet"), "{text}");
    assert!(!text.contains("kind: Pod\n"), "{text}");
    let podset = object(&text, "PodSet", "example");
    assert!(podset.contains("podNames: []"), "{podset}");
    let cluster = object(&text, "KubernetesCluster", "prod");
    assert!(cluster.contains("  phase: Creating"), "{cluster}");
}

#[test]
fn a_job_selected_to_fail_fails_after_its_duration() {
    let text = simulate(&[
        "--advance",
        "1m",
        "--job-duration",
        "30s",
        "--fail-jobs",
        "example.com/operation=creating",
    ]);
    assert!(
        text.contains("[+30s]   (cluster) failed Job default/prod-creating-1"),
        "{text}"
    );
    let cluster = object(&text, "KubernetesCluster", "prod");
    assert!(cluster.contains("  phase: Failed"), "{cluster}");
}

/// `dev --until-settled` on the PodSet example alone, with `extra` options.
fn dev(extra: &[&str]) -> String {
    let work = tempfile::tempdir().unwrap();
    let plugins = work.path().join("plugins");
    let objects = work.path().join("objects");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::create_dir_all(&objects).unwrap();
    std::fs::copy(
        root().join("plugins/podset.wasm"),
        plugins.join("podset.wasm"),
    )
    .unwrap();
    std::fs::copy(
        root().join("examples/podset.yaml"),
        objects.join("podset.yaml"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_reconciler-host"))
        .current_dir(work.path())
        .args([
            "--compile-cache",
            work.path().join("cache").to_str().unwrap(),
        ])
        .args(["dev", "--until-settled", "--crds"])
        .arg(root().join("crds"))
        .arg("--plugins-dir")
        .arg(&plugins)
        .arg("--objects")
        .arg(&objects)
        .args(extra)
        .output()
        .expect("run reconciler-host");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn dev_prints_the_built_ins_changes_indented_and_grouped() {
    let text = dev(&[]);
    let lines: Vec<&str> = text.lines().collect();
    let replica_set = lines
        .iter()
        .position(|l| l.contains("   (cluster) created ReplicaSet default/example-"))
        .unwrap_or_else(|| panic!("no ReplicaSet line in:\n{text}"));
    let pods = lines
        .iter()
        .find(|l| l.contains("   (cluster) created Pod default/example-"))
        .unwrap_or_else(|| panic!("no Pod line in:\n{text}"));
    assert_eq!(
        pods.matches("default/example-").count(),
        3,
        "one line: {pods}"
    );
    let created = lines
        .iter()
        .position(|l| l.contains("podset PodSet default/example: created Deployment"))
        .unwrap_or_else(|| panic!("no reconcile line in:\n{text}"));
    assert!(created < replica_set, "after the reconcile:\n{text}");

    let off = dev(&["--no-builtin-controllers"]);
    assert!(!off.contains("(cluster)"), "{off}");
    assert!(off.contains(r#"{"podNames":[]}"#), "{off}");
}
