//! Namespace termination in the embedded cluster.
//!
//! Why it is modelled: a controller cleaning up while its namespace is
//! deleted meets a refusal on a real cluster (a create there is forbidden
//! once the namespace is terminating), and `dev`, `simulate` and the tests
//! must show that too, or cleanup code that only works outside a deleted
//! namespace would pass locally.
//!
//! The contract, as an API server and its namespace controller behave:
//! 1. A Namespace is created with the `kubernetes` finalizer in
//!    `spec.finalizers` and `status.phase: Active`; a client cannot set
//!    either (what it sends for them is ignored).
//! 2. Deleting it marks it (`deletionTimestamp`, `status.phase:
//!    Terminating`), whatever the propagation, and deletes
//!    every object in the namespace in the background: objects with
//!    finalizers stay, marked, until their finalizers are removed.
//! 3. While it is terminating, creating an object in the namespace is
//!    refused ([`StoreError::NamespaceTerminating`]); updates of objects
//!    already there, finalizer removals included, still succeed.
//! 4. Once the namespace holds no object, the `kubernetes` finalizer is
//!    removed, and the Namespace goes when no finalizer of its own (in
//!    `metadata.finalizers`) is left.
//!
//! A namespace with no Namespace object is not managed: objects are
//! created in it freely, as before it existed.
//!
//! Known bounds versus a real cluster: it all happens inside the delete
//! call (and the call that removes the last finalizer), and content is
//! deleted in key order.

use serde_json::{Value, json};

use super::namespace_object::{NAMESPACE_FINALIZER, namespace_finalizers, namespace_kind};
use super::object_metadata::{is_deleting, metadata_mut};
use super::store::{EmbeddedStore, StoreError};
use crate::cluster::backend::{ObjectKey, Propagation};
use crate::cluster::clock::rfc3339;

impl EmbeddedStore {
    /// Whether `namespace` has a Namespace object being deleted.
    fn is_terminating(&self, namespace: &str) -> bool {
        let key = ObjectKey::new(namespace_kind(), None, namespace);
        self.entry(&key).is_some_and(|e| e.deleting)
    }

