//! Plugin lifecycle: a plugin added, replaced by a new version, or
//! removed, while the others keep serving.
//!
//! A plugin is refused when another has its name or reconciles its
//! primary kind in any version, or when its declared kinds break the scope
//! rule; otherwise its kinds are watched (each once, however many plugins
//! declare it) and every primary it serves is queued. A new version is
//! swapped in between reconciles (calls in flight finish on the old one),
//! takes over the old one's finalizer when it declares another one or none
//! ([`finalizer_handover`](super::finalizer_handover)), and reconciles
//! every primary once. A removed plugin leaves its objects as they are.

use std::sync::Arc;

use reconciler_contract::PluginMetadata;

use super::cause::Cause;
use super::controllers::Controller;
use super::errors::EngineError;
use super::finalizer_handover::{self, holds};
use super::queues::queue_all;
use super::scope_rules;
use super::shared::Shared;
use super::watches::Wiring;
use crate::cluster::ClusterBackend;
use crate::plugin::LoadedPlugin;
use crate::plugin::directory::twin_of;
use crate::plugin::finalizer_report::FinalizerHold;
use crate::plugin::plugin_host::Replaced;

/// What adding or replacing a plugin touches: everything watching its
/// kinds does, through the wiring.
pub struct Lifecycle<'a, B: ClusterBackend> {
    pub wiring: Wiring<'a, B>,
}

impl<B: ClusterBackend> Lifecycle<'_, B> {
    fn shared(&self) -> &Shared<B> {
        self.wiring.shared
    }

    /// Starts serving a new plugin: checks its name and primary kind are
    /// free, watches its kinds, and queues its existing primaries.
    pub async fn add(&self, plugin: Arc<LoadedPlugin>) -> Result<(), EngineError> {
        let m = plugin.metadata();
        let rewiring = self.wiring.watches.rewiring().await;
        self.check_free(&plugin, false)?;
        self.check_kind_scopes(m).await?;
        self.wiring.watch_kinds(&plugin, &rewiring).await?;
        let shared = self.shared();
        shared
            .controllers
            .insert(m.name.clone(), Controller::new(plugin.clone()));
        drop(rewiring);
        queue_all(shared, &m.name, Cause::PluginLoaded);
        Ok(())
    }

    /// Swaps in a new version of a plugin of the same name, between
    /// reconciles: calls already running finish on the old version. New
    /// kinds are watched, and every primary is reconciled once with the new
    /// version. When the new version declares another finalizer (or none),
    /// the old one is handed over first.
    pub async fn replace(&self, plugin: Arc<LoadedPlugin>) -> Result<Replaced, EngineError> {
        let m = plugin.metadata();
        let shared = self.shared();
        let Some(controller) = shared.controllers.get(&m.name) else {
            return Err(EngineError::NotLoaded(m.name.clone()));
        };
        let rewiring = self.wiring.watches.rewiring().await;
        self.check_free(&plugin, true)?;
        self.check_kind_scopes(m).await?;
        self.wiring.watch_kinds(&plugin, &rewiring).await?;
        let old = controller.swap(plugin.clone());
        drop(rewiring);
        let finalizers =
            finalizer_handover::hand_over(shared, &controller, old.metadata(), m).await;
        queue_all(shared, &m.name, Cause::PluginLoaded);
        Ok(Replaced { old, finalizers })
    }

    /// Refuses `plugin` when another plugin has its name or reconciles its
    /// primary kind (the one it replaces excepted).
    fn check_free(&self, plugin: &LoadedPlugin, replacing: bool) -> Result<(), EngineError> {
        let served: Vec<Arc<LoadedPlugin>> = self
            .shared()
            .controllers
            .all()
            .into_iter()
            .filter(|(name, _)| !(replacing && name == plugin.name()))
            .map(|(_, c)| c.plugin())
            .collect();
        let others: Vec<&LoadedPlugin> = served.iter().map(|p| p.as_ref()).collect();
        match twin_of(plugin, &others) {
            Some(clash) => Err(EngineError::Taken(clash)),
            None => Ok(()),
        }
    }

    /// Refuses a plugin whose declared kinds break the scope rule, and
    /// remembers their scopes for the trigger and the per-response check.
    async fn check_kind_scopes(&self, metadata: &PluginMetadata) -> Result<(), EngineError> {
        let shared = self.shared();
        let scopes = scope_rules::check_plugin(&*shared.backend, metadata).await?;
        shared.kind_scopes.learn(scopes);
        Ok(())
    }
}

/// Stops serving a plugin. Its queue is dropped; reconciles already
/// running finish. Nothing is deleted and no finalizer is removed: its
/// objects stay as they are until a plugin serves them again (see
/// [`finalizer_holds`] for telling the user which ones wait).
pub fn remove<B: ClusterBackend>(shared: &Shared<B>, name: &str) -> Option<Arc<LoadedPlugin>> {
    shared.controllers.remove(name).map(|c| c.plugin())
}

/// The objects still carrying a finalizer plugin `name` answers for (its
/// own and superseded ones), each with what releases it.
pub fn finalizer_holds<B: ClusterBackend>(shared: &Shared<B>, name: &str) -> Vec<FinalizerHold> {
    match shared.controllers.get(name) {
        Some(controller) => holds(shared, name, &controller),
        None => Vec::new(),
    }
}
