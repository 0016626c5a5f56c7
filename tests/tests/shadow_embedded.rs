//! Candidates in shadow on the embedded cluster: a `NAME.candidate.wasm`
//! beside `NAME.wasm` decides on every reconcile with the serving version's
//! inputs and writes nothing; the book counts and keeps what it decided
//! differently; a candidate that cannot stand beside its serving file is
//! refused with the reason, and one that arrives first waits for it; and
//! `dev` and `simulate` show the same flow, `simulate` byte for byte
//! again.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use reconciler_host::cluster::VirtualClock;
use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::engine::Engine;
use reconciler_host::engine::shadow_book::ShadowBook;
use reconciler_host::plugin::hot_reload::{PluginDirectory, ReloadEvent};
use reconciler_host::process::simulate::{SimulationConfig, run};
use reconciler_tests::{example_plugin, root, sandbox, test_plugin};
use serde_json::json;

const HOST: &str = env!("CARGO_BIN_EXE_reconciler-host-under-test");

fn podset_js() -> PathBuf {
    example_plugin("podset-js/podset-js")
}

fn doubled() -> PathBuf {
    test_plugin("podset-doubled-js")
}

fn podset(name: &str, size: i64) -> serde_json::Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"size": size}})
}

#[tokio::test]
async fn a_candidate_decides_on_every_reconcile_and_applies_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = VirtualClock::at(reconciler_sdk::testing::DEFAULT_NOW_MILLIS);
    let cluster = Arc::new(EmbeddedCluster::new(Arc::new(clock.clone())));
    let mut plugins = PluginDirectory::new(dir.path(), sandbox().clone());
    let book = Arc::new(ShadowBook::default());
    let engine = Engine::empty(cluster.clone(), Arc::new(clock.clone()))
        .with_shadow(plugins.candidates(), book.clone());
    for (name, size) in [("a", 1), ("b", 2)] {
        cluster.apply_as_user(podset(name, size)).unwrap();
    }
    // One the candidate fails on: a failure of its own, not the serving
    // version's.
    let mut failing = podset("c", 1);
    failing["metadata"]["labels"] = json!({"tests.example.com/candidate-fails": ""});
    cluster.apply_as_user(failing).unwrap();
    // The candidate first: it waits for its serving file, then runs.
    std::fs::copy(doubled(), dir.path().join("podset-js.candidate.wasm")).unwrap();
    let events = plugins.sync(&engine).await;
    assert!(
        matches!(&events[..], [ReloadEvent::Failed { reason, .. }] if reason.contains("serves none")),
        "{events:?}"
    );
    std::fs::copy(podset_js(), dir.path().join("podset-js.wasm")).unwrap();
    let events = plugins.sync(&engine).await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ReloadEvent::CandidateLoaded { name, .. } if name == "podset-js")),
        "{events:?}"
    );
    let status = plugins.status();
    let entry = status
        .iter()
        .find(|s| s.file.ends_with("podset-js.candidate.wasm"))
        .unwrap();
    assert_eq!(entry.candidate_for.as_deref(), Some("podset-js"));

    run(&engine, &clock, &SimulationConfig::default()).await;
    let objects = cluster.objects();
    for (name, size) in [("a", 1), ("b", 2), ("c", 1)] {
        let deployment = objects
            .iter()
            .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == name)
            .expect("the serving version created it");
        assert_eq!(deployment["spec"]["replicas"], size, "{name}");
    }
    let shadow = book.of("podset-js").expect("the candidate ran");
    assert_eq!(shadow.counts.agreed, 0);
    assert!(shadow.counts.failed >= 1, "{:?}", shadow.counts);
    assert!(shadow.counts.differed >= 2, "{:?}", shadow.counts);
    let failed = shadow
        .differing
        .iter()
        .find(|d| d.object == "PodSet default/c")
        .expect("the failing object is kept");
    assert_eq!(failed.outcome, "failed");
    let text = serde_json::to_string(&failed.differences).unwrap();
    assert!(
        text.contains("candidate fails on PodSets labelled"),
        "{text}"
    );
    for (name, size) in [("a", 1), ("b", 2)] {
        let object = format!("PodSet default/{name}");
        let entry = shadow
            .differing
            .iter()
            .find(|d| d.object == object)
            .unwrap_or_else(|| panic!("{object} among {:?}", shadow.differing));
        let text = serde_json::to_string(&entry.differences).unwrap();
        assert!(
            text.contains(&format!(
                "\"path\":\"spec.replicas\",\"serving\":{size},\"candidate\":{}",
                2 * size
            )),
            "{text}"
        );
    }

    // Gone with its file: the book stays, no more runs.
    std::fs::remove_file(dir.path().join("podset-js.candidate.wasm")).unwrap();
    let events = plugins.sync(&engine).await;
    assert!(
        matches!(&events[..], [ReloadEvent::CandidateUnloaded { name, .. }] if name == "podset-js"),
        "{events:?}"
    );
    assert!(plugins.candidates().of("podset-js").is_none());
}

