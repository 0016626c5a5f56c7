//! Checking what a plugin answers to an admission request before the host
//! tells the API server.
//!
//! An answer is untrusted input, like a reconcile response: a verdict's text
//! is bounded (kubectl shows it to people), and a defaulted object becomes a
//! JSON patch only if it is the same object with defaults added: same kind,
//! same identity, no change to metadata the host or the API server owns.
//! The host computes the patch itself (RFC 6902, from the two objects), so a
//! plugin cannot address anything outside the object it was given.

use reconciler_contract::Verdict;
use reconciler_contract::json_depth::nesting_depth;
use serde_json::Value;

/// Longest denial message passed on; longer ones are cut.
pub const MAX_MESSAGE_BYTES: usize = 4096;
/// Most warnings passed on; the rest are dropped.
pub const MAX_WARNINGS: usize = 16;
/// Longest warning passed on; longer ones are cut (the API server itself
/// truncates warnings past 256 characters).
pub const MAX_WARNING_BYTES: usize = 256;
/// Deepest nesting of a defaulted object, as for applied objects.
pub const MAX_DEPTH: usize = 64;

/// Fields of `metadata` a defaulting plugin must leave as they are: identity,
/// and what the host (ownership, finalizers) or the API server manages.
const PROTECTED_METADATA: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "ownerReferences",
    "finalizers",
    "managedFields",
    "selfLink",
];

/// Why a defaulted object was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidDefaults {
    #[error(
        "the defaulted object is {bytes} bytes, over the output limit of {limit_bytes} bytes (hints.maxOutputKib)"
    )]
    TooLarge { bytes: usize, limit_bytes: usize },
    #[error("the defaulted object nests {depth} levels deep, over the limit of {MAX_DEPTH}")]
    TooDeep { depth: usize },
    #[error("the defaulted object is not a JSON object: {0}")]
    NotJson(String),
    #[error("the defaulted object changes {field}, which defaulting must leave as it is")]
    Protected { field: String },
}

/// The verdict with its texts bounded.
pub fn bounded_verdict(mut verdict: Verdict) -> Verdict {
    if let Some(message) = verdict.message.as_mut() {
        cut(message, MAX_MESSAGE_BYTES);
    }
    verdict.warnings.truncate(MAX_WARNINGS);
    for warning in &mut verdict.warnings {
        cut(warning, MAX_WARNING_BYTES);
    }
    verdict
}

/// Cuts `text` to at most `max` bytes, on a character boundary.
fn cut(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
}

/// The patch that turns `original` into the plugin's `defaulted` object,
/// as JSON Patch operations (empty when nothing changes).
pub fn defaults_patch(
    original: &Value,
    defaulted: &str,
    limit_bytes: usize,
) -> Result<Vec<Value>, InvalidDefaults> {
    if defaulted.len() > limit_bytes {
        return Err(InvalidDefaults::TooLarge {
            bytes: defaulted.len(),
            limit_bytes,
        });
    }
    let depth = nesting_depth(defaulted);
    if depth > MAX_DEPTH {
        return Err(InvalidDefaults::TooDeep { depth });
    }
    let defaulted: Value =
        serde_json::from_str(defaulted).map_err(|e| InvalidDefaults::NotJson(e.to_string()))?;
    if !defaulted.is_object() {
        return Err(InvalidDefaults::NotJson("not an object".to_string()));
    }
    for field in ["apiVersion", "kind"] {
        if original.get(field) != defaulted.get(field) {
            return Err(InvalidDefaults::Protected {
                field: field.to_string(),
            });
        }
    }
    for field in PROTECTED_METADATA {
        let pointer = format!("/metadata/{field}");
        if original.pointer(&pointer) != defaulted.pointer(&pointer) {
            return Err(InvalidDefaults::Protected {
                field: format!("metadata.{field}"),
            });
        }
    }
    let patch = json_patch::diff(original, &defaulted);
    match serde_json::to_value(&patch) {
        Ok(Value::Array(ops)) => Ok(ops),
        Ok(_) | Err(_) => Err(InvalidDefaults::NotJson(
            "the difference is not a JSON patch".to_string(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn original() -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Thing",
            "metadata": {"name": "a", "namespace": "default", "finalizers": ["x/y"]},
            "spec": {"size": 1}})
    }

    #[test]
    fn an_added_default_becomes_an_add_operation() {
        let mut defaulted = original();
        defaulted["spec"]["version"] = json!("1.31");
        let patch = defaults_patch(&original(), &defaulted.to_string(), 1 << 20).unwrap();
        assert_eq!(
            patch,
            vec![json!({"op": "add", "path": "/spec/version", "value": "1.31"})]
        );
    }

    #[test]
    fn an_unchanged_object_is_an_empty_patch() {
        let patch = defaults_patch(&original(), &original().to_string(), 1 << 20).unwrap();
        assert!(patch.is_empty());
    }

    #[test]
    fn identity_kind_and_host_owned_metadata_are_refused() {
        for (pointer, value, field) in [
            ("/metadata/name", json!("b"), "metadata.name"),
            (
                "/metadata/namespace",
                json!("kube-system"),
                "metadata.namespace",
            ),
            ("/metadata/finalizers", json!([]), "metadata.finalizers"),
            (
                "/metadata/ownerReferences",
                json!([{"uid": "u"}]),
                "metadata.ownerReferences",
            ),
            ("/kind", json!("Other"), "kind"),
        ] {
            let mut defaulted = original();
            *defaulted.pointer_mut(pointer).unwrap_or(&mut Value::Null) = value.clone();
            if defaulted.pointer(pointer).is_none() {
                defaulted["metadata"]["ownerReferences"] = value;
            }
            let err = defaults_patch(&original(), &defaulted.to_string(), 1 << 20).unwrap_err();
            assert_eq!(
                err,
                InvalidDefaults::Protected {
                    field: field.to_string()
                }
            );
        }
    }

    #[test]
    fn labels_and_annotations_may_be_defaulted() {
        let mut defaulted = original();
        defaulted["metadata"]["labels"] = json!({"tier": "control-plane"});
        let patch = defaults_patch(&original(), &defaulted.to_string(), 1 << 20).unwrap();
        assert_eq!(patch.len(), 1, "{patch:?}");
    }

    #[test]
    fn oversized_deep_or_malformed_objects_are_refused() {
        let big = defaults_patch(&original(), &original().to_string(), 10).unwrap_err();
        assert!(matches!(big, InvalidDefaults::TooLarge { .. }), "{big:?}");
        let deep = format!("{}{}", "[".repeat(70), "]".repeat(70));
        let err = defaults_patch(&original(), &deep, 1 << 20).unwrap_err();
        assert!(
            matches!(err, InvalidDefaults::TooDeep { depth: 70 }),
            "{err:?}"
        );
        for text in ["not json", "[1]"] {
            let err = defaults_patch(&original(), text, 1 << 20).unwrap_err();
            assert!(matches!(err, InvalidDefaults::NotJson(_)), "{err:?}");
        }
    }

    #[test]
    fn verdict_texts_are_bounded() {
        let mut verdict = Verdict::deny("é".repeat(3000));
        verdict.warnings = (0..40).map(|_| "w".repeat(1000)).collect();
        let bounded = bounded_verdict(verdict);
        let message = bounded.message.unwrap();
        assert!(message.len() <= MAX_MESSAGE_BYTES && message.starts_with('é'));
        assert_eq!(bounded.warnings.len(), MAX_WARNINGS);
        assert!(
            bounded
                .warnings
                .iter()
                .all(|w| w.len() == MAX_WARNING_BYTES)
        );
    }
}