    /// Refuses to create `key` in a terminating namespace.
    pub(super) fn refuse_in_terminating_namespace(
        &self,
        key: &ObjectKey,
    ) -> Result<(), StoreError> {
        match &key.namespace {
            Some(ns) if self.is_terminating(ns) => Err(StoreError::NamespaceTerminating {
                key: key.to_string(),
                namespace: ns.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// Starts deleting the Namespace `key` names: marks it terminating and
    /// deletes what it holds; it goes once it is empty.
    pub(super) fn terminate_namespace(&mut self, key: &ObjectKey, now_millis: i64) {
        let Some(current) = self.get(key) else {
            return;
        };
        if is_deleting(&current) {
            return;
        }
        // As measured on an API server: a Namespace gets its
        // deletionTimestamp and phase, no grace period.
        let mut object = current;
        metadata_mut(&mut object).insert(
            "deletionTimestamp".into(),
            Value::String(rfc3339(now_millis)),
        );
        if let Some(map) = object.as_object_mut() {
            map.insert("status".into(), json!({"phase": "Terminating"}));
        }
        let namespace = key.name.clone();
        self.replace_or_finish(key, object, None);
        for content in self.keys_in(&namespace) {
            self.delete_now(&content, Propagation::Background, now_millis);
        }
        self.finish_namespace(&namespace);
    }

    /// Removes the `kubernetes` finalizer of a terminating Namespace once
    /// nothing is left in it, which removes the Namespace unless a finalizer
    /// of its own still holds it.
    pub(super) fn finish_namespace(&mut self, namespace: &str) {
        let key = ObjectKey::new(namespace_kind(), None, namespace);
        let Some(current) = self.get(&key) else {
            return;
        };
        let current = &current;
        if !is_deleting(current)
            || self.count_in(namespace) > 0
            || !namespace_finalizers(current).contains(&NAMESPACE_FINALIZER)
        {
            return;
        }
        let mut object = current.clone();
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            let left: Vec<Value> = namespace_finalizers(current)
                .into_iter()
                .filter(|f| *f != NAMESPACE_FINALIZER)
                .map(|f| Value::String(f.to_string()))
                .collect();
            if left.is_empty() {
                spec.remove("finalizers");
            } else {
                spec.insert("finalizers".into(), Value::Array(left));
            }
        }
        self.replace_or_finish(&key, object, None);
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

    fn namespace(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    }

    fn config_map(ns: &str, name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns}, "data": {"k": "v"}})
    }

    fn ns_key(name: &str) -> ObjectKey {
        ObjectKey::new(namespace_kind(), None, name)
    }

    fn cm_key(ns: &str, name: &str) -> ObjectKey {
        ObjectKey::new(KindRef::new("", "v1", "ConfigMap"), Some(ns), name)
    }

    fn store_with(objects: &[Value]) -> EmbeddedStore {
        let mut store = EmbeddedStore::new(100);
        for object in objects {
            store.apply(object.clone(), "test", false, T0).unwrap();
        }
        store.drain_events();
        store
    }

    #[test]
    fn a_namespace_is_created_active_with_the_servers_finalizer() {
        let mut sent = namespace("team");
        sent["spec"] = json!({"finalizers": ["mine"]});
        let stored = store_with(&[])
            .apply(sent, "test", false, T0)
            .unwrap()
            .object;
        assert_eq!(stored["spec"]["finalizers"], json!(["kubernetes"]));
        assert_eq!(stored["status"]["phase"], "Active");
    }

    #[test]
    fn deleting_a_namespace_deletes_its_objects_then_the_namespace() {
        let mut store = store_with(&[
            namespace("team"),
            config_map("team", "a"),
            config_map("team", "b"),
            config_map("other", "c"),
        ]);
        store
            .delete(&ns_key("team"), Propagation::Background, T0 + 1_000)
            .unwrap();
        assert!(store.get(&ns_key("team")).is_none());
        assert!(store.get(&cm_key("team", "a")).is_none());
        assert!(store.get(&cm_key("team", "b")).is_none());
        assert!(
            store.get(&cm_key("other", "c")).is_some(),
            "another namespace is left alone"
        );
        let events = store.drain_events();
        assert_eq!(
            summary(&events),
            ["Modified team", "Deleted a", "Deleted b", "Deleted team"]
        );
        assert_eq!(events[0].object["status"]["phase"], "Terminating");
        assert_eq!(
            events[0].object["metadata"]["deletionTimestamp"],
            "2023-11-14T22:13:21Z"
        );
    }

    #[test]
    fn a_terminating_namespace_refuses_new_objects_but_not_updates() {
        let mut store = store_with(&[namespace("term"), config_map("term", "held")]);
        let held = cm_key("term", "held");
        store
            .add_finalizer(&held, "example.com/cleanup", T0)
            .unwrap();
        store
            .delete(&ns_key("term"), Propagation::Background, T0)
            .unwrap();
        let ns = store.get(&ns_key("term")).unwrap();
        assert_eq!(ns["status"]["phase"], "Terminating");
        assert!(
            store.get(&held).unwrap()["metadata"]["deletionTimestamp"].is_string(),
            "its content is being deleted"
        );

        let err = store
            .apply(config_map("term", "new"), "test", false, T0)
            .unwrap_err();
        assert_eq!(
            err,
            StoreError::NamespaceTerminating {
                key: "ConfigMap term/new".into(),
                namespace: "term".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "ConfigMap term/new is forbidden: unable to create new content in namespace term because it is being terminated"
        );
        assert!(store.get(&cm_key("term", "new")).is_none());

        let mut update = config_map("term", "held");
        update["data"] = json!({"k": "changed"});
        let updated = store.apply(update, "test", false, T0).unwrap();
        assert!(updated.changed, "an existing object can still be updated");

        // Releasing the last finalizer empties the namespace: it goes.
        store
            .remove_finalizer(&held, "example.com/cleanup", T0)
            .unwrap();
        assert!(store.get(&held).is_none());
        assert!(store.get(&ns_key("term")).is_none());
        assert!(
            store
                .apply(config_map("term", "new"), "test", false, T0)
                .unwrap()
                .created,
            "with no Namespace object left, the namespace is unmanaged again"
        );
    }

    #[test]
    fn a_namespaces_own_finalizer_holds_it_after_it_is_empty() {
        let mut store = store_with(&[namespace("team")]);
        store
            .add_finalizer(&ns_key("team"), "example.com/audit", T0)
            .unwrap();
        store
            .delete(&ns_key("team"), Propagation::Foreground, T0)
            .unwrap();
        let held = store.get(&ns_key("team")).unwrap();
        assert_eq!(held["spec"], json!({}), "the namespace finalizer is done");
        assert_eq!(held["metadata"]["finalizers"], json!(["example.com/audit"]));
        store
            .remove_finalizer(&ns_key("team"), "example.com/audit", T0)
            .unwrap();
        assert!(store.get(&ns_key("team")).is_none());
    }

    #[test]
    fn a_namespace_without_an_object_accepts_creates() {
        let mut store = store_with(&[]);
        assert!(
            store
                .apply(config_map("loose", "a"), "test", false, T0)
                .unwrap()
                .created
        );
        let events = store.drain_events();
        assert_eq!(events[0].event_type, WatchEventType::Added);
    }
}
