//! Which fields of an object changed, old value to new, in words a person
//! reads (`.status.readyReplicas 2 -> 3`), and who manages them: what the
//! journal tells of a trigger and of a write, and what loop detection
//! compares.
//!
//! Bounded on purpose: a few paths, short values. It explains a change; it
//! is not a copy of it.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Paths reported per object; the rest are counted.
pub const MAX_FIELDS: usize = 4;
/// Characters of a value shown before it is cut.
const MAX_VALUE_CHARS: usize = 60;
/// Characters of a path shown before it is cut: keys come from objects
/// anyone may write, and may be long.
const MAX_PATH_CHARS: usize = 160;

/// Bookkeeping the API server changes on every write: never the reason
/// for anything.
const NOISE: [&str; 4] = [
    ".metadata.resourceVersion",
    ".metadata.managedFields",
    ".metadata.generation",
    ".metadata.annotations.kubectl.kubernetes.io/last-applied-configuration",
];

/// One field that changed: its path, and its value before and after
/// (`None`: absent), as short JSON text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldChange {
    pub path: String,
    pub old: Option<String>,
    pub new: Option<String>,
}

impl fmt::Display for FieldChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = |v: &Option<String>| v.clone().unwrap_or_else(|| "(none)".to_string());
        write!(
            f,
            "{} {} -> {}",
            self.path,
            shown(&self.old),
            shown(&self.new)
        )
    }
}

/// The fields that differ between `before` and `after`, the first
/// [`MAX_FIELDS`] in document order, and how many more there were.
pub fn diff(before: &Value, after: &Value) -> (Vec<FieldChange>, usize) {
    diff_at("", Some(before), Some(after))
}

/// [`diff`] of the subtrees at `path` of two objects (`.status`), named
/// by their whole paths: no copy of either subtree is made.
pub fn diff_at(
    path: &str,
    before: Option<&Value>,
    after: Option<&Value>,
) -> (Vec<FieldChange>, usize) {
    let mut found = Found::default();
    walk(path.to_string(), before, after, &mut found);
    (found.fields, found.more)
}

/// The fields `sent` sets that the stored object does not hold as sent:
/// what the API server normalized or dropped. `new` is what it stored.
pub fn not_as_sent(sent: &Value, stored: &Value) -> (Vec<FieldChange>, usize) {
    not_as_sent_at("", sent, Some(stored))
}

/// [`not_as_sent`] of the subtree at `path` (`.status`).
pub fn not_as_sent_at(
    path: &str,
    sent: &Value,
    stored: Option<&Value>,
) -> (Vec<FieldChange>, usize) {
    let mut found = Found::default();
    leaves_not_as_sent(path.to_string(), sent, stored, &mut found);
    (found.fields, found.more)
}

#[derive(Default)]
struct Found {
    fields: Vec<FieldChange>,
    more: usize,
}

impl Found {
    fn push(&mut self, path: String, old: Option<&Value>, new: Option<&Value>) {
        if NOISE.contains(&path.as_str()) {
            return;
        }
        if self.fields.len() < MAX_FIELDS {
            self.fields.push(FieldChange {
                path: cut(path, MAX_PATH_CHARS),
                old: old.map(short),
                new: new.map(short),
            });
        } else {
            self.more += 1;
        }
    }
}

fn child_path(path: &str, key: &str) -> String {
    format!("{path}.{key}")
}

fn walk(path: String, before: Option<&Value>, after: Option<&Value>, found: &mut Found) {
    if NOISE.contains(&path.as_str()) {
        return;
    }
    match (before, after) {
        (Some(Value::Object(b)), Some(Value::Object(a))) => {
            for (key, bv) in b {
                let av = a.get(key);
                // Equal subtrees, the most of any change, cost no path.
                if av != Some(bv) {
                    walk(child_path(&path, key), Some(bv), av, found);
                }
            }
            for (key, av) in a {
                if !b.contains_key(key) {
                    walk(child_path(&path, key), None, Some(av), found);
                }
            }
        }
        (Some(Value::Array(b)), Some(Value::Array(a))) if b.len() == a.len() => {
            for (i, (bv, av)) in b.iter().zip(a).enumerate() {
                if bv != av {
                    walk(format!("{path}[{i}]"), Some(bv), Some(av), found);
                }
            }
        }
        (b, a) if !same(b, a) => found.push(path, b, a),
        _ => {}
    }
}

