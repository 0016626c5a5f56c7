//! A plugin ready to serve: validated metadata, resolved limits, and a
//! pre-instantiated component from which each call gets a fresh instance.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use reconciler_contract::{ClusterInfo, MapRule, PluginMetadata};
use reconciler_contract::{
    Event, EventType, Hints, ObjectRef, ReadKind, ReconcileRequest, ReconcileResponse,
};
use wasmtime::component::ResourceTable;
use wasmtime::{Store, Trap};
use wasmtime_wasi::WasiCtxBuilder;

use super::bindings::{PluginPre, guest, kind_from_wit, types};
use super::call_clock::{CallClock, MonotonicClock, WallClock};
use super::call_random::{CallRandom, CallSubject, ObjectVersion, RandomKey};
use super::call_state::{CallState, MemoryCap, ReconcileScope};
use super::call_traps::NeedsBlockingThread;
use super::epoch_ticker::{EPOCH_TICK, EpochTicker};
use super::errors::CallError;
use super::guest_output::{GuestOutput, OutputBudget};
use super::idle_release::{ForCall, Prepared};
use super::limits::SandboxLimits;
use super::memory_budget::{MemoryAccount, MemoryCharge};
use super::object_reader::ObjectReader;
use super::response_limits::{ResponseCounts, check_counts, check_response_limits};
use super::response_rules::{ValidResponse, validate_response};

/// A loaded plugin. Cheap to share; every call is independent.
pub struct LoadedPlugin {
    metadata: Arc<PluginMetadata>,
    limits: SandboxLimits,
    path: PathBuf,
    sha256: String,
    /// Whose random streams its calls draw: its own content hash, unless
    /// it is a candidate compared with the version serving
    /// ([`Self::drawing_random_as`]).
    random_identity: Option<String>,
    /// Its compiled component, made ready to instantiate; swapped for a
    /// fresh copy once idle (idle_release.rs).
    prepared: Arc<Prepared>,
    pub(super) random_key: RandomKey,
    /// What the plugin declared of admission at load; none serves none.
    pub(super) admission: Option<reconciler_contract::AdmissionSettings>,
    /// Advances the epoch while our calls run: their deadlines count its
    /// ticks.
    pub(super) ticker: Arc<EpochTicker>,
    /// What its reconciles are charged to in the host's memory budget.
    pub(super) memory: Arc<MemoryAccount>,
    /// What its admission calls are charged to: one account for every
    /// plugin's, so reconciles never spend what admission counts on.
    pub(super) admission_memory: Arc<MemoryAccount>,
}

/// What a loaded plugin keeps of the sandbox it was loaded into.
pub(crate) struct FromSandbox {
    pub random_key: RandomKey,
    pub ticker: Arc<EpochTicker>,
    /// Its reconciles' account in the host's memory budget.
    pub memory: Arc<MemoryAccount>,
    /// The account of every plugin's admission calls.
    pub admission_memory: Arc<MemoryAccount>,
}

/// One object to reconcile, as the host observed it.
pub struct ReconcileInput {
    pub request: ReconcileRequest,
    /// `metadata.namespace` of the primary: confines what may be applied,
    /// and where same-namespace read kinds may be read.
    pub primary_namespace: Option<String>,
    /// `namespace/name` of the primary, for logs.
    pub object: String,
    pub reader: Arc<dyn ObjectReader>,
    pub now_millis: i64,
    /// The cluster the primary lives in, which the plugin may ask for.
    pub cluster: Arc<ClusterInfo>,
}

/// What a brief reconcile came to.
pub enum Attempt {
    /// It finished (or failed) within its budget.
    Done(Result<ValidResponse, CallError>),
    /// It ran past [`BRIEF_TICKS`]; nothing of it counts.
    RanLong(ReconcileInput),
}

/// Epoch ticks a brief call may run: the deadline falls on a tick, so one
/// tick could end a call that had only just started.
pub const BRIEF_TICKS: u64 = 2;

/// How long one call may run before it is stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Budget {
    /// The plugin's own timeout; running past it is the plugin's failure.
    Full,
    /// [`BRIEF_TICKS`]; running past it says only that the call is long.
    Brief,
}

