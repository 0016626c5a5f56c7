//! Metadata fields the host or the API server owns. A plugin that could set
//! them could reach past its declarations: an ownerReference on a written
//! kind hands someone else's object to the garbage collector, a finalizer
//! blocks its deletion forever, a resourceVersion or uid turns an apply into
//! a precondition that fails, and the rest are silently stored by the API
//! server on create (a `generation: 7`, a `deletionTimestamp` in the past).

use serde_json::{Map, Value};

/// Each field with who sets it, in the order they are checked (the first one
/// a response sets is the one reported).
const HOST_OWNED: &[(&str, &str)] = &[
    (
        "ownerReferences",
        "is set by the host (the controller reference of owned kinds)",
    ),
    (
        "finalizers",
        "is set by the host (the plugin's declared finalizer, on its primary only)",
    ),
    ("uid", "is set by the API server"),
    (
        "resourceVersion",
        "is set by the API server (in an apply it is a precondition that fails with a conflict)",
    ),
    (
        "managedFields",
        "is kept by the API server (which fields each field manager set)",
    ),
    (
        "deletionTimestamp",
        "is set by the API server when the object is deleted",
    ),
    (
        "deletionGracePeriodSeconds",
        "is set by the API server when the object is deleted",
    ),
    ("generation", "is set by the API server"),
    ("creationTimestamp", "is set by the API server"),
    ("selfLink", "is set by the API server"),
];

/// Refuses the first host-owned field `metadata` sets. A field sent as JSON
/// `null` counts as absent and is removed, so the host's own value goes in
/// its place (an owned object sent with `"ownerReferences": null` still gets
/// its controller reference).
pub(super) fn refuse_host_owned(metadata: &mut Map<String, Value>) -> Result<(), String> {
    for (field, owner) in HOST_OWNED {
        match metadata.get(*field) {
            None => {}
            Some(Value::Null) => {
                metadata.remove(*field);
            }
            Some(_) => {
                return Err(format!("metadata.{field} {owner}; a plugin may not set it"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn meta(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("tests pass objects"),
        }
    }

    #[test]
    fn every_host_owned_field_is_refused_by_name() {
        let values = [
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u"}]),
            json!(["example.com/stuck"]),
            json!("3f1c2b8e-0000-4000-8000-000000000001"),
            json!("42"),
            json!([{"manager": "x", "operation": "Apply"}]),
            json!("2020-01-01T00:00:00Z"),
            json!(5),
            json!(7),
            json!("2020-01-01T00:00:00Z"),
            json!("/api/v1/namespaces/a/configmaps/b"),
        ];
        assert_eq!(values.len(), HOST_OWNED.len());
        for ((field, _), value) in HOST_OWNED.iter().zip(values) {
            let mut m = meta(json!({"name": "cm"}));
            m.insert(field.to_string(), value);
            let err = refuse_host_owned(&mut m).expect_err(field);
            assert!(
                err.starts_with(&format!("metadata.{field} is "))
                    && err.ends_with("may not set it"),
                "{err}"
            );
        }
    }

    #[test]
    fn an_owner_reference_names_the_controller_reference() {
        let mut m = meta(json!({"name": "sa", "ownerReferences": []}));
        assert_eq!(
            refuse_host_owned(&mut m).unwrap_err(),
            "metadata.ownerReferences is set by the host (the controller reference of owned kinds); a plugin may not set it"
        );
    }

    #[test]
    fn null_fields_count_as_absent_and_are_removed() {
        let mut m = meta(
            json!({"name": "cm", "ownerReferences": null, "finalizers": null,
            "uid": null, "labels": {"a": "b"}}),
        );
        refuse_host_owned(&mut m).unwrap();
        assert_eq!(
            Value::Object(m),
            json!({"name": "cm", "labels": {"a": "b"}})
        );
    }
}
