//! Shard selection at work (`run --sharding`): the labels this replica
//! writes, and the primaries it relabels.
//!
//! [`shard_selection`](super::shard_selection) says which bucket each
//! primary has and which selector each kind is watched with; this stage
//! acts on it. A primary gets its bucket's label at its first reconcile
//! (so from then on only its owner's selector lists it), every child the
//! host applies carries its primary's bucket, and a primary that reached
//! this replica under one of its buckets but belongs to another's (a label
//! copied from another object) is relabelled, or its owner would never
//! see it. It keeps what it learned on the way: the kinds the API server
//! refused to let it label (asked once), and the strays still to relabel.

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};

use reconciler_contract::{KindRef, PluginMetadata};
use serde_json::Value;

use super::shard_selection::{self, Buckets, ShardRole, ShardSelection};
use super::shared_cache::SharedCache;
use super::work_queue::PrimaryKey;
use crate::cluster::{BackendError, ClusterBackend, ObjectKey};
use crate::plugin::{ValidResponse, WriteRole};

pub struct ShardLabelling {
    selection: ShardSelection,
    /// Primary kinds the API server refused to let this host label.
    unlabelled: Mutex<BTreeSet<KindRef>>,
    /// Primaries that reached this replica under one of its buckets but
    /// belong to another's.
    strays: Mutex<BTreeSet<ObjectKey>>,
}

impl ShardLabelling {
    pub fn new(selection: ShardSelection) -> Self {
        Self {
            selection,
            unlabelled: Mutex::default(),
            strays: Mutex::default(),
        }
    }

    /// The shard label value of `key`'s objects.
    pub fn bucket_of(&self, key: &PrimaryKey) -> String {
        self.selection.bucket_of(key)
    }

