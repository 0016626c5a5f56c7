//! The interface between the engine and a cluster.
//!
//! It is deliberately narrow: everything the engine does to a cluster is one
//! of these calls, so the embedded cluster and the Kubernetes API can serve
//! the same engine, and each can be tested alone. Objects are JSON
//! (`serde_json::Value`) as the API server speaks them.

use std::fmt;
use std::future::Future;

use reconciler_sdk::{EventType, KindRef};
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
        let name = object.pointer("/metadata/name")?.as_str()?;
        let namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str);
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
}

/// A consistent list of a kind followed by every change after it: no event
/// between the list and the first watch event is lost.
pub struct WatchStream {
    pub initial: Vec<Value>,
    pub events: UnboundedReceiver<WatchEvent>,
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
    #[error("the cluster does not serve {kind}")]
    UnknownKind { kind: String },
    #[error("transient error, will retry: {0}")]
    Transient(String),
}

/// What the engine needs from a cluster.
///
/// Apply is server-side apply: the fields a field manager sets are merged into
/// the object; fields it set before and stopped setting are removed; fields
/// other managers own are kept. An apply that changes nothing changes nothing
/// (no new resourceVersion, no watch event).
pub trait ClusterBackend: Send + Sync + 'static {
    /// Lists a kind and watches it from that point on.
    fn watch(
        &self,
        kind: &KindRef,
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
    /// manager's status fields become exactly `status`.
    fn apply_status(
        &self,
        key: &ObjectKey,
        status: Value,
        field_manager: &str,
    ) -> impl Future<Output = Result<Value, BackendError>> + Send;

    /// Deletes an object. Deleting one that is already gone is not an error.
    /// An object with finalizers gets a deletionTimestamp and stays until
    /// they are all removed.
    fn delete(
        &self,
        key: &ObjectKey,
        propagation: Propagation,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Adds `finalizer` to the object if it is not there.
    fn add_finalizer(
        &self,
        key: &ObjectKey,
        finalizer: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Removes `finalizer` from the object, and only that entry: another
    /// controller's finalizers are never touched.
    fn remove_finalizer(
        &self,
        key: &ObjectKey,
        finalizer: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Records an Event.
    fn record_event(
        &self,
        event: EventRecord,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
}
