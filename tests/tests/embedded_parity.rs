//! The embedded cluster and a real API server answer the same calls the
//! same way, where the capability rules rely on it: ownerReferences merge by
//! uid under server-side apply, a second controller reference is refused
//! (422), a cluster-scoped object is stored without the namespace it was
//! sent with, and a terminating namespace refuses creates but not updates.
//!
//! Each scenario is written once against `ClusterBackend` and run on the
//! embedded cluster always, and on the cluster of `KUBECONFIG` when
//! `RECONCILER_E2E=1` (otherwise that half prints
//! `embedded_parity: SKIPPED ...` and passes). On a real cluster it works in a
//! namespace `scope-parity-<n>` and a ClusterRole of the same name, both
//! deleted at the end.

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::cluster::kubernetes::KubernetesBackend;
use reconciler_host::cluster::{BackendError, ClusterBackend, ObjectKey, Propagation, RealClock};
use reconciler_sdk::KindRef;
use serde_json::{Value, json};

fn skip_reason() -> Option<String> {
    let mut missing = Vec::new();
    match std::env::var_os("RECONCILER_E2E") {
        Some(v) if v == "1" => {}
        Some(v) => missing.push(format!("RECONCILER_E2E is {v:?}, not \"1\"")),
        None => missing.push("RECONCILER_E2E is not set".to_string()),
    }
    match std::env::var_os("KUBECONFIG") {
        Some(v) if !v.is_empty() => {}
        Some(_) => missing.push("KUBECONFIG is empty".to_string()),
        None => missing.push("KUBECONFIG is not set".to_string()),
    }
    (!missing.is_empty()).then(|| missing.join(" and "))
}

fn run_id() -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    format!("scope-parity-{millis}")
}

fn config_map(ns: &str, name: &str, owners: Value) -> Value {
    let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns}, "data": {"k": "v"}});
    if !owners.is_null() {
        object["metadata"]["ownerReferences"] = owners;
    }
    object
}

fn reference(owner: &Value, controller: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"], "controller": controller})
}

