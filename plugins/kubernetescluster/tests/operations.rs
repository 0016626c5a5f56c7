//! The kubernetescluster logic, natively through the SDK harness.
//!
//! A small simulation plays the host and the Job controller: after each
//! reconcile the status is written back, the returned children become the
//! observed ones (with the plugin's ownerReference, keeping any status they
//! had), and children that were not returned are pruned. Tests then walk a
//! cluster through its life one reconcile at a time.

// The harness is native only; on wasm32 this file compiles to nothing.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kubernetescluster::{
    FINALIZER, KubernetesCluster, KubernetesClusterSpec, KubernetesClusterStatus,
    KubernetesClusters, OPERATION_ANNOTATION, Operation, Phase,
};
use reconciler_sdk::EventType;
use reconciler_sdk::testing::{Harness, Outcome};
use serde_json::{Value, json};

const START: &str = "2024-01-01T00:00:00Z";

fn cluster(operation: Option<&str>) -> KubernetesCluster {
    KubernetesCluster {
        api_version: "example.com/v1alpha1".into(),
        kind: "KubernetesCluster".into(),
        metadata: ObjectMeta {
            name: Some("prod".into()),
            namespace: Some("default".into()),
            uid: Some("uid-prod".into()),
            generation: Some(1),
            annotations: operation
                .map(|op| BTreeMap::from([(OPERATION_ANNOTATION.to_string(), op.to_string())])),
            ..Default::default()
        },
        spec: KubernetesClusterSpec {
            masters: 3,
            workers: 2,
            version: "1.33".into(),
            timeout_seconds: 600,
        },
        status: None,
    }
}

/// The host and the Job controller, as far as these tests need them.
struct Sim {
    cluster: KubernetesCluster,
    children: Vec<Value>,
    now: Timestamp,
}

impl Sim {
    fn new(cluster: KubernetesCluster) -> Self {
        Self {
            cluster,
            children: Vec::new(),
            now: START.parse().unwrap(),
        }
    }

    fn harness(&self) -> Harness<KubernetesClusters> {
        let mut harness = Harness::new().at(self.now);
        for child in &self.children {
            harness.insert(child);
        }
        harness
    }

    /// One reconcile, and the host acting on its answer.
    fn reconcile(&mut self) -> Outcome {
        let outcome = self.harness().reconcile(&self.cluster).unwrap();
        if let Some(status) = outcome.status().unwrap() {
            self.cluster.status = Some(status);
        }
        let mut observed = Vec::new();
        for text in &outcome.response.apply {
            let mut child: Value = serde_json::from_str(text).unwrap();
            child["metadata"]["namespace"] = json!("default");
            child["metadata"]["ownerReferences"] = json!([{
                "apiVersion": "example.com/v1alpha1", "kind": "KubernetesCluster",
                "name": "prod", "uid": "uid-prod", "controller": true,
            }]);
            if let Some(before) = self.child(&child["kind"], &child["metadata"]["name"]) {
                child["status"] = before["status"].clone();
            }
            observed.push(child);
        }
        self.children = observed;
        outcome
    }

    fn child(&self, kind: &Value, name: &Value) -> Option<&Value> {
        self.children
            .iter()
            .find(|c| &c["kind"] == kind && &c["metadata"]["name"] == name)
    }

    /// What the Job controller reports for a Job.
    fn job_status(&mut self, name: &str, status: Value) {
        let job = self
            .children
            .iter_mut()
            .find(|c| c["kind"] == "Job" && c["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no Job {name}"));
        job["status"] = status;
    }

    fn remove_job(&mut self, name: &str) {
        self.children
            .retain(|c| !(c["kind"] == "Job" && c["metadata"]["name"] == name));
    }

    fn advance(&mut self, seconds: i64) {
        self.now += SignedDuration::from_secs(seconds);
    }

    fn annotate(&mut self, operation: &str) {
        self.cluster
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(OPERATION_ANNOTATION.into(), operation.into());
    }

    /// A spec change: the API server bumps the generation.
    fn edit_spec(&mut self, edit: impl FnOnce(&mut KubernetesClusterSpec)) {
        edit(&mut self.cluster.spec);
        *self.cluster.metadata.generation.get_or_insert(0) += 1;
    }

    fn delete(&mut self) {
        self.cluster.metadata.deletion_timestamp = Some(Time(self.now));
    }

