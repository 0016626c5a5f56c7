//! Pods as the built-in controllers create them, and what a node would do
//! with them: Pending, then Running.

use reconciler_contract::object_meta::MetadataField;
use serde_json::{Map, Value, json};

use super::names::name_suffix;
use super::objects::{controller_ref, str_at};
use super::round::{Round, Timer, apply, write_status};
use crate::cluster::backend::ObjectKey;
use crate::cluster::clock::rfc3339;
use crate::cluster::embedded::object_metadata::is_deleting;

/// The part of a new Pod that differs from controller to controller.
pub(super) struct NewPod<'a> {
    pub owner: &'a Value,
    pub template: &'a Value,
    /// Labels on top of the template's.
    pub extra_labels: Map<String, Value>,
    pub finalizers: Vec<&'a str>,
}

/// Creates a Pod `<owner>-<suffix>` from the owner's template, Pending,
/// and sets the timer that starts it. Returns its key.
pub(super) fn create(round: &mut Round<'_>, new: NewPod<'_>) -> Option<ObjectKey> {
    let owner_name = str_at(new.owner, "/metadata/name")?;
    let namespace = str_at(new.owner, "/metadata/namespace")?;
    let owner_uid = str_at(new.owner, "/metadata/uid")?;
    let generate_name = format!("{owner_name}-");
    // Seeded by the store's sequence, so a name freed by a deleted Pod is
    // not handed out again at once, and a run repeats exactly.
    let seed = round.store.resource_version();
    let name = (0..)
        .map(|attempt| {
            format!(
                "{generate_name}{}",
                name_suffix(&format!("{owner_uid}/{seed}/{attempt}"))
            )
        })
        .find(|name| {
            let key = ObjectKey::new(pod_kind(), Some(namespace), name);
            round.store.get(&key).is_none()
        })?;

    let mut labels = new
        .template
        .metadata_field("labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    labels.extend(new.extra_labels);
    let mut metadata = json!({
        "name": name,
        "generateName": generate_name,
        "namespace": namespace,
        "labels": labels,
        "ownerReferences": [controller_ref(new.owner)],
    });
    if let Some(annotations) = new.template.metadata_field("annotations") {
        metadata["annotations"] = annotations.clone();
    }
    if !new.finalizers.is_empty() {
        metadata["finalizers"] = json!(new.finalizers);
    }
    let spec = new
        .template
        .get("spec")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec});
    let stored = apply(round, pod)?;
    let key = ObjectKey::of(&stored)?;
    let qos = qos_class(&stored);
    write_status(round, &key, json!({"phase": "Pending", "qosClass": qos}));
    let delay = round.config.pod_start_delay;
    round.after(delay, Timer::StartPod(key.clone()));
    Some(key)
}

pub(super) fn pod_kind() -> reconciler_contract::KindRef {
    reconciler_contract::KindRef::new("", "v1", "Pod")
}

/// What a kubelet reports once the Pod's containers run: Running, every
/// container started and ready.
pub(super) fn start(round: &mut Round<'_>, key: &ObjectKey) {
    let Some(pod) = round.store.get(key) else {
        return;
    };
    if str_at(&pod, "/status/phase") != Some("Pending") || is_deleting(&pod) {
        return;
    }
    let now = rfc3339(round.now);
    let condition = |type_: &str| json!({"type": type_, "status": "True", "lastProbeTime": null, "lastTransitionTime": now});
    let containers: Vec<Value> = containers(&pod)
        .map(|c| {
            json!({
                "name": c.get("name").cloned().unwrap_or(Value::Null),
                "image": c.get("image").cloned().unwrap_or(Value::Null),
                "imageID": "",
                "ready": true,
                "started": true,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            })
        })
        .collect();
    let status = json!({
        "phase": "Running",
        "conditions": [
            condition("Initialized"),
            condition("Ready"),
            condition("ContainersReady"),
            condition("PodScheduled"),
        ],
        "containerStatuses": containers,
        "startTime": now,
        "qosClass": qos_class(&pod),
    });
    write_status(round, key, status);
    round.note("started", key, String::new());
}

/// What a kubelet reports once the Pod's containers exited, with exit code
/// 0 or 1.
pub(super) fn end(round: &mut Round<'_>, key: &ObjectKey, failed: bool) {
    let Some(pod) = round.store.get(key) else {
        return;
    };
    let now = rfc3339(round.now);
    let exit_code = i32::from(failed);
    let reason = if failed { "Error" } else { "Completed" };
    let started = str_at(&pod, "/status/startTime")
        .unwrap_or(&now)
        .to_string();
    let containers: Vec<Value> = containers(&pod)
        .map(|c| {
            json!({
                "name": c.get("name").cloned().unwrap_or(Value::Null),
                "image": c.get("image").cloned().unwrap_or(Value::Null),
                "imageID": "",
                "ready": false,
                "started": false,
                "restartCount": 0,
                "state": {"terminated": {
                    "exitCode": exit_code,
                    "reason": reason,
                    "startedAt": started,
                    "finishedAt": now,
                }},
            })
        })
        .collect();
    let status = json!({
        "phase": if failed { "Failed" } else { "Succeeded" },
        "containerStatuses": containers,
        "startTime": started,
        "qosClass": qos_class(&pod),
    });
    write_status(round, key, status);
    let phase = if failed { " (Failed)" } else { " (Succeeded)" };
    round.note("ended", key, phase.into());
}

fn containers(pod: &Value) -> impl Iterator<Item = &Value> {
    pod.pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The QoS class the API server gives a Pod: BestEffort without any
/// requests or limits, Guaranteed when every container's limits equal its
/// requests, Burstable otherwise.
fn qos_class(pod: &Value) -> &'static str {
    let resources: Vec<&Value> = containers(pod).filter_map(|c| c.get("resources")).collect();
    let set = |r: &Value, which: &str| {
        r.get(which)
            .and_then(Value::as_object)
            .is_some_and(|m| !m.is_empty())
    };
    if !resources
        .iter()
        .any(|r| set(r, "requests") || set(r, "limits"))
    {
        return "BestEffort";
    }
    let all = containers(pod).count() == resources.len();
    let guaranteed = all
        && resources.iter().all(|r| {
            set(r, "limits")
                && ["cpu", "memory"]
                    .iter()
                    .all(|res| r.pointer(&format!("/limits/{res}")).is_some())
                && r.get("requests").is_none_or(|req| {
                    req.as_object()
                        .into_iter()
                        .flatten()
                        .all(|(k, v)| r.pointer(&format!("/limits/{k}")) == Some(v))
                })
        });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Whether the Pod counts as ready: Running with its Ready condition true.
pub(super) fn is_ready(pod: &Value) -> bool {
    str_at(pod, "/status/phase") == Some("Running")
        && pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Ready")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
}
