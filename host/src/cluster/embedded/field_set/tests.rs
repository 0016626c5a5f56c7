//! Server-side apply's field ownership, merge by merge.

use serde_json::{Value, json};

use super::*;

fn apply(manager: &str) -> Manager {
    Manager::new(manager, Operation::Apply)
}

fn paths(set: &FieldSet) -> Vec<String> {
    set.iter().map(ToString::to_string).collect()
}

#[test]
fn leaf_paths_recurse_into_maps_and_keep_lists_whole() {
    let config = json!({
        "metadata": {"labels": {"app": "web", "app.kubernetes.io/name": "web"}, "finalizers": ["a.io/x", "b.io/y"]},
        "spec": {"replicas": 3, "ports": [80, 443], "empty": {}, "unset": null}
    });
    assert_eq!(
        paths(&FieldSet::of(&config)),
        [
            "metadata.finalizers[=\"a.io/x\"]",
            "metadata.finalizers[=\"b.io/y\"]",
            "metadata.labels.app",
            "metadata.labels[\"app.kubernetes.io/name\"]",
            "spec.empty",
            "spec.ports",
            "spec.replicas",
        ]
    );
}

#[test]
fn a_dropped_field_is_removed_and_emptied_maps_go_with_it() {
    let first = Ownership::default()
        .apply(&json!({}), &json!({"spec": {"a": 1}}), &apply("m"), false)
        .unwrap();
    let second = first
        .ownership
        .apply(
            &first.object,
            &json!({"metadata": {"labels": {"x": "1"}}}),
            &apply("m"),
            false,
        )
        .unwrap();
    assert_eq!(second.object, json!({"metadata": {"labels": {"x": "1"}}}));
    assert_eq!(
        paths(second.ownership.fields_of(&apply("m")).unwrap()),
        ["metadata.labels.x"]
    );
}

#[test]
fn another_managers_field_survives_when_the_first_drops_it() {
    let a = Ownership::default()
        .apply(
            &json!({}),
            &json!({"spec": {"a": 1, "shared": 2}}),
            &apply("a"),
            false,
        )
        .unwrap();
    let b = a
        .ownership
        .apply(
            &a.object,
            &json!({"spec": {"shared": 2}}),
            &apply("b"),
            false,
        )
        .unwrap();
    let dropped = b
        .ownership
        .apply(&b.object, &json!({"spec": {}}), &apply("a"), false)
        .unwrap();
    assert_eq!(dropped.object, json!({"spec": {"shared": 2}}));
    assert!(
        dropped
            .ownership
            .fields_of(&apply("b"))
            .unwrap()
            .contains(FieldPath::fields(&["spec", "shared"]).segments())
    );
}

#[test]
fn changing_anothers_field_conflicts_unless_forced() {
    let a = Ownership::default()
        .apply(
            &json!({}),
            &json!({"spec": {"replicas": 1}}),
            &apply("a"),
            false,
        )
        .unwrap();
    let conflicts = a
        .ownership
        .apply(
            &a.object,
            &json!({"spec": {"replicas": 2}}),
            &apply("b"),
            false,
        )
        .unwrap_err();
    assert_eq!(
        conflicts,
        [FieldConflict {
            path: FieldPath::fields(&["spec", "replicas"]),
            manager: "a".into()
        }]
    );
    assert_eq!(
        conflicts[0].to_string(),
        "spec.replicas is owned by field manager \"a\""
    );

    let forced = a
        .ownership
        .apply(
            &a.object,
            &json!({"spec": {"replicas": 2}}),
            &apply("b"),
            true,
        )
        .unwrap();
    assert_eq!(forced.object, json!({"spec": {"replicas": 2}}));
    assert_eq!(
        forced
            .ownership
            .managers()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>(),
        ["b"]
    );
}

#[test]
fn replacing_a_map_someone_owns_fields_in_conflicts() {
    let a = Ownership::default()
        .apply(
            &json!({}),
            &json!({"spec": {"x": {"y": 1}}}),
            &apply("a"),
            false,
        )
        .unwrap();
    let conflicts = a
        .ownership
        .apply(&a.object, &json!({"spec": {"x": 5}}), &apply("b"), false)
        .unwrap_err();
    assert_eq!(conflicts[0].path.to_string(), "spec.x.y");
    // An empty map only asserts the map exists: no conflict, nothing lost.
    let shared = a
        .ownership
        .apply(&a.object, &json!({"spec": {"x": {}}}), &apply("b"), false)
        .unwrap();
    assert_eq!(shared.object, a.object);
}

#[test]
fn finalizer_entries_are_owned_one_by_one() {
    let a = Ownership::default()
        .apply(
            &json!({}),
            &json!({"metadata": {"finalizers": ["a.io/x"]}}),
            &apply("a"),
            false,
        )
        .unwrap();
    let b = a
        .ownership
        .apply(
            &a.object,
            &json!({"metadata": {"finalizers": ["b.io/y"]}}),
            &apply("b"),
            false,
        )
        .unwrap();
    assert_eq!(
        b.object,
        json!({"metadata": {"finalizers": ["a.io/x", "b.io/y"]}})
    );
    let a_drops = b
        .ownership
        .apply(&b.object, &json!({}), &apply("a"), false)
        .unwrap();
    assert_eq!(
        a_drops.object,
        json!({"metadata": {"finalizers": ["b.io/y"]}})
    );
    let b_drops = a_drops
        .ownership
        .apply(&a_drops.object, &json!({}), &apply("b"), false)
        .unwrap();
    assert_eq!(
        b_drops.object,
        json!({"metadata": {}}),
        "the emptied list is removed, metadata stays"
    );
}

