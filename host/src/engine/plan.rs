//! From a validated response to the calls that realise it.
//!
//! Planning is a pure function of what the plugin asked for and what the
//! cache holds, so every rule here is tested without a cluster:
//! - owned objects get the controller ownerReference to the primary;
//! - an apply is skipped when the cluster already holds every desired field
//!   and this host already applied exactly this desired object (a native
//!   controller re-sends the same apply after every event; this host sends
//!   nothing);
//! - a written object (`writes`) is applied only if it exists: creating is
//!   what `owns` is for, and an object nobody owns would never be pruned;
//! - an owned object that exists is applied only if this primary controls
//!   it: one controlled by someone else is never taken over, and one with
//!   no controller is never adopted silently (controller-runtime's
//!   `AlreadyOwnedError`);
//! - a requested delete names one of the children the reconcile observed
//!   (controller ownerReference to this primary, by uid);
//! - owned children the plugin no longer returns are pruned;
//! - deletes and prunes carry the uid of the object the reconcile saw, so a
//!   namesake created since is left alone;
//! - status is written only when it differs;
//! - the finalizer is released only when the plugin says cleanup is done,
//!   and with it any finalizer of an earlier version it answers for (see
//!   [`super::finalizer_handover`]).

use reconciler_contract::object_meta::MetadataField;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::time::Duration;

use reconciler_contract::Event;
use reconciler_contract::memory_cache::{finalizers_of, is_deleting};
use reconciler_contract::{KindRef, ObjectRef, PluginMetadata};
use serde_json::{Value, json};

use crate::cluster::ObjectKey;
use crate::plugin::{DesiredObject, ValidResponse, WriteRole};

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

/// One delete to send: of exactly the object the reconcile observed.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedDelete {
    pub key: ObjectKey,
    /// The uid observed; the delete is a no-op if the name now belongs to
    /// another object.
    pub uid: Option<String>,
    pub reason: DeleteReason,
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
    pub deletes: Vec<PlannedDelete>,
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
    /// The primary's owned children, exactly as the plugin was shown them.
    pub children: &'a [Value],
    /// The cached state of an object the plugin wants applied; borrowed
    /// when it is one of `children` as shown, unchanged since.
    pub current: &'a dyn Fn(&ObjectKey) -> Option<Cow<'a, Value>>,
    /// The fingerprint of what this host last applied to an object.
    pub last_applied: &'a dyn Fn(&ObjectKey) -> Option<u64>,
    /// Finalizers of earlier versions of the plugin that it now answers for.
    pub superseded_finalizers: &'a BTreeSet<String>,
}

/// Why a response cannot be carried out, though every item is well formed:
/// the whole response is refused before anything is applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the primary has no metadata.uid, so its children cannot reference it")]
    NoUid,
    /// A delete of an object that is not one of this primary's children.
    #[error("invalid response: {item}: not controlled by {primary}")]
    NotControlled { item: String, primary: String },
    /// An owned object that exists and is controlled by someone else.
    #[error(
        "{item}: already controlled by {controller}; a plugin never takes over an object another controller owns (rename the object, or have its controller give it up)"
    )]
    AlreadyOwned { item: String, controller: String },
    /// An owned object that exists with no controller.
    #[error(
        "{item}: exists and has no controller, and the host does not adopt objects silently. {how_to_resolve}"
    )]
    NotAdopted {
        item: String,
        how_to_resolve: String,
    },
    /// A written (not owned) object that does not exist.
    #[error(
        "{item}: does not exist, and a kind the plugin declares in `writes` is only patched, never created (nothing would own or prune it); declare the kind in `owns` to create it, or leave the object out until it exists"
    )]
    WouldCreate { item: String },
}

impl Refusal {
    /// A short, stable name for Event reasons and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::NoUid => "InvalidPrimary",
            Refusal::NotControlled { .. } => "InvalidResponse",
            Refusal::AlreadyOwned { .. } => "AlreadyOwned",
            Refusal::NotAdopted { .. } => "AdoptionRefused",
            Refusal::WouldCreate { .. } => "WriteOfAbsentObject",
        }
    }
}

