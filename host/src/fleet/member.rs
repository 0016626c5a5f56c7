//! One engaged member cluster: its engine (watches, cache, apply, queues)
//! and the task that keeps the member's plugins in line with the fleet's
//! and dispatches its reconciles.
//!
//! Why a task per member: everything that can wait on a cluster (a plugin's
//! first lists, a slow apply, an unreachable API server) then waits inside
//! that member only. Every other member keeps serving, and a member that is
//! stopped takes its watches, caches and queues with it.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reconciler_contract::ClusterInfo;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::cache_budget::{CacheBudget, DEFAULT_MAX_OBJECTS};
use crate::cluster::ClusterBackend;
use crate::cluster::clock::rfc3339;
use crate::cluster::{Clock, RealClock};
use crate::engine::dispatch::{Dispatcher, OnFinished, Wake};
use crate::engine::journal::Journal;
use crate::engine::record::log_record;
use crate::engine::shadow_book::ShadowBook;
use crate::engine::shard_selection::ShardSelection;
use crate::engine::{Engine, KeyFilter, ReconcileRecord, ServeScope};
use crate::golden::recorder::CaseRecorder;
use crate::plugin::LoadedPlugin;
use crate::plugin::candidates::Candidates;

/// The shortest time between two probes that failed requests ask for.
const MIN_PROBE_GAP: Duration = Duration::from_secs(1);

/// Asks a member's API server whether it answers: `Err` says why not.
pub type Probe =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync>;

/// Says something about a member where its source's readers see it (an
/// Event on its Secret): whether it is a warning, the reason, the note.
pub type Announce = Arc<dyn Fn(bool, &str, String) + Send + Sync>;

/// What a member's source gives it beside its client.
#[derive(Clone, Default)]
pub struct Hooks {
    /// Asks its API server whether it answers.
    pub probe: Option<Probe>,
    /// Tells its source's readers what became of it.
    pub announce: Option<Announce>,
}

/// Turns true once a stopped member's reconciles have all ended: what a
/// member engaged in its place waits for before it reconciles anything.
pub type Stopped = tokio::sync::watch::Receiver<bool>;

/// Told of a finished reconcile: the member's name, the record, how long
/// it took.
pub type MemberFinished = Arc<dyn Fn(&str, &ReconcileRecord, Duration) + Send + Sync>;

/// What a member is, as its source describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Where it came from: `local`, `secret ns/name`, `file path`.
    pub source: String,
    /// The API server's address, as its kubeconfig names it.
    pub server: String,
}

/// How every member serves: the same for all of them.
#[derive(Clone)]
pub struct Settings {
    pub scope: ServeScope,
    pub coalesce: Duration,
    /// Sandbox calls at once, per member: each cluster has a share of its
    /// own, so one busy member cannot take every slot.
    pub instances: usize,
    /// How long a plugin may take to start on a member (its first lists).
    pub start_timeout: Duration,
    /// How often the member's API server is asked whether it answers.
    pub probe_every: Duration,
    /// The longest wait between two attempts at a plugin that did not start.
    pub max_backoff: Duration,
    /// Told of every finished reconcile (metrics), with the member's name.
    pub on_finished: Option<MemberFinished>,
    /// Asked before every dispatch: a reconcile starts only while it says
    /// yes (the host still holds its Lease).
    pub gate: Option<Arc<dyn Fn() -> bool + Send + Sync>>,
    /// Writes every reconcile as a golden case.
    pub recorder: Option<Arc<CaseRecorder>>,
    /// Which of a member's primaries this replica may reconcile, given the
    /// member's name (`run --sharding`); `None`: all.
    pub ownership: Option<MemberOwnership>,
    /// The most objects one member may cache (`None`: no bound). Past it
    /// the member pauses (its watches stop and its cache is freed) and is
    /// tried again after `max_backoff`, while the others keep serving.
    pub cache_budget: Option<CacheBudget>,
    /// The candidates the plugins directory runs in shadow, read by every
    /// member's engine, and the one book they record into.
    pub candidates: Arc<Candidates>,
    pub shadow: Arc<ShadowBook>,
    /// The process's decision journal, every member's reconciles in it.
    pub journal: Arc<Journal>,
}

/// Gives, for a member's name, which of its primaries this replica owns.
pub type MemberOwnership = Arc<dyn Fn(&str) -> MemberShare + Send + Sync>;

