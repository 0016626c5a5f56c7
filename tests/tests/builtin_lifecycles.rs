//! Every example's whole lifecycle in `simulate`, with the embedded
//! cluster playing the built-in controllers on the virtual clock: Pods
//! appear and run, so a PodSet's `podNames` and a Memcached's `nodes` fill
//! in, and Jobs end, so a KubernetesCluster goes Creating -> Running, a
//! scaling Job can fail, and the cleanup Job lets a deleted one go. The same
//! lifecycles on a real cluster are in `real_cluster_lifecycles.rs`; the
//! shapes of what the built-ins make are compared with kube-controller-
//! manager's in `real_cluster_builtins.rs`.

use std::sync::Arc;
use std::time::Duration;

use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::cluster::embedded::builtins::{BuiltinConfig, LabelSelector};
use reconciler_host::cluster::{Clock, ObjectKey, VirtualClock};
use reconciler_host::engine::Engine;
use reconciler_host::process::simulate::{SimulationConfig, run_with_builtins};
use reconciler_sdk::KindRef;
use reconciler_tests::{example_plugin, load, root};
use serde_json::{Value, json};

struct Simulation {
    clock: VirtualClock,
    cluster: Arc<EmbeddedCluster>,
    engine: Engine<EmbeddedCluster>,
    /// Every reconcile and built-in change so far, as `simulate` prints them.
    timeline: String,
}

impl Simulation {
    async fn new(plugins: &[&str], builtins: BuiltinConfig) -> Self {
        let clock = VirtualClock::at(reconciler_sdk::testing::DEFAULT_NOW_MILLIS);
        let cluster = Arc::new(
            EmbeddedCluster::new(Arc::new(clock.clone())).with_builtin_controllers(builtins),
        );
        for crd in reconciler_host::process::manifests::read_crds(&root().join("crds")).unwrap() {
            cluster.apply_as_user(crd).unwrap();
        }
        let plugins = plugins
            .iter()
            .map(|p| Arc::new(load(&example_plugin(p))))
            .collect();
        let engine = Engine::new(cluster.clone(), Arc::new(clock.clone()), plugins)
            .await
            .expect("engine starts");
        Self {
            clock,
            cluster,
            engine,
            timeline: String::new(),
        }
    }

    /// Runs until nothing is due within `advance`; returns what it printed.
    async fn settle_for(&mut self, advance: Duration) -> String {
        let config = SimulationConfig {
            start_millis: reconciler_sdk::testing::DEFAULT_NOW_MILLIS,
            advance: advance
                + Duration::from_millis(
                    (self.clock.now_millis() - reconciler_sdk::testing::DEFAULT_NOW_MILLIS)
                        .unsigned_abs(),
                ),
            ..SimulationConfig::default()
        };
        let report =
            run_with_builtins(&self.engine, &self.clock, &config, Some(&self.cluster)).await;
        assert!(report.unsettled.is_none(), "{:?}", report.unsettled);
        let text = report.render();
        let text = text
            .split("\n# events")
            .next()
            .unwrap_or("")
            .trim_start_matches("# reconciles\n")
            .to_string();
        self.timeline.push_str(&text);
        text
    }

    fn apply(&self, object: Value) {
        self.cluster.apply_as_user(object).expect("apply as user");
    }

    fn delete(&self, kind: KindRef, name: &str) {
        let key = ObjectKey::new(kind, Some("default"), name);
        self.cluster.delete_as_user(&key).expect("delete as user");
    }

    fn all(&self, kind: &str) -> Vec<Value> {
        self.cluster
            .objects()
            .into_iter()
            .filter(|o| o["kind"] == kind)
            .collect()
    }

    fn get(&self, kind: &str, name: &str) -> Option<Value> {
        self.all(kind)
            .into_iter()
            .find(|o| o["metadata"]["name"] == name)
    }

    fn pod_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .all("Pod")
            .iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    }
}

fn podset(size: i64) -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "example", "namespace": "default"}, "spec": {"size": size}})
}

#[tokio::test]
async fn a_podsets_pod_names_fill_in_follow_its_size_and_go_with_it() {
    let mut sim = Simulation::new(&["podset"], BuiltinConfig::default()).await;
    sim.apply(podset(3));
    let printed = sim.settle_for(Duration::from_secs(10)).await;
    assert!(
        printed.contains("(cluster) created ReplicaSet default/example-")
            && printed.contains("[+2s]   (cluster) started Pod default/example-"),
        "{printed}"
    );
    let running = sim.pod_names();
    assert_eq!(running.len(), 3, "{printed}");
    let status = &sim.get("PodSet", "example").unwrap()["status"];
    assert_eq!(status["podNames"], json!(running), "{printed}");

    sim.apply(podset(1));
    let printed = sim.settle_for(Duration::from_secs(10)).await;
    assert!(
        printed.contains("(cluster) deleted Pod default/example-"),
        "{printed}"
    );
    let running = sim.pod_names();
    assert_eq!(running.len(), 1);
    let status = &sim.get("PodSet", "example").unwrap()["status"];
    assert_eq!(status["podNames"], json!(running), "{printed}");

    sim.delete(KindRef::new("example.com", "v1alpha1", "PodSet"), "example");
    sim.settle_for(Duration::from_secs(10)).await;
    for kind in ["PodSet", "Deployment", "ReplicaSet", "Pod"] {
        assert!(sim.all(kind).is_empty(), "{kind}: {:?}", sim.all(kind));
    }
}