#[tokio::test]
async fn a_candidate_of_another_plugin_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let clock = VirtualClock::at(reconciler_sdk::testing::DEFAULT_NOW_MILLIS);
    let cluster = Arc::new(EmbeddedCluster::new(Arc::new(clock.clone())));
    let mut plugins = PluginDirectory::new(dir.path(), sandbox().clone());
    let engine = Engine::empty(cluster, Arc::new(clock));
    std::fs::copy(podset_js(), dir.path().join("podset-js.wasm")).unwrap();
    std::fs::copy(
        example_plugin("memcached"),
        dir.path().join("podset-js.candidate.wasm"),
    )
    .unwrap();
    let events = plugins.sync(&engine).await;
    let refused: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            ReloadEvent::Failed { reason, .. } => Some(reason.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        refused.len() == 1 && refused[0].contains("a candidate is a version of the plugin"),
        "{events:?}"
    );
    // The serving version is untouched and still the only plugin.
    assert_eq!(engine.plugins().len(), 1);
    assert!(plugins.candidates().of("podset-js").is_none());
}

fn plugins_dir_with_candidate() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(podset_js(), dir.path().join("podset-js.wasm")).unwrap();
    std::fs::copy(doubled(), dir.path().join("podset-js.candidate.wasm")).unwrap();
    dir
}

fn host(args: &[&str]) -> std::process::Output {
    Command::new(HOST).args(args).output().unwrap()
}

fn text(path: &Path) -> String {
    path.display().to_string()
}

#[test]
fn simulate_shows_each_shadow_run_after_its_reconcile_byte_for_byte_again() {
    let plugins = plugins_dir_with_candidate();
    let objects = root().join("examples/podset.yaml");
    let args = [
        "simulate",
        "--plugins-dir",
        &text(plugins.path()),
        "--objects",
        &text(&objects),
    ];
    let first = host(&args);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let out = String::from_utf8(first.stdout.clone()).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    let reconcile = lines
        .iter()
        .position(|l| l.contains("podset-js PodSet default/example: created Deployment"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        lines[reconcile + 1].contains("shadow podset-js")
            && lines[reconcile + 1].contains("spec.replicas: 3 -> 6"),
        "{out}"
    );
    assert!(out.contains("CandidateDiffers"), "{out}");
    assert!(out.contains("replicas: 3\n"), "{out}");
    assert!(!out.contains("replicas: 6\n"), "{out}");
    let again = host(&args);
    assert_eq!(first.stdout, again.stdout);
}

/// `dev --until-settled` over examples/podset.yaml with the plugins of
/// `plugins`.
fn dev_on_example_podset(plugins: &Path) -> std::process::Output {
    let objects = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("examples/podset.yaml"),
        objects.path().join("podset.yaml"),
    )
    .unwrap();
    host(&[
        "dev",
        "--plugins-dir",
        &text(plugins),
        "--objects",
        &text(objects.path()),
        "--until-settled",
    ])
}

#[test]
fn dev_prints_a_line_per_shadow_run() {
    let plugins = plugins_dir_with_candidate();
    let out = dev_on_example_podset(plugins.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("candidate podset-js") && stdout.contains("runs in shadow"),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("shadow podset-js") && l.contains("spec.replicas: 3 -> 6")),
        "{stdout}"
    );
}

