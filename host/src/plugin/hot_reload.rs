//! Hot reload: keeping the engine in line with a plugins directory.
//!
//! [`PluginDirectory::sync`] rescans the directory and compares each
//! `*.wasm` file's content hash with the version being served from it:
//! - a new file is loaded, validated and started;
//! - a changed file is compiled and validated first, and only then swapped
//!   in between reconciles (calls in flight finish on the old version);
//!   every object of the plugin is then reconciled once by the new version;
//!   a new version that declares another finalizer (or none) takes over the
//!   old one's objects first (the engine's `finalizer_handover`),
//!   and the reload's line says what that did;
//! - a removed file stops its plugin: nothing is deleted, no finalizer is
//!   removed, the objects wait for a plugin to serve them again; the
//!   unload's lines name the objects its finalizer still holds, each with
//!   the kubectl command that releases it.
//!
//! A version that fails to load, or that claims a primary kind another
//! plugin holds, leaves whatever was serving in place, is reported once per
//! content hash (naming the file and the reason) and counted. A version
//! whose kinds cannot be watched yet (a CRD not installed, RBAC missing, the
//! API down) is reported once too, and [`PluginDirectory::retry_waiting`]
//! tries it again until it starts; the other plugins run meanwhile. A file whose
//! content changes while it is read is still being written: it is skipped
//! without an error, and the write's next event brings it back.
//!
//! The directory is the host's one plugin set: each version is loaded once,
//! and what serves is decided once, here. The engine is one reader of that
//! decision ([`PluginHost`]); the admission server is the other, through
//! the [`ServingFollower`] the directory publishes to after every change.
//! Before a replica leads there is no engine: the directory serves into a
//! [`Standby`](super::standby::Standby) (the same name and primary-kind
//! rules, nothing watched), and [`PluginDirectory::attach`] hands what it
//! serves to the engine once it exists. So a version that fails to load or is refused keeps the last
//! good one serving admission exactly as it keeps it reconciling.

mod candidate_sync;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use reconciler_contract::{KindRef, PluginMetadata};

use super::candidates::{Candidates, serving_file_of};
use super::directory::plugin_files;
use super::errors::LoadFailure;
use super::finalizer_report::{FinalizerHandover, FinalizerHold, holds_text};
use super::loaded::LoadedPlugin;
use super::plugin_host::{PluginHost, Refusal, ServingFollower};
use super::sandbox::{Sandbox, content_hash};
use crate::cluster::clock::rfc3339;
use crate::cluster::{Clock, RealClock};

/// One change to what the host serves, or a version it refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReloadEvent {
    Loaded {
        file: PathBuf,
        name: String,
        version: String,
        sha256: String,
    },
    Reloaded {
        file: PathBuf,
        name: String,
        old_version: String,
        old_sha256: String,
        version: String,
        sha256: String,
        /// What was done about the old version's finalizer, when the new
        /// one declares another or none.
        finalizers: Option<FinalizerHandover>,
    },
    Unloaded {
        file: PathBuf,
        name: String,
        /// Objects its finalizers still hold.
        holds: Vec<FinalizerHold>,
    },
    Failed {
        file: PathBuf,
        reason: String,
        /// Retried by [`PluginDirectory::retry_waiting`] until it starts.
        retrying: bool,
    },
    /// A candidate (`NAME.candidate.wasm`) now runs in shadow beside the
    /// version `serving_version` of its plugin.
    CandidateLoaded {
        file: PathBuf,
        name: String,
        version: String,
        sha256: String,
        serving_version: String,
    },
    /// A candidate stopped running beside its plugin: its file is gone, or
    /// the plugin it shadowed is.
    CandidateUnloaded { file: PathBuf, name: String },
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

