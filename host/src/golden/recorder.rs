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
//! logged once per plugin and skipped. Where the cases go, how much room
//! they may take and who may read them is `record_dir.rs`; Secret values
//! are left out unless asked for (`redact.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use k8s_openapi::jiff::Timestamp;
use reconciler_contract::memory_cache::{ListBounds, ListJsonError};
use reconciler_contract::{ClusterInfo, LOCAL_CLUSTER};
use serde::Serialize;
use serde_json::Value;

use super::case::Expectation;
use super::record_dir::RecordDir;
use super::redact::redact_secret;
use super::runner::expectation_of;
use crate::cluster::ObjectKey;
use crate::plugin::{CallError, GetRequest, ListRequest, ObjectReader, ValidResponse};

/// Where and how reconciles are recorded: `--record DIR`,
/// `--record-max-mib`, `--record-secret-data`.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub dir: PathBuf,
    /// What all cases under `dir` may take together; the oldest are
    /// removed past it.
    pub max_bytes: u64,
    /// Write Secret `data` and `stringData` as read instead of redacted.
    pub secret_data: bool,
}

/// Recording budget by default: room for thousands of typical cases, small
/// beside a pod's disk.
pub const DEFAULT_RECORD_MAX_MIB: u64 = 100;

impl RecordOptions {
    /// Recording into `dir` with the default budget, Secrets redacted.
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            max_bytes: DEFAULT_RECORD_MAX_MIB << 20,
            secret_data: false,
        }
    }
}

/// Writes one case file per reconcile under `DIR/<plugin>/`.
pub struct CaseRecorder {
    dir: RecordDir,
    secret_data: bool,
    /// Which command recorded, for the description.
    source: String,
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
    /// The cluster the primary lives in.
    pub cluster: &'a ClusterInfo,
    pub answer: Result<&'a ValidResponse, &'a CallError>,
}

/// The case file, in the field order `reconciler-host test` documents.
#[derive(Serialize)]
struct CaseFile {
    description: String,
    now: String,
    cluster: ClusterInfo,
    primary: Value,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    objects: Vec<Value>,
    expect: Expectation,
}

impl CaseRecorder {
    /// Records as `options` say (the directory is created if missing);
    /// `source` names the command.
    pub fn new(options: &RecordOptions, source: &str) -> std::io::Result<Self> {
        Ok(Self {
            dir: RecordDir::open(&options.dir, options.max_bytes)?,
            secret_data: options.secret_data,
            source: source.to_string(),
            failed: Mutex::default(),
        })
    }

    /// Writes the case of one reconcile; returns its path.
    pub fn record(&self, r: &Recording<'_>) -> Option<PathBuf> {
        let (name, case) = case_of(r, &self.source, self.secret_data)?;
        let written = serde_yaml_ng::to_string(&case)
            .map_err(|e| e.to_string())
            .and_then(|text| {
                self.dir
                    .write(r.plugin, &name, &text)
                    .map_err(|e| e.to_string())
            });
        match written {
            Ok(file) => Some(file),
            Err(e) => {
                let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
                if failed.insert(r.plugin.to_string()) {
                    tracing::warn!(
                        plugin = r.plugin,
                        "cannot record reconciles into {}: {e} (further failures for this plugin are not logged)",
                        self.dir.root().display()
                    );
                }
                None
            }
        }
    }
}

/// What a case is made of: the primary, every other object the plugin saw
/// (its children and what its reads returned), the clock, the cluster and
/// the answer.
pub struct CaseParts<'a> {
    pub plugin: &'a str,
    pub version: &'a str,
    pub primary: &'a Value,
    pub objects: Vec<Value>,
    pub now_millis: i64,
    pub cluster: &'a ClusterInfo,
    pub answer: Result<&'a ValidResponse, String>,
}

/// The case of one reconcile, recorded by `source` (Secret values left out
/// unless `secret_data`), and the name of its file (without `.yaml`).
pub fn case_of(
    r: &Recording<'_>,
    source: &str,
    secret_data: bool,
) -> Option<(String, impl Serialize + use<>)> {
    let objects = r.children.iter().cloned().chain(r.reads.returned());
    let parts = CaseParts {
        plugin: r.plugin,
        version: r.version,
        primary: r.primary,
        objects: objects.collect(),
        now_millis: r.now_millis,
        cluster: r.cluster,
        answer: r.answer.map_err(ToString::to_string),
    };
    case_from(parts, source, secret_data)
}

