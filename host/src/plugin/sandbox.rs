//! The wasmtime engine every plugin runs on, and loading plugins into it.
//!
//! Settings, with their trade-offs:
//! - Epoch interruption for deadlines: one background thread bumps the epoch
//!   every [`EPOCH_TICK`] while a call runs (and sleeps while none does, so
//!   an idle host uses no CPU); each store traps once its deadline (in
//!   ticks) has passed. It costs a counter check on loop back-edges, far less than fuel,
//!   and bounds wall-clock time, which is what a stalled queue cares about.
//!   A deadline is therefore accurate to one tick.
//! - The pooling allocator: memories and tables for a fixed number of
//!   concurrent instances are reserved up front and reused, so a fresh
//!   instance per reconcile costs microseconds. Its slots are sized to the
//!   memory ceiling; more concurrent instances than `max_instances` fail to
//!   instantiate, so the engine starts at most
//!   [`Sandbox::reconcile_instances`] reconciles at once, shared fairly
//!   between plugins (`engine::instance_share`). One instance is kept for
//!   loading plugins (their `metadata` call) while others reconcile. On top
//!   of `max_instances`, the pool holds `admission_instances` for
//!   admission calls and one for the admission server's own loading, so
//!   reconciles holding every instance they may use never make an admission
//!   call fail (which a fail-closed plugin would turn into denied writes).
//! - A slot's memory stays resident between instances: when an instance is
//!   dropped, wasmtime finds the pages it wrote (the `PAGEMAP_SCAN` ioctl,
//!   Linux 6.7 and later) and copies the module's initial contents back
//!   over them, up to [`KEEP_RESIDENT`] bytes, instead of handing the pages
//!   to the kernel and faulting them in again on the next call. Every
//!   instance still starts from the module's initial memory, so nothing
//!   crosses from one reconcile to the next; what it costs is up to
//!   [`KEEP_RESIDENT`] of resident memory per slot that has been used.
//!   Where the ioctl is missing, wasmtime falls back to zeroing the first
//!   [`KEEP_RESIDENT`] bytes and releasing the rest, which costs more than
//!   it saves; the setting is then left off.
//! - Per-call caps (memory, deadline, output) come from [`HostLimits`]; the
//!   memory of all calls at once is charged to one budget, shared fairly
//!   between plugins and admission (`memory_budget.rs`).
//! - WASI's waiting functions are replaced by ones bounded by the call's
//!   deadline (`bounded_waits.rs`), its clocks by the call's own
//!   (`call_clock.rs`), and its randomness by streams derived from the
//!   plugin and the object (`call_random.rs`), so a call can neither hang
//!   nor differ between two runs of `simulate`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reconciler_contract::{AdmissionSettings, PluginMetadata};
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::admission_settings::check_settings;
use super::bindings::PluginPre;
use super::call_random::{CallRandom, CallSubject, RandomKey};
use super::call_state::CallState;
use super::compile_cache::{CompileCache, CompileSource};
use super::compiler::Compiler;
use super::contract_version::check_exports;
pub use super::epoch_ticker::EPOCH_TICK;
use super::epoch_ticker::EpochTicker;
use super::errors::{CallError, LoadError, LoadFailure};
use super::idle_release::{Fresh, IdleReleaser, Prepared};
use super::limits::{HostLimits, SandboxLimits};
use super::loaded::{Call, FromSandbox, LoadedPlugin};
use super::memory_budget::{MemoryAccount, MemoryBudget};
use super::metadata_rules::validate_metadata;

/// How much of a slot's linear memory is reset in place rather than
/// released: a plugin that writes more has the rest released as before. A
/// podset reconcile leaves 48 KiB written (its stack, data and heap); 2 and
/// 4 MiB measured no faster (BENCHMARKS.md, "One podset reconcile").
pub const KEEP_RESIDENT: usize = 1 << 20;

/// `RECONCILER_GUEST_PERFMAP=1` writes `/tmp/perf-PID.map`, so that `perf`
/// names the functions of every plugin the host runs (BENCHMARKS.md, "Where
/// a Python call's time goes").
pub const PERFMAP_ENV: &str = "RECONCILER_GUEST_PERFMAP";

/// The same for a slot's tables (function tables of a few thousand
/// entries).
const TABLE_KEEP_RESIDENT: usize = 64 << 10;

/// Admission calls running at once by default (the admission server waits
/// for one of these before calling a plugin). They come on top of
/// `max_instances`: see the module documentation.
pub const DEFAULT_ADMISSION_INSTANCES: u32 = 8;

