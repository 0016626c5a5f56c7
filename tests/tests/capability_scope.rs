//! The scope rule with compiled plugins on the embedded cluster: a plugin of
//! a namespaced primary that owns a cluster-scoped kind is refused at load
//! (by the engine, `dev` and `simulate`) while the others serve; a
//! cluster-scoped primary must name the namespace of its namespaced
//! children; the embedded cluster learns a custom kind's scope from its CRD.
//!
//! The hostile plugin's variants: `hostile-cluster-scope` is the Hostile
//! plugin that also owns `rbac.authorization.k8s.io/v1 ClusterRole`;
//! `hostile-cluster-primary` is `cluster-hostile`, whose primary is the
//! cluster-scoped ClusterHostile kind of `tests/crds/clusterhostile.yaml`.

use std::sync::Arc;

use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::cluster::{ClusterBackend, KindScope, ObjectKey, VirtualClock};
use reconciler_host::engine::{Change, Engine, EngineError, Outcome};
use reconciler_host::process::dev::{DevConfig, run as run_dev};
use reconciler_host::process::simulate::{SimulationConfig, simulate};
use reconciler_sdk::KindRef;
use reconciler_tests::world::{World, key};
use reconciler_tests::{example_plugin, load, root, sandbox, test_plugin};
use serde_json::{Value, json};

/// What the refusal of `hostile-cluster-scope` says, whoever reports it.
const REFUSAL: &str = "plugin hostile reconciles a namespaced kind (hostile.example.com/v1 Hostile) \
but owns[1] declares rbac.authorization.k8s.io/v1 ClusterRole, which is cluster-scoped: a \
cluster-scoped object cannot be owned by or confined to a namespaced one";

fn podset(name: &str) -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"size": 2}})
}

fn hostile(name: &str, mode: &str) -> Value {
    json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"mode": mode}})
}

/// A world whose engine starts empty, so a test can add plugins one by one
/// and see each refusal.
fn empty_world() -> World {
    let clock = VirtualClock::at(reconciler_sdk::testing::DEFAULT_NOW_MILLIS);
    let cluster = Arc::new(EmbeddedCluster::new(Arc::new(clock.clone())));
    let engine = Engine::empty(cluster.clone(), Arc::new(clock.clone()));
    World {
        clock,
        cluster,
        engine,
        records: Vec::new(),
    }
}

