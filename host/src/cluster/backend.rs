//! The interface between the engine and a cluster.
//!
//! It is deliberately narrow: everything the engine does to a cluster is one
//! of these calls, so the embedded cluster and the Kubernetes API can serve
//! the same engine, and each can be tested alone. Objects are JSON
//! (`serde_json::Value`) as the API server speaks them.

use reconciler_contract::object_meta::MetadataField;
use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use reconciler_contract::memory_cache::metadata_only;
use reconciler_contract::selector::LabelSelector;
use reconciler_contract::{EventType, KindRef};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;

/// Names one object.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub kind: KindRef,
    /// `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectKey {
    pub fn new(kind: KindRef, namespace: Option<&str>, name: &str) -> Self {
        Self {
            kind,
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        }
    }

    /// The key of a JSON object, if it has apiVersion, kind and a name.
    pub fn of(object: &Value) -> Option<Self> {
        let kind = KindRef::of_object(object)?;
        let name = object.metadata_field("name")?.as_str()?;
        let namespace = object.metadata_field("namespace").and_then(Value::as_str);
        Some(Self::new(kind, namespace, name))
    }
}

impl fmt::Display for ObjectKey {
    /// `Deployment default/web`, `Namespace team`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind.kind, self.name),
            None => write!(f, "{} {}", self.kind.kind, self.name),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchEventType {
    Added,
    Modified,
    /// The object is gone; the event carries its last state. (When only a
    /// re-list after a watch gap shows it gone, the Kubernetes backend sends
    /// its last apiVersion, kind and metadata: all that is read of a deleted
    /// object.)
    Deleted,
}

/// One change to one object.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchEvent {
    pub event_type: WatchEventType,
    pub object: Value,
    /// `object` as JSON text, when the backend holds that text already (the
    /// embedded store keeps objects as text): the cache keeps it rather than
    /// writing the object out again. Private, so it is only ever the text of
    /// the object it came with.
    json: Option<Arc<str>>,
    /// The object's `managedFields`, which `object` is slimmed of, as JSON
    /// text: kept with the event alone, never cached, so the journal can
    /// name who manages the fields a change changed. Only a watch's own
    /// events carry them, not a list's pages; they are written straight
    /// from the decoded entries (never made a tree first), and read back
    /// only for a change the journal describes.
    managed_fields: Option<String>,
}

/// Where a watch carries an object's `managedFields` from the moment it is
/// slimmed to the moment its event is made ([`WatchEvent::carrying`]).
const CARRIED_MANAGED_FIELDS: &str = "__reconcilerHostManagedFields";

/// `object` with `managed_fields` (its `managedFields`, as text) carried
/// beside it for its event.
pub(crate) fn carrying_managers(mut object: Value, managed_fields: Option<String>) -> Value {
    if let (Some(managed), Some(map)) = (managed_fields, object.as_object_mut()) {
        map.insert(CARRIED_MANAGED_FIELDS.to_string(), Value::String(managed));
    }
    object
}

/// Takes the `managedFields` [`carrying_managers`] carried.
pub(crate) fn take_carried_managers(object: &mut Value) -> Option<String> {
    match object.as_object_mut()?.remove(CARRIED_MANAGED_FIELDS)? {
        Value::String(text) => Some(text),
        _ => None,
    }
}

impl WatchEvent {
    pub fn new(event_type: WatchEventType, object: Value) -> Self {
        Self {
            event_type,
            object,
            json: None,
            managed_fields: None,
        }
    }

    /// An event of an object [`slimmed_carrying_managers`] made: the
    /// `managedFields` it carried go with the event, out of the object.
    pub(crate) fn carrying(event_type: WatchEventType, mut object: Value) -> Self {
        let managed_fields = take_carried_managers(&mut object);
        Self {
            managed_fields,
            ..Self::new(event_type, object)
        }
    }

    /// The object's `managedFields` as JSON text, when the backend had
    /// them.
    pub fn managed_fields(&self) -> Option<&str> {
        self.managed_fields.as_deref()
    }

    /// An event whose object the backend has as text already. `json` must
    /// be `object` written out (`object.to_string()`), which debug builds
    /// check.
    pub(crate) fn with_json(event_type: WatchEventType, object: Value, json: Arc<str>) -> Self {
        debug_assert_eq!(*json, object.to_string(), "the text of another object");
        Self {
            event_type,
            object,
            json: Some(json),
            managed_fields: None,
        }
    }

