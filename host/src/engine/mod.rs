//! The reconcile engine: turns plugin responses into cluster changes.
//!
//! The engine is cut along the data flow. Each stage is a module that owns
//! its state and is tested alone; [`Engine`] composes them, and is their
//! public face. In the order a change travels:
//!
//! 1. **trigger**: a watch event goes into the one cache
//!    ([`shared_cache`]) and, for each plugin it concerns
//!    ([`event_mapping`]), into that plugin's queue, at once or after the
//!    coalescing window (`trigger`); the watches themselves, one per
//!    kind, and the first list of each (`watches`);
//! 2. **queue**: per plugin, dedup, delays and one reconcile per object at
//!    a time ([`work_queue`]); across plugins, which reconcile runs next and
//!    which primaries this replica owns (`queues`);
//! 3. **dispatch**: every ready reconcile as its own task on the real clock
//!    ([`dispatch`]), its sandbox call taking an instance of the pool shared
//!    fairly between plugins ([`call_slots`], [`instance_share`]);
//! 4. **call**: the plugin called with its primary (`primary`) and
//!    children, on the worker or a blocking thread (`call`,
//!    [`call_placement`]);
//! 5. **validate**: the scope rule per response ([`scope_rules`]), and
//!    under sharding the primary's label on every child it owns;
//! 6. **plan**: from a response to the calls that realise it ([`plan`]);
//! 7. **apply**: in order, finalizer last (`apply`), failures naming what
//!    was done (`failure`);
//! 8. **status and Events**: the status written with the apply, Events
//!    aggregated and rate-limited per object ([`event_recorder`]); the
//!    outcome settled in the queue, requeued as asked within bounds
//!    ([`requeue`]) or backed off, and recorded ([`record`]).
//!
//! `reconcile` runs one reconcile through stages 4 to 8. Beside the flow:
//! - **plugin lifecycle**: a plugin added, replaced or removed
//!   (`plugin_lifecycle`), with its finalizer handed over between
//!   versions ([`finalizer_handover`]), each plugin's state kept in
//!   `controllers`;
//! - **shard selection**: which objects each replica watches
//!   ([`shard_selection`]) and the labels it writes (`shard_labelling`);
//! - **scope**: which namespaces and primaries a host serves ([`scope`]).
//!
//! What several stages read (the cluster, the cache, the plugins, the
//! Event recorder) is in `shared`; errors a plugin is refused with are in
//! `errors`.

mod apply;
mod call;
pub mod call_placement;
pub mod call_slots;
pub mod case_inputs;
pub mod cause;
mod controllers;
pub mod decision_notes;
pub mod dispatch;
mod errors;
pub mod event_mapping;
pub mod event_recorder;
mod failure;
pub mod field_diff;
pub mod finalizer_handover;
pub mod instance_share;
pub mod journal;
pub mod loop_watch;
pub mod plan;
mod plugin_lifecycle;
mod primary;
mod queues;
mod reconcile;
pub mod record;
pub mod requeue;
pub mod scope;
pub mod scope_rules;
pub mod shadow;
pub mod shadow_book;
pub mod shadow_job;
pub mod shadow_reads;
pub mod shadow_threads;
mod shard_labelling;
pub mod shard_selection;
mod shared;
pub mod shared_cache;
mod trigger;
mod watches;
pub mod work_queue;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use reconciler_contract::{ClusterInfo, KindRef};

use self::call::PluginCalls;
use self::call_slots::CallSlots;
pub use self::controllers::QueueStats;
pub use self::errors::EngineError;
use self::plugin_lifecycle::Lifecycle;
pub use self::queues::KeyFilter;
use self::queues::Queues;
use self::reconcile::Reconciler;
pub use self::record::{Change, Outcome, ReconcileRecord};
pub use self::scope::{PrimarySelectors, ServeScope};
use self::shadow::Shadow;
use self::shadow_book::{ShadowBook, ShadowOutcome};
use self::shadow_job::ShadowJob;
use self::shard_labelling::ShardLabelling;
use self::shard_selection::ShardSelection;
use self::shared::Shared;
use self::shared_cache::SharedCache;
use self::trigger::Trigger;
use self::watches::{Watches, Wiring};
use self::work_queue::PrimaryKey;
use crate::cluster::{Clock, ClusterBackend};
use crate::golden::recorder::CaseRecorder;
use crate::plugin::LoadedPlugin;
use crate::plugin::candidates::Candidates;
use crate::plugin::finalizer_report::FinalizerHold;
use crate::plugin::plugin_host::{PluginHost, Refused, Replaced};