/// This replica's share of one member: the primaries it may reconcile now,
/// and the shard label it watches them and their children by.
pub struct MemberShare {
    pub owns: KeyFilter,
    pub selection: ShardSelection,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            scope: ServeScope::default(),
            coalesce: Duration::ZERO,
            instances: 4,
            start_timeout: Duration::from_secs(60),
            probe_every: Duration::from_secs(10),
            max_backoff: Duration::from_secs(300),
            on_finished: None,
            gate: None,
            recorder: None,
            ownership: None,
            cache_budget: Some(CacheBudget::given(DEFAULT_MAX_OBJECTS)),
            candidates: Candidates::new(),
            shadow: Arc::new(ShadowBook::default()),
            journal: Arc::new(Journal::default()),
        }
    }
}

/// A member as `/clusters` shows it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    pub name: String,
    pub source: String,
    pub server: String,
    pub labels: BTreeMap<String, String>,
    pub engaged_since: String,
    /// Its API server answers and every plugin meant for it serves.
    pub ready: bool,
    pub last_error: Option<String>,
    pub last_error_at: Option<String>,
    pub objects_cached: usize,
    pub plugins_running: Vec<String>,
    /// Plugins meant for this member that do not serve yet, and why.
    pub plugins_waiting: BTreeMap<String, String>,
    /// Why the member serves nothing for now (its cache outgrew
    /// `--member-cache-max-objects`), and when it is tried again.
    pub paused: Option<String>,
}

/// What the member's task shares with the fleet.
struct State {
    /// The plugins were brought in line once (served or found waiting).
    aligned: bool,
    reachable: bool,
    last_error: Option<(String, i64)>,
    waiting: BTreeMap<String, String>,
    paused: Option<String>,
}

/// The plugins the fleet wants this member to serve now.
pub type Wanted = Arc<dyn Fn(&BTreeMap<String, String>) -> Vec<Arc<LoadedPlugin>> + Send + Sync>;

/// An engaged member. Dropping it stops its task; [`Member::stop`] lets
/// the reconciles in flight finish first.
pub struct Member<B: ClusterBackend> {
    identity: Identity,
    /// Replaced by a fresh one when the member pauses, so the old one's
    /// watches and cache go.
    engine: Arc<Mutex<Arc<Engine<B>>>>,
    engaged_at: i64,
    state: Arc<Mutex<State>>,
    nudge: mpsc::UnboundedSender<()>,
    stop: Option<oneshot::Sender<Duration>>,
    /// Ends with how many reconciles its stop abandoned.
    task: Option<JoinHandle<usize>>,
}

impl<B: ClusterBackend + 'static> Member<B> {
    /// Starts serving `backend` as the member `identity`: the task adds the
    /// plugins `wanted` names, retries those that cannot start with
    /// backoff, and dispatches reconciles while `probe` says the API server
    /// answers. Returns at once: nothing here waits on the cluster.
    pub fn engage(
        identity: Identity,
        backend: Arc<B>,
        settings: &Settings,
        wanted: Wanted,
        hooks: Hooks,
        after: Option<Stopped>,
    ) -> Self {
        let engine = Arc::new(Mutex::new(new_engine(&identity, &backend, settings)));
        let state = Arc::new(Mutex::new(State {
            aligned: false,
            reachable: true,
            last_error: None,
            waiting: BTreeMap::new(),
            paused: None,
        }));
        let (nudge, nudged) = mpsc::unbounded_channel();
        let (stop, stopped) = oneshot::channel();
        let span = tracing::info_span!("cluster", cluster = %identity.name);
        let serving = Serving {
            identity: identity.clone(),
            backend,
            engine: engine.clone(),
            state: state.clone(),
            settings: settings.clone(),
            wanted,
            hooks,
            after,
        };
        let task = tokio::spawn(serve(serving, nudged, stopped).instrument(span));
        tracing::info!(
            cluster = %identity.name,
            source = %identity.source,
            server = %identity.server,
            "engaged cluster {}",
            identity.name
        );
        Self {
            identity,
            engine,
            engaged_at: RealClock.now_millis(),
            state,
            nudge,
            stop: Some(stop),
            task: Some(task),
        }
    }
}

impl<B: ClusterBackend> Member<B> {
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The engine serving the member now (a new one after a pause).
    pub fn engine(&self) -> Arc<Engine<B>> {
        self.engine
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The fleet's plugins changed: the task brings this member in line.
    pub fn nudge(&self) {
        let _ = self.nudge.send(());
    }

    /// Stops the task after the reconciles in flight finish (up to
    /// `within`), and waits for it.
    ///
    /// Returns how many reconciles were abandoned. A task that panicked
    /// counts as one: what it left running is not known.
    pub async fn stop(mut self, within: Duration) -> usize {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(within);
        }
        match self.task.take() {
            Some(task) => task.await.unwrap_or(1),
            None => 0,
        }
    }

