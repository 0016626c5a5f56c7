//! The part of an apply that needs no store: the object checked, the
//! fields it sets picked out, and a create merged in advance.
//!
//! Why apart: the cluster does this before it locks the store, so a create
//! holds up no other write for its merge.

use serde_json::{Map, Value, json};

use super::errors::{StoreError, conflict};
use super::validation::validate_object;
use crate::cluster::backend::ObjectKey;
use crate::cluster::embedded::field_set::{Manager, Merge, Operation, Ownership};
use crate::cluster::embedded::namespace_object::{drop_server_fields, is_namespace_object};

/// Metadata the server owns; a client's values for these are ignored.
const SERVER_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// An apply checked, and for an object not stored yet merged, before the
/// store is locked: a create's merge needs nothing from the store, so it
/// need not hold up every other write.
pub struct PreparedApply {
    pub(super) key: ObjectKey,
    pub(super) field_manager: String,
    pub(super) force: bool,
    pub(super) config: Value,
    /// The create's merge, made when the caller expects the object to be new.
    pub(super) creation: Option<Merge>,
}

impl PreparedApply {
    pub fn new(
        object: Value,
        field_manager: &str,
        force: bool,
        expect_create: bool,
    ) -> Result<Self, StoreError> {
        let key = validate_object(&object)?;
        let config = main_config(object);
        let creation = if expect_create && !field_manager.trim().is_empty() {
            let manager = Manager::new(field_manager, Operation::Apply);
            Some(create_merge(&key, &config, &manager)?)
        } else {
            None
        };
        Ok(Self {
            key,
            field_manager: field_manager.to_string(),
            force,
            config,
            creation,
        })
    }
}

/// A create is an apply onto an object holding nothing but its identity.
pub(super) fn create_merge(
    key: &ObjectKey,
    config: &Value,
    manager: &Manager,
) -> Result<Merge, StoreError> {
    Ownership::default()
        .apply(&skeleton(key), config, manager, true)
        .map_err(|c| conflict(key, &c))
}

/// What a new object starts as before its first apply is merged in.
fn skeleton(key: &ObjectKey) -> Value {
    let mut meta = Map::new();
    meta.insert("name".into(), Value::String(key.name.clone()));
    if let Some(namespace) = &key.namespace {
        meta.insert("namespace".into(), Value::String(namespace.clone()));
    }
    json!({ "apiVersion": key.kind.api_version(), "kind": key.kind.kind, "metadata": meta })
}

/// The fields an apply to the main resource sets: everything except the
/// object's identity, server-owned metadata and status.
fn main_config(object: Value) -> Value {
    let namespace_object = is_namespace_object(&object);
    let mut config = object;
    if let Value::Object(map) = &mut config {
        for field in ["apiVersion", "kind", "status"] {
            map.remove(field);
        }
        if let Some(Value::Object(meta)) = map.get_mut("metadata") {
            for field in ["name", "namespace"].iter().chain(SERVER_METADATA) {
                meta.remove(*field);
            }
            if meta.is_empty() {
                map.remove("metadata");
            }
        }
    }
    if namespace_object {
        drop_server_fields(&mut config);
    }
    config
}
