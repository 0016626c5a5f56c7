//! What the store holds, and how it is read.
//!
//! Why apart from the writes: reads answer from the maps and indexes
//! alone, and every way an object changes ([`super::changes`]) keeps those
//! maps and indexes in step; the writes build on both.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use reconciler_contract::KindRef;
use serde_json::Value;

use super::entry::Entry;
use super::errors::{StoreError, invalid};
use crate::cluster::backend::{KindScope, ObjectKey, WatchEventType};
use crate::cluster::embedded::crd_schema::CrdSchemas;
use crate::cluster::embedded::gc_tasks::GcTask;
use crate::cluster::embedded::kind_scopes::KindScopes;

/// Undrained events kept at most; older ones are dropped first.
pub const EVENT_LOG_LIMIT: usize = 100_000;

/// One change to one object: its new state, or for `Deleted` its last one.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreEvent {
    pub event_type: WatchEventType,
    pub object: Value,
    /// `object` as the store keeps it, for an Added or Modified event: the
    /// engine's cache keeps the same text instead of writing it out again.
    pub json: Option<Arc<str>>,
}

/// An in-memory API server's storage. See the module documentation.
#[derive(Debug, Clone)]
pub struct EmbeddedStore {
    pub(super) objects: BTreeMap<ObjectKey, Entry>,
    /// uid -> key of every stored object.
    pub(super) uids: BTreeMap<String, ObjectKey>,
    /// (owner uid, stored object with an ownerReference to it): one flat
    /// set, as most owners have one dependent, and a set per owner would
    /// cost a whole B-tree node for it.
    pub(super) dependents: BTreeSet<(String, ObjectKey)>,
    pub(super) max_objects: usize,
    pub(super) resource_version: u64,
    pub(super) created: u64,
    pub(super) events: VecDeque<StoreEvent>,
    pub(super) event_limit: usize,
    pub(super) dropped_events: u64,
    /// Garbage-collection work left by the current call.
    pub(super) pending: VecDeque<GcTask>,
    /// Which kinds are cluster-scoped, learned from stored CRDs too.
    pub(super) scopes: KindScopes,
    /// The structural schemas of the stored CRDs' kinds.
    pub(super) schemas: CrdSchemas,
    /// How many objects each namespace holds, to tell when a terminating
    /// namespace is empty.
    pub(super) per_namespace: BTreeMap<String, usize>,
}

impl EmbeddedStore {
    /// An empty store that holds at most `max_objects` objects.
    pub fn new(max_objects: usize) -> Self {
        Self {
            objects: BTreeMap::new(),
            uids: BTreeMap::new(),
            dependents: BTreeSet::new(),
            max_objects,
            resource_version: 0,
            created: 0,
            events: VecDeque::new(),
            event_limit: EVENT_LOG_LIMIT,
            dropped_events: 0,
            pending: VecDeque::new(),
            scopes: KindScopes::default(),
            schemas: CrdSchemas::default(),
            per_namespace: BTreeMap::new(),
        }
    }

    /// Keeps at most `limit` undrained events instead of [`EVENT_LOG_LIMIT`].
    pub fn with_event_limit(mut self, limit: usize) -> Self {
        self.event_limit = limit;
        self
    }

    pub fn get(&self, key: &ObjectKey) -> Option<Value> {
        let key = self.scoped(key);
        self.objects.get(&key).map(Entry::object)
    }

    /// Whether objects of `kind` live in a namespace: built-in kinds as an
    /// API server serves them, custom kinds as their stored CRD says, and
    /// kinds the embedded cluster knows nothing about as namespaced.
    pub fn kind_scope(&self, kind: &KindRef) -> KindScope {
        self.scopes.scope_of(kind)
    }

    /// `key` as the store keys it: without a namespace for a cluster-scoped
    /// kind, whatever the caller gave.
    pub(super) fn scoped(&self, key: &ObjectKey) -> ObjectKey {
        let mut key = key.clone();
        if self.kind_scope(&key.kind) == KindScope::Cluster {
            key.namespace = None;
        }
        key
    }

