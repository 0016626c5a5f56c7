//! Deletion in the embedded cluster: finalizers, propagation policies and
//! garbage collection by ownerReferences.
//!
//! Why it is exact and synchronous: a real cluster splits this between the
//! API server (deletionTimestamp, finalizers) and an asynchronous garbage
//! collector, so controllers see the results some time later, in an order
//! that varies. In memory the whole cascade can run inside the delete call,
//! in one deterministic order, which the event log records; what a
//! controller observes is the same sequence of states, only without delay.
//!
//! The contract, as a real server and garbage collector behave:
//! - An object with finalizers is not removed: it gets `deletionTimestamp`
//!   (once), `deletionGracePeriodSeconds: 0` and one generation bump, and is
//!   removed when its last finalizer is removed.
//! - Background: the owner is removed first; then each dependent (matched by
//!   owner uid) is deleted the same way, cascading, once none of its owners
//!   is left; a dependent that still has a live owner only loses its
//!   references to the dead ones.
//! - Foreground: the owner gets the `foregroundDeletion` finalizer, its
//!   dependents are deleted (foreground themselves when they have
//!   dependents), and the owner is removed once no dependent that references
//!   it with `blockOwnerDeletion: true` is left.
//! - Orphan: the owner gets the `orphan` finalizer, its dependents lose their
//!   reference to it, then the finalizer is removed.
//!
//! Known bounds versus a real cluster:
//! - Deleting an object that is already being deleted changes nothing (a real
//!   server may switch its propagation finalizers).
//! - Dependents are looked at when an owner goes away or starts a foreground
//!   deletion, and when they gain a reference to an owner in foreground
//!   deletion; an object created with references only to owners that never
//!   existed is kept (a real garbage collector would delete it).
//! - Ownership cycles under foreground deletion wait for each other forever;
//!   a real garbage collector unblocks such references.

use std::collections::BTreeSet;

use serde_json::Value;

use super::gc_tasks::{FOREGROUND_FINALIZER, GcTask};
use super::namespace_object::is_namespace;
use super::object_metadata::{
    bump_generation, finalizers, is_deleting, metadata_mut, uid_of, with_finalizer,
    without_finalizer,
};
use super::store::{EmbeddedStore, Entry};
use crate::cluster::backend::{ObjectKey, Propagation};
use crate::cluster::clock::rfc3339;

/// The finalizer that holds an owner until its dependents are orphaned.
pub const ORPHAN_FINALIZER: &str = "orphan";

/// How a dependent sees one of its owners.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OwnerState {
    /// Not in the store.
    Absent,
    /// Being deleted in the foreground, waiting for its dependents.
    Waiting,
    /// Alive.
    Solid,
}

impl EmbeddedStore {
    /// Runs the garbage collector until nothing is left to do.
    pub(super) fn run_gc(&mut self, now_millis: i64) {
        while let Some(task) = self.next_task() {
            match task {
                GcTask::Settle(key) => self.settle(&key, now_millis),
                GcTask::ReleaseForeground(uid) => self.release_foreground(&uid),
                GcTask::Adopted(key) if self.has_waiting_owner(&key) => {
                    self.settle(&key, now_millis)
                }
                GcTask::Adopted(_) => {}
                GcTask::FinishNamespace(namespace) => self.finish_namespace(&namespace),
            }
        }
    }

    /// Deletes one object with `propagation`; follow-up work is queued.
    pub(super) fn delete_now(
        &mut self,
        key: &ObjectKey,
        propagation: Propagation,
        now_millis: i64,
    ) {
        let Some(object) = self.entry(key).map(Entry::object) else {
            return;
        };
        if is_deleting(&object) {
            return;
        }
        if is_namespace(key) {
            // Whatever the propagation: the namespace controller deletes
            // what the namespace holds, then the Namespace goes.
            self.terminate_namespace(key, now_millis);
            return;
        }
        let uid = uid_of(&object).map(str::to_string);
        let has_finalizers = !finalizers(&object).is_empty();
        match propagation {
            Propagation::Background if has_finalizers => self.mark_deleting(key, None, now_millis),
            Propagation::Background => {
                self.remove(key);
            }
            Propagation::Foreground => {
                self.mark_deleting(key, Some(FOREGROUND_FINALIZER), now_millis);
                if let Some(uid) = uid {
                    let dependents = self.dependents_of(&uid);
                    dependents
                        .into_iter()
                        .for_each(|d| self.enqueue(GcTask::Settle(d)));
                    self.enqueue(GcTask::ReleaseForeground(uid));
                }
            }
            Propagation::Orphan => {
                self.mark_deleting(key, Some(ORPHAN_FINALIZER), now_millis);
                if let Some(uid) = uid {
                    self.orphan_dependents(&uid);
                }
                self.release_finalizer(key, ORPHAN_FINALIZER);
            }
        }
    }

