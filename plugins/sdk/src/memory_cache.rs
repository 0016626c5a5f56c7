//! An in-memory object cache with the semantics of the host's cache import.
//!
//! The native test harness serves a plugin's `get`/`list` calls from it, and
//! `reconciler-host test` serves the compiled plugin from the same type, so a
//! golden case and a native test observe identical results: same ordering,
//! same selector rules, same way of finding a primary's children.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::contract::{KindRef, Projection, ReconcileRequest};
use crate::selector::LabelSelector;

/// Objects kept sorted by kind, namespace and name, each with its JSON text
/// and labels extracted once at insert: a `list` then filters without
/// parsing and answers by copying text, which is what crosses the boundary.
#[derive(Clone, Debug, Default)]
pub struct MemoryCache {
    entries: Vec<Entry>,
}

#[derive(Clone, Debug)]
struct Entry {
    kind: KindRef,
    namespace: Option<String>,
    name: String,
    labels: BTreeMap<String, String>,
    json: Arc<str>,
    /// The [`Projection::MetadataOnly`] form.
    metadata_json: Arc<str>,
    value: Value,
}

impl Entry {
    fn text(&self, projection: Projection) -> String {
        match projection {
            Projection::Full => self.json.to_string(),
            Projection::MetadataOnly => self.metadata_json.to_string(),
        }
    }

    fn key(&self) -> (&KindRef, Option<&str>, &str) {
        (&self.kind, self.namespace.as_deref(), &self.name)
    }
}

/// An object the cache cannot hold, named by its position or name.
#[derive(Debug, thiserror::Error)]
#[error("object {what} cannot be cached: {reason}")]
pub struct CacheError {
    pub what: String,
    pub reason: String,
}

/// `metadata.name` of a JSON object.
pub fn name_of(object: &Value) -> Option<&str> {
    object.pointer("/metadata/name")?.as_str()
}

/// `metadata.namespace` of a JSON object.
pub fn namespace_of(object: &Value) -> Option<&str> {
    object.pointer("/metadata/namespace")?.as_str()
}

/// Whether a JSON object has a deletionTimestamp: it is being deleted.
pub fn is_deleting(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// `metadata.labels` of a JSON object (string values only).
pub fn labels_of(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

impl MemoryCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces an object (matched by kind, namespace and name).
    pub fn insert(&mut self, object: Value) -> Result<(), CacheError> {
        let what = name_of(&object)
            .map(str::to_string)
            .unwrap_or_else(|| format!("#{}", self.entries.len() + 1));
        let fail = |reason: &str| CacheError {
            what: what.clone(),
            reason: reason.to_string(),
        };
        let kind = KindRef::of_object(&object)
            .ok_or_else(|| fail("apiVersion and kind must be strings"))?;
        let name = name_of(&object)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| fail("metadata.name must be a non-empty string"))?;
        let entry = Entry {
            name: name.to_string(),
            namespace: namespace_of(&object).map(str::to_string),
            labels: labels_of(&object),
            json: object.to_string().into(),
            metadata_json: metadata_only(&object).to_string().into(),
            kind,
            value: object,
        };
        match self.entries.binary_search_by(|e| e.key().cmp(&entry.key())) {
            Ok(i) => self.entries[i] = entry,
            Err(i) => self.entries.insert(i, entry),
        }
        Ok(())
    }

    /// Removes an object; whether it was there.
    pub fn remove(&mut self, kind: &KindRef, namespace: Option<&str>, name: &str) -> bool {
        match self
            .entries
            .binary_search_by(|e| e.key().cmp(&(kind, namespace, name)))
        {
            Ok(i) => {
                self.entries.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many objects of each kind are held.
    pub fn counts_by_kind(&self) -> Vec<(KindRef, usize)> {
        let mut counts: Vec<(KindRef, usize)> = Vec::new();
        for entry in &self.entries {
            match counts.last_mut() {
                Some((kind, n)) if *kind == entry.kind => *n += 1,
                _ => counts.push((entry.kind.clone(), 1)),
            }
        }
        counts
    }

    pub fn iter(&self) -> impl Iterator<Item = &Value> {
        self.entries.iter().map(|e| &e.value)
    }

    /// The entries of one kind: a contiguous run, found by binary search.
    fn of_kind<'a>(&'a self, kind: &KindRef) -> &'a [Entry] {
        let start = self.entries.partition_point(|e| &e.kind < kind);
        let len = self.entries[start..].partition_point(|e| &e.kind == kind);
        &self.entries[start..start + len]
    }

    pub fn get(&self, kind: &KindRef, namespace: Option<&str>, name: &str) -> Option<&Value> {
        self.of_kind(kind)
            .iter()
            .find(|e| e.namespace.as_deref() == namespace && e.name == name)
            .map(|e| &e.value)
    }

    /// Objects of `kind`, in `namespace` (all namespaces when `None`), whose
    /// labels match `selector`; ordered by namespace, then name.
    pub fn list<'a>(
        &'a self,
        kind: &KindRef,
        namespace: Option<&'a str>,
        selector: &'a LabelSelector,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        self.select(kind, namespace, selector).map(|e| &e.value)
    }

    fn select<'a>(
        &'a self,
        kind: &KindRef,
        namespace: Option<&'a str>,
        selector: &'a LabelSelector,
    ) -> impl Iterator<Item = &'a Entry> + 'a {
        self.of_kind(kind).iter().filter(move |e| {
            namespace.is_none_or(|ns| e.namespace.as_deref() == Some(ns))
                && selector.matches(&e.labels)
        })
    }

    /// [`Self::get`] as the cache import answers it: JSON text.
    pub fn get_json(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
        projection: Projection,
    ) -> Option<String> {
        self.of_kind(kind)
            .iter()
            .find(|e| e.namespace.as_deref() == namespace && e.name == name)
            .map(|e| e.text(projection))
    }

    /// [`Self::list`] as the cache import answers it: the selector in string
    /// form, JSON text out, a clear error for a malformed selector.
    pub fn list_json(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &str,
        projection: Projection,
    ) -> Result<Vec<String>, String> {
        let selector = LabelSelector::parse(selector).map_err(|e| e.to_string())?;
        Ok(self
            .select(kind, namespace, &selector)
            .map(|e| e.text(projection))
            .collect())
    }

    /// The request the host sends for `primary`: its owned children from this
    /// cache, and `deleting` from its deletionTimestamp.
    pub fn request_for(&self, primary: &Value, owns: &[KindRef]) -> ReconcileRequest {
        ReconcileRequest {
            primary: primary.to_string(),
            children: self
                .children(primary, owns)
                .map(|e| e.json.to_string())
                .collect(),
            deleting: is_deleting(primary),
        }
    }

    /// The owned children of `primary`: objects of one of the `owns` kinds in
    /// the primary's namespace whose controller ownerReference points at it
    /// (by uid when both sides have one, otherwise by kind and name).
    pub fn children_of<'a>(
        &'a self,
        primary: &'a Value,
        owns: &[KindRef],
    ) -> impl Iterator<Item = &'a Value> + 'a {
        self.children(primary, owns).map(|e| &e.value)
    }

    /// Children in the contract's order: kind, then namespace, then name.
    fn children<'a>(
        &'a self,
        primary: &'a Value,
        owns: &[KindRef],
    ) -> impl Iterator<Item = &'a Entry> + 'a {
        let mut kinds = owns.to_vec();
        kinds.sort();
        kinds
            .into_iter()
            .flat_map(move |kind| self.of_kind(&kind))
            .filter(move |e| {
                e.namespace.as_deref() == namespace_of(primary)
                    && is_controlled_by(&e.value, primary)
            })
    }
}

