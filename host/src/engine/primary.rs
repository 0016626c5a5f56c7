//! The primary of one reconcile, as the reconcile read it.
//!
//! Read once from the cache, as its parsed object and the very text the
//! cache holds (the plugin is sent the text, not the object written out
//! again), and replaced only by what the cluster answered to a write of
//! the reconcile itself (the finalizer added, the shard label), so every
//! later step (the call, the status precondition, the Event's uid, the
//! finalizers released) names the same version of it.

use std::sync::Arc;

use reconciler_contract::PluginMetadata;
use reconciler_contract::memory_cache::is_deleting;
use serde_json::Value;

use super::scope::PrimarySelectors;
use super::shared_cache::SharedCache;
use super::work_queue::PrimaryKey;
use crate::cluster::ObjectKey;

#[derive(Clone)]
pub struct Primary {
    pub key: PrimaryKey,
    pub object_key: ObjectKey,
    pub object: Value,
    /// The cache's text of `object`, or `object` written out after a write.
    pub json: Arc<str>,
    /// Whether it was deleting when read.
    pub deleting: bool,
}

impl Primary {
    /// The primary `key` names for the plugin of `metadata`, if it is
    /// still this host's to reconcile: cached, and within the plugin's
    /// selector (its labels may have left it since it was queued, which
    /// is as good as gone).
    pub fn read(
        cache: &SharedCache,
        selectors: &PrimarySelectors,
        metadata: &PluginMetadata,
        key: &PrimaryKey,
    ) -> Option<Self> {
        let object_key = ObjectKey::new(
            metadata.primary.clone(),
            key.namespace.as_deref(),
            &key.name,
        );
        let (object, json) = cache.get_with_json(&object_key)?;
        if !selectors.admits(&metadata.name, &object) {
            return None;
        }
        Some(Self {
            key: key.clone(),
            object_key,
            deleting: is_deleting(&object),
            object,
            json,
        })
    }

    /// Takes the object as the cluster stored it after a write.
    pub fn stored(&mut self, object: Value) {
        self.json = object.to_string().into();
        self.object = object;
    }
}

#[cfg(test)]
mod tests {
    use reconciler_contract::KindRef;
    use serde_json::json;

    use super::*;
    use crate::cluster::{WatchEvent, WatchEventType};
    use crate::engine::plan::uid_of;

    fn podset(name: &str, labels: Value) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "PodSet",
            "metadata": {"name": name, "namespace": "default", "uid": format!("u-{name}"), "labels": labels}})
    }

    fn key(name: &str) -> PrimaryKey {
        PrimaryKey::new(Some("default"), name)
    }

    #[test]
    fn a_primary_is_read_with_the_caches_own_text_unless_gone_or_outside_the_selector() {
        let cache = SharedCache::new();
        cache.observe(&WatchEvent::new(
            WatchEventType::Added,
            podset("web", json!({"tier": "front"})),
        ));
        cache.observe(&WatchEvent::new(
            WatchEventType::Added,
            podset("db", json!({"tier": "back"})),
        ));
        let metadata =
            PluginMetadata::new("podset", "1", KindRef::new("example.com", "v1", "PodSet"));
        let selectors = PrimarySelectors::parse(["tier=front"]).unwrap();
        let web = Primary::read(&cache, &selectors, &metadata, &key("web")).unwrap();
        assert!(!web.deleting);
        assert_eq!(uid_of(&web.object).as_deref(), Some("u-web"));
        let cached = cache.json_of(&web.object_key).unwrap();
        assert!(
            Arc::ptr_eq(&web.json, &cached),
            "the cache's text, not a copy"
        );
        assert!(Primary::read(&cache, &selectors, &metadata, &key("db")).is_none());
        assert!(Primary::read(&cache, &selectors, &metadata, &key("gone")).is_none());
    }

    #[test]
    fn after_a_write_the_stored_object_and_its_text_replace_what_was_read() {
        let cache = SharedCache::new();
        cache.observe(&WatchEvent::new(
            WatchEventType::Added,
            podset("web", json!({})),
        ));
        let metadata =
            PluginMetadata::new("podset", "1", KindRef::new("example.com", "v1", "PodSet"));
        let mut web =
            Primary::read(&cache, &PrimarySelectors::default(), &metadata, &key("web")).unwrap();
        let mut stored = web.object.clone();
        stored["metadata"]["finalizers"] = json!(["example.com/cleanup"]);
        web.stored(stored.clone());
        assert_eq!(web.object, stored);
        assert_eq!(serde_json::from_str::<Value>(&web.json).unwrap(), stored);
    }
}
