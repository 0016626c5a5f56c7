//! Which cached objects name which owner as their controller, so a
//! primary's children are found without reading every object of the owned
//! kinds in its namespace: one reconcile per primary would otherwise read
//! every other primary's children too, and converging N primaries would
//! take N² steps.
//!
//! An index of candidates, not the answer: a controller ownerReference
//! points at its owner by uid when both have one, otherwise by kind and
//! name (`reconciler_contract::memory_cache::is_controlled_by`), so each
//! reference is filed under both, and the caller checks each candidate with
//! that same rule.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use reconciler_contract::KindRef;
use serde_json::Value;

/// A cached object: kind, namespace, name, in the cache's order.
pub type CacheKey = (KindRef, Option<String>, String);

/// What one controller reference is filed under.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum OwnerKey {
    Uid(String),
    /// The owner's kind (without group) and name.
    KindName(String, String),
}

#[derive(Default)]
pub struct ControllerIndex {
    by_owner: HashMap<OwnerKey, BTreeSet<Arc<CacheKey>>>,
    /// What each object is filed under, to take it out again.
    filed: HashMap<Arc<CacheKey>, Box<[OwnerKey]>>,
}

impl ControllerIndex {
    /// Files the object stored under `key` under `owners` (its
    /// [`owner_keys`]), replacing what an earlier version was filed under.
    pub fn insert(&mut self, key: CacheKey, owners: Vec<OwnerKey>) {
        if owners.is_empty() {
            self.remove(&key);
            return;
        }
        if self.filed.get(&key).is_some_and(|old| **old == *owners) {
            return;
        }
        self.remove(&key);
        let key = Arc::new(key);
        for owner in &owners {
            self.by_owner
                .entry(owner.clone())
                .or_default()
                .insert(key.clone());
        }
        self.filed.insert(key, owners.into_boxed_slice());
    }

    pub fn remove(&mut self, key: &CacheKey) {
        let Some((key, owners)) = self.filed.remove_entry(key) else {
            return;
        };
        for owner in owners.iter() {
            if let Some(keys) = self.by_owner.get_mut(owner) {
                keys.remove(&key);
                if keys.is_empty() {
                    self.by_owner.remove(owner);
                }
            }
        }
    }

    /// Every object whose controller reference may point at `owner`, in
    /// the cache's order: those filed under its uid or its kind and name.
    pub fn candidates(&self, owner: &Value) -> BTreeSet<&CacheKey> {
        let metadata = owner.get("metadata");
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
        let mut keys = BTreeSet::new();
        let mut add = |owner_key: OwnerKey| {
            if let Some(filed) = self.by_owner.get(&owner_key) {
                keys.extend(filed.iter().map(|k| &**k));
            }
        };
        if let Some(uid) = text(metadata.and_then(|m| m.get("uid"))) {
            add(OwnerKey::Uid(uid));
        }
        if let (Some(kind), Some(name)) = (
            text(owner.get("kind")),
            text(metadata.and_then(|m| m.get("name"))),
        ) {
            add(OwnerKey::KindName(kind, name));
        }
        keys
    }

    /// How many objects are filed.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.filed.len()
    }
}

/// Where each controller reference of `object` is filed: its uid, and its
/// kind and name, when it has them.
pub fn owner_keys(object: &Value) -> Vec<OwnerKey> {
    let Some(refs) = object
        .get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let mut keys = Vec::new();
    for r in refs {
        if r.get("controller").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let text = |field: &str| r.get(field).and_then(Value::as_str).map(str::to_string);
        if let Some(uid) = text("uid") {
            keys.push(OwnerKey::Uid(uid));
        }
        if let (Some(kind), Some(name)) = (text("kind"), text("name")) {
            keys.push(OwnerKey::KindName(kind, name));
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn key(name: &str) -> CacheKey {
        (
            KindRef::new("apps", "v1", "Deployment"),
            Some("d".into()),
            name.into(),
        )
    }

    fn owned_by(uid: Option<&str>, name: &str) -> Value {
        let mut reference = json!({"apiVersion": "example.com/v1", "kind": "PodSet",
            "name": name, "controller": true});
        if let Some(uid) = uid {
            reference["uid"] = json!(uid);
        }
        json!({"metadata": {"ownerReferences": [reference]}})
    }

    fn owner(uid: Option<&str>, name: &str) -> Value {
        let mut owner = json!({"kind": "PodSet", "metadata": {"name": name}});
        if let Some(uid) = uid {
            owner["metadata"]["uid"] = json!(uid);
        }
        owner
    }

    fn names(index: &ControllerIndex, owner: &Value) -> Vec<String> {
        index
            .candidates(owner)
            .into_iter()
            .map(|(_, _, name)| name.clone())
            .collect()
    }

    #[test]
    fn children_are_found_by_uid_or_by_kind_and_name() {
        let mut index = ControllerIndex::default();
        index.insert(key("b"), owner_keys(&owned_by(Some("u1"), "web")));
        index.insert(key("a"), owner_keys(&owned_by(None, "web")));
        index.insert(key("c"), owner_keys(&owned_by(Some("u2"), "api")));
        index.insert(key("n"), owner_keys(&json!({"metadata": {}})));
        assert_eq!(names(&index, &owner(Some("u1"), "web")), ["a", "b"]);
        assert_eq!(names(&index, &owner(None, "api")), ["c"]);
        assert!(names(&index, &owner(Some("u3"), "db")).is_empty());
        assert_eq!(index.len(), 3, "objects without a controller are not filed");
    }

    #[test]
    fn a_new_version_replaces_what_the_old_one_was_filed_under() {
        let mut index = ControllerIndex::default();
        index.insert(key("a"), owner_keys(&owned_by(Some("u1"), "web")));
        index.insert(key("a"), owner_keys(&owned_by(Some("u2"), "api")));
        assert!(names(&index, &owner(Some("u1"), "web")).is_empty());
        assert_eq!(names(&index, &owner(Some("u2"), "api")), ["a"]);
        index.insert(key("a"), owner_keys(&json!({"metadata": {}})));
        assert!(names(&index, &owner(Some("u2"), "api")).is_empty());
        index.insert(key("b"), owner_keys(&owned_by(Some("u1"), "web")));
        index.remove(&key("b"));
        assert_eq!(index.len(), 0);
        assert!(index.by_owner.is_empty(), "no empty sets left behind");
    }
}
