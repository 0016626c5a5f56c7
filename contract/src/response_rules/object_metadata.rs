//! An object's metadata as the API server would check it, so that a response
//! the server would refuse midway is refused before any of it is applied.
//! Each rule was compared with kube-apiserver 1.28: what it accepts passes
//! here (an empty label value, a prefixed annotation key, 256 KiB of
//! annotations), what it refuses (a number as a label value, a malformed
//! key, one byte more) is refused here with the key named.

use crate::KindRef;
use serde_json::{Map, Value};

use super::json_type::json_type;
use crate::names::{check_dns_label, check_label_value, check_object_name, check_qualified_name};

/// The API server's limit on an object's annotations: the bytes of every
/// key and value together.
pub(super) const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

/// Checks the metadata of an object of `kind` whose `metadata.name` is
/// `name`. Normalizes what the API server would: JSON `null` fields are
/// removed, `null` label and annotation values become empty strings.
pub(super) fn check_metadata(
    kind: &KindRef,
    name: &str,
    metadata: &mut Map<String, Value>,
) -> Result<(), String> {
    metadata.retain(|_, v| !v.is_null());
    check_object_name(kind, name).map_err(|e| format!("metadata.name {e}"))?;
    if metadata.contains_key("generateName") {
        return Err(
            "metadata.generateName is not supported: the host applies, compares and prunes objects by their name; set metadata.name only".into(),
        );
    }
    if let Some(namespace) = metadata.get("namespace") {
        let Some(namespace) = namespace.as_str() else {
            return Err(format!(
                "metadata.namespace must be a string, got {}",
                json_type(namespace)
            ));
        };
        check_dns_label(namespace).map_err(|e| format!("metadata.namespace {e}"))?;
    }
    if let Some(labels) = metadata.get_mut("labels") {
        let labels = string_map("labels", labels)?;
        for (key, value) in labels {
            check_qualified_name(key).map_err(|e| format!("metadata.labels key {e}"))?;
            check_label_value(value).map_err(|e| format!("metadata.labels[{key:?}] value {e}"))?;
        }
    }
    if let Some(annotations) = metadata.get_mut("annotations") {
        let annotations = string_map("annotations", annotations)?;
        let mut bytes = 0;
        for (key, value) in annotations {
            // The API server checks annotation keys case-insensitively.
            check_qualified_name(&key.to_ascii_lowercase())
                .map_err(|e| format!("metadata.annotations key {e}"))?;
            bytes += key.len() + value.len();
        }
        if bytes > ANNOTATIONS_MAX_BYTES {
            return Err(format!(
                "metadata.annotations hold {bytes} bytes (keys and values), over the API server's limit of {ANNOTATIONS_MAX_BYTES}"
            ));
        }
    }
    Ok(())
}

/// `value` as a map of strings, `null` values made empty strings as the API
/// server stores them; anything else is refused naming the key.
fn string_map<'a>(field: &str, value: &'a mut Value) -> Result<Vec<(&'a str, &'a str)>, String> {
    let Value::Object(map) = value else {
        return Err(format!(
            "metadata.{field} must be a map of strings, got {}",
            json_type(value)
        ));
    };
    for (key, v) in map.iter_mut() {
        match v {
            Value::String(_) => {}
            Value::Null => *v = Value::String(String::new()),
            other => {
                let hint = match other {
                    Value::Number(_) | Value::Bool(_) => format!(" (quote it: \"{other}\")"),
                    _ => String::new(),
                };
                return Err(format!(
                    "metadata.{field}[{key:?}] must be a string, got {}{hint}",
                    json_type(other)
                ));
            }
        }
    }
    Ok(map
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or_default()))
        .collect())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn config_map() -> KindRef {
        KindRef::new("", "v1", "ConfigMap")
    }

    fn check(metadata: Value) -> Result<Value, String> {
        let Value::Object(mut m) = metadata else {
            unreachable!("tests pass objects")
        };
        let name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("cm")
            .to_string();
        check_metadata(&config_map(), &name, &mut m).map(|()| Value::Object(m))
    }

    /// Annotations whose keys and values add up to `bytes`.
    fn annotations_of(bytes: usize) -> Value {
        json!({"a": "x".repeat(bytes - 1)})
    }

    #[test]
    fn what_the_api_server_accepts_passes() {
        let ok = check(json!({"name": "a.b", "namespace": "team",
            "labels": {"empty": "", "long": "a".repeat(63), "example.com/tier": "A_b.c-D"},
            "annotations": {"example.com/x": "y", "Example.COM/Y": "z", "note": "any text, even spaces"}}));
        assert!(ok.is_ok(), "{ok:?}");
        assert!(check(json!({"annotations": annotations_of(ANNOTATIONS_MAX_BYTES)})).is_ok());
    }

    #[test]
    fn each_broken_rule_names_the_field_and_key() {
        let cases = [
            (json!({"name": "Upper"}), "metadata.name \"Upper\""),
            (
                json!({"generateName": "cm-"}),
                "metadata.generateName is not supported",
            ),
            (
                json!({"namespace": 5}),
                "metadata.namespace must be a string, got a number",
            ),
            (json!({"namespace": "a.b"}), "metadata.namespace \"a.b\""),
            (
                json!({"labels": ["a"]}),
                "metadata.labels must be a map of strings, got an array",
            ),
            (
                json!({"labels": {"tier": 3}}),
                "metadata.labels[\"tier\"] must be a string, got a number (quote it: \"3\")",
            ),
            (
                json!({"labels": {"bad key!": "x"}}),
                "metadata.labels key \"bad key!\"",
            ),
            (
                json!({"labels": {"Example.com/x": "y"}}),
                "metadata.labels key prefix of \"Example.com/x\"",
            ),
            (
                json!({"labels": {"a": "a".repeat(64)}}),
                "metadata.labels[\"a\"] value",
            ),
            (
                json!({"labels": {"a": "-x"}}),
                "metadata.labels[\"a\"] value \"-x\"",
            ),
            (
                json!({"annotations": "x"}),
                "metadata.annotations must be a map of strings, got a string",
            ),
            (
                json!({"annotations": {"a": true}}),
                "metadata.annotations[\"a\"] must be a string, got a boolean",
            ),
            (
                json!({"annotations": {"bad key!": "y"}}),
                "metadata.annotations key \"bad key!\"",
            ),
            (
                json!({"annotations": annotations_of(ANNOTATIONS_MAX_BYTES + 1)}),
                "metadata.annotations hold 262145 bytes",
            ),
        ];
        for (metadata, expected) in cases {
            let err = check(metadata.clone()).expect_err(expected);
            assert!(err.starts_with(expected), "{metadata}: {err}");
        }
    }

    #[test]
    fn nulls_are_normalized_as_the_api_server_stores_them() {
        let checked = check(
            json!({"name": "cm", "labels": {"a": null}, "annotations": null,
            "namespace": null}),
        )
        .unwrap();
        assert_eq!(checked, json!({"name": "cm", "labels": {"a": ""}}));
    }
}
