//! The embedded in-memory cluster: what `simulate`, `dev` and most of the test
//! suite run on.
//!
//! It is part of the product, not a test double: everything a plugin can
//! observe (resourceVersions, generation, uids, server-side apply with field
//! managers, deletion with finalizers, ownerReference garbage collection,
//! label selectors, watches, which kinds are cluster-scoped, terminating
//! namespaces) behaves as on an API server, with the bounds documented in
//! [`store`]. It is exact and immediate where a real cluster is
//! eventually consistent: garbage collection happens inside the delete call.
//! Time comes from a [`Clock`], real in `dev`, virtual in `simulate`.
//!
//! Optionally ([`EmbeddedCluster::with_builtin_controllers`]) it also plays
//! the built-in controllers the examples rely on ([`builtins`]): Deployments
//! get ReplicaSets and Pods, Pods run, Jobs end.

pub mod builtins;
pub mod crd_schema;
mod event_log;
pub mod field_set;
pub mod garbage_collector;
mod gc_tasks;
pub mod kind_scopes;
mod namespace_object;
pub mod namespaces;
mod object_metadata;
pub mod packed_ownership;
pub mod store;

use reconciler_contract::object_meta::MetadataField;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use reconciler_contract::KindRef;
use serde_json::Value;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

use self::builtins::{BuiltinConfig, BuiltinControllers};
use self::event_log::EventLog;
pub use self::event_log::{EVENT_TTL, MAX_EVENTS, RecordedEvent};
use self::store::{EmbeddedStore, PreparedApply, StoreError, StoreEvent};
use super::backend::{
    BackendError, ClusterBackend, EventRecord, EventRef, EventSeries, KindScope, ListedObject,
    ObjectKey, Propagation, WatchEvent, WatchScope, WatchStream,
};
use super::clock::Clock;

/// How many objects the embedded cluster holds at most: far more than a
/// laptop session needs, few enough that a runaway plugin creating objects
/// in a loop is stopped with an error instead of exhausting memory.
pub const DEFAULT_MAX_OBJECTS: usize = 100_000;
/// How often an async caller finds the store held and yields before it
/// parks its thread until the store is free.
const YIELDS_BEFORE_PARKING: usize = 64;

pub struct EmbeddedCluster {
    inner: Mutex<Inner>,
    events: Mutex<EventLog>,
    clock: Arc<dyn Clock>,
    /// Wakes [`EmbeddedCluster::drive_builtins`] when a change may have set
    /// an earlier timer.
    builtins_changed: tokio::sync::Notify,
    /// Wakes [`EmbeddedCluster::builtin_changes_ready`].
    changes_ready: tokio::sync::Notify,
}

/// One open watch.
struct Subscriber {
    kind: KindRef,
    scope: WatchScope,
    events: UnboundedSender<WatchEvent>,
}

struct Inner {
    store: EmbeddedStore,
    subscribers: Vec<Subscriber>,
    kinds: BTreeSet<KindRef>,
    /// Off unless asked for: tests and benchmarks of the engine see only
    /// what it wrote.
    builtins: Option<BuiltinControllers>,
}

impl Inner {
    /// Sends each change to the watches of its kind, in order.
    fn deliver(
        kinds: &mut BTreeSet<KindRef>,
        subscribers: &mut Vec<Subscriber>,
        events: Vec<StoreEvent>,
    ) {
        for event in events {
            let Some(kind) = KindRef::of_object(&event.object) else {
                continue;
            };
            kinds.insert(kind.clone());
            subscribers.retain(|s| {
                s.kind != kind
                    || !s.scope.admits(&event.object)
                    || s.events.send(Self::watch_event(&s.scope, &event)).is_ok()
            });
        }
    }

    /// A change as a watch of `scope` sees it; whole objects come with the
    /// store's text.
    fn watch_event(scope: &WatchScope, event: &StoreEvent) -> WatchEvent {
        match &event.json {
            Some(json) if !scope.metadata_only => {
                WatchEvent::with_json(event.event_type, event.object.clone(), json.clone())
            }
            _ => WatchEvent::new(event.event_type, scope.project(event.object.clone())),
        }
    }

