//! A namespace being deleted refuses new objects, so a cleanup that needs
//! to create something there can never run: the host releases the plugin's
//! finalizer instead of holding the namespace's deletion forever, and says
//! why in the reconcile's record and log. Here with kubernetescluster, whose
//! cleanup is a Job; the hostile plugin's variant is in
//! `embedded_like_api_server.rs`, the real cluster's in
//! `real_cluster_capabilities.rs`.

use reconciler_host::cluster::ObjectKey;
use reconciler_sdk::KindRef;
use reconciler_tests::example_plugin;
use reconciler_tests::world::{World, key};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubernetes_cluster_in_a_deleted_namespace_does_not_hold_it() {
    let mut world = World::new(&[&example_plugin("kubernetescluster")]).await;
    let ns = ObjectKey::new(KindRef::new("", "v1", "Namespace"), None, "team");
    world.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}));
    world.apply(
        json!({"apiVersion": "example.com/v1alpha1", "kind": "KubernetesCluster",
        "metadata": {"name": "prod", "namespace": "team",
            "annotations": {"app.kubernetes.io/operation": "creating"}},
        "spec": {"masters": 3, "workers": 2, "version": "1.33", "timeoutSeconds": 600}}),
    );
    world.settle().await;
    let cluster = key(
        "example.com",
        "v1alpha1",
        "KubernetesCluster",
        "team",
        "prod",
    );
    let created = world.get(&cluster).await.expect("created");
    assert_eq!(
        created["metadata"]["finalizers"],
        json!(["example.com/cluster-cleanup"]),
        "the cleanup finalizer holds it"
    );

    // Deleting the namespace: the cluster's cleanup wants a new Job there,
    // which the terminating namespace refuses.
    world.delete(&ns);
    let records = world.settle().await;
    assert!(
        world.get(&cluster).await.is_none(),
        "the finalizer was released"
    );
    assert!(world.get(&ns).await.is_none(), "the namespace is gone");
    let lines: Vec<String> = records
        .iter()
        .map(ToString::to_string)
        .filter(|r| r.contains("KubernetesCluster team/prod:"))
        .collect();
    assert!(
        lines
            .iter()
            .any(|r| r.contains("not created, namespace terminating: ")
                && r.contains("Job team/prod-deleting")
                && r.contains("finalizer example.com/cluster-cleanup removed")),
        "{lines:#?}"
    );
}
