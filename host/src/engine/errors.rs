//! Why an engine refuses to serve a plugin.
//!
//! Its own module because every stage that can refuse (the plugin
//! lifecycle, the scope rules, the watches) returns it, and the engine's
//! public face re-exports it: none of them should reach up into `mod.rs`.

use crate::cluster::BackendError;
use crate::plugin::LoadFailure;
use crate::plugin::plugin_host::{Refusal, Refused};

/// Why an engine cannot start serving a plugin.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Another plugin has its name, or reconciles its primary kind in any
    /// version: two plugins would see the same objects and children (one
    /// CRD serving both versions), each pruning what the other applies.
    /// The words of `plugin::directory::twin_of`, which every plugin set
    /// applies.
    #[error(transparent)]
    Taken(LoadFailure),
    #[error("no plugin named {0} is loaded")]
    NotLoaded(String),
    #[error("cannot watch {kind}: {source}")]
    Watch { kind: String, source: BackendError },
    /// See [`scope_rules`](super::scope_rules).
    #[error(
        "plugin {plugin} reconciles a namespaced kind ({primary}) but {field} declares {kind}, which is cluster-scoped: a cluster-scoped object cannot be owned by or confined to a namespaced one; remove it from {list}, or reconcile it from a plugin whose primary kind is cluster-scoped"
    )]
    ClusterScopedFromNamespaced {
        plugin: String,
        primary: String,
        /// The declaration, e.g. `owns[1]`.
        field: String,
        /// `owns` or `writes`.
        list: &'static str,
        kind: String,
    },
}

/// Which kind of refusal each error is, which says when the plugins
/// directory tries the version again: a kind not watchable yet is retried,
/// a clash waits for what is served to change, a broken declaration for a
/// new version.
impl From<EngineError> for Refused {
    fn from(error: EngineError) -> Self {
        let why = match &error {
            EngineError::Watch { .. } => Refusal::Unwatchable,
            EngineError::ClusterScopedFromNamespaced { .. } => Refusal::Broken,
            EngineError::Taken(_) | EngineError::NotLoaded(_) => Refusal::Conflict,
        };
        Refused::new(why, error)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn a_kind_not_watchable_is_retried_a_clash_waits_and_a_broken_declaration_is_final() {
        let watch = EngineError::Watch {
            kind: "example.com/v1 PodSet".into(),
            source: BackendError::Transient("connection refused".into()),
        };
        let refused = Refused::from(watch);
        assert_eq!(refused.why, Refusal::Unwatchable);
        assert_eq!(
            refused.to_string(),
            "cannot watch example.com/v1 PodSet: transient error, will retry: connection refused"
        );
        let taken = EngineError::Taken(LoadFailure::NameTaken {
            name: "podset".into(),
            first: PathBuf::from("/plugins/a.wasm"),
        });
        let refused = Refused::from(taken);
        assert_eq!(refused.why, Refusal::Conflict);
        assert_eq!(
            refused.to_string(),
            "plugin name podset is already used by /plugins/a.wasm"
        );
        assert_eq!(
            Refused::from(EngineError::NotLoaded("podset".into())).why,
            Refusal::Conflict
        );
        let broken = EngineError::ClusterScopedFromNamespaced {
            plugin: "podset".into(),
            primary: "example.com/v1 PodSet".into(),
            field: "owns[1]".into(),
            list: "owns",
            kind: "rbac.authorization.k8s.io/v1 ClusterRole".into(),
        };
        assert_eq!(Refused::from(broken).why, Refusal::Broken);
    }
}
