//! `reconciler-host simulate` as a user runs it.

use std::process::Command;

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The compiled example plugins (scripts/build-plugins puts them there).
fn plugins_dir() -> PathBuf {
    let dir = root().join("plugins");
    assert!(
        dir.join("podset.wasm").is_file(),
        "build the plugins first: scripts/build-plugins"
    );
    dir
}

fn simulate(objects: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let plugins = plugins_dir();
    let cache = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_reconciler-host"))
        .args([
            "--compile-cache",
            cache.path().to_str().unwrap(),
            "simulate",
            "--plugins-dir",
        ])
        .arg(&plugins)
        .arg("--objects")
        .arg(objects)
        .args(extra)
        .output()
        .expect("run reconciler-host")
}

#[test]
fn the_same_input_prints_identical_output() {
    let objects = root().join("examples");
    let first = simulate(&objects, &["--advance", "1m"]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let second = simulate(&objects, &["--advance", "1m"]);
    assert_eq!(first.stdout, second.stdout);
    let text = String::from_utf8(first.stdout).unwrap();
    assert!(
        text.contains("podset PodSet default/example: created Deployment default/example"),
        "{text}"
    );
    assert!(text.contains("kind: Deployment"), "{text}");
}

#[test]
fn a_bad_objects_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("broken.yaml");
    std::fs::write(&file, "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n").unwrap();
    let out = simulate(&file, &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("broken.yaml: document 1: needs metadata.name"),
        "{err}"
    );
}

#[test]
fn json_logs_are_one_object_a_line_with_the_reconcile_span() {
    let output = Command::new(env!("CARGO_BIN_EXE_reconciler-host"))
        .env("RUST_LOG", "debug")
        .args(["--log-format", "json", "--no-compile-cache", "simulate"])
        .arg("--plugins-dir")
        .arg(plugins_dir())
        .arg("--objects")
        .arg(root().join("examples/podset.yaml"))
        .output()
        .expect("run reconciler-host");
    assert!(output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let reconcile = lines
        .iter()
        .find(|l| l["span"]["name"] == "reconcile")
        .unwrap_or_else(|| panic!("no line inside a reconcile span:\n{stderr}"));
    assert_eq!(reconcile["span"]["plugin"], "podset");
    assert_eq!(reconcile["span"]["kind"], "PodSet");
    assert_eq!(reconcile["span"]["namespace"], "default");
    assert_eq!(reconcile["span"]["object_name"], "example");
}

#[test]
fn a_plugin_a_real_cluster_would_refuse_is_named_and_the_others_run() {
    let scope_variant = root().join("target/test-plugins/hostile-cluster-scope.wasm");
    assert!(
        scope_variant.is_file(),
        "build the plugins first: scripts/build-plugins"
    );
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(
        plugins_dir().join("podset.wasm"),
        plugins.path().join("podset.wasm"),
    )
    .unwrap();
    let refused = plugins.path().join("hostile.wasm");
    std::fs::copy(&scope_variant, &refused).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_reconciler-host"))
        .args([
            "--compile-cache",
            cache.path().to_str().unwrap(),
            "simulate",
        ])
        .arg("--plugins-dir")
        .arg(plugins.path())
        .arg("--objects")
        .arg(root().join("examples/podset.yaml"))
        .arg("--crds")
        .arg(root().join("crds"))
        .output()
        .expect("run reconciler-host");
    assert!(!out.status.success(), "a refused plugin fails the run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "error: {}: plugin hostile reconciles a namespaced kind (hostile.example.com/v1 Hostile) but owns[1] declares rbac.authorization.k8s.io/v1 ClusterRole, which is cluster-scoped",
            refused.display()
        )),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("podset PodSet default/example: created Deployment default/example"),
        "the other plugin ran: {stdout}"
    );
    assert!(
        stdout.contains("kind: CustomResourceDefinition"),
        "the CRDs of --crds are in the cluster: {stdout}"
    );
}

