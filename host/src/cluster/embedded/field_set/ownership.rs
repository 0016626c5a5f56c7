//! Who owns which fields of one object, and server-side apply on top of it:
//! the merge, the conflicts, and who owns what afterwards.
//!
//! Why a module: this is the contract the module documentation of
//! [`super`] states; the paths and the edits of the object it builds on
//! live beside it.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use super::field_path::{FieldPath, Segment};
use super::owned_fields::FieldSet;
use super::value_edits::{add_new_items, remove, resolve, write};

/// How a manager wrote its fields; the same name applying the main resource
/// and the status subresource owns two separate sets, as on a real server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    Apply,
    ApplyStatus,
    /// An imperative edit, such as adding a finalizer.
    Update,
}

/// One owner of fields.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Manager {
    pub name: String,
    pub operation: Operation,
}

impl Manager {
    pub fn new(name: &str, operation: Operation) -> Self {
        Self {
            name: name.to_string(),
            operation,
        }
    }
}

/// A field an apply would change although another manager owns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldConflict {
    pub path: FieldPath,
    pub manager: String,
}

impl fmt::Display for FieldConflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is owned by field manager {:?}",
            self.path, self.manager
        )
    }
}

/// The result of an apply: the merged object and everybody's new ownership.
#[derive(Clone, Debug, PartialEq)]
pub struct Merge {
    pub object: Value,
    pub ownership: Ownership,
}

/// Who owns which fields of one object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ownership {
    sets: BTreeMap<Manager, FieldSet>,
}

impl Ownership {
    /// The fields `manager` owns, if any.
    #[cfg(test)]
    pub fn fields_of(&self, manager: &Manager) -> Option<&FieldSet> {
        self.sets.get(manager)
    }

    #[cfg(test)]
    pub fn managers(&self) -> impl Iterator<Item = &Manager> {
        self.sets.keys()
    }

    /// Every manager and its fields, in manager order.
    pub fn sets(&self) -> impl Iterator<Item = (&Manager, &FieldSet)> {
        self.sets.iter()
    }

    /// Gives `manager` exactly `fields` (nothing, if empty).
    pub fn insert_set(&mut self, manager: Manager, fields: FieldSet) {
        if fields.is_empty() {
            self.sets.remove(&manager);
        } else {
            self.sets.insert(manager, fields);
        }
    }

    /// Records that `manager` owns `path` (after an imperative edit).
    pub fn claim(&mut self, manager: Manager, path: FieldPath) {
        self.sets.entry(manager).or_default().insert(path);
    }

    /// Forgets ownership of fields that are no longer in `object`, and
    /// managers left with nothing.
    pub fn prune(&mut self, object: &Value) {
        for set in self.sets.values_mut() {
            set.retain_present(object);
        }
        self.sets.retain(|_, set| !set.is_empty());
    }

    /// Server-side apply of `config` (the fields `manager` sets, rooted at the
    /// object's root) onto `current`. Fails with every conflicting field when
    /// `force` is false; with `force` the applier takes them over.
    pub fn apply(
        &self,
        current: &Value,
        config: &Value,
        manager: &Manager,
        force: bool,
    ) -> Result<Merge, Vec<FieldConflict>> {
        let owned = FieldSet::of(config);
        let mut object = current.clone();
        add_new_items(&mut object, config);
        for path in owned.iter() {
            write(
                &mut object,
                path.segments(),
                resolve(config, path.segments()),
            );
        }
        let mut others = self.clone();
        let previous = others.sets.remove(manager).unwrap_or_default();
        others.remove_dropped(&mut object, &previous, &owned);
        let changed = others.changed_fields(current, &object);
        if !force && !changed.is_empty() {
            return Err(changed
                .into_iter()
                .map(|(m, path)| FieldConflict {
                    path,
                    manager: m.name,
                })
                .collect());
        }
        let mut ownership = others;
        ownership.release(&changed);
        if !owned.is_empty() {
            ownership.sets.insert(manager.clone(), owned);
        }
        ownership.prune(&object);
        Ok(Merge { object, ownership })
    }

    /// Removes the fields the applier stopped setting, when nobody else
    /// holds them.
    fn remove_dropped(&self, object: &mut Value, previous: &FieldSet, owned: &FieldSet) {
        for path in previous.iter() {
            let p = path.segments();
            if owned.contains(p) || owned.owns_below(p) || self.owns_within(p) {
                continue;
            }
            remove(object, p, &|prefix| {
                owned.contains(prefix) || self.owns_exactly(prefix)
            });
        }
    }

    fn owns_within(&self, path: &[Segment]) -> bool {
        self.sets.values().any(|set| set.owns_within(path))
    }

    fn owns_exactly(&self, path: &[Segment]) -> bool {
        self.sets.values().any(|set| set.contains(path))
    }

    /// Fields owned here whose value differs between `before` and `after`.
    fn changed_fields(&self, before: &Value, after: &Value) -> Vec<(Manager, FieldPath)> {
        let mut changed = Vec::new();
        for (manager, set) in &self.sets {
            for path in set.iter() {
                let (old, new) = (
                    resolve(before, path.segments()),
                    resolve(after, path.segments()),
                );
                if !same_leaf(old, new) {
                    changed.push((manager.clone(), path.clone()));
                }
            }
        }
        changed
    }

    /// Takes the given fields away from their owners.
    fn release(&mut self, fields: &[(Manager, FieldPath)]) {
        for (manager, path) in fields {
            if let Some(set) = self.sets.get_mut(manager) {
                set.remove(path);
            }
        }
        self.sets.retain(|_, set| !set.is_empty());
    }
}

/// Two values of an owned leaf are the same if equal; an owned empty map only
/// says "this map exists", so any two maps are the same leaf.
fn same_leaf(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(Value::Object(_)), Some(Value::Object(_))) => true,
        _ => a == b,
    }
}
