//! A native test harness: run a [`Reconciler`] without Wasm.
//!
//! The harness stands in for the host: an in-memory cache answers `get` and
//! `list` with the host's rules (declared kinds only, same-namespace read
//! kinds only in the primary's namespace, label selectors, stable order), the clock is whatever you set, and the request is assembled the
//! way the host assembles it (children by controller ownerReference,
//! `deleting` from the deletionTimestamp). The call goes through the same
//! JSON boundary as the compiled plugin.
//!
//! ```ignore
//! let outcome = Harness::<PodSets>::new().with(&pod).reconcile(&podset)?;
//! let deployments: Vec<Deployment> = outcome.applied()?;
//! ```

use std::cell::RefCell;
use std::marker::PhantomData;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{HostApi, Reconciler};
use reconciler_contract::memory_cache::{MemoryCache, namespace_of};
use reconciler_contract::{
    AdmissionRequest, ClusterInfo, Event, KindRef, LogLevel, ObjectRef, Operation, PluginMetadata,
    ReconcileResponse, UserInfo, Verdict,
};
use reconciler_contract::{response_caps, response_rules};

pub use reconciler_contract::DEFAULT_NOW_MILLIS;

/// One log entry a plugin wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub level: LogLevel,
    pub message: String,
    pub fields: Vec<(String, String)>,
}

/// Runs one plugin against an in-memory cache and a settable clock.
pub struct Harness<R> {
    metadata: PluginMetadata,
    cache: MemoryCache,
    now_millis: i64,
    cluster: ClusterInfo,
    logs: RefCell<Vec<LogEntry>>,
    plugin: PhantomData<R>,
}

impl<R: Reconciler> Default for Harness<R> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R: Reconciler> Harness<R> {
    /// An empty cache and the clock at 2024-01-01T00:00:00Z.
    pub fn new() -> Self {
        Self {
            metadata: R::metadata(),
            cache: MemoryCache::new(),
            now_millis: DEFAULT_NOW_MILLIS,
            cluster: ClusterInfo::local(),
            logs: RefCell::new(Vec::new()),
            plugin: PhantomData,
        }
    }

    /// Adds an object to the cache (panics on an object with no kind or name:
    /// that is a broken test, not a plugin failure).
    pub fn with<T: Serialize>(mut self, object: &T) -> Self {
        self.insert(object);
        self
    }

    /// Adds or replaces an object in the cache.
    pub fn insert<T: Serialize>(&mut self, object: &T) {
        let value = serde_json::to_value(object).expect("test object serialises to JSON");
        if let Err(e) = self.cache.insert(value) {
            panic!("{e}");
        }
    }

    /// Sets the clock.
    pub fn at(mut self, now: Timestamp) -> Self {
        self.now_millis = now.as_millisecond();
        self
    }

    /// Reconciles as if in the member cluster `name` with `labels` (the
    /// host adds the name label, `reconciler-host.io/cluster`, as here);
    /// `local` with no other label until called.
    pub fn in_cluster(mut self, name: &str, labels: &[(&str, &str)]) -> Self {
        let labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.cluster = ClusterInfo::with_labels(name, labels);
        self
    }

    /// Moves the clock forward.
    pub fn advance(&mut self, by: Duration) {
        self.now_millis += i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
    }

    /// Entries the plugin logged so far.
    pub fn logs(&self) -> Vec<LogEntry> {
        self.logs.borrow().clone()
    }

    /// Reconciles `primary` as the host would. `Err` is the plugin's error.
    pub fn reconcile<P: Serialize>(&self, primary: &P) -> Result<Outcome, String> {
        let primary = serde_json::to_value(primary).expect("primary serialises to JSON");
        let request = self.cache.request_for(&primary, &self.metadata.owns);
        let namespace = namespace_of(&primary);
        let host = self.host_for(namespace);
        let response = crate::dispatch::<R>(&request, &host)?;
        // What the host refuses, the harness refuses, with the host's words:
        // its caps, then its rules for every object, delete, status and Event.
        if let Some(over) = response_caps::over_cap(&response, &self.metadata.hints) {
            return Err(over);
        }
        response_rules::validate_response(&self.metadata, namespace, response.clone())
            .map_err(|e| e.to_string())?;
        Ok(Outcome { response })
    }