/// The issue a user hit: a PodSet a real API server refuses (a value of the
/// wrong type, a field its CRD does not declare) was stored, and the plugin
/// then failed to parse it. Now it is refused naming the object and field,
/// as kubectl apply is refused.
#[test]
fn an_object_its_crd_refuses_is_refused_naming_the_object_and_field() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("crds/podset.yaml"),
        dir.path().join("podset-crd.yaml"),
    )
    .unwrap();
    for (spec, field) in [
        ("{size: \"three\"}", ".spec.size: expected numeric"),
        (
            "{size: 3, color: blue}",
            ".spec.color: field not declared in schema",
        ),
        (
            "{size: -1}",
            "spec.size in body should be greater than or equal to 0",
        ),
    ] {
        let object = format!(
            "apiVersion: example.com/v1alpha1\nkind: PodSet\nmetadata: {{name: bad, namespace: default}}\nspec: {spec}\n"
        );
        std::fs::write(dir.path().join("bad.yaml"), object).unwrap();
        let out = simulate(dir.path(), &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{spec} was accepted");
        assert!(
            stderr.contains("PodSet default/bad") && stderr.contains(field),
            "{spec}: {stderr}"
        );
    }
}

#[test]
fn several_clusters_print_identical_output_naming_the_cluster_of_every_line() {
    let clusters = root().join("examples/clusters");
    let extra = [
        "--cluster-objects",
        clusters.to_str().unwrap(),
        "--cluster-labels",
        "east:region=us-east",
    ];
    // The CRDs are the objects every cluster starts from; each directory
    // adds its own PodSet.
    let first = simulate(&root().join("crds"), &extra);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let second = simulate(&root().join("crds"), &extra);
    assert_eq!(first.stdout, second.stdout, "runs are byte-identical");
    let text = String::from_utf8(first.stdout).unwrap();

    let (reconciles, rest) = text.split_once("\n# events\n").unwrap();
    let (events, objects) = rest.split_once("\n# objects\n").unwrap();
    for line in reconciles.lines().chain(events.lines()) {
        if line.starts_with('[') {
            assert!(
                ["] east: ", "] west: ", "(cluster east)", "(cluster west)"]
                    .iter()
                    .any(|c| line.contains(c)),
                "a line that names no cluster: {line}"
            );
        }
    }
    assert!(
        text.contains("[+0s] east: podset PodSet default/web: created Deployment default/web")
            && text
                .contains("[+0s] west: podset PodSet default/web: created Deployment default/web"),
        "{text}"
    );
    // Each cluster kept its own objects: the same names, other sizes, and
    // the plugin was told which cluster it was in.
    let mut by_cluster: std::collections::BTreeMap<String, Vec<serde_json::Value>> =
        Default::default();
    for document in objects.split("--- # cluster ").skip(1) {
        let (cluster, yaml) = document.split_once('\n').unwrap();
        let object: serde_json::Value = serde_yaml_ng::from_str(yaml).unwrap();
        by_cluster
            .entry(cluster.to_string())
            .or_default()
            .push(object);
    }
    let find = |cluster: &str, kind: &str| {
        by_cluster[cluster]
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == "web")
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} web in {cluster}"))
    };
    assert_eq!(find("east", "Deployment")["spec"]["replicas"], 3);
    assert_eq!(find("west", "Deployment")["spec"]["replicas"], 1);
    assert_eq!(find("east", "PodSet")["status"]["cluster"], "east");
    assert_eq!(find("west", "PodSet")["status"]["cluster"], "west");
    assert_eq!(
        find("east", "PodSet")["status"]["podNames"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

#[test]
fn cluster_options_that_cannot_work_are_refused_with_the_reason() {
    let objects = root().join("examples/podset.yaml");
    let out = simulate(&objects, &["--cluster-labels", "east:region=us-east"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("add --clusters N or --cluster-objects DIR"),
        "{err}"
    );

    let out = simulate(
        &objects,
        &["--clusters", "2", "--cluster-labels", "east:a=b"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "names cluster east, which is not among the clusters run (member-1, member-2)"
        ),
        "{err}"
    );
}
