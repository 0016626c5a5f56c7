//! What the built-in controllers read of the objects they act on: their
//! controller references, the objects one controls, fields by pointer, and
//! an object as a field manager sends it back.
//!
//! Why a module: every controller follows controller references and reads
//! the same few fields, as kube-controller-manager's controllers share
//! their helpers.

use reconciler_contract::KindRef;
use reconciler_contract::object_meta::MetadataField;
use serde_json::Value;

use crate::cluster::backend::ObjectKey;
use crate::cluster::embedded::store::EmbeddedStore;

/// The key of the object's controller (the ownerReference with
/// `controller: true`), in the object's namespace.
pub(super) fn controller_key(object: &Value, key: &ObjectKey) -> Option<ObjectKey> {
    let refs = object.metadata_field("ownerReferences")?.as_array()?;
    let owner = refs
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?;
    let api_version = owner.get("apiVersion")?.as_str()?;
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = KindRef::new(group, version, owner.get("kind")?.as_str()?);
    Some(ObjectKey::new(
        kind,
        key.namespace.as_deref(),
        owner.get("name")?.as_str()?,
    ))
}

/// Whether `object`'s controller is the object with `uid`.
fn controlled_by(object: &Value, uid: &str) -> bool {
    object
        .metadata_field("ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|r| {
            r.get("controller").and_then(Value::as_bool) == Some(true)
                && r.get("uid").and_then(Value::as_str) == Some(uid)
        })
}

/// The controller ownerReference kube-controller-manager puts on what it
/// creates.
pub(super) fn controller_ref(owner: &Value) -> Value {
    let s = |p: &str| owner.pointer(p).cloned().unwrap_or(Value::Null);
    serde_json::json!({
        "apiVersion": s("/apiVersion"),
        "kind": s("/kind"),
        "name": s("/metadata/name"),
        "uid": s("/metadata/uid"),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// The live objects of `kind` that the object with `uid` controls, in key
/// order.
pub(super) fn controlled(store: &EmbeddedStore, uid: &str, kind: &str) -> Vec<(ObjectKey, Value)> {
    store
        .dependents_of(uid)
        .into_iter()
        .filter(|key| key.kind.kind == kind)
        .filter_map(|key| {
            let object = store.get(&key)?;
            controlled_by(&object, uid).then_some((key, object))
        })
        .collect()
}

/// The object as a field manager sends it back: without what the server
/// sets.
pub(super) fn as_applied(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
        if let Some(Value::Object(meta)) = map.get_mut("metadata") {
            for field in [
                "uid",
                "resourceVersion",
                "generation",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "managedFields",
            ] {
                meta.remove(field);
            }
        }
    }
    object
}

pub(super) fn int_at(object: &Value, pointer: &str) -> Option<i64> {
    object.pointer(pointer).and_then(Value::as_i64)
}

pub(super) fn str_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str)
}