    fn status(&self) -> &KubernetesClusterStatus {
        self.cluster.status.as_ref().unwrap()
    }

    fn job_names(&self) -> Vec<String> {
        self.children
            .iter()
            .filter(|c| c["kind"] == "Job")
            .map(|c| c["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    }

    fn condition(&self, type_: &str) -> (String, String, String) {
        let c = self
            .status()
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("no {type_} condition"));
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }
}

fn reasons(outcome: &Outcome) -> Vec<(EventType, &str)> {
    outcome
        .events()
        .iter()
        .map(|e| (e.event_type, e.reason.as_str()))
        .collect()
}

fn succeeded() -> Value {
    json!({"startTime": START, "succeeded": 1, "completionTime": "2024-01-01T00:04:00Z",
           "conditions": [{"type": "Complete", "status": "True"}]})
}

#[test]
fn creating_runs_one_job_with_its_record_and_moves_to_running() {
    let mut sim = Sim::new(cluster(Some("creating")));
    let started = sim.reconcile();
    assert_eq!(reasons(&started), [(EventType::Normal, "OperationStarted")]);
    assert_eq!(sim.job_names(), ["prod-creating-1"]);
    assert_eq!(sim.status().phase, Phase::Creating);
    assert_eq!(sim.status().masters, Some(3));
    assert_eq!(started.requeue_after(), Some(Duration::from_secs(600)));

    let job: Job = started.applied().unwrap().remove(0);
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let env_from = pod.containers[0].env_from.as_ref().unwrap();
    assert_eq!(
        env_from[0].config_map_ref.as_ref().unwrap().name,
        "prod-creating-1",
        "the Job reads its parameters from its record"
    );
    let record: ConfigMap = started.applied().unwrap().remove(0);
    let data = record.data.unwrap();
    assert_eq!(data["operation"], "creating");
    assert_eq!(data["job"], "prod-creating-1");
    assert_eq!(data["startedAt"], START);
    assert_eq!(
        (data["masters"].as_str(), data["workers"].as_str()),
        ("3", "2")
    );

    // Still running two minutes later: same pair, quiet, requeued at the deadline.
    sim.job_status("prod-creating-1", json!({"startTime": START, "active": 1}));
    sim.advance(120);
    let running = sim.reconcile();
    assert!(running.events().is_empty(), "{:?}", running.events());
    assert_eq!(running.requeue_after(), Some(Duration::from_secs(480)));
    assert_eq!(running.response.apply, started.response.apply);

    sim.job_status("prod-creating-1", succeeded());
    sim.advance(180);
    let done = sim.reconcile();
    assert_eq!(reasons(&done), [(EventType::Normal, "OperationSucceeded")]);
    let status = sim.status();
    assert_eq!(status.phase, Phase::Running);
    assert_eq!(status.running, None);
    assert_eq!(status.last_operation, Some(Operation::Creating));
    assert_eq!(status.last_job.as_deref(), Some("prod-creating-1"));
    assert_eq!(
        status.finished_at,
        Some("2024-01-01T00:04:00Z".parse().unwrap())
    );
    assert_eq!(sim.condition("Ready").0, "True");
    assert_eq!(done.requeue_after(), None);
}

#[test]
fn the_same_annotation_never_starts_a_second_job() {
    let mut sim = Sim::new(cluster(Some("creating")));
    sim.reconcile();
    sim.job_status("prod-creating-1", succeeded());
    sim.reconcile();

    // The finished pair stays for its logs, and nothing new starts.
    sim.advance(3600);
    let later = sim.reconcile();
    assert!(later.events().is_empty(), "{:?}", later.events());
    assert_eq!(sim.job_names(), ["prod-creating-1"]);
    assert_eq!(sim.status().phase, Phase::Running);

    // Even when someone deletes the finished Job, it is not created again.
    sim.remove_job("prod-creating-1");
    let after_delete = sim.reconcile();
    assert!(after_delete.applied::<Job>().unwrap().is_empty());
    assert!(after_delete.events().is_empty());
}

#[test]
fn a_failed_job_moves_the_phase_to_failed_and_says_why() {
    let mut sim = Sim::new(cluster(Some("creating")));
    sim.reconcile();
    sim.job_status(
        "prod-creating-1",
        json!({"startTime": START, "failed": 1, "conditions": [{"type": "Failed", "status": "True",
               "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit",
               "lastTransitionTime": "2024-01-01T00:01:00Z"}]}),
    );
    let failed = sim.reconcile();
    assert_eq!(reasons(&failed), [(EventType::Warning, "OperationFailed")]);
    assert_eq!(sim.status().phase, Phase::Failed);
    let (status, reason, message) = sim.condition("Ready");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "JobFailed"));
    assert!(
        message.contains("prod-creating-1 failed: Job has reached the specified backoff limit"),
        "{message}"
    );
    // Failed is final for this request: no retry Job.
    sim.reconcile();
    assert_eq!(sim.job_names(), ["prod-creating-1"]);
    assert_eq!(sim.status().phase, Phase::Failed);
}

