//! The scope rule against a real API server: the Kubernetes backend takes a
//! kind's scope from discovery, an engine over it refuses the plugin of a
//! namespaced primary that owns a cluster-scoped kind, a cluster-scoped
//! primary's namespaced child must name its namespace, and the embedded
//! cluster's table of built-in cluster-scoped kinds agrees with what the
//! server serves.
//!
//! Skipped (it passes, printing why) unless both `RECONCILER_E2E=1` and
//! `KUBECONFIG` are set. It server-side applies the Hostile and
//! ClusterHostile CRDs of `tests/crds/` (field manager `reconciler-host`)
//! and leaves them in place: other real-cluster tests may use them, and
//! applying them again is a no-op. The ClusterHostile objects and the
//! ConfigMap it creates (in `default`) are named `scope-e2e-<n>-…` and
//! deleted at the end, their finalizer removed first. To run it:
//!
//! ```text
//! scripts/build-plugins
//! RECONCILER_E2E=1 KUBECONFIG=~/.kube/config \
//!     cargo test -p reconciler-tests --test capability_scope_real_cluster -- --nocapture
//! ```

use std::collections::BTreeSet;
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::discovery::{Discovery, Scope};
use reconciler_host::cluster::embedded::store::EmbeddedStore;
use reconciler_host::cluster::kubernetes::KubernetesBackend;
use reconciler_host::cluster::{ClusterBackend, KindScope, RealClock};
use reconciler_host::engine::{Engine, EngineError, Outcome, ReconcileRecord, scope_rules};
use reconciler_host::process::crd_install::install_crds;
use reconciler_sdk::KindRef;
use reconciler_tests::{load, root, test_plugin};
use serde_json::json;

/// Why the suite does not run here, or `None` if it does.
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

/// The backend of the cluster of `KUBECONFIG`, or `None` (having printed
/// why) when the suite is skipped.
async fn backend(test: &str) -> Option<KubernetesBackend> {
    if let Some(why) = skip_reason() {
        // Straight to the process's stderr: the harness captures `eprintln!`
        // of a passing test, and a skip must be seen in the log.
        let _ = writeln!(
            std::io::stderr(),
            "capability_scope_real_cluster: SKIPPED {test}: {why}. To run it against a cluster: \
             scripts/build-plugins, then RECONCILER_E2E=1 KUBECONFIG=~/.kube/config \
             cargo test -p reconciler-tests --test capability_scope_real_cluster -- --nocapture"
        );
        return None;
    }
    let client = kube::Client::try_default()
        .await
        .expect("a Kubernetes client from KUBECONFIG");
    Some(KubernetesBackend::new(client))
}