    /// Whether the task has brought the plugins in line once: each one
    /// meant for this member serves, or waits saying why.
    pub fn aligned(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).aligned
    }

    pub fn status(&self) -> MemberStatus {
        let engine = self.engine();
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let running: Vec<String> = engine
            .plugins()
            .iter()
            .map(|p| p.name().to_string())
            .collect();
        MemberStatus {
            name: self.identity.name.clone(),
            source: self.identity.source.clone(),
            server: self.identity.server.clone(),
            labels: self.identity.labels.clone(),
            engaged_since: rfc3339(self.engaged_at),
            ready: state.reachable && state.waiting.is_empty() && state.paused.is_none(),
            last_error: state.last_error.as_ref().map(|(e, _)| e.clone()),
            last_error_at: state.last_error.as_ref().map(|(_, at)| rfc3339(*at)),
            objects_cached: engine.cache().counts_by_kind().iter().map(|(_, n)| n).sum(),
            plugins_running: running,
            plugins_waiting: state.waiting.clone(),
            paused: state.paused.clone(),
        }
    }
}

impl<B: ClusterBackend> Drop for Member<B> {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// A member's engine as `settings` say, empty.
fn new_engine<B: ClusterBackend + 'static>(
    identity: &Identity,
    backend: &Arc<B>,
    settings: &Settings,
) -> Arc<Engine<B>> {
    let mut engine = Engine::scoped(backend.clone(), Arc::new(RealClock), settings.scope.clone())
        .with_instance_pool(settings.instances)
        .with_coalescing(settings.coalesce)
        .with_shadow(settings.candidates.clone(), settings.shadow.clone())
        .with_journal(settings.journal.clone())
        .with_cluster(ClusterInfo::with_labels(
            &identity.name,
            identity.labels.clone(),
        ));
    if let Some(budget) = settings.cache_budget {
        engine = engine.with_cache_budget(budget.max_objects);
    }
    if let Some(recorder) = &settings.recorder {
        engine = engine.with_recorder(recorder.clone());
    }
    if let Some(ownership) = &settings.ownership {
        let share = ownership(&identity.name);
        engine = engine
            .with_ownership(share.owns)
            .with_shard_selection(share.selection);
    }
    Arc::new(engine)
}

/// Everything the member's loop works with.
struct Serving<B: ClusterBackend> {
    identity: Identity,
    backend: Arc<B>,
    engine: Arc<Mutex<Arc<Engine<B>>>>,
    state: Arc<Mutex<State>>,
    settings: Settings,
    wanted: Wanted,
    hooks: Hooks,
    /// The stop of the member this one replaces: nothing is reconciled
    /// here until its reconciles are over.
    after: Option<Stopped>,
}

impl<B: ClusterBackend + 'static> Serving<B> {
    fn dispatcher(&self, engine: &Arc<Engine<B>>) -> Dispatcher<B> {
        let mut dispatcher = Dispatcher::new(engine.clone());
        if let Some(hook) = self.settings.on_finished.clone() {
            let name = self.identity.name.clone();
            let hook: OnFinished = Arc::new(move |record, took| hook(&name, record, took));
            dispatcher = dispatcher.on_finished(hook);
        }
        dispatcher
    }

    fn announce(&self, warning: bool, reason: &str, note: String) {
        if let Some(announce) = &self.hooks.announce {
            announce(warning, reason, note);
        }
    }

    /// The cache outgrew its budget: the reconciles in flight finish, then
    /// the engine (its watches, queues and cache) is dropped for an empty
    /// one, and the member serves nothing until `retry_in` has passed.
    async fn pause(&self, dispatcher: &mut Dispatcher<B>, retry_in: Duration) -> Arc<Engine<B>> {
        let budget = self
            .settings
            .cache_budget
            .map_or_else(|| "its cache budget".to_string(), |b| b.to_string());
        let name = &self.identity.name;
        let note = format!(
            "cluster {name} paused: it has more objects of the kinds its plugins watch than {budget}; its watches stopped and its cache was freed, the other clusters keep serving; tried again in {} s",
            retry_in.as_secs()
        );
        tracing::warn!(cluster = %name, "{note}");
        self.announce(true, "Paused", note.clone());
        {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            state.paused = Some(note.clone());
            state.last_error = Some((note, RealClock.now_millis()));
        }
        let (records, _) = dispatcher.drain(PAUSE_DRAIN, || self.live()).await;
        records.iter().for_each(log_record);
        let fresh = new_engine(&self.identity, &self.backend, &self.settings);
        let old = std::mem::replace(
            &mut *self.engine.lock().unwrap_or_else(|e| e.into_inner()),
            fresh.clone(),
        );
        drop(old);
        crate::support::heap_trim::release_freed_memory();
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .waiting
            .clear();
        fresh
    }

    /// Asks the API server whether it answers, within one probe period;
    /// returns whether the member came back.
    async fn probe_once(&self, probe: &Probe) -> bool {
        let result = tokio::time::timeout(self.settings.probe_every, probe())
            .await
            .unwrap_or_else(|_| Err("the API server did not answer in time".into()));
        note_probe(&self.identity, &self.state, result)
    }

    /// Disengaged: the reconciles in flight finish, up to `within` and
    /// while the host holds its Lease; those still running then are
    /// abandoned (aborted and waited for), and said so. Returns how many.
    async fn finish(&self, dispatcher: &mut Dispatcher<B>, within: Duration) -> usize {
        let (records, abandoned) = dispatcher.drain(within, || self.live()).await;
        records.iter().for_each(log_record);
        if abandoned > 0 {
            tracing::warn!(
                "{abandoned} reconcile(s) in cluster {} abandoned on disengage: stopped at their next step, none runs any more",
                self.identity.name
            );
        }
        abandoned
    }

    /// Whether the host still holds the Lease it reconciles under (always,
    /// without one).
    fn live(&self) -> bool {
        self.settings.gate.as_ref().is_none_or(|gate| gate())
    }

    /// The pause is over: the plugins are tried again.
    fn resume(&self) {
        let name = &self.identity.name;
        let note = format!("cluster {name} is tried again after its pause");
        tracing::info!(cluster = %name, "{note}");
        self.announce(false, "Resumed", note);
        self.state.lock().unwrap_or_else(|e| e.into_inner()).paused = None;
    }
}

