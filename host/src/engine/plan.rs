//! From a validated response to the calls that realise it.
//!
//! Planning is a pure function of what the plugin asked for and what the
//! cache holds, so every rule here is tested without a cluster:
//! - owned objects get the controller ownerReference to the primary;
//! - an apply is skipped when the cluster already holds every desired field
//!   and this host already applied exactly this desired object (a native
//!   controller re-sends the same apply after every event; this host sends
//!   nothing);
//! - owned children the plugin no longer returns are pruned;
//! - status is written only when it differs;
//! - the finalizer is released only when the plugin says cleanup is done,
//!   and with it any finalizer of an earlier version it answers for (see
//!   [`super::finalizer_handover`]).

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use reconciler_sdk::contract::Event;
use reconciler_sdk::memory_cache::is_deleting;
use reconciler_sdk::{KindRef, PluginMetadata};
use serde_json::{Value, json};

use crate::cluster::ObjectKey;
use crate::plugin::{ValidResponse, WriteRole};

/// One server-side apply to send.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedApply {
    pub key: ObjectKey,
    pub object: Value,
    pub role: WriteRole,
    /// The cache holds no such object: this creates it.
    pub creates: bool,
    /// Fingerprint of `object`, remembered once applied.
    pub fingerprint: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteReason {
    /// The plugin no longer returns this owned child.
    Pruned,
    /// The plugin asked for it in `delete`.
    Requested,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub applies: Vec<PlannedApply>,
    /// Applies skipped because the cluster already matches.
    pub unchanged: Vec<ObjectKey>,
    pub deletes: Vec<(ObjectKey, DeleteReason)>,
    /// The new status, only when it differs from the primary's.
    pub status: Option<Value>,
    pub events: Vec<Event>,
    /// Finalizers to remove, in order: the plugin's own, then superseded
    /// ones of earlier versions, each only if the primary carries it.
    pub remove_finalizers: Vec<String>,
    pub requeue_after: Option<Duration>,
}

impl Plan {
    /// Nothing to send to the cluster (events and requeue aside).
    pub fn is_quiet(&self) -> bool {
        self.applies.is_empty()
            && self.deletes.is_empty()
            && self.status.is_none()
            && self.remove_finalizers.is_empty()
    }
}

/// What the planner reads besides the response.
pub struct Observed<'a> {
    pub metadata: &'a PluginMetadata,
    pub primary: &'a Value,
    /// The primary's owned children, as cached.
    pub children: &'a [Value],
    /// The cached state of an object the plugin wants applied.
    pub current: &'a dyn Fn(&ObjectKey) -> Option<Value>,
    /// The fingerprint of what this host last applied to an object.
    pub last_applied: &'a dyn Fn(&ObjectKey) -> Option<u64>,
    /// Finalizers of earlier versions of the plugin that it now answers for.
    pub superseded_finalizers: &'a BTreeSet<String>,
}

/// A primary that cannot own anything: it has no uid yet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the primary has no metadata.uid, so its children cannot reference it")]
pub struct NoUid;