    /// The object's text, if the backend had it.
    pub fn json(&self) -> Option<&Arc<str>> {
        self.json.as_ref()
    }
}

/// One object of a first list, held as JSON text until the engine takes
/// it: a first list holds every object of a kind at once, and text takes a
/// fraction of the memory of a parsed tree (a Pod: ~3 KiB against ~30 KiB).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedObject(Arc<str>);

impl ListedObject {
    pub fn new(object: &Value) -> Self {
        Self(object.to_string().into())
    }

    /// An object a backend keeps as text already. `json` must be a `Value`
    /// written out by serde_json, as [`Self::new`] writes it.
    pub(crate) fn from_json(json: Arc<str>) -> Self {
        Self(json)
    }

    /// The object as an Added event, keeping its text for the cache.
    pub fn into_event(self) -> WatchEvent {
        match serde_json::from_str(&self.0) {
            Ok(object) => WatchEvent::with_json(WatchEventType::Added, object, self.0),
            Err(_) => WatchEvent::new(WatchEventType::Added, Value::Null),
        }
    }

    /// The object, parsed; `Null` when its text cannot be read back (an
    /// object nested past serde_json's recursion limit), which the cache
    /// then skips with a warning like any object without a name. Never a
    /// panic: the object came from a cluster.
    pub fn value(&self) -> Value {
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }
}

/// A consistent list of a kind followed by every change after it: no event
/// between the list and the first watch event is lost.
pub struct WatchStream {
    pub initial: Vec<ListedObject>,
    pub events: UnboundedReceiver<WatchEvent>,
}

/// The annotation `kubectl apply` keeps a whole copy of the object in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Whether [`slimmed`] would leave the object as it is.
pub fn is_slim(object: &Value) -> bool {
    let Some(meta) = object.get("metadata").and_then(Value::as_object) else {
        return true;
    };
    !meta.contains_key("managedFields")
        && !meta
            .get("annotations")
            .and_then(Value::as_object)
            .is_some_and(|a| a.contains_key(LAST_APPLIED) || a.is_empty())
}

/// `object` without `metadata.managedFields` and kubectl's last-applied
/// annotation: together often larger than the rest of the object, and of no
/// use to a reconcile (the host never decides on another manager's intent).
/// Backends and caches drop them as early as they can.
pub fn slimmed(mut object: Value) -> Value {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
        if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            annotations.remove(LAST_APPLIED);
            if annotations.is_empty() {
                meta.remove("annotations");
            }
        }
    }
    object
}

/// Which part of a kind a watch covers.
///
/// Namespaces restrict what a host sees (and so what it needs RBAC for);
/// metadata-only watches keep only `apiVersion`, `kind` and `metadata` of
/// each object, for kinds every plugin reads only for their labels, names
/// and owners. Both cut the memory a cache holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchScope {
    /// Namespaces watched for namespaced kinds; empty means every namespace.
    /// Cluster-scoped kinds are always watched whole.
    pub namespaces: BTreeSet<String>,
    pub metadata_only: bool,
    /// Only objects whose labels match, selected by the API server (`run
    /// --sharding`: this replica's shard); `None`: every object.
    pub labels: Option<LabelSelector>,
    /// The most objects the first list may hold before the watch is given
    /// up with [`BackendError::OverBudget`] (the member's cache budget), so
    /// a kind too large to cache is never held whole; `None`: no bound.
    pub max_objects: Option<usize>,
}

impl WatchScope {
    /// Whether `object` falls in the scope's namespaces and labels.
    pub fn admits(&self, object: &Value) -> bool {
        self.admits_namespace(object.metadata_field("namespace").and_then(Value::as_str))
            && self.admits_labels(object)
    }

    /// Whether `object`'s labels match the scope's selector.
    pub fn admits_labels(&self, object: &Value) -> bool {
        self.labels
            .as_ref()
            .is_none_or(|selector| selector.matches_object(object))
    }

    /// Whether an object in `namespace` (`None`: cluster-scoped) falls in
    /// the scope.
    pub fn admits_namespace(&self, namespace: Option<&str>) -> bool {
        match namespace {
            Some(ns) => self.namespaces.is_empty() || self.namespaces.contains(ns),
            None => true,
        }
    }

    /// `object` as the scope delivers it.
    pub fn project(&self, object: Value) -> Value {
        if self.metadata_only {
            metadata_only(&object)
        } else {
            object
        }
    }
}

