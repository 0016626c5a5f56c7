use std::sync::Arc;
use std::time::Duration;

use reconciler_contract::KindRef;
use reconciler_contract::selector::LabelSelector;
use serde_json::{Value, json};

use super::*;
use crate::cluster::VirtualClock;
use crate::cluster::embedded::EmbeddedCluster;

const START: i64 = 1_704_067_200_000;

struct Cluster {
    clock: VirtualClock,
    cluster: EmbeddedCluster,
}

impl Cluster {
    fn new(config: BuiltinConfig) -> Self {
        let clock = VirtualClock::at(START);
        let cluster =
            EmbeddedCluster::new(Arc::new(clock.clone())).with_builtin_controllers(config);
        Self { clock, cluster }
    }

    fn apply(&self, object: Value) -> Value {
        self.cluster.apply_as_user(object).unwrap()
    }

    /// Moves the clock by `by`, firing every delay due on the way.
    fn advance(&self, by: Duration) {
        let end = START.max(crate::cluster::Clock::now_millis(&self.clock))
            + i64::try_from(by.as_millis()).unwrap();
        while let Some(at) = self.cluster.next_builtin_due().filter(|at| *at <= end) {
            self.clock.set(at);
            self.cluster.run_builtins();
        }
        self.clock.set(end);
    }

    fn all(&self, kind: &str) -> Vec<Value> {
        self.cluster
            .objects()
            .into_iter()
            .filter(|o| o["kind"] == kind)
            .collect()
    }

    fn one(&self, kind: &str, name: &str) -> Value {
        self.all(kind)
            .into_iter()
            .find(|o| o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    }
}

fn deployment(replicas: i64, image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image}]}}}})
}

fn job(name: &str, annotations: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations,
            "labels": {"step": name}},
        "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": {"step": name}},
            "spec": {"restartPolicy": "Never",
                "containers": [{"name": "run", "image": "busybox:1.36"}]}}}})
}