/// Everything that configures the sandbox for one host.
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    pub limits: HostLimits,
    /// Where compiled components are kept; `None` compiles on every load.
    pub compile_cache: Option<PathBuf>,
    /// The bound on the compile cache's entries, least recently used going
    /// first. (`--compile-cache-max-mib`)
    pub compile_cache_max_mib: u64,
    /// Concurrent instances the pooling allocator holds (all plugins): the
    /// sandbox calls running at once, plus one for loading plugins. A call
    /// lasts microseconds, so 64 is far more than a small machine's cores
    /// can run, and enough that plugins whose calls run to their deadline
    /// cannot fill it alone (each gets a share while others wait); each
    /// slot reserves address space for the memory ceiling, not memory.
    /// (`--plugin-instances`)
    pub max_instances: u32,
    /// Instances kept for admission calls on top of `max_instances`: the
    /// admission calls that run at once. (`--admission-instances`)
    pub admission_instances: u32,
    /// Keys the random streams plugins see: [`RandomKey::fixed`] where runs
    /// must repeat (`simulate`, `test`), a secret one where they serve.
    pub random_key: RandomKey,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            limits: HostLimits::default(),
            compile_cache: CompileCache::default_dir(),
            compile_cache_max_mib: super::compile_cache::DEFAULT_MAX_MIB,
            max_instances: 64,
            admission_instances: DEFAULT_ADMISSION_INSTANCES,
            random_key: RandomKey::secret(),
        }
    }
}

/// The engine, linker and settings shared by every plugin of a host.
pub struct Sandbox {
    engine: Engine,
    linker: Linker<CallState>,
    limits: HostLimits,
    compile_cache: Option<CompileCache>,
    compiler: Compiler,
    random_key: RandomKey,
    ticker: Arc<EpochTicker>,
    max_instances: u32,
    admission_instances: u32,
    /// Guest memory of every call at once (memory_budget.rs).
    memory: Arc<MemoryBudget>,
    /// What every plugin's admission calls are charged to.
    admission_memory: Arc<MemoryAccount>,
    /// Hands back idle plugins' slot memory (idle_release.rs).
    releaser: IdleReleaser,
}

/// Timings of one load, for the log line and the benchmarks.
#[derive(Clone, Copy, Debug)]
pub struct LoadReport {
    pub source: CompileSource,
    pub compile: Duration,
    pub total: Duration,
}

impl Sandbox {
    pub fn new(config: SandboxConfig) -> anyhow::Result<Self> {
        let max_memory = config.limits.memory_max_mib as usize * 1024 * 1024;
        let mut pool = PoolingAllocationConfig::default();
        let n = config.max_instances.max(1);
        // Admission's calls and its loading have instances of their own.
        let admission_instances = config.admission_instances.max(1);
        let pool_size = n + admission_instances + 1;
        pool.total_component_instances(pool_size)
            // A Rust component instantiates a handful of core modules (its
            // code plus small shims); leave generous room per component.
            .total_core_instances(pool_size * 16)
            .total_memories(pool_size * 2)
            .total_tables(pool_size * 4)
            .max_memory_size(max_memory);
        if PoolingAllocationConfig::is_pagemap_scan_available() {
            pool.pagemap_scan(Enabled::Yes)
                .linear_memory_keep_resident(KEEP_RESIDENT)
                .table_keep_resident(TABLE_KEEP_RESIDENT);
        }
        // Code generation: shared by the running engine and the short-lived
        // ones that compile (compiler.rs).
        let mut codegen = Config::new();
        codegen.epoch_interruption(true).wasm_component_model(true);
        if std::env::var_os(PERFMAP_ENV).is_some_and(|v| v == "1") {
            // Names the guests' compiled functions for `perf report`
            // (/tmp/perf-PID.map): how a plugin's call is profiled.
            codegen.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let compiler = Compiler::new(codegen.clone());
        let mut wasm = codegen;
        wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&wasm)?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        super::bindings::PluginWithAdmissionAndTriggers::add_to_linker::<
            _,
            wasmtime::component::HasSelf<_>,
        >(&mut linker, |s| s)?;
        super::bounded_waits::add_to_linker(&mut linker)?;
        super::worker_safe_io::add_to_linker(&mut linker)?;

        let ticker = Arc::new(EpochTicker::start(engine.clone()));
        let memory = MemoryBudget::new(config.limits.memory_total_bytes());
        tracing::info!(
            budget_mib = memory.total_bytes() >> 20,
            "guest memory of all calls at once is bounded (--plugin-memory-total-mib)"
        );
        let admission_memory = memory.open_account();
        Ok(Self {
            engine,
            linker,
            limits: config.limits,
            compile_cache: config
                .compile_cache
                .map(|dir| CompileCache::bounded(dir, config.compile_cache_max_mib << 20)),
            compiler,
            random_key: config.random_key,
            ticker,
            max_instances: n,
            admission_instances,
            memory,
            admission_memory,
            releaser: IdleReleaser::start(),
        })
    }