impl fmt::Display for ReloadEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReloadEvent::Loaded {
                file,
                name,
                version,
                sha256,
            } => {
                write!(
                    f,
                    "loaded plugin {name} {version} ({}) from {}",
                    short(sha256),
                    file.display()
                )
            }
            ReloadEvent::Reloaded {
                file,
                name,
                old_version,
                old_sha256,
                version,
                sha256,
                finalizers,
            } => {
                write!(
                    f,
                    "reloaded plugin {name}: {old_version} ({}) -> {version} ({}) from {}",
                    short(old_sha256),
                    short(sha256),
                    file.display()
                )?;
                if let Some(finalizers) = finalizers {
                    write!(f, "; {finalizers}")?;
                }
                Ok(())
            }
            ReloadEvent::Unloaded { file, name, holds } => {
                write!(
                    f,
                    "unloaded plugin {name}: {} is gone (its objects are left as they are)",
                    file.display()
                )?;
                if !holds.is_empty() {
                    write!(f, "; {}", holds_text(name, holds))?;
                }
                Ok(())
            }
            ReloadEvent::CandidateLoaded {
                file,
                name,
                version,
                sha256,
                serving_version,
            } => write!(
                f,
                "candidate {name} {version} ({}) from {} runs in shadow beside {serving_version}: it decides on the same inputs and applies nothing",
                short(sha256),
                file.display()
            ),
            ReloadEvent::CandidateUnloaded { file, name } => {
                write!(f, "candidate of plugin {name} stopped ({})", file.display())
            }
            ReloadEvent::Failed {
                file,
                reason,
                retrying: false,
            } => {
                write!(
                    f,
                    "error: {}: {reason} (whatever was serving keeps serving)",
                    file.display()
                )
            }
            ReloadEvent::Failed {
                file,
                reason,
                retrying: true,
            } => {
                write!(
                    f,
                    "error: {}: {reason} (it waits and is retried; whatever was serving keeps serving)",
                    file.display()
                )
            }
        }
    }
}

#[derive(Clone)]
struct Served {
    /// The version serving: the one copy the engine and admission share.
    plugin: Arc<LoadedPlugin>,
    name: String,
    version: String,
    sha256: String,
    metadata: PluginMetadata,
    loaded_at_millis: i64,
}

impl Served {
    /// `plugin`, loaded now from content hashing to `sha256`.
    fn of(plugin: Arc<LoadedPlugin>, sha256: String) -> Self {
        Self {
            name: plugin.name().to_string(),
            version: plugin.metadata().version.clone(),
            metadata: plugin.metadata().clone(),
            plugin,
            sha256,
            loaded_at_millis: RealClock.now_millis(),
        }
    }
}

/// A version refused, reported once.
#[derive(Clone, Debug)]
struct RefusedVersion {
    sha256: String,
    why: Refusal,
    reason: String,
}

/// One plugin file, for `/plugins`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginStatus {
    pub file: String,
    /// What is served from the file; `None` when no version of it serves.
    pub name: Option<String>,
    pub version: Option<String>,
    pub sha256: Option<String>,
    pub kinds: Option<PluginKinds>,
    pub loaded_at: Option<String>,
    /// Why the file's latest refused version was refused, while it is.
    pub last_reload_error: Option<String>,
    /// The refused version waits for its kinds to be served and is retried.
    pub waiting_for_kinds: bool,
    /// A candidate refused only because its serving file serves nothing
    /// yet: tried again when that changes.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub waiting_for_serving: bool,
    /// For a candidate file: the plugin it runs in shadow beside.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate_for: Option<String>,
}

/// A plugin's kinds by role, as `group/version Kind` text.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PluginKinds {
    pub primary: String,
    pub owns: Vec<String>,
    pub reads: Vec<String>,
    pub writes: Vec<String>,
}

impl PluginKinds {
    fn of(metadata: &PluginMetadata) -> Self {
        let text = |k: &KindRef| k.to_string();
        Self {
            primary: text(&metadata.primary),
            owns: metadata.owns.iter().map(text).collect(),
            reads: metadata.reads.iter().map(|r| text(&r.kind)).collect(),
            writes: metadata.writes.iter().map(text).collect(),
        }
    }
}

