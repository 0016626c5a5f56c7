//! The reconcile engine: turns plugin responses into cluster changes.
//!
//! Built from small parts, each tested alone: [`shared_cache`] (one cache
//! for all plugins), [`work_queue`] (per plugin: dedup, delays, backoff, one
//! reconcile per object at a time), [`event_mapping`] (which primary a change
//! concerns), [`plan`] (from a response to the calls that realise it). This
//! module wires them to a [`ClusterBackend`] and a plugin runtime.
//!
//! One reconcile, as [`Engine::reconcile`] runs it:
//! 1. read the primary from the cache (gone: forget it);
//! 2. add the plugin's finalizer if it declares one and it is missing;
//! 3. call the plugin in a fresh sandbox with the primary and its children;
//! 4. plan: ownerReferences, no-op skips, pruning, status diff, finalizer;
//! 5. apply in order (objects, deletions, status, events, finalizer last),
//!    so a failure midway never releases the finalizer early;
//! 6. requeue: after the requested delay ([`requeue`] bounds it both
//!    ways); on any failure (a panic of the host included, [`panic_guard`]),
//!    an Event on the primary and exponential backoff, and the next attempt
//!    starts again from the cache, never from the half-done state.
//!
//! Events go through [`event_recorder`] (aggregated, rate-limited per
//! object). A plugin has up to its concurrency of reconciles in flight;
//! only their sandbox calls take an instance from the pool, shared fairly
//! between plugins ([`call_slots`], [`instance_share`]).

pub mod call_placement;
pub mod call_slots;
pub mod dispatch;
pub mod event_mapping;
pub mod event_recorder;
pub mod finalizer_handover;
pub mod instance_share;
pub mod plan;
pub mod record;
pub mod requeue;
pub mod scope;
pub mod scope_rules;
pub mod shard_selection;
pub mod shared_cache;
pub mod work_queue;

use reconciler_contract::object_meta::MetadataField;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use reconciler_contract::memory_cache::{is_deleting, resource_version_of};
use reconciler_contract::selector::LabelSelector;
use reconciler_contract::{ClusterInfo, EventType, KindRef, PluginMetadata};
use reconciler_contract::{Projection, ReconcileRequest};
use serde_json::Value;
use tokio::sync::Notify;
use tokio::sync::mpsc::UnboundedReceiver;
use tracing::Instrument;

use self::call_placement::{CallPlacement, Placed};
use self::call_slots::CallSlots;
use self::event_recorder::EventRecorder;
use self::finalizer_handover::{Handover, handover_event};
use self::plan::{DeleteReason, Observed, has_finalizer};
pub use self::record::{Change, Outcome, ReconcileRecord};
use self::requeue::{Requeue, RequeuePolicy, at};
pub use self::scope::{PrimarySelectors, ServeScope};
use self::shard_selection::ShardSelection;
use self::shared_cache::SharedCache;
use self::work_queue::{BackoffPolicy, PrimaryKey, WorkQueue};
use crate::cluster::{
    BackendError, Clock, ClusterBackend, EventRecord, KindScope, ListedObject, ObjectKey,
    Propagation, WatchEvent, WatchEventType, WatchScope,
};
use crate::golden::recorder::{CaseRecorder, Recording, RecordingReader};
use crate::plugin::directory::twin_of;
use crate::plugin::finalizer_report::{FinalizerHandover, FinalizerHold};
use crate::plugin::plugin_host::{PluginHost, Refusal, Refused, Replaced};
use crate::plugin::{
    LoadFailure, LoadedPlugin, ObjectReader, ReconcileInput, ValidResponse, WriteRole,
};
use crate::support::panic_guard::catch_panic;

/// Why an engine cannot start.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Another plugin has its name, or reconciles its primary kind in any
    /// version: two plugins would see the same objects and children (one
    /// CRD serving both versions), each pruning what the other applies.
    /// The words of [`twin_of`], which every plugin set applies.
    #[error(transparent)]
    Taken(LoadFailure),
    #[error("no plugin named {0} is loaded")]
    NotLoaded(String),
    #[error("cannot watch {kind}: {source}")]
    Watch { kind: String, source: BackendError },
    /// See [`scope_rules`].
    #[error(
        "plugin {plugin} reconciles a namespaced kind ({primary}) but {field} declares {kind}, which is cluster-scoped: a cluster-scoped object cannot be owned by or confined to a namespaced one; remove it from {list}, or reconcile it from a plugin whose primary kind is cluster-scoped"
    )]
    ClusterScopedFromNamespaced {
        plugin: String,
        primary: String,
        /// The declaration, e.g. `owns[1]`.
        field: String,
        /// `owns` or `writes`.
        list: &'static str,
        kind: String,
    },
}

struct Controller {
    /// Swapped whole on reload; a reconcile holds the version it started with.
    plugin: RwLock<Arc<LoadedPlugin>>,
    state: Mutex<ControllerState>,
    /// Whether its calls run on the worker or a blocking thread.
    placement: CallPlacement,
}

#[derive(Default)]
struct ControllerState {
    queue: WorkQueue,
    /// Fingerprints of what this host last applied, per object that
    /// exists (see [`Engine::forget_objects`]).
    last_applied: HashMap<ObjectKey, u64>,
    /// Finalizers of earlier versions that this plugin now answers for:
    /// removed with its own when it reports `finalized` (see
    /// [`finalizer_handover`]). Never holds the current version's.
    superseded_finalizers: BTreeSet<String>,
}

impl Controller {
    fn plugin(&self) -> Arc<LoadedPlugin> {
        self.plugin
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn state(&self) -> MutexGuard<'_, ControllerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reconciles in flight at once, API round trips included: from the
    /// plugin's hint, within the host's maximum (`limits`).
    fn concurrency(&self) -> usize {
        self.plugin().limits().concurrency
    }
}

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

/// One plugin's work queue at a moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueStats {
    pub plugin: String,
    /// Objects waiting (now or later), not counting those in flight.
    pub depth: usize,
    pub in_flight: usize,
    pub concurrency: usize,
}

