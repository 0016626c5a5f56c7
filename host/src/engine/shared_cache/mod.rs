//! One cache for every plugin of a host, fed by one watch per kind.
//!
//! Plugins read it through the sandbox's cache import, the engine reads it to
//! assemble requests and to skip no-op applies. Objects are stored without
//! `managedFields` and the last-applied annotation: bookkeeping no plugin
//! decides on, and most of an object's bytes. Beside them, which objects
//! name which controller ([`controller_index`]), for finding a primary's
//! children.

mod controller_index;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use reconciler_contract::KindRef;
use reconciler_contract::ReconcileRequest;
use reconciler_contract::memory_cache::{
    LIST_JSON_MAX_BYTES, ListBounds, ListJsonError, MemoryCache, PreparedEntry, is_controlled_by,
    namespace_of,
};
use serde_json::Value;

use self::controller_index::ControllerIndex;
use crate::cluster::backend::{is_slim, slimmed};
use crate::cluster::{ObjectKey, WatchEvent, WatchEventType};
use crate::plugin::{GetRequest, ListRequest, ObjectReader};

#[derive(Default)]
pub struct SharedCache {
    objects: RwLock<Cached>,
    /// The most objects it holds (`None`: no bound); see [`Self::with_budget`].
    budget: Option<usize>,
    /// An object was turned away for the budget: the cache no longer
    /// mirrors its cluster, and its owner must stop using it.
    over_budget: AtomicBool,
}

/// The objects and their index, changed together under one lock.
#[derive(Default)]
struct Cached {
    objects: MemoryCache,
    controllers: ControllerIndex,
}

/// An object made ready to go into [`Cached`] without its lock held.
struct Prepared {
    entry: PreparedEntry,
    key: Option<controller_index::CacheKey>,
    owners: Vec<controller_index::OwnerKey>,
}

impl Cached {
    /// Checks `object` and makes its texts and index keys: the work of an
    /// insert that needs no lock.
    fn prepare(
        object: &Value,
        json: Option<Arc<str>>,
    ) -> Result<Prepared, reconciler_contract::memory_cache::CacheError> {
        Ok(Prepared {
            entry: MemoryCache::prepare(object, json)?,
            key: ObjectKey::of(object).map(|k| (k.kind, k.namespace, k.name)),
            owners: controller_index::owner_keys(object),
        })
    }

    /// Adds or replaces an object; the text of the one it replaced.
    fn insert(&mut self, prepared: Prepared) -> Option<Arc<str>> {
        let replaced = self.objects.insert_prepared(prepared.entry);
        if let Some(key) = prepared.key {
            self.controllers.insert(key, prepared.owners);
        }
        replaced
    }

    fn remove(&mut self, key: &ObjectKey) {
        self.objects
            .remove(&key.kind, key.namespace.as_deref(), &key.name);
        self.controllers
            .remove(&(key.kind.clone(), key.namespace.clone(), key.name.clone()));
    }
}

impl std::ops::Deref for Cached {
    type Target = MemoryCache;

    fn deref(&self) -> &MemoryCache {
        &self.objects
    }
}