async fn install_hostile_crd(backend: &KubernetesBackend) {
    install_crds(
        backend,
        &root().join("tests/crds/hostile.yaml"),
        Duration::from_secs(60),
    )
    .await
    .expect("the Hostile CRD is installed and established");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kind_scopes_come_from_discovery() {
    let Some(backend) = backend("kind_scopes_come_from_discovery").await else {
        return;
    };
    install_hostile_crd(&backend).await;
    for (kind, expected) in [
        (
            KindRef::new("rbac.authorization.k8s.io", "v1", "ClusterRole"),
            KindScope::Cluster,
        ),
        (KindRef::new("", "v1", "Namespace"), KindScope::Cluster),
        (KindRef::new("", "v1", "ConfigMap"), KindScope::Namespaced),
        (
            KindRef::new("hostile.example.com", "v1", "Hostile"),
            KindScope::Namespaced,
        ),
    ] {
        assert_eq!(backend.kind_scope(&kind).await.unwrap(), expected, "{kind}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_on_a_real_cluster_refuses_a_namespaced_primary_owning_a_cluster_role() {
    let Some(backend) =
        backend("an_engine_on_a_real_cluster_refuses_a_namespaced_primary_owning_a_cluster_role")
            .await
    else {
        return;
    };
    install_hostile_crd(&backend).await;
    let backend = Arc::new(backend);
    // The well-behaved build passes the same check (without starting
    // watches, which this test has no use for).
    let hostile = load(&test_plugin("hostile"));
    scope_rules::check_plugin(&*backend, hostile.metadata())
        .await
        .expect("hostile's declared kinds are all namespaced");

    let engine = Engine::empty(backend, Arc::new(RealClock));
    let Err(err) = engine
        .add_plugin(Arc::new(load(&test_plugin("hostile-cluster-scope"))))
        .await
    else {
        panic!("the plugin is refused");
    };
    assert!(
        matches!(&err, EngineError::ClusterScopedFromNamespaced { field, .. } if field == "owns[1]"),
        "{err}"
    );
    assert!(
        err.to_string().starts_with(
            "plugin hostile reconciles a namespaced kind (hostile.example.com/v1 Hostile) but owns[1] \
             declares rbac.authorization.k8s.io/v1 ClusterRole, which is cluster-scoped"
        ),
        "{err}"
    );
    assert!(engine.plugins().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_cluster_knows_every_built_in_cluster_scoped_kind() {
    if backend("the_embedded_cluster_knows_every_built_in_cluster_scoped_kind")
        .await
        .is_none()
    {
        return;
    }
    let client = kube::Client::try_default().await.unwrap();
    // Kinds from CRDs are the embedded cluster's to learn from the CRDs it
    // is given, not from its table.
    let crd_resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
    ));
    let crds: Api<DynamicObject> = Api::all_with(client.clone(), &crd_resource);
    let custom_groups: BTreeSet<String> = crds
        .list(&ListParams::default())
        .await
        .expect("listing CRDs")
        .items
        .iter()
        .filter_map(|crd| crd.data.pointer("/spec/group")?.as_str().map(String::from))
        .collect();
    let discovery = Discovery::new(client)
        .run()
        .await
        .expect("discovery of the cluster");
    let embedded = EmbeddedStore::new(1);
    let mut wrong = Vec::new();
    for group in discovery.groups() {
        if custom_groups.contains(group.name()) {
            continue;
        }
        for (resource, capabilities) in group.recommended_resources() {
            let kind = KindRef::new(&resource.group, &resource.version, &resource.kind);
            let served = match capabilities.scope {
                Scope::Cluster => KindScope::Cluster,
                Scope::Namespaced => KindScope::Namespaced,
            };
            if embedded.kind_scope(&kind) != served {
                wrong.push(format!("{kind} is served {served:?}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the embedded cluster's table disagrees with the API server: {wrong:?}"
    );
}

/// Runs `engine` on the real clock until `done` holds for the records so
/// far, or `within` passes.
async fn drive_until(
    engine: &Engine<KubernetesBackend>,
    within: Duration,
    done: impl Fn(&[ReconcileRecord]) -> bool,
) -> Vec<ReconcileRecord> {
    let deadline = tokio::time::Instant::now() + within;
    let mut records = Vec::new();
    while tokio::time::Instant::now() < deadline && !done(&records) {
        engine.pump();
        while let Some((plugin, key)) = engine.next_ready() {
            records.push(engine.reconcile(&plugin, key).await);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    records
}

/// Installs the ClusterHostile CRD; the ClusterHostiles, and the ConfigMaps
/// of `default` where their children go.
async fn cluster_hostiles_and_config_maps(
    backend: &KubernetesBackend,
) -> (Api<DynamicObject>, Api<DynamicObject>) {
    install_crds(
        backend,
        &root().join("tests/crds/clusterhostile.yaml"),
        Duration::from_secs(60),
    )
    .await
    .expect("the ClusterHostile CRD is installed and established");
    let client = kube::Client::try_default().await.unwrap();
    let api = |group: &str, kind: &str| {
        let version = "v1";
        ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
    };
    (
        Api::all_with(
            client.clone(),
            &api("hostile.example.com", "ClusterHostile"),
        ),
        Api::namespaced_with(client, "default", &api("", "ConfigMap")),
    )
}

/// What names this run's objects apart from an earlier run's.
fn run_id() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}

async fn create_cluster_hostile(primaries: &Api<DynamicObject>, name: &str, mode: &str) {
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "hostile.example.com/v1", "kind": "ClusterHostile",
        "metadata": {"name": name}, "spec": {"mode": mode}}))
    .unwrap();
    primaries
        .create(&PostParams::default(), &object)
        .await
        .expect("create a ClusterHostile");
}

/// An engine on `backend` serving the cluster-hostile plugin.
async fn cluster_hostile_engine(backend: KubernetesBackend) -> Engine<KubernetesBackend> {
    let engine = Engine::empty(Arc::new(backend), Arc::new(RealClock));
    engine
        .add_plugin(Arc::new(load(&test_plugin("hostile-cluster-primary"))))
        .await
        .expect("a cluster-scoped primary may own namespaced kinds");
    engine
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_scoped_primary_must_name_its_childrens_namespace_on_a_real_cluster() {
    let Some(backend) =
        backend("a_cluster_scoped_primary_must_name_its_childrens_namespace_on_a_real_cluster")
            .await
    else {
        return;
    };
    let (primaries, config_maps) = cluster_hostiles_and_config_maps(&backend).await;
    let run = run_id();
    let loose = format!("scope-e2e-{run}-loose");
    let tidy = format!("scope-e2e-{run}-tidy");
    for (name, mode) in [
        (&loose, "scope-child-without-namespace"),
        (&tidy, "scope-child-in-default"),
    ] {
        create_cluster_hostile(&primaries, name, mode).await;
    }
    let engine = cluster_hostile_engine(backend).await;
    let records = drive_until(&engine, Duration::from_secs(60), |records| {
        let failed = records
            .iter()
            .any(|r| r.object.name == loose && matches!(r.outcome, Outcome::Failed { .. }));
        let applied = records
            .iter()
            .any(|r| r.object.name == tidy && matches!(r.outcome, Outcome::Applied { .. }));
        failed && applied
    })
    .await;
    let child = config_maps.get_opt(&tidy).await.unwrap();
    let loose_child = config_maps.get_opt(&loose).await.unwrap();

    // Clean up before asserting: release the finalizer the host added.
    for name in [&loose, &tidy] {
        let release = json!({"metadata": {"finalizers": null}});
        let _ = primaries
            .patch(name, &PatchParams::default(), &Patch::Merge(&release))
            .await;
        let _ = primaries.delete(name, &DeleteParams::default()).await;
        let _ = config_maps.delete(name, &DeleteParams::default()).await;
    }

    let refusal = records
        .iter()
        .find_map(|r| match &r.outcome {
            Outcome::Failed {
                reason, message, ..
            } if r.object.name == loose => Some((reason.clone(), message.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{loose} is refused: {records:?}"));
    assert_eq!(refusal.0, "InvalidResponse");
    assert_eq!(
        refusal.1,
        format!(
            "invalid response: apply[0] (v1 ConfigMap {loose}): ConfigMap is namespaced and the primary is \
             cluster-scoped, so there is no namespace to default to: set metadata.namespace"
        )
    );
    assert!(
        loose_child.is_none(),
        "nothing of the refused response is applied"
    );
    let child = child.unwrap_or_else(|| panic!("{tidy}'s child is created: {records:?}"));
    let owner = &child.metadata.owner_references.unwrap_or_default()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("ClusterHostile", tidy.as_str(), Some(true))
    );
}

/// Runs `engine` on the real clock until the ConfigMap `name` in `default`
/// passes `done` (`None`: it does not exist), or `within` passes. Whether
/// it passed, and the records so far.
async fn drive_until_config_map(
    engine: &Engine<KubernetesBackend>,
    config_maps: &Api<DynamicObject>,
    name: &str,
    within: Duration,
    done: impl Fn(Option<&DynamicObject>) -> bool,
) -> (bool, Vec<ReconcileRecord>) {
    let deadline = tokio::time::Instant::now() + within;
    let mut records = Vec::new();
    loop {
        engine.pump();
        while let Some((plugin, key)) = engine.next_ready() {
            records.push(engine.reconcile(&plugin, key).await);
        }
        let current = config_maps.get_opt(name).await.expect("read the ConfigMap");
        if done(current.as_ref()) {
            return (true, records);
        }
        if tokio::time::Instant::now() >= deadline {
            return (false, records);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A cluster-scoped primary's child in a namespace is its child: a change
/// to it is repaired, and it is pruned once the plugin stops returning it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_scoped_primarys_namespaced_child_is_repaired_and_pruned_on_a_real_cluster() {
    let test =
        "a_cluster_scoped_primarys_namespaced_child_is_repaired_and_pruned_on_a_real_cluster";
    let Some(backend) = backend(test).await else {
        return;
    };
    let (primaries, config_maps) = cluster_hostiles_and_config_maps(&backend).await;
    let run = run_id();
    let name = format!("scope-e2e-{run}-kept");
    create_cluster_hostile(&primaries, &name, "scope-child-in-default").await;
    let engine = cluster_hostile_engine(backend).await;
    let data_is = |value: &'static str| {
        move |cm: Option<&DynamicObject>| cm.is_some_and(|cm| cm.data["data"]["k"] == value)
    };
    let within = Duration::from_secs(30);

    let (created, records) =
        drive_until_config_map(&engine, &config_maps, &name, within, data_is("v")).await;
    let mut repaired = (false, Vec::new());
    let mut pruned = (false, Vec::new());
    if created {
        let tamper = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"}, "data": {"k": "tampered"}});
        config_maps
            .patch(
                &name,
                &PatchParams::apply("someone-else").force(),
                &Patch::Apply(&tamper),
            )
            .await
            .expect("change the child");
        repaired = drive_until_config_map(&engine, &config_maps, &name, within, data_is("v")).await;
        let mode = json!({"spec": {"mode": "remember"}});
        primaries
            .patch(&name, &PatchParams::default(), &Patch::Merge(&mode))
            .await
            .expect("switch the primary to a mode without children");
        pruned =
            drive_until_config_map(&engine, &config_maps, &name, within, |cm| cm.is_none()).await;
    }

    // Clean up before asserting: release the finalizer the host added.
    let release = json!({"metadata": {"finalizers": null}});
    let _ = primaries
        .patch(&name, &PatchParams::default(), &Patch::Merge(&release))
        .await;
    let _ = primaries.delete(&name, &DeleteParams::default()).await;
    let _ = config_maps.delete(&name, &DeleteParams::default()).await;

    assert!(created, "the child is created: {records:?}");
    assert!(
        repaired.0,
        "the change to the child is repaired: {:?}",
        repaired.1
    );
    assert!(
        pruned.0,
        "the child no longer returned is pruned: {:?}",
        pruned.1
    );
}