/// `apiVersion`, `kind` and `metadata` of an object, without managedFields
/// (bookkeeping of the API server that no plugin decides on).
pub fn metadata_only(object: &Value) -> Value {
    let mut metadata = object.get("metadata").cloned().unwrap_or_default();
    if let Some(m) = metadata.as_object_mut() {
        m.remove("managedFields");
    }
    serde_json::json!({
        "apiVersion": object.get("apiVersion"),
        "kind": object.get("kind"),
        "metadata": metadata,
    })
}

/// Whether `object` has a controller ownerReference to `owner`.
pub fn is_controlled_by(object: &Value, owner: &Value) -> bool {
    let Some(refs) = object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
    else {
        return false;
    };
    let owner_uid = owner.pointer("/metadata/uid").and_then(Value::as_str);
    refs.iter().any(|r| {
        let controller = r
            .get("controller")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let ref_uid = r.get("uid").and_then(Value::as_str);
        let same = match (ref_uid, owner_uid) {
            (Some(a), Some(b)) => a == b,
            _ => {
                r.get("kind").and_then(Value::as_str) == owner.get("kind").and_then(Value::as_str)
                    && r.get("name").and_then(Value::as_str) == name_of(owner)
            }
        };
        controller && same
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(ns: &str, name: &str, app: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": ns, "name": name, "labels": {"app": app}}})
    }

    #[test]
    fn list_filters_by_kind_namespace_and_selector_in_name_order() {
        let mut cache = MemoryCache::new();
        for p in [
            pod("a", "z", "web"),
            pod("a", "b", "web"),
            pod("b", "c", "web"),
            pod("a", "d", "db"),
        ] {
            cache.insert(p).unwrap();
        }
        let kind = KindRef::new("", "v1", "Pod");
        let web = LabelSelector::parse("app=web").unwrap();
        let everything = LabelSelector::everything();
        let names: Vec<_> = cache
            .list(&kind, Some("a"), &web)
            .filter_map(name_of)
            .collect();
        assert_eq!(names, ["b", "z"]);
        let all: Vec<_> = cache
            .list(&kind, None, &everything)
            .filter_map(name_of)
            .collect();
        assert_eq!(all, ["b", "d", "z", "c"]);
        assert!(cache.get(&kind, Some("b"), "c").is_some());
        assert!(cache.get(&kind, Some("a"), "c").is_none());
    }

    #[test]
    fn insert_replaces_the_same_object_and_refuses_nameless_ones() {
        let mut cache = MemoryCache::new();
        cache.insert(pod("a", "p", "web")).unwrap();
        cache.insert(pod("a", "p", "db")).unwrap();
        assert_eq!(cache.len(), 1);
        let err = cache
            .insert(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}}))
            .unwrap_err();
        assert!(err.to_string().contains("metadata.name"), "{err}");
    }

    #[test]
    fn children_are_found_by_controller_owner_reference() {
        let owner = json!({"apiVersion": "x/v1", "kind": "Set", "metadata": {"namespace": "a", "name": "s", "uid": "u1"}});
        let owned = |name: &str, uid: &str, controller: bool| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"namespace": "a", "name": name,
                "ownerReferences": [{"apiVersion": "x/v1", "kind": "Set", "name": "s", "uid": uid, "controller": controller}]}})
        };
        let mut cache = MemoryCache::new();
        cache.insert(owned("mine", "u1", true)).unwrap();
        cache.insert(owned("old-owner", "u0", true)).unwrap();
        cache.insert(owned("not-controller", "u1", false)).unwrap();
        let owns = [KindRef::new("apps", "v1", "Deployment")];
        let names: Vec<_> = cache
            .children_of(&owner, &owns)
            .filter_map(name_of)
            .collect();
        assert_eq!(names, ["mine"]);
    }
}
