//! Trigger filters (contract 0.2.3) in the engine on the embedded cluster:
//! a change the plugin declared it does not need queues nothing, so the
//! plugin is not called; one it needs is reconciled as before. podset
//! wakes on the generation of its PodSet and Deployment and on its Pods'
//! labels; the plugin built for 0.2.2 (`contract-0-2-2`), which cannot
//! declare triggers, is the control: every change wakes it, as before.

use reconciler_host::cluster::ClusterBackend;
use reconciler_tests::world::{World, key};
use reconciler_tests::{example_plugin, test_plugin};
use serde_json::{Value, json};

fn podset(name: &str, size: i64) -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"size": size}})
}

fn legacy(name: &str) -> Value {
    json!({"apiVersion": "legacy.example.com/v1", "kind": "LegacyCluster",
        "metadata": {"name": name, "namespace": "default"}})
}

fn pod(name: &str, podset: &str, tier: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
            "labels": {"app": "podset", "podset": podset, "tier": tier}},
        "spec": {"containers": [{"name": "busybox", "image": "busybox:1.36"}]}})
}

/// Names of the primaries reconciled in one settle.
fn reconciled(records: &[reconciler_host::engine::ReconcileRecord]) -> Vec<String> {
    records.iter().map(|r| r.object.name.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_updates_wake_podset_no_more_and_spec_changes_still_do() {
    let mut world = World::new(&[&example_plugin("podset"), &test_plugin("contract-0-2-2")]).await;
    world.apply(podset("web", 2));
    world.apply(legacy("old"));
    assert!(!world.settle().await.is_empty());
    assert!(world.settle().await.is_empty(), "both converged");

    // The Deployment controller reports progress on web's Deployment.
    let deployment = key("apps", "v1", "Deployment", "default", "web");
    world
        .cluster
        .apply_status(
            &deployment,
            json!({"replicas": 2, "readyReplicas": 1, "observedGeneration": 1}),
            "kube-controller-manager",
            None,
        )
        .await
        .expect("status written");
    assert!(
        world.settle().await.is_empty(),
        "a status update of its Deployment woke podset"
    );

    // Another writer touches the status of both primaries: the plugin
    // built for 0.2.2, which filters nothing, is woken as before; podset,
    // which wakes on its PodSet's generation, is not.
    for primary in [
        key("example.com", "v1alpha1", "PodSet", "default", "web"),
        key(
            "legacy.example.com",
            "v1",
            "LegacyCluster",
            "default",
            "old",
        ),
    ] {
        world
            .cluster
            .apply_status(&primary, json!({"note": "seen"}), "someone-else", None)
            .await
            .expect("status written");
    }
    assert_eq!(reconciled(&world.settle().await), ["old"]);

    // Someone scales web's Deployment by hand: its generation moves, podset
    // wakes and puts the size back.
    let mut scaled = world.get(&deployment).await.unwrap();
    scaled["spec"]["replicas"] = json!(5);
    scaled["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    world.apply(scaled);
    // (Putting it back moves the generation again: one more reconcile,
    // which finds it in sync.)
    let woken = reconciled(&world.settle().await);
    assert!(
        !woken.is_empty() && woken.iter().all(|name| name == "web"),
        "{woken:?}"
    );
    let restored = world.get(&deployment).await.unwrap();
    assert_eq!(restored["spec"]["replicas"], 2, "{restored}");

    // A spec change of the PodSet wakes it.
    world.apply(podset("web", 3));
    let woken = reconciled(&world.settle().await);
    assert!(
        !woken.is_empty() && woken.iter().all(|name| name == "web"),
        "spec of the PodSet: {woken:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_labels_wake_podset_and_its_status_does_not() {
    let mut world = World::new(&[&example_plugin("podset")]).await;
    world.apply(podset("web", 1));
    world.settle().await;
    // A new Pod always wakes its primary: creation is never filtered.
    world.apply(pod("web-1", "web", "front"));
    assert_eq!(reconciled(&world.settle().await), ["web"]);
    let status = world
        .get(&key("example.com", "v1alpha1", "PodSet", "default", "web"))
        .await
        .unwrap()["status"]
        .clone();
    assert_eq!(status["podNames"], json!(["web-1"]));

    // The kubelet's status updates of the Pod: nothing to reconcile.
    let pod_key = key("", "v1", "Pod", "default", "web-1");
    world
        .cluster
        .apply_status(&pod_key, json!({"phase": "Running"}), "kubelet", None)
        .await
        .expect("status written");
    assert!(world.settle().await.is_empty(), "a Pod's status");

    // A label change can take the Pod out of the PodSet: it wakes it.
    world.apply(pod("web-1", "web", "back"));
    assert_eq!(reconciled(&world.settle().await), ["web"], "a Pod's labels");
}

/// kubernetescluster wakes on its cluster's generation and annotations, on
/// its Jobs' outcome fields and on its records' data: each filter kind, in
/// the engine, against the writes the Job controller and others make.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_annotation_and_data_triggers_wake_kubernetescluster_only_when_declared() {
    let mut world = World::new(&[&example_plugin("kubernetescluster")]).await;
    let cluster = |operation: &str| {
        json!({"apiVersion": "example.com/v1alpha1", "kind": "KubernetesCluster",
            "metadata": {"name": "prod", "namespace": "default",
                "annotations": {"app.kubernetes.io/operation": operation}},
            "spec": {"masters": 3, "workers": 2, "version": "1.33", "timeoutSeconds": 600}})
    };
    world.apply(cluster("creating"));
    assert!(!world.settle().await.is_empty());
    assert!(world.settle().await.is_empty(), "converged");
    let job = world
        .cluster
        .objects()
        .into_iter()
        .find(|o| o["kind"] == "Job")
        .expect("the creating Job");
    let job_name = job["metadata"]["name"].as_str().unwrap().to_string();
    let job_key = key("batch", "v1", "Job", "default", &job_name);
    let embedded = world.cluster.clone();
    let write_job_status = |status: Value| {
        let cluster = embedded.clone();
        let job_key = job_key.clone();
        async move {
            cluster
                .apply_status(&job_key, status, "job-controller", None)
                .await
                .expect("job status");
        }
    };

    // The Job controller counts its running pod: not an outcome.
    write_job_status(json!({"startTime": "2024-01-01T00:00:00Z", "active": 1})).await;
    let woken = reconciled(&world.settle().await);
    assert_eq!(
        woken,
        ["prod"],
        "startTime is read (the deadline starts there)"
    );
    write_job_status(json!({"startTime": "2024-01-01T00:00:00Z", "active": 1, "ready": 1})).await;
    assert!(
        world.settle().await.is_empty(),
        "a ready count of a running Job woke kubernetescluster"
    );

    // Someone labels the operation record: the plugin reads its data only.
    let record_key = key("", "v1", "ConfigMap", "default", &job_name);
    let mut record = world.get(&record_key).await.expect("the record");
    record["metadata"]["labels"]["team"] = json!("infra");
    record["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    world.apply(record.clone());
    assert!(
        world.settle().await.is_empty(),
        "a relabelled record woke kubernetescluster"
    );
    // Its data changed: that is what the plugin reads, so it wakes.
    record["data"]["workers"] = json!("4");
    world.apply(record);
    assert_eq!(reconciled(&world.settle().await), ["prod"]);

    // The Job succeeds: an outcome, which wakes it, and the phase moves.
    write_job_status(json!({"startTime": "2024-01-01T00:00:00Z", "succeeded": 1,
        "conditions": [{"type": "Complete", "status": "True"}]}))
    .await;
    let woken = reconciled(&world.settle().await);
    assert!(
        !woken.is_empty() && woken.iter().all(|n| n == "prod"),
        "{woken:?}"
    );
    let primary = key(
        "example.com",
        "v1alpha1",
        "KubernetesCluster",
        "default",
        "prod",
    );
    assert_eq!(
        world.get(&primary).await.unwrap()["status"]["phase"],
        "Running"
    );

    // A new operation is an annotation: no generation moves, yet it wakes.
    world.apply(cluster("upgrading"));
    let woken = reconciled(&world.settle().await);
    assert!(
        !woken.is_empty() && woken.iter().all(|n| n == "prod"),
        "{woken:?}"
    );
    let jobs: Vec<Value> = world
        .cluster
        .objects()
        .into_iter()
        .filter(|o| o["kind"] == "Job")
        .map(|o| o["metadata"]["name"].clone())
        .collect();
    assert!(
        jobs.contains(&json!("prod-upgrading-1")),
        "the upgrading annotation started no Job: {jobs:?}"
    );
}