pub fn plan(observed: &Observed<'_>, response: ValidResponse) -> Result<Plan, NoUid> {
    let primary = observed.primary;
    let mut plan = Plan {
        events: response.events,
        requeue_after: response.requeue_after,
        ..Plan::default()
    };

    let mut desired_owned = BTreeSet::new();
    for desired in response.apply {
        let mut object = desired.object;
        if desired.role == WriteRole::Owned {
            set_controller_reference(&mut object, primary)?;
        }
        let Some(key) = ObjectKey::of(&object) else {
            continue;
        };
        if desired.role == WriteRole::Owned {
            desired_owned.insert(key.clone());
        }
        let fingerprint = fingerprint(&object);
        let current = (observed.current)(&key);
        let matches = current.as_ref().is_some_and(|c| is_subset(&object, c));
        if matches && (observed.last_applied)(&key) == Some(fingerprint) {
            plan.unchanged.push(key);
            continue;
        }
        plan.applies.push(PlannedApply {
            key,
            object,
            role: desired.role,
            creates: current.is_none(),
            fingerprint,
        });
    }

    for r in response.delete {
        let kind = KindRef::from_api_version(&r.api_version, &r.kind);
        plan.deletes.push((
            ObjectKey::new(kind, r.namespace.as_deref(), &r.name),
            DeleteReason::Requested,
        ));
    }
    for child in observed.children {
        let Some(key) = ObjectKey::of(child) else {
            continue;
        };
        let deleting = is_deleting(child);
        let requested = plan.deletes.iter().any(|(k, _)| k == &key);
        if !desired_owned.contains(&key) && !deleting && !requested {
            plan.deletes.push((key, DeleteReason::Pruned));
        }
    }

    if let Some(status) = response.status {
        let status = Value::Object(status);
        if primary.get("status") != Some(&status) {
            plan.status = Some(status);
        }
    }

    if is_deleting(primary) && response.finalized {
        for finalizer in observed
            .metadata
            .finalizer
            .iter()
            .chain(observed.superseded_finalizers)
        {
            if has_finalizer(primary, finalizer) && !plan.remove_finalizers.contains(finalizer) {
                plan.remove_finalizers.push(finalizer.clone());
            }
        }
    }
    Ok(plan)
}

/// Whether `object` carries `finalizer`.
pub fn has_finalizer(object: &Value, finalizer: &str) -> bool {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|v| v.as_str() == Some(finalizer)))
}

/// Makes `primary` the controller owner of `object`, keeping any other
/// ownerReferences the plugin set.
fn set_controller_reference(object: &mut Value, primary: &Value) -> Result<(), NoUid> {
    let uid = primary
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .ok_or(NoUid)?;
    let reference = json!({
        "apiVersion": primary.get("apiVersion"),
        "kind": primary.get("kind"),
        "name": primary.pointer("/metadata/name"),
        "uid": uid,
        "controller": true,
        "blockOwnerDeletion": true,
    });
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let refs = meta.entry("ownerReferences").or_insert_with(|| json!([]));
    if let Some(list) = refs.as_array_mut() {
        list.retain(|r| {
            r.get("uid").and_then(Value::as_str) != Some(uid)
                && r.get("controller") != Some(&json!(true))
        });
        list.push(reference);
    }
    Ok(())
}

/// Whether every field of `desired` has the same value in `actual`. Arrays
/// must have the same length and match element by element (the server may
/// default fields inside elements, as it does in containers).
pub fn is_subset(desired: &Value, actual: &Value) -> bool {
    match (desired, actual) {
        (Value::Object(d), Value::Object(a)) => d
            .iter()
            .all(|(k, v)| a.get(k).is_some_and(|av| is_subset(v, av))),
        (Value::Array(d), Value::Array(a)) => {
            d.len() == a.len() && d.iter().zip(a).all(|(x, y)| is_subset(x, y))
        }
        (Value::Number(d), Value::Number(a)) => d == a || d.as_f64() == a.as_f64(),
        (d, a) => d == a,
    }
}