#[test]
fn prune_forgets_fields_that_were_removed_by_other_means() {
    let mut merge = Ownership::default()
        .apply(
            &json!({}),
            &json!({"spec": {"a": 1, "b": 2}}),
            &apply("m"),
            false,
        )
        .unwrap();
    merge.ownership.prune(&json!({"spec": {"b": 2}}));
    assert_eq!(
        paths(merge.ownership.fields_of(&apply("m")).unwrap()),
        ["spec.b"]
    );
    merge.ownership.prune(&json!({}));
    assert!(merge.ownership.fields_of(&apply("m")).is_none());
}

fn owner_ref(kind: &str, name: &str, uid: &str, controller: bool) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": kind, "name": name, "uid": uid,
        "controller": controller})
}

fn refs(refs: Vec<Value>) -> Value {
    json!({"metadata": {"ownerReferences": refs}})
}

#[test]
fn owner_references_of_two_managers_merge_by_uid() {
    let a = Ownership::default()
        .apply(
            &json!({}),
            &refs(vec![owner_ref("Keeper", "k", "uid-k", true)]),
            &apply("a"),
            false,
        )
        .unwrap();
    let b = a
        .ownership
        .apply(
            &a.object,
            &refs(vec![owner_ref("Watcher", "w", "uid-w", false)]),
            &apply("b"),
            false,
        )
        .unwrap();
    assert_eq!(
        b.object,
        refs(vec![
            owner_ref("Keeper", "k", "uid-k", true),
            owner_ref("Watcher", "w", "uid-w", false)
        ]),
        "both references are kept, in the order they came"
    );
    assert_eq!(
        paths(b.ownership.fields_of(&apply("b")).unwrap()),
        [
            "metadata.ownerReferences[uid=\"uid-w\"].apiVersion",
            "metadata.ownerReferences[uid=\"uid-w\"].controller",
            "metadata.ownerReferences[uid=\"uid-w\"].kind",
            "metadata.ownerReferences[uid=\"uid-w\"].name",
            "metadata.ownerReferences[uid=\"uid-w\"].uid",
        ]
    );
}

#[test]
fn a_manager_dropping_its_owner_reference_removes_only_its_own() {
    let a = Ownership::default()
        .apply(
            &json!({}),
            &refs(vec![owner_ref("Keeper", "k", "uid-k", true)]),
            &apply("a"),
            false,
        )
        .unwrap();
    let b = a
        .ownership
        .apply(
            &a.object,
            &refs(vec![owner_ref("Watcher", "w", "uid-w", false)]),
            &apply("b"),
            false,
        )
        .unwrap();
    let b_drops = b
        .ownership
        .apply(&b.object, &json!({"metadata": {}}), &apply("b"), false)
        .unwrap();
    assert_eq!(
        b_drops.object,
        refs(vec![owner_ref("Keeper", "k", "uid-k", true)])
    );
    let a_drops = b_drops
        .ownership
        .apply(
            &b_drops.object,
            &json!({"metadata": {}}),
            &apply("a"),
            false,
        )
        .unwrap();
    assert_eq!(
        a_drops.object,
        json!({"metadata": {}}),
        "the emptied list is removed"
    );
}

#[test]
fn a_shared_owner_reference_stays_until_its_last_manager_drops_it() {
    let shared = refs(vec![owner_ref("Keeper", "k", "uid-k", false)]);
    let a = Ownership::default()
        .apply(&json!({}), &shared, &apply("a"), false)
        .unwrap();
    let b = a
        .ownership
        .apply(&a.object, &shared, &apply("b"), false)
        .unwrap();
    let a_drops = b
        .ownership
        .apply(&b.object, &json!({}), &apply("a"), false)
        .unwrap();
    assert_eq!(a_drops.object, shared);
    // Flipping the controller flag of a reference another manager holds
    // is a conflict on that one field.
    let conflicts = a_drops
        .ownership
        .apply(
            &a_drops.object,
            &refs(vec![owner_ref("Keeper", "k", "uid-k", true)]),
            &apply("a"),
            false,
        )
        .unwrap_err();
    assert_eq!(
        conflicts[0].to_string(),
        "metadata.ownerReferences[uid=\"uid-k\"].controller is owned by field manager \"b\""
    );
}

#[test]
fn new_owner_references_keep_the_order_the_applier_gave() {
    let merged = Ownership::default()
        .apply(
            &json!({}),
            &refs(vec![
                owner_ref("Zeta", "z", "uid-z", false),
                owner_ref("Alpha", "a", "uid-a", false),
            ]),
            &apply("m"),
            false,
        )
        .unwrap();
    let uids: Vec<&Value> = merged.object["metadata"]["ownerReferences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["uid"])
        .collect();
    assert_eq!(uids, [&json!("uid-z"), &json!("uid-a")]);
}
