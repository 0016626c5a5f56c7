//! The conformance suite (tests/conformance/cases) run by the Rust SDK's
//! native harness: each case's probe reconciled by `Harness`, its answer
//! compared with what the case expects, as `reconciler-host test` compares
//! the compiled probe's. A rule the host keeps and the harness does not
//! fails here, naming the case.

use std::path::{Path, PathBuf};

use conformance_probe::Probes;
use reconciler_sdk::k8s_openapi::jiff::Timestamp;
use reconciler_sdk::testing::{Harness, Outcome};
use serde_json::{Value, json};

fn cases() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cases");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/conformance/cases")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    files
}

/// The answer in the expectation's shape: absent keys mean nothing.
fn answer(outcome: &Outcome) -> Value {
    let r = &outcome.response;
    let mut apply: Vec<Value> = r
        .apply
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect();
    apply.sort_by_key(order);
    let mut delete = r.delete.clone();
    delete.sort();
    let mut out = json!({});
    if !apply.is_empty() {
        out["apply"] = json!(apply);
    }
    if !delete.is_empty() {
        out["delete"] = json!(delete);
    }
    if let Some(status) = &r.status {
        out["status"] = serde_json::from_str(status).unwrap();
    }
    if !r.events.is_empty() {
        out["events"] = json!(r.events);
    }
    out
}

fn order(v: &Value) -> (String, String, String, String) {
    let s = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (
        s("/apiVersion"),
        s("/kind"),
        s("/metadata/namespace"),
        s("/metadata/name"),
    )
}

/// Runs one case; `Err` says how the harness disagreed.
fn run(file: &Path) -> Result<(), String> {
    let case: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(file).unwrap())
        .map_err(|e| format!("not YAML: {e}"))?;
    let mut harness = Harness::<Probes>::new();
    for object in case["objects"].as_array().into_iter().flatten() {
        harness.insert(object);
    }
    if let Some(now) = case["now"].as_str() {
        harness = harness.at(now.parse::<Timestamp>().map_err(|e| e.to_string())?);
    }
    if let Some(cluster) = case.get("cluster") {
        let labels: Vec<(String, String)> = cluster["labels"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        let labels: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        harness = harness.in_cluster(cluster["name"].as_str().unwrap_or_default(), &labels);
    }
    let expect = &case["expect"];
    match (
        harness.reconcile(&case["primary"]),
        expect["error"].as_str(),
    ) {
        (Err(e), Some(needle)) if e.contains(needle) => Ok(()),
        (Err(e), Some(needle)) => Err(format!("expected an error containing {needle:?}, got: {e}")),
        (Ok(outcome), Some(needle)) => Err(format!(
            "expected an error containing {needle:?}, but the probe answered {}",
            answer(&outcome)
        )),
        (Err(e), None) => Err(format!("the reconcile failed: {e}")),
        (Ok(outcome), None) => {
            let mut expected = expect.clone();
            if let Some(apply) = expected.get_mut("apply").and_then(Value::as_array_mut) {
                apply.sort_by_key(order);
            }
            let actual = answer(&outcome);
            if actual == expected {
                Ok(())
            } else {
                Err(format!("expected {expected}\n     got {actual}"))
            }
        }
    }
}

#[test]
fn the_rust_harness_passes_every_conformance_case() {
    let failures: Vec<String> = cases()
        .iter()
        .filter_map(|file| {
            run(file)
                .err()
                .map(|why| format!("{}: {why}", file.file_stem().unwrap().to_string_lossy()))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "the Rust harness disagrees with the host:\n{}",
        failures.join("\n")
    );
}