impl LoadedPlugin {
    pub(crate) fn new(
        metadata: PluginMetadata,
        limits: SandboxLimits,
        path: PathBuf,
        sha256: String,
        prepared: Arc<Prepared>,
        sandbox: FromSandbox,
    ) -> Self {
        Self {
            metadata: Arc::new(metadata),
            limits,
            path,
            sha256,
            random_identity: None,
            prepared,
            random_key: sandbox.random_key,
            admission: None,
            ticker: sandbox.ticker,
            memory: sandbox.memory,
            admission_memory: sandbox.admission_memory,
        }
    }

    /// The component to instantiate for a call starting now, held while
    /// the call runs.
    pub(super) fn pre(&self) -> ForCall<'_> {
        self.prepared.for_call()
    }

    pub fn metadata(&self) -> &PluginMetadata {
        &self.metadata
    }

    pub fn name(&self) -> &str {
        &self.metadata.name
    }

    pub fn limits(&self) -> SandboxLimits {
        self.limits
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// SHA-256 of the Wasm file, hex.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// A copy of this version that draws its random streams as `other`'s
    /// are drawn, so two versions given the same object draw the same
    /// numbers: a plan or a shadow compares their decisions, not their
    /// luck.
    pub fn drawing_random_as(&self, other: &LoadedPlugin) -> LoadedPlugin {
        LoadedPlugin {
            metadata: self.metadata.clone(),
            limits: self.limits,
            path: self.path.clone(),
            sha256: self.sha256.clone(),
            random_identity: Some(other.sha256.clone()),
            prepared: self.prepared.clone(),
            random_key: self.random_key.clone(),
            admission: self.admission.clone(),
            ticker: self.ticker.clone(),
            memory: self.memory.clone(),
            admission_memory: self.admission_memory.clone(),
        }
    }

    /// Whether the guest memory budget is more than half spent: work that
    /// may be skipped (a shadow call) is, so calls that must run find room.
    pub fn guest_memory_pressed(&self) -> bool {
        let budget = self.memory.budget();
        budget.used_bytes().saturating_mul(2) > budget.total_bytes()
    }

    /// Runs one reconcile in a fresh instance and validates the response.
    /// Nothing is applied here: an `Ok` is a response that may be applied
    /// whole, an `Err` means nothing of this call must be.
    pub fn reconcile(&self, input: ReconcileInput) -> Result<ValidResponse, CallError> {
        match self.reconcile_within(input, Budget::Full) {
            Attempt::Done(answer) => answer,
            Attempt::RanLong(_) => unreachable!("only a brief call is cut short"),
        }
    }

    /// As [`Self::reconcile`], if the call finishes within [`BRIEF_TICKS`]
    /// epoch ticks (10 to 20 ms). One that runs longer is cut short, what
    /// it printed is dropped, and its input comes back in `RanLong`, to be
    /// made again with the full deadline where a long call does no harm.
    /// A call is a function of its input (its own clock, randomness seeded
    /// by the object's version), so the second call sees what the first
    /// did. The host calls this on its async workers, where a call may run
    /// only if it is short.
    pub fn reconcile_briefly(&self, input: ReconcileInput) -> Attempt {
        self.reconcile_within(input, Budget::Brief)
    }

    fn reconcile_within(&self, input: ReconcileInput, budget: Budget) -> Attempt {
        let ReconcileInput {
            request,
            primary_namespace,
            object,
            reader,
            now_millis,
            cluster,
        } = input;
        let version = ObjectVersion::of_primary(&request.primary);
        let call = Call {
            limits: self.limits,
            scope: Some(ReconcileScope {
                metadata: self.metadata.clone(),
                reader: reader.clone(),
                primary_namespace: primary_namespace.clone(),
            }),
            now_millis,
            cluster: cluster.clone(),
            plugin: self.name(),
            object: &object,
            random: CallRandom::new(
                &self.random_key,
                self.random_identity.as_deref().unwrap_or(&self.sha256),
                CallSubject::Object(&version),
            ),
            ticker: &self.ticker,
            memory: self.memory.charge(),
        };
        let request = guest::ReconcileRequest {
            primary: request.primary,
            children: request.children,
            deleting: request.deleting,
        };
        let result = call_fresh_within(&self.pre(), call, budget, |p, store| {
            p.reconciler_plugin_reconciler()
                .call_reconcile(store, &request)
        });
        let Some(result) = result else {
            return Attempt::RanLong(ReconcileInput {
                request: ReconcileRequest {
                    primary: request.primary,
                    children: request.children,
                    deleting: request.deleting,
                },
                primary_namespace,
                object,
                reader,
                now_millis,
                cluster,
            });
        };
        Attempt::Done(self.checked_response(result, primary_namespace.as_deref()))
    }

    /// The guest's answer, within the response limits and rules.
    fn checked_response(
        &self,
        result: Result<Result<guest::ReconcileResponse, String>, CallError>,
        primary_namespace: Option<&str>,
    ) -> Result<ValidResponse, CallError> {
        let response = result?.map_err(CallError::Plugin)?;
        // Before the lists are copied into the host's own types: a plugin
        // may return millions of Events in a few MiB of its memory.
        check_counts(
            ResponseCounts {
                events: response.events.len(),
                applies: response.apply.len(),
                deletes: response.delete.len(),
            },
            &self.limits,
        )?;
        let response = response_from_wit(response);
        let bytes = response.text_len();
        if bytes > self.limits.output_bytes {
            return Err(CallError::OutputTooLarge {
                bytes,
                limit_bytes: self.limits.output_bytes,
            });
        }
        check_response_limits(&response, &self.limits)?;
        Ok(validate_response(
            &self.metadata,
            primary_namespace,
            response,
        )?)
    }

    /// Calls `metadata` in a fresh instance under the host's default limits.
    pub(super) fn call_metadata(
        pre: &PluginPre<CallState>,
        call: Call<'_>,
    ) -> Result<PluginMetadata, CallError> {
        call_fresh(pre, call, |p, store| {
            p.reconciler_plugin_reconciler().call_metadata(store)
        })
        .map(metadata_from_wit)
    }
}