fn leaves_not_as_sent(path: String, sent: &Value, stored: Option<&Value>, found: &mut Found) {
    match (sent, stored) {
        (Value::Object(s), Some(Value::Object(st))) => {
            for (key, sv) in s {
                leaves_not_as_sent(child_path(&path, key), sv, st.get(key), found);
            }
        }
        (Value::Array(s), Some(Value::Array(st))) if s.len() == st.len() => {
            for (i, (sv, stv)) in s.iter().zip(st).enumerate() {
                leaves_not_as_sent(format!("{path}[{i}]"), sv, Some(stv), found);
            }
        }
        // An empty map or list sent and absent stored is how the API server
        // keeps "nothing": not a difference anyone acts on.
        (Value::Object(m), None) if m.is_empty() => {}
        (Value::Array(l), None) if l.is_empty() => {}
        (s, st) if !same(Some(s), st) => found.push(path, Some(s), st),
        _ => {}
    }
}

/// What a journal shows of a Secret's value.
const REDACTED: &str = "\"(redacted)\"";

/// `fields` of an object of kind `kind` as the journal may show them: a
/// Secret's `data` and `stringData` values are redacted (the journal is
/// read by whoever may read /metrics), their paths kept.
pub fn redacted(kind: &str, mut fields: Vec<FieldChange>) -> Vec<FieldChange> {
    if kind != "Secret" {
        return fields;
    }
    for field in &mut fields {
        if field.path.starts_with(".data") || field.path.starts_with(".stringData") {
            for value in [&mut field.old, &mut field.new].into_iter().flatten() {
                *value = REDACTED.to_string();
            }
        }
    }
    fields
}

/// Equal as JSON values, numbers by value (`1.0` is `1`).
fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(Value::Number(x)), Some(Value::Number(y))) => x == y || x.as_f64() == y.as_f64(),
        (a, b) => a == b,
    }
}

/// A value as JSON text, cut to [`MAX_VALUE_CHARS`] characters.
fn short(value: &Value) -> String {
    cut(value.to_string(), MAX_VALUE_CHARS)
}

/// `text` cut to `max` characters, marked so.
fn cut(text: String, max: usize) -> String {
    if text.chars().count() <= max {
        return text;
    }
    let cut: String = text.chars().take(max).collect();
    format!("{cut}…")
}

/// One entry of an object's `managedFields`, its fields left as text
/// until a path needs them.
#[derive(Deserialize)]
struct ManagedEntry<'a> {
    #[serde(default, borrow)]
    manager: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    operation: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "fieldsV1", default, borrow)]
    fields: Option<&'a serde_json::value::RawValue>,
}

/// The field managers in `managed_fields` (an object's `managedFields`, as
/// JSON text) that manage any of `paths` (paths as [`diff`] writes them),
/// as `name (Operation)`. A path through a list is matched up to the list:
/// its items are keyed in `managedFields` by their contents, not by index.
///
/// Each entry's fields are read only when their text names the path's last
/// key: most entries of a changed object manage other fields, and reading
/// them all cost more than the rest of the journal's work for a change.
pub fn managers_of(managed_fields: &str, paths: &[&str]) -> Vec<String> {
    let Ok(entries) = serde_json::from_str::<Vec<ManagedEntry<'_>>>(managed_fields) else {
        return Vec::new();
    };
    let paths: Vec<Vec<&str>> = paths.iter().map(|p| path_keys(p)).collect();
    let mut managers = Vec::new();
    for entry in &entries {
        let Some(raw) = entry.fields else {
            continue;
        };
        let mut fields: Option<Option<Value>> = None;
        let manages_any = paths.iter().any(|keys| {
            // A key written as-is in JSON text must appear in it.
            if let Some(last) = keys.last()
                && !last.contains(['"', '\\'])
                && last.is_ascii()
                && !raw.get().contains(last)
            {
                return false;
            }
            fields
                .get_or_insert_with(|| serde_json::from_str(raw.get()).ok())
                .as_ref()
                .is_some_and(|fields| manages(fields, keys))
        });
        if !manages_any {
            continue;
        }
        let name = entry.manager.as_deref().unwrap_or("(unnamed)");
        let operation = entry.operation.as_deref().unwrap_or("?");
        let named = format!("{name} ({operation})");
        if !managers.contains(&named) {
            managers.push(named);
        }
    }
    managers
}

/// The map keys of `path` up to its first list index: `.spec.replicas`
/// gives `spec`, `replicas`. Keys holding dots (annotation names) cannot be
/// told from nesting in this form; they are matched as far as they go.
fn path_keys(path: &str) -> Vec<&str> {
    let before_list = path.split('[').next().unwrap_or("");
    before_list
        .split('.')
        .filter(|key| !key.is_empty())
        .collect()
}

