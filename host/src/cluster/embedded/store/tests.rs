//! The store's behaviour as a client sees it, call by call.

use reconciler_contract::KindRef;
use reconciler_contract::json_depth::READABLE_DEPTH;
use serde_json::{Value, json};

use super::validation::{is_dns1123_label, is_dns1123_subdomain, valid_api_version};
use super::writes::format_uid;
use super::*;
use crate::cluster::backend::{KindScope, ObjectKey, Propagation};

const T0: i64 = 1_700_000_000_000;

fn deployment(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

fn key(kind: &str, api_version: &str, name: &str) -> ObjectKey {
    ObjectKey::new(
        KindRef::from_api_version(api_version, kind),
        Some("default"),
        name,
    )
}

fn deployment_key(name: &str) -> ObjectKey {
    key("Deployment", "apps/v1", name)
}

/// A create merged before the store is locked stores what a plain apply
/// stores, fields and their owners alike; merged for a key the store
/// then scopes differently (a namespace sent with a cluster-scoped
/// object), the merge is made again for the stored key.
#[test]
fn a_create_merged_in_advance_stores_what_an_apply_stores() {
    let namespace_sent = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "shop", "namespace": "default", "labels": {"a": "b"}}});
    for object in [
        deployment(
            "web",
            json!({"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}),
        ),
        namespace_sent,
    ] {
        let mut plain = EmbeddedStore::new(10);
        let applied = plain.apply(object.clone(), "m", false, T0).unwrap();
        let mut prepared = EmbeddedStore::new(10);
        let made = PreparedApply::new(object.clone(), "m", false, true).unwrap();
        assert!(made.creation.is_some());
        let applied_prepared = prepared.apply_prepared(made, T0).unwrap();
        assert_eq!(applied_prepared, applied);
        let key = ObjectKey::of(&applied.object).unwrap();
        assert_eq!(
            prepared.entry(&key).unwrap().ownership(),
            plain.entry(&key).unwrap().ownership()
        );
        let namespace = applied_prepared.object.pointer("/metadata/namespace");
        if key.kind.kind == "Namespace" {
            assert_eq!(namespace, None, "a Namespace is stored without one");
        } else {
            assert_eq!(namespace, Some(&json!("default")));
        }
    }
}

fn store_with(objects: &[Value]) -> EmbeddedStore {
    let mut store = EmbeddedStore::new(100);
    for object in objects {
        store.apply(object.clone(), "test", false, T0).unwrap();
    }
    store.drain_events();
    store
}

fn meta<'a>(object: &'a Value, field: &str) -> &'a Value {
    &object["metadata"][field]
}

