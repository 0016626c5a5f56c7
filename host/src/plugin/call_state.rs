//! The state of one sandboxed call: WASI (empty), the memory limiter, the
//! call's clock and output budget, and the host's side of the plugin's
//! imports.

use std::sync::Arc;
use std::time::Instant;

use reconciler_contract::Projection;
use reconciler_contract::memory_cache::{ListBounds, ListJsonError};
use reconciler_contract::{ClusterInfo, KindRef, PluginMetadata};
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::kind_from_wit;
use super::bindings::reconciler::plugin::{cache, clock, cluster, log, types};
use super::call_clock::CallClock;
use super::call_traps::{NeedsBlockingThread, WaitedPastDeadline};
use super::guest_output::OutputBudget;
use super::memory_budget::MemoryCharge;
use super::object_reader::{GetRequest, ListRequest, ObjectReader};

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
    /// The cluster of the object reconciled; the host's own outside a
    /// reconcile.
    pub cluster: Arc<ClusterInfo>,
    /// The call's time: WASI's clocks, its timers and the `clock` import.
    pub clock: Arc<CallClock>,
    /// When the call's deadline passes, in real time.
    pub deadline: Instant,
    /// A wait was refused because it would pass the deadline.
    pub waited_past_deadline: bool,
    /// False for a brief call, which runs on an async worker: a WASI
    /// function that would have to wait ends it instead
    /// (worker_safe_io.rs).
    pub blocking_allowed: bool,
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

/// The per-call memory cap, and the call's charge to the host-wide budget.
/// Records which refused a growth so the host can report the limit rather
/// than the guest's confused abort.
pub(crate) struct MemoryCap {
    pub limit_bytes: usize,
    pub hit: bool,
    pub charge: MemoryCharge,
    /// The host-wide budget refused a growth the call's own cap allowed.
    pub budget_hit: bool,
}

impl wasmtime::ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit_bytes {
            self.hit = true;
            return Ok(false);
        }
        if !self.charge.grow(desired.saturating_sub(current)) {
            self.budget_hit = true;
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

/// What one cache read may see, once the plugin's rules allowed it.
struct Permitted<'a> {
    reader: &'a Arc<dyn ObjectReader>,
    projection: Projection,
    namespace: Option<&'a str>,
}

impl CallState {
    /// Ends the call: it would wait (or work) past its deadline.
    pub(super) fn past_deadline(&mut self) -> wasmtime::Error {
        self.waited_past_deadline = true;
        wasmtime::Error::new(WaitedPastDeadline)
    }

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
            .ok_or("the cache can be read only during a reconcile (not in metadata, admission settings or admission calls)")?;
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
        Ok(read.reader.get(&GetRequest {
            kind: &kind,
            namespace: read.namespace,
            name: &name,
            projection: read.projection,
        }))
    }

    fn list(
        &mut self,
        kind: types::KindRef,
        namespace: Option<String>,
        label_selector: String,
    ) -> wasmtime::Result<Result<Vec<String>, String>> {
        let kind = kind_from_wit(kind);
        // Epoch interruption does not reach into a host function: the list
        // bounds its own work by the call's deadline, and on a thread that
        // may not block it stops early, and the call moves to one that may.
        let bounds = match self.blocking_allowed {
            true => ListBounds {
                max_bytes: self.list_max_bytes,
                max_work: usize::MAX,
                deadline: Some(self.deadline),
            },
            false => ListBounds {
                max_bytes: self.list_max_bytes.min(BRIEF_LIST_MAX_BYTES),
                max_work: BRIEF_LIST_WORK,
                deadline: Some(self.deadline),
            },
        };
        let read = match self.readable(&kind, namespace.as_deref()) {
            Ok(read) => read,
            Err(refused) => return Ok(Err(refused)),
        };
        let request = ListRequest {
            kind: &kind,
            namespace: read.namespace,
            selector: &label_selector,
            projection: read.projection,
        };
        match read.reader.list_within(&request, bounds) {
            Ok(list) => Ok(Ok(list)),
            Err(ListJsonError::Selector(message)) => Ok(Err(message)),
            Err(ListJsonError::TooLarge { .. }) if bounds.max_bytes < self.list_max_bytes => {
                Err(wasmtime::Error::new(NeedsBlockingThread))
            }
            Err(ListJsonError::TooMuchWork { .. }) => {
                Err(wasmtime::Error::new(NeedsBlockingThread))
            }
            Err(ListJsonError::PastDeadline { .. }) => Err(self.past_deadline()),
            Err(ListJsonError::TooLarge { listed, max_bytes }) => Ok(Err(list_too_large(
                &kind,
                read.namespace,
                &label_selector,
                listed,
                max_bytes,
            ))),
        }
    }
}

/// Comparisons of labels with a selector's terms one `cache.list` makes on
/// a thread that may not block: about a millisecond; a list that needs
/// more moves the call to a blocking thread.
pub(crate) const BRIEF_LIST_WORK: usize = 1 << 18;

/// The most JSON text one `cache.list` builds on a thread that may not
/// block (a brief call on an async worker): writing out 1 MiB takes about a
/// millisecond; a longer list moves the call to a blocking thread.
pub(crate) const BRIEF_LIST_MAX_BYTES: usize = 1 << 20;

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