#[tokio::test]
async fn a_memcacheds_nodes_list_its_running_pods() {
    let mut sim = Simulation::new(&["memcached"], BuiltinConfig::default()).await;
    let memcached = |size: i64| {
        json!({"apiVersion": "example.com/v1alpha1", "kind": "Memcached",
            "metadata": {"name": "cache", "namespace": "default"}, "spec": {"size": size}})
    };
    sim.apply(memcached(2));
    let printed = sim.settle_for(Duration::from_secs(90)).await;
    let nodes = &sim.get("Memcached", "cache").unwrap()["status"]["nodes"];
    assert_eq!(nodes, &json!(sim.pod_names()), "{printed}");
    assert_eq!(nodes.as_array().map(Vec::len), Some(2), "{printed}");
    let deployment = sim.get("Deployment", "cache").unwrap();
    assert_eq!(deployment["status"]["readyReplicas"], 2);

    sim.apply(memcached(3));
    let printed = sim.settle_for(Duration::from_secs(90)).await;
    let nodes = &sim.get("Memcached", "cache").unwrap()["status"]["nodes"];
    assert_eq!(nodes, &json!(sim.pod_names()), "{printed}");
    assert_eq!(nodes.as_array().map(Vec::len), Some(3), "{printed}");
}

fn kubernetes_cluster(operation: &str, workers: i64) -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "KubernetesCluster",
        "metadata": {"name": "prod", "namespace": "default",
            "annotations": {"app.kubernetes.io/operation": operation}},
        "spec": {"masters": 3, "workers": workers, "version": "1.33"}})
}

fn phase(sim: &Simulation) -> Value {
    sim.get("KubernetesCluster", "prod")
        .map(|c| c["status"]["phase"].clone())
        .unwrap_or(Value::Null)
}

/// The KubernetesCluster's whole life: created, a scaling that fails, and
/// the cleanup on delete. Returns everything printed.
async fn kubernetes_cluster_life() -> String {
    let failing = LabelSelector::parse("example.com/operation=scaling").unwrap();
    let mut sim = Simulation::new(
        &["kubernetescluster"],
        BuiltinConfig {
            failing_jobs: Some(failing),
            ..BuiltinConfig::default()
        },
    )
    .await;
    sim.apply(kubernetes_cluster("creating", 5));
    let printed = sim.settle_for(Duration::from_secs(5)).await;
    assert_eq!(phase(&sim), "Creating", "{printed}");
    let printed = sim.settle_for(Duration::from_secs(10)).await;
    assert!(
        printed.contains("[+10s]   (cluster) completed Job default/prod-creating-1"),
        "{printed}"
    );
    assert_eq!(phase(&sim), "Running", "{printed}");

    sim.apply(kubernetes_cluster("scaling", 7));
    let printed = sim.settle_for(Duration::from_secs(30)).await;
    assert!(
        printed.contains("(cluster) failed Job default/prod-scaling-2"),
        "{printed}"
    );
    assert_eq!(phase(&sim), "Failed", "{printed}");

    sim.delete(
        KindRef::new("example.com", "v1alpha1", "KubernetesCluster"),
        "prod",
    );
    let printed = sim.settle_for(Duration::from_secs(30)).await;
    assert!(
        printed.contains("(cluster) completed Job default/prod-deleting-"),
        "{printed}"
    );
    assert!(
        sim.get("KubernetesCluster", "prod").is_none(),
        "the finalizer goes once the cleanup Job completed: {printed}"
    );
    assert!(sim.all("Job").is_empty(), "{:?}", sim.all("Job"));
    assert!(sim.all("Pod").is_empty(), "{:?}", sim.all("Pod"));
    sim.timeline
}

#[tokio::test]
async fn a_kubernetes_cluster_is_created_fails_a_scaling_and_is_cleaned_up_the_same_every_run() {
    let first = kubernetes_cluster_life().await;
    let second = kubernetes_cluster_life().await;
    assert_eq!(first, second, "two runs printed differently");
}

#[tokio::test]
async fn a_scheduled_restart_rolls_the_deployment_onto_new_pods() {
    let mut sim = Simulation::new(
        &["rollout_schedules", "rollout_restarter"],
        BuiltinConfig::default(),
    )
    .await;
    sim.apply(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default",
            "annotations": {"rollout-scheduler.io/enabled": "true",
                "rollout-scheduler.io/schedule": "*/5 * * * *"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1"}]}}}}));
    sim.settle_for(Duration::from_secs(10)).await;
    let before = sim.pod_names();
    assert_eq!(before.len(), 2);
    sim.apply(
        json!({"apiVersion": "example.com/v1alpha1", "kind": "RolloutSchedule",
        "metadata": {"name": "web", "namespace": "default"}, "spec": {"enabled": true}}),
    );

    let printed = sim.settle_for(Duration::from_secs(6 * 60)).await;
    assert!(
        printed.contains("(cluster) scaled ReplicaSet default/web-") && printed.contains(" to 0"),
        "{printed}"
    );
    let after = sim.pod_names();
    assert_eq!(after.len(), 2, "{printed}");
    assert!(
        after.iter().all(|p| !before.contains(p)),
        "{before:?} -> {after:?}"
    );
    let deployment = sim.get("Deployment", "web").unwrap();
    assert_eq!(
        deployment["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "2"
    );
    assert_eq!(deployment["status"]["readyReplicas"], 2, "{printed}");
    assert_eq!(sim.all("ReplicaSet").len(), 2, "the old one stays, at 0");
}