    /// Admission calls that may run at once: the instances kept for them.
    pub fn admission_instances(&self) -> usize {
        self.admission_instances as usize
    }

    /// Reconciles that may run at once, across all plugins: the pool, less
    /// the instance kept for loading a plugin meanwhile.
    pub fn reconcile_instances(&self) -> usize {
        (self.max_instances as usize).saturating_sub(1).max(1)
    }

    pub fn limits(&self) -> &HostLimits {
        &self.limits
    }

    /// Times the epoch has advanced since the sandbox started: a host with
    /// nothing to run should not be spending CPU time on a clock.
    pub fn epoch_ticks(&self) -> u64 {
        self.ticker.ticks()
    }

    /// The budget every call's guest memory is charged to.
    pub fn memory_budget(&self) -> &Arc<MemoryBudget> {
        &self.memory
    }

    /// Bytes of linear memory and tables that slots not in use keep
    /// resident for their next instance ([`KEEP_RESIDENT`]).
    pub fn idle_slots_resident_bytes(&self) -> usize {
        self.engine.pooling_allocator_metrics().map_or(0, |m| {
            m.unused_memory_bytes_resident() + m.unused_table_bytes_resident()
        })
    }

    pub fn compile_cache(&self) -> Option<&CompileCache> {
        self.compile_cache.as_ref()
    }

    /// Loads, validates and prepares the plugin at `path`.
    pub fn load(&self, path: &Path) -> Result<LoadedPlugin, LoadError> {
        self.load_with_report(path).map(|(p, _)| p)
    }

    /// [`Self::load`], also reporting where the compiled code came from.
    pub fn load_with_report(&self, path: &Path) -> Result<(LoadedPlugin, LoadReport), LoadError> {
        let bytes = std::fs::read(path).map_err(|e| fail(path, LoadFailure::Read(e)))?;
        self.load_bytes(path, &bytes)
    }

    /// Loads a plugin from bytes; `path` only names it in errors and logs.
    pub fn load_bytes(
        &self,
        path: &Path,
        bytes: &[u8],
    ) -> Result<(LoadedPlugin, LoadReport), LoadError> {
        let started = Instant::now();
        check_header(bytes).map_err(|r| fail(path, r))?;
        let sha256 = content_hash(bytes);

        let compile_started = Instant::now();
        let (component, source) = self
            .component(path, bytes, &sha256)
            .map_err(|e| fail(path, LoadFailure::Compile(format!("{e:#}"))))?;
        let compile = compile_started.elapsed();

        let component_type = component.component_type();
        check_exports(component_type.exports(&self.engine).map(|(name, _)| name))
            .map_err(|e| fail(path, e.into()))?;
        let instance_pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| fail(path, LoadFailure::Link(format!("{e:#}"))))?;
        let pre = PluginPre::new(instance_pre)
            .map_err(|e| fail(path, LoadFailure::Link(format!("{e:#}"))))?;

        let (metadata, admission) = self.declarations(&pre, path, &sha256)?;
        let limits: SandboxLimits = self
            .limits
            .resolve(&metadata.hints)
            .map_err(|e| fail(path, e.into()))?;

        let prepared = match &self.compile_cache {
            Some(cache) if cache.holds(&self.engine, &sha256) => Prepared::releasable(
                pre,
                Fresh {
                    engine: self.engine.clone(),
                    linker: self.linker.clone(),
                    cache: cache.clone(),
                    sha256: sha256.clone(),
                    plugin: metadata.name.clone(),
                },
                &self.releaser,
            ),
            _ => Prepared::fixed(pre),
        };
        let plugin = LoadedPlugin::new(
            metadata,
            limits,
            path.to_path_buf(),
            sha256,
            prepared,
            FromSandbox {
                random_key: self.random_key.clone(),
                ticker: self.ticker.clone(),
                memory: self.memory.open_account(),
                admission_memory: self.admission_memory.clone(),
            },
        )
        .with_admission(admission);
        Ok((
            plugin,
            LoadReport {
                source,
                compile,
                total: started.elapsed(),
            },
        ))
    }
}