fn changes_of(world: &World, name: &str) -> Vec<Change> {
    world
        .records
        .iter()
        .filter(|r| r.object.name == name)
        .flat_map(|r| match &r.outcome {
            Outcome::Applied { changes, .. } => changes.clone(),
            _ => Vec::new(),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespaced_primary_owning_a_cluster_scoped_kind_is_refused_at_load_and_others_serve() {
    let mut world = empty_world();
    world
        .engine
        .add_plugin(Arc::new(load(&example_plugin("podset"))))
        .await
        .expect("podset loads");
    let err = world
        .engine
        .add_plugin(Arc::new(load(&test_plugin("hostile-cluster-scope"))))
        .await
        .expect_err("refused");
    assert!(
        matches!(&err, EngineError::ClusterScopedFromNamespaced { field, .. } if field == "owns[1]"),
        "{err}"
    );
    assert!(err.to_string().starts_with(REFUSAL), "{err}");
    assert_eq!(world.served(), ["podset"]);

    world.apply(podset("web"));
    world.apply(hostile("h", "ok"));
    world.settle().await;
    assert!(
        world
            .get(&key("apps", "v1", "Deployment", "default", "web"))
            .await
            .is_some(),
        "podset keeps serving"
    );
    assert!(
        world.records.iter().all(|r| r.plugin == "podset"),
        "nothing reconciles for the refused plugin"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_to_a_version_owning_a_cluster_scoped_kind_is_refused_and_the_old_one_serves() {
    let mut world = World::new(&[&test_plugin("hostile")]).await;
    let Err(err) = world
        .engine
        .replace_plugin(Arc::new(load(&test_plugin("hostile-cluster-scope"))))
        .await
    else {
        panic!("the reload is refused");
    };
    assert!(err.to_string().starts_with(REFUSAL), "{err}");
    world.apply(hostile("after", "ok"));
    world.settle().await;
    assert!(
        world
            .get(&key("", "v1", "ConfigMap", "default", "after"))
            .await
            .is_some(),
        "the old version still serves"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulate_reports_the_refused_plugin_by_file_and_runs_the_others() {
    let plugins = vec![
        Arc::new(load(&example_plugin("podset"))),
        Arc::new(load(&test_plugin("hostile-cluster-scope"))),
    ];
    let (report, _) = simulate(plugins, vec![podset("web")], &SimulationConfig::default())
        .await
        .expect("the simulation runs");
    assert_eq!(report.refused.len(), 1, "{:?}", report.refused);
    let refused = &report.refused[0];
    assert!(
        refused.contains("hostile-cluster-scope.wasm: ") && refused.contains(REFUSAL),
        "{refused}"
    );
    assert!(
        report
            .render()
            .contains("podset PodSet default/web: created Deployment default/web"),
        "{}",
        report.render()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_reports_the_refused_plugin_by_file_and_runs_the_others() {
    let plugins = tempfile::tempdir().unwrap();
    for (from, to) in [
        (example_plugin("podset"), "podset.wasm"),
        (test_plugin("hostile-cluster-scope"), "hostile.wasm"),
    ] {
        std::fs::copy(from, plugins.path().join(to)).unwrap();
    }
    let objects = tempfile::tempdir().unwrap();
    std::fs::write(
        objects.path().join("web.yaml"),
        serde_yaml_ng::to_string(&podset("web")).unwrap(),
    )
    .unwrap();
    let config = DevConfig {
        plugins_dir: plugins.path().to_path_buf(),
        pulled_dir: None,
        object_plugins: None,
        objects_dir: objects.path().to_path_buf(),
        crds_dir: Some(root().join("crds")),
        until_settled: true,
        record: None,
        builtins: None,
        members: None,
        journal: Default::default(),
        explain_listen: None,
    };
    let mut out = Vec::new();
    let refused = run_dev(sandbox().clone(), config, &mut out).await.unwrap();
    let out = String::from_utf8(out).unwrap();
    assert_eq!(refused, 1, "{out}");
    let file = plugins.path().join("hostile.wasm");
    assert!(
        out.contains(&format!("error: {}: {REFUSAL}", file.display())),
        "{out}"
    );
    assert!(
        out.contains("created CustomResourceDefinition podsets.example.com from"),
        "{out}"
    );
    assert!(
        out.contains("podset PodSet default/web: created Deployment default/web"),
        "{out}"
    );
}

/// The cluster-hostile plugin on an embedded cluster that was given the
/// ClusterHostile CRD.
async fn cluster_primary_world() -> World {
    let mut world = empty_world();
    let crd = reconciler_host::process::manifests::read_crds(
        &root().join("tests/crds/clusterhostile.yaml"),
    )
    .expect("the ClusterHostile CRD");
    for crd in crd {
        world.apply(crd);
    }
    world
        .engine
        .add_plugin(Arc::new(load(&test_plugin("hostile-cluster-primary"))))
        .await
        .expect("a cluster-scoped primary may own namespaced kinds");
    world.records.clear();
    world
}

fn cluster_hostile(name: &str, mode: &str) -> Value {
    // Sent with a namespace, which the cluster drops for a cluster-scoped kind.
    json!({"apiVersion": "hostile.example.com/v1", "kind": "ClusterHostile",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"mode": mode}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_scoped_primary_must_name_its_childrens_namespace() {
    let mut world = cluster_primary_world().await;
    let stored = world.apply(cluster_hostile("loose", "scope-child-without-namespace"));
    assert!(
        stored["metadata"].get("namespace").is_none(),
        "the CRD made ClusterHostile cluster-scoped: {stored}"
    );
    world.apply(cluster_hostile("tidy", "scope-child-in-default"));
    world.settle().await;

    let events = world.events();
    let refusal = events
        .iter()
        .find(|e| e.record.regarding.name == "loose" && e.record.reason == "InvalidResponse")
        .expect("a Warning Event on the primary");
    assert_eq!(
        refusal.record.message,
        "invalid response: apply[0] (v1 ConfigMap loose): ConfigMap is namespaced and the primary is \
         cluster-scoped, so there is no namespace to default to: set metadata.namespace"
    );
    assert!(
        world
            .cluster
            .objects()
            .iter()
            .all(|o| o["metadata"]["name"] != "loose" || o["kind"] != "ConfigMap"),
        "nothing of the refused response is applied"
    );

    let child = world
        .get(&key("", "v1", "ConfigMap", "default", "tidy"))
        .await
        .expect("a child that names its namespace is applied");
    let owner = &child["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["name"].as_str()),
        (Some("ClusterHostile"), Some("tidy"))
    );
    assert!(
        changes_of(&world, "tidy")
            .iter()
            .any(|c| matches!(c, Change::Created(k) if k.name == "tidy")),
        "{:?}",
        world.records
    );
    let primary = ObjectKey::new(
        KindRef::new("hostile.example.com", "v1", "ClusterHostile"),
        None,
        "tidy",
    );
    assert!(world.get(&primary).await.is_some());
    assert_eq!(
        world
            .engine
            .backend()
            .kind_scope(&primary.kind)
            .await
            .unwrap(),
        KindScope::Cluster
    );
}

/// A cluster-scoped primary's children live in namespaces it does not have:
/// they are still its children, shown to it, kept as it wants them and
/// pruned when it stops returning them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_scoped_primarys_namespaced_children_are_repaired_and_pruned() {
    let mut world = cluster_primary_world().await;
    world.apply(cluster_hostile("tidy", "scope-child-in-default"));
    world.settle().await;
    let child_key = key("", "v1", "ConfigMap", "default", "tidy");
    let created = world.get(&child_key).await.expect("the child is created");
    assert_eq!(created["data"]["k"], "v");

    // Someone changes the child: the change is the primary's to undo.
    world.apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "tidy", "namespace": "default"}, "data": {"k": "tampered"}}));
    world.records.clear();
    world.settle().await;
    let repaired = world
        .get(&child_key)
        .await
        .expect("the child is still there");
    assert_eq!(
        repaired["data"]["k"], "v",
        "the drift is repaired: {:?}",
        world.records
    );
    assert!(
        changes_of(&world, "tidy")
            .iter()
            .any(|c| matches!(c, Change::Updated(k) if *k == child_key)),
        "{:?}",
        world.records
    );

    // The plugin stops returning the child: it is pruned.
    world.apply(cluster_hostile("tidy", "remember"));
    world.records.clear();
    world.settle().await;
    assert_eq!(
        world.get(&child_key).await,
        None,
        "the child no longer returned is pruned: {:?}",
        world.records
    );
    assert!(
        changes_of(&world, "tidy")
            .iter()
            .any(|c| matches!(c, Change::Pruned(k) if *k == child_key)),
        "{:?}",
        world.records
    );
}