/// How long a pausing member's reconciles in flight may finish.
const PAUSE_DRAIN: Duration = Duration::from_secs(10);

/// The member's loop. See the module documentation.
async fn serve<B: ClusterBackend + 'static>(
    serving: Serving<B>,
    mut nudged: mpsc::UnboundedReceiver<()>,
    mut stopped: oneshot::Receiver<Duration>,
) -> usize {
    let Serving {
        identity,
        state,
        settings,
        wanted,
        ..
    } = &serving;
    let probe = serving.hooks.probe.clone();
    let mut after = serving.after.clone();
    let mut engine = serving
        .engine
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut dispatcher = serving.dispatcher(&engine);
    let mut backoff = Backoff::new(settings.max_backoff);
    let mut pause_backoff =
        Backoff::starting(settings.max_backoff.min(PAUSE_FIRST), settings.max_backoff);
    let mut retry_at: Option<tokio::time::Instant> = None;
    let mut paused_until: Option<tokio::time::Instant> = None;
    let mut dirty = true;
    let mut probe_timer = tokio::time::interval(settings.probe_every);
    probe_timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_probe = tokio::time::Instant::now();
    loop {
        if dirty && paused_until.is_none() {
            dirty = false;
            let waiting = align_plugins(&engine, &wanted(&identity.labels), settings, state).await;
            retry_at = if waiting {
                Some(tokio::time::Instant::now() + backoff.next())
            } else {
                backoff.reset();
                None
            };
        }
        if paused_until.is_none() && engine.cache().over_budget() {
            let retry_in = pause_backoff.next();
            engine = serving.pause(&mut dispatcher, retry_in).await;
            dispatcher = serving.dispatcher(&engine);
            paused_until = Some(tokio::time::Instant::now() + retry_in);
            retry_at = None;
        }
        let reachable = state.lock().unwrap_or_else(|e| e.into_inner()).reachable;
        // An unreachable member's reconciles would only fail and back off:
        // its queue waits until the probe sees the server again. Nothing
        // starts once the Lease may be lost, or while the member is paused.
        let predecessor_over = after.as_ref().is_none_or(|stopped| *stopped.borrow());
        let may_start = predecessor_over && serving.live();
        let serving_now = reachable && paused_until.is_none();
        if serving_now && may_start {
            dispatcher.dispatch();
        }
        tokio::select! {
            woke = dispatcher.wake(), if serving_now => {
                if let Wake::Finished(record) = woke {
                    log_record(&record);
                    // A request the cluster did not answer: ask now whether
                    // it is still there, rather than at the next probe (at
                    // most once a second, however many fail).
                    if record.cluster_unavailable() && last_probe.elapsed() >= MIN_PROBE_GAP {
                        probe_timer.reset_immediately();
                    }
                }
            }
            Some(()) = nudged.recv() => dirty = true,
            () = predecessor_stopped(&mut after), if !predecessor_over => {
                tracing::info!(cluster = %identity.name, "the replaced engine's reconciles are over: reconciling here now");
            }
            () = sleep_until(retry_at) => dirty = true,
            () = sleep_until(paused_until) => {
                paused_until = None;
                serving.resume();
                dirty = true;
            }
            _ = probe_timer.tick(), if probe.is_some() => {
                last_probe = tokio::time::Instant::now();
                let probe = probe.as_ref().expect("checked by the guard");
                if serving.probe_once(probe).await {
                    // Back: plugins that waited on it are tried again now.
                    dirty = true;
                    backoff.reset();
                }
            }
            within = &mut stopped => {
                return serving.finish(&mut dispatcher, within.unwrap_or(Duration::ZERO)).await;
            }
        }
    }
}