    /// Sets deletionTimestamp (once, bumping generation) and adds
    /// `finalizer` if given.
    fn mark_deleting(&mut self, key: &ObjectKey, finalizer: Option<&str>, now_millis: i64) {
        let Some(stored) = self.entry(key).map(Entry::object) else {
            return;
        };
        let mut object = match finalizer {
            Some(finalizer) => with_finalizer(&stored, finalizer),
            None => stored.clone(),
        };
        if !is_deleting(&object) {
            bump_generation(&mut object);
            metadata_mut(&mut object).insert(
                "deletionTimestamp".into(),
                Value::String(rfc3339(now_millis)),
            );
        }
        metadata_mut(&mut object).insert("deletionGracePeriodSeconds".into(), Value::from(0));
        if object != stored {
            self.replace(key, object, None);
        }
    }

    /// Removes `finalizer` from the object (only that entry); removes the
    /// object if it was being deleted and that was its last finalizer.
    pub(super) fn release_finalizer(&mut self, key: &ObjectKey, finalizer: &str) {
        let Some(stored) = self.entry(key).map(Entry::object) else {
            return;
        };
        if !finalizers(&stored).contains(&finalizer) {
            return;
        }
        let object = without_finalizer(&stored, finalizer);
        self.replace_or_finish(key, object, None);
    }

    /// Decides what happens to a dependent whose owners changed.
    fn settle(&mut self, key: &ObjectKey, now_millis: i64) {
        let Some(refs) = self.entry(key).map(|e| e.owners.clone()) else {
            return;
        };
        let mut doomed = BTreeSet::new();
        let (mut solid, mut waiting) = (false, false);
        for reference in &refs {
            match self.owner_state(&reference.uid) {
                OwnerState::Solid => solid = true,
                OwnerState::Waiting => {
                    waiting = true;
                    doomed.insert(reference.uid.clone());
                }
                OwnerState::Absent => {
                    doomed.insert(reference.uid.clone());
                }
            }
        }
        if doomed.is_empty() {
            return;
        }
        if solid {
            self.drop_owner_refs(key, &doomed);
            return;
        }
        let has_dependents = self
            .entry(key)
            .map(Entry::object)
            .and_then(|object| uid_of(&object).map(|uid| self.has_dependents(uid)))
            .unwrap_or(false);
        let propagation = if waiting && has_dependents {
            Propagation::Foreground
        } else {
            Propagation::Background
        };
        self.delete_now(key, propagation, now_millis);
    }

    fn has_waiting_owner(&self, key: &ObjectKey) -> bool {
        let Some(entry) = self.entry(key) else {
            return false;
        };
        entry
            .owners
            .iter()
            .any(|r| self.owner_state(&r.uid) == OwnerState::Waiting)
    }

    fn owner_state(&self, uid: &str) -> OwnerState {
        let Some(owner) = self.key_of_uid(uid).and_then(|key| self.entry(key)) else {
            return OwnerState::Absent;
        };
        if owner.waits_for_dependents {
            OwnerState::Waiting
        } else {
            OwnerState::Solid
        }
    }

    /// Releases a foreground-deleted owner once no blocking dependent is left.
    fn release_foreground(&mut self, uid: &str) {
        if self.owner_state(uid) != OwnerState::Waiting || self.has_blocking_dependents(uid) {
            return;
        }
        if let Some(key) = self.key_of_uid(uid).cloned() {
            self.release_finalizer(&key, FOREGROUND_FINALIZER);
        }
    }

    fn has_blocking_dependents(&self, uid: &str) -> bool {
        self.dependents_of(uid)
            .iter()
            .filter_map(|key| self.entry(key))
            .any(|dependent| {
                dependent
                    .owners
                    .iter()
                    .any(|r| r.uid == uid && r.block_owner_deletion)
            })
    }

    fn orphan_dependents(&mut self, uid: &str) {
        let owner = BTreeSet::from([uid.to_string()]);
        for dependent in self.dependents_of(uid) {
            self.drop_owner_refs(&dependent, &owner);
        }
    }