    /// Delivers the changes of the last call, then lets the built-in
    /// controllers react (and delivers what they changed) until they rest.
    fn settle(&mut self, now: i64) {
        let Inner {
            store,
            subscribers,
            kinds,
            builtins,
            ..
        } = self;
        let events = store.drain_events();
        if let Some(builtins) = builtins {
            for event in &events {
                builtins.observe(event);
            }
        }
        Self::deliver(kinds, subscribers, events);
        if let Some(builtins) = builtins {
            builtins.settle(store, now, |events| {
                Self::deliver(kinds, subscribers, events)
            });
        }
    }
}

impl EmbeddedCluster {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self::with_capacity(clock, DEFAULT_MAX_OBJECTS)
    }

    pub fn with_capacity(clock: Arc<dyn Clock>, max_objects: usize) -> Self {
        let inner = Inner {
            store: EmbeddedStore::new(max_objects),
            subscribers: Vec::new(),
            kinds: BTreeSet::new(),
            builtins: None,
        };
        Self {
            inner: Mutex::new(inner),
            events: Mutex::default(),
            clock,
            builtins_changed: tokio::sync::Notify::new(),
            changes_ready: tokio::sync::Notify::new(),
        }
    }

    /// Plays the built-in controllers ([`builtins`]) from now on.
    pub fn with_builtin_controllers(self, config: BuiltinConfig) -> Self {
        self.lock().builtins = Some(BuiltinControllers::new(config));
        self
    }

    /// When the built-in controllers next have something to do (a Pod to
    /// start, a Job to end), epoch millis; `None` when off or idle.
    pub fn next_builtin_due(&self) -> Option<i64> {
        self.lock().builtins.as_ref()?.next_due()
    }

    /// Returns once the built-in controllers made changes not yet taken
    /// (at once if some wait).
    pub async fn builtin_changes_ready(&self) {
        loop {
            let ready = self.changes_ready.notified();
            if self
                .lock()
                .builtins
                .as_ref()
                .is_some_and(BuiltinControllers::has_changes)
            {
                return;
            }
            ready.await;
        }
    }

    /// What the built-in controllers did since the last call, oldest first.
    pub fn take_builtin_changes(&self) -> Vec<builtins::BuiltinChange> {
        self.lock()
            .builtins
            .as_mut()
            .map(BuiltinControllers::take_changes)
            .unwrap_or_default()
    }

    /// Lets the built-in controllers do what is due by now. A virtual clock
    /// calls it after moving to [`Self::next_builtin_due`]; with the real
    /// clock, [`Self::drive_builtins`] does.
    pub fn run_builtins(&self) {
        let now = self.clock.now_millis();
        let mut inner = self.lock();
        inner.settle(now);
        drop(inner);
        self.builtins_changed.notify_one();
        self.changes_ready.notify_one();
    }

    /// Runs the built-in controllers' delayed changes on the real clock,
    /// forever (spawn it; it ends with its task).
    pub async fn drive_builtins(self: Arc<Self>) {
        loop {
            let wait = self
                .next_builtin_due()
                .map(|at| at.saturating_sub(self.clock.now_millis()).max(0));
            let changed = self.builtins_changed.notified();
            match wait {
                Some(millis) => {
                    let sleep =
                        tokio::time::sleep(std::time::Duration::from_millis(millis.unsigned_abs()));
                    tokio::select! {
                        () = sleep => self.run_builtins(),
                        () = changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The store's lock for an async caller. While another worker holds it
    /// (an apply takes tens of microseconds), the task yields and its worker
    /// runs other tasks, where parking would leave the core idle for the
    /// wait and the wake-up; after [`YIELDS_BEFORE_PARKING`] tries it
    /// parks, so a long hold (a watch's initial list of a big kind) costs no
    /// spinning.
    async fn lock_yielding(&self) -> MutexGuard<'_, Inner> {
        for _ in 0..YIELDS_BEFORE_PARKING {
            match self.inner.try_lock() {
                Ok(inner) => return inner,
                Err(TryLockError::Poisoned(e)) => return e.into_inner(),
                Err(TryLockError::WouldBlock) => {}
            }
            tokio::task::yield_now().await;
        }
        self.lock()
    }

    fn event_log(&self) -> MutexGuard<'_, EventLog> {
        self.events.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs one change against the store and delivers the watch events it
    /// caused, in order, before returning.
    fn mutate<R>(
        &self,
        f: impl FnOnce(&mut EmbeddedStore, i64) -> Result<R, StoreError>,
    ) -> Result<R, BackendError> {
        self.mutate_locked(self.lock(), f)
    }

    /// [`Self::mutate`] for the backend's async calls: waiting for the
    /// store lets the worker run other tasks ([`Self::lock_yielding`]).
    async fn mutate_yielding<R>(
        &self,
        f: impl FnOnce(&mut EmbeddedStore, i64) -> Result<R, StoreError>,
    ) -> Result<R, BackendError> {
        let inner = self.lock_yielding().await;
        self.mutate_locked(inner, f)
    }

    fn mutate_locked<R>(
        &self,
        mut inner: MutexGuard<'_, Inner>,
        f: impl FnOnce(&mut EmbeddedStore, i64) -> Result<R, StoreError>,
    ) -> Result<R, BackendError> {
        let now = self.clock.now_millis();
        let result = f(&mut inner.store, now);
        inner.settle(now);
        if inner.builtins.is_some() {
            self.builtins_changed.notify_one();
            self.changes_ready.notify_one();
        }
        result.map_err(into_backend_error)
    }

    /// Every object, ordered by kind, namespace and name.
    pub fn objects(&self) -> Vec<Value> {
        let inner = self.lock();
        inner
            .kinds
            .iter()
            .flat_map(|k| inner.store.list(k))
            .collect()
    }

    /// Forgets the watches whose receiver is gone, as an API server ends a
    /// watch whose connection closed; returns how many. (A change of a
    /// watched kind forgets them too, on the way.)
    pub fn forget_closed_watches(&self) -> usize {
        let mut inner = self.lock();
        let before = inner.subscribers.len();
        inner.subscribers.retain(|s| !s.events.is_closed());
        before - inner.subscribers.len()
    }

    /// The Events recorded so far, oldest first.
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.event_log().to_vec()
    }

    /// Creates or updates an object as a user would (`kubectl apply`): an
    /// object of a namespaced kind that names no namespace goes to
    /// `default`, as kubectl puts it in its context's namespace. A
    /// CustomResourceDefinition teaches the cluster its kind's scope.
    pub fn apply_as_user(&self, mut object: Value) -> Result<Value, BackendError> {
        self.mutate(|s, now| {
            if let Some(kind) = KindRef::of_object(&object)
                && s.kind_scope(&kind) == KindScope::Namespaced
                && object
                    .metadata_field("namespace")
                    .is_none_or(Value::is_null)
                && let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
            {
                meta.insert("namespace".into(), Value::String(USER_NAMESPACE.into()));
            }
            s.apply(object, "kubectl", true, now).map(|o| o.object)
        })
    }

    /// An object as a user would read it (`kubectl get`), in `default`
    /// when the key of a namespaced kind names no namespace.
    pub fn get_as_user(&self, key: &ObjectKey) -> Option<Value> {
        let inner = self.lock();
        let mut key = key.clone();
        if key.namespace.is_none() && inner.store.kind_scope(&key.kind) == KindScope::Namespaced {
            key.namespace = Some(USER_NAMESPACE.into());
        }
        inner.store.get(&key)
    }

    /// Deletes an object as a user would (`kubectl delete`), in `default`
    /// when the key of a namespaced kind names no namespace.
    pub fn delete_as_user(&self, key: &ObjectKey) -> Result<(), BackendError> {
        self.mutate(|s, now| {
            let mut key = key.clone();
            if key.namespace.is_none() && s.kind_scope(&key.kind) == KindScope::Namespaced {
                key.namespace = Some(USER_NAMESPACE.into());
            }
            s.delete(&key, Propagation::Background, now)
        })
    }
}

/// The namespace a user's object of a namespaced kind goes to when it
/// names none, as with kubectl's default context.
pub const USER_NAMESPACE: &str = "default";

fn into_backend_error(e: StoreError) -> BackendError {
    match e {
        StoreError::NotFound { key } => BackendError::NotFound { key },
        StoreError::Invalid { key, message } => BackendError::Invalid { key, message },
        StoreError::Conflict { key, message } => BackendError::Conflict { key, message },
        StoreError::NamespaceTerminating { key, namespace } => {
            BackendError::NamespaceTerminating { key, namespace }
        }
        StoreError::Full { limit } => BackendError::Invalid {
            key: "(new object)".into(),
            message: format!("the embedded cluster already holds its maximum of {limit} objects"),
        },
    }
}

impl ClusterBackend for EmbeddedCluster {
    async fn kind_scope(&self, kind: &KindRef) -> Result<KindScope, BackendError> {
        Ok(self.lock_yielding().await.store.kind_scope(kind))
    }

    async fn watch(&self, kind: &KindRef, scope: &WatchScope) -> Result<WatchStream, BackendError> {
        let (tx, rx) = unbounded_channel();
        let mut inner = self.lock_yielding().await;
        let initial: Vec<ListedObject> = if scope.metadata_only {
            inner
                .store
                .list(kind)
                .into_iter()
                .filter(|o| scope.admits(o))
                .map(|o| ListedObject::new(&scope.project(o)))
                .collect()
        } else {
            // Whole objects: the store's own text, neither parsed nor
            // written out again.
            inner
                .store
                .list_json(kind)
                .filter(|(key, json)| {
                    scope.admits_namespace(key.namespace.as_deref())
                        && (scope.labels.is_none()
                            || serde_json::from_str::<Value>(json)
                                .is_ok_and(|o| scope.admits_labels(&o)))
                })
                .map(|(_, json)| ListedObject::from_json(json.clone()))
                .collect()
        };
        if let Some(max) = scope.max_objects
            && initial.len() > max
        {
            return Err(BackendError::OverBudget {
                kind: kind.to_string(),
                max,
            });
        }
        // A client that watches again has usually dropped its last watch.
        inner.subscribers.retain(|s| !s.events.is_closed());
        inner.subscribers.push(Subscriber {
            kind: kind.clone(),
            scope: scope.clone(),
            events: tx,
        });
        Ok(WatchStream {
            initial,
            events: rx,
        })
    }

    async fn get(&self, key: &ObjectKey) -> Result<Option<Value>, BackendError> {
        Ok(self.lock_yielding().await.store.get(key))
    }

    async fn apply(
        &self,
        object: Value,
        field_manager: &str,
        force: bool,
    ) -> Result<Value, BackendError> {
        // A create's merge needs nothing from the store: it is made before
        // the store is locked, after a brief look that the object is new.
        let expect_create = match ObjectKey::of(&object) {
            Some(key) => !self.lock_yielding().await.store.contains(&key),
            None => false,
        };
        let prepared = PreparedApply::new(object, field_manager, force, expect_create)
            .map_err(into_backend_error)?;
        self.mutate_yielding(|s, now| s.apply_prepared(prepared, now).map(|o| o.object))
            .await
    }

    async fn apply_status(
        &self,
        key: &ObjectKey,
        status: Value,
        field_manager: &str,
        resource_version: Option<&str>,
    ) -> Result<Value, BackendError> {
        self.mutate_yielding(|s, now| {
            s.apply_status(key, status, field_manager, resource_version, now)
        })
        .await
    }

    async fn delete(
        &self,
        key: &ObjectKey,
        propagation: Propagation,
        uid: Option<&str>,
    ) -> Result<(), BackendError> {
        self.mutate_yielding(|s, now| {
            let current = s.get(key);
            let current_uid = current
                .as_ref()
                .and_then(|o| o.metadata_field("uid"))
                .and_then(Value::as_str);
            if uid.is_some_and(|uid| current_uid != Some(uid)) {
                return Ok(());
            }
            s.delete(key, propagation, now)
        })
        .await
    }

    async fn add_finalizer(&self, key: &ObjectKey, finalizer: &str) -> Result<Value, BackendError> {
        self.mutate_yielding(|s, now| s.add_finalizer(key, finalizer, now))
            .await
    }

    async fn remove_finalizer(&self, key: &ObjectKey, finalizer: &str) -> Result<(), BackendError> {
        self.mutate_yielding(|s, now| s.remove_finalizer(key, finalizer, now))
            .await
    }

    async fn record_event(&self, event: EventRecord) -> Result<EventRef, BackendError> {
        let at_millis = self.clock.now_millis();
        Ok(self
            .event_log()
            .record(event, at_millis, MAX_EVENTS, EVENT_TTL))
    }

    async fn update_event_series(
        &self,
        event: &EventRef,
        series: EventSeries,
    ) -> Result<(), BackendError> {
        if self.event_log().set_series(&event.name, series) {
            Ok(())
        } else {
            // Expired, or dropped as the oldest of MAX_EVENTS, as an API
            // server expires old Events.
            Err(BackendError::NotFound {
                key: format!("Event {}/{}", event.namespace, event.name),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::cluster::{VirtualClock, WatchEventType};

    /// Whole-object watches carry the store's text, the object written
    /// out and nothing else; metadata-only watches and deletions carry none,
    /// so the cache writes out what it was given.
    #[tokio::test]
    async fn watch_events_carry_the_text_of_their_object_and_only_that() {
        let cluster = EmbeddedCluster::new(Arc::new(VirtualClock::at(0)));
        let kind = KindRef::new("", "v1", "ConfigMap");
        let first = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "listed", "namespace": "default"}, "data": {"a": "1.5e3"}});
        cluster.apply_as_user(first).unwrap();
        let whole = cluster.watch(&kind, &WatchScope::default()).await.unwrap();
        let metadata_scope = WatchScope {
            metadata_only: true,
            ..WatchScope::default()
        };
        let metadata = cluster.watch(&kind, &metadata_scope).await.unwrap();
        let listed: Vec<WatchEvent> = whole
            .initial
            .into_iter()
            .map(ListedObject::into_event)
            .collect();
        assert_eq!(listed.len(), 1);
        assert_eq!(
            listed[0].json().map(|j| j.to_string()),
            Some(listed[0].object.to_string())
        );
        assert!(listed[0].object["data"].is_object(), "the whole object");

        let made = cluster
            .apply_as_user(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "default", "labels": {"x": "y"}},
                "data": {"n": "2"}}))
            .unwrap();
        cluster
            .delete_as_user(&ObjectKey::of(&made).unwrap())
            .unwrap();
        let (mut whole_events, mut metadata_events) = (whole.events, metadata.events);
        let added = whole_events.try_recv().unwrap();
        assert_eq!(added.event_type, WatchEventType::Added);
        assert_eq!(added.object, made);
        assert_eq!(added.json().map(|j| j.to_string()), Some(made.to_string()));
        let deleted = whole_events.try_recv().unwrap();
        assert_eq!(deleted.event_type, WatchEventType::Deleted);
        assert!(deleted.json().is_none());
        let added = metadata_events.try_recv().unwrap();
        assert!(added.object.get("data").is_none(), "metadata only");
        assert!(added.json().is_none());
    }

    #[tokio::test]
    async fn a_delete_with_a_uid_leaves_a_namesake_alone() {
        let cluster = EmbeddedCluster::new(Arc::new(VirtualClock::at(0)));
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "default"}});
        let first = cluster.apply_as_user(config_map.clone()).unwrap();
        let key = ObjectKey::of(&first).unwrap();
        let first_uid = first["metadata"]["uid"].as_str().unwrap().to_string();
        cluster.delete_as_user(&key).unwrap();
        let second = cluster.apply_as_user(config_map).unwrap();
        assert_ne!(second["metadata"]["uid"], first_uid.as_str());

        cluster
            .delete(&key, Propagation::Background, Some(&first_uid))
            .await
            .unwrap();
        assert!(
            cluster.get(&key).await.unwrap().is_some(),
            "the namesake stays"
        );
        let second_uid = second["metadata"]["uid"].as_str().unwrap();
        cluster
            .delete(&key, Propagation::Background, Some(second_uid))
            .await
            .unwrap();
        assert!(cluster.get(&key).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_create_in_a_terminating_namespace_is_refused_naming_it() {
        let cluster = EmbeddedCluster::new(Arc::new(VirtualClock::at(0)));
        cluster
            .apply_as_user(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "term"}}),
            )
            .unwrap();
        let held = cluster
            .apply_as_user(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "held", "namespace": "term"}}))
            .unwrap();
        let held_key = ObjectKey::of(&held).unwrap();
        cluster.add_finalizer(&held_key, "a.io/x").await.unwrap();
        let ns_key = ObjectKey::new(KindRef::new("", "v1", "Namespace"), None, "term");
        cluster.delete_as_user(&ns_key).unwrap();

        let new = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "new", "namespace": "term"}});
        let err = cluster
            .apply(new, "reconciler-host/x", true)
            .await
            .unwrap_err();
        assert_eq!(
            err,
            BackendError::NamespaceTerminating {
                key: "ConfigMap term/new".into(),
                namespace: "term".into()
            }
        );
        let mut update = held.clone();
        update["data"] = json!({"still": "works"});
        cluster
            .apply(update, "reconciler-host/x", true)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_users_object_without_a_namespace_goes_to_default_as_with_kubectl() {
        let cluster = EmbeddedCluster::new(Arc::new(VirtualClock::at(0)));
        let cm = cluster
            .apply_as_user(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            )
            .unwrap();
        assert_eq!(cm["metadata"]["namespace"], "default");
        let ns = cluster
            .apply_as_user(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}),
            )
            .unwrap();
        assert!(ns["metadata"].get("namespace").is_none());
        let unnamespaced = ObjectKey::new(KindRef::new("", "v1", "ConfigMap"), None, "c");
        cluster.delete_as_user(&unnamespaced).unwrap();
        assert!(cluster.objects().iter().all(|o| o["kind"] != "ConfigMap"));
        // The engine's applies get no such help: the API refuses them too.
        let err = cluster
            .apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
                "reconciler-host/x",
                true,
            )
            .await
            .unwrap_err();
        assert!(matches!(err, BackendError::Invalid { .. }), "{err}");
    }
}

