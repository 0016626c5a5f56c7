//! The set of leaf paths one manager owns, collected from what it applied.
//!
//! Why a module: how an applied configuration becomes owned paths (maps
//! recursed into, set lists by entry, keyed lists by item, anything else a
//! leaf) is the core of the bookkeeping, and asked of every apply.

use std::collections::BTreeSet;
use std::ops::Bound;

use serde_json::Value;

use super::field_path::{FieldPath, Segment};
use super::value_edits::{is_keyed, item_key, resolve};

/// The leaf paths one manager owns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet(BTreeSet<FieldPath>);

impl FieldSet {
    /// The fields an applied configuration sets (its leaf paths).
    pub fn of(config: &Value) -> Self {
        let mut set = Self::default();
        set.collect(config, &FieldPath::default());
        set
    }

    fn collect(&mut self, value: &Value, path: &FieldPath) {
        match value {
            Value::Null => {}
            Value::Object(map) if map.is_empty() => {
                if !path.segments().is_empty() {
                    self.0.insert(path.clone());
                }
            }
            Value::Object(map) => {
                for (name, member) in map {
                    self.collect(member, &path.child(Segment::Field(name.clone())));
                }
            }
            Value::Array(items) if path.is_set_list() && items.iter().all(Value::is_string) => {
                let entries = items.iter().filter_map(Value::as_str);
                self.0
                    .extend(entries.map(|e| path.child(Segment::Entry(e.to_string()))));
            }
            Value::Array(items)
                if let Some(key) = path.list_key()
                    && is_keyed(items, key) =>
            {
                for item in items {
                    let value = item_key(item, key).unwrap_or_default();
                    let segment = Segment::Item {
                        key: key.to_string(),
                        value: value.to_string(),
                    };
                    self.collect(item, &path.child(segment));
                }
            }
            _ => {
                self.0.insert(path.clone());
            }
        }
    }

    pub fn insert(&mut self, path: FieldPath) -> bool {
        self.0.insert(path)
    }

    /// Takes `path` out of the set; whether it was there.
    pub(super) fn remove(&mut self, path: &FieldPath) -> bool {
        self.0.remove(path)
    }

    pub fn contains(&self, path: &[Segment]) -> bool {
        self.0.contains(path)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &FieldPath> {
        self.0.iter()
    }

    /// Whether the set holds `path` or anything below it.
    pub fn owns_within(&self, path: &[Segment]) -> bool {
        self.first_from(Bound::Included(path))
            .is_some_and(|p| p.segments().starts_with(path))
    }

    /// Whether the set holds something strictly below `path`.
    pub fn owns_below(&self, path: &[Segment]) -> bool {
        self.first_from(Bound::Excluded(path))
            .is_some_and(|p| p.segments().starts_with(path))
    }

    fn first_from(&self, start: Bound<&[Segment]>) -> Option<&FieldPath> {
        // Paths sharing a prefix sort right after it, so one lookup suffices.
        self.0
            .range::<[Segment], _>((start, Bound::Unbounded))
            .next()
    }

    /// Drops the paths that no longer exist in `object`.
    pub fn retain_present(&mut self, object: &Value) {
        self.0
            .retain(|path| resolve(object, path.segments()).is_some());
    }
}
