//! Who the host runs as and which of its features are on: the options
//! of `reconciler-host rbac`, which decide which rules the role needs and
//! where they go.

use std::collections::BTreeSet;

use crate::process::leader_election::DEFAULT_LEASE_NAME;

/// Who the host runs as and where it may act: the options of
/// `reconciler-host rbac`.
#[derive(Clone, Debug)]
pub struct RbacScope {
    /// The name of the ClusterRole, and of every Role and RoleBinding.
    pub name: String,
    /// Namespaces the host serves (`run --namespace`); empty: the whole
    /// cluster, and one ClusterRole.
    pub namespaces: BTreeSet<String>,
    /// The host's service account, which the RoleBindings name.
    pub service_account: String,
    pub service_account_namespace: String,
    /// Where the leader-election Lease lives, and its name.
    pub lease_namespace: String,
    pub lease_name: String,
    /// Whether replicas shard the work (`run --sharding`): each holds a
    /// Lease named after its pod and reads the others', so the Role in the
    /// Lease's namespace grants Leases by namespace, not by name.
    pub sharding: bool,
    /// Whether the host installs CRDs (`run --install-crds`).
    pub install_crds: bool,
    /// When a plugin serves admission: the namespace of the Secret the
    /// generated certificate is kept in (`run --admission-cert-secret`).
    pub admission_secret_namespace: Option<String>,
    /// The names of the webhook configurations the host applies
    /// ([`crate::admission::webhook_configs::configuration_name`]).
    pub webhook_configurations: BTreeSet<String>,
    /// Whether the host watches Plugin resources (`run` does unless
    /// `--no-plugin-resources`).
    pub plugin_resources: bool,
    /// Whether the host follows member clusters' kubeconfig Secrets in its
    /// namespace (`run --cluster-secrets`, or `--cluster-api`).
    pub cluster_secrets: bool,
    /// For a member cluster (`rbac --member`): only what the plugins need
    /// there. The Lease, admission, Plugin resources, member Secrets and
    /// the metrics' token reviews all live on the hub.
    pub member: bool,
    /// For `reconciler-host plan` against the cluster (`rbac --plan`):
    /// get, list and watch on the plugins' kinds and nothing else.
    pub plan: bool,
}

impl RbacScope {
    /// One ClusterRole `name` for the whole cluster, as `deploy/` uses.
    pub fn cluster_wide(name: &str) -> Self {
        Self {
            name: name.to_string(),
            namespaces: BTreeSet::new(),
            service_account: "reconciler-host".into(),
            service_account_namespace: "reconciler-host".into(),
            lease_namespace: "reconciler-host".into(),
            lease_name: DEFAULT_LEASE_NAME.into(),
            sharding: false,
            install_crds: false,
            admission_secret_namespace: None,
            webhook_configurations: BTreeSet::new(),
            plugin_resources: true,
            cluster_secrets: false,
            member: false,
            plan: false,
        }
    }

    /// What `reconciler-host plan` needs: to read the plugins' kinds.
    pub fn plan(self) -> Self {
        Self {
            plan: true,
            ..self.member()
        }
    }

    /// What a member cluster must grant the host's credentials there.
    pub fn member(self) -> Self {
        Self {
            member: true,
            install_crds: false,
            admission_secret_namespace: None,
            webhook_configurations: BTreeSet::new(),
            plugin_resources: false,
            cluster_secrets: false,
            ..self
        }
    }
}
