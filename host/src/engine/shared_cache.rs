//! One cache for every plugin of a host, fed by one watch per kind.
//!
//! Plugins read it through the sandbox's cache import, the engine reads it to
//! assemble requests and to skip no-op applies. Objects are stored without
//! `managedFields` and the last-applied annotation: bookkeeping no plugin
//! decides on, and most of an object's bytes.

use std::sync::RwLock;

use reconciler_contract::KindRef;
use reconciler_contract::memory_cache::{ListJsonError, MemoryCache};
use reconciler_contract::{Projection, ReconcileRequest};
use serde_json::Value;

use crate::cluster::backend::slimmed;
use crate::cluster::{ObjectKey, WatchEvent, WatchEventType};
use crate::plugin::ObjectReader;

#[derive(Default)]
pub struct SharedCache {
    objects: RwLock<MemoryCache>,
}

impl SharedCache {
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, MemoryCache> {
        self.objects.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, MemoryCache> {
        self.objects.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies one watch event. Objects the cache cannot hold (no name,
    /// nested too deep to read back) are logged and skipped: one malformed
    /// object must not stop the watch. A version it cannot hold also drops
    /// the version it held, which is no longer the object.
    pub fn observe(&self, event: &WatchEvent) {
        match event.event_type {
            WatchEventType::Added | WatchEventType::Modified => {
                let mut cache = self.write();
                if let Err(e) = cache.insert(slimmed(event.object.clone())) {
                    if let Some(key) = ObjectKey::of(&event.object) {
                        cache.remove(&key.kind, key.namespace.as_deref(), &key.name);
                    }
                    tracing::warn!("skipping an object from the watch: {e}");
                }
            }
            WatchEventType::Deleted => {
                if let Some(key) = ObjectKey::of(&event.object) {
                    self.write()
                        .remove(&key.kind, key.namespace.as_deref(), &key.name);
                }
            }
        }
    }

    pub fn get(&self, key: &ObjectKey) -> Option<Value> {
        self.read()
            .get(&key.kind, key.namespace.as_deref(), &key.name)
    }

    /// Every cached object of `kind`.
    pub fn list(&self, kind: &KindRef) -> Vec<Value> {
        let everything = reconciler_contract::selector::LabelSelector::everything();
        self.read().list(kind, None, &everything).collect()
    }

    /// The owned children of `primary` among `owns` kinds.
    pub fn children_of(&self, primary: &Value, owns: &[KindRef]) -> Vec<Value> {
        self.read().children_of(primary, owns).collect()
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
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
        projection: Projection,
    ) -> Option<String> {
        self.read().get_json(kind, namespace, name, projection)
    }

    fn list(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &str,
        projection: Projection,
    ) -> Result<Vec<String>, String> {
        self.read().list_json(kind, namespace, selector, projection)
    }

    /// Stops building the list once it passes `max_bytes`, so one call
    /// cannot make the host allocate more than the plugin could take.
    fn list_within(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &str,
        projection: Projection,
        max_bytes: usize,
    ) -> Result<Vec<String>, ListJsonError> {
        self.read()
            .list_json_within(kind, namespace, selector, projection, max_bytes)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::cluster::backend::LAST_APPLIED;

    #[test]
    fn a_version_too_deep_to_read_back_replaces_the_old_one_by_nothing() {
        let cache = SharedCache::new();
        let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "d"}});
        let key = ObjectKey::of(&object).unwrap();
        cache.observe(&WatchEvent {
            event_type: WatchEventType::Added,
            object: object.clone(),
        });
        assert!(cache.get(&key).is_some());
        let mut deep = json!({});
        for _ in 0..200 {
            deep = json!({ "a": deep });
        }
        object["data"] = deep;
        cache.observe(&WatchEvent {
            event_type: WatchEventType::Modified,
            object,
        });
        assert!(cache.get(&key).is_none(), "not the stale version");
        assert!(cache.list(&key.kind).is_empty());
    }

    #[test]
    fn cached_objects_lose_managed_fields_and_last_applied() {
        let cache = SharedCache::new();
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "d",
            "managedFields": [{"manager": "kubectl"}],
            "annotations": {LAST_APPLIED: "{...}", "keep": "me"}}});
        cache.observe(&WatchEvent {
            event_type: WatchEventType::Added,
            object,
        });
        let key = ObjectKey::new(KindRef::new("", "v1", "ConfigMap"), Some("d"), "c");
        let cached = cache.get(&key).unwrap();
        assert!(cached["metadata"].get("managedFields").is_none());
        assert_eq!(cached["metadata"]["annotations"], json!({"keep": "me"}));
        cache.observe(&WatchEvent {
            event_type: WatchEventType::Deleted,
            object: cached,
        });
        assert!(cache.get(&key).is_none());
    }
}
