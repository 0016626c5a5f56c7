//! What two decisions for the same primary differ in: each applied object
//! field by field (the server-side apply each would send), the status field
//! by field, deletes, Events, the requeue, the finalizer, the error.
//!
//! Objects are compared as applied intents: a field one version sets and
//! the other leaves out is a field the other would give up (server-side
//! apply removes what its manager no longer sends), so both show.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::golden::case::Expectation;

/// One version's decision for one primary: what it answered, or why the
/// call failed.
pub type Decision = Result<Expectation, String>;

/// One thing the candidate would do differently. `serving` and
/// `candidate` hold each version's side; `None` is "not at all".
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "in", rename_all = "camelCase")]
pub enum Difference {
    /// A field of an applied object, or a whole object only one applies
    /// (`path` empty).
    Apply {
        object: String,
        path: String,
        serving: Option<Value>,
        candidate: Option<Value>,
    },
    /// A field of the primary's status (`path` empty: the whole status,
    /// when only one version writes one).
    Status {
        path: String,
        serving: Option<Value>,
        candidate: Option<Value>,
    },
    /// A delete only one version asks for.
    Delete {
        object: String,
        serving: bool,
        candidate: bool,
    },
    /// An Event one version posts more often than the other.
    Event {
        event: String,
        serving: usize,
        candidate: usize,
    },
    Requeue {
        serving: Option<String>,
        candidate: Option<String>,
    },
    Finalized {
        serving: bool,
        candidate: bool,
    },
    /// The call failed for one version, or for both with other messages.
    Error {
        serving: Option<String>,
        candidate: Option<String>,
    },
}

/// Everything the candidate decides differently from the serving version;
/// empty when the two decisions are the same.
pub fn compare(serving: &Decision, candidate: &Decision) -> Vec<Difference> {
    match (serving, candidate) {
        (Ok(s), Ok(c)) => compare_answers(s, c),
        (Err(s), Err(c)) if s == c => Vec::new(),
        (s, c) => vec![Difference::Error {
            serving: s.as_ref().err().cloned(),
            candidate: c.as_ref().err().cloned(),
        }],
    }
}

fn compare_answers(s: &Expectation, c: &Expectation) -> Vec<Difference> {
    let mut out = Vec::new();
    let (applied_s, applied_c) = (by_identity(&s.apply), by_identity(&c.apply));
    let objects: std::collections::BTreeSet<&String> =
        applied_s.keys().chain(applied_c.keys()).collect();
    for object in objects {
        let (old, new) = (applied_s.get(object), applied_c.get(object));
        if old.is_none() || new.is_none() {
            out.push(Difference::Apply {
                object: object.clone(),
                path: String::new(),
                serving: old.map(|v| (*v).clone()),
                candidate: new.map(|v| (*v).clone()),
            });
            continue;
        }
        for (path, serving, candidate) in field_changes(old.copied(), new.copied()) {
            out.push(Difference::Apply {
                object: object.clone(),
                path,
                serving,
                candidate,
            });
        }
    }
    match (&s.status, &c.status) {
        (Some(old), Some(new)) => {
            for (path, serving, candidate) in field_changes(Some(old), Some(new)) {
                out.push(Difference::Status {
                    path,
                    serving,
                    candidate,
                });
            }
        }
        (None, None) => {}
        (old, new) => out.push(Difference::Status {
            path: String::new(),
            serving: old.clone(),
            candidate: new.clone(),
        }),
    }
    let deletes = |e: &Expectation| -> std::collections::BTreeSet<String> {
        e.delete.iter().map(object_ref_name).collect()
    };
    let (deletes_s, deletes_c) = (deletes(s), deletes(c));
    for object in deletes_s.symmetric_difference(&deletes_c) {
        out.push(Difference::Delete {
            object: object.clone(),
            serving: deletes_s.contains(object),
            candidate: deletes_c.contains(object),
        });
    }
    let (events_s, events_c) = (event_counts(s), event_counts(c));
    let events: std::collections::BTreeSet<&String> =
        events_s.keys().chain(events_c.keys()).collect();
    for event in events {
        let (serving, candidate) = (
            events_s.get(event).copied().unwrap_or(0),
            events_c.get(event).copied().unwrap_or(0),
        );
        if serving != candidate {
            out.push(Difference::Event {
                event: event.clone(),
                serving,
                candidate,
            });
        }
    }
    if s.requeue_after != c.requeue_after {
        out.push(Difference::Requeue {
            serving: s.requeue_after.clone(),
            candidate: c.requeue_after.clone(),
        });
    }
    if s.finalized != c.finalized {
        out.push(Difference::Finalized {
            serving: s.finalized,
            candidate: c.finalized,
        });
    }
    out
}

/// `apps/v1 Deployment ns/name` for each applied object.
fn by_identity(objects: &[Value]) -> BTreeMap<String, &Value> {
    objects
        .iter()
        .map(|o| {
            let s = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or_default();
            let ns = s("/metadata/namespace");
            let name = s("/metadata/name");
            let at = if ns.is_empty() {
                name.to_string()
            } else {
                format!("{ns}/{name}")
            };
            (format!("{} {} {at}", s("/apiVersion"), s("/kind")), o)
        })
        .collect()
}

fn object_ref_name(r: &reconciler_contract::ObjectRef) -> String {
    match &r.namespace {
        Some(ns) => format!("{} {} {ns}/{}", r.api_version, r.kind, r.name),
        None => format!("{} {} {}", r.api_version, r.kind, r.name),
    }
}

