//! Whether a change of an object wakes the primary it maps to (WIT
//! `triggers`, 0.2.3): the one comparison of [`Change`]s declared in
//! [`crate::types::PluginMetadata::triggers`].
//!
//! The host applies it before queueing, `simulate` and `dev` through the
//! same engine, and `reconciler-host test` in its change cases: one
//! function, so that the three cannot disagree about what wakes a plugin.

use serde_json::Value;

pub use crate::types::{Change, KindTrigger};

/// True when going from `old` to `new` is one of `changes`. The caller
/// handles creation and deletion, which always wake.
pub fn wakes(changes: &[Change], old: &Value, new: &Value) -> bool {
    changes.iter().any(|change| change.happened(old, new))
}

impl Change {
    fn happened(&self, old: &Value, new: &Value) -> bool {
        let differs = |path: &[&str]| at(old, path) != at(new, path);
        match self {
            Change::Any => old != new,
            Change::Generation => {
                let moved = if has_generation(old) || has_generation(new) {
                    differs(&["metadata", "generation"])
                } else {
                    content_differs(old, new)
                };
                moved
                    || (at(old, &["metadata", "deletionTimestamp"]).is_none()
                        && at(new, &["metadata", "deletionTimestamp"]).is_some())
            }
            Change::Labels => differs(&["metadata", "labels"]),
            Change::Annotations => differs(&["metadata", "annotations"]),
            Change::Fields(paths) => paths.iter().any(|path| {
                let keys: Vec<&str> = path.split('.').collect();
                differs(&keys)
            }),
        }
    }
}

fn has_generation(object: &Value) -> bool {
    at(object, &["metadata", "generation"]).is_some()
}

/// For kinds the API server gives no generation (ConfigMaps, Secrets, most
/// core kinds without a spec/status split): what would move one if they had
/// it. Everything outside `metadata` and `status` is their content (`data`,
/// `binaryData`, `spec`, ...), so a `generation` trigger on a ConfigMap wakes
/// on its data and not on a relabel, as it would on a Deployment.
fn content_differs(old: &Value, new: &Value) -> bool {
    let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else {
        return old != new;
    };
    let outside = |key: &&String| !matches!(key.as_str(), "metadata" | "status");
    old.keys().filter(outside).count() != new.keys().filter(outside).count()
        || old
            .iter()
            .filter(|(key, _)| outside(key))
            .any(|(key, value)| new.get(key) != Some(value))
}

/// The value at `path` (object keys only); `None` when any step is
/// missing or not an object. An empty map and a missing one are the same
/// change-wise: the API server drops empty `labels` and `annotations`.
fn at<'v>(value: &'v Value, path: &[&str]) -> Option<&'v Value> {
    let found = path
        .iter()
        .try_fold(value, |node, key| node.as_object()?.get(*key))?;
    match found {
        Value::Object(map) if map.is_empty() => None,
        Value::Null => None,
        other => Some(other),
    }
}

/// What is wrong with a `fields` path, if anything: empty keys (`a..b`,
/// a leading or trailing dot) cannot name a field.
pub fn path_problem(path: &str) -> Option<String> {
    if path.is_empty() {
        return Some("an empty field path".into());
    }
    if path.split('.').any(str::is_empty) {
        return Some(format!(
            "field path {path:?} has an empty key (keys are joined by single dots, e.g. status.readyReplicas)"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(generation: i64, ready: i64) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "generation": generation,
                         "labels": {"app": "web"}, "resourceVersion": format!("{generation}{ready}")},
            "spec": {"replicas": 3},
            "status": {"readyReplicas": ready, "observedGeneration": generation},
        })
    }

    #[test]
    fn a_status_update_wakes_only_what_reads_the_status() {
        let (old, new) = (deployment(1, 2), deployment(1, 3));
        assert!(!wakes(&[Change::Generation], &old, &new));
        assert!(!wakes(&[Change::Labels, Change::Annotations], &old, &new));
        assert!(wakes(&[Change::Any], &old, &new));
        assert!(wakes(
            &[Change::Fields(vec!["status.readyReplicas".into()])],
            &old,
            &new
        ));
        assert!(!wakes(
            &[Change::Fields(vec!["status.observedGeneration".into()])],
            &old,
            &new
        ));
    }

    #[test]
    fn a_spec_change_moves_generation() {
        let mut new = deployment(2, 2);
        new["spec"]["replicas"] = json!(5);
        assert!(wakes(&[Change::Generation], &deployment(1, 2), &new));
        assert!(wakes(
            &[Change::Fields(vec!["spec".into()])],
            &deployment(1, 2),
            &new
        ));
    }

    #[test]
    fn deletion_beginning_wakes_a_generation_trigger() {
        let old = deployment(1, 2);
        let mut new = old.clone();
        new["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        assert!(wakes(&[Change::Generation], &old, &new));
        // Once deleting, a later update of the same deleting object does not.
        let mut later = new.clone();
        later["status"]["readyReplicas"] = json!(0);
        assert!(!wakes(&[Change::Generation], &new, &later));
    }

    #[test]
    fn a_kind_without_generation_moves_on_its_content() {
        let config = |data: &str, label: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "rec", "resourceVersion": format!("{data}{label}"),
                                "labels": {"l": label}},
                   "data": {"k": data}})
        };
        let generation = [Change::Generation];
        assert!(wakes(&generation, &config("a", "x"), &config("b", "x")));
        assert!(!wakes(&generation, &config("a", "x"), &config("a", "y")));
        // One side with a generation: the generation decides, as on any kind.
        let mut numbered = config("b", "x");
        numbered["metadata"]["generation"] = json!(1);
        let mut same = numbered.clone();
        same["data"]["k"] = json!("c");
        assert!(!wakes(&generation, &numbered, &same));
    }

    #[test]
    fn labels_and_annotations_are_told_apart_and_empty_is_absent() {
        let old = deployment(1, 2);
        let mut labelled = old.clone();
        labelled["metadata"]["labels"]["tier"] = json!("front");
        assert!(wakes(&[Change::Labels], &old, &labelled));
        assert!(!wakes(&[Change::Annotations], &old, &labelled));
        let mut annotated = old.clone();
        annotated["metadata"]["annotations"] = json!({"note": "x"});
        assert!(wakes(&[Change::Annotations], &old, &annotated));
        assert!(!wakes(&[Change::Labels], &old, &annotated));
        let mut empty = old.clone();
        empty["metadata"]["annotations"] = json!({});
        assert!(!wakes(&[Change::Annotations], &old, &empty));
    }

    #[test]
    fn a_field_that_appears_or_goes_is_a_change() {
        let old = deployment(1, 2);
        let mut gone = old.clone();
        gone["status"]
            .as_object_mut()
            .unwrap()
            .remove("readyReplicas");
        let fields = [Change::Fields(vec!["status.readyReplicas".into()])];
        assert!(wakes(&fields, &old, &gone));
        assert!(wakes(&fields, &gone, &old));
        // A path through something that is not an object names nothing.
        let through = [Change::Fields(vec!["spec.replicas.deeper".into()])];
        assert!(!wakes(&through, &old, &deployment(1, 3)));
    }

    #[test]
    fn paths_with_empty_keys_are_refused() {
        assert!(path_problem("status.readyReplicas").is_none());
        assert!(path_problem("spec").is_none());
        for bad in ["", ".spec", "spec.", "spec..replicas"] {
            assert!(path_problem(bad).is_some(), "{bad:?}");
        }
    }
}
