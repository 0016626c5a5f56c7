//! The one way an object changes in the store: each change stamps a new
//! resourceVersion, keeps the uid, owner and namespace indexes in step,
//! queues what the garbage collector must look at, and is logged.
//!
//! Why in one place: the writes, the garbage collector and namespace
//! termination all change objects, and a change that skipped one of these
//! steps would leave a watch, an index or a cascade behind.

use std::sync::Arc;

use serde_json::Value;

use super::entry::{Entry, OwnerRef};
use super::state::{EmbeddedStore, StoreEvent};
use crate::cluster::backend::{ObjectKey, WatchEventType};
use crate::cluster::embedded::field_set::Ownership;
use crate::cluster::embedded::gc_tasks::GcTask;
use crate::cluster::embedded::namespace_object::namespace_finalizers;
use crate::cluster::embedded::object_metadata::{finalizers, is_deleting, metadata_mut, uid_of};

impl EmbeddedStore {
    pub(super) fn set_ownership(&mut self, key: &ObjectKey, ownership: Ownership) {
        if let Some(entry) = self.objects.get_mut(key) {
            entry.set_ownership(&ownership);
        }
    }

    /// The next resourceVersion.
    fn next_version(&mut self) -> Value {
        self.resource_version += 1;
        Value::String(self.resource_version.to_string())
    }

    /// Stores a new object: stamps its resourceVersion, indexes it, logs Added.
    pub(super) fn insert(
        &mut self,
        key: &ObjectKey,
        mut object: Value,
        ownership: Ownership,
    ) -> Value {
        let version = self.next_version();
        metadata_mut(&mut object).insert("resourceVersion".into(), version);
        if let Some(uid) = uid_of(&object) {
            self.uids.insert(uid.to_string(), key.clone());
        }
        let entry = Entry::new(&object, &ownership);
        let owners = entry.owner_uids();
        self.index_owners(key, &owners);
        if !owners.is_empty() {
            self.pending.push_back(GcTask::Adopted(key.clone()));
        }
        if let Some(ns) = &key.namespace {
            *self.per_namespace.entry(ns.clone()).or_default() += 1;
        }
        let json = entry.json().clone();
        self.objects.insert(key.clone(), entry);
        self.push_event(WatchEventType::Added, object.clone(), Some(json));
        object
    }

    /// Stores a changed object: stamps a new resourceVersion, re-indexes its
    /// owners, forgets ownership of fields it no longer has, logs Modified.
    /// `ownership` replaces the current one when given.
    pub(in crate::cluster::embedded) fn replace(
        &mut self,
        key: &ObjectKey,
        mut object: Value,
        ownership: Option<Ownership>,
    ) -> Value {
        let version = self.next_version();
        metadata_mut(&mut object).insert("resourceVersion".into(), version);
        let Some(entry) = self.objects.get_mut(key) else {
            return object;
        };
        let mut ownership = match ownership {
            Some(ownership) => ownership,
            None => entry.ownership(),
        };
        ownership.prune(&object);
        let old = std::mem::replace(entry, Entry::new(&object, &ownership));
        let json = entry.json().clone();
        if old.owners != entry.owners {
            let new_refs = entry.owners.clone();
            self.reindex_owners(key, &old.owners, &new_refs);
        }
        self.push_event(WatchEventType::Modified, object.clone(), Some(json));
        object
    }

    /// Stores a changed object, or, if it is being deleted and has no
    /// finalizers left, removes it with that as its last state (logging only
    /// Deleted, as a real server does). Returns the stored or last state.
    pub(in crate::cluster::embedded) fn replace_or_finish(
        &mut self,
        key: &ObjectKey,
        object: Value,
        ownership: Option<Ownership>,
    ) -> Value {
        if is_deleting(&object) && !held_by_finalizers(&object) {
            self.remove_as(key, Some(object)).unwrap_or(Value::Null)
        } else {
            self.replace(key, object, ownership)
        }
    }

    /// Removes an object; see [`Self::remove_as`].
    pub(in crate::cluster::embedded) fn remove(&mut self, key: &ObjectKey) -> Option<Value> {
        self.remove_as(key, None)
    }

    /// Removes an object: its last state (`last_state`, or what is stored)
    /// gets a new resourceVersion and is logged as Deleted; its owners and
    /// dependents are queued for the garbage collector. Returns that state.
    fn remove_as(&mut self, key: &ObjectKey, last_state: Option<Value>) -> Option<Value> {
        let entry = self.objects.remove(key)?;
        let stored = match last_state {
            Some(state) => state,
            None => entry.object(),
        };
        if let Some(ns) = &key.namespace {
            if let Some(count) = self.per_namespace.get_mut(ns) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    self.per_namespace.remove(ns);
                }
            }
            self.pending.push_back(GcTask::FinishNamespace(ns.clone()));
        }
        let owners = entry.owner_uids();
        self.unindex_owners(key, &owners);
        self.pending
            .extend(owners.into_iter().map(GcTask::ReleaseForeground));
        if let Some(uid) = uid_of(&stored) {
            self.uids.remove(uid);
            self.pending
                .extend(self.dependents_of(uid).into_iter().map(GcTask::Settle));
        }
        let mut object = stored;
        let version = self.next_version();
        metadata_mut(&mut object).insert("resourceVersion".into(), version);
        self.push_event(WatchEventType::Deleted, object.clone(), None);
        Some(object)
    }

    pub(in crate::cluster::embedded) fn enqueue(&mut self, task: GcTask) {
        self.pending.push_back(task);
    }

    pub(in crate::cluster::embedded) fn next_task(&mut self) -> Option<GcTask> {
        self.pending.pop_front()
    }

    fn index_owners(&mut self, key: &ObjectKey, owners: &[String]) {
        for uid in owners {
            self.dependents.insert((uid.clone(), key.clone()));
        }
    }

    fn unindex_owners(&mut self, key: &ObjectKey, owners: &[String]) {
        for uid in owners {
            self.dependents.remove(&(uid.clone(), key.clone()));
        }
    }

    /// Re-indexes after ownerReferences changed. Owners that lost or changed
    /// a reference may have been waiting for it (foreground deletion); new
    /// references may point at an owner that is being deleted.
    fn reindex_owners(&mut self, key: &ObjectKey, old: &[OwnerRef], new: &[OwnerRef]) {
        let old_uids: Vec<String> = old.iter().map(|r| r.uid.clone()).collect();
        let new_uids: Vec<String> = new.iter().map(|r| r.uid.clone()).collect();
        self.unindex_owners(key, &old_uids);
        self.index_owners(key, &new_uids);
        if new_uids.iter().any(|uid| !old_uids.contains(uid)) {
            self.pending.push_back(GcTask::Adopted(key.clone()));
        }
        self.pending
            .extend(old_uids.into_iter().map(GcTask::ReleaseForeground));
    }

    fn push_event(&mut self, event_type: WatchEventType, object: Value, json: Option<Arc<str>>) {
        while self.events.len() >= self.event_limit.max(1) {
            self.events.pop_front();
            self.dropped_events += 1;
        }
        self.events.push_back(StoreEvent {
            event_type,
            object,
            json,
        });
    }
}

/// Whether finalizers still hold the object: its own, or for a Namespace
/// the ones in its spec that wait for its content to go.
fn held_by_finalizers(object: &Value) -> bool {
    !finalizers(object).is_empty() || !namespace_finalizers(object).is_empty()
}