/// `Added web`, `Deleted web-1`: an event log as a test reads it.
pub(in crate::cluster::embedded) fn summary(events: &[StoreEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            format!(
                "{:?} {}",
                e.event_type,
                e.object["metadata"]["name"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

/// `{"spec": {"x": {"x": ... 1}}}` nested `levels` deep in all.
fn nested_deployment(name: &str, levels: usize) -> Value {
    let mut value = json!(1);
    for _ in 0..levels - 1 {
        value = json!({ "x": value });
    }
    deployment(name, value)
}

#[test]
fn objects_nested_too_deep_to_read_back_are_refused() {
    let mut store = EmbeddedStore::new(100);
    let deep = nested_deployment("deep", READABLE_DEPTH + 3);
    let err = store.apply(deep, "podset", true, T0).unwrap_err();
    assert!(
        err.to_string()
            .contains("nested 130 levels deep, more than the 127"),
        "{err}"
    );
    assert!(store.get(&deployment_key("deep")).is_none());
    assert!(store.drain_events().is_empty());

    let fits = nested_deployment("fits", READABLE_DEPTH);
    store.apply(fits.clone(), "podset", true, T0).unwrap();
    let stored = store.get(&deployment_key("fits")).unwrap();
    assert_eq!(stored["spec"], fits["spec"]);
}

#[test]
fn create_sets_server_owned_metadata() {
    let mut store = EmbeddedStore::new(10);
    let mut object = deployment("web", json!({"replicas": 1}));
    object["metadata"]["uid"] = json!("client-uid");
    object["metadata"]["resourceVersion"] = json!("999");
    object["metadata"]["managedFields"] = json!([{"manager": "x"}]);
    let outcome = store.apply(object, "test", false, T0).unwrap();
    assert!(outcome.created && outcome.changed);
    let web = &outcome.object;
    assert_eq!(meta(web, "uid"), "00000000-0000-4000-8000-000000000001");
    assert_eq!(meta(web, "resourceVersion"), "1");
    assert_eq!(meta(web, "generation"), 1);
    assert_eq!(meta(web, "creationTimestamp"), "2023-11-14T22:13:20Z");
    assert!(
        web["metadata"].get("managedFields").is_none(),
        "ownership stays inside the store"
    );
    assert_eq!(store.get(&deployment_key("web")), Some(web.clone()));
    assert_eq!(summary(&store.drain_events()), ["Added web"]);
}

#[test]
fn invalid_objects_are_refused_naming_the_field() {
    let mut store = EmbeddedStore::new(10);
    let err = store
        .apply(deployment("Web_1", json!({})), "test", false, T0)
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Invalid { message, .. } if message.starts_with("metadata.name \"Web_1\"")),
        "{err}"
    );
    let err = store
        .apply(
            json!({"kind": "Deployment", "metadata": {"name": "web"}}),
            "test",
            false,
            T0,
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("apiVersion must be a non-empty string"),
        "{err}"
    );
    let mut bad_ns = deployment("web", json!({}));
    bad_ns["metadata"]["namespace"] = json!("Default");
    assert!(
        store
            .apply(bad_ns, "test", false, T0)
            .unwrap_err()
            .to_string()
            .contains("metadata.namespace")
    );
    assert!(store.is_empty());
    assert!(store.drain_events().is_empty());
}

#[test]
fn reapplying_the_same_fields_changes_nothing() {
    let mut store = store_with(&[deployment("web", json!({"replicas": 1}))]);
    let before = store.get(&deployment_key("web"));
    let outcome = store
        .apply(
            deployment("web", json!({"replicas": 1})),
            "test",
            false,
            T0 + 5_000,
        )
        .unwrap();
    assert!(!outcome.created && !outcome.changed);
    assert_eq!(Some(outcome.object), before);
    assert!(store.drain_events().is_empty());
    assert_eq!(store.resource_version(), 1);
}

#[test]
fn spec_changes_bump_generation_but_label_changes_do_not() {
    let mut store = store_with(&[deployment("web", json!({"replicas": 1}))]);
    let scaled = store
        .apply(deployment("web", json!({"replicas": 3})), "test", false, T0)
        .unwrap()
        .object;
    assert_eq!(
        (
            meta(&scaled, "generation"),
            meta(&scaled, "resourceVersion")
        ),
        (&json!(2), &json!("2"))
    );

    let mut labelled = deployment("web", json!({"replicas": 3}));
    labelled["metadata"]["labels"] = json!({"team": "a"});
    let labelled = store.apply(labelled, "test", false, T0).unwrap().object;
    assert_eq!(
        (
            meta(&labelled, "generation"),
            meta(&labelled, "resourceVersion")
        ),
        (&json!(2), &json!("3"))
    );
    assert_eq!(
        summary(&store.drain_events()),
        ["Modified web", "Modified web"]
    );
}

#[test]
fn a_dropped_field_is_removed_but_another_managers_field_stays() {
    let mut store = store_with(&[deployment("web", json!({"replicas": 1, "paused": false}))]);
    store
        .apply(
            deployment("web", json!({"minReadySeconds": 5})),
            "autoscaler",
            false,
            T0,
        )
        .unwrap();
    let web = store
        .apply(deployment("web", json!({"replicas": 1})), "test", false, T0)
        .unwrap()
        .object;
    assert_eq!(web["spec"], json!({"replicas": 1, "minReadySeconds": 5}));
}

#[test]
fn a_shared_field_survives_until_its_last_owner_drops_it() {
    let mut store = store_with(&[deployment("web", json!({"replicas": 2}))]);
    store
        .apply(
            deployment("web", json!({"replicas": 2})),
            "other",
            false,
            T0,
        )
        .unwrap();
    let web = store
        .apply(deployment("web", json!({})), "test", false, T0)
        .unwrap()
        .object;
    assert_eq!(web["spec"]["replicas"], 2);
    let web = store
        .apply(deployment("web", json!({})), "other", false, T0)
        .unwrap()
        .object;
    assert_eq!(
        web["spec"],
        json!({}),
        "the empty spec each manager sets is kept"
    );
}

#[test]
fn conflicting_apply_fails_without_force_and_takes_over_with_it() {
    let mut store = store_with(&[deployment("web", json!({"replicas": 1}))]);
    let err = store
        .apply(
            deployment("web", json!({"replicas": 5})),
            "autoscaler",
            false,
            T0,
        )
        .unwrap_err();
    let StoreError::Conflict { key, message } = &err else {
        panic!("{err}")
    };
    assert_eq!(key, "Deployment default/web");
    assert!(
        message.contains("spec.replicas is owned by field manager \"test\""),
        "{message}"
    );
    assert!(
        store.drain_events().is_empty(),
        "a failed apply changes nothing"
    );

    let web = store
        .apply(
            deployment("web", json!({"replicas": 5})),
            "autoscaler",
            true,
            T0,
        )
        .unwrap()
        .object;
    assert_eq!(web["spec"]["replicas"], 5);
    // The field moved: the first manager now conflicts in turn.
    assert!(
        store
            .apply(deployment("web", json!({"replicas": 1})), "test", false, T0)
            .is_err()
    );
}

#[test]
fn status_is_written_only_through_apply_status() {
    let mut store = store_with(&[deployment("web", json!({"replicas": 1}))]);
    let mut with_status = deployment("web", json!({"replicas": 1}));
    with_status["status"] = json!({"readyReplicas": 9});
    let outcome = store.apply(with_status, "test", false, T0).unwrap();
    assert!(!outcome.changed && outcome.object.get("status").is_none());

    let key = deployment_key("web");
    let web = store
        .apply_status(
            &key,
            json!({"readyReplicas": 1, "phase": "Up"}),
            "ctl",
            None,
            T0,
        )
        .unwrap();
    assert_eq!(
        (meta(&web, "generation"), meta(&web, "resourceVersion")),
        (&json!(1), &json!("2"))
    );
    store
        .apply_status(&key, json!({"conditions": []}), "other", None, T0)
        .unwrap();
    let web = store
        .apply_status(&key, json!({"readyReplicas": 1}), "ctl", None, T0)
        .unwrap();
    assert_eq!(web["status"], json!({"readyReplicas": 1, "conditions": []}));
    let same = store
        .apply_status(&key, json!({"readyReplicas": 1}), "ctl", None, T0)
        .unwrap();
    assert_eq!(same, web, "an unchanged status is not a change");
    assert_eq!(store.drain_events().len(), 3);
    assert!(matches!(
        store.apply_status(&key, json!("up"), "ctl", None, T0),
        Err(StoreError::Invalid { .. })
    ));
    let missing = deployment_key("gone");
    assert!(matches!(
        store.apply_status(&missing, json!({}), "ctl", None, T0),
        Err(StoreError::NotFound { .. })
    ));
}

#[test]
fn delete_with_a_finalizer_waits_until_it_is_removed() {
    let mut store = store_with(&[deployment("web", json!({}))]);
    let key = deployment_key("web");
    store
        .add_finalizer(&key, "example.com/cleanup", T0)
        .unwrap();
    store
        .add_finalizer(&key, "example.com/cleanup", T0)
        .unwrap();
    store
        .delete(&key, Propagation::Background, T0 + 1_000)
        .unwrap();
    let web = store.get(&key).unwrap().clone();
    assert_eq!(meta(&web, "deletionTimestamp"), "2023-11-14T22:13:21Z");
    assert_eq!(meta(&web, "deletionGracePeriodSeconds"), 0);
    assert_eq!(
        meta(&web, "generation"),
        2,
        "marking for deletion bumps generation once"
    );
    store
        .delete(&key, Propagation::Background, T0 + 9_000)
        .unwrap();
    assert_eq!(
        store.get(&key),
        Some(web.clone()),
        "a second delete changes nothing"
    );

    let err = store
        .add_finalizer(&key, "example.com/late", T0)
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid { .. }), "{err}");
    store
        .apply(
            deployment("web", json!({"paused": true})),
            "test",
            false,
            T0,
        )
        .unwrap();

    store
        .remove_finalizer(&key, "example.com/cleanup", T0)
        .unwrap();
    assert!(store.get(&key).is_none());
    let events = store.drain_events();
    assert_eq!(
        summary(&events),
        [
            "Modified web",
            "Modified web",
            "Modified web",
            "Deleted web"
        ]
    );
    let last = &events[3].object;
    assert!(last["metadata"].get("finalizers").is_none());
    assert_eq!(
        last["spec"]["paused"], true,
        "Deleted carries the last state"
    );
    assert_eq!(
        store.delete(&key, Propagation::Background, T0),
        Ok(()),
        "already gone is fine"
    );
}