#[test]
fn a_job_running_past_the_timeout_fails_and_is_deleted() {
    let mut spec_cluster = cluster(Some("upgrading"));
    spec_cluster.spec.timeout_seconds = 300;
    let mut sim = Sim::new(spec_cluster);
    sim.reconcile();
    sim.job_status("prod-upgrading-1", json!({"startTime": START, "active": 1}));

    sim.advance(299);
    assert_eq!(
        sim.reconcile().requeue_after(),
        Some(Duration::from_secs(1))
    );
    assert_eq!(sim.status().phase, Phase::Upgrading);

    sim.advance(1);
    let timed_out = sim.reconcile();
    assert_eq!(
        reasons(&timed_out),
        [(EventType::Warning, "OperationFailed")]
    );
    assert_eq!(sim.status().phase, Phase::Failed);
    let (_, reason, message) = sim.condition("Ready");
    assert_eq!(reason, "TimedOut");
    assert!(message.contains("spec.timeoutSeconds (300s)"), "{message}");
    assert!(sim.job_names().is_empty(), "a timed-out Job is pruned");
    assert_eq!(timed_out.applied::<ConfigMap>().unwrap().len(), 1);
}

#[test]
fn a_spec_change_under_an_annotation_is_a_new_operation_after_the_current_one() {
    let mut sim = Sim::new(cluster(Some("creating")));
    sim.reconcile();
    sim.job_status("prod-creating-1", succeeded());
    sim.reconcile();

    sim.annotate("scaling");
    sim.edit_spec(|s| s.workers = 5);
    let scaling = sim.reconcile();
    assert_eq!(reasons(&scaling), [(EventType::Normal, "OperationStarted")]);
    assert_eq!(
        sim.job_names(),
        ["prod-scaling-2"],
        "the old pair is pruned"
    );
    assert_eq!(sim.status().phase, Phase::Scaling);
    let record: ConfigMap = scaling.applied().unwrap().remove(0);
    assert_eq!(record.data.unwrap()["workers"], "5");

    // Another edit while scaling-2 runs waits for it, and its record keeps
    // the spec it started with.
    sim.job_status("prod-scaling-2", json!({"startTime": START, "active": 1}));
    sim.edit_spec(|s| s.workers = 7);
    let waiting = sim.reconcile();
    assert_eq!(sim.job_names(), ["prod-scaling-2"]);
    let record: ConfigMap = waiting.applied().unwrap().remove(0);
    assert_eq!(record.data.unwrap()["workers"], "5");

    // When it finishes, the next one starts in the same reconcile.
    sim.job_status("prod-scaling-2", succeeded());
    let next = sim.reconcile();
    assert_eq!(
        reasons(&next),
        [
            (EventType::Normal, "OperationSucceeded"),
            (EventType::Normal, "OperationStarted")
        ]
    );
    assert_eq!(sim.job_names(), ["prod-scaling-3"]);
    assert_eq!(sim.status().last_job.as_deref(), Some("prod-scaling-2"));
    assert_eq!(sim.status().phase, Phase::Scaling);
}

