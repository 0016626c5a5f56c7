//! A response whose metadata the host owns, or that the API server would
//! refuse, is refused whole before anything is applied: on the embedded
//! cluster, with the compiled hostile plugin returning a legal ConfigMap
//! first and the offending object second.

use std::time::Duration;

use reconciler_host::cluster::ObjectKey;
use reconciler_host::engine::Outcome;
use reconciler_sdk::EventType;
use reconciler_tests::test_plugin;
use reconciler_tests::world::{World, key};
use serde_json::{Value, json};

const NS: &str = "default";

fn hostile(name: &str, mode: &str) -> Value {
    json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
        "metadata": {"name": name, "namespace": NS}, "spec": {"mode": mode}})
}

fn hostile_key(name: &str) -> ObjectKey {
    key("hostile.example.com", "v1", "Hostile", NS, name)
}

fn config_map_key(name: &str) -> ObjectKey {
    key("", "v1", "ConfigMap", NS, name)
}

fn service_account_key(name: &str) -> ObjectKey {
    key("", "v1", "ServiceAccount", NS, name)
}

/// The messages of the Warning Events recorded on Hostile `name`, each as
/// `reason: message`.
fn warnings_on(world: &World, name: &str) -> Vec<String> {
    world
        .events()
        .into_iter()
        .filter(|e| e.record.regarding.name == name && e.record.event_type == EventType::Warning)
        .map(|e| format!("{}: {}", e.record.reason, e.record.message))
        .collect()
}

/// Runs Hostile `h` in `mode` beside a ServiceAccount `h` that exists
/// already (the plugin's written kind), and checks that every reconcile is
/// refused with `expected` in its message, that a Warning Event on the
/// Hostile says so, and that nothing of the response reached the cluster.
async fn refused_whole(mode: &str, expected: &str) {
    let name = "h";
    let mut world = World::new(&[&test_plugin("hostile")]).await;
    let account = world.apply(json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": NS, "labels": {"owner": "someone-else"}}}));
    world.apply(hostile(name, mode));
    // Long enough for the first failure and a few retries.
    let records = world.settle_for(Duration::from_secs(10)).await;

    let failures: Vec<&str> = records
        .iter()
        .filter(|r| r.object.name == name)
        .filter_map(|r| match &r.outcome {
            Outcome::Failed {
                reason, message, ..
            } => {
                assert_eq!(reason, "InvalidResponse", "{mode}: {message}");
                Some(message.as_str())
            }
            other => panic!("{mode}: every reconcile must be refused, got {other:?}"),
        })
        .collect();
    assert!(
        failures.len() >= 2,
        "{mode}: refused and retried: {failures:?}"
    );
    for message in &failures {
        assert!(message.contains(expected), "{mode}: {message}");
    }
    let warnings = warnings_on(&world, name);
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("InvalidResponse: ") && w.contains(expected)),
        "{mode}: a Warning Event names the item: {warnings:?}"
    );

    for cm in [name.to_string(), format!("{name}-2")] {
        assert_eq!(
            world.get(&config_map_key(&cm)).await,
            None,
            "{mode}: nothing of the response is applied, not even the legal first item"
        );
    }
    assert_eq!(
        world.get(&service_account_key(name)).await.as_ref(),
        Some(&account),
        "{mode}: the ServiceAccount is untouched"
    );
    assert!(
        world.get(&hostile_key(name)).await.is_some(),
        "{mode}: the primary is still there"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_reference_through_a_written_kind_is_refused() {
    refused_whole(
        "owner-reference-via-writes",
        "apply[1] (v1 ServiceAccount h): metadata.ownerReferences is set by the host (the controller reference of owned kinds); a plugin may not set it",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizers_on_a_child_are_refused() {
    refused_whole(
        "set-finalizers",
        "apply[1] (v1 ConfigMap h-2): metadata.finalizers is set by the host",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_uid_is_refused() {
    refused_whole(
        "set-uid",
        "apply[1] (v1 ConfigMap h-2): metadata.uid is set by the API server",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_version_is_refused() {
    refused_whole(
        "set-resource-version",
        "apply[1] (v1 ConfigMap h-2): metadata.resourceVersion is set by the API server",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_numeric_label_value_in_the_second_object_applies_nothing() {
    refused_whole(
        "numeric-label-second",
        "apply[1] (v1 ConfigMap h-2): metadata.labels[\"tier\"] must be a string, got a number",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_annotation_key_is_refused() {
    refused_whole(
        "bad-annotation-key",
        "apply[1] (v1 ConfigMap h-2): metadata.annotations key \"bad key!\"",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotations_over_256_kib_are_refused() {
    refused_whole(
        "huge-annotations",
        "apply[1] (v1 ConfigMap h-2): metadata.annotations hold 262145 bytes (keys and values), over the API server's limit of 262144",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_name_is_refused() {
    refused_whole(
        "generate-name",
        "apply[1] (v1 ConfigMap h-2): metadata.generateName is not supported",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_owner_references_still_get_the_controller_reference() {
    let mut world = World::new(&[&test_plugin("hostile")]).await;
    world.apply(hostile("h", "null-owner-references"));
    let records = world.settle().await;
    assert!(
        records
            .iter()
            .all(|r| !matches!(r.outcome, Outcome::Failed { .. })),
        "null counts as absent: {records:?}"
    );
    let uid = world.get(&hostile_key("h")).await.expect("the primary")["metadata"]["uid"].clone();
    let cm = world
        .get(&config_map_key("h"))
        .await
        .expect("the ConfigMap is applied");
    let refs = &cm["metadata"]["ownerReferences"];
    assert_eq!(
        refs.as_array().map(Vec::len),
        Some(1),
        "exactly the host's controller reference: {refs}"
    );
    assert_eq!(
        (&refs[0]["kind"], &refs[0]["uid"], &refs[0]["controller"]),
        (&json!("Hostile"), &uid, &json!(true)),
        "{refs}"
    );
    // And the controller reference works: the ConfigMap goes with its owner.
    world.apply(
        json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
        "metadata": {"name": "h", "namespace": NS,
            "annotations": {"hostile.example.com/cleanup-done": "true"}},
        "spec": {"mode": "null-owner-references"}}),
    );
    world.delete(&hostile_key("h"));
    world.settle_for(Duration::from_secs(10)).await;
    assert_eq!(world.get(&hostile_key("h")).await, None);
    assert_eq!(
        world.get(&config_map_key("h")).await,
        None,
        "garbage-collected with its owner"
    );
}
