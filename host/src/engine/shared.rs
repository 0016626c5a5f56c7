//! What the stages of an engine share: the cluster (its backend, the clock
//! and its identity as plugins see it), the one cache, the part of the
//! cluster served, the plugins served, the kind scopes learned when they
//! were loaded, and the Event recorder.
//!
//! Each stage owns its own state (the watches, the trigger's window, the
//! queues' policies, the call slots, the shard labelling) and is handed
//! this for the rest, so no stage reaches into the [`Engine`](super::Engine)
//! that composes them, and each can be read, and tested, with only what it
//! touches.

use std::sync::Arc;

use reconciler_contract::ClusterInfo;

use super::controllers::Controllers;
use super::event_recorder::EventRecorder;
use super::scope::ServeScope;
use super::scope_rules::KindScopes;
use super::shared_cache::SharedCache;
use crate::cluster::{BackendError, Clock, ClusterBackend, EventRecord};

pub struct Shared<B: ClusterBackend> {
    pub backend: Arc<B>,
    pub clock: Arc<dyn Clock>,
    /// The cluster this engine serves, as its plugins see it.
    pub cluster: Arc<ClusterInfo>,
    pub cache: Arc<SharedCache>,
    pub scope: ServeScope,
    /// By plugin name.
    pub controllers: Controllers,
    /// The scope of every kind a plugin owns or writes, learned at load.
    pub kind_scopes: KindScopes,
    pub events: EventRecorder,
}

impl<B: ClusterBackend> Shared<B> {
    pub fn new(backend: Arc<B>, clock: Arc<dyn Clock>, scope: ServeScope) -> Self {
        Self {
            backend,
            clock,
            cluster: Arc::new(ClusterInfo::local()),
            cache: Arc::new(SharedCache::new()),
            scope,
            controllers: Controllers::default(),
            kind_scopes: KindScopes::default(),
            events: EventRecorder::default(),
        }
    }

    pub fn now(&self) -> i64 {
        self.clock.now_millis()
    }

    /// Records an Event through the recorder, like every Event the host
    /// makes (aggregated, rate-limited per object).
    pub async fn record_event(&self, record: EventRecord) -> Result<(), BackendError> {
        let now = self.now();
        self.events.record(&*self.backend, record, now).await?;
        Ok(())
    }
}