    /// How `kind` is selected given the plugins `served` with `adding`
    /// among them (in place of a version of its name); `None`: whole.
    pub fn role<'a>(
        &self,
        kind: &KindRef,
        served: impl IntoIterator<Item = &'a PluginMetadata>,
        adding: Option<&'a PluginMetadata>,
    ) -> Option<ShardRole> {
        let metadata = served
            .into_iter()
            .filter(|m| adding.is_none_or(|a| a.name != m.name))
            .chain(adding);
        self.selection.role_of(kind, metadata)
    }

    /// The buckets this replica owns now, and the others'.
    pub fn buckets(&self) -> Buckets {
        self.selection.buckets()
    }

    /// Puts the primary's bucket on every child `response` owns, but those
    /// of a kind with two roles among the plugins `served`.
    pub fn label_children<'a>(
        &self,
        response: &mut ValidResponse,
        bucket: &str,
        served: impl IntoIterator<Item = &'a PluginMetadata> + Clone,
    ) {
        let pods_too = !self
            .selection
            .has_two_roles(&shard_selection::pod_kind(), served.clone());
        for child in &mut response.apply {
            if child.role == WriteRole::Owned
                && !self.selection.has_two_roles(&child.kind, served.clone())
            {
                self.selection
                    .label_child(&mut child.object, bucket, pods_too);
            }
        }
    }

    /// Whether the host labels primaries of `kind` given the plugins
    /// `served`: not when it has two roles.
    pub fn labels_primaries<'a>(
        &self,
        kind: &KindRef,
        served: impl IntoIterator<Item = &'a PluginMetadata>,
    ) -> bool {
        !self.selection.has_two_roles(kind, served)
    }

    /// Labels a primary with its shard (`Some(bucket)`), once in its life:
    /// from then on only its owner's selector lists it. Or takes the label
    /// off (`None`), from a primary of a kind with two roles. Returns the
    /// object as stored.
    ///
    /// Not a reconcile failure when refused: an unlabelled primary is
    /// listed by every replica, which costs each of them the decoding of
    /// it and nothing else (its owner alone reconciles it). A refusal by
    /// RBAC (a ClusterRole from before `rbac --sharding` granted patch on
    /// primaries) is said once per kind and not asked again.
    pub async fn label_primary<B: ClusterBackend>(
        &self,
        backend: &B,
        primary: &Value,
        key: &ObjectKey,
        bucket: Option<&str>,
    ) -> Option<Value> {
        if self.lock_unlabelled().contains(&key.kind) {
            return None;
        }
        let label = shard_selection::primary_label(primary, bucket)?;
        match backend.set_label(key, label).await {
            Ok(stored) => Some(stored),
            Err(BackendError::Forbidden { message }) => {
                // Reconciles in flight at once may all be refused: one says so.
                if !self.lock_unlabelled().insert(key.kind.clone()) {
                    return None;
                }
                match bucket {
                    Some(_) => tracing::warn!(
                        "cannot label {key} with its shard ({message}): every replica goes on receiving every {} and only its owner reconciles it; grant patch on them (`reconciler-host rbac --sharding`) and restart to have the API server select them",
                        key.kind.kind
                    ),
                    None => tracing::warn!(
                        "cannot take the shard label off {key} ({message}): a {} is a primary of one plugin and a child of another, so it carries none; grant patch on them (`reconciler-host rbac --sharding`) and restart",
                        key.kind.kind
                    ),
                }
                None
            }
            // Changed or gone since it was read: its next reconcile, which
            // that change brings, labels the version it reads.
            Err(BackendError::Conflict { .. } | BackendError::NotFound { .. }) => {
                tracing::debug!("{key} changed since it was read: labelled at its next reconcile");
                None
            }
            Err(e) => {
                tracing::warn!(
                    "cannot {} {key} now (tried again at its next reconcile): {e}",
                    if bucket.is_some() {
                        "give its shard label to"
                    } else {
                        "take the shard label off"
                    }
                );
                None
            }
        }
    }

    fn lock_unlabelled(&self) -> MutexGuard<'_, BTreeSet<KindRef>> {
        self.unlabelled.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_strays(&self) -> MutexGuard<'_, BTreeSet<ObjectKey>> {
        self.strays.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers `key` for [`Self::relabel_strays`] if it came here only
    /// because its shard label names one of this replica's buckets, not
    /// its own. Any other mislabel also reaches its owner, which labels it
    /// at its reconcile. A primary of a kind with two roles among the
    /// plugins `served` is labelled by no role: never a stray.
    pub fn note_stray<'a>(
        &self,
        cache: &SharedCache,
        primary: &KindRef,
        key: &PrimaryKey,
        served: impl IntoIterator<Item = &'a PluginMetadata>,
    ) {
        if !self.labels_primaries(primary, served) {
            return;
        }
        let object_key = ObjectKey::new(primary.clone(), key.namespace.as_deref(), &key.name);
        let Some(object) = cache.get(&object_key) else {
            return;
        };
        if let Some(label) = shard_selection::label_of(&object)
            && label != self.selection.bucket_of(key)
            && self.selection.is_mine(label)
        {
            self.lock_strays().insert(object_key);
        }
    }

    /// Whether [`Self::relabel_strays`] has anything to do.
    pub fn has_strays(&self) -> bool {
        !self.lock_strays().is_empty()
    }

    /// Gives every stray primary its own shard label, so the API server
    /// sends it to its owner (and no longer here).
    pub async fn relabel_strays<B: ClusterBackend>(&self, backend: &B, cache: &SharedCache) {
        let strays = std::mem::take(&mut *self.lock_strays());
        for key in strays {
            let Some(object) = cache.get(&key) else {
                continue;
            };
            let primary = PrimaryKey::new(key.namespace.as_deref(), &key.name);
            let bucket = self.selection.bucket_of(&primary);
            if shard_selection::label_of(&object) == Some(bucket.as_str()) {
                continue;
            }
            if self
                .label_primary(backend, &object, &key, Some(&bucket))
                .await
                .is_some()
            {
                tracing::info!(
                    "relabelled {key} with its shard {bucket}: its label named {}, another object's (copied with it?), so its owner could not see it",
                    shard_selection::label_of(&object).unwrap_or_default()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, RwLock};

    use serde_json::json;

    use super::*;
    use crate::cluster::embedded::EmbeddedCluster;
    use crate::cluster::{VirtualClock, WatchEvent, WatchEventType};

    /// A replica owning buckets 001 and 002 of three, where every primary
    /// is in 001.
    fn labelling() -> ShardLabelling {
        let buckets = Buckets {
            mine: ["001", "002"].iter().map(|s| s.to_string()).collect(),
            others: ["003".to_string()].into(),
        };
        ShardLabelling::new(ShardSelection::new(
            Arc::new(|_: &PrimaryKey| "001".to_string()),
            Arc::new(RwLock::new(buckets)),
        ))
    }

    fn config_map() -> KindRef {
        KindRef::new("", "v1", "ConfigMap")
    }

    /// A child of a kind another plugin has as its primary is applied
    /// without the label; its sibling of a kind nobody else serves gets it.
    #[test]
    fn a_child_of_a_kind_with_two_roles_is_not_labelled() {
        use reconciler_contract::response_rules::DesiredObject;
        let secret = KindRef::new("", "v1", "Secret");
        let owner = PluginMetadata::new("owner", "1", KindRef::new("example.com", "v1", "App"))
            .owns(config_map())
            .owns(secret.clone());
        let other = PluginMetadata::new("other", "1", config_map());
        let child = |kind: &KindRef| DesiredObject {
            kind: kind.clone(),
            role: WriteRole::Owned,
            object: json!({"apiVersion": "v1", "kind": kind.kind, "metadata": {"name": "c"}}),
        };
        let mut response = ValidResponse {
            apply: vec![child(&config_map()), child(&secret)],
            delete: Vec::new(),
            status: None,
            events: Vec::new(),
            requeue_after: None,
            finalized: false,
        };
        labelling().label_children(&mut response, "001", [&owner, &other]);
        let labels: Vec<Option<&str>> = response
            .apply
            .iter()
            .map(|c| shard_selection::label_of(&c.object))
            .collect();
        assert_eq!(labels, [None, Some("001")]);
        assert!(!labelling().labels_primaries(&config_map(), [&owner, &other]));
        assert!(labelling().labels_primaries(&config_map(), [&other]));
    }

    fn primary(name: &str, label: Option<&str>) -> Value {
        let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"}});
        if let Some(label) = label {
            shard_selection::label(&mut object, label);
        }
        object
    }

    fn key(name: &str) -> PrimaryKey {
        PrimaryKey::new(Some("default"), name)
    }

    #[test]
    fn only_a_primary_labelled_with_another_of_this_replicas_buckets_is_a_stray() {
        let cache = SharedCache::new();
        for (name, label) in [
            ("copied", Some("002")),
            ("own", Some("001")),
            ("elsewhere", Some("003")),
            ("new", None),
        ] {
            cache.observe(&WatchEvent::new(
                WatchEventType::Added,
                primary(name, label),
            ));
        }
        let shards = labelling();
        for name in ["own", "elsewhere", "new", "not-cached"] {
            shards.note_stray(&cache, &config_map(), &key(name), []);
            assert!(!shards.has_strays(), "{name}");
        }
        shards.note_stray(&cache, &config_map(), &key("copied"), []);
        assert!(shards.has_strays());
    }

    #[tokio::test]
    async fn a_stray_is_relabelled_with_its_own_bucket_once() {
        let cluster = EmbeddedCluster::new(Arc::new(VirtualClock::at(0)));
        let stored = cluster
            .apply(primary("copied", Some("002")), "user", true)
            .await
            .unwrap();
        let cache = SharedCache::new();
        cache.observe(&WatchEvent::new(WatchEventType::Added, stored));
        let shards = labelling();
        shards.note_stray(&cache, &config_map(), &key("copied"), []);
        shards.relabel_strays(&cluster, &cache).await;
        assert!(!shards.has_strays());
        let key = ObjectKey::new(config_map(), Some("default"), "copied");
        let now = cluster.get(&key).await.unwrap().unwrap();
        assert_eq!(shard_selection::label_of(&now), Some("001"));
    }
}