fn manages(fields: &Value, keys: &[&str]) -> bool {
    let mut node = fields;
    for key in keys {
        match node.get(format!("f:{key}")) {
            Some(next) => node = next,
            // The rest of the key may be a dotted name split apart.
            None => {
                return node.as_object().is_some_and(|m| {
                    m.keys()
                        .any(|k| k.starts_with("f:") && k[2..].starts_with(key))
                });
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_diff_names_each_changed_path_old_to_new_without_bookkeeping() {
        let before = json!({"metadata": {"name": "web", "resourceVersion": "1", "labels": {"a": "x"}},
            "spec": {"replicas": 2, "template": {"containers": [{"image": "nginx:1"}]}},
            "status": {"readyReplicas": 2}});
        let after = json!({"metadata": {"name": "web", "resourceVersion": "2", "labels": {"b": "y"}},
            "spec": {"replicas": 2, "template": {"containers": [{"image": "nginx:2"}]}},
            "status": {"readyReplicas": 3}});
        let (fields, more) = diff(&before, &after);
        let text: Vec<String> = fields.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                ".metadata.labels.a \"x\" -> (none)",
                ".metadata.labels.b (none) -> \"y\"",
                ".spec.template.containers[0].image \"nginx:1\" -> \"nginx:2\"",
                ".status.readyReplicas 2 -> 3",
            ]
        );
        assert_eq!(more, 0);
        let (none, _) = diff(&before, &before);
        assert!(none.is_empty());
    }

    #[test]
    fn past_the_first_few_paths_are_counted_and_long_values_cut() {
        let before = json!({"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": "x"});
        let after = json!({"a": 2, "b": 2, "c": 2, "d": 2, "e": 2, "f": "y".repeat(200)});
        let (fields, more) = diff(&before, &after);
        assert_eq!(fields.len(), MAX_FIELDS);
        assert_eq!(more, 2);
        let (cut, _) = diff(&json!({"f": "x"}), &json!({"f": "y".repeat(200)}));
        assert!(cut[0].new.as_ref().unwrap().ends_with('…'));
        assert!(cut[0].new.as_ref().unwrap().chars().count() <= MAX_VALUE_CHARS + 1);
        let long_key = "k".repeat(10_000);
        let (cut, _) = diff(&json!({}), &json!({ long_key: 1 }));
        assert_eq!(cut[0].path.chars().count(), MAX_PATH_CHARS + 1);
    }

    #[test]
    fn what_the_server_stored_otherwise_than_sent_is_found_and_numbers_compare_by_value() {
        let sent = json!({"status": {"ratio": 1.5, "count": 1.0, "limit": "1000m", "tags": {}}});
        let stored = json!({"status": {"ratio": 1.5, "count": 1, "limit": "1", "other": 3}});
        let (fields, _) = not_as_sent(&sent, &stored);
        let text: Vec<String> = fields.iter().map(ToString::to_string).collect();
        assert_eq!(text, [".status.limit \"1000m\" -> \"1\""]);
    }

    #[test]
    fn a_secrets_values_are_never_shown() {
        let before = json!({"data": {"password": "b2xk"}, "metadata": {"labels": {"a": "1"}}});
        let after = json!({"data": {"password": "bmV3"}, "metadata": {"labels": {"a": "2"}}});
        let (fields, _) = diff(&before, &after);
        let text: Vec<String> = redacted("Secret", fields.clone())
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            text,
            [
                ".data.password \"(redacted)\" -> \"(redacted)\"",
                ".metadata.labels.a \"1\" -> \"2\""
            ]
        );
        assert_eq!(redacted("ConfigMap", fields.clone()), fields);
    }

    #[test]
    fn managers_are_named_from_managed_fields() {
        let object = json!([
            {"manager": "podset", "operation": "Apply",
             "fieldsV1": {"f:spec": {"f:template": {}}}},
            {"manager": "fighter", "operation": "Update",
             "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "kubectl", "operation": "Update",
             "fieldsV1": {"f:metadata": {"f:annotations": {"f:example.com/x": {}}}}}
        ]);
        let text = object.to_string();
        assert_eq!(
            managers_of(&text, &[".spec.replicas"]),
            ["fighter (Update)"]
        );
        assert_eq!(
            managers_of(&text, &[".spec.template.spec.containers[0].image"]),
            Vec::<String>::new(),
            "podset manages .spec.template only as far as its fields go"
        );
        assert_eq!(
            managers_of(&text, &[".metadata.annotations.example.com/x"]),
            ["kubectl (Update)"]
        );
        assert_eq!(
            managers_of(
                &text,
                &[".metadata.annotations.example.com/x", ".spec.replicas"]
            ),
            ["fighter (Update)", "kubectl (Update)"],
            "in the order managedFields lists them"
        );
        assert!(managers_of("[]", &[".spec"]).is_empty());
        assert!(managers_of("not json", &[".spec"]).is_empty());
    }
}