#[test]
fn remove_finalizer_leaves_other_controllers_finalizers() {
    let mut store = store_with(&[deployment("web", json!({}))]);
    let key = deployment_key("web");
    store.add_finalizer(&key, "a.io/one", T0).unwrap();
    store.add_finalizer(&key, "b.io/two", T0).unwrap();
    store.delete(&key, Propagation::Background, T0).unwrap();
    store.remove_finalizer(&key, "a.io/one", T0).unwrap();
    store.remove_finalizer(&key, "a.io/one", T0).unwrap();
    assert_eq!(
        meta(&store.get(&key).unwrap(), "finalizers"),
        &json!(["b.io/two"])
    );
    assert_eq!(
        store.drain_events().len(),
        4,
        "two adds, the mark, one removal"
    );
}

#[test]
fn an_applied_finalizer_list_does_not_drop_added_finalizers() {
    let mut with_finalizer = deployment("web", json!({}));
    with_finalizer["metadata"]["finalizers"] = json!(["a.io/applied"]);
    let mut store = store_with(&[with_finalizer.clone()]);
    let key = deployment_key("web");
    store.add_finalizer(&key, "b.io/added", T0).unwrap();
    assert!(
        !store
            .apply(with_finalizer, "test", false, T0)
            .unwrap()
            .changed
    );
    let web = store
        .apply(deployment("web", json!({})), "test", false, T0)
        .unwrap()
        .object;
    assert_eq!(meta(&web, "finalizers"), &json!(["b.io/added"]));
}