/// Everything one call's store is made from.
pub(super) struct Call<'a> {
    pub(super) limits: SandboxLimits,
    pub(super) scope: Option<ReconcileScope>,
    pub(super) now_millis: i64,
    /// What the `cluster` import answers.
    pub(super) cluster: Arc<ClusterInfo>,
    pub(super) plugin: &'a str,
    pub(super) object: &'a str,
    pub(super) random: CallRandom,
    /// Keeps the epoch advancing while the call runs.
    pub(super) ticker: &'a EpochTicker,
    /// Its charge to the host's memory budget.
    pub(super) memory: MemoryCharge,
}

impl<'a> Call<'a> {
    /// A call made while the plugin loads (its metadata, its admission
    /// declaration): no object, no reconcile scope, the epoch's clock, and
    /// the local cluster.
    pub(super) fn at_load(
        limits: SandboxLimits,
        plugin: &'a str,
        random: CallRandom,
        ticker: &'a EpochTicker,
        memory: MemoryCharge,
    ) -> Self {
        Self {
            limits,
            scope: None,
            now_millis: 0,
            cluster: Arc::new(ClusterInfo::local()),
            plugin,
            object: "-",
            random,
            ticker,
            memory,
        }
    }
}

pub(super) fn new_store(
    pre: &PluginPre<CallState>,
    call: Call<'_>,
) -> (Store<CallState>, GuestOutput) {
    let limits = call.limits;
    let output = GuestOutput::new(limits.stdio_bytes);
    let clock = CallClock::new(call.now_millis, limits.timeout);
    // No preopened directories, environment, arguments, stdin or network;
    // clocks and randomness of the call's own (call_clock.rs,
    // call_random.rs).
    let wasi = WasiCtxBuilder::new()
        .stdout(output.stdout.clone())
        .stderr(output.stderr.clone())
        .wall_clock(WallClock(clock.clone()))
        .monotonic_clock(MonotonicClock(clock.clone()))
        .secure_random(call.random.secure)
        .insecure_random(call.random.insecure)
        .insecure_random_seed(call.random.insecure_seed)
        // One request for random bytes is allocated on the host before it
        // reaches the guest: no more than the guest could hold.
        .max_random_size(limits.memory_bytes.min(MAX_RANDOM_BYTES) as u64)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .build();
    let mut table = ResourceTable::new();
    // Every timer, stream and pollable a plugin opens is a host allocation;
    // a reconcile needs a handful. wasmtime's default allows a million.
    table.set_max_capacity(MAX_RESOURCES);
    let state = CallState {
        wasi,
        table,
        limiter: MemoryCap {
            limit_bytes: limits.memory_bytes,
            hit: false,
            charge: call.memory,
            budget_hit: false,
        },
        scope: call.scope,
        cluster: call.cluster,
        clock,
        deadline: Instant::now() + limits.timeout,
        waited_past_deadline: false,
        blocking_allowed: true,
        output_budget: OutputBudget::new(limits.stdio_bytes),
        list_max_bytes: limits.memory_bytes,
        plugin: call.plugin.to_string(),
        object: call.object.to_string(),
    };
    let mut store = Store::new(pre.engine(), state);
    store.limiter(|s| &mut s.limiter);
    let ticks = limits
        .timeout
        .as_millis()
        .div_ceil(EPOCH_TICK.as_millis())
        .max(1);
    store.set_epoch_deadline(u64::try_from(ticks).unwrap_or(u64::MAX));
    store.epoch_deadline_trap();
    (store, output)
}

