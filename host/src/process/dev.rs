//! `dev`: every plugin against the embedded cluster, on the real clock.
//!
//! The laptop loop: object YAML in a directory is the cluster's desired
//! input (files created, changed or removed become creates, updates and
//! deletes), each reconcile prints one line, and the primary objects with
//! their status are shown as a table whenever things settle.

use reconciler_contract::object_meta::MetadataField;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::admission::{GateOutcome, admit_object, admit_write};
use crate::cluster::embedded::EmbeddedCluster;
use crate::cluster::embedded::builtins::{BuiltinConfig, group_changes};
use crate::cluster::embedded::kind_scopes::is_crd;
use crate::cluster::{ObjectKey, RealClock};
use crate::engine::Engine;
use crate::engine::dispatch::{Dispatcher, Wake};
use crate::golden::recorder::{CaseRecorder, RecordOptions};
use crate::plugin::Sandbox;
use crate::plugin::background_reload::BackgroundReload;
use crate::plugin::hot_reload::PluginDirectory;
use crate::plugin::plugin_host::PluginHost;
use crate::process::manifests::{manifest_files, read_crds, read_objects};
use crate::support::dir_watch::watch_dir;
use reconciler_contract::Operation;

/// The objects of a manifest directory as last read, per file, so a rescan
/// turns into exactly the creates, updates and deletes that happened.
#[derive(Default)]
pub struct ManifestDir {
    files: BTreeMap<PathBuf, Vec<(ObjectKey, Value)>>,
}

impl ManifestDir {
    /// Reads `dir` again and applies the differences to `cluster`; returns a
    /// line per change (or per unreadable file).
    pub fn sync(&mut self, dir: &Path, cluster: &EmbeddedCluster) -> Vec<String> {
        self.sync_admitted(dir, cluster, &[])
    }

    /// [`Self::sync`], running each create, update and delete past the
    /// plugin of `plugins` that serves admission for the object's kind: a
    /// denied change is reported and not made (editing the file retries it),
    /// a defaulted object is stored defaulted.
    pub fn sync_admitted(
        &mut self,
        dir: &Path,
        cluster: &EmbeddedCluster,
        plugins: &[Arc<crate::plugin::LoadedPlugin>],
    ) -> Vec<String> {
        let mut lines = Vec::new();
        let files = manifest_files(dir).unwrap_or_default();
        let mut seen = BTreeMap::new();
        for file in &files {
            match read_objects(file) {
                Ok(objects) => {
                    let keyed = objects
                        .into_iter()
                        .filter_map(|o| Some((ObjectKey::of(&o)?, o)))
                        .collect();
                    seen.insert(file.clone(), keyed);
                }
                Err(e) => {
                    // Keep what the file held before: a half-saved file must
                    // not delete its objects.
                    lines.push(format!("error: {e}"));
                    if let Some(old) = self.files.get(file) {
                        seen.insert(file.clone(), old.clone());
                    }
                }
            }
        }
        let old: BTreeMap<ObjectKey, Value> = self.files.values().flatten().cloned().collect();
        let new: BTreeMap<ObjectKey, Value> = seen.values().flatten().cloned().collect();
        // CRDs first: the scope they give their kinds decides how those
        // kinds' objects are stored.
        let (crds, others): (Vec<_>, Vec<_>) = new.iter().partition(|(key, _)| is_crd(&key.kind));
        for (key, object) in crds.into_iter().chain(others) {
            if old.get(key) == Some(object) {
                continue;
            }
            let verb = if old.contains_key(key) {
                "updated"
            } else {
                "created"
            };
            let stored = cluster.get_as_user(key);
            let outcome = admit_write(plugins, object, stored.as_ref(), now_millis());
            if let Some(line) = outcome.report(&key.to_string()) {
                lines.push(line);
            }
            let object = match outcome {
                GateOutcome::Denied { .. } => continue,
                GateOutcome::Admitted { object, .. } => object,
                GateOutcome::NotCovered => object.clone(),
            };
            match cluster.apply_as_user(object) {
                Ok(_) => lines.push(format!("{verb} {key} from {}", dir.display())),
                Err(e) => lines.push(format!("error: cannot apply {key}: {e}")),
            }
        }
        for key in old.keys().filter(|k| !new.contains_key(*k)) {
            let Some(stored) = cluster.get_as_user(key) else {
                // Never stored (its create was denied): nothing to delete.
                continue;
            };
            let outcome = admit_object(
                plugins,
                Operation::Delete,
                None,
                Some(&stored),
                now_millis(),
            );
            if let Some(line) = outcome.report(&key.to_string()) {
                lines.push(line);
            }
            if matches!(outcome, GateOutcome::Denied { .. }) {
                continue;
            }
            match cluster.delete_as_user(key) {
                Ok(()) => lines.push(format!("deleted {key} (its file changed or is gone)")),
                Err(e) => lines.push(format!("error: cannot delete {key}: {e}")),
            }
        }
        self.files = seen;
        lines
    }
}