/// A stable fingerprint of a JSON object (serde_json's maps are ordered).
fn fingerprint(object: &Value) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    object.to_string().hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use reconciler_sdk::contract::ObjectRef;
    use serde_json::Map;

    use super::*;
    use crate::plugin::DesiredObject;

    fn metadata() -> PluginMetadata {
        PluginMetadata::new(
            "podset",
            "1",
            KindRef::new("example.com", "v1alpha1", "PodSet"),
        )
        .owns(KindRef::new("apps", "v1", "Deployment"))
        .finalizer("example.com/cleanup")
    }

    fn primary(extra: Value) -> Value {
        let mut p = json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
            "metadata": {"name": "web", "namespace": "d", "uid": "u-1"}});
        if let (Some(p), Some(extra)) = (p.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                p.insert(k.clone(), v.clone());
            }
        }
        p
    }

    fn deployment(name: &str, replicas: u32) -> DesiredObject {
        DesiredObject {
            kind: KindRef::new("apps", "v1", "Deployment"),
            role: WriteRole::Owned,
            object: json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": "d"}, "spec": {"replicas": replicas}}),
        }
    }

    fn response(apply: Vec<DesiredObject>) -> ValidResponse {
        ValidResponse {
            apply,
            delete: vec![],
            status: None,
            events: vec![],
            requeue_after: None,
            finalized: false,
        }
    }

    fn run(
        primary: &Value,
        children: &[Value],
        cluster: &[Value],
        last: Option<u64>,
        r: ValidResponse,
    ) -> Plan {
        run_superseding(primary, children, cluster, last, r, &BTreeSet::new())
    }

    fn run_superseding(
        primary: &Value,
        children: &[Value],
        cluster: &[Value],
        last: Option<u64>,
        r: ValidResponse,
        superseded: &BTreeSet<String>,
    ) -> Plan {
        let current = |k: &ObjectKey| {
            cluster
                .iter()
                .find(|o| ObjectKey::of(o).as_ref() == Some(k))
                .cloned()
        };
        let last_applied = |_: &ObjectKey| last;
        let m = metadata();
        let observed = Observed {
            metadata: &m,
            primary,
            children,
            current: &current,
            last_applied: &last_applied,
            superseded_finalizers: superseded,
        };
        plan(&observed, r).unwrap()
    }

    #[test]
    fn owned_objects_get_the_controller_reference() {
        let p = primary(json!({}));
        let plan = run(&p, &[], &[], None, response(vec![deployment("web", 3)]));
        let refs = &plan.applies[0].object["metadata"]["ownerReferences"];
        assert_eq!(
            refs,
            &json!([{"apiVersion": "example.com/v1alpha1", "kind": "PodSet", "name": "web",
            "uid": "u-1", "controller": true, "blockOwnerDeletion": true}])
        );
        assert!(plan.applies[0].creates);
    }

    #[test]
    fn an_apply_the_cluster_already_matches_is_skipped() {
        let p = primary(json!({}));
        let first = run(&p, &[], &[], None, response(vec![deployment("web", 3)]));
        let applied = &first.applies[0];
        // What the server holds: the applied object plus server-set fields.
        let mut stored = applied.object.clone();
        stored["metadata"]["uid"] = json!("u-2");
        stored["metadata"]["resourceVersion"] = json!("7");
        stored["spec"]["strategy"] = json!({"type": "RollingUpdate"});
        let again = run(
            &p,
            &[stored.clone()],
            &[stored.clone()],
            Some(applied.fingerprint),
            response(vec![deployment("web", 3)]),
        );
        assert!(again.applies.is_empty(), "{again:?}");
        assert_eq!(again.unchanged.len(), 1);
        // A different desired state is sent.
        let scaled = run(
            &p,
            &[stored.clone()],
            &[stored.clone()],
            Some(applied.fingerprint),
            response(vec![deployment("web", 5)]),
        );
        assert_eq!(scaled.applies.len(), 1);
        assert!(!scaled.applies[0].creates);
        // After a restart (nothing remembered) it is sent once.
        let restarted = run(
            &p,
            &[stored.clone()],
            &[stored],
            None,
            response(vec![deployment("web", 3)]),
        );
        assert_eq!(restarted.applies.len(), 1);
    }

    #[test]
    fn children_no_longer_returned_are_pruned_and_requested_deletes_kept() {
        let p = primary(json!({}));
        let child = |name: &str| json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "d"}});
        let mut r = response(vec![deployment("keep", 1)]);
        r.delete.push(ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("d".into()),
            name: "asked".into(),
        });
        let plan = run(
            &p,
            &[child("keep"), child("stale"), child("asked")],
            &[],
            None,
            r,
        );
        let deletes: Vec<_> = plan
            .deletes
            .iter()
            .map(|(k, why)| (k.name.as_str(), *why))
            .collect();
        assert_eq!(
            deletes,
            [
                ("asked", DeleteReason::Requested),
                ("stale", DeleteReason::Pruned)
            ]
        );
    }

    #[test]
    fn status_is_written_only_when_it_differs() {
        let p = primary(json!({"status": {"podNames": ["a"]}}));
        let with_status = |names: Value| {
            let mut r = response(vec![]);
            let mut m = Map::new();
            m.insert("podNames".into(), names);
            r.status = Some(m);
            r
        };
        assert!(
            run(&p, &[], &[], None, with_status(json!(["a"])))
                .status
                .is_none()
        );
        assert_eq!(
            run(&p, &[], &[], None, with_status(json!(["a", "b"]))).status,
            Some(json!({"podNames": ["a", "b"]}))
        );
    }

    #[test]
    fn the_finalizer_is_released_only_when_deleting_and_done() {
        let deleting = primary(
            json!({"metadata": {"name": "web", "namespace": "d", "uid": "u-1",
            "deletionTimestamp": "2024-01-01T00:00:00Z", "finalizers": ["example.com/cleanup", "other.io/keep"]}}),
        );
        let mut done = response(vec![]);
        done.finalized = true;
        assert_eq!(
            run(&deleting, &[], &[], None, done.clone()).remove_finalizers,
            ["example.com/cleanup"]
        );
        assert!(
            run(&deleting, &[], &[], None, response(vec![]))
                .remove_finalizers
                .is_empty(),
            "not done yet"
        );
        let alive = primary(
            json!({"metadata": {"name": "web", "namespace": "d", "uid": "u-1", "finalizers": ["example.com/cleanup"]}}),
        );
        assert!(
            run(&alive, &[], &[], None, done)
                .remove_finalizers
                .is_empty(),
            "not deleting"
        );
    }

    #[test]
    fn finalized_also_releases_superseded_finalizers_the_object_carries() {
        let deleting = primary(
            json!({"metadata": {"name": "web", "namespace": "d", "uid": "u-1",
            "deletionTimestamp": "2024-01-01T00:00:00Z", "finalizers": ["example.com/old", "other.io/keep"]}}),
        );
        let superseded: BTreeSet<String> = ["example.com/old", "example.com/older"]
            .map(String::from)
            .into();
        let mut done = response(vec![]);
        done.finalized = true;
        assert_eq!(
            run_superseding(&deleting, &[], &[], None, done.clone(), &superseded).remove_finalizers,
            ["example.com/old"],
            "only those it carries; never another controller's"
        );
        assert!(
            run_superseding(&deleting, &[], &[], None, response(vec![]), &superseded)
                .remove_finalizers
                .is_empty(),
            "not before the new version says finalized"
        );
        let both = primary(
            json!({"metadata": {"name": "web", "namespace": "d", "uid": "u-1",
            "deletionTimestamp": "2024-01-01T00:00:00Z", "finalizers": ["example.com/old", "example.com/cleanup"]}}),
        );
        assert_eq!(
            run_superseding(&both, &[], &[], None, done, &superseded).remove_finalizers,
            ["example.com/cleanup", "example.com/old"],
            "its own first"
        );
    }

    #[test]
    fn subset_ignores_server_defaults_but_not_differences() {
        assert!(is_subset(
            &json!({"a": 1, "l": [{"x": 1}]}),
            &json!({"a": 1, "b": 2, "l": [{"x": 1, "y": 2}]})
        ));
        assert!(!is_subset(&json!({"a": 1}), &json!({"a": 2})));
        assert!(!is_subset(&json!({"l": [1, 2]}), &json!({"l": [1]})));
    }
}
