//! A plugin deletes and applies only what its primary controls, on the
//! embedded cluster, with the compiled hostile plugin trying otherwise.
//! The same attempts against a real API server are in
//! `real_cluster_capabilities.rs`.

use std::sync::Arc;

use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::cluster::{ClusterBackend, ObjectKey, VirtualClock};
use reconciler_host::engine::{Change, Engine, Outcome};
use reconciler_sdk::EventType;
use reconciler_tests::world::{World, key};
use reconciler_tests::{example_plugin, load, test_plugin};
use serde_json::{Value, json};

const NS: &str = "arena";

fn hostile(name: &str, mode: &str, targets: &[&str]) -> Value {
    json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"mode": mode, "targets": targets}})
}

fn config_map(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS}, "data": data})
}

fn config_map_key(name: &str) -> ObjectKey {
    key("", "v1", "ConfigMap", NS, name)
}

/// The Warning Events recorded on Hostile `name`, as `reason: message`.
fn warnings_on(world: &World, name: &str) -> Vec<String> {
    world
        .events()
        .into_iter()
        .filter(|e| e.record.regarding.name == name && e.record.event_type == EventType::Warning)
        .map(|e| format!("{}: {}", e.record.reason, e.record.message))
        .collect()
}

fn controller_of(object: &Value) -> Option<(String, String)> {
    object["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == json!(true))
        .map(|r| {
            (
                r["kind"].as_str().unwrap_or_default().to_string(),
                r["name"].as_str().unwrap_or_default().to_string(),
            )
        })
}

#[tokio::test]
async fn a_delete_of_an_object_the_primary_does_not_control_is_refused_whole() {
    let mut world = World::new(&[&test_plugin("hostile")]).await;
    world.apply(config_map("stranger", json!({"k": "v"})));
    world.apply(hostile("sibling", "", &[]));
    world.settle().await;
    assert!(
        world.get(&config_map_key("sibling")).await.is_some(),
        "the sibling primary made its child"
    );

    world.apply(hostile(
        "quartz",
        "delete-stranger",
        &["stranger", "sibling"],
    ));
    world.settle().await;

    assert!(world.get(&config_map_key("stranger")).await.is_some());
    assert!(world.get(&config_map_key("sibling")).await.is_some());
    assert!(
        world.get(&config_map_key("quartz")).await.is_none(),
        "nothing of a refused response is applied, its own child included"
    );
    let warnings = warnings_on(&world, "quartz");
    assert!(
        warnings.iter().any(|w| w
            == &format!(
                "InvalidResponse: invalid response: delete[0] (v1 ConfigMap stranger): not controlled by Hostile {NS}/quartz"
            )),
        "{warnings:?}"
    );
}

#[tokio::test]
async fn an_object_another_controller_owns_is_never_taken_over() {
    let mut world = World::new(&[&test_plugin("hostile")]).await;
    let keeper = world.apply(config_map("keeper", json!({})));
    let mut victim = config_map("victim", json!({"k": "7"}));
    victim["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
        "name": "keeper", "uid": keeper["metadata"]["uid"], "controller": true}]);
    world.apply(victim);
    world.apply(hostile("sibling", "", &[]));
    world.settle().await;

    // Someone else's object, and a sibling primary's child.
    for (attacker, target, controller) in [
        ("hijack", "victim", "ConfigMap keeper"),
        ("poach", "sibling", "Hostile sibling"),
    ] {
        let before = world.get(&config_map_key(target)).await.unwrap();
        world.apply(hostile(attacker, "adopt", &[target]));
        world.settle().await;
        let after = world.get(&config_map_key(target)).await.unwrap();
        assert_eq!(before, after, "{target} is untouched");
        assert!(world.get(&config_map_key(attacker)).await.is_none());
        let warnings = warnings_on(&world, attacker);
        assert!(
            warnings.iter().any(|w| w.starts_with(&format!(
                "AlreadyOwned: apply[1] (v1 ConfigMap {target}): already controlled by {controller} (uid "
            ))),
            "{warnings:?}"
        );
    }
    let victim = world.get(&config_map_key("victim")).await.unwrap();
    assert_eq!(victim["data"]["k"], "7");
    assert_eq!(
        controller_of(&victim),
        Some(("ConfigMap".into(), "keeper".into()))
    );
}

#[tokio::test]
async fn an_object_with_no_controller_is_not_adopted_and_the_event_says_how() {
    let mut world = World::new(&[&test_plugin("hostile")]).await;
    world.apply(config_map("orphan", json!({"k": "7"})));
    world.apply(hostile("taker", "adopt", &["orphan"]));
    world.settle().await;

    let orphan = world.get(&config_map_key("orphan")).await.unwrap();
    assert_eq!(orphan["data"]["k"], "7");
    assert_eq!(controller_of(&orphan), None);
    let warnings = warnings_on(&world, "taker");
    assert!(
        warnings.iter().any(|w| w.starts_with(
            "AdoptionRefused: apply[1] (v1 ConfigMap orphan): exists and has no controller"
        ) && w
            .contains(&format!("kubectl delete configmap orphan -n {NS}"))
            && w.contains(&format!(
                "kubectl patch configmap orphan -n {NS} --type=merge"
            ))),
        "{warnings:?}"
    );

    // Following the event's advice: once the orphan is gone, the plugin
    // creates its own.
    world.delete(&config_map_key("orphan"));
    world.settle_for(std::time::Duration::from_secs(2)).await;
    let made = world.get(&config_map_key("orphan")).await.unwrap();
    assert_eq!(made["data"]["k"], "99");
    assert_eq!(
        controller_of(&made),
        Some(("Hostile".into(), "taker".into()))
    );
}

