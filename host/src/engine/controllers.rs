//! The plugins an engine serves, each with what the engine keeps for it.
//!
//! A plugin's version is swapped whole on reload while the reconciles of
//! the old one finish with it; beside the version live its work queue, the
//! fingerprints of what it applied, and the finalizers of earlier versions
//! it answers for. Every stage finds a plugin here by name, and the
//! counts over all plugins (in flight, waiting, remembered) are read here.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use super::call_placement::CallPlacement;
use super::work_queue::{PrimaryKey, WorkQueue};
use crate::cluster::ObjectKey;
use crate::plugin::LoadedPlugin;

/// One plugin as the engine serves it.
pub struct Controller {
    /// Swapped whole on reload; a reconcile holds the version it started with.
    plugin: RwLock<Arc<LoadedPlugin>>,
    state: Mutex<ControllerState>,
    /// What this host last applied for the plugin.
    pub applied: Applied,
    /// Whether its calls run on the worker or a blocking thread.
    pub placement: CallPlacement,
}

#[derive(Default)]
pub struct ControllerState {
    pub queue: WorkQueue,
    /// Finalizers of earlier versions that this plugin now answers for:
    /// removed with its own when it reports `finalized` (see
    /// [`finalizer_handover`](super::finalizer_handover)). Never holds the
    /// current version's.
    pub superseded_finalizers: BTreeSet<String>,
}

impl Controller {
    pub fn new(plugin: Arc<LoadedPlugin>) -> Self {
        Self {
            plugin: RwLock::new(plugin),
            state: Mutex::new(ControllerState::default()),
            applied: Applied::default(),
            placement: CallPlacement::default(),
        }
    }

    pub fn plugin(&self) -> Arc<LoadedPlugin> {
        self.plugin
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn state(&self) -> MutexGuard<'_, ControllerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reconciles in flight at once, API round trips included: from the
    /// plugin's hint, within the host's maximum (`limits`).
    pub fn concurrency(&self) -> usize {
        self.plugin().limits().concurrency
    }

    /// Swaps in a new version, returning the one that served. What the old
    /// version applied says nothing about the new one, so it is forgotten.
    pub fn swap(&self, plugin: Arc<LoadedPlugin>) -> Arc<LoadedPlugin> {
        let old = std::mem::replace(
            &mut *self.plugin.write().unwrap_or_else(|e| e.into_inner()),
            plugin,
        );
        self.applied.clear();
        old
    }
}

/// Fingerprints of what this host last applied, per object that exists
/// (forgotten when the cluster deletes the object): an apply the cluster
/// already holds, and this host already sent, is skipped.
#[derive(Default)]
pub struct Applied {
    by_object: Mutex<HashMap<ObjectKey, u64>>,
}

impl Applied {
    fn lock(&self) -> MutexGuard<'_, HashMap<ObjectKey, u64>> {
        self.by_object.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, key: &ObjectKey) -> Option<u64> {
        self.lock().get(key).copied()
    }

    pub fn insert(&self, key: ObjectKey, fingerprint: u64) {
        self.lock().insert(key, fingerprint);
    }

    pub fn remove(&self, key: &ObjectKey) {
        self.lock().remove(key);
    }

    pub fn clear(&self) {
        self.lock().clear();
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Forgets the objects in `gone`.
    pub fn forget(&self, gone: &HashSet<ObjectKey>) {
        let mut by_object = self.lock();
        for key in gone {
            by_object.remove(key);
        }
    }
}

/// One plugin's work queue at a moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueStats {
    pub plugin: String,
    /// Objects waiting (now or later), not counting those in flight.
    pub depth: usize,
    pub in_flight: usize,
    pub concurrency: usize,
}

/// The plugins served, by name.
#[derive(Default)]
pub struct Controllers {
    by_name: RwLock<BTreeMap<String, Arc<Controller>>>,
}

impl Controllers {
    /// Every plugin served, in name order.
    pub fn all(&self) -> Vec<(String, Arc<Controller>)> {
        let map = self.by_name.read().unwrap_or_else(|e| e.into_inner());
        map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    pub fn get(&self, name: &str) -> Option<Arc<Controller>> {
        let map = self.by_name.read().unwrap_or_else(|e| e.into_inner());
        map.get(name).cloned()
    }

    pub fn insert(&self, name: String, controller: Controller) {
        self.by_name
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name, Arc::new(controller));
    }

    pub fn remove(&self, name: &str) -> Option<Arc<Controller>> {
        self.by_name
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name)
    }

    /// The versions served now, in name order.
    pub fn plugins(&self) -> Vec<Arc<LoadedPlugin>> {
        self.all().into_iter().map(|(_, c)| c.plugin()).collect()
    }

    /// The primaries being reconciled now, over every plugin.
    pub fn in_flight_keys(&self) -> Vec<PrimaryKey> {
        self.all()
            .iter()
            .flat_map(|(_, c)| c.state().queue.in_flight_keys())
            .collect()
    }

    /// Reconciles running now, over every plugin.
    pub fn in_flight(&self) -> usize {
        self.all()
            .iter()
            .map(|(_, c)| c.state().queue.in_flight())
            .sum()
    }

    /// When the next delayed reconcile becomes ready, if any is waiting.
    pub fn next_wakeup(&self) -> Option<i64> {
        self.all()
            .iter()
            .filter_map(|(_, c)| c.state().queue.next_ready_at())
            .min()
    }

    /// Each plugin's queue as metrics see it.
    pub fn stats(&self) -> Vec<QueueStats> {
        self.all()
            .into_iter()
            .map(|(plugin, c)| {
                let concurrency = c.concurrency();
                let state = c.state();
                QueueStats {
                    plugin,
                    depth: state.queue.depth(),
                    in_flight: state.queue.in_flight(),
                    concurrency,
                }
            })
            .collect()
    }

    /// Objects with a fingerprint of what was applied, and primaries the
    /// queues remember, over every plugin.
    pub fn remembered(&self) -> (usize, usize) {
        self.all().iter().fold((0, 0), |(applied, queued), (_, c)| {
            (
                applied + c.applied.len(),
                queued + c.state().queue.remembered(),
            )
        })
    }

    /// Forgets what was applied to objects the cluster deleted.
    pub fn forget_applied(&self, gone: &HashSet<ObjectKey>) {
        for (_, controller) in self.all() {
            controller.applied.forget(gone);
        }
    }
}

#[cfg(test)]
mod tests {
    use reconciler_contract::KindRef;

    use super::*;

    #[test]
    fn what_was_applied_is_forgotten_with_the_objects_the_cluster_deleted() {
        let key =
            |name: &str| ObjectKey::new(KindRef::new("", "v1", "ConfigMap"), Some("default"), name);
        let applied = Applied::default();
        applied.insert(key("a"), 1);
        applied.insert(key("b"), 2);
        applied.forget(&HashSet::from([key("a"), key("never")]));
        assert_eq!(applied.get(&key("a")), None);
        assert_eq!(applied.get(&key("b")), Some(2));
        assert_eq!(applied.len(), 1);
        applied.clear();
        assert_eq!(applied.len(), 0);
    }
}