#[test]
fn an_unknown_object_is_not_found_for_finalizers() {
    let mut store = EmbeddedStore::new(1);
    let key = deployment_key("nope");
    assert_eq!(
        store.add_finalizer(&key, "a.io/x", T0),
        Err(StoreError::NotFound {
            key: "Deployment default/nope".into()
        })
    );
    assert!(matches!(
        store.remove_finalizer(&key, "a.io/x", T0),
        Err(StoreError::NotFound { .. })
    ));
}

#[test]
fn lists_are_sorted_by_namespace_then_name_and_per_kind() {
    let mut store = EmbeddedStore::new(10);
    for (ns, name) in [("b", "x"), ("a", "z"), ("a", "y")] {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}});
        store.apply(object, "test", false, T0).unwrap();
    }
    store
        .apply(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}),
            "test",
            false,
            T0,
        )
        .unwrap();
    let names: Vec<_> = store
        .list(&KindRef::new("", "v1", "ConfigMap"))
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["metadata"]["namespace"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(names, ["a/y", "a/z", "b/x"]);
    assert_eq!(store.list(&KindRef::new("", "v1", "Namespace")).len(), 1);
    assert!(store.list(&KindRef::new("", "v1", "Secret")).is_empty());
}

#[test]
fn the_store_refuses_to_grow_past_its_limit() {
    let mut store = EmbeddedStore::new(2);
    store
        .apply(deployment("a", json!({})), "test", false, T0)
        .unwrap();
    store
        .apply(deployment("b", json!({})), "test", false, T0)
        .unwrap();
    let err = store
        .apply(deployment("c", json!({})), "test", false, T0)
        .unwrap_err();
    assert_eq!(err, StoreError::Full { limit: 2 });
    assert_eq!(store.len(), 2);
    assert!(
        store
            .apply(deployment("a", json!({"replicas": 2})), "test", false, T0)
            .unwrap()
            .changed,
        "updates still work"
    );
    store
        .delete(&deployment_key("a"), Propagation::Background, T0)
        .unwrap();
    assert!(
        store
            .apply(deployment("c", json!({})), "test", false, T0)
            .unwrap()
            .created
    );
}

#[test]
fn the_event_log_keeps_the_newest_events_when_nobody_drains() {
    let mut store = EmbeddedStore::new(10).with_event_limit(3);
    for replicas in 0..5 {
        store
            .apply(
                deployment("web", json!({"replicas": replicas})),
                "test",
                false,
                T0,
            )
            .unwrap();
    }
    let events = store.drain_events();
    let replicas: Vec<_> = events
        .iter()
        .map(|e| e.object["spec"]["replicas"].clone())
        .collect();
    assert_eq!(replicas, [json!(2), json!(3), json!(4)]);
    assert_eq!(store.dropped_events(), 2);
}

#[test]
fn a_recreated_object_gets_a_new_uid() {
    let mut store = store_with(&[deployment("web", json!({}))]);
    let key = deployment_key("web");
    store.delete(&key, Propagation::Background, T0).unwrap();
    let again = store
        .apply(deployment("web", json!({})), "test", false, T0)
        .unwrap()
        .object;
    assert_eq!(meta(&again, "uid"), "00000000-0000-4000-8000-000000000002");
}

