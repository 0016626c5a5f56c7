//! Deployment -> ReplicaSet -> Pods, as the deployment and replicaset
//! controllers do it (without a gradual rolling update: a new template's
//! ReplicaSet gets every replica at once).

use serde_json::{Map, Value, json};

use super::names::pod_template_hash;
use super::objects::{as_applied, controlled, controller_ref, int_at, str_at};
use super::pods::{self, NewPod, is_ready};
use super::round::{Round, apply, write_status};
use crate::cluster::backend::{ObjectKey, Propagation};
use crate::cluster::clock::rfc3339;
use crate::cluster::embedded::object_metadata::is_deleting;

const HASH_LABEL: &str = "pod-template-hash";
const REVISION: &str = "deployment.kubernetes.io/revision";
const DESIRED: &str = "deployment.kubernetes.io/desired-replicas";
const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

/// The most Pods the embedded cluster plays for one ReplicaSet. A dev
/// cluster that made every Pod of `replicas: 100000000` would fill up (it
/// holds 100,000 objects) and refuse everything after; a ReplicaSet asking
/// for more gets this many, and the output says so.
pub const MAX_PODS_PER_REPLICA_SET: i64 = 1_000;

fn replicas_of(object: &Value) -> i64 {
    int_at(object, "/spec/replicas").unwrap_or(1).max(0)
}

fn revision_of(object: &Value) -> i64 {
    str_at(
        object,
        &format!("/metadata/annotations/{}", REVISION.replace('/', "~1")),
    )
    .and_then(|r| r.parse().ok())
    .unwrap_or(0)
}

fn labels_of(object: &Value, pointer: &str) -> Map<String, Value> {
    object
        .pointer(pointer)
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// `maxSurge` / `maxUnavailable` of a rolling update, 25% by default as the
/// API server defaults them; a percentage rounds up for surge and down for
/// unavailability.
fn rolling_bound(deployment: &Value, field: &str, replicas: i64, round_up: bool) -> i64 {
    let value = deployment.pointer(&format!("/spec/strategy/rollingUpdate/{field}"));
    match value {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        Some(Value::String(s)) if s.ends_with('%') => {
            let percent: i64 = s.trim_end_matches('%').parse().unwrap_or(25);
            let scaled = replicas * percent;
            if round_up {
                (scaled + 99) / 100
            } else {
                scaled / 100
            }
        }
        _ => {
            let scaled = replicas * 25;
            if round_up {
                (scaled + 99) / 100
            } else {
                scaled / 100
            }
        }
    }
}

/// Gives the Deployment a ReplicaSet for its current template with its
/// replicas, scales the others to 0, and writes its status.
pub(super) fn sync_deployment(round: &mut Round<'_>, key: &ObjectKey) {
    let Some(deployment) = round.store.get(key) else {
        return;
    };
    let Some(uid) = str_at(&deployment, "/metadata/uid").map(str::to_string) else {
        return;
    };
    if is_deleting(&deployment) {
        return;
    }
    let name = key.name.as_str();
    let replicas = replicas_of(&deployment);
    let template = deployment
        .pointer("/spec/template")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let hash = pod_template_hash(&template, 0);
    let owned = controlled(round.store, &uid, "ReplicaSet");
    let is_current =
        |rs: &Value| str_at(rs, &format!("/metadata/labels/{HASH_LABEL}")) == Some(hash.as_str());
    let max_surge = rolling_bound(&deployment, "maxSurge", replicas, true);
    let annotations = |revision: i64| {
        json!({
            DESIRED: replicas.to_string(),
            MAX_REPLICAS: (replicas + max_surge).to_string(),
            REVISION: revision.to_string(),
        })
    };

    let current = owned.iter().find(|(_, rs)| is_current(rs));
    let revision = match current {
        Some((_, rs)) => {
            let revision = revision_of(rs);
            scale_current(round, rs, replicas, annotations(revision));
            revision
        }
        None => {
            let revision = next_revision(&owned);
            let new = NewReplicaSet {
                deployment: &deployment,
                key,
                template: &template,
                hash: &hash,
                replicas,
            };
            apply(round, new.object(annotations(revision)));
            revision
        }
    };
    scale_down_old(round, owned.iter().filter(|(_, rs)| !is_current(rs)));
    if revision_of(&deployment) != revision {
        apply(
            round,
            json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": key.namespace,
                    "annotations": {REVISION: revision.to_string()}},
            }),
        );
    }
    let status = deployment_status(round, &deployment, &uid, &format!("{name}-{hash}"));
    write_status(round, key, status);
}

