//! Server-side apply field ownership for the embedded cluster.
//!
//! Server-side apply lets several field managers write one object without
//! overwriting each other: each manager owns the fields it set in its last
//! apply. This module keeps that bookkeeping and does the merge, so the store
//! only has to decide *which* object and *which* manager.
//!
//! The contract, as a controller sees it:
//! - the fields an apply sets are merged into the object;
//! - fields the manager set in its previous apply and no longer sets are
//!   removed, unless another manager still owns them (or something below them);
//! - changing a field another manager owns to a different value is a conflict,
//!   unless the apply is forced, which moves ownership to the applier; setting
//!   it to the same value shares ownership;
//! - a container (map) emptied by a removal is removed too, unless a manager
//!   owns it as an empty map.
//!
//! Ownership is a set of leaf paths per manager: maps are recursed into (so
//! `metadata.labels` and `metadata.annotations` are owned key by key), an
//! empty map is a leaf meaning "this map exists", and `null` means "not set".
//!
//! Two lists of every object merge as they do on a real API server:
//! - `metadata.finalizers` is a set: each entry is owned on its own, so
//!   controllers that apply finalizers never drop each other's entries;
//! - `metadata.ownerReferences` is a list keyed by `uid`: each reference is
//!   an item whose fields are owned one by one, so two managers applying a
//!   reference each keep both, and a manager that stops applying its
//!   reference removes only that one. New items are appended in the order
//!   the applier listed them. A manager that stops setting an item's `uid`
//!   (its key) gives up the whole item.
//!
//! Known bounds versus a real API server, which knows each kind's schema:
//! - Every other list is atomic (one leaf). A real server merges some by key,
//!   e.g. `spec.containers` by `name`; with one manager per list the result
//!   is identical, with several the last applier's list wins (or conflicts
//!   without force).
//! - Without a schema there are no defaults, type checks or field validation;
//!   a value replaces whatever was there (a scalar may become a map).

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Bound;

use serde_json::{Map, Value};

/// Lists whose string entries are owned one by one (`listType=set`).
const SET_LISTS: &[[&str; 2]] = &[["metadata", "finalizers"]];

/// Lists of maps merged item by item, each item named by the value of one
/// of its fields (`listType=map`): the list's path and that field.
const KEYED_LISTS: &[([&str; 2], &str)] = &[(["metadata", "ownerReferences"], "uid")];

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Segment {
    /// A member of a map.
    Field(String),
    /// A string entry of a set list (`metadata.finalizers`).
    Entry(String),
    /// The item of a keyed list whose field `key` holds `value`
    /// (`metadata.ownerReferences` by `uid`).
    Item { key: String, value: String },
}

/// The path of one owned field, from the object's root. A boxed slice,
/// not a `Vec`: every stored object keeps a path per owned leaf, and a
/// `Vec` grown by one segment keeps room for more.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldPath(Box<[Segment]>);

impl FieldPath {
    pub fn new(segments: Vec<Segment>) -> Self {
        Self(segments.into_boxed_slice())
    }

    /// A path of map members only: `FieldPath::fields(&["spec", "replicas"])`.
    #[cfg(test)]
    pub fn fields(names: &[&str]) -> Self {
        Self(
            names
                .iter()
                .map(|n| Segment::Field((*n).to_string()))
                .collect(),
        )
    }

    pub fn segments(&self) -> &[Segment] {
        &self.0
    }

    fn child(&self, segment: Segment) -> Self {
        let mut segments = Vec::with_capacity(self.0.len() + 1);
        segments.extend_from_slice(&self.0);
        segments.push(segment);
        Self(segments.into_boxed_slice())
    }

    fn is_set_list(&self) -> bool {
        SET_LISTS.iter().any(|list| self.is_fields(list))
    }

    /// The field naming each item, if this is a keyed list.
    fn list_key(&self) -> Option<&'static str> {
        KEYED_LISTS
            .iter()
            .find(|(list, _)| self.is_fields(list))
            .map(|(_, key)| *key)
    }

    fn is_fields(&self, names: &[&str]) -> bool {
        self.0.len() == names.len()
            && self
                .0
                .iter()
                .zip(names)
                .all(|(s, name)| matches!(s, Segment::Field(f) if f == name))
    }
}

impl Borrow<[Segment]> for FieldPath {
    fn borrow(&self) -> &[Segment] {
        &self.0
    }
}

