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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use reconciler_contract::ClusterInfo;

use super::controllers::Controllers;
use super::event_recorder::EventRecorder;
use super::journal::Journal;
use super::scope::ServeScope;
use super::scope_rules::KindScopes;
use super::shadow_book::ShadowBook;
use super::shared_cache::SharedCache;
use crate::cluster::{BackendError, Clock, ClusterBackend, EventRecord};
use crate::plugin::candidates::Candidates;

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
    /// The candidates running in shadow beside their plugins, as the
    /// plugins directory decides them.
    pub candidates: Arc<Candidates>,
    /// What shadow runs found; one book for every engine of the process.
    pub shadow: Arc<ShadowBook>,
    /// The last reconciles of each primary (`explain`); one journal for
    /// every engine of the process.
    pub journal: Arc<Journal>,
    /// Candidate versions (by content hash) whose kinds are watched.
    candidate_kinds: Mutex<BTreeSet<String>>,
    /// The candidates' generation and versions this engine last acted on;
    /// the generation alone too, read on every pump without the lock.
    candidates_seen: Mutex<(u64, BTreeMap<String, String>)>,
    candidates_generation: AtomicU64,
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
            candidates: Candidates::new(),
            shadow: Arc::new(ShadowBook::default()),
            journal: Arc::new(Journal::default()),
            candidate_kinds: Mutex::default(),
            candidates_seen: Mutex::default(),
            candidates_generation: AtomicU64::new(0),
        }
    }

    /// The plugins whose candidate is new since the last call (a new
    /// candidate, or a new version of one): each of their primaries is to
    /// be reconciled once, so the candidate is compared on every object
    /// without waiting for changes.
    pub fn new_candidates(&self) -> Vec<String> {
        let generation = self.candidates.generation();
        if self.candidates_generation.load(Ordering::Relaxed) == generation {
            return Vec::new();
        }
        let mut seen = self
            .candidates_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if seen.0 == generation {
            return Vec::new();
        }
        let versions = self.candidates.versions();
        let fresh = versions
            .iter()
            .filter(|(name, sha)| seen.1.get(*name) != Some(*sha))
            .map(|(name, _)| name.clone())
            .collect();
        *seen = (generation, versions);
        self.candidates_generation
            .store(generation, Ordering::Relaxed);
        fresh
    }

    /// The candidate running in shadow beside plugin `name`, if any.
    pub fn candidate_of(&self, name: &str) -> Option<Arc<crate::plugin::LoadedPlugin>> {
        self.candidates.of(name)
    }

    /// Whether the kinds of the candidate `sha256` are watched already.
    pub fn candidate_kinds_watched(&self, sha256: &str) -> bool {
        self.candidate_kinds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(sha256)
    }

    pub fn mark_candidate_kinds_watched(&self, sha256: &str) {
        self.candidate_kinds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(sha256.to_string());
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
