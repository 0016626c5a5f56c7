//! What the plugins directory serves into, as the plugin layer needs it.
//!
//! The directory decides which version of each plugin serves; something
//! above it acts on that decision: the engine, the fleet of member
//! engines, or a [`Standby`](super::standby::Standby) before this replica
//! leads. The directory must not know which, nor depend on the layers they
//! live in, so it speaks to them through [`PluginHost`], in the words
//! defined here: a [`Refused`] version (and what kind of refusal, which
//! says when it is tried again), and what a replacement [`Replaced`].
//! The admission server's plugin set follows the same decision through
//! [`ServingFollower`].

use std::sync::Arc;

use super::finalizer_report::{FinalizerHandover, FinalizerHold};
use super::loaded::LoadedPlugin;

/// What serves the plugins a plugins directory decides on. Each host may
/// refuse a plugin; the directory then keeps the version it served before.
pub trait PluginHost: Send + Sync {
    /// Starts serving a plugin whose name is new.
    fn add_plugin(
        &self,
        plugin: Arc<LoadedPlugin>,
    ) -> impl Future<Output = Result<(), Refused>> + Send;
    /// Swaps in a new version of a plugin of the same name.
    fn replace_plugin(
        &self,
        plugin: Arc<LoadedPlugin>,
    ) -> impl Future<Output = Result<Replaced, Refused>> + Send;
    /// Stops serving the plugin of this name, returning it.
    fn remove_plugin(&self, name: &str) -> Option<Arc<LoadedPlugin>>;
    /// The objects this plugin's finalizers hold.
    fn finalizer_holds(&self, name: &str) -> Vec<FinalizerHold>;
}

impl<H: PluginHost> PluginHost for Arc<H> {
    fn add_plugin(
        &self,
        plugin: Arc<LoadedPlugin>,
    ) -> impl Future<Output = Result<(), Refused>> + Send {
        (**self).add_plugin(plugin)
    }
    fn replace_plugin(
        &self,
        plugin: Arc<LoadedPlugin>,
    ) -> impl Future<Output = Result<Replaced, Refused>> + Send {
        (**self).replace_plugin(plugin)
    }
    fn remove_plugin(&self, name: &str) -> Option<Arc<LoadedPlugin>> {
        (**self).remove_plugin(name)
    }
    fn finalizer_holds(&self, name: &str) -> Vec<FinalizerHold> {
        (**self).finalizer_holds(name)
    }
}

/// The outcome of [`PluginHost::replace_plugin`].
pub struct Replaced {
    /// The version that served until now.
    pub old: Arc<LoadedPlugin>,
    /// What was done about the old version's finalizer, when the new version
    /// declares another one or none.
    pub finalizers: Option<FinalizerHandover>,
}

/// Why a version was refused, which says when it is tried again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The version itself cannot serve: only a new version is tried.
    Broken,
    /// Another plugin holds its kind or name: tried again when what is
    /// served changes.
    Conflict,
    /// A kind it declares cannot be watched yet: tried again by the
    /// directory's retries until it starts.
    Unwatchable,
    /// A candidate whose serving file serves no plugin yet: tried again
    /// when what is served changes.
    NoServingVersion,
}

impl Refusal {
    /// Whether a change of what serves may lift it.
    pub fn waits_for_what_serves(self) -> bool {
        matches!(self, Refusal::Conflict | Refusal::NoServingVersion)
    }
}

/// A host's refusal of a plugin version: what to tell the user, and which
/// kind of refusal it is.
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct Refused {
    pub why: Refusal,
    pub reason: String,
}

impl Refused {
    pub fn new(why: Refusal, reason: impl std::fmt::Display) -> Self {
        Self {
            why,
            reason: reason.to_string(),
        }
    }
}

/// What follows the directory's decision of which versions serve (the
/// admission server's plugin set): told after every change, it answers
/// from exactly these versions.
pub trait ServingFollower: Send + Sync {
    /// The versions serving now, replacing those it was told of before.
    fn follow(&self, serving: Vec<Arc<LoadedPlugin>>);
}
