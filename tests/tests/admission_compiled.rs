//! Admission through compiled plugins: kubernetescluster's rules, and the
//! hostile plugin's misbehaviours each answered by its failure policy.

use std::sync::Arc;

use reconciler_host::golden::{CaseOutcome, discover, run_case};
use reconciler_host::plugin::{AdmissionDecision, ReconcileInput, Sandbox, SandboxConfig};
use reconciler_sdk::memory_cache::MemoryCache;
use reconciler_sdk::{AdmissionRequest, FailurePolicy, Operation, UserInfo};
use reconciler_tests::{
    example_plugin, load, root, test_compile_cache_dir, test_limits, test_plugin,
};
use serde_json::{Value, json};

fn request(operation: Operation, object: Option<&Value>, old: Option<&Value>) -> AdmissionRequest {
    AdmissionRequest {
        operation,
        object: object.map(Value::to_string),
        old_object: old.map(Value::to_string),
        user_info: UserInfo {
            username: "alice".into(),
            ..Default::default()
        },
        dry_run: false,
    }
}

fn cluster(masters: i64, version: Option<&str>) -> Value {
    let mut spec = json!({"masters": masters, "workers": 2, "timeoutSeconds": 600});
    if let Some(v) = version {
        spec["version"] = json!(v);
    }
    json!({"apiVersion": "example.com/v1alpha1", "kind": "KubernetesCluster",
        "metadata": {"name": "prod", "namespace": "default"}, "spec": spec})
}

#[test]
fn kubernetescluster_denies_a_change_of_masters() {
    let plugin = load(&example_plugin("kubernetescluster"));
    let settings = plugin
        .admission()
        .expect("kubernetescluster serves admission");
    assert_eq!(settings.failure_policy, FailurePolicy::Fail);
    assert!(settings.mutating);
    let old = cluster(3, Some("1.33"));
    let new = cluster(5, Some("1.33"));
    let decision = plugin.admit(
        request(Operation::Update, Some(&new), Some(&old)),
        "default/prod",
        0,
    );
    assert!(!decision.allowed);
    assert_eq!(
        decision.message.as_deref(),
        Some(
            "spec.masters cannot change after creation: it is 3, the update asks for 5; \
             create a new KubernetesCluster for another control-plane size"
        )
    );
    assert!(decision.patch.is_empty(), "a denied request is not patched");
}

#[test]
fn kubernetescluster_defaults_the_version_as_a_json_patch() {
    let plugin = load(&example_plugin("kubernetescluster"));
    let decision = plugin.admit(
        request(Operation::Create, Some(&cluster(3, None)), None),
        "default/prod",
        0,
    );
    assert!(decision.allowed, "{decision:?}");
    assert_eq!(
        decision.patch,
        vec![json!({"op": "add", "path": "/spec/version", "value": "1.33"})]
    );
}

fn hostile(mode: &str) -> Value {
    json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
        "metadata": {"name": "h", "namespace": "default"}, "spec": {"mode": mode}})
}

fn admit_hostile(plugin: &str, mode: &str) -> AdmissionDecision {
    let plugin = load(&test_plugin(plugin));
    plugin.admit(
        request(Operation::Create, Some(&hostile(mode)), None),
        "default/h",
        0,
    )
}

#[test]
fn failures_are_denied_under_fail_naming_the_failure() {
    for (mode, says) in [
        ("admit-trap", "hostile admission trap"),
        ("admit-loop", "timed out after 300 ms"),
        ("admit-error", "hostile admission error"),
        ("admit-rename", "changes metadata.name"),
        ("admit-finalizers", "changes metadata.finalizers"),
        ("admit-kind", "changes kind"),
    ] {
        let decision = admit_hostile("hostile", mode);
        assert!(!decision.allowed, "{mode}: {decision:?}");
        let message = decision.message.unwrap_or_default();
        assert!(
            message.contains(says) && message.contains("failure policy Fail"),
            "{mode}: {message}"
        );
        assert!(decision.patch.is_empty(), "{mode}");
    }
}

#[test]
fn failures_are_admitted_unchanged_under_ignore_with_a_warning() {
    for mode in ["admit-trap", "admit-loop", "admit-rename"] {
        let decision = admit_hostile("hostile-admission-ignore", mode);
        assert!(decision.allowed, "{mode}: {decision:?}");
        assert!(decision.patch.is_empty(), "{mode}: unchanged");
        assert!(
            decision
                .warnings
                .iter()
                .any(|w| w.contains("failure policy Ignore")),
            "{mode}: {:?}",
            decision.warnings
        );
    }
}