/// One call in a fresh instance: the store for `call`, the instance, `f`
/// on it, a trap or a limit named as such ([`classify`]), and the guest's
/// output emitted whatever happened.
pub(super) fn call_fresh<T>(
    pre: &PluginPre<CallState>,
    call: Call<'_>,
    f: impl FnOnce(&super::bindings::PluginInstance, &mut Store<CallState>) -> wasmtime::Result<T>,
) -> Result<T, CallError> {
    match call_fresh_within(pre, call, Budget::Full, f) {
        Some(result) => result,
        None => unreachable!("only a brief call is cut short"),
    }
}

/// [`call_fresh`] under `budget`. `None`: a brief call ran past its budget;
/// what it printed is dropped, as the call will be made again.
pub(super) fn call_fresh_within<T>(
    pre: &PluginPre<CallState>,
    call: Call<'_>,
    budget: Budget,
    f: impl FnOnce(&super::bindings::PluginInstance, &mut Store<CallState>) -> wasmtime::Result<T>,
) -> Option<Result<T, CallError>> {
    let (limits, plugin, object) = (call.limits, call.plugin, call.object);
    let ticker = call.ticker;
    let _running = ticker.running();
    let (mut store, output) = new_store(pre, call);
    if budget == Budget::Brief {
        store.set_epoch_deadline(BRIEF_TICKS);
        store.data_mut().blocking_allowed = false;
    }
    let result = match pre.instantiate(&mut store) {
        Ok(p) => f(&p, &mut store),
        Err(e) if budget == Budget::Brief && cut_short(&e, &store) => return None,
        Err(e) => {
            return emitted(
                Err(CallError::Instantiate(format!("{e:#}"))),
                &mut store,
                &output,
                plugin,
                object,
            );
        }
    };
    let result = match result {
        Err(e) if budget == Budget::Brief && cut_short(&e, &store) => return None,
        other => other.map_err(|e| classify(e, &store, &output, limits)),
    };
    emitted(result, &mut store, &output, plugin, object)
}

/// Whether `error` ends a brief call without being its answer: a WASI
/// function that would have had to wait, or the epoch deadline and nothing
/// else (not a memory limit, not a wait refused past the call's own
/// deadline: both would end a second call the same way).
fn cut_short(error: &wasmtime::Error, store: &Store<CallState>) -> bool {
    let state = store.data();
    if error.downcast_ref::<NeedsBlockingThread>().is_some() {
        return true;
    }
    !state.limiter.hit
        && !state.limiter.budget_hit
        && !state.waited_past_deadline
        && error.downcast_ref::<Trap>() == Some(&Trap::Interrupt)
}

/// `result`, once the guest's output is emitted.
fn emitted<T>(
    result: Result<T, CallError>,
    store: &mut Store<CallState>,
    output: &GuestOutput,
    plugin: &str,
    object: &str,
) -> Option<Result<T, CallError>> {
    emit_output(store, output, plugin, object);
    Some(result)
}

/// WASI resources (streams, timers, pollables) one call may hold at once.
const MAX_RESOURCES: usize = 10_000;