/// What the engine remembers per object beside its cache, each count over
/// all plugins: all of it must go when the objects do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Remembered {
    /// Objects with the fingerprint of what was last applied to them.
    pub applied: usize,
    /// Primaries queued, in flight, or with failures or requeues counted.
    pub queued: usize,
    /// Event series, and objects with an Event rate limit.
    pub event_series: usize,
    pub event_limits: usize,
}

pub struct Engine<B: ClusterBackend> {
    shared: Shared<B>,
    watches: Watches,
    trigger: Trigger,
    queues: Queues,
    calls: PluginCalls,
    /// The shard label this replica selects its primaries and children
    /// by (`run --sharding`); `None`: every object is watched.
    shards: Option<ShardLabelling>,
}

impl<B: ClusterBackend> Engine<B> {
    /// An engine serving `plugins`: every kind they declare is watched (once
    /// per kind), the cache filled, and every existing primary queued.
    pub async fn new(
        backend: Arc<B>,
        clock: Arc<dyn Clock>,
        plugins: Vec<Arc<LoadedPlugin>>,
    ) -> Result<Self, EngineError> {
        let engine = Self::empty(backend, clock);
        for plugin in plugins {
            engine.add_plugin(plugin).await?;
        }
        Ok(engine)
    }

    /// An engine with no plugin yet, serving the whole cluster.
    pub fn empty(backend: Arc<B>, clock: Arc<dyn Clock>) -> Self {
        Self::scoped(backend, clock, ServeScope::default())
    }

    /// An engine with no plugin yet, serving `scope`.
    pub fn scoped(backend: Arc<B>, clock: Arc<dyn Clock>, scope: ServeScope) -> Self {
        Self {
            shared: Shared::new(backend, clock, scope),
            watches: Watches::default(),
            trigger: Trigger::default(),
            queues: Queues::default(),
            calls: PluginCalls::default(),
            shards: None,
        }
    }

    /// Reconciles only the primaries `owns` says yes to when they come up:
    /// the others are dropped from the queue (their watch events and cache
    /// still come in, so a key handed to this replica later is reconciled
    /// from a filled cache; see [`Self::queue_where`]).
    pub fn with_ownership(mut self, owns: KeyFilter) -> Self {
        self.queues.owns = Some(owns);
        self
    }

    /// Watches primaries and children by their shard label, asking the API
    /// server for this replica's buckets alone, and labels the primaries
    /// it reconciles and the children it applies (see `shard_selection`).
    /// Call [`Self::reselect`] when the buckets change.
    pub fn with_shard_selection(mut self, shards: ShardSelection) -> Self {
        self.shards = Some(ShardLabelling::new(shards));
        self
    }

    /// Tells the plugins they run in `cluster` (`local` unless given).
    pub fn with_cluster(mut self, cluster: ClusterInfo) -> Self {
        self.shared.cluster = Arc::new(cluster);
        self
    }

    /// The cluster this engine serves.
    pub fn cluster(&self) -> &ClusterInfo {
        &self.shared.cluster
    }

    /// Records every reconcile from now on as a golden case.
    pub fn with_recorder(mut self, recorder: Arc<CaseRecorder>) -> Self {
        self.calls.recorder = Some(recorder);
        self
    }

    /// Reconciles a primary `window` after a change of one of its children
    /// or read objects rather than at once, so a burst of such changes is
    /// one reconcile and one status write. Changes of the primary itself
    /// are never delayed. Zero (the default, and what `simulate` and `test`
    /// use) reconciles on every change at once.
    pub fn with_coalescing(mut self, window: Duration) -> Self {
        self.trigger = Trigger::new(window);
        self
    }

    /// Runs at most `instances` sandbox calls at once across all plugins,
    /// sharing them fairly: the sandbox's pool (see [`call_slots`]).
    pub fn with_instance_pool(mut self, instances: usize) -> Self {
        self.calls.slots = CallSlots::new(instances);
        self
    }

    /// Caches at most `max_objects` of this engine's cluster (see
    /// [`SharedCache::with_budget`]); before any plugin is added.
    pub fn with_cache_budget(mut self, max_objects: usize) -> Self {
        debug_assert!(
            self.shared.cache.is_empty(),
            "a budget is set before anything is cached"
        );
        self.shared.cache = Arc::new(SharedCache::with_budget(max_objects));
        self
    }

