//! Jobs: one Pod each, which ends after a (virtual) while, and the Job's
//! status as the job controller writes it.

use reconciler_contract::object_meta::MetadataField;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::objects::{controlled, str_at};
use super::pods::{self, NewPod, is_ready};
use super::round::{Round, Timer, write_status};
use crate::cluster::backend::ObjectKey;
use crate::cluster::clock::rfc3339;
use crate::cluster::embedded::object_metadata::{finalizers, is_deleting};
use crate::support::duration_text::parse_duration;

/// How long a Job's Pod runs (`30s`, `2m`), overriding `--job-duration`.
pub const JOB_DURATION_ANNOTATION: &str = "embedded.reconciler-host.io/job-duration";
/// How a Job ends: `Complete` or `Failed`, overriding `--fail-jobs`.
pub const JOB_OUTCOME_ANNOTATION: &str = "embedded.reconciler-host.io/job-outcome";

/// The finalizer the job controller holds its Pods with until it has
/// counted them.
const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";

fn annotation<'a>(job: &'a Value, name: &str) -> Option<&'a str> {
    job.metadata_field("annotations")
        .and_then(|a| a.get(name))
        .and_then(Value::as_str)
}

fn finished(job: &Value) -> bool {
    job.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            matches!(
                c.get("type").and_then(Value::as_str),
                Some("Complete" | "Failed")
            ) && c.get("status").and_then(Value::as_str) == Some("True")
        })
}

/// Starts a Job that has not started: its Pod, its status, and the timer
/// that ends it. A running Job's counts follow its Pod.
pub(super) fn sync_job(round: &mut Round<'_>, key: &ObjectKey) {
    let Some(job) = round.store.get(key) else {
        return;
    };
    let Some(uid) = str_at(&job, "/metadata/uid").map(str::to_string) else {
        return;
    };
    if is_deleting(&job) || finished(&job) {
        return;
    }
    let started = job.pointer("/status/startTime").cloned();
    if started.is_none() {
        let Some(template) = job.pointer("/spec/template").cloned() else {
            return;
        };
        let name = key.name.as_str();
        let mut labels = Map::new();
        for (label, value) in [
            ("batch.kubernetes.io/controller-uid", uid.as_str()),
            ("batch.kubernetes.io/job-name", name),
            ("controller-uid", uid.as_str()),
            ("job-name", name),
        ] {
            labels.insert(label.into(), json!(value));
        }
        let new = NewPod {
            owner: &job,
            template: &template,
            extra_labels: labels,
            finalizers: vec![TRACKING_FINALIZER],
        };
        let Some(pod) = pods::create(round, new) else {
            return;
        };
        let (duration, failed) = plan(round, key, &job);
        round.after(
            duration,
            Timer::FinishJob {
                job: key.clone(),
                pod,
                failed,
            },
        );
    }
    let live: Vec<Value> = controlled(round.store, &uid, "Pod")
        .into_iter()
        .map(|(_, pod)| pod)
        .filter(|pod| !is_deleting(pod))
        .collect();
    let status = json!({
        "startTime": started.unwrap_or_else(|| json!(rfc3339(round.now))),
        "active": live.len(),
        "ready": live.iter().filter(|p| is_ready(p)).count(),
        "uncountedTerminatedPods": {},
    });
    write_status(round, key, status);
}

/// How long the Job runs and whether it fails: its annotations first, then
/// the cluster's settings. A bad annotation value is reported and the
/// setting used.
fn plan(round: &Round<'_>, key: &ObjectKey, job: &Value) -> (Duration, bool) {
    let config = round.config;
    let duration = match annotation(job, JOB_DURATION_ANNOTATION).map(parse_duration) {
        Some(Ok(duration)) => duration,
        Some(Err(e)) => {
            tracing::warn!(
                "{key}: annotation {JOB_DURATION_ANNOTATION}: {e}; using {:?}",
                config.job_duration
            );
            config.job_duration
        }
        None => config.job_duration,
    };
    let failed = match annotation(job, JOB_OUTCOME_ANNOTATION) {
        Some("Failed") => true,
        Some("Complete") => false,
        other => {
            if let Some(other) = other {
                tracing::warn!(
                    "{key}: annotation {JOB_OUTCOME_ANNOTATION} is {other:?}, not Complete or Failed; ignored"
                );
            }
            config
                .failing_jobs
                .as_ref()
                .is_some_and(|selector| selector.matches_object(job))
        }
    };
    (duration, failed)
}

/// Ends the Job's Pod and the Job: Succeeded and Complete, or Failed and
/// Failed (backoffLimit reached, as the example Jobs allow no retry).
pub(super) fn finish(
    round: &mut Round<'_>,
    job_key: &ObjectKey,
    pod_key: &ObjectKey,
    failed: bool,
) {
    let Some(job) = round.store.get(job_key) else {
        return;
    };
    if finished(&job) {
        return;
    }
    pods::end(round, pod_key, failed);
    release_pod_now(round, pod_key);
    let now = rfc3339(round.now);
    let mut status = Map::new();
    status.insert(
        "startTime".into(),
        job.pointer("/status/startTime")
            .cloned()
            .unwrap_or_else(|| json!(now)),
    );
    status.insert("ready".into(), json!(0));
    status.insert("uncountedTerminatedPods".into(), json!({}));
    let condition = if failed {
        status.insert("failed".into(), json!(1));
        json!({"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit",
            "lastProbeTime": now, "lastTransitionTime": now})
    } else {
        status.insert("succeeded".into(), json!(1));
        status.insert("completionTime".into(), json!(now));
        json!({"type": "Complete", "status": "True", "lastProbeTime": now, "lastTransitionTime": now})
    };
    status.insert("conditions".into(), json!([condition]));
    write_status(round, job_key, Value::Object(status));
    round.note(
        if failed { "failed" } else { "completed" },
        job_key,
        String::new(),
    );
}

/// Whether a Pod is being deleted while the job controller's finalizer
/// still holds it.
pub(super) fn holds_released_pod(pod: &Value) -> bool {
    is_deleting(pod) && finalizers(pod).contains(&TRACKING_FINALIZER)
}

/// Lets a deleted Job Pod go, as the job controller does once it counted it.
pub(super) fn release_pod(round: &mut Round<'_>, key: &ObjectKey) {
    if round
        .store
        .get(key)
        .as_ref()
        .is_some_and(holds_released_pod)
    {
        release_pod_now(round, key);
    }
}

fn release_pod_now(round: &mut Round<'_>, key: &ObjectKey) {
    let held = round
        .store
        .get(key)
        .is_some_and(|pod| finalizers(&pod).contains(&TRACKING_FINALIZER));
    if held
        && let Err(e) = round
            .store
            .remove_finalizer(key, TRACKING_FINALIZER, round.now)
    {
        tracing::debug!("built-in controllers: cannot release {key}: {e}");
    }
}