/// wasmtime-wasi's own cap on one request for random bytes.
const MAX_RANDOM_BYTES: usize = 64 << 20;

/// What the guest printed, into the host log within the call's budget, and
/// one line saying what did not fit.
pub(super) fn emit_output(
    store: &mut Store<CallState>,
    output: &GuestOutput,
    plugin: &str,
    object: &str,
) {
    let budget = &mut store.data_mut().output_budget;
    output.emit(plugin, object, budget);
    budget.report(plugin, object);
}

/// Turns a failed call into the error a user can act on: a limit the host
/// enforced is named as such, rather than as the trap it caused.
pub(super) fn classify(
    error: wasmtime::Error,
    store: &Store<CallState>,
    output: &GuestOutput,
    limits: SandboxLimits,
) -> CallError {
    let limiter = &store.data().limiter;
    if limiter.hit {
        return CallError::MemoryLimit {
            limit_bytes: limits.memory_bytes,
        };
    }
    if limiter.budget_hit {
        return CallError::HostMemoryBudget {
            budget_bytes: limiter.charge.total_bytes(),
        };
    }
    if store.data().waited_past_deadline || error.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
        return CallError::Timeout {
            limit: limits.timeout,
        };
    }
    // Before the stdio cap: a long panic message fills stderr, and the
    // panic is what the user needs to hear about. Not a panic that only
    // reports the cap (std panics when a print fails).
    if let Some(panic) = output
        .panic()
        .filter(|p| !p.message.starts_with("failed printing to std"))
    {
        return CallError::Panic {
            location: panic.location,
            message: panic.message,
        };
    }
    if output.overflowed() {
        return CallError::StdioLimit {
            limit_bytes: limits.stdio_bytes,
        };
    }
    let message = match output.last_words() {
        Some(line) => format!("{line} ({})", root_cause(&error)),
        None => root_cause(&error),
    };
    CallError::Trap { message }
}

fn root_cause(error: &wasmtime::Error) -> String {
    match error.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => format!("{error:#}"),
    }
}

fn metadata_from_wit(m: types::PluginMetadata) -> PluginMetadata {
    PluginMetadata {
        name: m.name,
        version: m.version,
        primary: kind_from_wit(m.primary),
        owns: m.owns.into_iter().map(kind_from_wit).collect(),
        reads: m
            .reads
            .into_iter()
            .map(|r| ReadKind {
                kind: kind_from_wit(r.kind),
                maps_by: match r.maps_by {
                    types::MapRule::Label(k) => MapRule::Label(k),
                    types::MapRule::Annotation(k) => MapRule::Annotation(k),
                    types::MapRule::SameName => MapRule::SameName,
                    types::MapRule::None => MapRule::None,
                },
                metadata_only: r.metadata_only,
                same_namespace: r.same_namespace,
            })
            .collect(),
        writes: m.writes.into_iter().map(kind_from_wit).collect(),
        finalizer: m.finalizer,
        hints: Hints {
            max_concurrent_reconciles: m.hints.max_concurrent_reconciles,
            memory_limit_mib: m.hints.memory_limit_mib,
            timeout_ms: m.hints.timeout_ms,
            max_output_kib: m.hints.max_output_kib,
            max_events: m.hints.max_events,
            max_applies: m.hints.max_applies,
            max_deletes: m.hints.max_deletes,
        },
        // Not in the record: the `triggers` export fills it (0.2.3).
        triggers: Vec::new(),
    }
}

fn response_from_wit(r: guest::ReconcileResponse) -> ReconcileResponse {
    ReconcileResponse {
        apply: r.apply,
        delete: r
            .delete
            .into_iter()
            .map(|d| ObjectRef {
                api_version: d.api_version,
                kind: d.kind,
                namespace: d.namespace,
                name: d.name,
            })
            .collect(),
        status: r.status,
        events: r
            .events
            .into_iter()
            .map(|e| Event {
                event_type: match e.event_type {
                    guest::EventType::Normal => EventType::Normal,
                    guest::EventType::Warning => EventType::Warning,
                },
                reason: e.reason,
                message: e.message,
            })
            .collect(),
        requeue_after_ms: r.requeue_after_ms,
        finalized: r.finalized,
    }
}