/// The plugins directory as the engine serves it.
pub struct PluginDirectory {
    dir: PathBuf,
    /// Directories of pulled plugins (the registry's served files),
    /// scanned after `dir`, so a file there keeps a kind it claims first.
    extra_dirs: Vec<PathBuf>,
    sandbox: Arc<Sandbox>,
    served: BTreeMap<PathBuf, Served>,
    /// Candidates running in shadow, by their file.
    candidates: BTreeMap<PathBuf, Served>,
    /// Where the candidates are published for the engines to read.
    published_candidates: Arc<Candidates>,
    /// The content hash of a refused version per file (reported once), and
    /// why it was refused.
    refused: BTreeMap<PathBuf, RefusedVersion>,
    failures: u64,
    /// Told what serves after every change.
    admission: Option<Arc<dyn ServingFollower>>,
}

impl PluginDirectory {
    pub fn new(dir: impl Into<PathBuf>, sandbox: Arc<Sandbox>) -> Self {
        Self {
            dir: dir.into(),
            extra_dirs: Vec::new(),
            sandbox,
            served: BTreeMap::new(),
            candidates: BTreeMap::new(),
            published_candidates: Candidates::new(),
            refused: BTreeMap::new(),
            failures: 0,
            admission: None,
        }
    }

    /// Publishes the candidates it decides on to `candidates` (shared with
    /// the engines) rather than to a set of its own.
    pub fn publishing_candidates_to(mut self, candidates: Arc<Candidates>) -> Self {
        self.published_candidates = candidates;
        self.publish();
        self
    }

    /// The candidates it decides on, as the engines read them.
    pub fn candidates(&self) -> Arc<Candidates> {
        self.published_candidates.clone()
    }

    /// Publishes what serves to `admission` after every change, so the
    /// admission server answers from exactly these versions.
    pub fn publishing_to(mut self, admission: Arc<impl ServingFollower + 'static>) -> Self {
        self.admission = Some(admission);
        self.publish();
        self
    }

    fn publish(&self) {
        if let Some(admission) = &self.admission {
            admission.follow(self.served.values().map(|s| s.plugin.clone()).collect());
        }
        self.published_candidates.set(
            self.candidates
                .values()
                .map(|c| (c.name.clone(), c.plugin.clone()))
                .collect(),
        );
    }