impl Sandbox {
    /// What the plugin declares at load, each read in a fresh instance and
    /// checked: its metadata with its triggers (0.2.3), and its admission.
    fn declarations(
        &self,
        pre: &PluginPre<CallState>,
        path: &Path,
        sha256: &str,
    ) -> Result<(PluginMetadata, Option<AdmissionSettings>), LoadError> {
        let probe_name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        // Each declaration is read in a fresh instance with the same inputs.
        let at_load = || {
            Call::at_load(
                self.limits.defaults(),
                &probe_name,
                CallRandom::new(&self.random_key, sha256, CallSubject::Load),
                &self.ticker,
                self.memory.charge(),
            )
        };
        let mut metadata: PluginMetadata =
            LoadedPlugin::call_metadata(pre, at_load()).map_err(|e| match e {
                CallError::Timeout { limit } => fail(path, LoadFailure::MetadataTimeout { limit }),
                e => fail(path, LoadFailure::MetadataCall(e)),
            })?;
        metadata.triggers = LoadedPlugin::call_triggers(pre, at_load())
            .map_err(|e| fail(path, LoadFailure::TriggersCall(e)))?;
        validate_metadata(&metadata).map_err(|e| fail(path, e.into()))?;
        let admission = LoadedPlugin::call_admission_settings(pre, at_load())
            .map_err(|e| fail(path, LoadFailure::AdmissionSettingsCall(e)))?;
        if let Some(settings) = &admission {
            check_settings(settings).map_err(|e| fail(path, e.into()))?;
        }
        Ok((metadata, admission))
    }

    /// The compiled component of `bytes`, from the compile cache when there
    /// is one.
    fn component(
        &self,
        path: &Path,
        bytes: &[u8],
        sha256: &str,
    ) -> wasmtime::Result<(Component, CompileSource)> {
        // A large component compiles for seconds: say so rather than sit
        // silent (a compile cache hit is quick and says nothing).
        if bytes.len() >= LOUD_COMPILE_BYTES
            && self
                .compile_cache
                .as_ref()
                .is_none_or(|c| !c.holds(&self.engine, sha256))
        {
            tracing::info!(
                "compiling {} ({:.1} MB), which takes a few seconds{}",
                path.display(),
                bytes.len() as f64 / 1e6,
                match &self.compile_cache {
                    Some(cache) => format!("; cached afterwards in {}", cache.dir().display()),
                    None => String::new(),
                }
            );
        }
        match &self.compile_cache {
            Some(cache) => cache.load_or_compile(&self.engine, &self.compiler, bytes, sha256),
            None => self
                .compiler
                .precompile(bytes)
                .and_then(|artifact| artifact.load(&self.engine))
                .map(|component| (component, CompileSource::Compiled)),
        }
    }

    /// The interfaces a component imports and exports, by name, as the Wasm
    /// OCI artifact's config lists them. Cheap after [`Self::load`] of the
    /// same bytes: the compiled code comes from the cache.
    pub fn interfaces(&self, bytes: &[u8]) -> anyhow::Result<ComponentInterfaces> {
        let (component, _) =
            self.component(Path::new("the component"), bytes, &content_hash(bytes))?;
        let component_type = component.component_type();
        Ok(ComponentInterfaces {
            imports: component_type
                .imports(&self.engine)
                .map(|(name, _)| name.to_string())
                .collect(),
            exports: component_type
                .exports(&self.engine)
                .map(|(name, _)| name.to_string())
                .collect(),
        })
    }
}

/// What a component imports and exports, by interface name: what `push`
/// writes into a plugin artifact's config (`registry::artifact`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ComponentInterfaces {
    pub exports: Vec<String>,
    pub imports: Vec<String>,
}

/// Components this large get a line before they compile.
const LOUD_COMPILE_BYTES: usize = 4 << 20;

fn fail(path: &Path, reason: LoadFailure) -> LoadError {
    LoadError {
        path: path.to_path_buf(),
        reason,
    }
}

/// Tells a component from a core module or a stray file before wasmtime
/// gives a less specific error.
fn check_header(bytes: &[u8]) -> Result<(), LoadFailure> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(LoadFailure::NotWasm);
    }
    // Bytes 4..8: a core module has version 1 and layer 0; a component has
    // layer 1.
    if bytes[6..8] == [0, 0] {
        return Err(LoadFailure::CoreModule);
    }
    Ok(())
}

/// SHA-256 of a plugin file, hex: how plugins are identified in logs, the
/// compile cache and hot reload.
pub fn content_hash(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