#[test]
fn identical_call_sequences_give_byte_identical_objects() {
    fn run() -> String {
        let mut store = EmbeddedStore::new(10);
        let mut owner = deployment("web", json!({"replicas": 1}));
        owner["metadata"]["labels"] = json!({"b": "2", "a": "1"});
        let owner = store.apply(owner, "test", false, T0).unwrap().object;
        let mut child = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-1", "namespace": "default"}});
        child["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": owner["metadata"]["uid"], "blockOwnerDeletion": true}]);
        store.apply(child, "test", false, T0 + 1).unwrap();
        store
            .apply_status(
                &deployment_key("web"),
                json!({"ready": 1}),
                "ctl",
                None,
                T0 + 2,
            )
            .unwrap();
        store
            .add_finalizer(&deployment_key("web"), "a.io/x", T0 + 3)
            .unwrap();
        store
            .delete(&deployment_key("web"), Propagation::Foreground, T0 + 4)
            .unwrap();
        let objects: Vec<Value> = store.list(&KindRef::new("apps", "v1", "Deployment"));
        let events: Vec<Value> = store
            .drain_events()
            .into_iter()
            .map(|e| json!([format!("{:?}", e.event_type), e.object]))
            .collect();
        serde_json::to_string(&json!({"objects": objects, "events": events})).unwrap()
    }
    assert_eq!(run(), run());
}

#[test]
fn names_and_versions_are_validated_like_the_api() {
    assert!(is_dns1123_subdomain("web-1.example"));
    assert!(!is_dns1123_subdomain("web..1"));
    assert!(!is_dns1123_subdomain("-web"));
    assert!(!is_dns1123_subdomain(&"a".repeat(254)));
    assert!(is_dns1123_label("team-a") && !is_dns1123_label("team.a"));
    assert!(valid_api_version("v1") && valid_api_version("apps/v1"));
    assert!(!valid_api_version("a/b/c") && !valid_api_version("/v1"));
    assert_eq!(
        format_uid(0x1_0000_0000_0002),
        "00000001-0000-4000-8000-000000000002"
    );
}

fn with_owner(mut object: Value, kind: &str, name: &str, uid: &str, controller: bool) -> Value {
    let reference = json!({"apiVersion": "example.com/v1", "kind": kind, "name": name,
        "uid": uid, "controller": controller});
    object["metadata"]["ownerReferences"] = json!([reference]);
    object
}

