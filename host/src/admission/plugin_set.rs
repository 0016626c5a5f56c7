//! The plugins that serve admission, by name, as the webhook server sees
//! them.
//!
//! Every replica serves admission, leader or not, so this set is loaded from
//! the plugins directory on its own rather than taken from the engine (which
//! only the leader runs). It is reloaded whenever the directory changes: a
//! new version answers the next request, a removed plugin's path answers
//! that it is gone. Loading again costs little: the compile cache keys the
//! compiled code by content.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use crate::plugin::directory::{load_files, plugin_files};
use crate::plugin::{LoadedPlugin, Sandbox};

/// A plugin file's admission, or why it has none.
#[derive(Default)]
pub struct AdmissionPlugins {
    plugins: RwLock<BTreeMap<String, Arc<LoadedPlugin>>>,
}

impl AdmissionPlugins {
    pub fn new() -> Self {
        Self::default()
    }

    /// The plugin serving admission under `name`.
    pub fn get(&self, name: &str) -> Option<Arc<LoadedPlugin>> {
        self.read().get(name).cloned()
    }

    /// Every plugin serving admission, by name.
    pub fn all(&self) -> Vec<Arc<LoadedPlugin>> {
        self.read().values().cloned().collect()
    }

    /// Replaces the set with the plugins given (those declaring admission).
    pub fn replace(&self, plugins: impl IntoIterator<Item = Arc<LoadedPlugin>>) {
        let mut by_name = BTreeMap::new();
        for plugin in plugins.into_iter().filter(|p| p.admission().is_some()) {
            // The first file of a name wins, as in the engine.
            by_name.entry(plugin.name().to_string()).or_insert(plugin);
        }
        *self.plugins.write().unwrap_or_else(|e| e.into_inner()) = by_name;
    }

    /// Loads `dir` again (in a blocking thread: compiling is CPU work) and
    /// replaces the set; plugins that fail to load are logged and left out.
    pub async fn reload(&self, sandbox: Arc<Sandbox>, dir: &Path) {
        let dir: PathBuf = dir.to_path_buf();
        let loaded = tokio::task::spawn_blocking(move || {
            let files = plugin_files(&dir).unwrap_or_default();
            load_files(&sandbox, &files)
        })
        .await;
        let Ok((plugins, errors)) = loaded else {
            tracing::error!("loading plugins for admission panicked; keeping the previous set");
            return;
        };
        for error in errors {
            tracing::warn!(%error, "plugin not served for admission");
        }
        self.replace(plugins.into_iter().map(Arc::new));
        let names: Vec<String> = self.read().keys().cloned().collect();
        tracing::info!(plugins = ?names, "admission served for");
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<LoadedPlugin>>> {
        self.plugins.read().unwrap_or_else(|e| e.into_inner())
    }
}
