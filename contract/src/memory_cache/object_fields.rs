//! What the cache reads of an object: its name, namespace, version,
//! labels, finalizers, deletion mark and controller references, and its
//! metadata-only projection.
//!
//! Why public and apart from the cache: the host and the SDK's harness
//! read objects by these same rules outside the cache too (a request's
//! `deleting`, a finalizer's presence), and must agree with what the cache
//! answers.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::object_meta::MetadataField;

/// `metadata.name` of a JSON object.
pub fn name_of(object: &Value) -> Option<&str> {
    object.metadata_field("name")?.as_str()
}

/// `metadata.resourceVersion` of a JSON object.
pub fn resource_version_of(object: &Value) -> Option<&str> {
    object.metadata_field("resourceVersion")?.as_str()
}

/// `metadata.namespace` of a JSON object.
pub fn namespace_of(object: &Value) -> Option<&str> {
    object.metadata_field("namespace")?.as_str()
}

/// Whether a JSON object has a deletionTimestamp: it is being deleted.
pub fn is_deleting(object: &Value) -> bool {
    object
        .metadata_field("deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// `metadata.finalizers` of a JSON object (string entries only), in order.
pub fn finalizers_of(object: &Value) -> Vec<&str> {
    object
        .metadata_field("finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// `metadata.labels` of a JSON object (string values only).
pub fn labels_of(object: &Value) -> BTreeMap<String, String> {
    object
        .metadata_field("labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

#[derive(Clone, Debug)]
pub(super) struct OwnerRef {
    kind: Option<String>,
    name: Option<String>,
    uid: Option<String>,
}

impl OwnerRef {
    /// By uid when both sides have one, otherwise by kind and name.
    pub(super) fn points_at(&self, owner: &Value) -> bool {
        let owner_uid = owner.metadata_field("uid").and_then(Value::as_str);
        match (self.uid.as_deref(), owner_uid) {
            (Some(a), Some(b)) => a == b,
            _ => {
                self.kind.as_deref() == owner.get("kind").and_then(Value::as_str)
                    && self.name.as_deref() == name_of(owner)
            }
        }
    }
}

pub(super) fn controller_refs(object: &Value) -> Box<[OwnerRef]> {
    let text = |r: &Value, field: &str| r.get(field).and_then(Value::as_str).map(str::to_string);
    object
        .metadata_field("ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
                .map(|r| OwnerRef {
                    kind: text(r, "kind"),
                    name: text(r, "name"),
                    uid: text(r, "uid"),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether an object has no members but `apiVersion`, `kind` and
/// `metadata`: it is its own [`metadata_only`] form, but for managedFields.
pub(super) fn is_metadata_only(object: &Value) -> bool {
    object.as_object().is_some_and(|members| {
        members
            .keys()
            .all(|k| matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
    })
}

/// `apiVersion`, `kind` and `metadata` of an object, without managedFields
/// (bookkeeping of the API server that no plugin decides on).
pub fn metadata_only(object: &Value) -> Value {
    let mut metadata = object.get("metadata").cloned().unwrap_or_default();
    if let Some(m) = metadata.as_object_mut() {
        m.remove("managedFields");
    }
    serde_json::json!({
        "apiVersion": object.get("apiVersion"),
        "kind": object.get("kind"),
        "metadata": metadata,
    })
}

/// The text of [`metadata_only`], written from the object as it is rather
/// than from a copy of its metadata: the cache makes it for every object it
/// takes in.
pub(super) fn metadata_only_json(object: &Value) -> String {
    /// `metadata` without `managedFields`.
    struct Metadata<'a>(Option<&'a Value>);
    impl serde::Serialize for Metadata<'_> {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeMap;
            match self.0 {
                Some(Value::Object(members)) => {
                    let kept = members.iter().filter(|(k, _)| *k != "managedFields");
                    let mut map = serializer.serialize_map(None)?;
                    for (k, v) in kept {
                        map.serialize_entry(k, v)?;
                    }
                    map.end()
                }
                Some(other) => other.serialize(serializer),
                None => serializer.serialize_unit(),
            }
        }
    }
    /// In the order of `metadata_only`'s map: apiVersion, kind, metadata.
    #[derive(serde::Serialize)]
    struct MetadataOnly<'a> {
        #[serde(rename = "apiVersion")]
        api_version: Option<&'a Value>,
        kind: Option<&'a Value>,
        metadata: Metadata<'a>,
    }
    let projection = MetadataOnly {
        api_version: object.get("apiVersion"),
        kind: object.get("kind"),
        metadata: Metadata(object.get("metadata")),
    };
    let json = serde_json::to_string(&projection).unwrap_or_default();
    debug_assert_eq!(json, metadata_only(object).to_string());
    json
}

/// Whether `object` has a controller ownerReference to `owner`.
pub fn is_controlled_by(object: &Value, owner: &Value) -> bool {
    controller_refs(object).iter().any(|r| r.points_at(owner))
}