#[test]
fn a_denial_and_a_default_pass_through_and_floods_are_cut() {
    let denied = admit_hostile("hostile", "admit-deny");
    assert!(!denied.allowed);
    assert_eq!(denied.message.as_deref(), Some("hostile says no"));
    assert_eq!(denied.warnings, vec!["hostile warns".to_string()]);

    let fine = admit_hostile("hostile", "ok");
    assert!(fine.allowed);
    assert_eq!(
        fine.patch,
        vec![json!({"op": "add", "path": "/spec/defaulted", "value": true})]
    );

    let flood = admit_hostile("hostile", "admit-flood");
    assert!(!flood.allowed);
    assert!(flood.message.unwrap().len() <= 4096);
    assert_eq!(flood.warnings.len(), 16);
    assert!(flood.warnings.iter().all(|w| w.len() <= 256));
}

#[test]
fn operations_not_declared_are_admitted_without_calling_the_plugin() {
    // hostile declares creates and updates; a delete of an object whose
    // mode would trap is admitted untouched.
    let plugin = load(&test_plugin("hostile"));
    let decision = plugin.admit(
        request(Operation::Delete, None, Some(&hostile("admit-trap"))),
        "default/h",
        0,
    );
    assert!(
        decision.allowed && decision.failure.is_none(),
        "{decision:?}"
    );
}

#[test]
fn kubernetescluster_passes_its_golden_cases_admission_included() {
    let plugin = load(&example_plugin("kubernetescluster"));
    let files = discover(&root().join("plugins/kubernetescluster/cases")).unwrap();
    let admission_cases = files
        .iter()
        .filter(|f| f.to_string_lossy().contains("admission-"))
        .count();
    assert!(admission_cases >= 3, "{files:?}");
    for file in files {
        let result = run_case(&plugin, &file);
        assert!(result.passed(), "{}: {:?}", file.display(), result.outcome);
    }
}

#[test]
fn a_wrong_admission_case_is_a_diff_and_a_plugin_without_admission_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let case = std::fs::read_to_string(
        root().join("plugins/kubernetescluster/cases/admission-masters-change-denied.yaml"),
    )
    .unwrap();
    let wrong = dir.path().join("wrong.yaml");
    std::fs::write(&wrong, case.replace("allowed: false", "allowed: true")).unwrap();
    match run_case(&load(&example_plugin("kubernetescluster")), &wrong).outcome {
        CaseOutcome::Failed(diff) => {
            assert!(
                diff.contains("-allowed: true") && diff.contains("+allowed: false"),
                "{diff}"
            );
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    match run_case(&load(&example_plugin("podset")), &wrong).outcome {
        CaseOutcome::Failed(message) => {
            assert!(message.contains("serves no admission"), "{message}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

/// Admission has sandbox instances of its own: reconciles holding every
/// instance they may use (here both of a two-instance sandbox, each in a
/// call that loops to its deadline) do not make an admission call fail,
/// which kubernetescluster's fail-closed policy would turn into a denial of
/// every write.
#[test]
fn admission_is_served_while_reconciles_hold_every_instance() {
    let sandbox = Sandbox::new(SandboxConfig {
        limits: test_limits(),
        compile_cache: Some(test_compile_cache_dir()),
        max_instances: 2,
        ..SandboxConfig::default()
    })
    .expect("a sandbox of two instances");
    let looping = sandbox.load(&test_plugin("hostile")).expect("load hostile");
    let kubernetescluster = sandbox
        .load(&example_plugin("kubernetescluster"))
        .expect("load kubernetescluster");
    let (held, holding) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let looping = &looping;
        for i in 0..2 {
            let held = held.clone();
            s.spawn(move || {
                let primary = json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
                    "metadata": {"name": format!("loop-{i}"), "namespace": "default", "uid": format!("u-{i}")},
                    "spec": {"mode": "loop"}});
                let cache = MemoryCache::new();
                let request = cache.request_for(&primary, &looping.metadata().owns);
                held.send(()).expect("the test waits");
                looping.reconcile(ReconcileInput {
                    request,
                    primary_namespace: Some("default".into()),
                    object: format!("default/loop-{i}"),
                    reader: Arc::new(cache),
                    now_millis: 0,
                    cluster: Default::default(),
                })
            });
        }
        for _ in 0..2 {
            holding.recv().expect("both loops start");
        }
        // The loops run for their 200 ms deadline; this lands inside it.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let old = cluster(3, Some("1.33"));
        let new = cluster(5, Some("1.33"));
        let decision = kubernetescluster.admit(
            request(Operation::Update, Some(&new), Some(&old)),
            "default/prod",
            0,
        );
        assert!(
            decision
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with("spec.masters cannot change after creation")),
            "the plugin's own verdict, not its failure policy's: {decision:?}"
        );
    });
}