fn owner_names(object: &Value) -> Vec<String> {
    object["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| r["name"].as_str().unwrap_or("").to_string())
        .collect()
}

fn cm_key(ns: &str, name: &str) -> ObjectKey {
    ObjectKey::new(KindRef::new("", "v1", "ConfigMap"), Some(ns), name)
}

/// ownerReferences of two managers, two controllers, a cluster-scoped
/// object sent with a namespace. `ns` exists.
async fn references_and_scope<B: ClusterBackend>(backend: &B, ns: &str, cluster_role: &str) {
    let keeper = backend
        .apply(config_map(ns, "keeper", Value::Null), "test-a", true)
        .await
        .unwrap();
    let watcher = backend
        .apply(config_map(ns, "watcher", Value::Null), "test-a", true)
        .await
        .unwrap();
    backend
        .apply(
            config_map(ns, "shared", json!([reference(&keeper, true)])),
            "test-a",
            false,
        )
        .await
        .unwrap();
    let merged = backend
        .apply(
            config_map(ns, "shared", json!([reference(&watcher, false)])),
            "test-b",
            false,
        )
        .await
        .unwrap();
    assert_eq!(owner_names(&merged), ["keeper", "watcher"], "merged by uid");

    let err = backend
        .apply(
            config_map(ns, "shared", json!([reference(&watcher, true)])),
            "test-c",
            true,
        )
        .await
        .unwrap_err();
    let BackendError::Invalid { message, .. } = &err else {
        panic!("{err}")
    };
    assert!(
        message.contains(
            "Only one reference can have Controller set to true. Found \"true\" in references for ConfigMap/keeper and ConfigMap/watcher"
        ),
        "{message}"
    );

    let dropped = backend
        .apply(config_map(ns, "shared", Value::Null), "test-b", false)
        .await
        .unwrap();
    assert_eq!(
        owner_names(&dropped),
        ["keeper"],
        "a manager dropping its reference removes only its own"
    );

    let role = backend
        .apply(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": cluster_role, "namespace": ns}, "rules": []}),
            "test-a",
            true,
        )
        .await
        .unwrap();
    assert!(role["metadata"].get("namespace").is_none(), "{role}");
    let role_key = ObjectKey::of(&role).unwrap();
    assert!(backend.get(&role_key).await.unwrap().is_some());
    backend
        .delete(&role_key, Propagation::Background, None)
        .await
        .unwrap();
}

/// A namespace held open by an object's finalizer refuses creates, takes
/// updates, and goes once released. Deletes `ns`.
async fn terminating_namespace<B: ClusterBackend>(backend: &B, ns: &str) {
    let ns_key = ObjectKey::new(KindRef::new("", "v1", "Namespace"), None, ns);
    let held = cm_key(ns, "held");
    backend
        .apply(config_map(ns, "held", Value::Null), "test-a", true)
        .await
        .unwrap();
    backend
        .add_finalizer(&held, "example.com/hold")
        .await
        .unwrap();
    backend
        .delete(&ns_key, Propagation::Background, None)
        .await
        .unwrap();
    let namespace = backend.get(&ns_key).await.unwrap().expect("held open");
    assert!(namespace["metadata"]["deletionTimestamp"].is_string());

    let err = backend
        .apply(config_map(ns, "new", Value::Null), "test-a", true)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        BackendError::NamespaceTerminating {
            key: format!("ConfigMap {ns}/new"),
            namespace: ns.to_string()
        }
    );
    let mut update = config_map(ns, "held", Value::Null);
    update["data"] = json!({"k": "updated"});
    let updated = backend.apply(update, "test-a", true).await.unwrap();
    assert_eq!(updated["data"]["k"], "updated");

    backend
        .remove_finalizer(&held, "example.com/hold")
        .await
        .unwrap();
    // A real namespace controller takes a few seconds.
    for _ in 0..120 {
        if backend.get(&ns_key).await.unwrap().is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("namespace {ns} is still there a minute after it was emptied");
}

#[tokio::test]
async fn the_embedded_cluster_answers_as_an_api_server() {
    let cluster = EmbeddedCluster::new(Arc::new(RealClock));
    let ns = run_id();
    cluster
        .apply_as_user(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
        .unwrap();
    references_and_scope(&cluster, &ns, &ns).await;
    terminating_namespace(&cluster, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_api_server_answers_the_same() {
    if let Some(why) = skip_reason() {
        let _ = writeln!(
            std::io::stderr(),
            "embedded_parity: SKIPPED a_real_api_server_answers_the_same: {why}. To run it: \
             RECONCILER_E2E=1 KUBECONFIG=~/.kube/config cargo test -p reconciler-tests --test embedded_parity"
        );
        return;
    }
    let client = kube::Client::try_default()
        .await
        .expect("a Kubernetes client from KUBECONFIG");
    let backend = KubernetesBackend::new(client);
    let ns = run_id();
    backend
        .apply(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns,
                "labels": {"app.kubernetes.io/created-by": "reconciler-host-e2e-test"}}}),
            "test-a",
            true,
        )
        .await
        .expect("create the test namespace");
    let scenario = {
        let (backend, ns) = (backend.clone(), ns.clone());
        tokio::spawn(async move {
            references_and_scope(&backend, &ns, &ns).await;
            terminating_namespace(&backend, &ns).await;
        })
    };
    let outcome = scenario.await;
    // Always, also after a failure: nothing of the test is left behind.
    let _ = backend
        .remove_finalizer(&cm_key(&ns, "held"), "example.com/hold")
        .await;
    for key in [
        ObjectKey::new(KindRef::new("", "v1", "Namespace"), None, &ns),
        ObjectKey::new(
            KindRef::new("rbac.authorization.k8s.io", "v1", "ClusterRole"),
            None,
            &ns,
        ),
    ] {
        let _ = backend.delete(&key, Propagation::Background, None).await;
    }
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}