/// How deleting an owner treats its dependents (the API's propagationPolicy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Propagation {
    /// Delete the owner now; the garbage collector deletes dependents after.
    #[default]
    Background,
    /// Delete dependents first, then the owner.
    Foreground,
    /// Leave dependents in place, without the ownerReference.
    Orphan,
}

/// Whether objects of a kind live in a namespace, as the API server serves
/// it. A cluster-scoped object cannot have a namespaced owner (the garbage
/// collector treats such an owner as absent), so the engine refuses a
/// namespaced primary's plugin that owns or writes a cluster-scoped kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KindScope {
    Namespaced,
    Cluster,
}

/// An Event to record about an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRecord {
    pub regarding: ObjectKey,
    /// The uid of the object the event is about, when known.
    pub regarding_uid: Option<String>,
    pub event_type: EventType,
    pub reason: String,
    pub message: String,
    /// Who reports it: `reconciler-host/<plugin>`.
    pub reporting_controller: String,
}

/// An Event as the cluster stored it: where to count its repeats.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EventRef {
    pub namespace: String,
    pub name: String,
}

/// How often one Event happened, and when last: events.k8s.io's `series`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventSeries {
    /// Occurrences so far, the first included (2 or more).
    pub count: u32,
    pub last_observed_millis: i64,
}

/// Why a backend call failed. The engine retries transient failures with
/// backoff; the others are reported as they are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    #[error("{key} not found")]
    NotFound { key: String },
    #[error("conflict on {key}: {message}")]
    Conflict { key: String, message: String },
    #[error("{key} is invalid: {message}")]
    Invalid { key: String, message: String },
    #[error("forbidden: {message}")]
    Forbidden { message: String },
    #[error("the cluster does not serve {kind} (is its CustomResourceDefinition installed?)")]
    UnknownKind { kind: String },
    /// A create refused because the namespace is being deleted: nothing
    /// new can be made there, on a real API server or the embedded one.
    #[error(
        "{key}: namespace {namespace} is being terminated, no new objects can be created in it"
    )]
    NamespaceTerminating { key: String, namespace: String },
    #[error("transient error, will retry: {0}")]
    Transient(String),
    /// The first list of a kind holds more objects than the cache may.
    #[error(
        "{kind} has more than {max} objects, more than this cluster's cache may hold (--member-cache-max-objects)"
    )]
    OverBudget { kind: String, max: usize },
}

/// One label to set with [`ClusterBackend::set_label`], by a field manager,
/// on the version of the object it was decided from.
#[derive(Clone, Copy, Debug)]
pub struct LabelAt<'a> {
    pub name: &'a str,
    /// `None` takes the label off.
    pub value: Option<&'a str>,
    pub resource_version: &'a str,
    pub field_manager: &'a str,
}

