//! The plugins `dev` serves: the directory's, the pulled ones, and those
//! the Plugin objects among the objects name, loaded into a host and
//! followed as the files change.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::config::DevConfig;
use super::stamp::stamp;
use crate::engine::shadow_book::ShadowBook;
use crate::plugin::Sandbox;
use crate::plugin::candidates::Candidates;
use crate::plugin::hot_reload::PluginDirectory;
use crate::plugin::plugin_host::PluginHost;
use crate::process::canary_files::FileRollouts;

/// Loads the plugins directory (with the pulled plugins and the Plugin
/// objects' files beside it) into `host`: a line per plugin loaded or
/// refused, and per plugin below the directory that is not loaded. The
/// directory is returned to be followed.
pub(super) async fn serve_plugins<H: PluginHost>(
    sandbox: Arc<Sandbox>,
    config: &mut DevConfig,
    host: &H,
    shadow: &DevShadow,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<PluginDirectory> {
    let mut plugins = PluginDirectory::new(&config.plugins_dir, sandbox)
        .publishing_candidates_to(shadow.candidates.clone());
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
pub(super) async fn follow_object_plugins(
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

/// Candidates in shadow as `dev` runs them: what the directory decides,
/// the book the engines record into, and a line per shadow run to print.
pub(super) struct DevShadow {
    pub candidates: Arc<Candidates>,
    pub book: Arc<ShadowBook>,
    pub lines: mpsc::UnboundedReceiver<String>,
    /// The canary rollouts of the candidate files (`NAME.rollout.yaml`).
    rollouts: FileRollouts,
    read_at: std::time::Instant,
}

/// How often `dev` reads its rollout files again.
const ROLLOUTS_REREAD: std::time::Duration = std::time::Duration::from_secs(1);

impl DevShadow {
    pub fn new(plugins_dir: &std::path::Path) -> Self {
        let book = Arc::new(ShadowBook::default());
        let lines = book.tap();
        Self {
            candidates: Candidates::new(),
            book,
            lines,
            rollouts: FileRollouts::read(plugins_dir),
            read_at: std::time::Instant::now(),
        }
    }

    /// Prints the shadow lines told so far, then steps the candidates'
    /// canary rollouts at `now` and prints what happened (the rollout
    /// files are read again at most once a second); whether anything was
    /// printed.
    pub fn tick(&mut self, now: i64, out: &mut (dyn Write + Send)) -> std::io::Result<bool> {
        let mut any = self.print(out)?;
        if self.read_at.elapsed() >= ROLLOUTS_REREAD {
            self.rollouts.reread();
            self.read_at = std::time::Instant::now();
        }
        for line in self.rollouts.step(&self.candidates, &self.book, now) {
            writeln!(out, "{}", stamp(&line))?;
            any = true;
        }
        Ok(any)
    }

    /// Prints the lines told so far; whether there were any.
    pub fn print(&mut self, out: &mut (dyn Write + Send)) -> std::io::Result<bool> {
        let mut any = false;
        while let Ok(line) = self.lines.try_recv() {
            writeln!(out, "{}", stamp(&line))?;
            any = true;
        }
        Ok(any)
    }

    /// Waits, up to 15 s, for the shadow runs owed, and prints them.
    pub async fn finish(&mut self, out: &mut (dyn Write + Send)) -> std::io::Result<()> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
        while self.book.pending() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        self.print(out).map(|_| ())
    }
}

/// Says how to get a plugin when none serves.
pub(super) fn say_if_none_serve(
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
pub(super) fn skipped_subdirectories(plugins_dir: &std::path::Path) -> Vec<String> {
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
pub(super) async fn sync_object_plugins(
    object_plugins: &mut crate::plugin_resources::from_objects::ObjectPlugins,
    objects_dir: &std::path::Path,
) -> (Vec<String>, bool) {
    let objects: Vec<serde_json::Value> = crate::process::manifests::read_all(objects_dir)
        .map(|all| all.into_iter().map(|(_, o)| o).collect())
        .unwrap_or_default();
    object_plugins.sync(&objects).await
}

#[cfg(test)]
mod tests {
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
}
