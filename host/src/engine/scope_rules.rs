//! The scope rule of the capability rules: what a plugin may write, given
//! which kinds are namespaced and which cluster-scoped.
//!
//! Why: on Kubernetes a cluster-scoped object cannot have a namespaced owner
//! (the garbage collector treats such an owner as absent, so the object
//! would never be collected), and a namespaced primary confines its plugin
//! to the primary's namespace, which a cluster-scoped object lies outside
//! of. So:
//! 1. At load ([`check_plugin`]): a plugin whose primary kind is namespaced
//!    may not own or write a cluster-scoped kind. The plugin is refused,
//!    naming the declaration (`owns[1]`, `writes[0]`); the others keep
//!    serving. Scopes come from the cluster (discovery on Kubernetes; the
//!    built-in table and stored CRDs on the embedded cluster).
//! 2. Per response ([`check_response`]): a cluster-scoped primary may own or
//!    write namespaced kinds (a namespaced dependent of a cluster-scoped owner
//!    is fine), but it has no namespace to lend them, so every namespaced
//!    object it applies or deletes must name its namespace. A response that
//!    leaves one out is refused whole, naming the item.
//!
//! A kind whose scope the cluster cannot tell yet (a CRD not installed)
//! fails the load as a kind that cannot be watched does, so it is retried.

use reconciler_contract::object_meta::MetadataField;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use reconciler_contract::{KindRef, PluginMetadata};
use serde_json::Value;

use super::errors::EngineError;
use crate::cluster::{ClusterBackend, KindScope};
use crate::plugin::{InvalidResponse, ValidResponse};

/// The scope of each kind a plugin writes, and of its primary.
pub type DeclaredScopes = BTreeMap<KindRef, KindScope>;

/// The scopes of the kinds every plugin served declares, learned when each
/// was loaded ([`check_plugin`]): which namespace a primary has when a
/// change maps to it, and the per-response check.
#[derive(Default)]
pub struct KindScopes {
    learned: Mutex<DeclaredScopes>,
}

impl KindScopes {
    fn lock(&self) -> MutexGuard<'_, DeclaredScopes> {
        self.learned.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers the scopes a plugin's load learned.
    pub fn learn(&self, scopes: DeclaredScopes) {
        self.lock().extend(scopes);
    }

    /// The scope of a declared kind; namespaced when never learned, as
    /// most kinds are.
    pub fn scope_of(&self, kind: &KindRef) -> KindScope {
        self.lock()
            .get(kind)
            .copied()
            .unwrap_or(KindScope::Namespaced)
    }

    /// [`check_response`] with the scopes learned so far.
    pub fn check_response(
        &self,
        primary_ns: Option<&str>,
        response: &ValidResponse,
    ) -> Result<(), InvalidResponse> {
        check_response(&self.lock(), primary_ns, response)
    }
}

/// Asks the cluster the scope of `metadata`'s primary kind and of every kind
/// it owns or writes, and refuses a namespaced primary that owns or writes a
/// cluster-scoped kind.
pub async fn check_plugin<B: ClusterBackend>(
    backend: &B,
    metadata: &PluginMetadata,
) -> Result<DeclaredScopes, EngineError> {
    let mut scopes = DeclaredScopes::new();
    let primary = scope_of(backend, &metadata.primary).await?;
    scopes.insert(metadata.primary.clone(), primary);
    for (list, kinds) in [("owns", &metadata.owns), ("writes", &metadata.writes)] {
        for (i, kind) in kinds.iter().enumerate() {
            let scope = scope_of(backend, kind).await?;
            if primary == KindScope::Namespaced && scope == KindScope::Cluster {
                return Err(EngineError::ClusterScopedFromNamespaced {
                    plugin: metadata.name.clone(),
                    primary: metadata.primary.to_string(),
                    field: format!("{list}[{i}]"),
                    list,
                    kind: kind.to_string(),
                });
            }
            scopes.insert(kind.clone(), scope);
        }
    }
    Ok(scopes)
}