    /// The key an applied object is stored under; an object of a
    /// namespaced kind without a namespace is refused.
    pub(super) fn key_to_store(&self, key: ObjectKey) -> Result<ObjectKey, StoreError> {
        if self.kind_scope(&key.kind) == KindScope::Namespaced && key.namespace.is_none() {
            let message = format!(
                "metadata.namespace: Required value: {} is namespaced (the embedded cluster serves a custom kind as namespaced unless a CustomResourceDefinition with scope: Cluster is applied for it first)",
                key.kind
            );
            return Err(invalid(&key, &message));
        }
        Ok(self.scoped(&key))
    }

    /// Every object of `kind`, sorted by namespace (cluster-scoped first),
    /// then name.
    pub fn list(&self, kind: &KindRef) -> Vec<Value> {
        self.entries_of(kind)
            .map(|(_, entry)| entry.object())
            .collect()
    }

    /// The objects of `kind` in [`Self::list`]'s order, by key and as the
    /// text the store keeps.
    pub fn list_json<'a>(
        &'a self,
        kind: &KindRef,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a Arc<str>)> + 'a {
        self.entries_of(kind)
            .map(|(key, entry)| (key, entry.json()))
    }

    fn entries_of<'a>(
        &'a self,
        kind: &KindRef,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a Entry)> + 'a {
        let first = ObjectKey {
            kind: kind.clone(),
            namespace: None,
            name: String::new(),
        };
        let kind = kind.clone();
        self.objects
            .range(first..)
            .take_while(move |(key, _)| key.kind == kind)
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// The most recent resourceVersion handed out (0 before any change).
    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    /// How many events were dropped because nobody drained them in time.
    pub fn dropped_events(&self) -> u64 {
        self.dropped_events
    }

    /// Every change since the last drain, oldest first.
    pub fn drain_events(&mut self) -> Vec<StoreEvent> {
        self.events.drain(..).collect()
    }

    /// Whether an object is stored under `key` (as this store scopes it).
    pub fn contains(&self, key: &ObjectKey) -> bool {
        self.objects.contains_key(&self.scoped(key))
    }

    /// Objects stored in `namespace` now.
    pub(in crate::cluster::embedded) fn count_in(&self, namespace: &str) -> usize {
        self.per_namespace.get(namespace).copied().unwrap_or(0)
    }

    /// The keys of every object stored in `namespace`, in key order.
    pub(in crate::cluster::embedded) fn keys_in(&self, namespace: &str) -> Vec<ObjectKey> {
        self.objects
            .keys()
            .filter(|k| k.namespace.as_deref() == Some(namespace))
            .cloned()
            .collect()
    }

    pub(in crate::cluster::embedded) fn entry(&self, key: &ObjectKey) -> Option<&Entry> {
        self.objects.get(key)
    }

    /// The key of the stored object with this uid.
    pub(in crate::cluster::embedded) fn key_of_uid(&self, uid: &str) -> Option<&ObjectKey> {
        self.uids.get(uid)
    }

    /// Stored objects with an ownerReference to `uid`, in key order.
    pub(in crate::cluster::embedded) fn dependents_of(&self, uid: &str) -> Vec<ObjectKey> {
        self.dependents_iter(uid).cloned().collect()
    }

    pub(in crate::cluster::embedded) fn has_dependents(&self, uid: &str) -> bool {
        self.dependents_iter(uid).next().is_some()
    }

    fn dependents_iter<'a>(&'a self, uid: &'a str) -> impl Iterator<Item = &'a ObjectKey> + 'a {
        let first = ObjectKey {
            kind: KindRef::new("", "", ""),
            namespace: None,
            name: String::new(),
        };
        self.dependents
            .range((uid.to_string(), first)..)
            .take_while(move |(owner, _)| owner == uid)
            .map(|(_, key)| key)
    }
}