impl cluster::Host for CallState {
    fn current(&mut self) -> cluster::ClusterInfo {
        cluster::ClusterInfo {
            name: self.cluster.name.clone(),
            labels: self
                .cluster
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }
}

impl log::Host for CallState {
    fn log(&mut self, level: log::Level, message: String, fields: Vec<(String, String)>) {
        let (plugin, object) = (self.plugin.as_str(), self.object.as_str());
        // Charged as given (`k="v"` and a space per field), before
        // anything is formatted: a line the budget drops costs the host no
        // copy of it. Escaping may lengthen a line once admitted, by at
        // most ten-fold for control characters.
        let given = fields.iter().fold(message.len(), |n, (k, v)| {
            n.saturating_add(k.len() + v.len() + 4)
        });
        if !self.output_budget.admit(given, plugin.len() + object.len()) {
            return;
        }
        let fields: String = fields
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join(" ");
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
    use reconciler_contract::MapRule;
    use reconciler_contract::memory_cache::MemoryCache;
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
                charge: super::super::memory_budget::MemoryBudget::new(1 << 20).charge(),
                budget_hit: false,
            },
            scope: Some(ReconcileScope {
                metadata: Arc::new(metadata),
                reader: Arc::new(cache),
                primary_namespace: primary_namespace.map(str::to_string),
            }),
            cluster: Arc::new(ClusterInfo::local()),
            clock: super::super::call_clock::CallClock::new(0, std::time::Duration::from_secs(1)),
            deadline: Instant::now() + std::time::Duration::from_secs(1),
            waited_past_deadline: false,
            blocking_allowed: true,
            output_budget: super::super::guest_output::OutputBudget::new(1 << 16),
            list_max_bytes: 1 << 20,
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
        let own = list(&mut state, Some("team-a"));
        assert_eq!(names(own.unwrap()), ["mine"]);
        let unnamed = list(&mut state, None);
        assert_eq!(
            names(unnamed.unwrap()),
            ["mine"],
            "no namespace is the primary's"
        );
        let err = list(&mut state, Some("team-b")).unwrap_err();
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
        let all = list(&mut state, None);
        assert_eq!(names(all.unwrap()), ["mine", "theirs"]);
    }

    #[test]
    fn a_long_list_ends_a_call_that_may_not_block_and_is_served_where_it_may() {
        let mut state = state(None);
        let mut cache = MemoryCache::new();
        let filler = "x".repeat(100 << 10);
        for i in 0..20 {
            cache
                .insert(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
                    "name": format!("p{i}"), "namespace": "team-a",
                    "annotations": {"filler": filler}}}))
                .unwrap();
        }
        state.scope.as_mut().unwrap().reader = Arc::new(cache);
        state.list_max_bytes = 8 << 20;
        assert_eq!(list(&mut state, None).unwrap().len(), 20);

        state.blocking_allowed = false;
        let trap = cache::Host::list(&mut state, pod(), None, String::new()).unwrap_err();
        assert!(
            trap.downcast_ref::<NeedsBlockingThread>().is_some(),
            "{trap}"
        );

        // Past the plugin's own limit it is the plugin's error, wherever
        // the call runs.
        state.list_max_bytes = 512 << 10;
        for blocking_allowed in [false, true] {
            state.blocking_allowed = blocking_allowed;
            let err = list(&mut state, None).unwrap_err();
            assert!(err.contains("hints.memoryLimitMib"), "{err}");
        }
    }

    /// Issue 27, point 5: a list whose selector makes it long work (a
    /// `notin` of many values over many objects) is bounded like the rest
    /// of the call: on a thread that may not block it moves the call, and
    /// past the call's deadline it ends the call as a timeout.
    #[test]
    fn a_list_of_long_work_moves_the_call_and_ends_at_the_deadline() {
        let mut state = state(None);
        let mut cache = MemoryCache::new();
        for i in 0..4_000 {
            cache
                .insert(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
                    "name": format!("p{i}"), "namespace": "team-a",
                    "labels": {"app": "web"}}}))
                .unwrap();
        }
        state.scope.as_mut().unwrap().reader = Arc::new(cache);
        let values: Vec<String> = (0..200).map(|i| format!("v{i}")).collect();
        let selector = format!("app notin ({})", values.join(","));
        let list = |state: &mut CallState| cache::Host::list(state, pod(), None, selector.clone());
        assert_eq!(list(&mut state).unwrap().unwrap().len(), 4_000, "in time");

        state.blocking_allowed = false;
        let trap = list(&mut state).unwrap_err();
        assert!(
            trap.downcast_ref::<NeedsBlockingThread>().is_some(),
            "{trap}"
        );

        state.blocking_allowed = true;
        state.deadline = Instant::now();
        assert!(list(&mut state).is_err(), "the deadline ends the call");
        assert!(state.waited_past_deadline, "reported as the call's timeout");
    }

    /// `cache.list` of every Pod in `namespace`, as the guest sees it.
    fn list(state: &mut CallState, namespace: Option<&str>) -> Result<Vec<String>, String> {
        cache::Host::list(state, pod(), namespace.map(str::to_string), String::new())
            .expect("a list that may block never traps")
    }
}