/// Gives the ReplicaSet of the current template the Deployment's replicas
/// and annotations, if it does not have them.
fn scale_current(round: &mut Round<'_>, rs: &Value, replicas: i64, annotations: Value) {
    let mut want = as_applied(rs);
    want["spec"]["replicas"] = json!(replicas);
    want["metadata"]["annotations"] = annotations;
    if want != as_applied(rs) {
        apply(round, want);
        if replicas_of(rs) != replicas
            && let Some(rs_key) = ObjectKey::of(rs)
        {
            round.note("scaled", &rs_key, format!(" to {replicas}"));
        }
    }
}

/// The revision a new template's ReplicaSet gets: one past the highest of
/// the Deployment's ReplicaSets.
fn next_revision(owned: &[(ObjectKey, Value)]) -> i64 {
    owned
        .iter()
        .map(|(_, rs)| revision_of(rs))
        .max()
        .unwrap_or(0)
        + 1
}

/// Scales the ReplicaSets of older templates to 0.
fn scale_down_old<'a>(round: &mut Round<'_>, old: impl Iterator<Item = &'a (ObjectKey, Value)>) {
    for (_, rs) in old {
        if replicas_of(rs) != 0 {
            let mut want = as_applied(rs);
            want["spec"]["replicas"] = json!(0);
            apply(round, want);
            if let Some(rs_key) = ObjectKey::of(rs) {
                round.note("scaled", &rs_key, " to 0".into());
            }
        }
    }
}

/// The ReplicaSet a Deployment gets for a template it has none for.
struct NewReplicaSet<'a> {
    deployment: &'a Value,
    key: &'a ObjectKey,
    template: &'a Value,
    hash: &'a str,
    replicas: i64,
}

impl NewReplicaSet<'_> {
    /// The ReplicaSet as the deployment controller creates it: named and
    /// labelled by the template's hash, selecting by it too, and controlled
    /// by the Deployment.
    fn object(&self, annotations: Value) -> Value {
        let hash = self.hash;
        let mut labels = labels_of(self.template, "/metadata/labels");
        labels.insert(HASH_LABEL.into(), json!(hash));
        let mut selector = self
            .deployment
            .pointer("/spec/selector")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let mut match_labels = labels_of(&selector, "/matchLabels");
        match_labels.insert(HASH_LABEL.into(), json!(hash));
        selector["matchLabels"] = Value::Object(match_labels);
        let mut rs_template = self.template.clone();
        rs_template["metadata"]["labels"] = Value::Object(labels.clone());
        json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": format!("{}-{hash}", self.key.name),
                "namespace": self.key.namespace,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [controller_ref(self.deployment)],
            },
            "spec": {
                "replicas": self.replicas,
                "selector": selector,
                "template": rs_template,
            },
        })
    }
}

/// The Deployment's status from its ReplicaSets, with the fields and
/// conditions the deployment controller writes.
fn deployment_status(round: &Round<'_>, deployment: &Value, uid: &str, new_rs: &str) -> Value {
    let owned = controlled(round.store, uid, "ReplicaSet");
    let sum =
        |pointer: &str| -> i64 { owned.iter().filter_map(|(_, rs)| int_at(rs, pointer)).sum() };
    let desired = replicas_of(deployment);
    let total = sum("/status/replicas");
    let ready = sum("/status/readyReplicas");
    let available = sum("/status/availableReplicas");
    let updated = owned
        .iter()
        .find(|(k, _)| k.name == new_rs)
        .and_then(|(_, rs)| int_at(rs, "/status/replicas"))
        .unwrap_or(0);
    let max_unavailable = rolling_bound(deployment, "maxUnavailable", desired, false);
    let is_available = available >= desired - max_unavailable;
    let complete = updated == desired && total == desired && available == desired;

    let conditions = Conditions {
        previous: deployment
            .pointer("/status/conditions")
            .and_then(Value::as_array),
        now: rfc3339(round.now),
    };
    let available_condition = if is_available {
        conditions.condition(
            "Available",
            true,
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.".into(),
        )
    } else {
        conditions.condition(
            "Available",
            false,
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".into(),
        )
    };
    let progressing = if complete {
        conditions.condition(
            "Progressing",
            true,
            "NewReplicaSetAvailable",
            format!("ReplicaSet \"{new_rs}\" has successfully progressed."),
        )
    } else {
        conditions.condition(
            "Progressing",
            true,
            "ReplicaSetUpdated",
            format!("ReplicaSet \"{new_rs}\" is progressing."),
        )
    };
    let mut status = Map::new();
    status.insert(
        "observedGeneration".into(),
        json!(int_at(deployment, "/metadata/generation").unwrap_or(1)),
    );
    for (field, value) in [
        ("replicas", total),
        ("updatedReplicas", updated),
        ("readyReplicas", ready),
        ("availableReplicas", available),
        ("unavailableReplicas", (desired - available).max(0)),
    ] {
        // The controller's fields are omitempty: a zero is left out.
        if value != 0 {
            status.insert(field.into(), json!(value));
        }
    }
    status.insert(
        "conditions".into(),
        json!([available_condition, progressing]),
    );
    Value::Object(status)
}

