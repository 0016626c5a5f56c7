//! A plugin host for a replica that does not lead yet.
//!
//! Every replica serves admission, leader or not, from the versions its
//! plugins directory decides on; only the leader has an engine. Until
//! then the directory serves into a [`Standby`], which applies the rules
//! that need no cluster (one plugin per name and per primary kind, the
//! first file keeping it) and watches nothing, so a version refused here
//! is refused for admission exactly as the engine would refuse it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::directory::twin_of;
use super::finalizer_report::FinalizerHold;
use super::loaded::LoadedPlugin;
use super::plugin_host::{PluginHost, Refusal, Refused, Replaced};

/// Serves plugins for admission only, while this replica has no engine
/// (it waits for the Lease).
#[derive(Default)]
pub struct Standby {
    by_name: Mutex<BTreeMap<String, Arc<LoadedPlugin>>>,
}

impl Standby {
    pub fn new() -> Self {
        Self::default()
    }

    fn plugins(&self) -> MutexGuard<'_, BTreeMap<String, Arc<LoadedPlugin>>> {
        self.by_name.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The plugins it holds now, by name.
    pub fn served(&self) -> Vec<Arc<LoadedPlugin>> {
        self.plugins().values().cloned().collect()
    }

    /// Why `plugin` cannot serve beside the others (the one of its own name
    /// excepted when it replaces that one).
    fn claim(&self, plugin: &Arc<LoadedPlugin>, replacing: bool) -> Result<(), Refused> {
        let plugins = self.plugins();
        let others: Vec<&LoadedPlugin> = plugins
            .values()
            .filter(|p| !(replacing && p.name() == plugin.name()))
            .map(|p| p.as_ref())
            .collect();
        match twin_of(plugin, &others) {
            None => Ok(()),
            // A name or a primary kind already taken.
            Some(clash) => Err(Refused::new(Refusal::Conflict, clash)),
        }
    }
}

impl PluginHost for Standby {
    async fn add_plugin(&self, plugin: Arc<LoadedPlugin>) -> Result<(), Refused> {
        self.claim(&plugin, false)?;
        self.plugins().insert(plugin.name().to_string(), plugin);
        Ok(())
    }
    async fn replace_plugin(&self, plugin: Arc<LoadedPlugin>) -> Result<Replaced, Refused> {
        if !self.plugins().contains_key(plugin.name()) {
            let reason = format!("no plugin named {} is loaded", plugin.name());
            return Err(Refused::new(Refusal::Conflict, reason));
        }
        self.claim(&plugin, true)?;
        let old = self
            .plugins()
            .insert(plugin.name().to_string(), plugin.clone())
            .unwrap_or(plugin);
        Ok(Replaced {
            old,
            finalizers: None,
        })
    }
    fn remove_plugin(&self, name: &str) -> Option<Arc<LoadedPlugin>> {
        self.plugins().remove(name)
    }
    fn finalizer_holds(&self, _name: &str) -> Vec<FinalizerHold> {
        Vec::new()
    }
}
