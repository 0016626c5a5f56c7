//! kubernetescluster's admission, natively through the SDK harness.

#![cfg(not(target_arch = "wasm32"))]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubernetescluster::{
    DEFAULT_VERSION, KubernetesCluster, KubernetesClusterSpec, KubernetesClusterStatus,
    KubernetesClusters,
};
use reconciler_sdk::testing::Harness;
use serde_json::json;

fn cluster(masters: i32, version: &str) -> KubernetesCluster {
    KubernetesCluster {
        api_version: "example.com/v1alpha1".into(),
        kind: "KubernetesCluster".into(),
        metadata: ObjectMeta {
            name: Some("prod".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: KubernetesClusterSpec {
            masters,
            workers: 2,
            version: version.into(),
            timeout_seconds: 600,
        },
        status: None,
    }
}

#[test]
fn changing_masters_is_denied_with_the_reason() {
    let outcome = Harness::<KubernetesClusters>::new()
        .admit_update(&cluster(3, "1.33"), &cluster(5, "1.33"))
        .unwrap();
    assert!(!outcome.allowed());
    assert_eq!(
        outcome.message(),
        "spec.masters cannot change after creation: it is 3, the update asks for 5; \
         create a new KubernetesCluster for another control-plane size"
    );
}

#[test]
fn other_changes_and_creates_are_allowed() {
    let harness = Harness::<KubernetesClusters>::new();
    let mut scaled = cluster(3, "1.33");
    scaled.spec.workers = 10;
    assert!(
        harness
            .admit_update(&cluster(3, "1.33"), &scaled)
            .unwrap()
            .allowed()
    );
    assert!(harness.admit_create(&cluster(5, "1.33")).unwrap().allowed());
}

/// An object stored with changed masters while no webhook ran is refused by
/// reconcile until masters is set back; admission must let that fix through.
#[test]
fn setting_masters_back_to_what_operations_started_with_is_allowed() {
    let mut diverged = cluster(5, "1.33");
    diverged.status = Some(KubernetesClusterStatus {
        masters: Some(3),
        ..Default::default()
    });
    let mut fixed = diverged.clone();
    fixed.spec.masters = 3;
    let outcome = Harness::<KubernetesClusters>::new()
        .admit_update(&diverged, &fixed)
        .unwrap();
    assert!(outcome.allowed(), "{}", outcome.message());
}

#[test]
fn an_empty_version_is_defaulted_and_a_set_one_kept() {
    let harness = Harness::<KubernetesClusters>::new();
    let outcome = harness.admit_create(&cluster(3, "")).unwrap();
    assert!(outcome.allowed());
    assert_eq!(
        outcome.defaulted.expect("defaulted")["spec"]["version"],
        json!(DEFAULT_VERSION)
    );
    let outcome = harness.admit_create(&cluster(3, "1.31")).unwrap();
    assert!(outcome.defaulted.is_none(), "nothing to default");
}

#[test]
fn a_timeout_below_one_second_is_denied() {
    let mut bad = cluster(3, "1.33");
    bad.spec.timeout_seconds = 0;
    let outcome = Harness::<KubernetesClusters>::new()
        .admit_create(&bad)
        .unwrap();
    assert!(!outcome.allowed());
    assert!(
        outcome
            .message()
            .contains("spec.timeoutSeconds must be 1 or more")
    );
}