/// The Deployment's conditions as they were, and the time now: what a
/// condition written again keeps of its former self.
struct Conditions<'a> {
    previous: Option<&'a Vec<Value>>,
    now: String,
}

impl Conditions<'_> {
    /// A condition as the deployment controller writes it: its transition
    /// time kept while its status holds, its update time while its status
    /// and reason do.
    fn condition(&self, type_: &str, ok: bool, reason: &str, message: String) -> Value {
        let now = &self.now;
        let status = if ok { "True" } else { "False" };
        let before = self
            .previous
            .into_iter()
            .flatten()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(type_));
        let same = |field: &str, value: &str| {
            before.and_then(|c| c.get(field)).and_then(Value::as_str) == Some(value)
        };
        let keep = |field: &str| {
            before
                .and_then(|c| c.get(field))
                .cloned()
                .unwrap_or_else(|| json!(now))
        };
        let transition = if same("status", status) {
            keep("lastTransitionTime")
        } else {
            json!(now)
        };
        let update = if same("status", status) && same("reason", reason) {
            keep("lastUpdateTime")
        } else {
            json!(now)
        };
        json!({"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": transition, "lastUpdateTime": update})
    }
}

/// Creates or deletes Pods until the ReplicaSet has its replicas, and
/// writes its status.
pub(super) fn sync_replica_set(round: &mut Round<'_>, key: &ObjectKey) {
    let Some(rs) = round.store.get(key) else {
        return;
    };
    let Some(uid) = str_at(&rs, "/metadata/uid").map(str::to_string) else {
        return;
    };
    if is_deleting(&rs) {
        return;
    }
    let asked = replicas_of(&rs);
    let desired = asked.min(MAX_PODS_PER_REPLICA_SET);
    let live: Vec<(ObjectKey, Value)> = controlled(round.store, &uid, "Pod")
        .into_iter()
        .filter(|(_, pod)| !is_deleting(pod))
        .collect();
    let count = i64::try_from(live.len()).unwrap_or(i64::MAX);
    if count < desired {
        if asked > desired {
            round.note(
                "capped",
                key,
                format!(" at {desired} of the {asked} Pods it asks for"),
            );
        }
        let template = rs
            .pointer("/spec/template")
            .cloned()
            .unwrap_or_else(|| json!({}));
        for _ in count..desired {
            let new = NewPod {
                owner: &rs,
                template: &template,
                extra_labels: Map::new(),
                finalizers: Vec::new(),
            };
            if pods::create(round, new).is_none() {
                break;
            }
        }
    } else if count > desired {
        // Pods that do not run yet go first, then the newest, as the
        // replicaset controller ranks them.
        let mut ranked = live.clone();
        ranked.sort_by(|(ka, a), (kb, b)| {
            is_ready(a)
                .cmp(&is_ready(b))
                .then_with(|| {
                    str_at(b, "/metadata/creationTimestamp")
                        .cmp(&str_at(a, "/metadata/creationTimestamp"))
                })
                .then_with(|| kb.name.cmp(&ka.name))
        });
        let extra = usize::try_from(count - desired).unwrap_or(0);
        for (pod, _) in ranked.into_iter().take(extra) {
            match round.store.delete(&pod, Propagation::Background, round.now) {
                Ok(()) => round.note("deleted", &pod, String::new()),
                Err(e) => tracing::debug!("built-in controllers: cannot delete {pod}: {e}"),
            }
        }
    }

    let pods: Vec<Value> = controlled(round.store, &uid, "Pod")
        .into_iter()
        .map(|(_, pod)| pod)
        .filter(|pod| !is_deleting(pod))
        .collect();
    let selector = labels_of(&rs, "/spec/selector/matchLabels");
    let fully_labeled = pods
        .iter()
        .filter(|pod| {
            let labels = labels_of(pod, "/metadata/labels");
            selector.iter().all(|(k, v)| labels.get(k) == Some(v))
        })
        .count();
    let ready = pods.iter().filter(|p| is_ready(p)).count();
    let mut status = Map::new();
    status.insert("replicas".into(), json!(pods.len()));
    for (field, value) in [
        ("fullyLabeledReplicas", fully_labeled),
        ("readyReplicas", ready),
        ("availableReplicas", ready),
    ] {
        if value != 0 {
            status.insert(field.into(), json!(value));
        }
    }
    status.insert(
        "observedGeneration".into(),
        json!(int_at(&rs, "/metadata/generation").unwrap_or(1)),
    );
    write_status(round, key, Value::Object(status));
}
