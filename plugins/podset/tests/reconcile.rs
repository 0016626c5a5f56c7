#![cfg(not(target_arch = "wasm32"))]
//! The podset logic, natively through the SDK harness: no Wasm involved.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use podset::{PodSet, PodSetSpec, PodSetStatus, PodSets};
use reconciler_sdk::EventType;
use reconciler_sdk::testing::Harness;

fn podset(name: &str, size: i32) -> PodSet {
    PodSet {
        api_version: "example.com/v1alpha1".into(),
        kind: "PodSet".into(),
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        spec: PodSetSpec { size },
        status: None,
    }
}

fn pod(name: &str, podset: &str, namespace: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([
                ("app".into(), "podset".into()),
                ("podset".into(), podset.into()),
            ])),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The Deployment the host would hold after applying `replicas` for `owner`.
fn observed_deployment(owner: &PodSet, replicas: i32) -> Deployment {
    let mut d = Harness::<PodSets>::new()
        .reconcile(&podset(owner.name(), replicas))
        .unwrap()
        .applied::<Deployment>()
        .unwrap()
        .remove(0);
    d.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "example.com/v1alpha1".into(),
        kind: "PodSet".into(),
        name: owner.name().into(),
        uid: owner.metadata.uid.clone().unwrap(),
        controller: Some(true),
        ..Default::default()
    }]);
    d
}

#[test]
fn size_becomes_an_owned_deployment_with_the_podset_labels() {
    let outcome = Harness::<PodSets>::new()
        .reconcile(&podset("web", 3))
        .unwrap();
    let deployments: Vec<Deployment> = outcome.applied().unwrap();
    assert_eq!(deployments.len(), 1);
    let d = &deployments[0];
    assert_eq!(d.metadata.name.as_deref(), Some("web"));
    let spec = d.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(3));
    let labels = spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    assert_eq!(labels["app"], "podset");
    assert_eq!(labels["podset"], "web");
    assert_eq!(spec.selector.match_labels.as_ref(), Some(labels));
    let container = &spec.template.spec.as_ref().unwrap().containers[0];
    assert!(container.image.as_deref().unwrap().starts_with("busybox"));
    assert_eq!(
        container.command.as_deref(),
        Some(&["sleep".to_string(), "3600".to_string()][..])
    );
    assert_eq!(outcome.events()[0].reason, "Created");
}

#[test]
fn status_lists_only_this_podsets_pods_in_its_namespace_sorted() {
    let outcome = Harness::<PodSets>::new()
        .with(&pod("web-b", "web", "default"))
        .with(&pod("web-a", "web", "default"))
        .with(&pod("api-a", "api", "default"))
        .with(&pod("web-c", "web", "staging"))
        .reconcile(&podset("web", 2))
        .unwrap();
    let status: PodSetStatus = outcome.status().unwrap().unwrap();
    assert_eq!(status.pod_names, ["web-a", "web-b"]);
}

#[test]
fn resizing_updates_replicas_and_records_an_event_once() {
    let owner = podset("web", 5);
    let harness = Harness::<PodSets>::new().with(&observed_deployment(&owner, 3));
    let outcome = harness.reconcile(&owner).unwrap();
    assert_eq!(
        outcome.applied::<Deployment>().unwrap()[0]
            .spec
            .as_ref()
            .unwrap()
            .replicas,
        Some(5)
    );
    let event = &outcome.events()[0];
    assert_eq!(
        (event.event_type, event.reason.as_str()),
        (EventType::Normal, "Scaled")
    );
    assert!(event.message.contains("from 3 to 5"), "{}", event.message);

    // Once the Deployment has the new size, reconciling again is quiet.
    let settled = Harness::<PodSets>::new()
        .with(&observed_deployment(&owner, 5))
        .reconcile(&owner)
        .unwrap();
    assert!(settled.events().is_empty(), "{:?}", settled.events());
}

#[test]
fn a_deployment_owned_by_someone_else_is_not_a_child() {
    let owner = podset("web", 2);
    let mut foreign = observed_deployment(&owner, 9);
    foreign.metadata.owner_references.as_mut().unwrap()[0].uid = "someone-else".into();
    let outcome = Harness::<PodSets>::new()
        .with(&foreign)
        .reconcile(&owner)
        .unwrap();
    assert_eq!(outcome.events()[0].reason, "Created");
}

#[test]
fn a_negative_size_is_an_error() {
    let err = Harness::<PodSets>::new()
        .reconcile(&podset("web", -1))
        .unwrap_err();
    assert!(err.contains("spec.size must be 0 or more"), "{err}");
}

#[test]
fn a_deleting_podset_asks_for_nothing() {
    let mut owner = podset("web", 3);
    owner.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2024-01-01T00:00:00Z".parse().unwrap(),
    ));
    let outcome = Harness::<PodSets>::new().reconcile(&owner).unwrap();
    assert!(outcome.response.apply.is_empty());
    assert!(outcome.response.status.is_none());
}

#[test]
fn in_a_member_cluster_the_status_names_it_and_in_local_it_does_not() {
    let member = Harness::<PodSets>::new().in_cluster("east", &[("region", "us-east")]);
    let status: PodSetStatus = member
        .reconcile(&podset("web", 1))
        .unwrap()
        .status()
        .unwrap()
        .unwrap();
    assert_eq!(status.cluster.as_deref(), Some("east"));

    let local = Harness::<PodSets>::new();
    let status: PodSetStatus = local
        .reconcile(&podset("web", 1))
        .unwrap()
        .status()
        .unwrap()
        .unwrap();
    assert_eq!(status.cluster, None, "the host's own cluster is not named");
    let written = local
        .reconcile(&podset("web", 1))
        .unwrap()
        .response
        .status
        .unwrap();
    assert!(!written.contains("cluster"), "{written}");
}