    /// Whether the host would wake a primary for this change of an object
    /// from `old` to `new`, by the plugin's declared triggers
    /// ([`PluginMetadata::wake_on`]): the host's own comparison. A kind the
    /// plugin names no trigger for wakes on any change. (Creation and
    /// deletion always wake, so they need no test.)
    pub fn wakes<T: Serialize>(&self, old: &T, new: &T) -> bool {
        let old = serde_json::to_value(old).expect("test object serialises to JSON");
        let new = serde_json::to_value(new).expect("test object serialises to JSON");
        let kind = KindRef::of_object(&new).expect("the changed object has apiVersion and kind");
        match self.metadata.trigger_of(&kind) {
            Some(changes) => reconciler_contract::triggers::wakes(changes, &old, &new),
            None => true,
        }
    }

    /// Admission as the host runs it: for a plugin that declared
    /// [`Reconciler::admission`] and the request's operation, defaults
    /// first (when mutating), then validates the defaulted object. A plugin
    /// that serves no admission, or not this operation, admits everything.
    /// `Err` is a failed call, which the host answers by the failure policy.
    pub fn admit(&self, request: &AdmissionRequest) -> Result<AdmissionOutcome, String> {
        let Some(settings) = R::admission() else {
            return Ok(AdmissionOutcome::admitted());
        };
        if !settings.effective_operations().contains(&request.operation) {
            return Ok(AdmissionOutcome::admitted());
        }
        let mut request = request.clone();
        let mut defaulted = None;
        let defaults_apply = matches!(request.operation, Operation::Create | Operation::Update);
        if settings.mutating
            && defaults_apply
            && let Some(text) = crate::admission::dispatch_defaults::<R>(&request)?
        {
            defaulted = Some(
                serde_json::from_str(&text)
                    .map_err(|e| format!("the defaulted object is not JSON: {e}"))?,
            );
            request.object = Some(text);
        }
        let verdict = crate::admission::dispatch_validate::<R>(&request)?;
        Ok(AdmissionOutcome { verdict, defaulted })
    }

    /// [`Self::admit`] of a create of `object`.
    pub fn admit_create<P: Serialize>(&self, object: &P) -> Result<AdmissionOutcome, String> {
        self.admit(&admission_request(Operation::Create, Some(object), None))
    }

    /// [`Self::admit`] of an update from `old` to `new`.
    pub fn admit_update<P: Serialize>(&self, old: &P, new: &P) -> Result<AdmissionOutcome, String> {
        self.admit(&admission_request(Operation::Update, Some(new), Some(old)))
    }

    /// The host side of one reconcile of a primary in `primary_namespace`,
    /// for calling [`crate::dispatch`] directly (benchmarks do).
    pub fn host_for(&self, primary_namespace: Option<&str>) -> HarnessHost<'_, R> {
        HarnessHost {
            harness: self,
            primary_namespace: primary_namespace.map(str::to_string),
        }
    }
}

/// One reconcile's view of the harness: reads are checked against the
/// primary it is for, as the host checks them.
pub struct HarnessHost<'a, R> {
    harness: &'a Harness<R>,
    primary_namespace: Option<String>,
}

impl<R> HostApi for HarnessHost<'_, R> {
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, String> {
        let metadata = &self.harness.metadata;
        let namespace = metadata.check_read(kind, namespace, self.primary_namespace.as_deref())?;
        Ok(self
            .harness
            .cache
            .get_json(kind, namespace, name, metadata.projection_of(kind)))
    }

    fn list(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &str,
    ) -> Result<Vec<String>, String> {
        let metadata = &self.harness.metadata;
        let namespace = metadata.check_read(kind, namespace, self.primary_namespace.as_deref())?;
        self.harness
            .cache
            .list_json(kind, namespace, selector, metadata.projection_of(kind))
    }

    fn now_millis(&self) -> i64 {
        self.harness.now_millis
    }

    fn cluster(&self) -> ClusterInfo {
        self.harness.cluster.clone()
    }

    fn log(&self, level: LogLevel, message: &str, fields: &[(String, String)]) {
        self.harness.logs.borrow_mut().push(LogEntry {
            level,
            message: message.to_string(),
            fields: fields.to_vec(),
        });
    }
}

/// An admission request as the API server would send it, from a test's
/// objects (a user with no name or groups, not a dry run).
pub fn admission_request<P: Serialize>(
    operation: Operation,
    object: Option<&P>,
    old_object: Option<&P>,
) -> AdmissionRequest {
    let json = |o: &P| serde_json::to_string(o).expect("test object serialises to JSON");
    AdmissionRequest {
        operation,
        object: object.map(json),
        old_object: old_object.map(json),
        user_info: UserInfo::default(),
        dry_run: false,
    }
}

