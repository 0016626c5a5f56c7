//! The embedded cluster answers the compiled hostile plugin as an API server
//! would, where the capability rules rely on it: ownerReferences merge by
//! uid under server-side apply, a second controller reference is refused,
//! and a terminating namespace takes no new objects.

use std::sync::Arc;
use std::time::Duration;

use reconciler_host::cluster::ObjectKey;
use reconciler_sdk::KindRef;
use reconciler_tests::world::{World, key};
use reconciler_tests::{load, test_plugin};
use serde_json::{Value, json};

fn hostile(namespace: &str, name: &str, mode: &str) -> Value {
    json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
        "metadata": {"name": name, "namespace": namespace}, "spec": {"mode": mode}})
}

fn owner_refs(object: &Value) -> Vec<(String, bool)> {
    object["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            (
                format!(
                    "{}/{}",
                    r["kind"].as_str().unwrap_or(""),
                    r["name"].as_str().unwrap_or("")
                ),
                r["controller"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_references_of_the_plugin_and_a_user_merge_by_uid() {
    let mut world = World::new(&[&test_plugin("hostile")]).await;
    world.apply(hostile("default", "shared", "ok"));
    world.settle().await;
    let child_key = key("", "v1", "ConfigMap", "default", "shared");
    let child = world.get(&child_key).await.expect("the plugin's child");

    // A user adds a reference of their own (kubectl's field manager).
    let watcher = world.apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "watcher", "namespace": "default"}}));
    world.apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "shared", "namespace": "default", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "watcher",
             "uid": watcher["metadata"]["uid"]}]}}));

    // A new version applies the child again (forced, with its own list of
    // one reference): the user's reference stays.
    world
        .engine
        .replace_plugin(Arc::new(load(&test_plugin("hostile-v2"))))
        .await
        .unwrap();
    world.settle().await;
    let child_after = world.get(&child_key).await.unwrap();
    assert_eq!(child_after["data"]["version"], "0.2.0", "re-applied");
    assert_eq!(
        owner_refs(&child_after),
        [
            ("Hostile/shared".to_string(), true),
            ("ConfigMap/watcher".to_string(), false)
        ]
    );
    assert_eq!(
        child_after["metadata"]["ownerReferences"][0],
        child["metadata"]["ownerReferences"][0]
    );

    // The user drops theirs: only the plugin's is left.
    world.apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "shared", "namespace": "default"}}));
    let child_last = world.get(&child_key).await.unwrap();
    assert_eq!(
        owner_refs(&child_last),
        [("Hostile/shared".to_string(), true)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_controlled_by_another_owner_is_not_taken_over() {
    let mut world = World::new(&[&test_plugin("hostile")]).await;
    let keeper = world.apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "keeper", "namespace": "default"}}));
    world.apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "victim", "namespace": "default", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "keeper",
             "uid": keeper["metadata"]["uid"], "controller": true}]},
        "data": {"k": "mine"}}));
    let victim_key = key("", "v1", "ConfigMap", "default", "victim");
    let before = world.get(&victim_key).await.unwrap();

    // The hostile plugin returns a ConfigMap of the same name to own it.
    world.apply(hostile("default", "victim", "ok"));
    world.settle_for(Duration::from_secs(5)).await;

    let after = world.get(&victim_key).await.unwrap();
    assert_eq!(after, before, "neither its data nor its controller changed");
    assert_eq!(owner_refs(&after), [("ConfigMap/keeper".to_string(), true)]);
    let warning = world
        .events()
        .into_iter()
        .find(|e| e.record.regarding.name == "victim")
        .expect("a Warning Event on the primary");
    assert_eq!(
        warning.record.event_type,
        reconciler_sdk::EventType::Warning,
        "{}",
        warning.record.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminating_namespace_refuses_the_plugins_new_objects_then_goes() {
    let mut world = World::new(&[&test_plugin("hostile")]).await;
    let ns_key = ObjectKey::new(KindRef::new("", "v1", "Namespace"), None, "term");
    world.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "term"}}));
    world.apply(hostile("term", "h", "ok"));
    world.settle().await;
    let primary = key("hostile.example.com", "v1", "Hostile", "term", "h");
    let child = key("", "v1", "ConfigMap", "term", "h");
    assert!(world.get(&child).await.is_some());

    // Deleting the namespace deletes its content; the primary is held by
    // the plugin's finalizer, and its cleanup re-applies the child: a
    // create in a terminating namespace, refused. The cleanup can never
    // run, so the host releases the finalizer and the namespace goes.
    world.delete(&ns_key);
    let records = world.settle().await;
    assert!(
        world.get(&child).await.is_none(),
        "the child is not re-created"
    );
    assert!(world.get(&primary).await.is_none(), "released");
    assert!(world.get(&ns_key).await.is_none(), "the namespace is gone");
    let released: Vec<String> = records
        .iter()
        .map(ToString::to_string)
        .filter(|r| r.contains("Hostile term/h:"))
        .collect();
    assert!(
        released.iter().any(
            |r| r.contains("not created, namespace terminating: ConfigMap term/h")
                && r.contains("finalizer hostile.example.com/cleanup removed")
        ),
        "{released:#?}"
    );
}
