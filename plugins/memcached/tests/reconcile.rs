//! The memcached logic, natively through the SDK harness: no Wasm involved.

// The harness is native only; on wasm32 this file compiles to nothing.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use memcached::{Memcached, MemcachedSpec, MemcachedStatus, Memcacheds};
use reconciler_sdk::EventType;
use reconciler_sdk::testing::Harness;

fn memcached(name: &str, size: i32) -> Memcached {
    Memcached {
        api_version: "example.com/v1alpha1".into(),
        kind: "Memcached".into(),
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        spec: MemcachedSpec { size },
        status: None,
    }
}

fn pod(name: &str, memcached: &str, namespace: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([
                ("app.kubernetes.io/name".into(), "memcached".into()),
                ("memcached".into(), memcached.into()),
            ])),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The Deployment the host would hold after applying `replicas` for `owner`.
fn observed_deployment(owner: &Memcached, replicas: i32) -> Deployment {
    let mut d = Harness::<Memcacheds>::new()
        .reconcile(&memcached(owner.name(), replicas))
        .unwrap()
        .applied::<Deployment>()
        .unwrap()
        .remove(0);
    d.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "example.com/v1alpha1".into(),
        kind: "Memcached".into(),
        name: owner.name().into(),
        uid: owner.metadata.uid.clone().unwrap(),
        controller: Some(true),
        ..Default::default()
    }]);
    d
}

#[test]
fn size_becomes_an_owned_memcached_deployment() {
    let outcome = Harness::<Memcacheds>::new()
        .reconcile(&memcached("cache", 3))
        .unwrap();
    let deployments: Vec<Deployment> = outcome.applied().unwrap();
    assert_eq!(deployments.len(), 1);
    let d = &deployments[0];
    assert_eq!(d.metadata.name.as_deref(), Some("cache"));
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
    assert_eq!(labels["memcached"], "cache");
    assert_eq!(spec.selector.match_labels.as_ref(), Some(labels));
    let container = &spec.template.spec.as_ref().unwrap().containers[0];
    assert_eq!(container.image.as_deref(), Some("memcached:1.6-alpine"));
    assert_eq!(
        container.args.as_deref(),
        Some(&["-m=64", "-o", "modern", "-v"].map(String::from)[..])
    );
    let port = &container.ports.as_ref().unwrap()[0];
    assert_eq!(port.container_port, 11211);
    assert_eq!(outcome.events()[0].reason, "Created");
    assert_eq!(outcome.requeue_after(), Some(Duration::from_secs(60)));
}

#[test]
fn status_lists_only_this_memcacheds_pods_in_its_namespace_sorted() {
    let outcome = Harness::<Memcacheds>::new()
        .with(&pod("cache-b", "cache", "default"))
        .with(&pod("cache-a", "cache", "default"))
        .with(&pod("sessions-a", "sessions", "default"))
        .with(&pod("cache-c", "cache", "staging"))
        .reconcile(&memcached("cache", 2))
        .unwrap();
    let status: MemcachedStatus = outcome.status().unwrap().unwrap();
    assert_eq!(status.nodes, ["cache-a", "cache-b"]);
}

#[test]
fn resizing_updates_replicas_and_requeues_after_a_minute_once() {
    let owner = memcached("cache", 1);
    let outcome = Harness::<Memcacheds>::new()
        .with(&observed_deployment(&owner, 4))
        .reconcile(&owner)
        .unwrap();
    let replicas = outcome.applied::<Deployment>().unwrap()[0]
        .spec
        .as_ref()
        .unwrap()
        .replicas;
    assert_eq!(replicas, Some(1));
    let event = &outcome.events()[0];
    assert_eq!(
        (event.event_type, event.reason.as_str()),
        (EventType::Normal, "Resized")
    );
    assert!(event.message.contains("from 4 to 1"), "{}", event.message);
    assert_eq!(outcome.requeue_after(), Some(Duration::from_secs(60)));

    // Once the Deployment has the new size, reconciling again is quiet and
    // does not keep requeueing.
    let settled = Harness::<Memcacheds>::new()
        .with(&observed_deployment(&owner, 1))
        .reconcile(&owner)
        .unwrap();
    assert!(settled.events().is_empty(), "{:?}", settled.events());
    assert_eq!(settled.requeue_after(), None);
}

#[test]
fn a_negative_size_is_an_error() {
    let err = Harness::<Memcacheds>::new()
        .reconcile(&memcached("cache", -2))
        .unwrap_err();
    assert!(err.contains("spec.size must be 0 or more, got -2"), "{err}");
}

#[test]
fn a_deleting_memcached_asks_for_nothing() {
    let mut owner = memcached("cache", 3);
    owner.metadata.deletion_timestamp = Some(Time("2024-01-01T00:00:00Z".parse().unwrap()));
    let outcome = Harness::<Memcacheds>::new().reconcile(&owner).unwrap();
    assert!(outcome.response.apply.is_empty());
    assert!(outcome.response.status.is_none());
    assert_eq!(outcome.requeue_after(), None);
}