/// What admission answered: the verdict, and the object as defaulting left
/// it (none when defaulting changed nothing or did not run).
#[derive(Clone, Debug)]
pub struct AdmissionOutcome {
    pub verdict: Verdict,
    pub defaulted: Option<serde_json::Value>,
}

impl AdmissionOutcome {
    fn admitted() -> Self {
        Self {
            verdict: Verdict::allow(),
            defaulted: None,
        }
    }

    pub fn allowed(&self) -> bool {
        self.verdict.allowed
    }

    /// The denial message, or "" when there is none.
    pub fn message(&self) -> &str {
        self.verdict.message.as_deref().unwrap_or_default()
    }
}

/// A plugin's response, with typed accessors for assertions.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub response: ReconcileResponse,
}

impl Outcome {
    /// Applied objects of kind `K`.
    pub fn applied<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
    ) -> Result<Vec<K>, serde_json::Error> {
        self.applied_as(&KindRef::of::<K>())
    }

    /// Applied objects of `kind`, parsed as `T`.
    pub fn applied_as<T: DeserializeOwned>(
        &self,
        kind: &KindRef,
    ) -> Result<Vec<T>, serde_json::Error> {
        let mut out = Vec::new();
        for json in &self.response.apply {
            let value: serde_json::Value = serde_json::from_str(json)?;
            if KindRef::of_object(&value).as_ref() == Some(kind) {
                out.push(serde_json::from_value(value)?);
            }
        }
        Ok(out)
    }

    /// The desired status, parsed as `T`; `None` when the plugin left it alone.
    pub fn status<T: DeserializeOwned>(&self) -> Result<Option<T>, serde_json::Error> {
        self.response
            .status
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
    }

    pub fn deleted(&self) -> &[ObjectRef] {
        &self.response.delete
    }

    pub fn events(&self) -> &[Event] {
        &self.response.events
    }

    pub fn requeue_after(&self) -> Option<Duration> {
        self.response.requeue_after_ms.map(Duration::from_millis)
    }

    pub fn finalized(&self) -> bool {
        self.response.finalized
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{Context, Error, MapRule, Object, PartialObject, Response};

    /// Lists Pods in the namespace its spec names ("" for none) and reports
    /// their names in its status.
    struct PodCounter;

    #[derive(Default, Serialize, serde::Deserialize)]
    struct Spec {
        namespace: String,
    }

    impl Reconciler for PodCounter {
        type Primary = Object<Spec>;

        fn metadata() -> PluginMetadata {
            PluginMetadata::new("counter", "1", KindRef::new("example.com", "v1", "Counter"))
                .reads_in_namespace(KindRef::new("", "v1", "Pod"), MapRule::None, true)
        }

        fn reconcile(counter: Self::Primary, ctx: &Context) -> Result<Response, Error> {
            let namespace = Some(counter.spec.namespace.as_str()).filter(|n| !n.is_empty());
            let pods: Vec<PartialObject> =
                ctx.list_as(&KindRef::new("", "v1", "Pod"), namespace, "")?;
            let names: Vec<&str> = pods.iter().map(|p| p.name()).collect();
            Response::new().status(&json!({ "pods": names }))
        }
    }

    fn counter(namespace: &str) -> serde_json::Value {
        json!({"apiVersion": "example.com/v1", "kind": "Counter",
            "metadata": {"name": "c", "namespace": "team-a"}, "spec": {"namespace": namespace}})
    }

    fn pod(namespace: &str, name: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}})
    }

    #[test]
    fn the_harness_confines_same_namespace_reads_as_the_host_does() {
        let harness = Harness::<PodCounter>::new()
            .with(&pod("team-a", "mine"))
            .with(&pod("team-b", "theirs"));
        for asked in ["team-a", ""] {
            let outcome = harness.reconcile(&counter(asked)).unwrap();
            assert_eq!(
                outcome.status::<serde_json::Value>().unwrap(),
                Some(json!({"pods": ["mine"]})),
                "namespace {asked:?}"
            );
        }
        let err = harness.reconcile(&counter("team-b")).unwrap_err();
        assert!(
            err.contains("same-namespace read kind") && err.contains("\"team-b\""),
            "{err}"
        );
    }
}