impl SharedCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// A cache that holds at most `max_objects`. Why a bound: one cluster
    /// with more objects of a watched kind than a process can hold would
    /// otherwise take down every other cluster the process serves. Past the
    /// bound a new object is not stored and [`Self::over_budget`] turns
    /// true for good: a cache missing objects would have plugins decide on
    /// a world that is not there, so its owner must drop it, not use it.
    pub fn with_budget(max_objects: usize) -> Self {
        Self {
            budget: Some(max_objects),
            ..Self::default()
        }
    }

    /// Whether an object was turned away for the budget.
    pub fn over_budget(&self) -> bool {
        self.over_budget.load(Ordering::Relaxed)
    }

    /// Records that the cluster holds more than the budget (a first list
    /// too large to take): the cache's owner must stop using it.
    pub fn mark_over_budget(&self) {
        self.over_budget.store(true, Ordering::Relaxed);
    }

    /// The bound of [`Self::with_budget`].
    pub fn budget(&self) -> Option<usize> {
        self.budget
    }

    /// Inserts `prepared` unless it is a new object past the budget (which
    /// is then recorded): checked under the insert's own lock.
    fn insert_within_budget(&self, prepared: Prepared) -> Option<Arc<str>> {
        let mut cache = self.write();
        if let Some(max) = self.budget
            && cache.len() >= max
            && !prepared
                .key
                .as_ref()
                .is_some_and(|(kind, ns, name)| cache.contains(kind, ns.as_deref(), name))
        {
            self.over_budget.store(true, Ordering::Relaxed);
            return None;
        }
        cache.insert(prepared)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Cached> {
        self.objects.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Cached> {
        self.objects.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes in the object a write of this engine's returned, unless the
    /// cache moved past `read`, the version the write was decided on: the
    /// watch may bring a newer version while the write is in flight, and
    /// putting the older one back over it would hide that change from
    /// every reconcile until the object changes again.
    pub fn observe_written(&self, stored: Value, read: &Value) {
        let stored = if is_slim(&stored) {
            stored
        } else {
            slimmed(stored)
        };
        let Ok(prepared) = Cached::prepare(&stored, None) else {
            return;
        };
        let mut cache = self.write();
        if cache.holds_version(read) {
            cache.insert(prepared);
        }
    }

    /// Applies one watch event. Objects the cache cannot hold (no name,
    /// nested too deep to read back) are logged and skipped: one malformed
    /// object must not stop the watch. A version it cannot hold also drops
    /// the version it held, which is no longer the object. Returns the text
    /// of the object the event replaced, if it did.
    pub fn observe(&self, event: &WatchEvent) -> Option<Arc<str>> {
        match event.event_type {
            WatchEventType::Added | WatchEventType::Modified => {
                // The event of a write whose result the engine cached
                // already (a status write), or a re-list's copy.
                if self.read().holds_version(&event.object) {
                    return None;
                }
                // Slim already (as the embedded store's objects are), the
                // object goes in as it is, with the text the backend has.
                let slim;
                let (object, json) = if is_slim(&event.object) {
                    (&event.object, event.json().cloned())
                } else {
                    slim = slimmed(event.object.clone());
                    (&slim, None)
                };
                // Made ready before the write lock: readers (plugin calls,
                // plans) wait only for the insert itself.
                match Cached::prepare(object, json) {
                    Ok(prepared) => self.insert_within_budget(prepared),
                    Err(e) => {
                        if let Some(key) = ObjectKey::of(&event.object) {
                            self.write().remove(&key);
                        }
                        tracing::warn!("skipping an object from the watch: {e}");
                        None
                    }
                }
            }
            WatchEventType::Deleted => {
                if let Some(key) = ObjectKey::of(&event.object) {
                    self.write().remove(&key);
                }
                None
            }
        }
    }

    pub fn get(&self, key: &ObjectKey) -> Option<Value> {
        self.read()
            .get(&key.kind, key.namespace.as_deref(), &key.name)
    }

    /// One object's text ([`MemoryCache::json`]).
    pub fn json_of(&self, key: &ObjectKey) -> Option<Arc<str>> {
        self.read()
            .json(&key.kind, key.namespace.as_deref(), &key.name)
    }

    /// [`Self::get`] with the object's text, for a request.
    pub fn get_with_json(&self, key: &ObjectKey) -> Option<(Value, Arc<str>)> {
        self.read()
            .get_with_json(&key.kind, key.namespace.as_deref(), &key.name)
    }

    /// The namespace and name of each cached object of `kind` whose labels
    /// match `selector` (all when `None`), unparsed.
    pub fn names(
        &self,
        kind: &KindRef,
        selector: Option<&reconciler_contract::selector::LabelSelector>,
    ) -> Vec<(Option<String>, String)> {
        let everything = reconciler_contract::selector::LabelSelector::everything();
        self.read().names(kind, selector.unwrap_or(&everything))
    }

    /// Every cached object of `kind`.
    pub fn list(&self, kind: &KindRef) -> Vec<Value> {
        let everything = reconciler_contract::selector::LabelSelector::everything();
        self.read().list(kind, None, &everything).collect()
    }

    /// The owned children of `primary` among `owns` kinds: objects of those
    /// kinds in its namespace (in any namespace for a cluster-scoped
    /// primary) whose controller reference points at it, in
    /// kind, namespace and name order (as `MemoryCache::children_of`), each
    /// with its text, for a request.
    pub fn children_with_json(&self, primary: &Value, owns: &[KindRef]) -> Vec<(Value, Arc<str>)> {
        let cache = self.read();
        let namespace = namespace_of(primary);
        cache
            .controllers
            .candidates(primary)
            .into_iter()
            .filter(|(kind, ns, _)| {
                namespace.is_none_or(|namespace| ns.as_deref() == Some(namespace))
                    && owns.contains(kind)
            })
            .filter_map(|(kind, ns, name)| cache.objects.get_with_json(kind, ns.as_deref(), name))
            .filter(|(child, _)| is_controlled_by(child, primary))
            .collect()
    }

    pub fn request_for(&self, primary: &Value, owns: &[KindRef]) -> ReconcileRequest {
        self.read().request_for(primary, owns)
    }

    /// How many objects of each kind are cached.
    pub fn counts_by_kind(&self) -> Vec<(KindRef, usize)> {
        self.read().counts_by_kind()
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl ObjectReader for SharedCache {
    fn get(&self, request: &GetRequest<'_>) -> Option<String> {
        self.read().get_json(
            request.kind,
            request.namespace,
            request.name,
            request.projection,
        )
    }

    fn list(&self, request: &ListRequest<'_>) -> Result<Vec<String>, String> {
        let bounds = ListBounds::bytes(LIST_JSON_MAX_BYTES);
        self.list_within(request, bounds).map_err(|e| e.to_string())
    }

    /// Lists in pages, each under its own read of the lock, so watch events
    /// go in between them however long the list; stops at `bounds`.
    fn list_within(
        &self,
        request: &ListRequest<'_>,
        bounds: ListBounds,
    ) -> Result<Vec<String>, ListJsonError> {
        request.paged(|| CacheRead(self.read()), bounds)
    }
}

/// The cache's objects while a read of its lock is held.
struct CacheRead<'a>(std::sync::RwLockReadGuard<'a, Cached>);

impl std::ops::Deref for CacheRead<'_> {
    type Target = MemoryCache;

    fn deref(&self) -> &MemoryCache {
        &self.0.objects
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::cluster::backend::LAST_APPLIED;

    fn podset(version: &str, size: i64) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "PodSet",
            "metadata": {"name": "p", "namespace": "d", "resourceVersion": version},
            "spec": {"size": size}})
    }

    /// A status write decided on version 1 returns version 2; the watch
    /// brought version 3 (a resize) before the write's answer was taken
    /// in. Version 2 must not go back over 3: the resize would be hidden
    /// until the PodSet changed again.
    #[test]
    fn a_write_answered_after_a_newer_version_arrived_does_not_replace_it() {
        let cache = SharedCache::new();
        let key = ObjectKey::of(&podset("1", 1)).unwrap();
        cache.observe(&WatchEvent::new(WatchEventType::Added, podset("1", 1)));
        cache.observe(&WatchEvent::new(WatchEventType::Modified, podset("3", 3)));
        cache.observe_written(podset("2", 1), &podset("1", 1));
        assert_eq!(cache.get(&key).unwrap()["spec"]["size"], 3);
        // With nothing newer meanwhile, the write's answer is taken in.
        cache.observe_written(podset("4", 3), &podset("3", 3));
        assert_eq!(cache.get(&key).unwrap()["metadata"]["resourceVersion"], "4");
    }

    #[test]
    fn a_version_too_deep_to_read_back_replaces_the_old_one_by_nothing() {
        let cache = SharedCache::new();
        let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "d"}});
        let key = ObjectKey::of(&object).unwrap();
        cache.observe(&WatchEvent::new(WatchEventType::Added, object.clone()));
        assert!(cache.get(&key).is_some());
        let mut deep = json!({});
        for _ in 0..200 {
            deep = json!({ "a": deep });
        }
        object["data"] = deep;
        cache.observe(&WatchEvent::new(WatchEventType::Modified, object));
        assert!(cache.get(&key).is_none(), "not the stale version");
        assert!(cache.list(&key.kind).is_empty());
    }

    #[test]
    fn children_are_those_the_sdks_cache_finds_as_objects_come_and_go() {
        let cache = SharedCache::new();
        let mut reference = MemoryCache::new();
        let observe = |cache: &SharedCache, reference: &mut MemoryCache, object: Value| {
            cache.observe(&WatchEvent::new(WatchEventType::Added, object.clone()));
            reference.insert(object).unwrap();
        };
        let primary = |ns: &str, name: &str, uid: Option<&str>| {
            let mut p = json!({"apiVersion": "example.com/v1", "kind": "PodSet",
                "metadata": {"name": name, "namespace": ns}});
            if let Some(uid) = uid {
                p["metadata"]["uid"] = json!(uid);
            }
            p
        };
        let child = |kind: &str, ns: &str, name: &str, refs: Value| {
            let api_version = if kind == "Deployment" {
                "apps/v1"
            } else {
                "v1"
            };
            json!({"apiVersion": api_version, "kind": kind,
                "metadata": {"name": name, "namespace": ns, "ownerReferences": refs}})
        };
        let controller = |uid: Option<&str>, name: &str| {
            let mut r = json!({"apiVersion": "example.com/v1", "kind": "PodSet",
                "name": name, "controller": true});
            if let Some(uid) = uid {
                r["uid"] = json!(uid);
            }
            r
        };
        let objects = [
            child(
                "Deployment",
                "d",
                "by-uid",
                json!([controller(Some("u1"), "web")]),
            ),
            child(
                "Deployment",
                "d",
                "by-name",
                json!([controller(None, "web")]),
            ),
            child(
                "Deployment",
                "d",
                "other-uid",
                json!([controller(Some("u9"), "web")]),
            ),
            child(
                "Deployment",
                "e",
                "elsewhere",
                json!([controller(Some("u1"), "web")]),
            ),
            child(
                "ConfigMap",
                "d",
                "config",
                json!([controller(Some("u1"), "web")]),
            ),
            child(
                "Service",
                "d",
                "not-owned-kind",
                json!([controller(Some("u1"), "web")]),
            ),
            child(
                "Deployment",
                "d",
                "not-controller",
                json!([{"apiVersion": "example.com/v1",
                "kind": "PodSet", "name": "web", "uid": "u1"}]),
            ),
        ];
        for object in objects {
            observe(&cache, &mut reference, object);
        }
        let owns = [
            KindRef::new("apps", "v1", "Deployment"),
            KindRef::new("", "v1", "ConfigMap"),
        ];
        let names = |children: Vec<Value>| -> Vec<String> {
            children
                .iter()
                .map(|c| c["metadata"]["name"].as_str().unwrap().to_string())
                .collect()
        };
        let same = |cache: &SharedCache, reference: &MemoryCache, p: &Value| {
            let expected: Vec<Value> = reference.children_of(p, &owns).collect();
            let children: Vec<Value> = cache
                .children_with_json(p, &owns)
                .into_iter()
                .map(|(child, _)| child)
                .collect();
            assert_eq!(children, expected, "children of {p}");
            names(expected)
        };
        let with_uid = primary("d", "web", Some("u1"));
        assert_eq!(
            same(&cache, &reference, &with_uid),
            ["config", "by-name", "by-uid"]
        );
        let without_uid = primary("d", "web", None);
        assert_eq!(
            same(&cache, &reference, &without_uid),
            ["config", "by-name", "by-uid", "other-uid"]
        );

        // A child that changes controller, and one that is deleted.
        let moved = child(
            "Deployment",
            "d",
            "by-uid",
            json!([controller(Some("u2"), "api")]),
        );
        observe(&cache, &mut reference, moved);
        let gone = child("Deployment", "d", "by-name", json!([]));
        cache.observe(&WatchEvent::new(WatchEventType::Deleted, gone.clone()));
        let key = ObjectKey::of(&gone).unwrap();
        reference.remove(&key.kind, key.namespace.as_deref(), &key.name);
        assert_eq!(same(&cache, &reference, &with_uid), ["config"]);
        assert_eq!(
            same(&cache, &reference, &primary("d", "api", Some("u2"))),
            ["by-uid"]
        );
    }

    #[test]
    fn cached_objects_lose_managed_fields_and_last_applied() {
        let cache = SharedCache::new();
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "d",
            "managedFields": [{"manager": "kubectl"}],
            "annotations": {LAST_APPLIED: "{...}", "keep": "me"}}});
        cache.observe(&WatchEvent::new(WatchEventType::Added, object));
        let key = ObjectKey::new(KindRef::new("", "v1", "ConfigMap"), Some("d"), "c");
        let cached = cache.get(&key).unwrap();
        assert!(cached["metadata"].get("managedFields").is_none());
        assert_eq!(cached["metadata"]["annotations"], json!({"keep": "me"}));
        cache.observe(&WatchEvent::new(WatchEventType::Deleted, cached));
        assert!(cache.get(&key).is_none());
    }
}