/// Ten PodSets of size 1 (`ps-0`..`ps-9`), those named in `failing`
/// labelled for the doubling candidate to fail on.
fn ten_podsets(failing: &[usize]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    for i in 0..10 {
        let labels = match failing.contains(&i) {
            true => "\n  labels: {tests.example.com/candidate-fails: \"yes\"}",
            false => "",
        };
        text.push_str(&format!(
            "---\napiVersion: example.com/v1alpha1\nkind: PodSet\nmetadata:\n  name: ps-{i}\n  namespace: default{labels}\nspec:\n  size: 1\n"
        ));
    }
    std::fs::write(dir.path().join("podsets.yaml"), text).unwrap();
    dir
}

/// `spec.replicas` of each Deployment `simulate` ended with, by name.
fn final_replicas(out: &str) -> std::collections::BTreeMap<String, i64> {
    let objects = out
        .split("\n# objects")
        .nth(1)
        .unwrap_or_else(|| panic!("{out}"));
    let mut sizes = std::collections::BTreeMap::new();
    for doc in objects.split("\n---") {
        let Ok(v) = serde_yaml_ng::from_str::<serde_json::Value>(doc) else {
            continue;
        };
        if v["kind"] == "Deployment" {
            let name = v["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            sizes.insert(name, v["spec"]["replicas"].as_i64().unwrap_or(-1));
        }
    }
    sizes
}

fn simulate_with_rollout(rollout: &str, objects: &Path) -> std::process::Output {
    let plugins = plugins_dir_with_candidate();
    std::fs::write(plugins.path().join("podset-js.rollout.yaml"), rollout).unwrap();
    host(&[
        "simulate",
        "--plugins-dir",
        &text(plugins.path()),
        "--objects",
        &text(objects),
        "--advance",
        "5m",
    ])
}

#[test]
fn simulate_steps_a_canary_of_candidate_files_and_promotes_it_byte_for_byte_again() {
    let objects = ten_podsets(&[]);
    let rollout = "steps: [50, 100]\ninterval: 1m\n";
    let first = simulate_with_rollout(rollout, objects.path());
    let out = String::from_utf8(first.stdout.clone()).unwrap();
    assert!(first.status.success(), "{out}");
    let started = out
        .lines()
        .position(|l| l.contains("[+0s] canary podset-js") && l.contains("rollout started"))
        .unwrap_or_else(|| panic!("{out}"));
    let second = out
        .lines()
        .position(|l| l.contains("[+1m] canary podset-js") && l.contains("step 2 of 2"))
        .unwrap_or_else(|| panic!("{out}"));
    let promoted = out
        .lines()
        .position(|l| l.contains("[+2m] canary podset-js") && l.contains("every step passed"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(started < second && second < promoted, "{out}");
    // At the first step about half are the candidate's; at the end all.
    let sizes = final_replicas(&out);
    assert_eq!(sizes.len(), 10, "{out}");
    assert!(sizes.values().all(|n| *n == 2), "{sizes:?}");
    let again = simulate_with_rollout(rollout, objects.path());
    assert_eq!(first.stdout, again.stdout);
}

#[test]
fn simulate_rolls_a_failing_canary_back_and_the_serving_sizes_return() {
    let objects = ten_podsets(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    let first = simulate_with_rollout("steps: [50, 100]\ninterval: 1m\n", objects.path());
    let out = String::from_utf8(first.stdout.clone()).unwrap();
    assert!(first.status.success(), "{out}");
    assert!(
        out.lines().any(|l| l.contains("canary podset-js")
            && l.contains("rolled back: at step 1 (50%)")
            && l.contains("maxErrorRate")),
        "{out}"
    );
    assert!(!out.contains("step 2 of 2"), "{out}");
    let sizes = final_replicas(&out);
    assert_eq!(sizes.len(), 10, "{out}");
    assert!(sizes.values().all(|n| *n == 1), "{sizes:?}");
}

#[test]
fn dev_gives_a_canary_candidate_its_share_and_says_so() {
    let plugins = plugins_dir_with_candidate();
    std::fs::write(
        plugins.path().join("podset-js.rollout.yaml"),
        "steps: [100]\ninterval: 1h\n",
    )
    .unwrap();
    let out = dev_on_example_podset(plugins.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("canary podset-js") && l.contains("rollout started, step 1 of 1")),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("Deployment default/example") && l.contains("6")),
        "the candidate decided: {stdout}"
    );
}