impl fmt::Display for FieldPath {
    /// `spec.replicas`, `metadata.labels["app.kubernetes.io/name"]`,
    /// `metadata.finalizers[="example.com/cleanup"]`,
    /// `metadata.ownerReferences[uid="…"].controller`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Field(name) if is_plain(name) && i == 0 => write!(f, "{name}")?,
                Segment::Field(name) if is_plain(name) => write!(f, ".{name}")?,
                Segment::Field(name) => write!(f, "[{name:?}]")?,
                Segment::Entry(entry) => write!(f, "[={entry:?}]")?,
                Segment::Item { key, value } => write!(f, "[{key}={value:?}]")?,
            }
        }
        Ok(())
    }
}

fn is_plain(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

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
                if !path.0.is_empty() {
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
            .is_some_and(|p| p.0.starts_with(path))
    }

    /// Whether the set holds something strictly below `path`.
    pub fn owns_below(&self, path: &[Segment]) -> bool {
        self.first_from(Bound::Excluded(path))
            .is_some_and(|p| p.0.starts_with(path))
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
                set.0.remove(path);
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

/// Whether a list can merge by `key`: every item a map naming itself by a
/// non-empty string, no two alike. Anything else stays atomic (the store
/// refuses such ownerReferences before they get here).
fn is_keyed(items: &[Value], key: &str) -> bool {
    let mut seen = BTreeSet::new();
    items
        .iter()
        .all(|item| item_key(item, key).is_some_and(|value| seen.insert(value)))
}

fn item_key<'a>(item: &'a Value, key: &str) -> Option<&'a str> {
    item.as_object()?
        .get(key)?
        .as_str()
        .filter(|value| !value.is_empty())
}

/// Appends the items of `config`'s keyed lists that `object` lacks, as
/// stubs holding only their key, in the order `config` lists them: their
/// fields are written leaf by leaf afterwards, and the leaves come sorted.
fn add_new_items(object: &mut Value, config: &Value) {
    for (list, key) in KEYED_LISTS {
        let path: Vec<Segment> = list.iter().map(|n| Segment::Field(n.to_string())).collect();
        let Some(Value::Array(wanted)) = resolve(config, &path) else {
            continue;
        };
        if !is_keyed(wanted, key) {
            continue;
        }
        let present: Vec<String> = match resolve(object, &path) {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|i| item_key(i, key))
                .map(str::to_string)
                .collect(),
            _ => Vec::new(),
        };
        let missing: Vec<&str> = wanted
            .iter()
            .filter_map(|i| item_key(i, key))
            .filter(|value| !present.iter().any(|p| p == value))
            .collect();
        if missing.is_empty() {
            continue;
        }
        let mut target = &mut *object;
        for name in list.iter() {
            target = as_map(target)
                .entry(name.to_string())
                .or_insert(Value::Null);
        }
        let items = as_list(target);
        for value in missing {
            let mut stub = Map::new();
            stub.insert(key.to_string(), Value::String(value.to_string()));
            items.push(Value::Object(stub));
        }
    }
}

/// The value at `path` in `object`.
pub fn resolve<'a>(object: &'a Value, path: &[Segment]) -> Option<&'a Value> {
    path.iter()
        .try_fold(object, |value, segment| match segment {
            Segment::Field(name) => value.as_object()?.get(name),
            Segment::Entry(entry) => value.as_array()?.iter().find(|v| v.as_str() == Some(entry)),
            Segment::Item { key, value: wanted } => value
                .as_array()?
                .iter()
                .find(|v| item_key(v, key) == Some(wanted)),
        })
}

/// Writes one leaf of an applied configuration into `object`, creating the
/// maps above it. An empty map leaf keeps an existing map as it is.
fn write(object: &mut Value, path: &[Segment], leaf: Option<&Value>) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut target = object;
    for segment in parents {
        target = match segment {
            Segment::Field(name) => as_map(target).entry(name.clone()).or_insert(Value::Null),
            Segment::Item { key, value } => item_mut(as_list(target), key, value),
            Segment::Entry(_) => return,
        };
    }
    match last {
        Segment::Field(name) => {
            let Some(leaf) = leaf else {
                return;
            };
            let slot = as_map(target).entry(name.clone()).or_insert(Value::Null);
            let keep_map = slot.is_object() && leaf.as_object().is_some_and(Map::is_empty);
            if !keep_map {
                *slot = leaf.clone();
            }
        }
        Segment::Entry(entry) => {
            let items = as_list(target);
            if !items.iter().any(|v| v.as_str() == Some(entry)) {
                items.push(Value::String(entry.clone()));
            }
        }
        Segment::Item { key, value } => {
            item_mut(as_list(target), key, value);
        }
    }
}