/// Options of one `dev` session.
pub struct DevConfig {
    pub plugins_dir: PathBuf,
    /// Plugins pulled by reference (`--plugin`), served beside the directory's.
    pub pulled_dir: Option<PathBuf>,
    /// The Plugin objects among the objects, pulled and followed as their
    /// files change.
    pub object_plugins: Option<crate::plugin_resources::from_objects::ObjectPlugins>,
    pub objects_dir: PathBuf,
    /// CustomResourceDefinitions applied before the objects, read once.
    pub crds_dir: Option<PathBuf>,
    /// Stop once nothing is queued (for scripts and smoke tests).
    pub until_settled: bool,
    /// Write every reconcile as a golden case under this directory.
    pub record: Option<RecordOptions>,
    /// Play the built-in controllers with these settings (`None`: off).
    pub builtins: Option<BuiltinConfig>,
    /// Several embedded member clusters instead of one (`--clusters`,
    /// `--cluster-objects`): see `dev_clusters.rs`.
    pub members: Option<Vec<crate::process::dev_clusters::MemberSeed>>,
}

/// Runs the dev loop until Ctrl-C (or until settled, if asked). Plugins are
/// loaded from `config.plugins_dir` and hot-reloaded from it. Returns how
/// many plugin versions were refused.
pub async fn run(
    sandbox: Arc<Sandbox>,
    mut config: DevConfig,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<u64> {
    if let Some(members) = config.members.take() {
        return crate::process::dev_clusters::run(sandbox, config, members, out).await;
    }
    let cluster = start_embedded(&config);
    if let Some(dir) = &config.crds_dir {
        for line in seed_crds(dir, &cluster) {
            writeln!(out, "{}", stamp(&line))?;
        }
    }
    let mut engine = Engine::empty(cluster.clone(), Arc::new(RealClock))
        .with_instance_pool(sandbox.reconcile_instances());
    if let Some(record) = &config.record {
        let recorder = CaseRecorder::new(record, "dev")
            .map_err(|e| anyhow::anyhow!("cannot record into {}: {e}", record.dir.display()))?;
        engine = engine.with_recorder(Arc::new(recorder));
    }
    let engine = Arc::new(engine);
    let plugins = serve_plugins(sandbox, &mut config, engine.as_ref(), out).await?;
    // Objects after plugins: the plugins that serve admission admit them.
    let mut manifests = ManifestDir::default();
    for line in manifests.sync_admitted(&config.objects_dir, &cluster, &engine.plugins()) {
        writeln!(out, "{}", stamp(&line))?;
    }
    say_if_none_serve(&engine.plugins(), &config.plugins_dir, out)?;

    // File changes arrive from the watcher threads; keep the watchers alive.
    let (fs_tx, mut fs_rx) = mpsc::unbounded_channel();
    let _objects_watch = watch_dir(&config.objects_dir, fs_tx);
    let (plugins_tx, plugins_rx) = mpsc::unbounded_channel();
    let rescan = plugins_tx.clone();
    let _plugins_watch = watch_dir(&config.plugins_dir, plugins_tx);
    // Later plugin files load beside the loop, which keeps serving.
    let mut failures = plugins.failures();
    let mut reloads = BackgroundReload::start(plugins, engine.clone(), plugins_rx, None);
    let mut dispatcher = Dispatcher::new(engine.clone());
    let mut table_shown = String::new();
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);

    loop {
        while let Some(record) = dispatcher.try_finished() {
            writeln!(out, "{}", stamp(&record.to_string()))?;
        }
        // After the reconciles whose writes they answered: while some run,
        // their records bring the changes with them.
        if dispatcher.outstanding() == 0 {
            write_builtin_changes(&cluster, out)?;
        }
        let changes = dispatcher.dispatch();
        if dispatcher.outstanding() == 0 && changes == 0 {
            let table = primaries_table(&engine);
            if table != table_shown {
                write!(out, "{table}")?;
                table_shown = table;
            }
            if config.until_settled && engine.next_wakeup().is_none_or(|at| at > now_millis()) {
                break;
            }
        }
        tokio::select! {
            woke = dispatcher.wake() => {
                if let Wake::Finished(record) = woke {
                    writeln!(out, "{}", stamp(&record.to_string()))?;
                    write_builtin_changes(&cluster, out)?;
                }
            }
            update = reloads.next() => {
                for event in &update.events {
                    writeln!(out, "{}", stamp(&event.to_string()))?;
                }
                failures = update.failures;
            }
            () = cluster.builtin_changes_ready(), if config.builtins.is_some() && dispatcher.outstanding() == 0 => {}
            Some(()) = fs_rx.recv() => {
                while fs_rx.try_recv().is_ok() {}
                follow_object_plugins(&mut config, &rescan, out).await?;
                for line in manifests.sync_admitted(&config.objects_dir, &cluster, &engine.plugins()) {
                    writeln!(out, "{}", stamp(&line))?;
                }
            }
            _ = &mut ctrl_c => {
                writeln!(out, "stopping: waiting for {} reconcile(s) in flight", dispatcher.outstanding())?;
                break;
            }
        }
    }
    // In-flight reconciles finish (each is bounded by its plugin deadline).
    let (records, _) = dispatcher.drain(Duration::from_secs(15)).await;
    for record in records {
        writeln!(out, "{}", stamp(&record.to_string()))?;
    }
    Ok(failures + config.object_plugins.as_ref().map_or(0, |p| p.failures()))
}

