//! The least-privilege RBAC a set of plugins needs, derived from what they
//! declare, so RBAC follows the plugins instead of being written by hand
//! and drifting.
//!
//! What the host does for a plugin, and the permission each needs:
//! - watch every declared kind (primary, owned, read, written): get, list, watch;
//! - apply owned objects (server-side apply is a PATCH that creates when the
//!   object is missing) and prune them: create, patch, delete;
//! - apply fields of written objects: patch;
//! - write a primary's status through its subresource: patch (what the host
//!   sends) and update (what other tools expect a status writer to hold);
//! - add and remove its finalizer on primaries: patch, only if it declares one;
//!   with sharding, label each primary with its shard: patch;
//! - record Events (events.k8s.io): create, patch, in the object's namespace
//!   (`default` for a cluster-scoped object);
//! - leader election on a coordination.k8s.io Lease: get, update, patch on
//!   that Lease by name, and create, in a Role in the Lease's namespace;
//! - with `run --install-crds`: get, create and patch CustomResourceDefinitions;
//! - asking the API server who may read `/metrics` and `/plugins`
//!   (`metrics_auth.rs`): create TokenReviews and SubjectAccessReviews;
//! - when a plugin serves admission: the Validating- and
//!   MutatingWebhookConfigurations the host names (`<prefix>-<plugin>`:
//!   get, create, patch, delete by name; list, cluster-wide) and the
//!   generated certificate's Secret (get, create, by a Role in the Secret's
//!   namespace only: Secrets are not granted cluster-wide).
//!
//! Two verbs cannot be narrowed to names, because the API server's
//! authorizer is not told a name for them: `create` by POST (the name is in
//! the body; the Lease is created so, hence a Role in its namespace only)
//! and `list` (the host lists its webhook configurations by label, to
//! remove those of plugins it no longer serves). A server-side apply that
//! creates is authorized as a `create` of that name, so the webhook
//! configurations' `create` is by name.
//!
//! Without namespaces everything is one ClusterRole. With them (`run
//! --namespace`, which watches namespaced kinds in those namespaces only),
//! what concerns namespaced kinds goes into a Role in each namespace, bound
//! to the host's service account, and so do Events and the Lease (in the
//! Lease's namespace); the ClusterRole keeps only what is cluster-wide:
//! cluster-scoped kinds, kinds whose scope is not known (a custom kind
//! without its CRD), and CRD installation.

mod fence;
mod grants;
mod needs;
mod plurals;
mod render;
mod scope;
#[cfg(test)]
mod tests;

use reconciler_contract::PluginMetadata;

pub use fence::{FenceScope, fence, policy_name};
pub use plurals::Plurals;
pub use scope::RbacScope;

use needs::Needs;
use render::render;

/// The RBAC `plugins` need on the whole cluster, as YAML: the ClusterRole
/// `name`, and the Role of the Lease. Stable: the same plugins give the
/// same text, so it can be checked in and compared.
pub fn cluster_role(plugins: &[PluginMetadata], plurals: &Plurals, name: &str) -> String {
    rbac(plugins, plurals, &RbacScope::cluster_wide(name))
}

/// The RBAC manifests `plugins` need under `scope`, as YAML: a ClusterRole,
/// then (with namespaces) a Role and a RoleBinding per namespace. Stable, as
/// [`cluster_role`].
pub fn rbac(plugins: &[PluginMetadata], plurals: &Plurals, scope: &RbacScope) -> String {
    let needs = Needs::of(plugins, plurals, scope);
    render(plugins, scope, &needs.placement, &needs.unknown_scope)
}
