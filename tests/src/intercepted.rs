//! The embedded cluster with a hook before every call: how a test makes a
//! cluster misbehave in one way (a kind not served yet, writes that go
//! unanswered, a host bug reached by data) and behave in every other.

use std::sync::Arc;

use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::cluster::{
    BackendError, ClusterBackend, EventRecord, EventRef, EventSeries, KindScope, ObjectKey,
    Propagation, WatchScope, WatchStream,
};
use reconciler_sdk::KindRef;
use serde_json::Value;
use tokio::sync::watch;

/// The call about to reach the cluster.
#[derive(Debug)]
pub enum Call<'a> {
    KindScope(&'a KindRef),
    Watch(&'a KindRef, &'a WatchScope),
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
        !matches!(self, Call::KindScope(_) | Call::Watch(..))
    }

    /// Whether it changes something in the cluster.
    pub fn is_write(&self) -> bool {
        !matches!(self, Call::KindScope(_) | Call::Watch(..) | Call::Get(_))
    }
}

/// A hook a test can name in types (`Engine<Intercepted<Hook>>`).
pub type Hook = Box<dyn Fn(Call<'_>) -> Result<(), BackendError> + Send + Sync>;

/// `cluster`, with `hook` asked before every call: an `Err` is the call's
/// answer instead of the cluster's.
pub struct Intercepted<F> {
    pub cluster: Arc<EmbeddedCluster>,
    hook: F,
    /// While it reads true, every request waits (see [`Self::holding`]).
    held: Option<watch::Receiver<bool>>,
    /// While it reads true, every watch waits, after its hook (see
    /// [`Self::holding_watches`]).
    watches_held: Option<watch::Receiver<bool>>,
}

impl<F> Intercepted<F>
where
    F: Fn(Call<'_>) -> Result<(), BackendError> + Send + Sync + 'static,
{
    pub fn new(cluster: EmbeddedCluster, hook: F) -> Self {
        Self::sharing(Arc::new(cluster), hook)
    }

    /// A view of `cluster` another backend may share: two members' engines
    /// on the same objects.
    pub fn sharing(cluster: Arc<EmbeddedCluster>, hook: F) -> Self {
        Self {
            cluster,
            hook,
            held: None,
            watches_held: None,
        }
    }

    /// Every write ([`Call::is_write`]) waits, before its hook, while
    /// `held` reads true: a write in flight for as long as a test wants,
    /// which an abort ends at its await as it would a request to a slow
    /// API server.
    pub fn holding(mut self, held: watch::Receiver<bool>) -> Self {
        self.held = Some(held);
        self
    }

    /// Every watch, once its hook has seen it, waits while `held` reads
    /// true: a list that takes as long as a test wants, so that something
    /// else can happen while a kind is being watched.
    pub fn holding_watches(mut self, held: watch::Receiver<bool>) -> Self {
        self.watches_held = Some(held);
        self
    }

    async fn ask(&self, call: Call<'_>) -> Result<(), BackendError> {
        if let Some(held) = &self.held
            && call.is_write()
        {
            let _ = held.clone().wait_for(|held| !held).await;
        }
        (self.hook)(call)
    }
}

impl<F> ClusterBackend for Intercepted<F>
where
    F: Fn(Call<'_>) -> Result<(), BackendError> + Send + Sync + 'static,
{
    async fn kind_scope(&self, kind: &KindRef) -> Result<KindScope, BackendError> {
        self.ask(Call::KindScope(kind)).await?;
        self.cluster.kind_scope(kind).await
    }
    async fn watch(&self, kind: &KindRef, scope: &WatchScope) -> Result<WatchStream, BackendError> {
        self.ask(Call::Watch(kind, scope)).await?;
        if let Some(held) = &self.watches_held {
            let _ = held.clone().wait_for(|held| !held).await;
        }
        self.cluster.watch(kind, scope).await
    }
    async fn get(&self, key: &ObjectKey) -> Result<Option<Value>, BackendError> {
        self.ask(Call::Get(key)).await?;
        self.cluster.get(key).await
    }
    async fn apply(
        &self,
        object: Value,
        manager: &str,
        force: bool,
    ) -> Result<Value, BackendError> {
        self.ask(Call::Apply(&object)).await?;
        self.cluster.apply(object, manager, force).await
    }
    async fn apply_status(
        &self,
        key: &ObjectKey,
        status: Value,
        manager: &str,
        resource_version: Option<&str>,
    ) -> Result<Value, BackendError> {
        self.ask(Call::ApplyStatus(key)).await?;
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
        self.ask(Call::Delete(key)).await?;
        self.cluster.delete(key, propagation, uid).await
    }
    async fn add_finalizer(&self, key: &ObjectKey, finalizer: &str) -> Result<Value, BackendError> {
        self.ask(Call::AddFinalizer(key)).await?;
        self.cluster.add_finalizer(key, finalizer).await
    }
    async fn remove_finalizer(&self, key: &ObjectKey, finalizer: &str) -> Result<(), BackendError> {
        self.ask(Call::RemoveFinalizer(key)).await?;
        self.cluster.remove_finalizer(key, finalizer).await
    }
    async fn record_event(&self, event: EventRecord) -> Result<EventRef, BackendError> {
        self.ask(Call::RecordEvent).await?;
        self.cluster.record_event(event).await
    }
    async fn update_event_series(
        &self,
        event: &EventRef,
        series: EventSeries,
    ) -> Result<(), BackendError> {
        self.ask(Call::UpdateEventSeries).await?;
        self.cluster.update_event_series(event, series).await
    }
}