/// A status computed from a primary that was deleted and made again under
/// its name is not written to the new one.
#[tokio::test]
async fn a_status_for_a_deleted_primary_never_lands_on_its_namesake() {
    let clock = VirtualClock::at(reconciler_sdk::testing::DEFAULT_NOW_MILLIS);
    let cluster = Arc::new(EmbeddedCluster::new(Arc::new(clock.clone())));
    let engine = Engine::new(
        cluster.clone(),
        Arc::new(clock.clone()),
        vec![Arc::new(load(&example_plugin("podset")))],
    )
    .await
    .unwrap();
    let podset = |size: u32| {
        json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
            "metadata": {"name": "web", "namespace": NS}, "spec": {"size": size}})
    };
    let first = cluster.apply_as_user(podset(2)).unwrap();
    engine.pump();
    let (plugin, object) = engine.next_ready().expect("the PodSet is queued");
    // Between the read and the writes, the PodSet is replaced.
    let key = ObjectKey::of(&first).unwrap();
    cluster.delete_as_user(&key).unwrap();
    let second = cluster.apply_as_user(podset(5)).unwrap();
    assert_ne!(first["metadata"]["uid"], second["metadata"]["uid"]);

    let record = engine.reconcile(&plugin, object).await;
    let Outcome::Applied { changes, .. } = &record.outcome else {
        panic!("{record}");
    };
    assert!(changes.contains(&Change::StatusStale), "{record}");
    let stored = cluster.get(&key).await.unwrap().unwrap();
    assert_eq!(stored["metadata"]["uid"], second["metadata"]["uid"]);
    assert!(
        stored.get("status").is_none(),
        "no status from the old PodSet: {stored}"
    );
}

/// What cannot be checked up front (here: the cluster is full after the
/// first create) is reported as a partial apply, naming what was done.
#[tokio::test]
async fn a_failure_midway_is_reported_as_a_partial_apply() {
    let clock = VirtualClock::at(reconciler_sdk::testing::DEFAULT_NOW_MILLIS);
    // Room for the Hostile and one ConfigMap.
    let cluster = Arc::new(EmbeddedCluster::with_capacity(Arc::new(clock.clone()), 2));
    let engine = Engine::new(
        cluster.clone(),
        Arc::new(clock.clone()),
        vec![Arc::new(load(&test_plugin("hostile")))],
    )
    .await
    .unwrap();
    cluster
        .apply_as_user(hostile("greedy", "adopt", &["extra"]))
        .unwrap();
    engine.pump();
    let (plugin, object) = engine.next_ready().unwrap();
    let record = engine.reconcile(&plugin, object).await;
    let Outcome::Failed { message, .. } = &record.outcome else {
        panic!("{record}");
    };
    assert!(
        message.starts_with(&format!("applying ConfigMap {NS}/extra: "))
            && message.contains(&format!(
                "(partial apply: finalizer hostile.example.com/cleanup added, created ConfigMap {NS}/greedy done before this failed"
            )),
        "{message}"
    );
}

/// One CRD may serve a kind in several versions, all views of the same
/// objects: a plugin per version would both see every object and its
/// children, and each prune the children the other applies. The second
/// plugin is refused, by the engine and when a set of files is loaded, and
/// the first keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_for_another_version_of_a_served_primary_kind_is_refused() {
    let (first, second) = (test_plugin("hostile"), test_plugin("hostile-rival-version"));
    let refusal = format!(
        "plugin rival reconciles hostile.example.com/v2 Hostile, the same kind as \
         hostile.example.com/v1 Hostile, which plugin hostile from {} already reconciles: a \
         primary kind has one plugin, whatever version of it each serves",
        first.display()
    );

    let mut world = World::new(&[&first]).await;
    let refused = world
        .engine
        .add_plugin(Arc::new(load(&second)))
        .await
        .expect_err("the second plugin for the kind is refused");
    assert_eq!(refused.to_string(), refusal);
    assert_eq!(world.served(), ["hostile"]);
    world.apply(hostile("h", "ok", &[]));
    world.settle().await;
    assert!(
        world.get(&config_map_key("h")).await.is_some(),
        "the first keeps serving"
    );

    let (loaded, failed) = reconciler_host::plugin::directory::load_files(
        reconciler_tests::sandbox(),
        &[first, second.clone()],
    );
    assert_eq!(loaded.len(), 1);
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].path, second);
    assert!(failed[0].to_string().contains(&refusal), "{}", failed[0]);
}