#[test]
fn masters_cannot_change_after_creation() {
    let mut sim = Sim::new(cluster(Some("creating")));
    sim.reconcile();
    sim.job_status("prod-creating-1", succeeded());
    sim.reconcile();

    sim.annotate("scaling");
    sim.edit_spec(|s| s.masters = 5);
    let refused = sim.reconcile();
    assert_eq!(
        reasons(&refused),
        [(EventType::Warning, "MastersImmutable")]
    );
    assert_eq!(sim.job_names(), ["prod-creating-1"], "no scaling Job");
    let (status, reason, message) = sim.condition("Accepted");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "MastersImmutable")
    );
    assert!(message.contains("it was 3, now 5"), "{message}");
    assert_eq!(sim.status().masters, Some(3));
    assert_eq!(sim.status().phase, Phase::Running);

    // Said once, not on every reconcile.
    assert!(sim.reconcile().events().is_empty());

    // Setting it back lets the operation run.
    sim.edit_spec(|s| s.masters = 3);
    sim.reconcile();
    assert_eq!(sim.job_names(), ["prod-scaling-3"]);
    assert_eq!(sim.condition("Accepted").0, "True");
}

#[test]
fn an_unknown_operation_is_refused_with_a_condition() {
    let mut sim = Sim::new(cluster(Some("scale")));
    let outcome = sim.reconcile();
    assert!(outcome.applied::<Job>().unwrap().is_empty());
    let (status, reason, message) = sim.condition("Accepted");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "UnknownOperation")
    );
    assert!(message.contains("\"scale\""), "{message}");
    assert_eq!(sim.status().phase, Phase::Pending);
}

#[test]
fn without_an_annotation_nothing_runs() {
    let mut sim = Sim::new(cluster(None));
    let outcome = sim.reconcile();
    assert!(outcome.response.apply.is_empty());
    assert_eq!(sim.status().phase, Phase::Pending);
    assert_eq!(sim.status().masters, None);
}

#[test]
fn deleting_runs_the_cleanup_job_and_finalizes_only_after_it_succeeded() {
    let mut sim = Sim::new(cluster(Some("creating")));
    sim.reconcile();
    sim.job_status("prod-creating-1", succeeded());
    sim.reconcile();

    sim.annotate("deleting");
    sim.reconcile();
    assert_eq!(
        sim.job_names(),
        ["prod-creating-1"],
        "the annotation alone deletes nothing"
    );

    sim.delete();
    let cleanup = sim.reconcile();
    assert!(!cleanup.finalized());
    assert_eq!(sim.job_names(), ["prod-deleting-1"]);
    assert_eq!(sim.status().phase, Phase::Terminating);

    sim.job_status("prod-deleting-1", json!({"startTime": START, "active": 1}));
    assert!(!sim.reconcile().finalized());

    sim.job_status("prod-deleting-1", succeeded());
    let done = sim.reconcile();
    assert!(done.finalized());
    // Finalized stays finalized if the host asks again before it is gone.
    assert!(sim.reconcile().finalized());
}

#[test]
fn a_failed_cleanup_keeps_the_finalizer_and_says_how_to_go_on() {
    let mut sim = Sim::new(cluster(Some("creating")));
    sim.reconcile();
    sim.delete();
    sim.reconcile();
    assert_eq!(
        sim.job_names(),
        ["prod-deleting-1"],
        "the creating Job is abandoned"
    );

    sim.job_status("prod-deleting-1", json!({"startTime": START, "failed": 1}));
    let failed = sim.reconcile();
    assert!(!failed.finalized());
    assert_eq!(sim.status().phase, Phase::Failed);
    let (_, reason, message) = sim.condition("Ready");
    assert_eq!(reason, "JobFailed");
    assert!(message.contains(FINALIZER), "{message}");
    assert!(!sim.reconcile().finalized());
    assert_eq!(sim.job_names(), ["prod-deleting-1"], "no retry on its own");

    // Editing the spec retries the cleanup.
    sim.edit_spec(|s| s.workers = 0);
    sim.reconcile();
    assert_eq!(sim.job_names(), ["prod-deleting-2"]);
}

#[test]
fn deleting_a_cluster_that_never_ran_anything_finalizes_at_once() {
    let mut sim = Sim::new(cluster(None));
    sim.delete();
    let outcome = sim.reconcile();
    assert!(outcome.finalized());
    assert!(outcome.response.apply.is_empty());
}

#[test]
fn a_non_positive_timeout_is_an_error() {
    let mut bad = cluster(Some("creating"));
    bad.spec.timeout_seconds = 0;
    let err = Harness::<KubernetesClusters>::new()
        .reconcile(&bad)
        .unwrap_err();
    assert!(
        err.contains("spec.timeoutSeconds must be 1 or more"),
        "{err}"
    );
}
