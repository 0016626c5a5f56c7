//! The classic operators' whole lifecycles, compiled, on the embedded cluster
//! with a virtual clock.

use std::time::Duration;

use reconciler_host::cluster::ClusterBackend;
use reconciler_host::engine::{Change, Outcome, ReconcileRecord};
use reconciler_tests::example_plugin;
use reconciler_tests::world::{World, key};
use serde_json::{Value, json};

const HOUR: i64 = 3_600_000;

fn jobs(world: &World) -> Vec<Value> {
    world
        .cluster
        .objects()
        .into_iter()
        .filter(|o| o["kind"] == "Job")
        .collect()
}

fn name(o: &Value) -> String {
    o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn finish_job(world: &World, job: &str, succeeded: bool) {
    let status = if succeeded {
        json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
    } else {
        json!({"failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]})
    };
    let job = key("batch", "v1", "Job", "default", job);
    world
        .cluster
        .apply_status(&job, status, "job-controller", None)
        .await
        .expect("job status");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcached_lifecycle() {
    let mut world = World::new(&[&example_plugin("memcached")]).await;
    let memcached = key("example.com", "v1alpha1", "Memcached", "default", "cache");
    let deployment = key("apps", "v1", "Deployment", "default", "cache");
    let spec = |size: i64| {
        json!({"apiVersion": "example.com/v1alpha1", "kind": "Memcached",
            "metadata": {"name": "cache", "namespace": "default"}, "spec": {"size": size}})
    };

    world.apply(spec(3));
    let records = world.settle_for(Duration::from_secs(90)).await;
    let d = world.get(&deployment).await.expect("a Deployment");
    assert_eq!(d["spec"]["replicas"], 3);
    let container = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "memcached:1.6-alpine");
    assert_eq!(container["args"], json!(["-m=64", "-o", "modern", "-v"]));
    assert_eq!(container["ports"][0]["containerPort"], 11211);
    // After creating the Deployment it asked to look again a minute later,
    // and that requeue fired even though other changes ran it earlier.
    let start = records[0].at_millis;
    assert!(
        records.iter().any(|r| r.at_millis == start + 60_000),
        "{records:#?}"
    );

    for pod in ["cache-b", "cache-a"] {
        world.apply(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": "default", "labels": {"app.kubernetes.io/name": "memcached", "memcached": "cache"}}}));
    }
    world.settle().await;
    assert_eq!(
        world.get(&memcached).await.unwrap()["status"]["nodes"],
        json!(["cache-a", "cache-b"])
    );

    world.apply(spec(1));
    world.settle().await;
    assert_eq!(world.get(&deployment).await.unwrap()["spec"]["replicas"], 1);

    world.delete(&memcached);
    world.settle().await;
    assert!(world.get(&deployment).await.is_none(), "garbage-collected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetescluster_lifecycle() {
    let mut world = World::new(&[&example_plugin("kubernetescluster")]).await;
    let cluster = key(
        "example.com",
        "v1alpha1",
        "KubernetesCluster",
        "default",
        "prod",
    );
    let spec = |operation: &str, workers: i64, masters: i64| {
        json!({"apiVersion": "example.com/v1alpha1", "kind": "KubernetesCluster",
            "metadata": {"name": "prod", "namespace": "default", "annotations": {"app.kubernetes.io/operation": operation}},
            "spec": {"masters": masters, "workers": workers, "version": "1.33", "timeoutSeconds": 600}})
    };
    let phase = |o: &Value| {
        o["status"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };

    // creating: one Job and one ConfigMap, phase Creating.
    world.apply(spec("creating", 2, 3));
    world.settle().await;
    let created = world.get(&cluster).await.unwrap();
    assert_eq!(phase(&created), "Creating");
    assert_eq!(
        created["metadata"]["finalizers"],
        json!(["example.com/cluster-cleanup"])
    );
    let first = jobs(&world);
    assert_eq!(first.len(), 1);
    let first_job = name(&first[0]);
    let record = world
        .get(&key("", "v1", "ConfigMap", "default", &first_job))
        .await
        .expect("the record");
    assert_eq!(record["data"]["operation"], "creating");

    // The Job succeeds: Running, recorded; the same annotation starts nothing.
    finish_job(&world, &first_job, true).await;
    world.settle_for(Duration::from_secs(60)).await;
    let running = world.get(&cluster).await.unwrap();
    assert_eq!(phase(&running), "Running");
    assert_eq!(running["status"]["lastOperation"], "creating");
    assert!(running["status"]["finishedAt"].is_string());
    assert_eq!(
        jobs(&world).len(),
        1,
        "a finished operation never runs twice"
    );

    // masters may not change.
    world.apply(spec("scaling", 2, 5));
    world.settle().await;
    let refused = world.get(&cluster).await.unwrap();
    let conditions = refused["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        conditions.iter().any(|c| c["reason"] == "MastersImmutable"),
        "{conditions:?}"
    );
    assert_eq!(jobs(&world).len(), 1, "no Job for a refused change");

    // scaling: a new Job; it fails: Failed with a reason.
    world.apply(spec("scaling", 5, 3));
    world.settle().await;
    assert_eq!(phase(&world.get(&cluster).await.unwrap()), "Scaling");
    let scaling = jobs(&world)
        .into_iter()
        .map(|j| name(&j))
        .find(|n| n != &first_job)
        .expect("a scaling Job");
    finish_job(&world, &scaling, false).await;
    world.settle().await;
    let failed = world.get(&cluster).await.unwrap();
    assert_eq!(phase(&failed), "Failed");

    // Deleting: a cleanup Job runs; the finalizer holds until it succeeds.
    world.delete(&cluster);
    world.settle_for(Duration::from_secs(30)).await;
    let terminating = world.get(&cluster).await.expect("held by the finalizer");
    assert_eq!(phase(&terminating), "Terminating");
    let names: Vec<String> = jobs(&world).iter().map(name).collect();
    let cleanup = names
        .iter()
        .find(|n| n.contains("deleting"))
        .unwrap_or_else(|| panic!("a cleanup Job among {names:?}"))
        .clone();
    finish_job(&world, &cleanup, true).await;
    world.settle().await;
    assert!(
        world.get(&cluster).await.is_none(),
        "released once cleanup succeeded"
    );
    assert!(jobs(&world).is_empty(), "its Jobs were garbage-collected");
}

fn restarts(records: &[ReconcileRecord]) -> Vec<i64> {
    records
        .iter()
        .filter(|r| r.plugin == "rollout-restarter")
        .filter(|r| match &r.outcome {
            Outcome::Applied { changes, .. } => changes
                .iter()
                .any(|c| matches!(c, Change::Updated(k) if k.kind.kind == "Deployment")),
            _ => false,
        })
        .map(|r| r.at_millis)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_scheduler_restarts_on_schedule_and_not_while_disabled() {
    let mut world = World::new(&[
        &example_plugin("rollout_schedules"),
        &example_plugin("rollout_restarter"),
    ])
    .await;
    let start = reconciler_sdk::testing::DEFAULT_NOW_MILLIS;
    let deployment = key("apps", "v1", "Deployment", "default", "web");
    let schedule = key(
        "example.com",
        "v1alpha1",
        "RolloutSchedule",
        "default",
        "web",
    );
    let web = |annotated: bool| {
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}});
        if annotated {
            d["metadata"]["annotations"] = json!({"rollout-scheduler.io/enabled": "true", "rollout-scheduler.io/schedule": "0 * * * *"});
        }
        d
    };
    let restarted_at = |d: &Value| {
        d["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"]
            .clone()
    };

    world.apply(web(true));
    world.settle().await;
    let s = world
        .get(&schedule)
        .await
        .expect("the annotation created a RolloutSchedule");
    assert_eq!(s["spec"]["deploymentName"], "web");
    assert_eq!(s["spec"]["schedule"], "0 * * * *");
    assert_eq!(s["metadata"]["ownerReferences"][0]["kind"], "Deployment");

    // Disabled (the default): two scheduled times pass without a restart.
    world.settle_for(Duration::from_secs(2 * 3600 + 1800)).await;
    assert!(
        restarted_at(&world.get(&deployment).await.unwrap()).is_null(),
        "no restart while disabled"
    );
    assert!(restarts(&world.records).is_empty());

    // Enabled at 02:30: nothing at once for the 02:00 that passed while
    // disabled; the clock crosses 03:00 and 04:00.
    world.apply(
        json!({"apiVersion": "example.com/v1alpha1", "kind": "RolloutSchedule",
        "metadata": {"name": "web", "namespace": "default"}, "spec": {"enabled": true}}),
    );
    world.settle().await;
    assert!(
        restarts(&world.records).is_empty(),
        "enabling restarts nothing before the next scheduled time"
    );
    world.settle_for(Duration::from_secs(2 * 3600)).await;
    assert_eq!(
        restarts(&world.records),
        [start + 3 * HOUR, start + 4 * HOUR],
        "one restart at each scheduled time, and no other"
    );
    let d = world.get(&deployment).await.unwrap();
    assert_eq!(restarted_at(&d), "2024-01-01T04:00:00Z");
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.27",
        "only the annotation was written"
    );
    let status = world.get(&schedule).await.unwrap()["status"].clone();
    assert_eq!(status["lastRestart"], "2024-01-01T04:00:00Z");
    assert_eq!(status["nextRestart"], "2024-01-01T05:00:00Z");

    // Removing the annotation prunes the schedule.
    world.apply(web(false));
    world.settle().await;
    assert!(world.get(&schedule).await.is_none(), "pruned");

    // Annotated again, then the Deployment deleted: garbage-collected.
    world.apply(web(true));
    world.settle().await;
    assert!(world.get(&schedule).await.is_some());
    world.delete(&deployment);
    world.settle().await;
    assert!(
        world.get(&schedule).await.is_none(),
        "garbage-collected with its Deployment"
    );
}