/// The case of `parts`; see [`case_of`].
pub fn case_from(
    parts: CaseParts<'_>,
    source: &str,
    secret_data: bool,
) -> Option<(String, impl Serialize + use<>)> {
    let key = ObjectKey::of(parts.primary)?;
    let now = Timestamp::from_millisecond(parts.now_millis)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| parts.now_millis.to_string());
    let object_name = match &key.namespace {
        Some(ns) => format!("{ns}/{}", key.name),
        None => key.name.clone(),
    };
    let mut case = CaseFile {
        description: format!(
            "recorded by {} at {now}: {} {} reconciling {} {object_name} in cluster {}",
            source, parts.plugin, parts.version, key.kind.kind, parts.cluster.name
        ),
        now,
        cluster: parts.cluster.clone(),
        primary: parts.primary.clone(),
        objects: observed_objects(&key, parts.objects),
        expect: match parts.answer {
            Ok(response) => expectation_of(response.clone()),
            Err(error) => Expectation {
                error: Some(error),
                ..Expectation::default()
            },
        },
    };
    if !secret_data {
        let objects = case.objects.iter_mut().chain(&mut case.expect.apply);
        for object in std::iter::once(&mut case.primary).chain(objects) {
            redact_secret(object);
        }
    }
    Some((case_name(&key, parts.cluster), case))
}

/// The file name of the case of the primary `key` in `cluster` (without
/// `.yaml`): objects of the same name in two clusters are two cases.
pub fn case_name(key: &ObjectKey, cluster: &ClusterInfo) -> String {
    let cluster = match cluster.name.as_str() {
        LOCAL_CLUSTER => String::new(),
        name => format!("{name}-"),
    };
    format!(
        "{cluster}{}-{}",
        key.namespace.as_deref().unwrap_or("cluster"),
        key.name
    )
}

/// The children and every object the reads returned, once each, without
/// the primary (the case has it on its own), in a stable order.
fn observed_objects(primary: &ObjectKey, seen: Vec<Value>) -> Vec<Value> {
    let mut objects = BTreeMap::new();
    for object in seen {
        if let Some(key) = ObjectKey::of(&object)
            && &key != primary
        {
            objects.entry(key).or_insert(object);
        }
    }
    objects.into_values().collect()
}

/// One read the plugin made through the host's cache, and what it found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadMade {
    /// `get ConfigMap default/settings`, `list Pod in default matching app=web`.
    pub request: String,
    /// Objects returned.
    pub found: usize,
}

impl fmt::Display for ReadMade {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.request, self.found)
    }
}

/// An [`ObjectReader`] that keeps what it returned, for the case.
pub struct RecordingReader {
    inner: Arc<dyn ObjectReader>,
    returned: Mutex<Vec<String>>,
    /// Each request and how many objects it returned (the journal's
    /// "reads made").
    made: Mutex<Vec<ReadMade>>,
}

impl RecordingReader {
    pub fn new(inner: Arc<dyn ObjectReader>) -> Self {
        Self {
            inner,
            returned: Mutex::default(),
            made: Mutex::default(),
        }
    }

    /// Each request made so far and how many objects it returned.
    pub fn reads_made(&self) -> Vec<ReadMade> {
        self.made.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn made(&self, request: String, found: usize) {
        self.made
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ReadMade { request, found });
    }

    fn keep(&self, texts: &[String]) {
        self.returned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(texts.iter().cloned());
    }

    /// Every object returned so far, parsed.
    /// The texts of every object returned so far, taken out of the reader.
    pub fn take_texts(&self) -> Vec<String> {
        std::mem::take(&mut *self.returned.lock().unwrap_or_else(|e| e.into_inner()))
    }

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
    fn get(&self, request: &GetRequest<'_>) -> Option<String> {
        let found = self.inner.get(request);
        if let Some(text) = &found {
            self.keep(std::slice::from_ref(text));
        }
        let object = match request.namespace {
            Some(namespace) => format!("{namespace}/{}", request.name),
            None => request.name.to_string(),
        };
        self.made(
            format!("get {} {object}", request.kind.kind),
            usize::from(found.is_some()),
        );
        found
    }

    fn list(&self, request: &ListRequest<'_>) -> Result<Vec<String>, String> {
        let listed = self.inner.list(request)?;
        self.keep(&listed);
        self.made(list_text(request), listed.len());
        Ok(listed)
    }

    fn list_within(
        &self,
        request: &ListRequest<'_>,
        bounds: ListBounds,
    ) -> Result<Vec<String>, ListJsonError> {
        let listed = self.inner.list_within(request, bounds)?;
        self.keep(&listed);
        self.made(list_text(request), listed.len());
        Ok(listed)
    }
}