pub struct Engine<B: ClusterBackend> {
    backend: Arc<B>,
    clock: Arc<dyn Clock>,
    cache: Arc<SharedCache>,
    /// By plugin name.
    controllers: RwLock<BTreeMap<String, Arc<Controller>>>,
    /// Kinds watched, and whether as metadata only.
    watched: Mutex<BTreeMap<KindRef, bool>>,
    watches: Mutex<Vec<(KindRef, UnboundedReceiver<WatchEvent>)>>,
    /// Events taken off the watches while waiting for one (see
    /// [`Self::watch_events`]), ahead of those still in the channels.
    arrived: Mutex<Vec<WatchEvent>>,
    /// Told when a watch is added or replaced, so a wait includes it.
    watches_changed: Notify,
    backoff: BackoffPolicy,
    requeue: RequeuePolicy,
    events: EventRecorder,
    /// The sandbox's instance pool: calls at once, shared by all plugins.
    calls: Arc<CallSlots>,
    /// How long a change of a child or read object waits for others before
    /// its primary is reconciled (see [`Self::with_coalescing`]).
    coalesce: Duration,
    scope: ServeScope,
    /// Writes every reconcile as a golden case (`--record`).
    recorder: Option<Arc<CaseRecorder>>,
    /// The scope of every kind a plugin owns or writes, learned at load.
    kind_scopes: Mutex<scope_rules::DeclaredScopes>,
    /// The cluster this engine serves, as its plugins see it.
    cluster: Arc<ClusterInfo>,
    /// Which primaries this replica may reconcile now (`run --sharding`);
    /// `None`: all of them.
    owns: Option<KeyFilter>,
    /// The shard label this replica selects its primaries and children
    /// by (`run --sharding`); `None`: every object is watched.
    shards: Option<ShardSelection>,
    /// The label selector each watched kind was last watched with.
    selected: Mutex<BTreeMap<KindRef, Option<LabelSelector>>>,
    /// Primary kinds the API server refused to let this host label.
    unlabelled: Mutex<BTreeSet<KindRef>>,
    /// Primaries that reached this replica under one of its buckets but
    /// belong to another's (a label copied from another object): they are
    /// relabelled, or their owner would never see them.
    strays: Mutex<BTreeSet<ObjectKey>>,
}