/// What the engine needs from a cluster.
///
/// Apply is server-side apply: the fields a field manager sets are merged into
/// the object; fields it set before and stopped setting are removed; fields
/// other managers own are kept. An apply that changes nothing changes nothing
/// (no new resourceVersion, no watch event).
pub trait ClusterBackend: Send + Sync + 'static {
    /// Whether `kind` is namespaced or cluster-scoped.
    fn kind_scope(
        &self,
        kind: &KindRef,
    ) -> impl Future<Output = Result<KindScope, BackendError>> + Send;

    /// Lists a kind and watches it from that point on, within `scope`.
    fn watch(
        &self,
        kind: &KindRef,
        scope: &WatchScope,
    ) -> impl Future<Output = Result<WatchStream, BackendError>> + Send;

    /// A fresh read of one object.
    fn get(
        &self,
        key: &ObjectKey,
    ) -> impl Future<Output = Result<Option<Value>, BackendError>> + Send;

    /// Server-side apply of `object` by `field_manager`; `force` takes over
    /// fields other managers own. Returns the object as stored.
    fn apply(
        &self,
        object: Value,
        field_manager: &str,
        force: bool,
    ) -> impl Future<Output = Result<Value, BackendError>> + Send;

    /// Server-side apply of `.status` through the status subresource: the
    /// manager's status fields become exactly `status`. With
    /// `resource_version`, the write happens only if the object is still at
    /// that version (else `Conflict`): a status computed from one object never
    /// lands on a newer one, nor on a namesake created since (server-side
    /// apply ignores a `metadata.uid` in the body, so the version is the
    /// precondition the API offers).
    fn apply_status(
        &self,
        key: &ObjectKey,
        status: Value,
        field_manager: &str,
        resource_version: Option<&str>,
    ) -> impl Future<Output = Result<Value, BackendError>> + Send;

    /// Deletes an object. Deleting one that is already gone is not an error.
    /// An object with finalizers gets a deletionTimestamp and stays until
    /// they are all removed. With `uid`, only the object with that uid is
    /// deleted: one created under the same name since it was seen is left
    /// alone (as the one meant is gone, that is not an error either).
    fn delete(
        &self,
        key: &ObjectKey,
        propagation: Propagation,
        uid: Option<&str>,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Sets one label on the object, only if it exists and is still at
    /// the given resourceVersion: `NotFound` when it is gone, `Conflict`
    /// when it changed. Never creates it (as an apply would). Returns the
    /// object as stored.
    ///
    /// By default a read then an apply, for a cluster that holds its
    /// objects in this process (nothing changes between the two but what
    /// this process does); there, taking a label off lets go of the field
    /// manager's claim on it, which removes it unless another manager set
    /// it too.
    fn set_label(
        &self,
        key: &ObjectKey,
        label: LabelAt<'_>,
    ) -> impl Future<Output = Result<Value, BackendError>> + Send {
        async move {
            let current = self.get(key).await?.ok_or_else(|| BackendError::NotFound {
                key: key.to_string(),
            })?;
            let version = current
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str);
            if version != Some(label.resource_version) {
                return Err(BackendError::Conflict {
                    key: key.to_string(),
                    message: format!(
                        "at resourceVersion {}, not {}",
                        version.unwrap_or("(none)"),
                        label.resource_version
                    ),
                });
            }
            let mut metadata = serde_json::Map::new();
            metadata.insert("name".into(), key.name.clone().into());
            if let Some(namespace) = &key.namespace {
                metadata.insert("namespace".into(), namespace.clone().into());
            }
            let labels = match label.value {
                Some(value) => serde_json::json!({label.name: value}),
                None => serde_json::json!({}),
            };
            metadata.insert("labels".into(), labels);
            let object = serde_json::json!({
                "apiVersion": key.kind.api_version(),
                "kind": key.kind.kind,
                "metadata": metadata,
            });
            self.apply(object, label.field_manager, true).await
        }
    }

    /// Adds `finalizer` to the object if it is not there. Returns the object
    /// as stored afterwards.
    fn add_finalizer(
        &self,
        key: &ObjectKey,
        finalizer: &str,
    ) -> impl Future<Output = Result<Value, BackendError>> + Send;

    /// Removes `finalizer` from the object, and only that entry: another
    /// controller's finalizers are never touched.
    fn remove_finalizer(
        &self,
        key: &ObjectKey,
        finalizer: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Records a new Event; returns where it is stored.
    fn record_event(
        &self,
        event: EventRecord,
    ) -> impl Future<Output = Result<EventRef, BackendError>> + Send;

    /// Records that an Event recorded before happened again: its series
    /// becomes `series`. `NotFound` when the Event is gone (the API server
    /// expires Events after an hour by default).
    fn update_event_series(
        &self,
        event: &EventRef,
        series: EventSeries,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The cache keeps a backend's text only for objects `slimmed` leaves
    /// as they are, so the two must agree.
    #[test]
    fn is_slim_tells_exactly_the_objects_slimmed_leaves_alone() {
        let objects = [
            json!({"kind": "ConfigMap", "metadata": {"name": "a"}}),
            json!({"kind": "ConfigMap"}),
            json!({"kind": "ConfigMap", "metadata": {"name": "a", "managedFields": []}}),
            json!({"kind": "ConfigMap", "metadata": {"annotations": {}}}),
            json!({"kind": "ConfigMap", "metadata": {"annotations": {"x": "y"}}}),
            json!({"kind": "ConfigMap", "metadata": {"annotations": {LAST_APPLIED: "{}"}}}),
            json!({"kind": "ConfigMap", "metadata": {"annotations": {LAST_APPLIED: "{}", "x": "y"}}}),
            json!({"kind": "ConfigMap", "metadata": {"annotations": "not a map"}}),
        ];
        for object in objects {
            assert_eq!(
                is_slim(&object),
                slimmed(object.clone()) == object,
                "{object}"
            );
        }
    }
}
