//! An in-memory object cache with the semantics of the host's cache import.
//!
//! The native test harness serves a plugin's `get`/`list` calls from it, and
//! `reconciler-host test` serves the compiled plugin from the same type, so a
//! golden case and a native test observe identical results: same ordering,
//! same selector rules, same way of finding a primary's children.

use serde_json::Value;

use crate::contract::{KindRef, ReconcileRequest};
use crate::selector::LabelSelector;

/// Objects as JSON, kept sorted by kind, namespace and name.
#[derive(Clone, Debug, Default)]
pub struct MemoryCache {
    objects: Vec<Value>,
}

/// An object the cache cannot hold, named by its position or name.
#[derive(Debug, thiserror::Error)]
#[error("object {what} cannot be cached: {reason}")]
pub struct CacheError {
    pub what: String,
    pub reason: String,
}

fn sort_key(object: &Value) -> (Option<KindRef>, &str, &str) {
    (
        KindRef::of_object(object),
        namespace_of(object).unwrap_or(""),
        name_of(object).unwrap_or(""),
    )
}

/// `metadata.name` of a JSON object.
pub fn name_of(object: &Value) -> Option<&str> {
    object.pointer("/metadata/name")?.as_str()
}

/// `metadata.namespace` of a JSON object.
pub fn namespace_of(object: &Value) -> Option<&str> {
    object.pointer("/metadata/namespace")?.as_str()
}

impl MemoryCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces an object (matched by kind, namespace and name).
    pub fn insert(&mut self, object: Value) -> Result<(), CacheError> {
        let what = name_of(&object)
            .map(str::to_string)
            .unwrap_or_else(|| format!("#{}", self.objects.len() + 1));
        let fail = |reason: &str| CacheError {
            what: what.clone(),
            reason: reason.to_string(),
        };
        if KindRef::of_object(&object).is_none() {
            return Err(fail("apiVersion and kind must be strings"));
        }
        if name_of(&object).is_none_or(str::is_empty) {
            return Err(fail("metadata.name must be a non-empty string"));
        }
        let key = sort_key(&object);
        let (kind, ns, name) = (key.0, key.1.to_string(), key.2.to_string());
        match self
            .objects
            .binary_search_by(|o| sort_key(o).cmp(&(kind.clone(), &ns, &name)))
        {
            Ok(i) => self.objects[i] = object,
            Err(i) => self.objects.insert(i, object),
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Value> {
        self.objects.iter()
    }

    pub fn get(&self, kind: &KindRef, namespace: Option<&str>, name: &str) -> Option<&Value> {
        self.objects.iter().find(|o| {
            KindRef::of_object(o).as_ref() == Some(kind)
                && namespace_of(o) == namespace
                && name_of(o) == Some(name)
        })
    }

    /// Objects of `kind`, in `namespace` (all namespaces when `None`), whose
    /// labels match `selector`; ordered by namespace, then name.
    pub fn list<'a>(
        &'a self,
        kind: &'a KindRef,
        namespace: Option<&'a str>,
        selector: &'a LabelSelector,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects.iter().filter(move |o| {
            KindRef::of_object(o).as_ref() == Some(kind)
                && namespace.is_none_or(|ns| namespace_of(o) == Some(ns))
                && selector.matches_object(o)
        })
    }

    /// [`Self::get`] as the cache import answers it: JSON text.
    pub fn get_json(&self, kind: &KindRef, namespace: Option<&str>, name: &str) -> Option<String> {
        self.get(kind, namespace, name).map(Value::to_string)
    }

    /// [`Self::list`] as the cache import answers it: the selector in string
    /// form, JSON text out, a clear error for a malformed selector.
    pub fn list_json(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &str,
    ) -> Result<Vec<String>, String> {
        let selector = LabelSelector::parse(selector).map_err(|e| e.to_string())?;
        Ok(self
            .list(kind, namespace, &selector)
            .map(Value::to_string)
            .collect())
    }

    /// The request the host sends for `primary`: its owned children from this
    /// cache, and `deleting` from its deletionTimestamp.
    pub fn request_for(&self, primary: &Value, owns: &[KindRef]) -> ReconcileRequest {
        ReconcileRequest {
            primary: primary.to_string(),
            children: self
                .children_of(primary, owns)
                .map(Value::to_string)
                .collect(),
            deleting: primary
                .pointer("/metadata/deletionTimestamp")
                .is_some_and(|t| !t.is_null()),
        }
    }

    /// The owned children of `primary`: objects of one of the `owns` kinds in
    /// the primary's namespace whose controller ownerReference points at it
    /// (by uid when both sides have one, otherwise by kind and name).
    pub fn children_of<'a>(
        &'a self,
        primary: &'a Value,
        owns: &'a [KindRef],
    ) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects.iter().filter(move |o| {
            KindRef::of_object(o).is_some_and(|k| owns.contains(&k))
                && namespace_of(o) == namespace_of(primary)
                && is_controlled_by(o, primary)
        })
    }
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
