//! What a Namespace object holds that the API server owns: the `kubernetes`
//! finalizer in its spec and its phase.
//!
//! Why apart from [`super::namespaces`]: the store reads and sets these on
//! every write of a Namespace, and namespace termination builds on the
//! store; with these here the store depends on neither.

use reconciler_contract::KindRef;
use serde_json::{Value, json};

use crate::cluster::backend::ObjectKey;

/// The finalizer an API server puts in every Namespace's `spec.finalizers`:
/// the namespace controller removes it once the namespace is empty.
pub const NAMESPACE_FINALIZER: &str = "kubernetes";

pub(super) fn namespace_kind() -> KindRef {
    KindRef::new("", "v1", "Namespace")
}

/// Whether `key` names a Namespace object.
pub fn is_namespace(key: &ObjectKey) -> bool {
    key.kind.group.is_empty() && key.kind.kind == "Namespace"
}

pub(super) fn is_namespace_object(object: &Value) -> bool {
    object.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && object.get("kind").and_then(Value::as_str) == Some("Namespace")
}

/// The entries of a Namespace's `spec.finalizers` (empty for other kinds,
/// whose spec may mean anything).
pub(super) fn namespace_finalizers(object: &Value) -> Vec<&str> {
    if !is_namespace_object(object) {
        return Vec::new();
    }
    let list = object.pointer("/spec/finalizers").and_then(Value::as_array);
    list.into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// What a new Namespace gets from the server.
pub(super) fn set_defaults(object: &mut Value) {
    if let Some(map) = object.as_object_mut() {
        let spec = map.entry("spec").or_insert_with(|| json!({}));
        if let Some(spec) = spec.as_object_mut() {
            spec.insert("finalizers".into(), json!([NAMESPACE_FINALIZER]));
        }
        map.insert("status".into(), json!({"phase": "Active"}));
    }
}

/// Removes from a Namespace's applied configuration what the server owns
/// on it: its `spec.finalizers`.
pub(super) fn drop_server_fields(config: &mut Value) {
    if let Some(spec) = config.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("finalizers");
    }
}