fn names(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

fn phases(pods: &[Value]) -> Vec<&str> {
    pods.iter()
        .map(|p| p["status"]["phase"].as_str().unwrap_or(""))
        .collect()
}

#[test]
fn a_deployment_gets_a_replica_set_and_pods_shaped_as_the_real_controllers_make_them() {
    let c = Cluster::new(BuiltinConfig::default());
    let d = c.apply(deployment(2, "nginx:1"));

    let replica_sets = c.all("ReplicaSet");
    assert_eq!(replica_sets.len(), 1);
    let rs = &replica_sets[0];
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(rs["metadata"]["name"], format!("web-{hash}"));
    assert_eq!(
        rs["metadata"]["ownerReferences"],
        json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
            "uid": d["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}])
    );
    assert_eq!(
        rs["spec"]["selector"]["matchLabels"],
        json!({"app": "web", "pod-template-hash": hash})
    );
    assert_eq!(
        rs["metadata"]["annotations"],
        json!({"deployment.kubernetes.io/desired-replicas": "2",
            "deployment.kubernetes.io/max-replicas": "3",
            "deployment.kubernetes.io/revision": "1"})
    );

    let pods = c.all("Pod");
    assert_eq!(pods.len(), 2);
    for pod in &pods {
        let name = pod["metadata"]["name"].as_str().unwrap();
        assert!(name.starts_with(&format!("web-{hash}-")), "{name}");
        assert_eq!(name.len(), format!("web-{hash}-").len() + 5, "{name}");
        assert_eq!(pod["metadata"]["generateName"], format!("web-{hash}-"));
        assert_eq!(
            pod["metadata"]["labels"],
            json!({"app": "web", "pod-template-hash": hash})
        );
        assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "ReplicaSet");
        assert_eq!(
            pod["metadata"]["ownerReferences"][0]["uid"],
            rs["metadata"]["uid"]
        );
        assert_eq!(pod["spec"]["containers"][0]["image"], "nginx:1");
    }
    assert_eq!(phases(&pods), ["Pending", "Pending"]);
    let status = &c.one("Deployment", "web")["status"];
    assert_eq!(status["replicas"], 2);
    assert_eq!(status["unavailableReplicas"], 2);
    assert!(status.get("readyReplicas").is_none(), "{status}");
    assert_eq!(
        status["conditions"][0]["reason"],
        "MinimumReplicasUnavailable"
    );

    c.advance(Duration::from_millis(1999));
    assert_eq!(phases(&c.all("Pod")), ["Pending", "Pending"]);
    c.advance(Duration::from_millis(1));
    assert_eq!(phases(&c.all("Pod")), ["Running", "Running"]);
    let deployment = c.one("Deployment", "web");
    assert_eq!(
        deployment["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    let status = &deployment["status"];
    assert_eq!(status["readyReplicas"], 2);
    assert_eq!(status["availableReplicas"], 2);
    assert!(status.get("unavailableReplicas").is_none(), "{status}");
    assert_eq!(status["conditions"][1]["reason"], "NewReplicaSetAvailable");
    assert_eq!(
        c.one("ReplicaSet", &format!("web-{hash}"))["status"]["readyReplicas"],
        2
    );
}

#[test]
fn scaling_adds_and_removes_pods_and_a_deleted_pod_is_replaced() {
    let c = Cluster::new(BuiltinConfig::default());
    c.apply(deployment(2, "nginx:1"));
    c.advance(Duration::from_secs(5));
    let running = names(&c.all("Pod"));

    c.apply(deployment(3, "nginx:1"));
    let pods = c.all("Pod");
    assert_eq!(pods.len(), 3);
    c.apply(deployment(2, "nginx:1"));
    assert_eq!(
        names(&c.all("Pod")),
        running,
        "the Pod not running yet goes first"
    );

    let gone = ObjectKey::new(KindRef::new("", "v1", "Pod"), Some("default"), &running[0]);
    c.cluster.delete_as_user(&gone).unwrap();
    let pods = names(&c.all("Pod"));
    assert_eq!(pods.len(), 2, "{pods:?}");
    assert!(!pods.contains(&running[0]), "{pods:?}");

    c.apply(deployment(0, "nginx:1"));
    assert!(c.all("Pod").is_empty());
    let status = &c.one("Deployment", "web")["status"];
    assert!(status.get("replicas").is_none(), "{status}");
}

#[test]
fn a_new_template_gets_a_new_replica_set_and_the_old_one_goes_to_zero() {
    let c = Cluster::new(BuiltinConfig::default());
    c.apply(deployment(2, "nginx:1"));
    c.apply(deployment(2, "nginx:2"));
    let replica_sets = c.all("ReplicaSet");
    assert_eq!(replica_sets.len(), 2);
    let revisions: Vec<(&Value, &Value)> = replica_sets
        .iter()
        .map(|rs| {
            (
                &rs["spec"]["replicas"],
                &rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
            )
        })
        .collect();
    assert!(
        revisions.contains(&(&json!(0), &json!("1"))),
        "{revisions:?}"
    );
    assert!(
        revisions.contains(&(&json!(2), &json!("2"))),
        "{revisions:?}"
    );
    let pods = c.all("Pod");
    assert_eq!(pods.len(), 2);
    assert!(
        pods.iter()
            .all(|p| p["spec"]["containers"][0]["image"] == "nginx:2")
    );
    assert_eq!(
        c.one("Deployment", "web")["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "2"
    );
}

#[test]
fn jobs_end_after_their_duration_as_their_annotations_or_the_settings_say() {
    let c = Cluster::new(BuiltinConfig {
        failing_jobs: Some(LabelSelector::parse("step=doomed").unwrap()),
        ..BuiltinConfig::default()
    });
    c.apply(job("plain", json!({})));
    c.apply(job("doomed", json!({})));
    c.apply(job(
        "quick-failure",
        json!({JOB_DURATION_ANNOTATION: "3s", JOB_OUTCOME_ANNOTATION: "Failed"}),
    ));
    let pods = c.all("Pod");
    assert_eq!(pods.len(), 3);
    let pod = pods
        .iter()
        .find(|p| p["metadata"]["generateName"] == "plain-")
        .unwrap();
    let uid = c.one("Job", "plain")["metadata"]["uid"].clone();
    assert_eq!(
        pod["metadata"]["labels"],
        json!({"step": "plain", "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": "plain", "controller-uid": uid, "job-name": "plain"})
    );
    assert_eq!(
        pod["metadata"]["finalizers"],
        json!(["batch.kubernetes.io/job-tracking"])
    );
    let status = &c.one("Job", "plain")["status"];
    assert_eq!(status["active"], 1);
    assert_eq!(status["startTime"], "2024-01-01T00:00:00Z");

    c.advance(Duration::from_secs(3));
    let failed = c.one("Job", "quick-failure");
    assert_eq!(failed["status"]["failed"], 1);
    assert_eq!(failed["status"]["conditions"][0]["type"], "Failed");
    assert_eq!(
        failed["status"]["conditions"][0]["reason"],
        "BackoffLimitExceeded"
    );
    assert!(c.one("Job", "plain")["status"].get("conditions").is_none());

    c.advance(Duration::from_secs(7));
    let plain = c.one("Job", "plain");
    assert_eq!(plain["status"]["succeeded"], 1);
    assert_eq!(plain["status"]["conditions"][0]["type"], "Complete");
    assert_eq!(plain["status"]["completionTime"], "2024-01-01T00:00:10Z");
    assert_eq!(
        c.one("Job", "doomed")["status"]["conditions"][0]["type"],
        "Failed"
    );
    let pods = c.all("Pod");
    assert!(
        pods.iter()
            .all(|p| p["metadata"].get("finalizers").is_none()),
        "counted Pods lose the tracking finalizer: {pods:?}"
    );
    let mut ended: Vec<&str> = phases(&pods);
    ended.sort_unstable();
    assert_eq!(ended, ["Failed", "Failed", "Succeeded"]);
}

#[test]
fn a_deleted_namespace_refuses_new_objects_loses_its_pods_and_goes() {
    let c = Cluster::new(BuiltinConfig::default());
    c.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}));
    let mut j = job("batch", json!({}));
    j["metadata"]["namespace"] = json!("team");
    c.apply(j);
    let mut d = deployment(2, "nginx:1");
    d["metadata"]["namespace"] = json!("team");
    c.apply(d.clone());
    assert_eq!(c.all("Pod").len(), 3);

    let ns = ObjectKey::new(KindRef::new("", "v1", "Namespace"), None, "team");
    c.cluster.delete_as_user(&ns).unwrap();
    // The Job's Pod, held by the tracking finalizer, is released as the
    // job controller releases it.
    assert!(c.all("Pod").is_empty(), "{:?}", c.all("Pod"));
    assert!(c.all("Namespace").is_empty());
    assert!(
        c.cluster.next_builtin_due().is_some(),
        "stale delays stay harmless"
    );
    c.advance(Duration::from_secs(30));
    assert!(c.cluster.objects().is_empty(), "{:?}", c.cluster.objects());
}

#[test]
fn a_terminating_namespace_refuses_the_controllers_new_pods_too() {
    let c = Cluster::new(BuiltinConfig::default());
    c.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}));
    let mut held = deployment(1, "nginx:1");
    held["metadata"]["namespace"] = json!("team");
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    c.apply(held.clone());
    let ns = ObjectKey::new(KindRef::new("", "v1", "Namespace"), None, "team");
    c.cluster.delete_as_user(&ns).unwrap();
    assert_eq!(c.one("Namespace", "team")["status"]["phase"], "Terminating");
    assert!(c.all("ReplicaSet").is_empty());
    assert!(
        c.all("Pod").is_empty(),
        "no new Pods in a terminating namespace"
    );
}