/// The item of a keyed list named `value`, appended if missing.
fn item_mut<'a>(items: &'a mut Vec<Value>, key: &str, value: &str) -> &'a mut Value {
    let index = match items.iter().position(|i| item_key(i, key) == Some(value)) {
        Some(index) => index,
        None => {
            let mut stub = Map::new();
            stub.insert(key.to_string(), Value::String(value.to_string()));
            items.push(Value::Object(stub));
            items.len() - 1
        }
    };
    &mut items[index]
}

fn as_map(value: &mut Value) -> &mut Map<String, Value> {
    if !value.is_object() {
        *value = Value::Object(Map::new());
    }
    match value {
        Value::Object(map) => map,
        _ => unreachable!("just made a map"),
    }
}

fn as_list(value: &mut Value) -> &mut Vec<Value> {
    if !value.is_array() {
        *value = Value::Array(Vec::new());
    }
    match value {
        Value::Array(items) => items,
        _ => unreachable!("just made a list"),
    }
}

/// Removes the field at `path`, then each container above it that the
/// removal left empty, unless `keep` says it is owned as an empty container.
/// `metadata` itself is never removed.
fn remove(object: &mut Value, path: &[Segment], keep: &dyn Fn(&[Segment]) -> bool) {
    // An item's key names it: giving it up gives up the item.
    if let [.., Segment::Item { key, .. }, Segment::Field(name)] = path
        && name == key
    {
        return remove(object, &path[..path.len() - 1], keep);
    }
    if !remove_one(object, path) {
        return;
    }
    for depth in (1..path.len()).rev() {
        let prefix = &path[..depth];
        let is_metadata = depth == 1 && prefix[0] == Segment::Field("metadata".into());
        let empty = resolve(object, prefix).is_some_and(is_empty_container);
        if is_metadata || !empty || keep(prefix) || !remove_one(object, prefix) {
            break;
        }
    }
}