async fn scope_of<B: ClusterBackend>(
    backend: &B,
    kind: &KindRef,
) -> Result<KindScope, EngineError> {
    backend
        .kind_scope(kind)
        .await
        .map_err(|source| EngineError::Watch {
            kind: kind.to_string(),
            source,
        })
}

/// Refuses a response of a cluster-scoped primary (`primary_ns` is `None`)
/// that applies or deletes an object of a namespaced kind without naming
/// its namespace. Responses of namespaced primaries carry the primary's
/// namespace already. Kinds missing from `scopes` are taken as namespaced,
/// as most kinds are.
pub fn check_response(
    scopes: &DeclaredScopes,
    primary_ns: Option<&str>,
    response: &ValidResponse,
) -> Result<(), InvalidResponse> {
    if primary_ns.is_some() {
        return Ok(());
    }
    let namespaced = |kind: &KindRef| {
        scopes.get(kind).copied().unwrap_or(KindScope::Namespaced) == KindScope::Namespaced
    };
    let reason = |kind: &KindRef| {
        format!(
            "{} is namespaced and the primary is cluster-scoped, so there is no namespace to default to: set metadata.namespace",
            kind.kind
        )
    };
    for (i, desired) in response.apply.iter().enumerate() {
        let namespace = desired
            .object
            .metadata_field("namespace")
            .and_then(Value::as_str)
            .filter(|ns| !ns.is_empty());
        if namespace.is_none() && namespaced(&desired.kind) {
            let name = desired
                .object
                .metadata_field("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            return Err(InvalidResponse {
                item: format!("apply[{i}] ({} {name})", desired.kind),
                reason: reason(&desired.kind),
            });
        }
    }
    for (i, target) in response.delete.iter().enumerate() {
        let kind = KindRef::from_api_version(&target.api_version, &target.kind);
        let unnamed = target.namespace.as_deref().is_none_or(str::is_empty);
        if unnamed && namespaced(&kind) {
            return Err(InvalidResponse {
                item: format!(
                    "delete[{i}] ({} {} {})",
                    target.api_version, target.kind, target.name
                ),
                reason: reason(&kind),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use reconciler_contract::ObjectRef;
    use serde_json::json;

    use super::*;
    use crate::cluster::VirtualClock;
    use crate::cluster::embedded::EmbeddedCluster;
    use crate::plugin::{DesiredObject, WriteRole};

    fn cluster_role() -> KindRef {
        KindRef::new("rbac.authorization.k8s.io", "v1", "ClusterRole")
    }

    fn config_map() -> KindRef {
        KindRef::new("", "v1", "ConfigMap")
    }

    fn hostile() -> PluginMetadata {
        PluginMetadata::new(
            "hostile",
            "0.1.0",
            KindRef::new("hostile.example.com", "v1", "Hostile"),
        )
        .owns(config_map())
    }

    fn cluster() -> EmbeddedCluster {
        EmbeddedCluster::new(Arc::new(VirtualClock::at(0)))
    }

    #[tokio::test]
    async fn a_namespaced_primary_may_not_own_a_cluster_scoped_kind() {
        let err = check_plugin(&cluster(), &hostile().owns(cluster_role()))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "plugin hostile reconciles a namespaced kind (hostile.example.com/v1 Hostile) but owns[1] \
             declares rbac.authorization.k8s.io/v1 ClusterRole, which is cluster-scoped: a cluster-scoped \
             object cannot be owned by or confined to a namespaced one; remove it from owns, or reconcile \
             it from a plugin whose primary kind is cluster-scoped"
        );
    }

    #[tokio::test]
    async fn a_namespaced_primary_may_not_write_a_cluster_scoped_kind() {
        let metadata = hostile().writes(KindRef::new("", "v1", "Namespace"));
        let err = check_plugin(&cluster(), &metadata).await.unwrap_err();
        assert!(
            matches!(&err, EngineError::ClusterScopedFromNamespaced { field, .. } if field == "writes[0]"),
            "{err}"
        );
        assert!(err.to_string().contains("remove it from writes"), "{err}");
    }

    #[tokio::test]
    async fn a_cluster_scoped_primary_may_own_both_scopes() {
        let metadata = PluginMetadata::new("tenants", "1", KindRef::new("", "v1", "Namespace"))
            .owns(config_map())
            .writes(cluster_role());
        let scopes = check_plugin(&cluster(), &metadata).await.unwrap();
        assert_eq!(scopes[&config_map()], KindScope::Namespaced);
        assert_eq!(scopes[&cluster_role()], KindScope::Cluster);
        assert_eq!(
            scopes[&KindRef::new("", "v1", "Namespace")],
            KindScope::Cluster
        );
    }

    #[tokio::test]
    async fn a_namespaced_primary_with_namespaced_kinds_loads() {
        let scopes = check_plugin(&cluster(), &hostile()).await.unwrap();
        assert_eq!(scopes.len(), 2);
    }

    fn response(apply: Vec<DesiredObject>, delete: Vec<ObjectRef>) -> ValidResponse {
        ValidResponse {
            apply,
            delete,
            status: None,
            events: Vec::new(),
            requeue_after: None,
            finalized: false,
        }
    }

    fn desired(kind: KindRef, object: Value) -> DesiredObject {
        DesiredObject {
            kind,
            role: WriteRole::Owned,
            object,
        }
    }

    fn scopes() -> DeclaredScopes {
        DeclaredScopes::from([
            (config_map(), KindScope::Namespaced),
            (cluster_role(), KindScope::Cluster),
        ])
    }

    #[test]
    fn a_cluster_scoped_primary_must_name_the_namespace_of_what_it_applies() {
        let unnamed = desired(
            config_map(),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}}),
        );
        let err = check_response(&scopes(), None, &response(vec![unnamed], vec![])).unwrap_err();
        assert_eq!(err.item, "apply[0] (v1 ConfigMap settings)");
        assert_eq!(
            err.to_string(),
            "invalid response: apply[0] (v1 ConfigMap settings): ConfigMap is namespaced and the primary \
             is cluster-scoped, so there is no namespace to default to: set metadata.namespace"
        );

        let named = desired(
            config_map(),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "team"}}),
        );
        let role = desired(
            cluster_role(),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}}),
        );
        assert_eq!(
            check_response(&scopes(), None, &response(vec![named, role], vec![])),
            Ok(())
        );
    }

    #[test]
    fn a_cluster_scoped_primary_must_name_the_namespace_of_what_it_deletes() {
        let delete = ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: None,
            name: "old".into(),
        };
        let err =
            check_response(&scopes(), None, &response(vec![], vec![delete.clone()])).unwrap_err();
        assert_eq!(err.item, "delete[0] (v1 ConfigMap old)");
        let in_team = ObjectRef {
            namespace: Some("team".into()),
            ..delete
        };
        assert_eq!(
            check_response(&scopes(), None, &response(vec![], vec![in_team])),
            Ok(())
        );
    }

    #[test]
    fn a_namespaced_primarys_response_is_left_to_the_namespace_rule() {
        let unnamed = desired(
            config_map(),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}}),
        );
        assert_eq!(
            check_response(&scopes(), Some("team"), &response(vec![unnamed], vec![])),
            Ok(())
        );
    }

    #[tokio::test]
    async fn the_scopes_learned_at_load_answer_later_questions_and_the_rest_are_namespaced() {
        let learned = KindScopes::default();
        assert_eq!(learned.scope_of(&cluster_role()), KindScope::Namespaced);
        let metadata = PluginMetadata::new("tenants", "1", KindRef::new("", "v1", "Namespace"))
            .writes(cluster_role());
        learned.learn(check_plugin(&cluster(), &metadata).await.unwrap());
        assert_eq!(learned.scope_of(&cluster_role()), KindScope::Cluster);
        assert_eq!(
            learned.scope_of(&KindRef::new("", "v1", "Namespace")),
            KindScope::Cluster
        );
        assert_eq!(learned.scope_of(&config_map()), KindScope::Namespaced);
        let unnamed = desired(
            config_map(),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}}),
        );
        let response = response(vec![unnamed], vec![]);
        assert!(learned.check_response(None, &response).is_err());
        assert_eq!(learned.check_response(Some("team"), &response), Ok(()));
    }
}