/// Says whether this replica may reconcile a primary now.
pub type KeyFilter = Arc<dyn Fn(&PrimaryKey) -> bool + Send + Sync>;

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
            backend,
            clock,
            cache: Arc::new(SharedCache::new()),
            controllers: RwLock::new(BTreeMap::new()),
            watched: Mutex::new(BTreeMap::new()),
            watches: Mutex::new(Vec::new()),
            arrived: Mutex::new(Vec::new()),
            watches_changed: Notify::new(),
            backoff: BackoffPolicy::default(),
            requeue: RequeuePolicy::default(),
            events: EventRecorder::default(),
            // No pool given: bounded by each plugin's concurrency only.
            calls: CallSlots::new(usize::MAX / 2),
            coalesce: Duration::ZERO,
            scope,
            recorder: None,
            kind_scopes: Mutex::default(),
            cluster: Arc::new(ClusterInfo::local()),
            owns: None,
            shards: None,
            selected: Mutex::default(),
            unlabelled: Mutex::default(),
            strays: Mutex::default(),
        }
    }

    /// Reconciles only the primaries `owns` says yes to when they come up:
    /// the others are dropped from the queue (their watch events and cache
    /// still come in, so a key handed to this replica later is reconciled
    /// from a filled cache; see [`Self::queue_where`]).
    pub fn with_ownership(mut self, owns: KeyFilter) -> Self {
        self.owns = Some(owns);
        self
    }

    /// Watches primaries and children by their shard label, asking the API
    /// server for this replica's buckets alone, and labels the primaries
    /// it reconciles and the children it applies (see `shard_selection`).
    /// Call [`Self::reselect`] when the buckets change.
    pub fn with_shard_selection(mut self, shards: ShardSelection) -> Self {
        self.shards = Some(shards);
        self
    }

    /// Tells the plugins they run in `cluster` (`local` unless given).
    pub fn with_cluster(mut self, cluster: ClusterInfo) -> Self {
        self.cluster = Arc::new(cluster);
        self
    }

    /// The cluster this engine serves.
    pub fn cluster(&self) -> &ClusterInfo {
        &self.cluster
    }

    /// Records every reconcile from now on as a golden case.
    pub fn with_recorder(mut self, recorder: Arc<CaseRecorder>) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// Reconciles a primary `window` after a change of one of its children
    /// or read objects rather than at once, so a burst of such changes is
    /// one reconcile and one status write. Changes of the primary itself
    /// are never delayed. Zero (the default, and what `simulate` and `test`
    /// use) reconciles on every change at once.
    pub fn with_coalescing(mut self, window: Duration) -> Self {
        self.coalesce = window;
        self
    }

    /// Runs at most `instances` sandbox calls at once across all plugins,
    /// sharing them fairly: the sandbox's pool (see [`call_slots`]).
    pub fn with_instance_pool(mut self, instances: usize) -> Self {
        self.calls = CallSlots::new(instances);
        self
    }

    /// Caches at most `max_objects` of this engine's cluster (see
    /// [`SharedCache::with_budget`]); before any plugin is added.
    pub fn with_cache_budget(mut self, max_objects: usize) -> Self {
        debug_assert!(
            self.cache.is_empty(),
            "a budget is set before anything is cached"
        );
        self.cache = Arc::new(SharedCache::with_budget(max_objects));
        self
    }

    fn controllers(&self) -> Vec<(String, Arc<Controller>)> {
        let map = self.controllers.read().unwrap_or_else(|e| e.into_inner());
        map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    fn controller(&self, name: &str) -> Option<Arc<Controller>> {
        let map = self.controllers.read().unwrap_or_else(|e| e.into_inner());
        map.get(name).cloned()
    }

    /// Refuses `plugin` when another plugin has its name or reconciles its
    /// primary kind (the one it replaces excepted).
    fn check_free(&self, plugin: &LoadedPlugin, replacing: bool) -> Result<(), EngineError> {
        let served: Vec<Arc<LoadedPlugin>> = self
            .controllers()
            .into_iter()
            .filter(|(name, _)| !(replacing && name == plugin.name()))
            .map(|(_, c)| c.plugin())
            .collect();
        let others: Vec<&LoadedPlugin> = served.iter().map(|p| p.as_ref()).collect();
        match twin_of(plugin, &others) {
            Some(clash) => Err(EngineError::Taken(clash)),
            None => Ok(()),
        }
    }

    /// Starts serving a new plugin: checks its name and primary kind are
    /// free, watches its kinds, and queues its existing primaries.
    pub async fn add_plugin(&self, plugin: Arc<LoadedPlugin>) -> Result<(), EngineError> {
        let m = plugin.metadata();
        self.check_free(&plugin, false)?;
        self.check_kind_scopes(m).await?;
        self.watch_kinds(&plugin).await?;
        let controller = Controller {
            plugin: RwLock::new(plugin.clone()),
            state: Mutex::new(ControllerState::default()),
            placement: CallPlacement::default(),
        };
        self.controllers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(m.name.clone(), Arc::new(controller));
        self.queue_all(&m.name);
        Ok(())
    }

    /// Swaps in a new version of a plugin of the same name, between
    /// reconciles: calls already running finish on the old version. New
    /// kinds are watched, and every primary is reconciled once with the new
    /// version. When the new version declares another finalizer (or none),
    /// the old one is handed over first (see [`finalizer_handover`]).
    pub async fn replace_plugin(&self, plugin: Arc<LoadedPlugin>) -> Result<Replaced, EngineError> {
        let m = plugin.metadata();
        let Some(controller) = self.controller(&m.name) else {
            return Err(EngineError::NotLoaded(m.name.clone()));
        };
        self.check_free(&plugin, true)?;
        self.check_kind_scopes(m).await?;
        self.watch_kinds(&plugin).await?;
        let name = m.name.clone();
        let old = std::mem::replace(
            &mut *controller.plugin.write().unwrap_or_else(|e| e.into_inner()),
            plugin.clone(),
        );
        // What the old version applied says nothing about the new one.
        controller.state().last_applied.clear();
        let finalizers = self.hand_over_finalizers(&controller, &old, &plugin).await;
        self.queue_all(&name);
        Ok(Replaced { old, finalizers })
    }

    /// Deals with the objects of `old` that carry a finalizer `new` no
    /// longer declares: live ones lose it, deleting ones are handed over to
    /// `new` (or released, when `new` will never finalize them). `None`
    /// when the finalizer did not change.
    async fn hand_over_finalizers(
        &self,
        controller: &Controller,
        old: &LoadedPlugin,
        new: &LoadedPlugin,
    ) -> Option<FinalizerHandover> {
        let (before, after) = (old.metadata(), new.metadata());
        let same_primary = before.primary.same_group_kind(&after.primary);
        let changed =
            before.finalizer.is_some() && (before.finalizer != after.finalizer || !same_primary);
        // The finalizers stale for objects of the old primary kind, and the
        // one that now finalizes them, if any.
        let (stale, successor) = {
            let mut state = controller.state();
            let superseded = &mut state.superseded_finalizers;
            superseded.extend(before.finalizer.iter().cloned());
            let mut stale = superseded.clone();
            if let Some(current) = &after.finalizer {
                superseded.remove(current);
                if same_primary {
                    stale.remove(current);
                }
            }
            (stale, after.finalizer.clone().filter(|_| same_primary))
        };
        if !changed {
            return None;
        }
        let mut summary = FinalizerHandover {
            version: after.version.clone(),
            old: stale.iter().cloned().collect(),
            new: successor.clone(),
            ..FinalizerHandover::default()
        };
        for object in self.cache.list(&before.primary) {
            if !self.scope.selectors.admits(&before.name, &object) {
                continue;
            }
            let (Some(key), Some(handover)) = (
                ObjectKey::of(&object),
                Handover::of(&object, &stale, successor.as_deref()),
            ) else {
                continue;
            };
            if let Err(e) = self.release(&key, &handover).await {
                // Reloading the same file again does nothing: say how to
                // release it by hand.
                let releasing: BTreeSet<String> = handover.to_remove().iter().cloned().collect();
                let why = match FinalizerHold::of(&object, &releasing) {
                    Some(hold) => format!("{e} (release it with: {})", hold.release_command()),
                    None => e.to_string(),
                };
                tracing::warn!(plugin = %after.name, object = %key, "cannot remove the finalizer of an earlier version: {why}");
                summary.failed.push((key, why));
                continue;
            }
            handover.tally(&mut summary);
            let (reason, message) =
                handover_event(&handover, &after.name, &after.version, successor.as_deref());
            let record = EventRecord {
                regarding: key,
                regarding_uid: uid_of(&object),
                event_type: EventType::Normal,
                reason: reason.to_string(),
                message,
                reporting_controller: after.field_manager(),
            };
            // Through the recorder, like every Event the host makes.
            let now = self.clock.now_millis();
            if let Err(e) = self.events.record(&*self.backend, record, now).await {
                tracing::warn!("cannot record event {reason}: {e}");
            }
        }
        Some(summary)
    }

    /// Removes the finalizers `handover` releases now.
    async fn release(&self, key: &ObjectKey, handover: &Handover) -> Result<(), BackendError> {
        for finalizer in handover.to_remove() {
            self.backend.remove_finalizer(key, finalizer).await?;
        }
        Ok(())
    }

    /// The objects still carrying a finalizer plugin `name` answers for (its
    /// own and superseded ones), each with what releases it: what to tell a
    /// user about before the plugin is removed.
    pub fn finalizer_holds(&self, name: &str) -> Vec<FinalizerHold> {
        let Some(controller) = self.controller(name) else {
            return Vec::new();
        };
        let plugin = controller.plugin();
        let metadata = plugin.metadata();
        let mut ours = controller.state().superseded_finalizers.clone();
        ours.extend(metadata.finalizer.iter().cloned());
        if ours.is_empty() {
            return Vec::new();
        }
        self.cache
            .list(&metadata.primary)
            .iter()
            .filter(|object| self.scope.selectors.admits(name, object))
            .filter_map(|object| FinalizerHold::of(object, &ours))
            .collect()
    }

    /// Refuses a plugin whose declared kinds break the scope rule, and
    /// remembers their scopes for [`Self::check_response_scopes`].
    async fn check_kind_scopes(&self, metadata: &PluginMetadata) -> Result<(), EngineError> {
        let scopes = scope_rules::check_plugin(&*self.backend, metadata).await?;
        self.kind_scopes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(scopes);
        Ok(())
    }

    /// The scope of a declared kind, learned when its plugin was loaded.
    fn scope_of(&self, kind: &KindRef) -> KindScope {
        let scopes = self.kind_scopes.lock().unwrap_or_else(|e| e.into_inner());
        scopes.get(kind).copied().unwrap_or(KindScope::Namespaced)
    }

    /// The per-response half of the scope rule, as a reconcile failure.
    fn check_response_scopes(
        &self,
        key: &PrimaryKey,
        response: &ValidResponse,
    ) -> Result<(), (String, String)> {
        let scopes = self.kind_scopes.lock().unwrap_or_else(|e| e.into_inner());
        scope_rules::check_response(&scopes, key.namespace.as_deref(), response)
            .map_err(|e| ("InvalidResponse".to_string(), e.to_string()))
    }

    /// Stops serving a plugin. Its queue is dropped; reconciles already
    /// running finish. Nothing is deleted and no finalizer is removed: its
    /// objects stay as they are until a plugin serves them again (see
    /// [`Self::finalizer_holds`] for telling the user which ones wait).
    pub fn remove_plugin(&self, name: &str) -> Option<Arc<LoadedPlugin>> {
        let removed = self
            .controllers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        removed.map(|c| c.plugin())
    }

    /// Watches every kind `plugin` declares that is not watched yet. A kind
    /// is watched as metadata only while every plugin declaring it reads it
    /// so; a plugin wanting whole objects of such a kind re-watches it whole.
    /// Under sharding, a kind whose role changes with `plugin` is watched
    /// again with its new selector.
    async fn watch_kinds(&self, plugin: &LoadedPlugin) -> Result<(), EngineError> {
        let name = &plugin.metadata().name;
        for kind in plugin.metadata().declared_kinds() {
            let metadata_only = plugin.metadata().projection_of(kind) == Projection::MetadataOnly
                && self.controllers().iter().all(|(other, c)| {
                    other == name
                        || !c.plugin().metadata().declared_kinds().any(|k| k == kind)
                        || c.plugin().metadata().projection_of(kind) == Projection::MetadataOnly
                });
            let labels = self.shard_selector(kind, Some(plugin.metadata()));
            let watched_as = self.lock_watched().get(kind).copied();
            let metadata_only = match watched_as {
                // Whole objects serve everyone; metadata serves metadata.
                Some(meta) => meta && metadata_only,
                None => metadata_only,
            };
            if watched_as == Some(metadata_only) && self.lock_selected().get(kind) == Some(&labels)
            {
                continue;
            }
            self.watch_kind(kind, metadata_only, labels, watched_as)
                .await?;
        }
        Ok(())
    }

    /// Watches `kind` (again, when `watched_as` says how it was watched so
    /// far) with `labels`, taking the list into the cache.
    async fn watch_kind(
        &self,
        kind: &KindRef,
        metadata_only: bool,
        labels: Option<LabelSelector>,
        watched_as: Option<bool>,
    ) -> Result<(), EngineError> {
        let rewatch = watched_as.is_some();
        self.lock_watched().insert(kind.clone(), metadata_only);
        let scope = WatchScope {
            namespaces: self.scope.namespaces.clone(),
            metadata_only,
            labels: labels.clone(),
            max_objects: self.cache.budget(),
        };
        let stream = match self.backend.watch(kind, &scope).await {
            Ok(stream) => stream,
            Err(source) => {
                let mut watched = self.lock_watched();
                match watched_as {
                    Some(before) => watched.insert(kind.clone(), before),
                    None => watched.remove(kind),
                };
                return Err(EngineError::Watch {
                    kind: kind.to_string(),
                    source,
                });
            }
        };
        self.lock_selected().insert(kind.clone(), labels);
        // Re-watched as it was (only its selector changed): cached objects
        // at the listed version are current.
        let keep_current = watched_as == Some(metadata_only);
        self.take_list(kind, stream.initial, rewatch, keep_current);
        let mut watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        // A re-watch replaces the old stream, whose task then stops.
        watches.retain(|(k, _)| k != kind);
        watches.push((kind.clone(), stream.events));
        drop(watches);
        self.watches_changed.notify_waiters();
        Ok(())
    }

    /// The shard selector `kind` is watched with now, `adding` counted
    /// among the plugins serving it.
    fn shard_selector(
        &self,
        kind: &KindRef,
        adding: Option<&PluginMetadata>,
    ) -> Option<LabelSelector> {
        let shards = self.shards.as_ref()?;
        let controllers = self.controllers();
        let plugins = controllers
            .iter()
            .map(|(_, c)| c.plugin())
            .collect::<Vec<_>>();
        let metadata = plugins
            .iter()
            .map(|p| p.metadata())
            .filter(|m| adding.is_none_or(|a| a.name != m.name))
            .chain(adding);
        shards.selector(shards.role_of(kind, metadata)?)
    }

    /// Watches again, with the buckets this replica owns now, every kind
    /// selected by the shard label: objects that left its buckets leave
    /// the cache, those that came in are listed into it. Kinds already
    /// watched with the current selector are left alone, so this is cheap
    /// to call after every ring change, and retries what failed before.
    pub async fn reselect(&self) -> Result<(), EngineError> {
        if self.shards.is_none() {
            return Ok(());
        }
        let watched = self.watched_kinds();
        for (kind, metadata_only) in watched {
            let labels = self.shard_selector(&kind, None);
            if self.lock_selected().get(&kind) == Some(&labels) {
                continue;
            }
            self.watch_kind(&kind, metadata_only, labels, Some(metadata_only))
                .await?;
        }
        Ok(())
    }

    fn lock_selected(&self) -> MutexGuard<'_, BTreeMap<KindRef, Option<LabelSelector>>> {
        self.selected.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a watch's first list into the cache. After a re-watch, cached
    /// objects missing from the list are gone.
    fn take_list(
        &self,
        kind: &KindRef,
        list: Vec<ListedObject>,
        rewatch: bool,
        keep_current: bool,
    ) {
        let now = self.clock.now_millis();
        let mut listed = BTreeSet::new();
        // One object parsed at a time: the list stays text until cached.
        for object in list {
            let event = object.into_event();
            if rewatch && let Some(key) = ObjectKey::of(&event.object) {
                // Unchanged since it was cached: nothing to reconcile. A
                // re-watch for a new shard selector lists every object this
                // replica kept, and reconciling them all would be a storm.
                let version = resource_version_of(&event.object);
                let unchanged = keep_current
                    && version.is_some()
                    && self
                        .cache
                        .get(&key)
                        .is_some_and(|cached| resource_version_of(&cached) == version);
                listed.insert(key);
                if unchanged {
                    continue;
                }
            }
            self.observe(&event, now);
        }
        if rewatch {
            let mut gone = HashSet::new();
            for object in self.cache.list(kind) {
                if ObjectKey::of(&object).is_some_and(|k| !listed.contains(&k)) {
                    let event = WatchEvent::new(WatchEventType::Deleted, object);
                    gone.extend(self.observe(&event, now));
                }
            }
            self.forget_objects(&gone);
        }
    }

    fn lock_watched(&self) -> MutexGuard<'_, BTreeMap<KindRef, bool>> {
        self.watched.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Kinds watched so far, and whether as metadata only.
    pub fn watched_kinds(&self) -> BTreeMap<KindRef, bool> {
        self.lock_watched().clone()
    }

    /// Whether `plugin` reconciles the primary `key` names: it is cached
    /// and matches the plugin's selector. A primary no longer cached passes,
    /// so its reconcile can find it gone.
    fn in_scope(&self, plugin: &str, primary: &KindRef, key: &PrimaryKey) -> bool {
        // Without a selector, nothing to read: this runs for every watch event.
        let Some(selector) = self.scope.selectors.for_plugin(plugin) else {
            return true;
        };
        let key = ObjectKey::new(primary.clone(), key.namespace.as_deref(), &key.name);
        self.cache
            .get(&key)
            .is_none_or(|object| selector.matches_object(&object))
    }

    /// Queues every cached primary of a plugin for a reconcile now.
    fn queue_all(&self, name: &str) {
        let Some(controller) = self.controller(name) else {
            return;
        };
        let primary = controller.plugin().metadata().primary.clone();
        let now = self.clock.now_millis();
        // Names from the cache's index: a host starting on a cluster of
        // many primaries does not parse each just to queue it.
        let names = self
            .cache
            .names(&primary, self.scope.selectors.for_plugin(name));
        let mut state = controller.state();
        for (namespace, name) in names {
            state.queue.add(PrimaryKey { namespace, name }, now);
        }
    }

    pub fn cache(&self) -> &Arc<SharedCache> {
        &self.cache
    }

    pub fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    /// The plugins served now, by name.
    pub fn plugins(&self) -> Vec<Arc<LoadedPlugin>> {
        self.controllers()
            .into_iter()
            .map(|(_, c)| c.plugin())
            .collect()
    }

    /// Takes one watch event into the cache and the queues. Returns the key
    /// of the object it deletes, for [`Self::forget_objects`].
    fn observe(&self, event: &WatchEvent, now: i64) -> Option<ObjectKey> {
        self.cache.observe(event);
        let window = i64::try_from(self.coalesce.as_millis()).unwrap_or(i64::MAX);
        let kind = KindRef::of_object(&event.object);
        for (name, c) in self.controllers() {
            let plugin = c.plugin();
            let primary = &plugin.metadata().primary;
            // A change of the primary itself is reconciled at once; one of
            // a child or a read object after the window, with the others
            // that come in it (a ReplicaSet creating its Pods).
            let of_primary = kind.as_ref() == Some(primary);
            let keys = event_mapping::primaries_for(
                plugin.metadata(),
                self.scope_of(primary),
                &event.object,
            );
            let keys: Vec<PrimaryKey> = keys
                .into_iter()
                .filter(|key| self.in_scope(&name, primary, key))
                .collect();
            if !keys.is_empty() {
                let mut state = c.state();
                for key in keys {
                    if of_primary || window == 0 {
                        state.queue.add(key, now);
                    } else {
                        state.queue.add_coalesced(key, now.saturating_add(window));
                    }
                }
            }
        }
        match event.event_type {
            WatchEventType::Deleted => ObjectKey::of(&event.object),
            _ => None,
        }
    }

    /// Forgets what the engine remembered about objects the cluster
    /// deleted: what it last applied to them, and their Event series. A
    /// child the garbage collector takes with its primary is never pruned
    /// or deleted by the host, so this is the only place it is forgotten;
    /// a primary's queue state goes when its reconcile finds it gone.
    fn forget_objects(&self, gone: &HashSet<ObjectKey>) {
        if gone.is_empty() {
            return;
        }
        for (_, controller) in self.controllers() {
            let mut state = controller.state();
            for key in gone {
                state.last_applied.remove(key);
            }
        }
        self.events.forget_objects(gone);
    }

    /// Takes every watch event delivered so far into the cache and the
    /// queues; returns how many there were.
    pub fn pump(&self) -> usize {
        let now = self.clock.now_millis();
        let mut events = std::mem::take(&mut *self.lock_arrived());
        {
            let mut watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
            for (_, rx) in watches.iter_mut() {
                while let Ok(event) = rx.try_recv() {
                    events.push(event);
                }
            }
        }
        let gone: HashSet<ObjectKey> = events
            .iter()
            .filter_map(|event| self.observe(event, now))
            .collect();
        self.forget_objects(&gone);
        events.len()
    }

    fn lock_arrived(&self) -> MutexGuard<'_, Vec<WatchEvent>> {
        self.arrived.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Resolves as soon as a watch event is waiting for [`Self::pump`] (at
    /// once if one already is), or a watch was added: what wakes a loop
    /// the moment there is something to do, instead of it looking every so
    /// often. Cancel-safe: an event taken off its channel here is kept for
    /// the next pump.
    pub async fn watch_events(&self) {
        let changed = self.watches_changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        std::future::poll_fn(|cx| {
            if changed.as_mut().poll(cx).is_ready() {
                return std::task::Poll::Ready(());
            }
            if !self.lock_arrived().is_empty() {
                return std::task::Poll::Ready(());
            }
            let mut watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
            // Every channel is polled, so each has this task's waker when
            // none has an event. A closed one (its watch replaced or ended)
            // is ready with nothing: passed over.
            for (_, rx) in watches.iter_mut() {
                if let std::task::Poll::Ready(Some(event)) = rx.poll_recv(cx) {
                    self.lock_arrived().push(event);
                    return std::task::Poll::Ready(());
                }
            }
            std::task::Poll::Pending
        })
        .await
    }

    /// The next object ready to reconcile, marked in flight: the earliest
    /// ready across plugins (ties broken by plugin name, then object), among
    /// plugins below their concurrency. Only its sandbox call waits for the
    /// instance pool (see [`call_slots`]).
    pub fn next_ready(&self) -> Option<(String, PrimaryKey)> {
        let now = self.clock.now_millis();
        let mut best: Option<(i64, Arc<Controller>, String)> = None;
        for (name, c) in self.controllers() {
            let concurrency = c.concurrency();
            let state = c.state();
            if state.queue.in_flight() >= concurrency {
                continue;
            }
            let Some(at) = state.queue.next_ready_at().filter(|at| *at <= now) else {
                continue;
            };
            drop(state);
            if best.as_ref().is_none_or(|(b, _, _)| at < *b) {
                best = Some((at, c, name));
            }
        }
        let (_, controller, name) = best?;
        let mut state = controller.state();
        loop {
            // Marked in flight before the owner is asked: whoever changes
            // ownership and then looks at what is in flight sees this key
            // either in flight or refused.
            let key = state.queue.pop_ready(now)?;
            match &self.owns {
                Some(owns) if !owns(&key) => {
                    state.queue.done(&key, None);
                    state.queue.forget(&key);
                    self.note_stray(&controller.plugin().metadata().primary, &key);
                }
                _ => return Some((name, key)),
            }
        }
    }

    /// Queues now every cached primary, of every plugin, that `pick` says
    /// yes to; returns how many (distinct per plugin).
    pub fn queue_where(&self, pick: impl Fn(&PrimaryKey) -> bool) -> usize {
        let now = self.clock.now_millis();
        let mut queued = 0;
        for (name, controller) in self.controllers() {
            let primary = controller.plugin().metadata().primary.clone();
            let names = self
                .cache
                .names(&primary, self.scope.selectors.for_plugin(&name));
            let mut state = controller.state();
            for (namespace, name) in names {
                let key = PrimaryKey { namespace, name };
                if pick(&key) {
                    state.queue.add(key, now);
                    queued += 1;
                }
            }
        }
        queued
    }

    /// How many cached primaries, over every plugin, `pick` says yes to.
    pub fn count_where(&self, pick: impl Fn(&PrimaryKey) -> bool) -> usize {
        self.controllers()
            .iter()
            .map(|(name, controller)| {
                let primary = controller.plugin().metadata().primary.clone();
                self.cache
                    .names(&primary, self.scope.selectors.for_plugin(name))
                    .into_iter()
                    .filter(|(namespace, name)| {
                        pick(&PrimaryKey {
                            namespace: namespace.clone(),
                            name: name.clone(),
                        })
                    })
                    .count()
            })
            .sum()
    }

    /// The primaries being reconciled now, over every plugin.
    pub fn in_flight_keys(&self) -> Vec<PrimaryKey> {
        self.controllers()
            .iter()
            .flat_map(|(_, c)| c.state().queue.in_flight_keys())
            .collect()
    }

    /// When the next delayed reconcile becomes ready, if any is waiting.
    pub fn next_wakeup(&self) -> Option<i64> {
        self.controllers()
            .iter()
            .filter_map(|(_, c)| c.state().queue.next_ready_at())
            .min()
    }

    /// Each plugin's queue as metrics see it.
    pub fn queue_stats(&self) -> Vec<QueueStats> {
        self.controllers()
            .into_iter()
            .map(|(plugin, c)| {
                let concurrency = c.concurrency();
                let state = c.state();
                QueueStats {
                    plugin,
                    depth: state.queue.depth(),
                    in_flight: state.queue.in_flight(),
                    concurrency,
                }
            })
            .collect()
    }

    /// Writes the counts of repeated Events the cluster shows behind (see
    /// [`event_recorder`]): those due for a refresh, or all with `all`.
    /// Returns how many were written.
    pub async fn flush_events(&self, all: bool) -> usize {
        let now = self.clock.now_millis();
        self.events.flush(&*self.backend, now, all).await
    }

    /// What the engine remembers per object now (see [`Remembered`]).
    pub fn remembered(&self) -> Remembered {
        let (event_series, event_limits) = self.events.remembered();
        let mut remembered = Remembered {
            event_series,
            event_limits,
            ..Remembered::default()
        };
        for (_, controller) in self.controllers() {
            let state = controller.state();
            remembered.applied += state.last_applied.len();
            remembered.queued += state.queue.remembered();
        }
        remembered
    }

    /// Reconciles currently running.
    pub fn in_flight(&self) -> usize {
        self.controllers()
            .iter()
            .map(|(_, c)| c.state().queue.in_flight())
            .sum()
    }

    /// Runs one reconcile of `key` for `plugin` (taken from
    /// [`Self::next_ready`]) and does its queue bookkeeping, whatever
    /// happens: a panic of the host is a failed reconcile, retried.
    pub async fn reconcile(&self, plugin: &str, key: PrimaryKey) -> ReconcileRecord {
        match catch_panic(self.reconcile_once(plugin, key.clone())).await {
            Ok(record) => record,
            Err(panic) => self.after_panic(plugin, key, &panic),
        }
    }

    /// The record of a reconcile that panicked outside the plugin call's
    /// own guard; its bookkeeping, unless it was done before the panic.
    fn after_panic(&self, plugin: &str, key: PrimaryKey, panic: &str) -> ReconcileRecord {
        let now = self.clock.now_millis();
        let message = format!(
            "the host panicked while reconciling this object ({panic}); it is retried: this is a bug of reconciler-host, please report it"
        );
        tracing::error!(plugin, object = %key, "{message}");
        let (kind, failures) = match self.controller(plugin) {
            Some(controller) => {
                let kind = controller.plugin().metadata().primary.kind.clone();
                let mut state = controller.state();
                let failures = if state.queue.is_in_flight(&key) {
                    let failures = state.queue.fail(&key);
                    state
                        .queue
                        .done(&key, Some(at(now, self.backoff.delay(failures))));
                    failures
                } else {
                    1
                };
                (kind, failures)
            }
            None => (String::new(), 1),
        };
        ReconcileRecord {
            at_millis: now,
            cluster: self.cluster.name.clone(),
            plugin: plugin.to_string(),
            kind,
            object: key,
            outcome: Outcome::Failed {
                reason: "HostPanic".to_string(),
                message,
                failures,
                retry_in: self.backoff.delay(failures),
            },
        }
    }

    async fn reconcile_once(&self, plugin: &str, key: PrimaryKey) -> ReconcileRecord {
        let Some(controller) = self.controller(plugin) else {
            return ReconcileRecord {
                at_millis: self.clock.now_millis(),
                cluster: self.cluster.name.clone(),
                plugin: plugin.to_string(),
                kind: String::new(),
                object: key,
                outcome: Outcome::Unloaded,
            };
        };
        let controller = &controller;
        let loaded = controller.plugin();
        let metadata = loaded.metadata();
        // `object_name`, not `name`: JSON logs already give the span's own
        // name under that key.
        let span = tracing::info_span!(
            "reconcile",
            plugin,
            kind = %metadata.primary.kind,
            namespace = key.namespace.as_deref().unwrap_or(""),
            object_name = %key.name,
        );
        let at_millis = self.clock.now_millis();
        let outcome = catch_panic(self.run(controller, &loaded, &key).instrument(span.clone()))
            .await
            .unwrap_or_else(|panic| {
                Err((
                    "HostPanic".to_string(),
                    format!(
                        "the host panicked while reconciling this object ({panic}); nothing more of it was applied and it is retried: this is a bug of reconciler-host, please report it"
                    ),
                ))
            });
        let now = self.clock.now_millis();
        let mut rate_limited = None;
        let outcome = {
            let mut state = controller.state();
            match outcome {
                Ok(Some((changes, asked))) => {
                    state.queue.succeed(&key);
                    let requeue = self.requeue.next(asked, &mut state.queue, &key);
                    if let Some(Requeue::RateLimited { .. }) = requeue {
                        rate_limited = asked;
                    }
                    let requeue_after = requeue.as_ref().map(Requeue::delay);
                    state.queue.done(&key, requeue_after.map(|d| at(now, d)));
                    Outcome::Applied {
                        changes,
                        requeue_after,
                    }
                }
                Ok(None) => {
                    state.queue.forget(&key);
                    state.queue.done(&key, None);
                    Outcome::Gone
                }
                Err((reason, message)) => {
                    let failures = state.queue.fail(&key);
                    let retry_in = self.backoff.delay(failures);
                    state.queue.done(&key, Some(at(now, retry_in)));
                    Outcome::Failed {
                        reason,
                        message,
                        failures,
                        retry_in,
                    }
                }
            }
        };
        let record = ReconcileRecord {
            at_millis,
            cluster: self.cluster.name.clone(),
            plugin: plugin.to_string(),
            kind: metadata.primary.kind.clone(),
            object: key,
            outcome,
        };
        span.in_scope(|| match &record.outcome {
            Outcome::Failed { .. } => tracing::warn!("{record}"),
            _ => tracing::debug!("{record}"),
        });
        if let (
            Some(asked),
            Outcome::Applied {
                requeue_after: Some(delay),
                ..
            },
        ) = (rate_limited, &record.outcome)
        {
            span.in_scope(|| {
                tracing::debug!(
                    "asked to requeue after {} ms, below the {} ms floor: rate-limited to {} ms (doubling while it keeps asking too soon)",
                    asked.as_millis(),
                    self.requeue.floor.as_millis(),
                    delay.as_millis()
                )
            });
        }
        if let Outcome::Failed {
            reason, message, ..
        } = &record.outcome
        {
            self.warn_on_primary(&loaded, &record.object, reason, message)
                .await;
        }
        record
    }

    /// Labels a primary with its shard, once in its life: from then on
    /// only its owner's selector lists it. Returns the object as stored.
    ///
    /// Not a reconcile failure when refused: an unlabelled primary is
    /// listed by every replica, which costs each of them the decoding of
    /// it and nothing else (its owner alone reconciles it). A refusal by
    /// RBAC (a ClusterRole from before `rbac --sharding` granted patch on
    /// primaries) is said once per kind and not asked again.
    async fn label_primary(&self, primary: &Value, key: &ObjectKey, bucket: &str) -> Option<Value> {
        if self.lock_unlabelled().contains(&key.kind) {
            return None;
        }
        let object = shard_selection::labelled_primary(primary, bucket);
        match self
            .backend
            .apply(object, shard_selection::SHARD_FIELD_MANAGER, true)
            .await
        {
            Ok(stored) => Some(stored),
            Err(BackendError::Forbidden { message }) => {
                // Reconciles in flight at once may all be refused: one says so.
                if !self.lock_unlabelled().insert(key.kind.clone()) {
                    return None;
                }
                tracing::warn!(
                    "cannot label {key} with its shard ({message}): every replica goes on receiving every {} and only its owner reconciles it; grant patch on them (`reconciler-host rbac --sharding`) and restart to have the API server select them",
                    key.kind.kind
                );
                None
            }
            Err(e) => {
                tracing::warn!(
                    "cannot label {key} with its shard now (tried again at its next reconcile): {e}"
                );
                None
            }
        }
    }

    /// Remembers `key` for [`Self::relabel_strays`] if it came here only
    /// because its shard label names one of this replica's buckets, not
    /// its own. Any other mislabel also reaches its owner, which labels it
    /// at its reconcile.
    fn note_stray(&self, primary: &KindRef, key: &PrimaryKey) {
        let Some(shards) = &self.shards else {
            return;
        };
        let object_key = ObjectKey::new(primary.clone(), key.namespace.as_deref(), &key.name);
        let Some(object) = self.cache.get(&object_key) else {
            return;
        };
        if let Some(label) = shard_selection::label_of(&object)
            && label != shards.bucket_of(key)
            && shards.is_mine(label)
        {
            self.strays
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(object_key);
        }
    }

    /// Whether [`Self::relabel_strays`] has anything to do.
    pub fn has_strays(&self) -> bool {
        !self
            .strays
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Gives every stray primary its own shard label, so the API server
    /// sends it to its owner (and no longer here).
    pub async fn relabel_strays(&self) {
        let strays = std::mem::take(&mut *self.strays.lock().unwrap_or_else(|e| e.into_inner()));
        let Some(shards) = &self.shards else {
            return;
        };
        for key in strays {
            let Some(object) = self.cache.get(&key) else {
                continue;
            };
            let primary = PrimaryKey {
                namespace: key.namespace.clone(),
                name: key.name.clone(),
            };
            let bucket = shards.bucket_of(&primary);
            if shard_selection::label_of(&object) == Some(bucket.as_str()) {
                continue;
            }
            if self.label_primary(&object, &key, &bucket).await.is_some() {
                tracing::info!(
                    "relabelled {key} with its shard {bucket}: its label named {}, another object's (copied with it?), so its owner could not see it",
                    shard_selection::label_of(&object).unwrap_or_default()
                );
            }
        }
    }

    fn lock_unlabelled(&self) -> MutexGuard<'_, BTreeSet<KindRef>> {
        self.unlabelled.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The body of a reconcile. `Ok(None)`: the primary is gone.
    /// `Err((reason, message))`: nothing more of it is applied.
    async fn run(
        &self,
        controller: &Controller,
        plugin: &Arc<LoadedPlugin>,
        key: &PrimaryKey,
    ) -> Result<Option<(Vec<Change>, Option<Duration>)>, (String, String)> {
        let metadata = plugin.metadata();
        let manager = metadata.field_manager();
        let primary_key = ObjectKey::new(
            metadata.primary.clone(),
            key.namespace.as_deref(),
            &key.name,
        );
        let Some((mut primary, mut primary_json)) = self.cache.get_with_json(&primary_key) else {
            return Ok(None);
        };
        // Its labels may have left the selector since it was queued: it is
        // then no longer this host's to reconcile, like a gone object.
        if !self.scope.selectors.admits(&metadata.name, &primary) {
            return Ok(None);
        }
        let deleting = is_deleting(&primary);
        let mut changes = Vec::new();

        if let Some(finalizer) = &metadata.finalizer
            && !deleting
            && !has_finalizer(&primary, finalizer)
        {
            // The stored object, so the status precondition below names the
            // version this write made.
            primary = self
                .backend
                .add_finalizer(&primary_key, finalizer)
                .await
                .map_err(|e| backend_failure("adding the finalizer", e))?;
            primary_json = primary.to_string().into();
            changes.push(Change::FinalizerAdded(finalizer.clone()));
        }
        let bucket = self.shards.as_ref().map(|shards| shards.bucket_of(key));
        if let Some(bucket) = &bucket
            && !deleting
            && shard_selection::label_of(&primary) != Some(bucket.as_str())
            && let Some(labelled) = self.label_primary(&primary, &primary_key, bucket).await
        {
            primary = labelled;
            primary_json = primary.to_string().into();
        }

        // One snapshot of the children: what the plugin is shown is what
        // it may delete, and what is pruned, each by the uid seen here.
        // The request is the cache's text, not the parsed objects written
        // out again.
        let (children, children_json): (Vec<Value>, Vec<Arc<str>>) = self
            .cache
            .children_with_json(&primary, &metadata.owns)
            .into_iter()
            .unzip();
        let request = ReconcileRequest {
            primary: primary_json.to_string(),
            children: children_json.iter().map(|json| json.to_string()).collect(),
            deleting,
        };
        // With --record, the reads go through a reader that keeps what it
        // returned, for the case.
        let reads = self
            .recorder
            .as_ref()
            .map(|_| Arc::new(RecordingReader::new(self.cache.clone())));
        let reader: Arc<dyn ObjectReader> = match &reads {
            Some(reads) => reads.clone(),
            None => self.cache.clone(),
        };
        let now_millis = self.clock.now_millis();
        let input = ReconcileInput {
            request,
            primary_namespace: key.namespace.clone(),
            object: key.to_string(),
            reader,
            now_millis,
            cluster: self.cluster.clone(),
        };
        let slot = self
            .calls
            .acquire(&metadata.name, controller.concurrency())
            .await;
        let (answer, placed) = controller
            .placement
            .reconcile(plugin, input, slot)
            .await
            .map_err(|e| {
                (
                    "HostError".to_string(),
                    format!("the plugin call panicked: {e}"),
                )
            })?;
        if placed == Placed::WorkerThenBlocking {
            tracing::debug!(
                "the call ran past the brief budget on the worker and was made again on a blocking thread"
            );
        }
        if let (Some(recorder), Some(reads)) = (&self.recorder, &reads) {
            recorder.record(&Recording {
                plugin: &metadata.name,
                version: &metadata.version,
                primary: &primary,
                children: &children,
                reads,
                now_millis,
                cluster: &self.cluster,
                answer: answer.as_ref(),
            });
        }
        let mut response = answer.map_err(|e| (e.reason().to_string(), e.to_string()))?;
        self.check_response_scopes(key, &response)?;
        if let (Some(bucket), Some(shards)) = (&bucket, &self.shards) {
            for child in &mut response.apply {
                if child.role == WriteRole::Owned {
                    shards.label_child(&mut child.object, bucket);
                }
            }
        }

        let superseded_finalizers = controller.state().superseded_finalizers.clone();
        let plan = {
            // A child the plugin was shown is current if the cache still
            // holds the very text it was parsed from: no second parse.
            let current = |k: &ObjectKey| {
                let json = self.cache.json_of(k)?;
                match children_json.iter().position(|c| Arc::ptr_eq(c, &json)) {
                    Some(i) => Some(Cow::Borrowed(&children[i])),
                    None => self.cache.get(k).map(Cow::Owned),
                }
            };
            // Looked up per object, not copied: the map holds every object
            // this plugin ever applied.
            let last_applied = |k: &ObjectKey| controller.state().last_applied.get(k).copied();
            let observed = Observed {
                metadata,
                primary: &primary,
                children: &children,
                current: &current,
                last_applied: &last_applied,
                superseded_finalizers: &superseded_finalizers,
            };
            plan::plan(&observed, response).map_err(|e| (e.reason().to_string(), e.to_string()))?
        };

        // A deleting primary in a namespace being deleted: nothing new can
        // be created there, so a cleanup that needs new objects can never
        // run. Its creates are skipped and its finalizer released below,
        // rather than holding the namespace's deletion forever.
        let mut refused_in_terminating = Vec::new();
        for apply in plan.applies {
            match self.backend.apply(apply.object, &manager, true).await {
                Ok(_) => {}
                Err(BackendError::NamespaceTerminating { .. }) if deleting => {
                    refused_in_terminating.push(apply.key);
                    continue;
                }
                Err(e) => {
                    return Err(partial_failure(
                        &format!("applying {}", apply.key),
                        e,
                        &changes,
                    ));
                }
            }
            controller
                .state()
                .last_applied
                .insert(apply.key.clone(), apply.fingerprint);
            changes.push(if apply.creates {
                Change::Created(apply.key)
            } else {
                Change::Updated(apply.key)
            });
        }
        for delete in plan.deletes {
            self.backend
                .delete(&delete.key, Propagation::Background, delete.uid.as_deref())
                .await
                .map_err(|e| partial_failure(&format!("deleting {}", delete.key), e, &changes))?;
            controller.state().last_applied.remove(&delete.key);
            changes.push(match delete.reason {
                DeleteReason::Pruned => Change::Pruned(delete.key),
                DeleteReason::Requested => Change::Deleted(delete.key),
            });
        }
        if let Some(status) = plan.status {
            match self
                .backend
                .apply_status(
                    &primary_key,
                    status,
                    &manager,
                    resource_version_of(&primary),
                )
                .await
            {
                Ok(stored) => {
                    // The cache takes the stored primary now, not when its
                    // watch event comes: a reconcile starting before that
                    // would otherwise write its status against the old
                    // resourceVersion and be refused.
                    self.cache
                        .observe(&WatchEvent::new(WatchEventType::Modified, stored));
                    changes.push(Change::StatusUpdated)
                }
                // The primary changed since it was read (or was deleted and
                // made again under its name): this status describes an
                // older object. Its watch event queues a reconcile of the
                // new one, which decides afresh; nothing more of this one
                // is done.
                Err(BackendError::Conflict { .. }) => {
                    changes.push(Change::StatusStale);
                    return Ok(Some((changes, plan.requeue_after)));
                }
                Err(e) => return Err(partial_failure("updating the status", e, &changes)),
            }
        }
        for event in plan.events {
            let record = EventRecord {
                regarding: primary_key.clone(),
                regarding_uid: uid_of(&primary),
                event_type: event.event_type,
                reason: event.reason.clone(),
                message: event.message.clone(),
                reporting_controller: manager.clone(),
            };
            // An Event that cannot be recorded is not worth failing a
            // reconcile that already changed the cluster.
            let now = self.clock.now_millis();
            if let Err(e) = self.events.record(&*self.backend, record, now).await {
                tracing::warn!("cannot record event {}: {e}", event.reason);
            }
            changes.push(Change::Event {
                event_type: event.event_type,
                reason: event.reason,
                message: event.message,
            });
        }
        // A cleanup that can never run (its creates refused by a
        // terminating namespace) releases every finalizer this plugin
        // answers for, its own and superseded ones.
        let mut release = plan.remove_finalizers;
        if !refused_in_terminating.is_empty() {
            for finalizer in metadata.finalizer.iter().chain(&superseded_finalizers) {
                if has_finalizer(&primary, finalizer) && !release.contains(finalizer) {
                    release.push(finalizer.clone());
                }
            }
            let refused: Vec<String> = refused_in_terminating
                .iter()
                .map(ToString::to_string)
                .collect();
            // No Event: a terminating namespace refuses new Events too.
            tracing::warn!(
                "namespace {} is being deleted and refuses new objects ({}); the cleanup cannot create them, so the finalizers [{}] are removed to let the deletion finish",
                key.namespace.as_deref().unwrap_or(""),
                refused.join(", "),
                release.join(", "),
            );
            changes.push(Change::RefusedInTerminatingNamespace(
                refused_in_terminating,
            ));
        }
        for finalizer in release {
            self.backend
                .remove_finalizer(&primary_key, &finalizer)
                .await
                .map_err(|e| partial_failure("removing the finalizer", e, &changes))?;
            changes.push(Change::FinalizerRemoved(finalizer));
        }
        Ok(Some((changes, plan.requeue_after)))
    }

    async fn warn_on_primary(
        &self,
        plugin: &LoadedPlugin,
        key: &PrimaryKey,
        reason: &str,
        message: &str,
    ) {
        let metadata = plugin.metadata();
        let primary_key = ObjectKey::new(
            metadata.primary.clone(),
            key.namespace.as_deref(),
            &key.name,
        );
        let record = EventRecord {
            regarding_uid: self.cache.get(&primary_key).as_ref().and_then(uid_of),
            regarding: primary_key,
            event_type: EventType::Warning,
            reason: reason.to_string(),
            message: message.to_string(),
            reporting_controller: metadata.field_manager(),
        };
        let now = self.clock.now_millis();
        if let Err(e) = self.events.record(&*self.backend, record, now).await {
            tracing::warn!(plugin = %metadata.name, object = %key, "cannot record the failure as an Event: {e}");
        }
    }
}

fn uid_of(object: &Value) -> Option<String> {
    object
        .metadata_field("uid")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The reason of a reconcile that failed because the cluster did not
/// answer (a timeout, a refused connection, a 5xx or 429): worth asking
/// whether the cluster is still there.
pub const CLUSTER_UNAVAILABLE: &str = "ClusterUnavailable";

fn backend_failure(step: &str, e: BackendError) -> (String, String) {
    let reason = match e {
        BackendError::Conflict { .. } => "Conflict",
        BackendError::Forbidden { .. } => "Forbidden",
        BackendError::Invalid { .. } => "ApplyRejected",
        BackendError::NamespaceTerminating { .. } => "NamespaceTerminating",
        BackendError::Transient(_) => CLUSTER_UNAVAILABLE,
        BackendError::OverBudget { .. } => "OverBudget",
        _ => "ApplyFailed",
    };
    (reason.to_string(), format!("{step}: {e}"))
}

/// A failure after part of a response reached the cluster: the message says
/// what was done before it, so the Event tells the whole story. The next
/// attempt starts again from a fresh read.
fn partial_failure(step: &str, e: BackendError, done: &[Change]) -> (String, String) {
    let (reason, message) = backend_failure(step, e);
    let writes: Vec<String> = done
        .iter()
        .filter(|c| !matches!(c, Change::Event { .. }))
        .map(ToString::to_string)
        .collect();
    if writes.is_empty() {
        return (reason, message);
    }
    (
        reason,
        format!(
            "{message} (partial apply: {} done before this failed; the rest was not applied and the reconcile is retried)",
            writes.join(", ")
        ),
    )
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

/// Which kind of refusal each error is: when the directory tries the
/// version again.
impl From<EngineError> for Refused {
    fn from(error: EngineError) -> Self {
        let why = match &error {
            EngineError::Watch { .. } => Refusal::Unwatchable,
            EngineError::ClusterScopedFromNamespaced { .. } => Refusal::Broken,
            EngineError::Taken(_) | EngineError::NotLoaded(_) => Refusal::Conflict,
        };
        Refused::new(why, error)
    }
}