/// A list request in words: `list Pod in default matching app=web`.
fn list_text(request: &ListRequest<'_>) -> String {
    let mut text = format!("list {}", request.kind.kind);
    match request.namespace {
        Some(namespace) => text.push_str(&format!(" in {namespace}")),
        None => text.push_str(" in every namespace"),
    }
    if !request.selector.is_empty() {
        text.push_str(&format!(" matching {}", request.selector));
    }
    text
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use reconciler_contract::memory_cache::MemoryCache;
    use serde_json::json;

    use super::*;

    fn website(size: u64) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Website",
            "metadata": {"name": "web", "namespace": "default", "uid": "u-1"},
            "spec": {"size": size}})
    }

    fn secret(password_base64: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": "default"},
            "data": {"password": password_base64}})
    }

    /// Records one failed reconcile of `primary` that was shown `children`.
    fn record(recorder: &CaseRecorder, primary: &Value, children: &[Value]) -> PathBuf {
        let reads = RecordingReader::new(Arc::new(MemoryCache::new()));
        let failed = CallError::Plugin("not ready".into());
        recorder
            .record(&Recording {
                plugin: "web",
                version: "1.0.0",
                primary,
                children,
                reads: &reads,
                now_millis: 0,
                cluster: &ClusterInfo::local(),
                answer: Err(&failed),
            })
            .expect("the case is written")
    }

    fn cases(dir: &Path) -> Vec<PathBuf> {
        let mut cases: Vec<PathBuf> = std::fs::read_dir(dir.join("web"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        cases.sort();
        cases
    }

    #[test]
    fn a_restarted_recorder_never_overwrites_earlier_cases() {
        let dir = tempfile::tempdir().unwrap();
        let options = RecordOptions::new(dir.path());
        let first = record(
            &CaseRecorder::new(&options, "run").unwrap(),
            &website(1),
            &[],
        );
        let before = std::fs::read_to_string(&first).unwrap();
        // A second process, as after a restart.
        let second = record(
            &CaseRecorder::new(&options, "run").unwrap(),
            &website(2),
            &[],
        );
        assert_ne!(first, second);
        assert_eq!(std::fs::read_to_string(&first).unwrap(), before);
        assert_eq!(cases(dir.path()), vec![first, second]);
    }

    #[test]
    fn past_the_budget_the_oldest_cases_are_removed_across_restarts() {
        let measure = tempfile::tempdir().unwrap();
        let one = record(
            &CaseRecorder::new(&RecordOptions::new(measure.path()), "run").unwrap(),
            &website(1),
            &[],
        );
        let case_bytes = std::fs::metadata(one).unwrap().len();

        let dir = tempfile::tempdir().unwrap();
        let options = RecordOptions {
            max_bytes: 3 * case_bytes + case_bytes / 2,
            ..RecordOptions::new(dir.path())
        };
        let recorder = CaseRecorder::new(&options, "run").unwrap();
        let written: Vec<PathBuf> = (0..10)
            .map(|_| record(&recorder, &website(1), &[]))
            .collect();
        assert_eq!(cases(dir.path()), written[7..].to_vec(), "the newest three");

        let restarted = CaseRecorder::new(&options, "run").unwrap();
        let newest = record(&restarted, &website(1), &[]);
        assert_eq!(
            cases(dir.path()),
            vec![written[8].clone(), written[9].clone(), newest],
            "the cases of the earlier run count towards the budget"
        );

        let tiny = RecordOptions {
            max_bytes: case_bytes / 2,
            ..RecordOptions::new(dir.path())
        };
        let reads = RecordingReader::new(Arc::new(MemoryCache::new()));
        let failed = CallError::Plugin("not ready".into());
        let skipped = CaseRecorder::new(&tiny, "run").unwrap().record(&Recording {
            plugin: "web",
            version: "1.0.0",
            primary: &website(1),
            children: &[],
            reads: &reads,
            now_millis: 0,
            cluster: &ClusterInfo::local(),
            answer: Err(&failed),
        });
        assert_eq!(skipped, None, "a case larger than the budget is skipped");
    }

    #[test]
    fn cases_and_their_directories_are_private_to_the_host_user() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("recorded");
        let case = record(
            &CaseRecorder::new(&RecordOptions::new(&root), "run").unwrap(),
            &website(1),
            &[],
        );
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&case), 0o600);
        assert_eq!(mode(&root.join("web")), 0o700);
        assert_eq!(mode(&root), 0o700);
    }

    #[test]
    fn secret_values_are_redacted_unless_asked_for() {
        // base64 of "hunter2"
        let password = "aHVudGVyMg==";
        let dir = tempfile::tempdir().unwrap();
        let options = RecordOptions::new(dir.path());
        let case = record(
            &CaseRecorder::new(&options, "run").unwrap(),
            &website(1),
            &[secret(password)],
        );
        let text = std::fs::read_to_string(case).unwrap();
        assert!(!text.contains(password), "{text}");
        assert!(text.contains("password: cmVkYWN0ZWQ="), "{text}");

        let kept = RecordOptions {
            secret_data: true,
            ..options
        };
        let case = record(
            &CaseRecorder::new(&kept, "run").unwrap(),
            &website(1),
            &[secret(password)],
        );
        let text = std::fs::read_to_string(case).unwrap();
        assert!(text.contains(password), "{text}");
    }
}
