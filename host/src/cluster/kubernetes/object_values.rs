//! Objects from the API as the engine keeps them: JSON with their
//! apiVersion and kind, slimmed before anything keeps a copy.
//!
//! Why a module: a get, an apply, a finalizer patch and a watch event all
//! hand back objects, and all must hand them back alike.

use kube::api::{ApiResource, DynamicObject, PartialObjectMeta};
use serde_json::Value;

use crate::cluster::backend::{carrying_managers, slimmed};

/// An object as the engine wants it: JSON with apiVersion and kind (list
/// items lack them), slimmed before anything keeps a copy.
pub(super) fn to_value(object: DynamicObject, resource: &ApiResource) -> Value {
    slimmed(with_kind(object, resource))
}

/// `object` as JSON, with the apiVersion and kind list items lack; without
/// its `managedFields`, which slimming would drop anyway: never made a
/// tree, they cost a watch event more than the rest of its object.
fn with_kind(mut object: DynamicObject, resource: &ApiResource) -> Value {
    object.metadata.managed_fields = None;
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.entry("apiVersion")
            .or_insert_with(|| Value::String(resource.api_version.clone()));
        map.entry("kind")
            .or_insert_with(|| Value::String(resource.kind.clone()));
    }
    value
}

/// [`to_value`] for a watch: the object's `managedFields` are carried
/// beside it until its event is made (`WatchEvent::carrying`).
pub(super) fn to_watched_value(mut object: DynamicObject, resource: &ApiResource) -> Value {
    let managed_fields = object
        .metadata
        .managed_fields
        .take()
        .and_then(|entries| serde_json::to_string(&entries).ok());
    carrying_managers(slimmed(with_kind(object, resource)), managed_fields)
}

/// A metadata-only object as the engine wants it: under the kind it is
/// watched as, not `meta.k8s.io/v1 PartialObjectMetadata`.
pub(super) fn meta_to_value(
    mut object: PartialObjectMeta<DynamicObject>,
    resource: &ApiResource,
) -> Value {
    object.metadata.managed_fields = None;
    slimmed(serde_json::json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": object.metadata,
    }))
}
