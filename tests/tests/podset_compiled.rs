//! The compiled podset plugin against its golden cases and ad-hoc requests.

use std::sync::Arc;

use reconciler_host::golden::{CaseOutcome, discover, run_case};
use reconciler_host::plugin::{ReconcileInput, WriteRole};
use reconciler_sdk::memory_cache::MemoryCache;
use reconciler_tests::{example_plugin, load, root};
use serde_json::json;

#[test]
fn podset_passes_its_golden_cases() {
    let plugin = load(&example_plugin("podset"));
    let files = discover(&root().join("plugins/podset/cases")).unwrap();
    assert!(
        files.len() >= 5,
        "expected the podset cases, found {files:?}"
    );
    for file in files {
        let result = run_case(&plugin, &file);
        if let CaseOutcome::Failed(why) | CaseOutcome::Broken(why) = &result.outcome {
            panic!("{}: {why}", file.display());
        }
    }
}

#[test]
fn podset_metadata_declares_what_it_touches() {
    let plugin = load(&example_plugin("podset"));
    let m = plugin.metadata();
    assert_eq!(m.name, "podset");
    assert_eq!(m.primary.api_version(), "example.com/v1alpha1");
    assert_eq!(m.owns.len(), 1);
    assert_eq!(m.owns[0].kind, "Deployment");
    assert_eq!(m.reads[0].kind.kind, "Pod");
    assert!(m.reads[0].metadata_only);
}

#[test]
fn a_broken_golden_case_is_reported_as_a_diff() {
    let plugin = load(&example_plugin("podset"));
    let dir = tempfile::tempdir().unwrap();
    let case = std::fs::read_to_string(root().join("plugins/podset/cases/scale-up.yaml")).unwrap();
    let wrong = dir.path().join("wrong.yaml");
    std::fs::write(&wrong, case.replace("replicas: 5", "replicas: 4")).unwrap();
    match run_case(&plugin, &wrong).outcome {
        CaseOutcome::Failed(diff) => {
            assert!(
                diff.contains("-    replicas: 4") && diff.contains("+    replicas: 5"),
                "{diff}"
            );
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn podset_response_carries_ten_kilobytes_of_pods_through_the_boundary() {
    let plugin = load(&example_plugin("podset"));
    let mut cache = MemoryCache::new();
    let podset = json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "big", "namespace": "default", "uid": "u-1"}, "spec": {"size": 20}});
    for i in (0..20).rev() {
        cache
            .insert(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("big-{i:02}"),
                "namespace": "default", "labels": {"app": "podset", "podset": "big"}}}))
            .unwrap();
    }
    let request = cache.request_for(&podset, &plugin.metadata().owns);
    let input = ReconcileInput {
        request,
        primary_namespace: Some("default".into()),
        object: "default/big".into(),
        reader: Arc::new(cache),
        now_millis: 0,
        cluster: Default::default(),
    };
    let response = plugin.reconcile(input).unwrap();
    assert_eq!(response.apply.len(), 1);
    assert_eq!(response.apply[0].role, WriteRole::Owned);
    assert_eq!(response.apply[0].object["spec"]["replicas"], 20);
    let names = response.status.unwrap()["podNames"].clone();
    let expected: Vec<String> = (0..20).map(|i| format!("big-{i:02}")).collect();
    assert_eq!(names, json!(expected));
}