fn is_empty_container(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

/// Removes exactly the field at `path`; whether there was one.
fn remove_one(object: &mut Value, path: &[Segment]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let parent = parents
        .iter()
        .try_fold(object, |value, segment| match segment {
            Segment::Field(name) => value.as_object_mut()?.get_mut(name),
            Segment::Item { key, value: wanted } => value
                .as_array_mut()?
                .iter_mut()
                .find(|v| item_key(v, key) == Some(wanted)),
            Segment::Entry(_) => None,
        });
    match (last, parent) {
        (Segment::Field(name), Some(Value::Object(map))) => map.remove(name).is_some(),
        (Segment::Entry(entry), Some(Value::Array(items))) => {
            let before = items.len();
            items.retain(|v| v.as_str() != Some(entry));
            items.len() != before
        }
        (Segment::Item { key, value }, Some(Value::Array(items))) => {
            let before = items.len();
            items.retain(|v| item_key(v, key) != Some(value));
            items.len() != before
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn apply(manager: &str) -> Manager {
        Manager::new(manager, Operation::Apply)
    }

    fn paths(set: &FieldSet) -> Vec<String> {
        set.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn leaf_paths_recurse_into_maps_and_keep_lists_whole() {
        let config = json!({
            "metadata": {"labels": {"app": "web", "app.kubernetes.io/name": "web"}, "finalizers": ["a.io/x", "b.io/y"]},
            "spec": {"replicas": 3, "ports": [80, 443], "empty": {}, "unset": null}
        });
        assert_eq!(
            paths(&FieldSet::of(&config)),
            [
                "metadata.finalizers[=\"a.io/x\"]",
                "metadata.finalizers[=\"b.io/y\"]",
                "metadata.labels.app",
                "metadata.labels[\"app.kubernetes.io/name\"]",
                "spec.empty",
                "spec.ports",
                "spec.replicas",
            ]
        );
    }

    #[test]
    fn a_dropped_field_is_removed_and_emptied_maps_go_with_it() {
        let first = Ownership::default()
            .apply(&json!({}), &json!({"spec": {"a": 1}}), &apply("m"), false)
            .unwrap();
        let second = first
            .ownership
            .apply(
                &first.object,
                &json!({"metadata": {"labels": {"x": "1"}}}),
                &apply("m"),
                false,
            )
            .unwrap();
        assert_eq!(second.object, json!({"metadata": {"labels": {"x": "1"}}}));
        assert_eq!(
            paths(second.ownership.fields_of(&apply("m")).unwrap()),
            ["metadata.labels.x"]
        );
    }

    #[test]
    fn another_managers_field_survives_when_the_first_drops_it() {
        let a = Ownership::default()
            .apply(
                &json!({}),
                &json!({"spec": {"a": 1, "shared": 2}}),
                &apply("a"),
                false,
            )
            .unwrap();
        let b = a
            .ownership
            .apply(
                &a.object,
                &json!({"spec": {"shared": 2}}),
                &apply("b"),
                false,
            )
            .unwrap();
        let dropped = b
            .ownership
            .apply(&b.object, &json!({"spec": {}}), &apply("a"), false)
            .unwrap();
        assert_eq!(dropped.object, json!({"spec": {"shared": 2}}));
        assert!(
            dropped
                .ownership
                .fields_of(&apply("b"))
                .unwrap()
                .contains(FieldPath::fields(&["spec", "shared"]).segments())
        );
    }

    #[test]
    fn changing_anothers_field_conflicts_unless_forced() {
        let a = Ownership::default()
            .apply(
                &json!({}),
                &json!({"spec": {"replicas": 1}}),
                &apply("a"),
                false,
            )
            .unwrap();
        let conflicts = a
            .ownership
            .apply(
                &a.object,
                &json!({"spec": {"replicas": 2}}),
                &apply("b"),
                false,
            )
            .unwrap_err();
        assert_eq!(
            conflicts,
            [FieldConflict {
                path: FieldPath::fields(&["spec", "replicas"]),
                manager: "a".into()
            }]
        );
        assert_eq!(
            conflicts[0].to_string(),
            "spec.replicas is owned by field manager \"a\""
        );

        let forced = a
            .ownership
            .apply(
                &a.object,
                &json!({"spec": {"replicas": 2}}),
                &apply("b"),
                true,
            )
            .unwrap();
        assert_eq!(forced.object, json!({"spec": {"replicas": 2}}));
        assert_eq!(
            forced
                .ownership
                .managers()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>(),
            ["b"]
        );
    }

    #[test]
    fn replacing_a_map_someone_owns_fields_in_conflicts() {
        let a = Ownership::default()
            .apply(
                &json!({}),
                &json!({"spec": {"x": {"y": 1}}}),
                &apply("a"),
                false,
            )
            .unwrap();
        let conflicts = a
            .ownership
            .apply(&a.object, &json!({"spec": {"x": 5}}), &apply("b"), false)
            .unwrap_err();
        assert_eq!(conflicts[0].path.to_string(), "spec.x.y");
        // An empty map only asserts the map exists: no conflict, nothing lost.
        let shared = a
            .ownership
            .apply(&a.object, &json!({"spec": {"x": {}}}), &apply("b"), false)
            .unwrap();
        assert_eq!(shared.object, a.object);
    }

    #[test]
    fn finalizer_entries_are_owned_one_by_one() {
        let a = Ownership::default()
            .apply(
                &json!({}),
                &json!({"metadata": {"finalizers": ["a.io/x"]}}),
                &apply("a"),
                false,
            )
            .unwrap();
        let b = a
            .ownership
            .apply(
                &a.object,
                &json!({"metadata": {"finalizers": ["b.io/y"]}}),
                &apply("b"),
                false,
            )
            .unwrap();
        assert_eq!(
            b.object,
            json!({"metadata": {"finalizers": ["a.io/x", "b.io/y"]}})
        );
        let a_drops = b
            .ownership
            .apply(&b.object, &json!({}), &apply("a"), false)
            .unwrap();
        assert_eq!(
            a_drops.object,
            json!({"metadata": {"finalizers": ["b.io/y"]}})
        );
        let b_drops = a_drops
            .ownership
            .apply(&a_drops.object, &json!({}), &apply("b"), false)
            .unwrap();
        assert_eq!(
            b_drops.object,
            json!({"metadata": {}}),
            "the emptied list is removed, metadata stays"
        );
    }

    #[test]
    fn prune_forgets_fields_that_were_removed_by_other_means() {
        let mut merge = Ownership::default()
            .apply(
                &json!({}),
                &json!({"spec": {"a": 1, "b": 2}}),
                &apply("m"),
                false,
            )
            .unwrap();
        merge.ownership.prune(&json!({"spec": {"b": 2}}));
        assert_eq!(
            paths(merge.ownership.fields_of(&apply("m")).unwrap()),
            ["spec.b"]
        );
        merge.ownership.prune(&json!({}));
        assert!(merge.ownership.fields_of(&apply("m")).is_none());
    }

    fn owner_ref(kind: &str, name: &str, uid: &str, controller: bool) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": kind, "name": name, "uid": uid,
            "controller": controller})
    }

    fn refs(refs: Vec<Value>) -> Value {
        json!({"metadata": {"ownerReferences": refs}})
    }

    #[test]
    fn owner_references_of_two_managers_merge_by_uid() {
        let a = Ownership::default()
            .apply(
                &json!({}),
                &refs(vec![owner_ref("Keeper", "k", "uid-k", true)]),
                &apply("a"),
                false,
            )
            .unwrap();
        let b = a
            .ownership
            .apply(
                &a.object,
                &refs(vec![owner_ref("Watcher", "w", "uid-w", false)]),
                &apply("b"),
                false,
            )
            .unwrap();
        assert_eq!(
            b.object,
            refs(vec![
                owner_ref("Keeper", "k", "uid-k", true),
                owner_ref("Watcher", "w", "uid-w", false)
            ]),
            "both references are kept, in the order they came"
        );
        assert_eq!(
            paths(b.ownership.fields_of(&apply("b")).unwrap()),
            [
                "metadata.ownerReferences[uid=\"uid-w\"].apiVersion",
                "metadata.ownerReferences[uid=\"uid-w\"].controller",
                "metadata.ownerReferences[uid=\"uid-w\"].kind",
                "metadata.ownerReferences[uid=\"uid-w\"].name",
                "metadata.ownerReferences[uid=\"uid-w\"].uid",
            ]
        );
    }

    #[test]
    fn a_manager_dropping_its_owner_reference_removes_only_its_own() {
        let a = Ownership::default()
            .apply(
                &json!({}),
                &refs(vec![owner_ref("Keeper", "k", "uid-k", true)]),
                &apply("a"),
                false,
            )
            .unwrap();
        let b = a
            .ownership
            .apply(
                &a.object,
                &refs(vec![owner_ref("Watcher", "w", "uid-w", false)]),
                &apply("b"),
                false,
            )
            .unwrap();
        let b_drops = b
            .ownership
            .apply(&b.object, &json!({"metadata": {}}), &apply("b"), false)
            .unwrap();
        assert_eq!(
            b_drops.object,
            refs(vec![owner_ref("Keeper", "k", "uid-k", true)])
        );
        let a_drops = b_drops
            .ownership
            .apply(
                &b_drops.object,
                &json!({"metadata": {}}),
                &apply("a"),
                false,
            )
            .unwrap();
        assert_eq!(
            a_drops.object,
            json!({"metadata": {}}),
            "the emptied list is removed"
        );
    }

    #[test]
    fn a_shared_owner_reference_stays_until_its_last_manager_drops_it() {
        let shared = refs(vec![owner_ref("Keeper", "k", "uid-k", false)]);
        let a = Ownership::default()
            .apply(&json!({}), &shared, &apply("a"), false)
            .unwrap();
        let b = a
            .ownership
            .apply(&a.object, &shared, &apply("b"), false)
            .unwrap();
        let a_drops = b
            .ownership
            .apply(&b.object, &json!({}), &apply("a"), false)
            .unwrap();
        assert_eq!(a_drops.object, shared);
        // Flipping the controller flag of a reference another manager holds
        // is a conflict on that one field.
        let conflicts = a_drops
            .ownership
            .apply(
                &a_drops.object,
                &refs(vec![owner_ref("Keeper", "k", "uid-k", true)]),
                &apply("a"),
                false,
            )
            .unwrap_err();
        assert_eq!(
            conflicts[0].to_string(),
            "metadata.ownerReferences[uid=\"uid-k\"].controller is owned by field manager \"b\""
        );
    }

    #[test]
    fn new_owner_references_keep_the_order_the_applier_gave() {
        let merged = Ownership::default()
            .apply(
                &json!({}),
                &refs(vec![
                    owner_ref("Zeta", "z", "uid-z", false),
                    owner_ref("Alpha", "a", "uid-a", false),
                ]),
                &apply("m"),
                false,
            )
            .unwrap();
        let uids: Vec<&Value> = merged.object["metadata"]["ownerReferences"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| &r["uid"])
            .collect();
        assert_eq!(uids, [&json!("uid-z"), &json!("uid-a")]);
    }
}