/// Waits for the replaced member's stop to be over. Its sender goes only
/// after saying so, so gone unsaid it is over too.
async fn predecessor_stopped(after: &mut Option<Stopped>) {
    match after {
        Some(stopped) => {
            let _ = stopped.wait_for(|over| *over).await;
        }
        None => std::future::pending().await,
    }
    *after = None;
}

/// The first pause of a member whose cache outgrew its budget; each pause
/// after doubles it, up to `--kind-retry-secs`.
const PAUSE_FIRST: Duration = Duration::from_secs(60);

/// Adds, replaces and removes plugins so the engine serves exactly
/// `wanted`; returns whether some could not start (to try again later).
async fn align_plugins<B: ClusterBackend>(
    engine: &Engine<B>,
    wanted: &[Arc<LoadedPlugin>],
    settings: &Settings,
    state: &Mutex<State>,
) -> bool {
    let serving: BTreeMap<String, Arc<LoadedPlugin>> = engine
        .plugins()
        .into_iter()
        .map(|p| (p.name().to_string(), p))
        .collect();
    for name in serving.keys() {
        if !wanted.iter().any(|p| p.name() == name) {
            engine.remove_plugin(name);
            tracing::info!(plugin = %name, "stopped serving plugin {name} here");
        }
    }
    let mut waiting = BTreeMap::new();
    for plugin in wanted {
        let name = plugin.name().to_string();
        let started = match serving.get(&name) {
            Some(current) if current.sha256() == plugin.sha256() => continue,
            Some(_) => tokio::time::timeout(
                settings.start_timeout,
                engine.replace_plugin(plugin.clone()),
            )
            .await
            .map(|r| r.map(|_| ())),
            None => {
                tokio::time::timeout(settings.start_timeout, engine.add_plugin(plugin.clone()))
                    .await
            }
        };
        let why = match started {
            Ok(Ok(())) => {
                tracing::info!(plugin = %name, "serving plugin {name} here");
                continue;
            }
            Ok(Err(e)) => {
                if let crate::engine::EngineError::Watch {
                    source: crate::cluster::BackendError::OverBudget { .. },
                    ..
                } = &e
                {
                    engine.cache().mark_over_budget();
                }
                e.to_string()
            }
            Err(_) => format!(
                "its kinds were not listed within {}s",
                settings.start_timeout.as_secs()
            ),
        };
        waiting.insert(name, why);
    }
    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
    for (name, why) in &waiting {
        if state.waiting.get(name) != Some(why) {
            tracing::warn!(plugin = %name, "plugin {name} cannot start here yet, retried with backoff: {why}");
        }
        state.last_error = Some((format!("plugin {name}: {why}"), RealClock.now_millis()));
    }
    state.waiting = waiting;
    state.aligned = true;
    !state.waiting.is_empty()
}

/// Records what the probe said; returns whether the member came back.
fn note_probe(identity: &Identity, state: &Mutex<State>, result: Result<(), String>) -> bool {
    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
    match result {
        Ok(()) => {
            let back = !state.reachable;
            if back {
                tracing::info!(
                    "cluster {} answers again: its reconciles resume",
                    identity.name
                );
            }
            state.reachable = true;
            back
        }
        Err(why) => {
            if state.reachable {
                tracing::warn!(
                    "cluster {} does not answer, its reconciles wait until it does: {why}",
                    identity.name
                );
            }
            state.reachable = false;
            state.last_error = Some((format!("unreachable: {why}"), RealClock.now_millis()));
            false
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Exponential backoff from one second, doubling to a ceiling.
struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_secs(1);

    fn new(max: Duration) -> Self {
        Self::starting(Self::FIRST, max)
    }

    fn starting(first: Duration, max: Duration) -> Self {
        Self { next: first, max }
    }

    fn next(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(self.max);
        now
    }

    fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}
