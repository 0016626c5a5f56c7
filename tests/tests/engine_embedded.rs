//! The engine with compiled plugins on the embedded cluster: the lifecycle a
//! user sees, step by step.

use std::time::Duration;

use reconciler_host::engine::{Change, Outcome};
use reconciler_tests::world::{World, key};
use reconciler_tests::{example_plugin, test_plugin};
use serde_json::{Value, json};

fn podset(name: &str, size: i64) -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"size": size}})
}

fn pod(name: &str, podset: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "podset", "podset": podset}},
        "spec": {"containers": [{"name": "busybox", "image": "busybox:1.36"}]}})
}

fn hostile(name: &str, mode: &str) -> Value {
    json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"mode": mode}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podset_lifecycle_on_the_embedded_cluster() {
    let mut world = World::new(&[&example_plugin("podset")]).await;
    let deployment_key = key("apps", "v1", "Deployment", "default", "web");
    let podset_key = key("example.com", "v1alpha1", "PodSet", "default", "web");

    // Size 3: a Deployment with 3 replicas, owned by the PodSet.
    world.apply(podset("web", 3));
    world.settle().await;
    let owner_uid = world.get(&podset_key).await.unwrap()["metadata"]["uid"].clone();
    let d = world
        .get(&deployment_key)
        .await
        .expect("the Deployment exists");
    assert_eq!(d["spec"]["replicas"], 3);
    let owner = &d["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), &owner["uid"], &owner["controller"]),
        (Some("PodSet"), &owner_uid, &json!(true))
    );
    assert_eq!(
        d["metadata"]["managedFields"],
        Value::Null,
        "the store keeps ownership to itself"
    );

    // Settled means quiet: reconciling again sends nothing.
    let rv = d["metadata"]["resourceVersion"].clone();
    let again = world.settle().await;
    assert!(again.is_empty(), "nothing left to do: {again:?}");
    assert_eq!(
        world.get(&deployment_key).await.unwrap()["metadata"]["resourceVersion"],
        rv
    );

    // Scale to 5: updated.
    world.apply(podset("web", 5));
    world.settle().await;
    assert_eq!(
        world.get(&deployment_key).await.unwrap()["spec"]["replicas"],
        5
    );

    // Pods appearing with the label: status.podNames follows.
    world.apply(pod("web-b", "web"));
    world.apply(pod("web-a", "web"));
    world.apply(pod("other", "api"));
    world.settle().await;
    assert_eq!(
        world.get(&podset_key).await.unwrap()["status"]["podNames"],
        json!(["web-a", "web-b"])
    );
    world.delete(&key("", "v1", "Pod", "default", "web-b"));
    world.settle().await;
    assert_eq!(
        world.get(&podset_key).await.unwrap()["status"]["podNames"],
        json!(["web-a"])
    );

    // The Deployment deleted by hand: recreated.
    world.delete(&deployment_key);
    assert!(world.get(&deployment_key).await.is_none());
    world.settle().await;
    assert_eq!(
        world.get(&deployment_key).await.expect("recreated")["spec"]["replicas"],
        5
    );

    // The PodSet deleted: its Deployment is garbage-collected.
    world.delete(&podset_key);
    world.settle().await;
    assert!(world.get(&podset_key).await.is_none());
    assert!(
        world.get(&deployment_key).await.is_none(),
        "garbage-collected"
    );
    // The pods were never owned by the PodSet: they stay.
    assert!(
        world
            .get(&key("", "v1", "Pod", "default", "web-a"))
            .await
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_object_backs_off_and_the_others_converge() {
    let mut world = World::new(&[&test_plugin("hostile"), &example_plugin("podset")]).await;
    world.apply(hostile("broken", "error"));
    world.apply(hostile("fine", "ok"));
    world.apply(podset("web", 1));
    let records = world.settle_for(Duration::from_secs(20)).await;

    let failures: Vec<(u32, Duration)> = records
        .iter()
        .filter(|r| r.object.name == "broken")
        .filter_map(|r| match &r.outcome {
            Outcome::Failed {
                failures, retry_in, ..
            } => Some((*failures, *retry_in)),
            _ => None,
        })
        .collect();
    assert!(failures.len() >= 4, "retried with backoff: {failures:?}");
    for pair in failures.windows(2) {
        assert_eq!(pair[1].0, pair[0].0 + 1);
        assert_eq!(
            pair[1].1,
            pair[0].1 * 2,
            "the backoff doubles: {failures:?}"
        );
    }
    let warnings: Vec<_> = world
        .events()
        .into_iter()
        .filter(|e| e.record.regarding.name == "broken" && e.record.reason == "ReconcileError")
        .collect();
    assert_eq!(warnings.len(), 1, "one Warning Event: {warnings:?}");
    assert_eq!(
        warnings[0].series.map(|s| s.count as usize),
        Some(failures.len()),
        "counting every failure"
    );

    // The others converged.
    assert!(
        world
            .get(&key("", "v1", "ConfigMap", "default", "fine"))
            .await
            .is_some()
    );
    assert!(
        world
            .get(&key("apps", "v1", "Deployment", "default", "web"))
            .await
            .is_some()
    );
    assert!(
        world
            .get(&key("", "v1", "ConfigMap", "default", "broken"))
            .await
            .is_none(),
        "nothing of a failure applied"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_waits_for_the_plugin_to_finish_its_cleanup() {
    let mut world = World::new(&[&test_plugin("hostile")]).await;
    let primary = key("hostile.example.com", "v1", "Hostile", "default", "guarded");
    world.apply(hostile("guarded", "ok"));
    let first = world.settle().await;
    let changes = match &first[0].outcome {
        Outcome::Applied { changes, .. } => changes.clone(),
        other => panic!("{other:?}"),
    };
    assert!(
        changes.contains(&Change::FinalizerAdded(
            "hostile.example.com/cleanup".into()
        )),
        "{changes:?}"
    );
    assert_eq!(
        world.get(&primary).await.unwrap()["metadata"]["finalizers"],
        json!(["hostile.example.com/cleanup"])
    );

    world.delete(&primary);
    world.settle_for(Duration::from_secs(60)).await;
    let held = world
        .get(&primary)
        .await
        .expect("held open by the finalizer");
    assert!(held["metadata"]["deletionTimestamp"].is_string());
    assert!(
        world
            .get(&key("", "v1", "ConfigMap", "default", "guarded"))
            .await
            .is_some()
    );

    let mut done = hostile("guarded", "ok");
    done["metadata"]["annotations"] = json!({"hostile.example.com/cleanup-done": "true"});
    world.apply(done);
    let last = world.settle().await;
    assert!(
        world.get(&primary).await.is_none(),
        "released and deleted: {last:?} {:?}",
        world.get(&primary).await
    );
    assert!(
        world
            .get(&key("", "v1", "ConfigMap", "default", "guarded"))
            .await
            .is_none(),
        "its child collected"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_response_applies_nothing_and_is_an_event() {
    let mut world = World::new(&[&test_plugin("hostile")]).await;
    world.apply(hostile("sneaky", "other-namespace"));
    world.settle().await;
    let events = world.events();
    let event = events
        .iter()
        .find(|e| e.record.regarding.name == "sneaky")
        .expect("an Event on the object");
    assert_eq!(event.record.reason, "InvalidResponse");
    assert!(
        event.record.message.contains("not the primary's namespace"),
        "{}",
        event.record.message
    );
    assert!(
        world
            .get(&key("", "v1", "ConfigMap", "kube-system", "sneaky"))
            .await
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_never_settles_is_reported_by_name_and_object() {
    use std::sync::Arc;

    use reconciler_host::process::simulate::{SimulationConfig, simulate};

    let plugins = vec![Arc::new(reconciler_tests::load(&test_plugin("hostile")))];
    let objects = vec![hostile("flappy", "flap"), hostile("calm", "ok")];
    let config = SimulationConfig {
        max_rounds: 10,
        ..SimulationConfig::default()
    };
    let (report, _) = simulate(plugins, objects, &config).await.unwrap();
    let why = report
        .unsettled
        .clone()
        .expect("reported as never settling");
    assert!(
        why.contains("plugin hostile never settles on Hostile default/flappy"),
        "{why}"
    );
    assert!(why.contains("reconciled 11 times"), "{why}");
    assert!(
        report.render().contains("NOT SETTLED"),
        "the report says so"
    );
}

fn pod_in(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "busybox", "image": "busybox:1.36"}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_same_namespace_read_kind_is_read_only_next_to_the_primary() {
    let mut world = World::new(&[&test_plugin("hostile")]).await;
    world.apply(pod_in("default", "mine"));
    world.apply(pod_in("kube-system", "theirs"));
    world.apply(hostile("own", "read-own-namespace"));
    world.apply(hostile("nosy", "read-other-namespace"));
    world.settle().await;

    let own = key("hostile.example.com", "v1", "Hostile", "default", "own");
    assert_eq!(
        world.get(&own).await.unwrap()["status"],
        json!({"pods": ["mine"]}),
        "no namespace reads the primary's, not every namespace"
    );
    let nosy = key("hostile.example.com", "v1", "Hostile", "default", "nosy");
    assert!(world.get(&nosy).await.unwrap().get("status").is_none());
    let events = world.events();
    let event = events
        .iter()
        .find(|e| e.record.regarding.name == "nosy")
        .expect("a Warning Event on the object");
    assert_eq!(event.record.reason, "ReconcileError");
    assert!(
        event.record.message.contains(
            "declared v1 Pod a same-namespace read kind, so it reads it only in its primary's namespace \"default\", not in \"kube-system\""
        ),
        "{}",
        event.record.message
    );
}