    /// Removes the ownerReferences to `uids` (the list too, if emptied).
    fn drop_owner_refs(&mut self, key: &ObjectKey, uids: &BTreeSet<String>) {
        let Some(stored) = self.entry(key).map(Entry::object) else {
            return;
        };
        let mut object = stored.clone();
        let meta = metadata_mut(&mut object);
        if let Some(Value::Array(refs)) = meta.get_mut("ownerReferences") {
            refs.retain(|r| {
                !r.get("uid")
                    .and_then(Value::as_str)
                    .is_some_and(|uid| uids.contains(uid))
            });
            if refs.is_empty() {
                meta.remove("ownerReferences");
            }
        }
        if object != stored {
            self.replace(key, object, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use reconciler_contract::KindRef;
    use serde_json::json;

    use super::*;
    use crate::cluster::backend::WatchEventType;
    use crate::cluster::embedded::store::tests::summary;

    const T0: i64 = 1_700_000_000_000;

    fn object(kind: &str, name: &str, owners: &[&Value]) -> Value {
        // The first owner is the controller: an object has one at most.
        let refs: Vec<Value> = owners
            .iter()
            .enumerate()
            .map(|(i, o)| {
                json!({"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"],
                       "uid": o["metadata"]["uid"], "controller": i == 0, "blockOwnerDeletion": true})
            })
            .collect();
        let mut object = json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": "default"}});
        if !refs.is_empty() {
            object["metadata"]["ownerReferences"] = Value::Array(refs);
        }
        object
    }

    fn create(store: &mut EmbeddedStore, kind: &str, name: &str, owners: &[&Value]) -> Value {
        store
            .apply(object(kind, name, owners), "test", false, T0)
            .unwrap()
            .object
    }

    fn key_of(object: &Value) -> ObjectKey {
        ObjectKey::of(object).unwrap()
    }

    /// A Deployment, its ReplicaSet and the ReplicaSet's Pod-like child.
    fn chain(store: &mut EmbeddedStore) -> (Value, Value, Value) {
        let deployment = create(store, "Deployment", "web", &[]);
        let replica_set = create(store, "ReplicaSet", "web-1", &[&deployment]);
        let pod = create(store, "Pod", "web-1-a", &[&replica_set]);
        store.drain_events();
        (deployment, replica_set, pod)
    }

    #[test]
    fn background_deletion_cascades_owner_first() {
        let mut store = EmbeddedStore::new(10);
        let (deployment, _, _) = chain(&mut store);
        store
            .delete(&key_of(&deployment), Propagation::Background, T0)
            .unwrap();
        assert!(store.is_empty());
        assert_eq!(
            summary(&store.drain_events()),
            ["Deleted web", "Deleted web-1", "Deleted web-1-a"]
        );
    }

    #[test]
    fn background_dependents_with_finalizers_wait_then_cascade() {
        let mut store = EmbeddedStore::new(10);
        let (deployment, replica_set, pod) = chain(&mut store);
        store
            .add_finalizer(&key_of(&replica_set), "example.com/hold", T0)
            .unwrap();
        store
            .delete(&key_of(&deployment), Propagation::Background, T0)
            .unwrap();
        let held = store.get(&key_of(&replica_set)).unwrap();
        assert!(held["metadata"]["deletionTimestamp"].is_string());
        assert!(
            store.get(&key_of(&pod)).is_some(),
            "the grandchild waits for its owner"
        );

        store
            .remove_finalizer(&key_of(&replica_set), "example.com/hold", T0)
            .unwrap();
        assert!(store.is_empty());
        let names = summary(&store.drain_events());
        assert_eq!(
            names,
            [
                "Modified web-1",
                "Deleted web",
                "Modified web-1",
                "Deleted web-1",
                "Deleted web-1-a"
            ]
        );
    }

    #[test]
    fn a_dependent_with_a_live_owner_survives_and_loses_the_dead_reference() {
        let mut store = EmbeddedStore::new(10);
        let first = create(&mut store, "Deployment", "first", &[]);
        let second = create(&mut store, "Deployment", "second", &[]);
        let shared = create(&mut store, "ConfigMap", "shared", &[&first, &second]);
        store
            .delete(&key_of(&first), Propagation::Background, T0)
            .unwrap();
        let survivor = store.get(&key_of(&shared)).unwrap();
        let refs = survivor["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0]["uid"], second["metadata"]["uid"]);

        store
            .delete(&key_of(&second), Propagation::Background, T0)
            .unwrap();
        assert!(store.is_empty(), "gone once no owner is left");
    }

    #[test]
    fn orphan_keeps_dependents_without_the_reference() {
        let mut store = EmbeddedStore::new(10);
        let (deployment, replica_set, pod) = chain(&mut store);
        store
            .delete(&key_of(&deployment), Propagation::Orphan, T0)
            .unwrap();
        assert!(store.get(&key_of(&deployment)).is_none());
        let orphan = store.get(&key_of(&replica_set)).unwrap();
        assert!(orphan["metadata"].get("ownerReferences").is_none());
        assert!(
            store.get(&key_of(&pod)).unwrap()["metadata"]["ownerReferences"].is_array(),
            "only direct references go"
        );
        let events = store.drain_events();
        assert_eq!(
            summary(&events),
            ["Modified web", "Modified web-1", "Deleted web"]
        );
        assert_eq!(
            events[0].object["metadata"]["finalizers"],
            json!([ORPHAN_FINALIZER])
        );
    }

    #[test]
    fn foreground_deletes_dependents_before_the_owner() {
        let mut store = EmbeddedStore::new(10);
        let (deployment, _, _) = chain(&mut store);
        store
            .delete(&key_of(&deployment), Propagation::Foreground, T0)
            .unwrap();
        assert!(store.is_empty());
        let events = store.drain_events();
        let names = summary(&events);
        assert_eq!(
            names,
            [
                "Modified web",
                "Modified web-1",
                "Deleted web-1-a",
                "Deleted web-1",
                "Deleted web"
            ]
        );
        assert_eq!(
            events[0].object["metadata"]["finalizers"],
            json!([FOREGROUND_FINALIZER])
        );
    }

    #[test]
    fn foreground_owner_waits_for_a_blocking_dependent_with_a_finalizer() {
        let mut store = EmbeddedStore::new(10);
        let (deployment, replica_set, _) = chain(&mut store);
        store
            .add_finalizer(&key_of(&replica_set), "example.com/hold", T0)
            .unwrap();
        store
            .delete(&key_of(&deployment), Propagation::Foreground, T0)
            .unwrap();
        let waiting = store.get(&key_of(&deployment)).unwrap();
        assert_eq!(
            waiting["metadata"]["finalizers"],
            json!([FOREGROUND_FINALIZER])
        );
        assert_eq!(
            store.len(),
            2,
            "the grandchild went, the held child and the owner wait"
        );

        store
            .remove_finalizer(&key_of(&replica_set), "example.com/hold", T0)
            .unwrap();
        assert!(store.is_empty());
        let last = store.drain_events().pop().unwrap();
        assert_eq!(
            (last.event_type, last.object["metadata"]["name"].as_str()),
            (WatchEventType::Deleted, Some("web"))
        );
    }

    #[test]
    fn foreground_owner_does_not_wait_for_non_blocking_dependents() {
        let mut store = EmbeddedStore::new(10);
        let owner = create(&mut store, "Deployment", "web", &[]);
        let mut child = object("ConfigMap", "loose", &[&owner]);
        child["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = json!(false);
        child["metadata"]["finalizers"] = json!(["example.com/hold"]);
        store.apply(child.clone(), "test", false, T0).unwrap();
        store
            .delete(&key_of(&owner), Propagation::Foreground, T0)
            .unwrap();
        assert!(store.get(&key_of(&owner)).is_none());
        assert!(store.get(&key_of(&child)).unwrap()["metadata"]["deletionTimestamp"].is_string());
    }

    #[test]
    fn a_dependent_created_under_a_waiting_owner_is_collected() {
        let mut store = EmbeddedStore::new(10);
        let (deployment, replica_set, _) = chain(&mut store);
        store
            .add_finalizer(&key_of(&replica_set), "example.com/hold", T0)
            .unwrap();
        store
            .delete(&key_of(&deployment), Propagation::Foreground, T0)
            .unwrap();
        let waiting = store.get(&key_of(&deployment)).unwrap().clone();
        let late = create(&mut store, "ReplicaSet", "web-2", &[&waiting]);
        assert!(
            store.get(&key_of(&late)).is_none(),
            "a real garbage collector deletes it too"
        );

        store
            .remove_finalizer(&key_of(&replica_set), "example.com/hold", T0)
            .unwrap();
        assert!(store.is_empty(), "and the owner is not left waiting for it");
    }

    #[test]
    fn an_apply_dropping_the_last_finalizer_completes_the_deletion() {
        let mut store = EmbeddedStore::new(10);
        let mut held = object("Deployment", "web", &[]);
        held["metadata"]["finalizers"] = json!(["example.com/hold"]);
        store.apply(held, "test", false, T0).unwrap();
        let key = ObjectKey::new(
            KindRef::new("apps", "v1", "Deployment"),
            Some("default"),
            "web",
        );
        store.delete(&key, Propagation::Background, T0).unwrap();
        let outcome = store
            .apply(object("Deployment", "web", &[]), "test", false, T0)
            .unwrap();
        assert!(outcome.changed && store.is_empty());
        assert_eq!(
            summary(&store.drain_events()),
            ["Added web", "Modified web", "Deleted web"]
        );
    }
}
