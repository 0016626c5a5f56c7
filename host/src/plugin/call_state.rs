//! The state of one sandboxed call: WASI (empty), the memory limiter, the
//! call's clock and output budget, and the host's side of the plugin's
//! imports.

use std::sync::Arc;
use std::time::Instant;

use reconciler_sdk::contract::Projection;
use reconciler_sdk::memory_cache::ListJsonError;
use reconciler_sdk::{KindRef, PluginMetadata};
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::kind_from_wit;
use super::bindings::reconciler::plugin::{cache, clock, log, types};
use super::call_clock::CallClock;
use super::guest_output::OutputBudget;
use super::object_reader::ObjectReader;

/// What the imports may see during a reconcile. Absent during `metadata`.
pub(crate) struct ReconcileScope {
    pub metadata: Arc<PluginMetadata>,
    pub reader: Arc<dyn ObjectReader>,
}

/// The data of one store: lives exactly as long as one call.
pub(crate) struct CallState {
    pub wasi: WasiCtx,
    pub table: ResourceTable,
    pub limiter: MemoryCap,
    pub scope: Option<ReconcileScope>,
    /// The call's time: WASI's clocks, its timers and the `clock` import.
    pub clock: Arc<CallClock>,
    /// When the call's deadline passes, in real time.
    pub deadline: Instant,
    /// A wait was refused because it would pass the deadline.
    pub waited_past_deadline: bool,
    /// What stdout, stderr and `log` may still put into the host log.
    pub output_budget: OutputBudget,
    /// The most JSON text one `cache.list` may return: the call's memory
    /// limit, as no longer list could ever cross into the sandbox.
    pub list_max_bytes: usize,
    /// For log events: the plugin and the object being reconciled.
    pub plugin: String,
    pub object: String,
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// The per-call memory cap. Records that it refused a growth so the host can
/// report "memory limit exceeded" rather than the guest's confused abort.
pub(crate) struct MemoryCap {
    pub limit_bytes: usize,
    pub hit: bool,
}

impl wasmtime::ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit_bytes {
            self.hit = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

impl CallState {
    /// The reader and the projection for `kind`, if the plugin may read it.
    fn readable(&self, kind: &KindRef) -> Result<(&Arc<dyn ObjectReader>, Projection), String> {
        let scope = self
            .scope
            .as_ref()
            .ok_or("the cache cannot be read while reporting metadata")?;
        scope.metadata.check_readable(kind)?;
        Ok((&scope.reader, scope.metadata.projection_of(kind)))
    }
}

impl types::Host for CallState {}

impl cache::Host for CallState {
    fn get(
        &mut self,
        kind: types::KindRef,
        namespace: Option<String>,
        name: String,
    ) -> Result<Option<String>, String> {
        let kind = kind_from_wit(kind);
        let (reader, projection) = self.readable(&kind)?;
        Ok(reader.get(&kind, namespace.as_deref(), &name, projection))
    }

    fn list(
        &mut self,
        kind: types::KindRef,
        namespace: Option<String>,
        label_selector: String,
    ) -> Result<Vec<String>, String> {
        let kind = kind_from_wit(kind);
        let max_bytes = self.list_max_bytes;
        let (reader, projection) = self.readable(&kind)?;
        reader
            .list_within(
                &kind,
                namespace.as_deref(),
                &label_selector,
                projection,
                max_bytes,
            )
            .map_err(|e| match e {
                ListJsonError::Selector(message) => message,
                ListJsonError::TooLarge { listed, max_bytes } => list_too_large(
                    &kind,
                    namespace.as_deref(),
                    &label_selector,
                    listed,
                    max_bytes,
                ),
            })
    }
}

/// Why a `cache.list` was refused, and what to do instead.
fn list_too_large(
    kind: &KindRef,
    namespace: Option<&str>,
    selector: &str,
    listed: usize,
    max_bytes: usize,
) -> String {
    let namespace = match namespace {
        Some(ns) => format!("in namespace {ns}"),
        None => "in every namespace".to_string(),
    };
    let selector = match selector {
        "" => "no label selector".to_string(),
        s => format!("label selector {s:?}"),
    };
    format!(
        "listing {kind} {namespace} with {selector} passed {} MiB of JSON after {listed} objects, the plugin's memory limit (hints.memoryLimitMib), so the list could never reach the plugin: list with a narrower label selector or a namespace, or read the kind as metadata only",
        max_bytes.div_ceil(1024 * 1024)
    )
}

impl clock::Host for CallState {
    fn now(&mut self) -> i64 {
        self.clock.now_millis()
    }
}

impl log::Host for CallState {
    fn log(&mut self, level: log::Level, message: String, fields: Vec<(String, String)>) {
        let fields: String = fields
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join(" ");
        let (plugin, object) = (self.plugin.as_str(), self.object.as_str());
        if !self
            .output_budget
            .admit(message.len() + fields.len(), plugin.len() + object.len())
        {
            return;
        }
        match level {
            log::Level::Trace => {
                tracing::trace!(target: "plugin", plugin, object, fields, "{message}")
            }
            log::Level::Debug => {
                tracing::debug!(target: "plugin", plugin, object, fields, "{message}")
            }
            log::Level::Info => {
                tracing::info!(target: "plugin", plugin, object, fields, "{message}")
            }
            log::Level::Warn => {
                tracing::warn!(target: "plugin", plugin, object, fields, "{message}")
            }
            log::Level::Error => {
                tracing::error!(target: "plugin", plugin, object, fields, "{message}")
            }
        }
    }
}
