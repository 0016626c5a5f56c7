//! The embedded cluster with a hook before every call: how a test makes a
//! cluster misbehave in one way (a kind not served yet, writes that go
//! unanswered, a host bug reached by data) and behave in every other.

use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::cluster::{
    BackendError, ClusterBackend, EventRecord, EventRef, EventSeries, KindScope, ObjectKey,
    Propagation, WatchScope, WatchStream,
};
use reconciler_sdk::KindRef;
use serde_json::Value;

/// The call about to reach the cluster.
#[derive(Debug)]
pub enum Call<'a> {
    KindScope(&'a KindRef),
    Watch(&'a KindRef),
    Get(&'a ObjectKey),
    Apply(&'a Value),
    ApplyStatus(&'a ObjectKey),
    Delete(&'a ObjectKey),
    AddFinalizer(&'a ObjectKey),
    RemoveFinalizer(&'a ObjectKey),
    RecordEvent,
    UpdateEventSeries,
}

impl Call<'_> {
    /// Whether it writes (or, for `Get`, reads one object fresh): what an
    /// API server that stopped answering fails, while the watches the
    /// host already holds stay open.
    pub fn is_request(&self) -> bool {
        !matches!(self, Call::KindScope(_) | Call::Watch(_))
    }
}

/// A hook a test can name in types (`Engine<Intercepted<Hook>>`).
pub type Hook = Box<dyn Fn(Call<'_>) -> Result<(), BackendError> + Send + Sync>;

/// `cluster`, with `hook` asked before every call: an `Err` is the call's
/// answer instead of the cluster's.
pub struct Intercepted<F> {
    pub cluster: EmbeddedCluster,
    hook: F,
}

impl<F> Intercepted<F>
where
    F: Fn(Call<'_>) -> Result<(), BackendError> + Send + Sync + 'static,
{
    pub fn new(cluster: EmbeddedCluster, hook: F) -> Self {
        Self { cluster, hook }
    }
}

impl<F> ClusterBackend for Intercepted<F>
where
    F: Fn(Call<'_>) -> Result<(), BackendError> + Send + Sync + 'static,
{
    async fn kind_scope(&self, kind: &KindRef) -> Result<KindScope, BackendError> {
        (self.hook)(Call::KindScope(kind))?;
        self.cluster.kind_scope(kind).await
    }
    async fn watch(&self, kind: &KindRef, scope: &WatchScope) -> Result<WatchStream, BackendError> {
        (self.hook)(Call::Watch(kind))?;
        self.cluster.watch(kind, scope).await
    }
    async fn get(&self, key: &ObjectKey) -> Result<Option<Value>, BackendError> {
        (self.hook)(Call::Get(key))?;
        self.cluster.get(key).await
    }
    async fn apply(
        &self,
        object: Value,
        manager: &str,
        force: bool,
    ) -> Result<Value, BackendError> {
        (self.hook)(Call::Apply(&object))?;
        self.cluster.apply(object, manager, force).await
    }
    async fn apply_status(
        &self,
        key: &ObjectKey,
        status: Value,
        manager: &str,
        resource_version: Option<&str>,
    ) -> Result<Value, BackendError> {
        (self.hook)(Call::ApplyStatus(key))?;
        self.cluster
            .apply_status(key, status, manager, resource_version)
            .await
    }
    async fn delete(
        &self,
        key: &ObjectKey,
        propagation: Propagation,
        uid: Option<&str>,
    ) -> Result<(), BackendError> {
        (self.hook)(Call::Delete(key))?;
        self.cluster.delete(key, propagation, uid).await
    }
    async fn add_finalizer(&self, key: &ObjectKey, finalizer: &str) -> Result<Value, BackendError> {
        (self.hook)(Call::AddFinalizer(key))?;
        self.cluster.add_finalizer(key, finalizer).await
    }
    async fn remove_finalizer(&self, key: &ObjectKey, finalizer: &str) -> Result<(), BackendError> {
        (self.hook)(Call::RemoveFinalizer(key))?;
        self.cluster.remove_finalizer(key, finalizer).await
    }
    async fn record_event(&self, event: EventRecord) -> Result<EventRef, BackendError> {
        (self.hook)(Call::RecordEvent)?;
        self.cluster.record_event(event).await
    }
    async fn update_event_series(
        &self,
        event: &EventRef,
        series: EventSeries,
    ) -> Result<(), BackendError> {
        (self.hook)(Call::UpdateEventSeries)?;
        self.cluster.update_event_series(event, series).await
    }
}