#[test]
fn without_the_switch_the_cluster_plays_no_controller() {
    let cluster = EmbeddedCluster::new(Arc::new(VirtualClock::at(START)));
    cluster.apply_as_user(deployment(2, "nginx:1")).unwrap();
    cluster.apply_as_user(job("plain", json!({}))).unwrap();
    let kinds: Vec<Value> = cluster
        .objects()
        .iter()
        .map(|o| o["kind"].clone())
        .collect();
    assert_eq!(kinds, [json!("Deployment"), json!("Job")]);
    assert_eq!(cluster.next_builtin_due(), None);
}

#[test]
fn changes_are_grouped_by_verb_and_kind() {
    let change = |verb, kind: &str, object: &str, detail: &str| BuiltinChange {
        at_millis: 0,
        verb,
        kind: kind.into(),
        object: object.into(),
        detail: detail.into(),
    };
    let lines = group_changes(&[
        change("created", "ReplicaSet", "d/web-1", ""),
        change("created", "Pod", "d/a", ""),
        change("created", "Pod", "d/b", ""),
        change("ended", "Pod", "d/c", " (Failed)"),
        change("ended", "Pod", "d/e", " (Failed)"),
        change("scaled", "ReplicaSet", "d/web-1", " to 0"),
    ]);
    assert_eq!(
        lines,
        [
            "created ReplicaSet d/web-1",
            "created Pod d/a, d/b",
            "ended Pod d/c, d/e (Failed)",
            "scaled ReplicaSet d/web-1 to 0",
        ]
    );
}

