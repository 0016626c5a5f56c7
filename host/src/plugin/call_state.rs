//! The state of one sandboxed call: WASI (empty), the memory limiter, and the
//! host's side of the plugin's imports.

use std::sync::Arc;
use std::time::Duration;

use reconciler_sdk::contract::Projection;
use reconciler_sdk::{KindRef, PluginMetadata};
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::kind_from_wit;
use super::bindings::reconciler::plugin::{cache, clock, log, types};
use super::object_reader::ObjectReader;

/// What the imports may see during a reconcile. Absent during `metadata`.
pub(crate) struct ReconcileScope {
    pub metadata: Arc<PluginMetadata>,
    pub reader: Arc<dyn ObjectReader>,
    /// Where the primary lives: same-namespace read kinds stay there.
    pub primary_namespace: Option<String>,
}

/// The data of one store: lives exactly as long as one call.
pub(crate) struct CallState {
    pub wasi: WasiCtx,
    pub table: ResourceTable,
    pub limiter: MemoryCap,
    pub scope: Option<ReconcileScope>,
    pub now_millis: i64,
    /// For log events: the plugin and the object being reconciled.
    pub plugin: String,
    pub object: String,
}

/// Output pipes for guest stdout and stderr, kept to emit as log events.
pub(crate) struct GuestOutput {
    pub stdout: MemoryOutputPipe,
    pub stderr: MemoryOutputPipe,
    pub capacity: usize,
}

impl GuestOutput {
    pub fn new(capacity: usize) -> Self {
        Self {
            stdout: MemoryOutputPipe::new(capacity),
            stderr: MemoryOutputPipe::new(capacity),
            capacity,
        }
    }

    /// Whether the guest filled a pipe (its next write trapped).
    pub fn overflowed(&self) -> bool {
        self.stdout.contents().len() >= self.capacity
            || self.stderr.contents().len() >= self.capacity
    }

    /// What the guest said on stderr just before it trapped: a Rust guest's
    /// panic message (`panicked at src/lib.rs:3:5: <message>`), without the
    /// backtrace hint, which means nothing inside the sandbox.
    pub fn last_words(&self) -> Option<String> {
        let bytes = self.stderr.contents();
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
            .collect();
        let start = lines
            .iter()
            .rposition(|l| l.contains("panicked at"))
            .unwrap_or(lines.len().saturating_sub(1));
        let words = lines.get(start..)?.join(" ");
        (!words.is_empty()).then_some(words)
    }

    /// Emits what the guest wrote as log events, one per line.
    pub fn emit(&self, plugin: &str, object: &str) {
        for (stream, pipe) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let bytes = pipe.contents();
            for line in String::from_utf8_lossy(&bytes)
                .lines()
                .filter(|l| !l.trim().is_empty())
            {
                if stream == "stderr" {
                    tracing::warn!(target: "plugin", plugin, object, stream, "{line}");
                } else {
                    tracing::info!(target: "plugin", plugin, object, stream, "{line}");
                }
            }
        }
    }
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

/// WASI's wall clock follows the host clock, so a plugin that reads the time
/// through std still sees the virtual time of a test or simulation.
pub(crate) struct FixedWallClock(pub i64);

impl wasmtime_wasi::HostWallClock for FixedWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_millis(1)
    }

    fn now(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.0).unwrap_or(0))
    }
}

/// What one cache read may see, once the plugin's rules allowed it.
struct Permitted<'a> {
    reader: &'a Arc<dyn ObjectReader>,
    projection: Projection,
    namespace: Option<&'a str>,
}