    /// Hands every plugin served so far (into a
    /// [`Standby`](super::standby::Standby)) to `host`,
    /// the engine once this replica leads: nothing is loaded again. A
    /// plugin `host` refuses stops serving admission too and is reported
    /// as a load of it would be (waiting ones are retried).
    pub async fn attach<H: PluginHost>(&mut self, host: &H) -> Vec<ReloadEvent> {
        let mut events = Vec::new();
        let served: Vec<(PathBuf, Served)> = std::mem::take(&mut self.served).into_iter().collect();
        for (file, served) in served {
            match host.add_plugin(served.plugin.clone()).await {
                Ok(()) => {
                    events.push(ReloadEvent::Loaded {
                        file: file.clone(),
                        name: served.name.clone(),
                        version: served.version.clone(),
                        sha256: served.sha256.clone(),
                    });
                    self.served.insert(file, served);
                }
                Err(e) => events.push(self.refuse(&file, served.sha256, e.reason, e.why)),
            }
        }
        self.publish();
        log_events(&events);
        events
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Also serves the plugin files of `dir` (pulled plugins), under the
    /// same rules as the plugins directory's own.
    pub fn also_serving(mut self, dir: impl Into<PathBuf>) -> Self {
        self.extra_dirs.push(dir.into());
        self
    }

    /// Versions refused so far (failed to load, or claimed a taken kind).
    pub fn failures(&self) -> u64 {
        self.failures
    }

    /// Rescans the directory and brings `engine` in line with it.
    pub async fn sync<H: PluginHost>(&mut self, engine: &H) -> Vec<ReloadEvent> {
        let mut events = Vec::new();
        // Refused earlier only because another plugin held their kind.
        let waiting: BTreeMap<PathBuf, String> = self
            .refused
            .iter()
            .filter(|(f, r)| r.why == Refusal::Conflict && serving_file_of(f).is_none())
            .map(|(f, r)| (f.clone(), r.sha256.clone()))
            .collect();
        let mut files = Vec::new();
        for dir in std::iter::once(&self.dir).chain(&self.extra_dirs) {
            match plugin_files(dir) {
                Ok(found) => files.extend(found),
                Err(e) => {
                    // An unreadable directory (a volume being remounted) is not a
                    // reason to stop serving what is loaded.
                    tracing::warn!("cannot read the plugins directory {}: {e}", dir.display());
                    return events;
                }
            }
        }
        let (candidate_files, files): (Vec<PathBuf>, Vec<PathBuf>) = files
            .into_iter()
            .partition(|f| serving_file_of(f).is_some());
        for file in &files {
            if let Some(event) = self.sync_file(file, engine).await {
                events.push(event);
            }
        }
        let gone: Vec<PathBuf> = self
            .served
            .keys()
            .filter(|f| !files.contains(f))
            .cloned()
            .collect();
        for file in gone {
            if let Some(served) = self.served.remove(&file) {
                let holds = engine.finalizer_holds(&served.name);
                engine.remove_plugin(&served.name);
                events.push(ReloadEvent::Unloaded {
                    file,
                    name: served.name,
                    holds,
                });
            }
        }
        self.refused
            .retain(|f, _| files.contains(f) || candidate_files.contains(f));
        // A plugin that was refused because another held its kind gets
        // another chance once what is served has changed.
        let changed = events
            .iter()
            .any(|e| !matches!(e, ReloadEvent::Failed { .. }));
        if changed {
            for (file, sha) in waiting {
                if self
                    .refused
                    .get(&file)
                    .is_some_and(|refused| refused.sha256 == sha)
                {
                    self.refused.remove(&file);
                    if let Some(event) = self.sync_file(&file, engine).await {
                        events.push(event);
                    }
                }
            }
        }
        let candidate_events = self.sync_candidates(&candidate_files, changed).await;
        events.extend(candidate_events);
        self.publish();
        log_events(&events);
        events
    }

    /// Whether some version waits for its kinds to become watchable.
    pub fn waiting(&self) -> bool {
        self.refused.values().any(|r| r.why == Refusal::Unwatchable)
    }

    /// Tries again every version whose kinds could not be watched. One that
    /// still cannot is not reported again (it was, once); one that now
    /// starts is reported as loaded or reloaded.
    pub async fn retry_waiting<H: PluginHost>(&mut self, engine: &H) -> Vec<ReloadEvent> {
        let waiting: Vec<(PathBuf, String)> = self
            .refused
            .iter()
            .filter(|(_, r)| r.why == Refusal::Unwatchable)
            .map(|(f, r)| (f.clone(), r.sha256.clone()))
            .collect();
        let mut events = Vec::new();
        for (file, sha) in waiting {
            self.refused.remove(&file);
            let failures = self.failures;
            match self.sync_file(&file, engine).await {
                Some(ReloadEvent::Failed {
                    reason,
                    retrying: true,
                    ..
                }) if self.refused.get(&file).is_some_and(|r| r.sha256 == sha) => {
                    self.failures = failures;
                    tracing::debug!("{}: still waiting: {reason}", file.display());
                }
                Some(event) => {
                    match &event {
                        ReloadEvent::Failed { .. } => tracing::error!("{event}"),
                        _ => tracing::info!("{event}"),
                    }
                    events.push(event);
                }
                None => {}
            }
        }
        self.publish();
        events
    }

    /// Brings `engine` in line with one file: nothing when its content is
    /// what serves or was refused already, or is still being written.
    async fn sync_file<H: PluginHost>(&mut self, file: &Path, engine: &H) -> Option<ReloadEvent> {
        let bytes = std::fs::read(file).ok()?;
        let sha256 = content_hash(&bytes);
        if self.served.get(file).is_some_and(|s| s.sha256 == sha256)
            || self
                .refused
                .get(file)
                .is_some_and(|refused| refused.sha256 == sha256)
        {
            return None;
        }
        let plugin = match self.load(file, bytes, &sha256).await {
            Ok(plugin) => plugin?,
            Err(refused) => return Some(refused),
        };
        let served = Served::of(plugin, sha256);
        Some(match self.served.get(file).cloned() {
            Some(old) if old.name == served.name => self.reload(file, old, served, engine).await,
            previous => self.start(file, previous, served, engine).await,
        })
    }

    /// Compiles and validates `bytes`, read from `file`, within the load
    /// timeout: the plugin, `None` when the file was still being written,
    /// or the refusal of a version that cannot serve.
    async fn load(
        &mut self,
        file: &Path,
        bytes: Vec<u8>,
        sha256: &str,
    ) -> Result<Option<Arc<LoadedPlugin>>, ReloadEvent> {
        let sandbox = self.sandbox.clone();
        let path = file.to_path_buf();
        // A compile cannot be interrupted; past the deadline it finishes on
        // its thread and is dropped.
        let limit = self.sandbox.limits().load_timeout();
        let loading = tokio::task::spawn_blocking(move || sandbox.load_bytes(&path, &bytes));
        let sha256 = sha256.to_string();
        let Ok(loaded) = tokio::time::timeout(limit, loading).await else {
            let reason = LoadFailure::LoadTimeout { limit }.to_string();
            return Err(self.refuse(file, sha256, reason, Refusal::Broken));
        };
        match loaded {
            Ok(Ok((plugin, _))) => Ok(Some(Arc::new(plugin))),
            Ok(Err(_)) if still_being_written(file, &sha256) => Ok(None),
            Ok(Err(e)) => Err(self.refuse(file, sha256, e.reason.to_string(), Refusal::Broken)),
            Err(e) => {
                let reason = format!("loading panicked: {e}");
                Err(self.refuse(file, sha256, reason, Refusal::Broken))
            }
        }
    }

    /// Swaps a new version of the plugin `old` serves from `file` in.
    async fn reload<H: PluginHost>(
        &mut self,
        file: &Path,
        old: Served,
        served: Served,
        engine: &H,
    ) -> ReloadEvent {
        let sha256 = served.sha256.clone();
        match engine.replace_plugin(served.plugin.clone()).await {
            Ok(replaced) => {
                self.served.insert(file.to_path_buf(), served.clone());
                self.refused.remove(file);
                ReloadEvent::Reloaded {
                    file: file.to_path_buf(),
                    name: served.name,
                    old_version: old.version,
                    old_sha256: old.sha256,
                    version: served.version,
                    sha256,
                    finalizers: replaced.finalizers,
                }
            }
            Err(e) => self.refuse(file, sha256, e.reason, e.why),
        }
    }

    /// Starts the plugin of a new file, or of a file that now holds a
    /// differently named plugin (`previous`). The old one steps aside (the
    /// new one may well take over its primary kind) and comes back if the
    /// new one cannot start.
    async fn start<H: PluginHost>(
        &mut self,
        file: &Path,
        previous: Option<Served>,
        served: Served,
        engine: &H,
    ) -> ReloadEvent {
        let holds = previous
            .as_ref()
            .map(|old| engine.finalizer_holds(&old.name))
            .unwrap_or_default();
        let stepped_aside = previous
            .as_ref()
            .and_then(|old| engine.remove_plugin(&old.name));
        let sha256 = served.sha256.clone();
        match engine.add_plugin(served.plugin.clone()).await {
            Ok(()) => {
                if let Some(old) = &previous {
                    warn_of_holds(file, &old.name, &served.metadata, holds);
                }
                self.served.insert(file.to_path_buf(), served.clone());
                self.refused.remove(file);
                ReloadEvent::Loaded {
                    file: file.to_path_buf(),
                    name: served.name,
                    version: served.version,
                    sha256,
                }
            }
            Err(e) => {
                if let Some(old) = stepped_aside
                    && let Err(again) = engine.add_plugin(old).await
                {
                    tracing::error!(
                        "cannot restore the previous plugin of {}: {again}",
                        file.display()
                    );
                    self.served.remove(file);
                }
                self.refuse(file, sha256, e.reason, e.why)
            }
        }
    }

    fn refuse(&mut self, file: &Path, sha256: String, reason: String, why: Refusal) -> ReloadEvent {
        self.failures += 1;
        self.refused.insert(
            file.to_path_buf(),
            RefusedVersion {
                sha256,
                why,
                reason: reason.clone(),
            },
        );
        ReloadEvent::Failed {
            file: file.to_path_buf(),
            reason,
            retrying: why == Refusal::Unwatchable,
        }
    }

    /// Each plugin file as it stands: what it serves, since when, and the
    /// last version of it that was refused and why.
    pub fn status(&self) -> Vec<PluginStatus> {
        let files: std::collections::BTreeSet<&PathBuf> = self
            .served
            .keys()
            .chain(self.candidates.keys())
            .chain(self.refused.keys())
            .collect();
        files
            .into_iter()
            .map(|file| {
                let candidate = self.candidates.get(file);
                let served = self.served.get(file).or(candidate);
                let refused = self.refused.get(file);
                PluginStatus {
                    file: file.display().to_string(),
                    name: served.map(|s| s.name.clone()),
                    version: served.map(|s| s.version.clone()),
                    sha256: served.map(|s| s.sha256.clone()),
                    kinds: served.map(|s| PluginKinds::of(&s.metadata)),
                    loaded_at: served.map(|s| rfc3339(s.loaded_at_millis)),
                    last_reload_error: refused.map(|r| r.reason.clone()),
                    waiting_for_kinds: refused.is_some_and(|r| r.why == Refusal::Unwatchable),
                    waiting_for_serving: refused
                        .is_some_and(|r| r.why == Refusal::NoServingVersion),
                    candidate_for: serving_file_of(file)
                        .and_then(|f| self.served.get(&f))
                        .map(|s| s.name.clone()),
                }
            })
            .collect()
    }

    /// The plugins loaded from this directory, by file.
    pub fn served(&self) -> impl Iterator<Item = (&Path, &str)> {
        self.served
            .iter()
            .map(|(f, s)| (f.as_path(), s.name.as_str()))
    }
}

fn log_events(events: &[ReloadEvent]) {
    for event in events {
        match event {
            ReloadEvent::Failed { .. } => tracing::error!("{event}"),
            _ => tracing::info!("{event}"),
        }
    }
}

/// Says once which objects a plugin replaced by a differently named one
/// leaves held by its finalizers (those the new plugin does not take over).
fn warn_of_holds(file: &Path, old: &str, new: &PluginMetadata, holds: Vec<FinalizerHold>) {
    let orphaned: Vec<FinalizerHold> = holds
        .into_iter()
        .filter(|hold| {
            let taken_over = hold.key.kind == new.primary
                && hold
                    .held_by
                    .iter()
                    .all(|f| new.finalizer.as_ref() == Some(f));
            !taken_over
        })
        .collect();
    if !orphaned.is_empty() {
        tracing::warn!(
            "{}: plugin {old} was replaced by {}; {}",
            file.display(),
            new.name,
            holds_text(old, &orphaned)
        );
    }
}

/// Whether `file` no longer has the content that was read: a write in
/// progress, not a broken plugin.
fn still_being_written(file: &Path, read_sha256: &str) -> bool {
    match std::fs::read(file) {
        Ok(now) => content_hash(&now) != read_sha256,
        Err(_) => true,
    }
}
