//! An engine that shares its primaries with other replicas (`run
//! --sharding`) reconciles only those it owns: the others are dropped when
//! they come up, and reconciled once they are handed to it.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use reconciler_host::cluster::RealClock;
use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::engine::dispatch::{Dispatcher, Wake};
use reconciler_host::engine::{Engine, KeyFilter};
use reconciler_tests::{example_plugin, load};
use serde_json::{Value, json};

fn podset(name: &str) -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"size": 1}})
}

/// The names of the Deployments in the cluster: one per PodSet reconciled.
fn deployments(cluster: &EmbeddedCluster) -> BTreeSet<String> {
    cluster
        .objects()
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .map(|o| o["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The replicas of Deployment `name`.
fn replicas(cluster: &EmbeddedCluster, name: &str) -> Option<i64> {
    cluster
        .objects()
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == name)
        .and_then(|o| o["spec"]["replicas"].as_i64())
}

/// Dispatches until nothing is outstanding and nothing is due now.
async fn run_idle(dispatcher: &mut Dispatcher<EmbeddedCluster>) -> usize {
    let mut finished = 0;
    loop {
        dispatcher.dispatch();
        if dispatcher.outstanding() == 0 {
            return finished;
        }
        if let Wake::Finished(_) = dispatcher.wake().await {
            finished += 1;
        }
    }
}

#[tokio::test]
async fn only_owned_primaries_are_reconciled_and_handed_ones_are_queued() {
    let cluster = Arc::new(EmbeddedCluster::new(Arc::new(RealClock)));
    for name in ["a-1", "a-2", "b-1", "b-2"] {
        cluster.apply_as_user(podset(name)).expect("stored");
    }
    // This replica owns the names starting with `a-` until told otherwise.
    let owned = Arc::new(Mutex::new("a-".to_string()));
    let filter: KeyFilter = {
        let owned = owned.clone();
        Arc::new(move |key| key.name.starts_with(owned.lock().unwrap().as_str()))
    };
    let engine = Engine::empty(cluster.clone(), Arc::new(RealClock)).with_ownership(filter);
    engine
        .add_plugin(Arc::new(load(&example_plugin("podset"))))
        .await
        .expect("podset starts");
    let engine = Arc::new(engine);
    let mut dispatcher = Dispatcher::new(engine.clone());

    assert!(run_idle(&mut dispatcher).await >= 2);
    assert_eq!(
        deployments(&cluster),
        BTreeSet::from(["a-1".to_string(), "a-2".to_string()])
    );
    // The others were dropped, not left waiting.
    assert!(engine.queue_stats().iter().all(|q| q.depth <= 2));

    // A change of a primary owned elsewhere is dropped too.
    cluster
        .apply_as_user(
            json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
            "metadata": {"name": "b-1", "namespace": "default"}, "spec": {"size": 2}}),
        )
        .expect("stored");
    run_idle(&mut dispatcher).await;
    assert!(!deployments(&cluster).contains("b-1"));

    // The `b-` keys are handed to this replica: queued from the cache and
    // reconciled; the `a-` ones are no longer dispatched.
    *owned.lock().unwrap() = "b-".to_string();
    let queued = engine.queue_where(
        |key| key.name.starts_with("b-"),
        reconciler_host::engine::cause::Cause::RingMove,
    );
    assert_eq!(queued, 2);
    assert_eq!(engine.count_where(|key| key.name.starts_with("b-")), 2);
    assert!(run_idle(&mut dispatcher).await >= 2);
    assert_eq!(deployments(&cluster).len(), 4);
    assert_eq!(
        replicas(&cluster, "b-1"),
        Some(2),
        "b-1 is reconciled as it is now"
    );
    cluster
        .apply_as_user(
            json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
            "metadata": {"name": "a-1", "namespace": "default"}, "spec": {"size": 3}}),
        )
        .expect("stored");
    run_idle(&mut dispatcher).await;
    assert_eq!(replicas(&cluster, "a-1"), Some(1), "a-1 is not ours now");
    assert!(engine.in_flight_keys().is_empty());
}