/// An embedded cluster on the real clock, with the built-in controllers
/// `config` asks for driven in the background (Pods start and Jobs end on
/// the real clock; the task ends with the runtime).
pub(crate) fn start_embedded(config: &DevConfig) -> Arc<EmbeddedCluster> {
    let mut cluster = EmbeddedCluster::new(Arc::new(RealClock));
    if let Some(builtins) = &config.builtins {
        cluster = cluster.with_builtin_controllers(builtins.clone());
    }
    let cluster = Arc::new(cluster);
    tokio::spawn(cluster.clone().drive_builtins());
    cluster
}

/// Loads the plugins directory (with the pulled plugins and the Plugin
/// objects' files beside it) into `host`: a line per plugin loaded or
/// refused, and per plugin below the directory that is not loaded. The
/// directory is returned to be followed.
pub(crate) async fn serve_plugins<H: PluginHost>(
    sandbox: Arc<Sandbox>,
    config: &mut DevConfig,
    host: &H,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<PluginDirectory> {
    let mut plugins = PluginDirectory::new(&config.plugins_dir, sandbox);
    if let Some(pulled) = &config.pulled_dir {
        plugins = plugins.also_serving(pulled);
    }
    if let Some(object_plugins) = &mut config.object_plugins {
        plugins = plugins.also_serving(object_plugins.dir());
        for line in sync_object_plugins(object_plugins, &config.objects_dir)
            .await
            .0
        {
            writeln!(out, "{}", stamp(&line))?;
        }
    }
    for event in plugins.sync(host).await {
        writeln!(out, "{}", stamp(&event.to_string()))?;
    }
    for line in skipped_subdirectories(&config.plugins_dir) {
        writeln!(out, "{}", stamp(&line))?;
    }
    Ok(plugins)
}

/// After the objects' files changed: brings the Plugin objects' served
/// files in line, and has the plugins directory rescanned if one changed.
pub(crate) async fn follow_object_plugins(
    config: &mut DevConfig,
    rescan: &mpsc::UnboundedSender<()>,
    out: &mut (dyn Write + Send),
) -> std::io::Result<()> {
    if let Some(object_plugins) = &mut config.object_plugins {
        let (lines, changed) = sync_object_plugins(object_plugins, &config.objects_dir).await;
        for line in lines {
            writeln!(out, "{}", stamp(&line))?;
        }
        if changed {
            let _ = rescan.send(());
        }
    }
    Ok(())
}

/// Says how to get a plugin when none serves.
pub(crate) fn say_if_none_serve(
    serving: &[Arc<crate::plugin::LoadedPlugin>],
    plugins_dir: &Path,
    out: &mut (dyn Write + Send),
) -> std::io::Result<()> {
    if serving.is_empty() {
        writeln!(
            out,
            "no plugin serving yet: build some with scripts/build-plugins, or drop a .wasm into {}",
            plugins_dir.display()
        )?;
    }
    Ok(())
}

/// What `dev` does not load from below the plugins directory, and how to
/// serve it: a plugin of its own directory (as the Python and JavaScript
/// podsets are) is never loaded beside the others without a word.
pub(crate) fn skipped_subdirectories(plugins_dir: &std::path::Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(plugins_dir) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs.into_iter()
        .filter_map(|dir| {
            let files = crate::plugin::directory::plugin_files(&dir).ok()?;
            let names: Vec<String> = files
                .iter()
                .filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect();
            (!names.is_empty()).then(|| {
                format!(
                    "not loaded: {} in {} (plugins are read from the directory itself, not below it; serve it with --plugins-dir {})",
                    names.join(", "),
                    dir.display(),
                    dir.display()
                )
            })
        })
        .collect()
}

/// Reads the objects' files again and brings the Plugin objects' served
/// files in line; unreadable files are the object sync's to report.
pub(crate) async fn sync_object_plugins(
    object_plugins: &mut crate::plugin_resources::from_objects::ObjectPlugins,
    objects_dir: &std::path::Path,
) -> (Vec<String>, bool) {
    let objects: Vec<serde_json::Value> = crate::process::manifests::read_all(objects_dir)
        .map(|all| all.into_iter().map(|(_, o)| o).collect())
        .unwrap_or_default();
    object_plugins.sync(&objects).await
}

/// The built-in controllers' changes since the last call, quieter than a
/// reconcile: indented, marked `(cluster)`, a line per kind of change
/// naming every object it touched.
fn write_builtin_changes(
    cluster: &EmbeddedCluster,
    out: &mut (dyn Write + Send),
) -> std::io::Result<()> {
    for line in group_changes(&cluster.take_builtin_changes()) {
        writeln!(out, "{}", stamp(&format!("  (cluster) {line}")))?;
    }
    Ok(())
}

/// Applies the CRDs of `dir`, so the cluster knows which custom kinds are
/// cluster-scoped before any object or plugin arrives; a line per CRD or
/// error.
pub fn seed_crds(dir: &Path, cluster: &EmbeddedCluster) -> Vec<String> {
    let crds = match read_crds(dir) {
        Ok(crds) => crds,
        Err(e) => return vec![format!("error: {e:#}")],
    };
    crds.into_iter()
        .map(|crd| {
            let key = ObjectKey::of(&crd)
                .map(|k| k.to_string())
                .unwrap_or_default();
            match cluster.apply_as_user(crd) {
                Ok(_) => format!("created {key} from {}", dir.display()),
                Err(e) => format!("error: cannot apply {key}: {e}"),
            }
        })
        .collect()
}

pub(crate) fn now_millis() -> i64 {
    use crate::cluster::Clock;
    RealClock.now_millis()
}

pub(crate) fn stamp(line: &str) -> String {
    let t = crate::cluster::clock::rfc3339(now_millis());
    format!("{} {line}", &t[11..19])
}

/// The primary objects of every plugin, with their status, as a table.
pub fn primaries_table<B: crate::cluster::ClusterBackend>(engine: &Engine<B>) -> String {
    let header = ["PLUGIN", "KIND", "NAMESPACE", "NAME", "STATUS"].map(String::from);
    let rows: Vec<Vec<String>> = primary_rows(engine).into_iter().map(Vec::from).collect();
    render_table(header.into(), rows)
}

/// [`primaries_table`] of several clusters, each row naming its cluster.
pub fn clusters_table<B: crate::cluster::ClusterBackend>(
    engines: &[(String, Arc<Engine<B>>)],
) -> String {
    let header = ["CLUSTER", "PLUGIN", "KIND", "NAMESPACE", "NAME", "STATUS"].map(String::from);
    let rows = engines
        .iter()
        .flat_map(|(cluster, engine)| {
            primary_rows(engine).into_iter().map(move |row| {
                std::iter::once(cluster.clone())
                    .chain(row)
                    .collect::<Vec<String>>()
            })
        })
        .collect();
    render_table(header.into(), rows)
}

/// A row per primary object of every plugin: plugin, kind, namespace,
/// name, status (cut to 100 characters).
fn primary_rows<B: crate::cluster::ClusterBackend>(engine: &Engine<B>) -> Vec<[String; 5]> {
    let mut rows = Vec::new();
    for plugin in engine.plugins().iter() {
        let m = plugin.metadata();
        for object in engine.cache().list(&m.primary) {
            let s = |p: &str| {
                object
                    .pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            let mut status = object
                .get("status")
                .map(Value::to_string)
                .unwrap_or_else(|| "-".into());
            if object.metadata_field("deletionTimestamp").is_some() {
                status = format!("(deleting) {status}");
            }
            if status.chars().count() > 100 {
                status = status.chars().take(97).collect::<String>() + "...";
            }
            rows.push([
                m.name.clone(),
                m.primary.kind.clone(),
                s("/metadata/namespace"),
                s("/metadata/name"),
                status,
            ]);
        }
    }
    rows
}

/// Columns padded to their widest cell; a line when there are no rows.
fn render_table(header: Vec<String>, rows: Vec<Vec<String>>) -> String {
    if rows.is_empty() {
        return "(no primary objects yet)\n".into();
    }
    let all: Vec<Vec<String>> = std::iter::once(header).chain(rows).collect();
    let widths: Vec<usize> = (0..all[0].len())
        .map(|c| all.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in all {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use reconciler_contract::KindRef;

    use super::*;

    #[test]
    fn plugins_in_subdirectories_are_named_with_how_to_serve_them() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("top.wasm"), b"").unwrap();
        std::fs::create_dir_all(dir.path().join("greet-py")).unwrap();
        std::fs::write(dir.path().join("greet-py/greet-py.wasm"), b"").unwrap();
        std::fs::create_dir_all(dir.path().join("notes")).unwrap();
        std::fs::write(dir.path().join("notes/readme.txt"), b"").unwrap();
        let lines = skipped_subdirectories(dir.path());
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("not loaded: greet-py.wasm in "),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].ends_with(&format!(
                "--plugins-dir {})",
                dir.path().join("greet-py").display()
            )),
            "{}",
            lines[0]
        );
    }
    use crate::cluster::VirtualClock;

    fn config_map(size: u32) -> String {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: default}}\ndata: {{size: \"{size}\"}}\n"
        )
    }

    #[test]
    fn file_changes_become_creates_updates_and_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let cluster = EmbeddedCluster::new(Arc::new(VirtualClock::at(0)));
        let key = ObjectKey::new(
            KindRef::new("", "v1", "ConfigMap"),
            Some("default"),
            "settings",
        );
        let get = |c: &EmbeddedCluster| {
            c.objects()
                .into_iter()
                .find(|o| ObjectKey::of(o).as_ref() == Some(&key))
        };
        let mut manifests = ManifestDir::default();
        let file = dir.path().join("settings.yaml");

        std::fs::write(&file, config_map(1)).unwrap();
        let lines = manifests.sync(dir.path(), &cluster);
        assert!(
            lines[0].starts_with("created ConfigMap default/settings"),
            "{lines:?}"
        );
        assert!(
            manifests.sync(dir.path(), &cluster).is_empty(),
            "nothing changed, nothing applied"
        );

        std::fs::write(&file, config_map(2)).unwrap();
        let lines = manifests.sync(dir.path(), &cluster);
        assert!(
            lines[0].starts_with("updated ConfigMap default/settings"),
            "{lines:?}"
        );
        assert_eq!(get(&cluster).unwrap()["data"]["size"], "2");

        // A half-saved file is an error, and its objects stay.
        std::fs::write(&file, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name").unwrap();
        let lines = manifests.sync(dir.path(), &cluster);
        assert!(lines[0].starts_with("error: "), "{lines:?}");
        assert!(get(&cluster).is_some());

        std::fs::remove_file(&file).unwrap();
        let lines = manifests.sync(dir.path(), &cluster);
        assert!(
            lines[0].starts_with("deleted ConfigMap default/settings"),
            "{lines:?}"
        );
        assert!(get(&cluster).is_none());
    }
}