impl CallState {
    /// The reader, projection and namespace for a read of `kind` in
    /// `namespace`, if the plugin may make it.
    fn readable<'a>(
        &'a self,
        kind: &KindRef,
        namespace: Option<&'a str>,
    ) -> Result<Permitted<'a>, String> {
        let scope = self
            .scope
            .as_ref()
            .ok_or("the cache cannot be read while reporting metadata")?;
        let namespace =
            scope
                .metadata
                .check_read(kind, namespace, scope.primary_namespace.as_deref())?;
        Ok(Permitted {
            reader: &scope.reader,
            projection: scope.metadata.projection_of(kind),
            namespace,
        })
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
        let read = self.readable(&kind, namespace.as_deref())?;
        Ok(read
            .reader
            .get(&kind, read.namespace, &name, read.projection))
    }

    fn list(
        &mut self,
        kind: types::KindRef,
        namespace: Option<String>,
        label_selector: String,
    ) -> Result<Vec<String>, String> {
        let kind = kind_from_wit(kind);
        let read = self.readable(&kind, namespace.as_deref())?;
        read.reader
            .list(&kind, read.namespace, &label_selector, read.projection)
    }
}

impl clock::Host for CallState {
    fn now(&mut self) -> i64 {
        self.now_millis
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

#[cfg(test)]
mod tests {
    use reconciler_sdk::MapRule;
    use reconciler_sdk::memory_cache::MemoryCache;
    use serde_json::json;

    use super::*;

    fn state(primary_namespace: Option<&str>) -> CallState {
        let metadata = PluginMetadata::new(
            "podset",
            "1",
            KindRef::new("example.com", "v1alpha1", "PodSet"),
        )
        .reads_in_namespace(KindRef::new("", "v1", "Pod"), MapRule::None, true);
        let mut cache = MemoryCache::new();
        for (namespace, name) in [("team-a", "mine"), ("team-b", "theirs")] {
            cache
                .insert(json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": namespace}}))
                .unwrap();
        }
        CallState {
            wasi: wasmtime_wasi::WasiCtxBuilder::new().build(),
            table: ResourceTable::new(),
            limiter: MemoryCap {
                limit_bytes: 1 << 20,
                hit: false,
            },
            scope: Some(ReconcileScope {
                metadata: Arc::new(metadata),
                reader: Arc::new(cache),
                primary_namespace: primary_namespace.map(str::to_string),
            }),
            now_millis: 0,
            plugin: "podset".into(),
            object: "team-a/web".into(),
        }
    }

    fn pod() -> types::KindRef {
        types::KindRef {
            group: String::new(),
            version: "v1".into(),
            kind: "Pod".into(),
        }
    }

    fn names(listed: Vec<String>) -> Vec<String> {
        listed
            .iter()
            .map(|text| {
                let object: serde_json::Value = serde_json::from_str(text).unwrap();
                object["metadata"]["name"].as_str().unwrap().to_string()
            })
            .collect()
    }

    #[test]
    fn a_same_namespace_read_kind_is_listed_only_in_the_primarys_namespace() {
        let mut state = state(Some("team-a"));
        let own = cache::Host::list(&mut state, pod(), Some("team-a".into()), String::new());
        assert_eq!(names(own.unwrap()), ["mine"]);
        let unnamed = cache::Host::list(&mut state, pod(), None, String::new());
        assert_eq!(
            names(unnamed.unwrap()),
            ["mine"],
            "no namespace is the primary's"
        );
        let err =
            cache::Host::list(&mut state, pod(), Some("team-b".into()), String::new()).unwrap_err();
        assert!(
            err.contains("same-namespace read kind") && err.contains("\"team-b\""),
            "{err}"
        );
        let err = cache::Host::get(&mut state, pod(), Some("team-b".into()), "theirs".into())
            .unwrap_err();
        assert!(err.contains("same-namespace read kind"), "{err}");
        let own = cache::Host::get(&mut state, pod(), None, "mine".into()).unwrap();
        assert!(own.is_some(), "get without a namespace reads the primary's");
    }

    #[test]
    fn a_cluster_scoped_primary_reads_every_namespace() {
        let mut state = state(None);
        let all = cache::Host::list(&mut state, pod(), None, String::new());
        assert_eq!(names(all.unwrap()), ["mine", "theirs"]);
    }
}