/// A Deployment asking for more Pods than the embedded cluster plays gets
/// that many, says so, and leaves the cluster room for everything else.
#[test]
fn a_replica_set_gets_at_most_its_cap_of_pods_and_says_so() {
    let c = Cluster::new(BuiltinConfig::default());
    c.apply(deployment(100_000_000, "nginx:1.27"));
    let pods = c.all("Pod");
    assert_eq!(
        pods.len(),
        usize::try_from(replicas::MAX_PODS_PER_REPLICA_SET).unwrap()
    );
    let said: Vec<String> = c
        .cluster
        .take_builtin_changes()
        .iter()
        .filter(|change| change.verb == "capped")
        .map(|change| format!("{} {}{}", change.kind, change.object, change.detail))
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].starts_with("ReplicaSet default/web-")
            && said[0].ends_with(" at 1000 of the 100000000 Pods it asks for"),
        "{said:?}"
    );
    // The cluster still takes the user's objects.
    c.apply(job("after", json!({})));
}

/// Built-in kinds are stored without the API server's schema: objects the
/// built-ins cannot read are passed by and reported, and the others are
/// still played.
#[test]
fn malformed_built_in_objects_are_skipped_and_reported_not_a_panic() {
    let c = Cluster::new(BuiltinConfig::default());
    for (name, spec) in [
        ("template-number", json!({"replicas": 1, "template": 5})),
        ("spec-string", json!("two")),
        (
            "labels-list",
            json!({"replicas": 1, "template": {"metadata": {"labels": ["a"]}}}),
        ),
        ("selector-number", json!({"replicas": 1, "selector": 7})),
    ] {
        c.apply(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}));
    }
    c.apply(json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "job-template-list", "namespace": "default"},
        "spec": {"template": []}}));
    let skipped: Vec<String> = c
        .cluster
        .take_builtin_changes()
        .iter()
        .filter(|change| change.verb == "skipped")
        .map(|change| format!("{} {}{}", change.kind, change.object, change.detail))
        .collect();
    assert_eq!(
        skipped,
        [
            "Deployment default/template-number (spec.template is not an object)",
            "Deployment default/spec-string (spec is not an object)",
            "Deployment default/labels-list (spec.template.metadata.labels is not an object)",
            "Deployment default/selector-number (spec.selector is not an object)",
            "Job default/job-template-list (spec.template is not an object)",
        ]
    );
    assert!(c.all("ReplicaSet").is_empty() && c.all("Pod").is_empty());
    // A well-formed one next to them is played as usual.
    c.apply(deployment(2, "nginx:1.27"));
    assert_eq!(c.all("Pod").len(), 2);
}
