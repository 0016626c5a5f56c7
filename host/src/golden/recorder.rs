//! Live reconciles written down as golden cases (`--record DIR` on `dev`,
//! `simulate` and `run`), so traffic from a real cluster becomes tests with
//! no editing: `reconciler-host test plugins/podset.wasm DIR/podset`.
//!
//! A case holds what the plugin could observe and nothing else: the primary
//! and its children as the request carried them, every object its cache
//! reads returned, the clock, and what it answered (or the error it failed
//! with). Replayed, the plugin sees the same request and the same reads, so
//! a deterministic plugin gives the same answer; a case that fails on replay
//! shows the plugin depends on something it was not given.
//!
//! Recording never changes a reconcile: a case that cannot be written is
//! logged once per plugin and skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::jiff::Timestamp;
use reconciler_contract::KindRef;
use reconciler_contract::Projection;
use reconciler_contract::memory_cache::{ListBounds, ListJsonError};
use serde::Serialize;
use serde_json::Value;

use super::case::Expectation;
use super::runner::expectation_of;
use crate::cluster::ObjectKey;
use crate::plugin::{CallError, ObjectReader, ValidResponse};

/// Writes one case file per reconcile under `DIR/<plugin>/`.
pub struct CaseRecorder {
    dir: PathBuf,
    /// Which command recorded, for the description.
    source: String,
    next: AtomicU64,
    /// Plugins whose write failure was already reported.
    failed: Mutex<BTreeSet<String>>,
}

/// What one reconcile observed and answered.
pub struct Recording<'a> {
    pub plugin: &'a str,
    pub version: &'a str,
    pub primary: &'a Value,
    pub children: &'a [Value],
    pub reads: &'a RecordingReader,
    pub now_millis: i64,
    pub answer: Result<&'a ValidResponse, &'a CallError>,
}

/// The case file, in the field order `reconciler-host test` documents.
#[derive(Serialize)]
struct CaseFile<'a> {
    description: String,
    now: String,
    primary: &'a Value,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    objects: Vec<Value>,
    expect: Expectation,
}

impl CaseRecorder {
    /// Records into `dir` (created if missing); `source` names the command.
    pub fn new(dir: &Path, source: &str) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            source: source.to_string(),
            next: AtomicU64::new(1),
            failed: Mutex::default(),
        })
    }

    /// Writes the case of one reconcile; returns its path.
    pub fn record(&self, r: &Recording<'_>) -> Option<PathBuf> {
        let key = ObjectKey::of(r.primary)?;
        let sequence = self.next.fetch_add(1, Ordering::Relaxed);
        let now = Timestamp::from_millisecond(r.now_millis)
            .map(|t| t.to_string())
            .unwrap_or_else(|_| r.now_millis.to_string());
        let object_name = match &key.namespace {
            Some(ns) => format!("{ns}/{}", key.name),
            None => key.name.clone(),
        };
        let case = CaseFile {
            description: format!(
                "recorded by {} at {now}: {} {} reconciling {} {object_name}",
                self.source, r.plugin, r.version, key.kind.kind
            ),
            now,
            primary: r.primary,
            objects: observed_objects(&key, r.children, r.reads),
            expect: match r.answer {
                Ok(response) => expectation_of(response.clone()),
                Err(e) => Expectation {
                    error: Some(e.to_string()),
                    ..Expectation::default()
                },
            },
        };
        let file = self.dir.join(r.plugin).join(format!(
            "{sequence:06}-{}-{}.yaml",
            key.namespace.as_deref().unwrap_or("cluster"),
            key.name
        ));
        let written = serde_yaml_ng::to_string(&case)
            .map_err(std::io::Error::other)
            .and_then(|text| {
                std::fs::create_dir_all(self.dir.join(r.plugin))?;
                std::fs::write(&file, text)
            });
        match written {
            Ok(()) => Some(file),
            Err(e) => {
                let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
                if failed.insert(r.plugin.to_string()) {
                    tracing::warn!(
                        plugin = r.plugin,
                        "cannot record reconciles into {}: {e} (further failures for this plugin are not logged)",
                        self.dir.display()
                    );
                }
                None
            }
        }
    }
}

/// The children and every object the reads returned, once each, without
/// the primary (the case has it on its own), in a stable order.
fn observed_objects(
    primary: &ObjectKey,
    children: &[Value],
    reads: &RecordingReader,
) -> Vec<Value> {
    let mut objects = BTreeMap::new();
    for object in children.iter().cloned().chain(reads.returned()) {
        if let Some(key) = ObjectKey::of(&object)
            && &key != primary
        {
            objects.entry(key).or_insert(object);
        }
    }
    objects.into_values().collect()
}

/// An [`ObjectReader`] that keeps what it returned, for the case.
pub struct RecordingReader {
    inner: Arc<dyn ObjectReader>,
    returned: Mutex<Vec<String>>,
}

impl RecordingReader {
    pub fn new(inner: Arc<dyn ObjectReader>) -> Self {
        Self {
            inner,
            returned: Mutex::default(),
        }
    }

    fn keep(&self, texts: &[String]) {
        self.returned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(texts.iter().cloned());
    }

    /// Every object returned so far, parsed.
    fn returned(&self) -> Vec<Value> {
        self.returned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(|text| serde_json::from_str(text).ok())
            .collect()
    }
}

impl ObjectReader for RecordingReader {
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
        projection: Projection,
    ) -> Option<String> {
        let found = self.inner.get(kind, namespace, name, projection);
        if let Some(text) = &found {
            self.keep(std::slice::from_ref(text));
        }
        found
    }

    fn list(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &str,
        projection: Projection,
    ) -> Result<Vec<String>, String> {
        let listed = self.inner.list(kind, namespace, selector, projection)?;
        self.keep(&listed);
        Ok(listed)
    }

    fn list_within(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &str,
        projection: Projection,
        bounds: ListBounds,
    ) -> Result<Vec<String>, ListJsonError> {
        let listed = self
            .inner
            .list_within(kind, namespace, selector, projection, bounds)?;
        self.keep(&listed);
        Ok(listed)
    }
}