#[cfg(test)]
mod lock_tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::cluster::VirtualClock;

    /// A reconcile waiting for the store while another thread holds it
    /// leaves its worker to other tasks: here the only worker runs the task
    /// that lets the holder go. Were the wait to park the worker, that task
    /// could not run until the holder gave up on it.
    #[test]
    fn waiting_for_the_store_leaves_the_worker_to_other_tasks() {
        let cluster = Arc::new(EmbeddedCluster::new(Arc::new(VirtualClock::at(0))));
        let made = cluster
            .apply_as_user(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "default"}}))
            .unwrap();
        let key = ObjectKey::of(&made).unwrap();
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let holder = {
            let cluster = cluster.clone();
            std::thread::spawn(move || {
                let guard = cluster.lock();
                held_tx.send(()).unwrap();
                // Released when the other task says so, or after a while.
                let released_by_task = release_rx.recv_timeout(Duration::from_secs(5)).is_ok();
                drop(guard);
                released_by_task
            })
        };
        held_rx.recv().unwrap();

        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let other_ran = Arc::new(AtomicBool::new(false));
        let read = runtime.block_on({
            let other_ran = other_ran.clone();
            async move {
                let read = tokio::spawn(async move { cluster.get(&key).await });
                tokio::spawn(async move {
                    other_ran.store(true, Ordering::SeqCst);
                    let _ = release_tx.send(());
                });
                read.await.unwrap()
            }
        });
        assert!(other_ran.load(Ordering::SeqCst));
        assert!(
            holder.join().unwrap(),
            "the waiting task held the only worker"
        );
        assert_eq!(read.unwrap().unwrap()["metadata"]["name"], "c");
    }
}