    fn wiring(&self) -> Wiring<'_, B> {
        Wiring {
            shared: &self.shared,
            watches: &self.watches,
            trigger: &self.trigger,
            shards: self.shards.as_ref(),
        }
    }

    fn lifecycle(&self) -> Lifecycle<'_, B> {
        Lifecycle {
            wiring: self.wiring(),
        }
    }

    /// Starts serving a new plugin: checks its name and primary kind are
    /// free, watches its kinds, and queues its existing primaries (see
    /// `plugin_lifecycle`).
    pub async fn add_plugin(&self, plugin: Arc<LoadedPlugin>) -> Result<(), EngineError> {
        self.lifecycle().add(plugin).await
    }

    /// Swaps in a new version of a plugin of the same name, between
    /// reconciles, handing over the old one's finalizer when the new one
    /// declares another or none (see [`finalizer_handover`]).
    pub async fn replace_plugin(&self, plugin: Arc<LoadedPlugin>) -> Result<Replaced, EngineError> {
        self.lifecycle().replace(plugin).await
    }

    /// The objects still carrying a finalizer plugin `name` answers for (its
    /// own and superseded ones), each with what releases it: what to tell a
    /// user about before the plugin is removed.
    pub fn finalizer_holds(&self, name: &str) -> Vec<FinalizerHold> {
        plugin_lifecycle::finalizer_holds(&self.shared, name)
    }

    /// Stops serving a plugin. Its queue is dropped; reconciles already
    /// running finish. Nothing is deleted and no finalizer is removed: its
    /// objects stay as they are until a plugin serves them again (see
    /// [`Self::finalizer_holds`] for telling the user which ones wait).
    pub fn remove_plugin(&self, name: &str) -> Option<Arc<LoadedPlugin>> {
        plugin_lifecycle::remove(&self.shared, name)
    }

    /// Watches again, with the buckets this replica owns now, every kind
    /// selected by the shard label (see `watches`); cheap to call after
    /// every ring change, and retries what failed before.
    pub async fn reselect(&self) -> Result<(), EngineError> {
        self.wiring().reselect().await
    }

    /// Kinds watched so far, and whether as metadata only.
    pub fn watched_kinds(&self) -> BTreeMap<KindRef, bool> {
        self.watches.watched_kinds()
    }

    pub fn cache(&self) -> &Arc<SharedCache> {
        &self.shared.cache
    }

    pub fn backend(&self) -> &Arc<B> {
        &self.shared.backend
    }

    /// The plugins served now, by name.
    pub fn plugins(&self) -> Vec<Arc<LoadedPlugin>> {
        self.shared.controllers.plugins()
    }

    /// Takes every watch event delivered so far into the cache and the
    /// queues; returns how many there were.
    pub fn pump(&self) -> usize {
        for plugin in self.shared.new_candidates() {
            queues::queue_all(&self.shared, &plugin, cause::Cause::Candidate);
        }
        let now = self.shared.now();
        let events = self.watches.drain(&self.shared.cache);
        self.trigger.take_events(&self.shared, &events, now);
        events.len()
    }

    /// Resolves as soon as a watch event is waiting for [`Self::pump`] (at
    /// once if one already is), or a watch was added: what wakes a loop
    /// the moment there is something to do, instead of it looking every so
    /// often. Cancel-safe.
    pub async fn watch_events(&self) {
        self.watches.wait().await
    }

    /// The next object ready to reconcile, marked in flight: the earliest
    /// ready across plugins, among plugins below their concurrency. Only
    /// its sandbox call waits for the instance pool (see [`call_slots`]).
    pub fn next_ready(&self) -> Option<(String, PrimaryKey)> {
        self.queues.next_ready(&self.shared, self.shards.as_ref())
    }

    /// Queues now, because of `cause`, every cached primary, of every
    /// plugin, that `pick` says yes to; returns how many (distinct per
    /// plugin).
    pub fn queue_where(&self, pick: impl Fn(&PrimaryKey) -> bool, cause: cause::Cause) -> usize {
        queues::queue_where(&self.shared, pick, cause)
    }

    /// How many cached primaries, over every plugin, `pick` says yes to.
    pub fn count_where(&self, pick: impl Fn(&PrimaryKey) -> bool) -> usize {
        queues::count_where(&self.shared, pick)
    }

    /// The primaries being reconciled now, over every plugin.
    pub fn in_flight_keys(&self) -> Vec<PrimaryKey> {
        self.shared.controllers.in_flight_keys()
    }

    /// When the next delayed reconcile becomes ready, if any is waiting.
    pub fn next_wakeup(&self) -> Option<i64> {
        self.shared.controllers.next_wakeup()
    }

    /// Each plugin's queue as metrics see it.
    pub fn queue_stats(&self) -> Vec<QueueStats> {
        self.shared.controllers.stats()
    }

    /// Writes the counts of repeated Events the cluster shows behind (see
    /// [`event_recorder`]): those due for a refresh, or all with `all`.
    /// Returns how many were written.
    pub async fn flush_events(&self, all: bool) -> usize {
        let now = self.shared.now();
        self.shared
            .events
            .flush(&*self.shared.backend, now, all)
            .await
    }

    /// What the engine remembers per object now (see [`Remembered`]).
    pub fn remembered(&self) -> Remembered {
        let (event_series, event_limits) = self.shared.events.remembered();
        let (applied, queued) = self.shared.controllers.remembered();
        Remembered {
            applied,
            queued,
            event_series,
            event_limits,
        }
    }

    /// Reconciles currently running.
    pub fn in_flight(&self) -> usize {
        self.shared.controllers.in_flight()
    }

    fn reconciler(&self) -> Reconciler<'_, B> {
        Reconciler {
            shared: &self.shared,
            queues: &self.queues,
            calls: &self.calls,
            shards: self.shards.as_ref(),
        }
    }

    /// Runs one reconcile of `key` for `plugin` (taken from
    /// [`Self::next_ready`]) and does its queue bookkeeping, whatever
    /// happens (see `reconcile`); then its shadow, when the plugin has a
    /// candidate.
    pub async fn reconcile(&self, plugin: &str, key: PrimaryKey) -> ReconcileRecord {
        let (record, shadow) = self.reconcile_before_shadow(plugin, key).await;
        if let Some(job) = shadow {
            self.shadow(job).await;
        }
        record
    }

    /// As [`Self::reconcile`], leaving the shadow to the caller: to be run
    /// with [`Self::shadow`] once the record is out, so a reconcile's
    /// measured time and its waiters never include its shadow's.
    pub async fn reconcile_before_shadow(
        &self,
        plugin: &str,
        key: PrimaryKey,
    ) -> (ReconcileRecord, Option<ShadowJob>) {
        let (record, shadow) = self.reconciler().reconcile(plugin, key).await;
        if shadow.is_some() {
            self.shared.shadow.owe();
        }
        (record, shadow)
    }

    /// Runs a reconcile's shadow (see [`shadow`]); a panic of the host in
    /// it is logged, and touches nothing of the serving reconcile.
    pub async fn shadow(&self, job: ShadowJob) -> Option<ShadowOutcome> {
        let shadow = Shadow {
            reconciler: self.reconciler(),
            wiring: self.wiring(),
        };
        // Paid however the run ends: finished, panicked, or aborted with
        // its dispatcher's abandoned reconciles.
        let _paid = self.shared.shadow.owed_run();
        let ran = crate::support::panic_guard::catch_panic(shadow.run(job)).await;
        match ran {
            Ok(outcome) => Some(outcome),
            Err(panic) => {
                tracing::error!(
                    "the host panicked in a shadow reconcile ({panic}): this is a bug of reconciler-host, please report it"
                );
                None
            }
        }
    }

    /// Runs candidates beside their plugins as `candidates` says (the
    /// plugins directory's decision), recording into `book`.
    pub fn with_shadow(mut self, candidates: Arc<Candidates>, book: Arc<ShadowBook>) -> Self {
        self.shared.candidates = candidates;
        self.shared.shadow = book;
        self
    }

    /// Files every reconcile in `journal` (the process's one).
    pub fn with_journal(mut self, journal: Arc<journal::Journal>) -> Self {
        self.shared.journal = journal;
        self
    }

    /// Whether [`Self::relabel_strays`] has anything to do.
    pub fn has_strays(&self) -> bool {
        self.shards.as_ref().is_some_and(ShardLabelling::has_strays)
    }

    /// Gives every stray primary (one that reached this replica under one
    /// of its buckets but belongs to another's) its own shard label, so the
    /// API server sends it to its owner (see `shard_labelling`).
    pub async fn relabel_strays(&self) {
        if let Some(shards) = &self.shards {
            shards
                .relabel_strays(&*self.shared.backend, &self.shared.cache)
                .await;
        }
    }
}

/// The engine as the plugins directory sees it.
impl<B: ClusterBackend> PluginHost for Engine<B> {
    async fn add_plugin(&self, plugin: Arc<LoadedPlugin>) -> Result<(), Refused> {
        Ok(Engine::add_plugin(self, plugin).await?)
    }
    async fn replace_plugin(&self, plugin: Arc<LoadedPlugin>) -> Result<Replaced, Refused> {
        Ok(Engine::replace_plugin(self, plugin).await?)
    }
    fn remove_plugin(&self, name: &str) -> Option<Arc<LoadedPlugin>> {
        Engine::remove_plugin(self, name)
    }
    fn finalizer_holds(&self, name: &str) -> Vec<FinalizerHold> {
        Engine::finalizer_holds(self, name)
    }
}
