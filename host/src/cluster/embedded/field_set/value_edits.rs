//! Reading and editing an object's value at one field path: what a merge
//! does to the object, leaf by leaf.
//!
//! Why a module: a path may pass through a set-list entry or a keyed-list
//! item, and creating, finding and removing those (with the containers a
//! removal empties) is the same work wherever a path is followed.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::field_path::{KEYED_LISTS, Segment};

/// Whether a list can merge by `key`: every item a map naming itself by a
/// non-empty string, no two alike. Anything else stays atomic (the store
/// refuses such ownerReferences before they get here).
pub(super) fn is_keyed(items: &[Value], key: &str) -> bool {
    let mut seen = BTreeSet::new();
    items
        .iter()
        .all(|item| item_key(item, key).is_some_and(|value| seen.insert(value)))
}

pub(super) fn item_key<'a>(item: &'a Value, key: &str) -> Option<&'a str> {
    item.as_object()?
        .get(key)?
        .as_str()
        .filter(|value| !value.is_empty())
}

/// Appends the items of `config`'s keyed lists that `object` lacks, as
/// stubs holding only their key, in the order `config` lists them: their
/// fields are written leaf by leaf afterwards, and the leaves come sorted.
pub(super) fn add_new_items(object: &mut Value, config: &Value) {
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
pub(super) fn write(object: &mut Value, path: &[Segment], leaf: Option<&Value>) {
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
pub(super) fn remove(object: &mut Value, path: &[Segment], keep: &dyn Fn(&[Segment]) -> bool) {
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
