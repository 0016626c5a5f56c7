//! Reading and editing an object's metadata as the embedded API server
//! does: its uid, finalizers, deletion mark and generation.
//!
//! Why a module of its own: the store, its garbage collector, namespace
//! termination and the built-in controllers all make these small edits; kept
//! here, below all of them, none of those has to reach into another for them.

use reconciler_contract::object_meta::MetadataField;
use serde_json::{Map, Value, json};

pub(super) use reconciler_contract::memory_cache::{finalizers_of as finalizers, is_deleting};

pub(super) fn uid_of(object: &Value) -> Option<&str> {
    object.metadata_field("uid").and_then(Value::as_str)
}

/// `object` with `finalizer` appended (if missing).
pub(super) fn with_finalizer(object: &Value, finalizer: &str) -> Value {
    let mut object = object.clone();
    let meta = metadata_mut(&mut object);
    let list = meta.entry("finalizers").or_insert_with(|| json!([]));
    if let Value::Array(items) = list
        && !items.iter().any(|f| f.as_str() == Some(finalizer))
    {
        items.push(Value::String(finalizer.to_string()));
    }
    object
}

/// `object` without `finalizer`; an emptied list is removed.
pub(super) fn without_finalizer(object: &Value, finalizer: &str) -> Value {
    let mut object = object.clone();
    let meta = metadata_mut(&mut object);
    if let Some(Value::Array(items)) = meta.get_mut("finalizers") {
        items.retain(|f| f.as_str() != Some(finalizer));
        if items.is_empty() {
            meta.remove("finalizers");
        }
    }
    object
}

/// The object's metadata map, created if missing.
pub(super) fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.is_object() {
        *object = Value::Object(Map::new());
    }
    let Value::Object(map) = object else {
        unreachable!("just made a map");
    };
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    let Value::Object(meta) = meta else {
        unreachable!("just made a map");
    };
    meta
}

pub(super) fn bump_generation(object: &mut Value) {
    let meta = metadata_mut(object);
    let generation = meta.get("generation").and_then(Value::as_i64).unwrap_or(0);
    meta.insert("generation".into(), json!(generation + 1));
}
