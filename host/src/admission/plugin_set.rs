//! The plugins that serve admission, by name, as the webhook server sees
//! them.
//!
//! This is a view, not a loader: the plugins directory
//! ([`crate::plugin::hot_reload::PluginDirectory`]) decides which version of each
//! plugin serves, for the engine and for admission alike, and publishes
//! its decision here after every change. A version that fails to load
//! leaves the last good one answering; a removed plugin's path answers that
//! it is gone. Every replica serves admission, leader or not: before this
//! replica leads, the directory serves into a standby with the same rules.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use tokio::sync::watch;

use super::shard_labels::ShardLabels;
use crate::plugin::LoadedPlugin;
use crate::plugin::plugin_host::ServingFollower;

/// The plugins serving admission, and a signal for each change.
pub struct AdmissionPlugins {
    plugins: RwLock<BTreeMap<String, Arc<LoadedPlugin>>>,
    /// Bumped on every change; the webhook configurations follow it.
    changes: watch::Sender<u64>,
    /// Under sharding: new primaries labelled with their bucket.
    shard_labels: Option<Arc<ShardLabels>>,
}

impl Default for AdmissionPlugins {
    fn default() -> Self {
        Self {
            plugins: RwLock::default(),
            changes: watch::channel(0).0,
            shard_labels: None,
        }
    }
}

impl AdmissionPlugins {
    pub fn new() -> Self {
        Self::default()
    }

    /// A set that also labels new primaries with their shard
    /// ([`super::shard_labels`]).
    pub fn with_shard_labels(labels: ShardLabels) -> Self {
        Self {
            shard_labels: Some(Arc::new(labels)),
            ..Self::default()
        }
    }

    pub fn shard_labels(&self) -> Option<&Arc<ShardLabels>> {
        self.shard_labels.as_ref()
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
    /// Subscribers hear of it only if what serves changed.
    pub fn replace(&self, plugins: impl IntoIterator<Item = Arc<LoadedPlugin>>) {
        let plugins: Vec<_> = plugins.into_iter().collect();
        let shard_kinds_changed = self
            .shard_labels
            .as_ref()
            .is_some_and(|labels| labels.update(&plugins));
        let mut by_name = BTreeMap::new();
        for plugin in plugins.into_iter().filter(|p| p.admission().is_some()) {
            // The first file of a name wins, as in the engine.
            by_name.entry(plugin.name().to_string()).or_insert(plugin);
        }
        let mut current = self.plugins.write().unwrap_or_else(|e| e.into_inner());
        let same = current.len() == by_name.len()
            && current
                .iter()
                .zip(&by_name)
                .all(|((a, p), (b, q))| a == b && Arc::ptr_eq(p, q));
        if same {
            if shard_kinds_changed {
                self.changes.send_modify(|n| *n += 1);
            }
            return;
        }
        *current = by_name;
        let names: Vec<&String> = current.keys().collect();
        tracing::info!(plugins = ?names, "admission served for");
        drop(current);
        self.changes.send_modify(|n| *n += 1);
    }

    /// Resolves at each change of what serves (and once at once, if it
    /// changed since the receiver last looked).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<LoadedPlugin>>> {
        self.plugins.read().unwrap_or_else(|e| e.into_inner())
    }
}
/// The plugins directory publishes here after every change.
impl ServingFollower for AdmissionPlugins {
    fn follow(&self, serving: Vec<Arc<LoadedPlugin>>) {
        self.replace(serving);
    }
}