fn owner_uids_of(object: &Value) -> Vec<&str> {
    object["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["uid"].as_str())
        .collect()
}

#[test]
fn owner_references_applied_by_two_managers_merge_by_uid() {
    let mut store = store_with(&[with_owner(
        deployment("web", json!({})),
        "Keeper",
        "k",
        "uid-k",
        true,
    )]);
    let web = store
        .apply(
            with_owner(deployment("web", json!({})), "Watcher", "w", "uid-w", false),
            "watcher",
            false,
            T0,
        )
        .unwrap()
        .object;
    assert_eq!(owner_uids_of(&web), ["uid-k", "uid-w"]);
    let web = store
        .apply(deployment("web", json!({})), "watcher", false, T0)
        .unwrap()
        .object;
    assert_eq!(
        owner_uids_of(&web),
        ["uid-k"],
        "dropping its reference removes only its own"
    );
}

#[test]
fn a_second_controller_reference_is_refused_and_nothing_is_stored() {
    let mut store = store_with(&[with_owner(
        deployment("web", json!({})),
        "Keeper",
        "victim",
        "uid-k",
        true,
    )]);
    let before = store.get(&deployment_key("web"));
    let err = store
        .apply(
            with_owner(
                deployment("web", json!({"replicas": 99})),
                "Probe",
                "hijack",
                "uid-p",
                true,
            ),
            "probe",
            true,
            T0,
        )
        .unwrap_err();
    let StoreError::Invalid { key, message } = &err else {
        panic!("{err}")
    };
    assert_eq!(key, "Deployment default/web");
    assert!(
        message.ends_with(
            "Only one reference can have Controller set to true. Found \"true\" in references for Keeper/victim and Probe/hijack"
        ),
        "{message}"
    );
    assert!(message.starts_with("metadata.ownerReferences: Invalid value: "));
    assert_eq!(store.get(&deployment_key("web")), before);
    assert!(store.drain_events().is_empty(), "nothing changed");

    // Two controllers in one object are refused on create too.
    let mut twice = deployment("new", json!({}));
    twice["metadata"]["ownerReferences"] = json!([
        {"apiVersion": "v1", "kind": "A", "name": "a", "uid": "1", "controller": true},
        {"apiVersion": "v1", "kind": "B", "name": "b", "uid": "2", "controller": true}
    ]);
    assert!(matches!(
        store.apply(twice, "test", false, T0),
        Err(StoreError::Invalid { .. })
    ));
    assert!(store.get(&deployment_key("new")).is_none());
}

#[test]
fn duplicate_owner_reference_uids_are_refused() {
    let mut store = EmbeddedStore::new(10);
    let mut object = deployment("web", json!({}));
    object["metadata"]["ownerReferences"] = json!([
        {"apiVersion": "v1", "kind": "A", "name": "a", "uid": "1"},
        {"apiVersion": "v1", "kind": "A", "name": "b", "uid": "1"}
    ]);
    let err = store.apply(object, "test", false, T0).unwrap_err();
    assert!(
        err.to_string()
            .contains("metadata.ownerReferences: duplicate entries for key [uid=\"1\"]"),
        "{err}"
    );
}

#[test]
fn a_cluster_scoped_object_is_stored_without_its_namespace() {
    let mut store = EmbeddedStore::new(10);
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "reader", "namespace": "team"}, "rules": []});
    let stored = store.apply(role, "test", false, T0).unwrap().object;
    assert!(stored["metadata"].get("namespace").is_none(), "{stored}");
    let kind = KindRef::new("rbac.authorization.k8s.io", "v1", "ClusterRole");
    let unscoped = ObjectKey::new(kind.clone(), None, "reader");
    assert_eq!(store.get(&unscoped), Some(stored.clone()));
    // A key that names a namespace reaches the same object.
    let namespaced = ObjectKey::new(kind.clone(), Some("team"), "reader");
    assert_eq!(store.get(&namespaced), Some(stored.clone()));
    assert_eq!(store.list(&kind), [stored]);
    store
        .delete(&namespaced, Propagation::Background, T0)
        .unwrap();
    assert!(store.is_empty());
}

#[test]
fn an_object_of_a_namespaced_kind_must_name_its_namespace() {
    let mut store = EmbeddedStore::new(10);
    let mut object = deployment("web", json!({}));
    object["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("namespace");
    let err = store.apply(object, "test", false, T0).unwrap_err();
    assert!(
        err.to_string()
            .contains("metadata.namespace: Required value: apps/v1 Deployment is namespaced"),
        "{err}"
    );
    assert!(store.is_empty());
}

#[test]
fn a_stored_crd_makes_its_kind_cluster_scoped() {
    let mut store = EmbeddedStore::new(10);
    let tenant = KindRef::new("example.com", "v1", "Tenant");
    assert_eq!(store.kind_scope(&tenant), KindScope::Namespaced);
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "tenants.example.com"},
        "spec": {"group": "example.com", "names": {"kind": "Tenant", "plural": "tenants"},
                 "scope": "Cluster", "versions": [{"name": "v1", "served": true, "storage": true}]}});
    store.apply(crd.clone(), "test", false, T0).unwrap();
    assert_eq!(store.kind_scope(&tenant), KindScope::Cluster);
    let object = json!({"apiVersion": "example.com/v1", "kind": "Tenant",
        "metadata": {"name": "acme", "namespace": "default"}});
    let stored = store.apply(object, "test", false, T0).unwrap().object;
    assert!(stored["metadata"].get("namespace").is_none());
    assert!(store.get(&ObjectKey::new(tenant, None, "acme")).is_some());

    // Its scope cannot change, and a CRD without one is refused.
    let mut flipped = crd.clone();
    flipped["spec"]["scope"] = json!("Namespaced");
    let err = store.apply(flipped, "test", true, T0).unwrap_err();
    assert!(err.to_string().contains("field is immutable"), "{err}");
    let mut unscoped = crd;
    unscoped["metadata"]["name"] = json!("gadgets.example.com");
    unscoped["spec"]["names"]["kind"] = json!("Gadget");
    unscoped["spec"].as_object_mut().unwrap().remove("scope");
    let err = store.apply(unscoped, "test", false, T0).unwrap_err();
    assert!(
        err.to_string().contains("spec.scope: Required value"),
        "{err}"
    );
}