pub fn plan(observed: &Observed<'_>, response: ValidResponse) -> Result<Plan, Refusal> {
    let primary = observed.primary;
    let primary_uid = primary
        .metadata_field("uid")
        .and_then(Value::as_str)
        .ok_or(Refusal::NoUid)?;
    let mut plan = Plan {
        events: response.events,
        requeue_after: response.requeue_after,
        ..Plan::default()
    };
    let desired_owned = plan_applies(observed, primary_uid, response.apply, &mut plan)?;
    plan_deletes(observed, response.delete, &desired_owned, &mut plan)?;
    if let Some(status) = response.status {
        let status = Value::Object(status);
        // Numbers by value: the API server keeps `1.0` as `1`, and a
        // status compared as text would be written at every reconcile.
        let same = primary
            .get("status")
            .is_some_and(|held| is_subset(held, &status) && is_subset(&status, held));
        if !same {
            plan.status = Some(status);
        }
    }
    if is_deleting(primary) && response.finalized {
        plan.remove_finalizers = finalizers_to_remove(observed);
    }
    Ok(plan)
}

/// Plans the applies of a response, skipping those the cluster already
/// holds as this host last applied them; returns the owned objects it
/// still wants, which are not pruned.
fn plan_applies(
    observed: &Observed<'_>,
    primary_uid: &str,
    apply: Vec<DesiredObject>,
    plan: &mut Plan,
) -> Result<BTreeSet<ObjectKey>, Refusal> {
    let primary = observed.primary;
    let mut desired_owned = BTreeSet::new();
    for (index, desired) in apply.into_iter().enumerate() {
        let mut object = desired.object;
        if desired.role == WriteRole::Owned {
            set_controller_reference(&mut object, primary)?;
        }
        let Some(key) = ObjectKey::of(&object) else {
            continue;
        };
        let current = (observed.current)(&key);
        match (desired.role, &current) {
            (WriteRole::Owned, current) => {
                if let Some(current) = current {
                    check_adoption(index, &key, current, primary, primary_uid)?;
                }
                desired_owned.insert(key.clone());
            }
            (WriteRole::Written, None) => {
                return Err(Refusal::WouldCreate {
                    item: apply_item(index, &key),
                });
            }
            (WriteRole::Written, Some(_)) => {}
        }
        let fingerprint = fingerprint(&object);
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
    Ok(desired_owned)
}

/// Plans the deletes a response asks for, each of a child the plugin was
/// shown (with the uid it saw), and prunes the owned children it no
/// longer wants.
fn plan_deletes(
    observed: &Observed<'_>,
    delete: Vec<ObjectRef>,
    desired_owned: &BTreeSet<ObjectKey>,
    plan: &mut Plan,
) -> Result<(), Refusal> {
    // The children the plugin was shown, by key: the only objects it may
    // delete, each with the uid it saw.
    let children: BTreeMap<ObjectKey, &Value> = observed
        .children
        .iter()
        .filter_map(|c| ObjectKey::of(c).map(|k| (k, c)))
        .collect();
    for (index, r) in delete.into_iter().enumerate() {
        let kind = KindRef::from_api_version(&r.api_version, &r.kind);
        let key = ObjectKey::new(kind, r.namespace.as_deref(), &r.name);
        let Some(child) = children.get(&key) else {
            return Err(Refusal::NotControlled {
                item: format!("delete[{index}] ({} {} {})", r.api_version, r.kind, r.name),
                primary: primary_name(observed.primary),
            });
        };
        plan.deletes.push(PlannedDelete {
            uid: uid_of(child),
            key,
            reason: DeleteReason::Requested,
        });
    }
    for (key, child) in children {
        let deleting = is_deleting(child);
        let requested = plan.deletes.iter().any(|d| d.key == key);
        if !desired_owned.contains(&key) && !deleting && !requested {
            plan.deletes.push(PlannedDelete {
                uid: uid_of(child),
                key,
                reason: DeleteReason::Pruned,
            });
        }
    }
    Ok(())
}

/// The finalizers a finished cleanup releases: the plugin's own, then
/// superseded ones of earlier versions, each only if the primary carries
/// it.
fn finalizers_to_remove(observed: &Observed<'_>) -> Vec<String> {
    let mut remove: Vec<String> = Vec::new();
    for finalizer in observed
        .metadata
        .finalizer
        .iter()
        .chain(observed.superseded_finalizers)
    {
        if has_finalizer(observed.primary, finalizer) && !remove.contains(finalizer) {
            remove.push(finalizer.clone());
        }
    }
    remove
}

/// Whether `object` carries `finalizer`.
pub fn has_finalizer(object: &Value, finalizer: &str) -> bool {
    finalizers_of(object).contains(&finalizer)
}

/// Refuses to apply an owned object over an existing one this primary does
/// not control: applying would make the primary a second controller (the
/// API server refuses that) or adopt an object someone made by hand.
fn check_adoption(
    index: usize,
    key: &ObjectKey,
    current: &Value,
    primary: &Value,
    primary_uid: &str,
) -> Result<(), Refusal> {
    let item = apply_item(index, key);
    let controller = current
        .metadata_field("ownerReferences")
        .and_then(Value::as_array)
        .and_then(|refs| {
            refs.iter()
                .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        });
    match controller {
        Some(r) if r.get("uid").and_then(Value::as_str) == Some(primary_uid) => Ok(()),
        Some(r) => {
            let text = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or("?");
            Err(Refusal::AlreadyOwned {
                item,
                controller: format!("{} {} (uid {})", text("kind"), text("name"), text("uid")),
            })
        }
        None => Err(Refusal::NotAdopted {
            item,
            how_to_resolve: how_to_adopt(key, current, primary, primary_uid),
        }),
    }
}

/// `apply[1] (apps/v1 Deployment web)`, as refusals name an apply.
fn apply_item(index: usize, key: &ObjectKey) -> String {
    format!(
        "apply[{index}] ({} {})",
        key.kind.api_version(),
        describe_key(key)
    )
}

/// `Deployment web` or `Deployment team/web`, as items name objects.
fn describe_key(key: &ObjectKey) -> String {
    format!("{} {}", key.kind.kind, key.name)
}

/// The kubectl commands that let the primary take the object: delete it so
/// the host creates it, or make the primary its controller by hand.
fn how_to_adopt(key: &ObjectKey, current: &Value, primary: &Value, primary_uid: &str) -> String {
    let mut resource = key.kind.kind.to_lowercase();
    if !key.kind.group.is_empty() {
        resource = format!("{resource}.{}", key.kind.group);
    }
    let ns = key
        .namespace
        .as_deref()
        .map(|ns| format!(" -n {ns}"))
        .unwrap_or_default();
    let reference = json!({
        "apiVersion": primary.get("apiVersion"),
        "kind": primary.get("kind"),
        "name": primary.metadata_field("name"),
        "uid": primary_uid,
        "controller": true,
        "blockOwnerDeletion": true,
    });
    let has_refs = current
        .metadata_field("ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty());
    let patch = if has_refs {
        format!(
            "--type=json -p '{}'",
            json!([{"op": "add", "path": "/metadata/ownerReferences/-", "value": reference}])
        )
    } else {
        format!(
            "--type=merge -p '{}'",
            json!({"metadata": {"ownerReferences": [reference]}})
        )
    };
    format!(
        "To let {} manage it, delete it so the host creates it (kubectl delete {resource} {}{ns}), \
         or make it the controller: kubectl patch {resource} {}{ns} {patch}",
        primary_name(primary),
        key.name,
        key.name
    )
}

/// `PodSet team-a/quartz`, as messages name the primary.
fn primary_name(primary: &Value) -> String {
    ObjectKey::of(primary).map_or_else(|| "the primary".to_string(), |k| k.to_string())
}

/// The uid of `object`, if it has one.
pub fn uid_of(object: &Value) -> Option<String> {
    object
        .metadata_field("uid")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// Makes `primary` the controller owner of `object`. Validation refuses a
/// plugin's own ownerReferences (and drops a `null`), so this sets the one
/// reference the host owns; anything else found there is replaced, never
/// kept beside it.
fn set_controller_reference(object: &mut Value, primary: &Value) -> Result<(), Refusal> {
    let uid = primary
        .metadata_field("uid")
        .and_then(Value::as_str)
        .ok_or(Refusal::NoUid)?;
    let reference = json!({
        "apiVersion": primary.get("apiVersion"),
        "kind": primary.get("kind"),
        "name": primary.metadata_field("name"),
        "uid": uid,
        "controller": true,
        "blockOwnerDeletion": true,
    });
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    meta.insert("ownerReferences".into(), json!([reference]));
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
    use reconciler_contract::ObjectRef;
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
        try_run(primary, children, cluster, last, r).unwrap()
    }

    fn try_run(
        primary: &Value,
        children: &[Value],
        cluster: &[Value],
        last: Option<u64>,
        r: ValidResponse,
    ) -> Result<Plan, Refusal> {
        try_run_superseding(primary, children, cluster, last, r, &BTreeSet::new())
    }

    fn run_superseding(
        primary: &Value,
        children: &[Value],
        cluster: &[Value],
        last: Option<u64>,
        r: ValidResponse,
        superseded: &BTreeSet<String>,
    ) -> Plan {
        try_run_superseding(primary, children, cluster, last, r, superseded).unwrap()
    }

    fn try_run_superseding(
        primary: &Value,
        children: &[Value],
        cluster: &[Value],
        last: Option<u64>,
        r: ValidResponse,
        superseded: &BTreeSet<String>,
    ) -> Result<Plan, Refusal> {
        let current = |k: &ObjectKey| {
            cluster
                .iter()
                .find(|o| ObjectKey::of(o).as_ref() == Some(k))
                .map(Cow::Borrowed)
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
        plan(&observed, r)
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
        let child = |name: &str| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "d", "uid": format!("uid-{name}"),
                "ownerReferences": [{"kind": "PodSet", "name": "web", "uid": "u-1", "controller": true}]}})
        };
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
            .map(|d| (d.key.name.as_str(), d.uid.as_deref(), d.reason))
            .collect();
        assert_eq!(
            deletes,
            [
                ("asked", Some("uid-asked"), DeleteReason::Requested),
                ("stale", Some("uid-stale"), DeleteReason::Pruned)
            ]
        );
    }

    fn delete_of(name: &str) -> ValidResponse {
        let mut r = response(vec![]);
        r.delete.push(ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("d".into()),
            name: name.into(),
        });
        r
    }

    #[test]
    fn only_the_children_the_reconcile_saw_can_be_deleted() {
        let p = primary(json!({}));
        // In the cluster, but not a child: a stranger with no owner, and a
        // sibling primary's child.
        let stranger = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "stranger", "namespace": "d", "uid": "s"}});
        let siblings = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "theirs", "namespace": "d", "uid": "t",
                "ownerReferences": [{"kind": "PodSet", "name": "other", "uid": "u-2", "controller": true}]}});
        let cluster = [stranger, siblings];
        for name in ["stranger", "theirs"] {
            let refused = try_run(&p, &[], &cluster, None, delete_of(name)).unwrap_err();
            assert_eq!(
                refused.to_string(),
                format!(
                    "invalid response: delete[0] (apps/v1 Deployment {name}): not controlled by PodSet d/web"
                )
            );
            assert_eq!(refused.reason(), "InvalidResponse");
        }
    }

    #[test]
    fn an_object_another_controller_owns_is_never_taken_over() {
        let p = primary(json!({}));
        let victim = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "d", "uid": "v",
                "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "Keeper", "name": "k",
                    "uid": "k-1", "controller": true}]},
            "spec": {"replicas": 7}});
        // Legal items before it change nothing: the whole response is refused.
        let refused = try_run(
            &p,
            &[],
            &[victim],
            None,
            response(vec![deployment("fine", 1), deployment("web", 99)]),
        )
        .unwrap_err();
        assert_eq!(refused.reason(), "AlreadyOwned");
        let message = refused.to_string();
        assert!(
            message.starts_with(
                "apply[1] (apps/v1 Deployment web): already controlled by Keeper k (uid k-1)"
            ),
            "{message}"
        );
    }

    #[test]
    fn an_object_with_no_controller_is_not_adopted_silently() {
        let p = primary(json!({}));
        let orphan = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "d", "uid": "o"}});
        let refused = try_run(
            &p,
            &[],
            &[orphan],
            None,
            response(vec![deployment("web", 3)]),
        )
        .unwrap_err();
        assert_eq!(refused.reason(), "AdoptionRefused");
        let message = refused.to_string();
        assert!(
            message.contains("exists and has no controller")
                && message.contains("kubectl delete deployment.apps web -n d")
                && message.contains(r#"kubectl patch deployment.apps web -n d --type=merge -p '{"metadata":{"ownerReferences":[{"apiVersion":"example.com/v1alpha1","blockOwnerDeletion":true,"controller":true,"kind":"PodSet","name":"web","uid":"u-1"}]}}'"#),
            "{message}"
        );
        // One this primary controls is applied as usual.
        let mine = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "d", "uid": "o",
                "ownerReferences": [{"kind": "PodSet", "name": "web", "uid": "u-1", "controller": true}]}});
        let plan = run(&p, &[], &[mine], None, response(vec![deployment("web", 3)]));
        assert_eq!(plan.applies.len(), 1);
    }

    fn written_config_map(name: &str) -> DesiredObject {
        DesiredObject {
            kind: KindRef::new("", "v1", "ConfigMap"),
            role: WriteRole::Written,
            object: json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "d"}, "data": {"k": "v"}}),
        }
    }

    #[test]
    fn a_written_object_is_patched_only_if_it_exists() {
        let p = primary(json!({}));
        // Absent: refused whole, the legal owned apply before it included.
        let refused = try_run(
            &p,
            &[],
            &[],
            None,
            response(vec![deployment("fine", 1), written_config_map("shared")]),
        )
        .unwrap_err();
        assert_eq!(refused.reason(), "WriteOfAbsentObject");
        let message = refused.to_string();
        assert!(
            message.starts_with("apply[1] (v1 ConfigMap shared): does not exist")
                && message.contains("declare the kind in `owns` to create it"),
            "{message}"
        );
        // Present (someone else made it): patched, not owned, never pruned.
        let existing = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "shared", "namespace": "d", "uid": "c"}});
        let plan = run(
            &p,
            &[],
            &[existing],
            None,
            response(vec![written_config_map("shared")]),
        );
        assert_eq!(plan.applies.len(), 1);
        assert!(!plan.applies[0].creates);
        assert_eq!(
            plan.applies[0].object["metadata"].get("ownerReferences"),
            None
        );
        assert!(plan.deletes.is_empty());
    }

    #[test]
    fn null_owner_references_still_get_the_controller_reference() {
        let p = primary(json!({}));
        let mut d = deployment("web", 3);
        d.object["metadata"]["ownerReferences"] = Value::Null;
        let plan = run(&p, &[], &[], None, response(vec![d]));
        assert_eq!(
            plan.applies[0].object["metadata"]["ownerReferences"][0]["uid"],
            "u-1"
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

    #[test]
    fn a_status_the_api_server_keeps_with_numbers_written_otherwise_is_not_written_again() {
        let p = primary(json!({"status": {"ratio": 1, "names": ["a"]}}));
        let with_status = |status: Value| {
            let mut r = response(vec![]);
            r.status = status.as_object().cloned();
            r
        };
        let same = run(
            &p,
            &[],
            &[],
            None,
            with_status(json!({"ratio": 1.0, "names": ["a"]})),
        );
        assert_eq!(same.status, None);
        let fewer = run(&p, &[], &[], None, with_status(json!({"ratio": 1.0})));
        assert!(fewer.status.is_some(), "a field dropped is a change");
    }
}