fn event_counts(e: &Expectation) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for event in &e.events {
        let text = format!("{:?} {}: {}", event.event_type, event.reason, event.message);
        *counts.entry(text).or_insert(0) += 1;
    }
    counts
}

/// `(path, old, new)` for every leaf that differs. Objects are walked key
/// by key and lists of the same length item by item; a list whose length
/// changed is one change of the whole list, which reads better than a
/// shifted tail.
pub fn field_changes(
    old: Option<&Value>,
    new: Option<&Value>,
) -> Vec<(String, Option<Value>, Option<Value>)> {
    let mut out = Vec::new();
    walk(String::new(), old, new, &mut out);
    out
}

fn walk(
    path: String,
    old: Option<&Value>,
    new: Option<&Value>,
    out: &mut Vec<(String, Option<Value>, Option<Value>)>,
) {
    match (old, new) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                walk(join(&path, key), a.get(key), b.get(key), out);
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                walk(format!("{path}[{i}]"), Some(x), Some(y), out);
            }
        }
        (a, b) if a != b => out.push((path, a.cloned(), b.cloned())),
        _ => {}
    }
}

/// `a.b`, or `a["app.kubernetes.io/name"]` for a key a dot would split.
fn join(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (path.is_empty(), plain) {
        (true, true) => key.to_string(),
        (false, true) => format!("{path}.{key}"),
        (_, false) => format!("{path}[{}]", Value::String(key.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reconciler_contract::{Event, EventType};
    use serde_json::json;

    fn deployment(replicas: i64, image: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "default",
                            "labels": {"app.kubernetes.io/name": "web"}},
               "spec": {"replicas": replicas,
                        "template": {"spec": {"containers": [{"name": "c", "image": image}]}}}})
    }

    fn answer(apply: Vec<Value>, status: Value) -> Decision {
        Ok(Expectation {
            apply,
            status: Some(status),
            ..Expectation::default()
        })
    }

    #[test]
    fn the_same_decision_differs_in_nothing() {
        let d = answer(vec![deployment(2, "a")], json!({"podNames": ["x"]}));
        assert!(compare(&d, &d).is_empty());
        let failed: Decision = Err("spec.size must be an integer".into());
        assert!(compare(&failed, &failed).is_empty());
    }

    #[test]
    fn applied_fields_and_status_differ_by_path() {
        let serving = answer(vec![deployment(2, "a")], json!({"podNames": ["x"]}));
        let candidate = answer(vec![deployment(4, "b")], json!({"podNames": ["x", "y"]}));
        let found = compare(&serving, &candidate);
        let paths: Vec<String> = found
            .iter()
            .map(|d| match d {
                Difference::Apply { path, .. } | Difference::Status { path, .. } => path.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            paths,
            [
                "spec.replicas",
                "spec.template.spec.containers[0].image",
                "podNames"
            ]
        );
        assert_eq!(
            found[0],
            Difference::Apply {
                object: "apps/v1 Deployment default/web".into(),
                path: "spec.replicas".into(),
                serving: Some(json!(2)),
                candidate: Some(json!(4)),
            }
        );
    }

    #[test]
    fn an_object_one_version_leaves_out_and_a_dotted_key_show_whole() {
        let mut labelled = deployment(2, "a");
        labelled["metadata"]["labels"]["app.kubernetes.io/name"] = json!("api");
        let serving = answer(vec![deployment(2, "a")], json!({}));
        let candidate = answer(
            vec![
                labelled,
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "extra", "namespace": "default"}}),
            ],
            json!({}),
        );
        let found = compare(&serving, &candidate);
        assert!(found.contains(&Difference::Apply {
            object: "apps/v1 Deployment default/web".into(),
            path: "metadata.labels[\"app.kubernetes.io/name\"]".into(),
            serving: Some(json!("web")),
            candidate: Some(json!("api")),
        }));
        assert!(found.iter().any(|d| matches!(d,
            Difference::Apply { object, path, serving: None, candidate: Some(_) }
                if object == "v1 ConfigMap default/extra" && path.is_empty())));
    }

    #[test]
    fn events_requeues_errors_and_deletes_are_told() {
        let event = |reason: &str| Event {
            event_type: EventType::Normal,
            reason: reason.into(),
            message: "m".into(),
        };
        let serving: Decision = Ok(Expectation {
            events: vec![event("Created")],
            requeue_after: Some("1m".into()),
            ..Expectation::default()
        });
        let candidate: Decision = Ok(Expectation {
            events: vec![event("Created"), event("Created")],
            delete: vec![reconciler_contract::ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("default".into()),
                name: "old".into(),
            }],
            ..Expectation::default()
        });
        let found = compare(&serving, &candidate);
        assert!(found.contains(&Difference::Event {
            event: "Normal Created: m".into(),
            serving: 1,
            candidate: 2
        }));
        assert!(found.contains(&Difference::Requeue {
            serving: Some("1m".into()),
            candidate: None
        }));
        assert!(found.contains(&Difference::Delete {
            object: "v1 ConfigMap default/old".into(),
            serving: false,
            candidate: true
        }));
        let failed: Decision = Err("boom".into());
        assert_eq!(
            compare(&serving, &failed),
            [Difference::Error {
                serving: None,
                candidate: Some("boom".into())
            }]
        );
    }
}
