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

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use kube::api::{ApiResource, GroupVersionKind};
use reconciler_contract::{KindRef, PluginMetadata};
use serde_json::Value;

use crate::cluster::KindScope;
use crate::process::leader_election::DEFAULT_LEASE_NAME;
use crate::process::manifests::read_all;

/// Built-in kinds the API server serves in namespaces, by group and kind.
const NAMESPACED_BUILTINS: &[(&str, &str)] = &[
    ("", "ConfigMap"),
    ("", "Endpoints"),
    ("", "Event"),
    ("", "LimitRange"),
    ("", "PersistentVolumeClaim"),
    ("", "Pod"),
    ("", "PodTemplate"),
    ("", "ReplicationController"),
    ("", "ResourceQuota"),
    ("", "Secret"),
    ("", "Service"),
    ("", "ServiceAccount"),
    ("apps", "ControllerRevision"),
    ("apps", "DaemonSet"),
    ("apps", "Deployment"),
    ("apps", "ReplicaSet"),
    ("apps", "StatefulSet"),
    ("autoscaling", "HorizontalPodAutoscaler"),
    ("batch", "CronJob"),
    ("batch", "Job"),
    ("coordination.k8s.io", "Lease"),
    ("discovery.k8s.io", "EndpointSlice"),
    ("events.k8s.io", "Event"),
    ("networking.k8s.io", "Ingress"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("policy", "PodDisruptionBudget"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("storage.k8s.io", "CSIStorageCapacity"),
];

/// Built-in kinds the API server serves cluster-scoped, by group and kind.
const CLUSTER_SCOPED_BUILTINS: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("networking.k8s.io", "IngressClass"),
    ("node.k8s.io", "RuntimeClass"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "VolumeAttachment"),
];

/// Resource names (plurals) and scopes of kinds: from CRDs where known,
/// otherwise the API server's own rules for built-in kinds.
#[derive(Default)]
pub struct Plurals {
    from_crds: BTreeMap<(String, String), String>,
    scopes_from_crds: BTreeMap<(String, String), KindScope>,
}

impl Plurals {
    /// Reads `spec.names.plural` and `spec.scope` of every
    /// CustomResourceDefinition under `dir`.
    pub fn from_crds(dir: &Path) -> anyhow::Result<Self> {
        let mut plurals = Self::default();
        for (_, object) in read_all(dir)? {
            if object.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
                continue;
            }
            let text = |p: &str| object.pointer(p).and_then(Value::as_str);
            let (Some(group), Some(kind)) = (text("/spec/group"), text("/spec/names/kind")) else {
                continue;
            };
            let key = (group.to_string(), kind.to_string());
            if let Some(plural) = text("/spec/names/plural") {
                plurals.from_crds.insert(key.clone(), plural.to_string());
            }
            let scope = match text("/spec/scope") {
                Some("Namespaced") => Some(KindScope::Namespaced),
                Some("Cluster") => Some(KindScope::Cluster),
                _ => None,
            };
            if let Some(scope) = scope {
                plurals.scopes_from_crds.insert(key, scope);
            }
        }
        Ok(plurals)
    }

    pub fn plural(&self, kind: &KindRef) -> String {
        if let Some(plural) = self.from_crds.get(&(kind.group.clone(), kind.kind.clone())) {
            return plural.clone();
        }
        let gvk = GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
        ApiResource::from_gvk(&gvk).plural
    }

    /// Whether objects of `kind` live in namespaces; `None` for a kind that
    /// is neither a known built-in nor described by a CRD read.
    pub fn scope(&self, kind: &KindRef) -> Option<KindScope> {
        let key = (kind.group.clone(), kind.kind.clone());
        if let Some(scope) = self.scopes_from_crds.get(&key) {
            return Some(*scope);
        }
        let is = |table: &[(&str, &str)]| {
            table
                .iter()
                .any(|(group, k)| *group == kind.group && *k == kind.kind)
        };
        if is(NAMESPACED_BUILTINS) {
            Some(KindScope::Namespaced)
        } else if is(CLUSTER_SCOPED_BUILTINS) {
            Some(KindScope::Cluster)
        } else {
            None
        }
    }
}

/// Verbs per resource and object names (none: every object), per API
/// group.
#[derive(Default)]
struct Grants {
    by_group: BTreeMap<String, VerbsByResource>,
}

/// Verbs by (resource, object names) within one API group.
type VerbsByResource = BTreeMap<(String, Vec<String>), BTreeSet<&'static str>>;

/// One rule of a role.
struct Rule {
    group: String,
    resources: Vec<String>,
    /// `resourceNames`; empty: every object.
    names: Vec<String>,
    verbs: Vec<&'static str>,
}

impl Grants {
    /// `verbs` on the objects of `resource` named `names`, or on every
    /// object of it when `names` is empty.
    fn grant(&mut self, group: &str, resource: &str, names: &[String], verbs: &[&'static str]) {
        self.by_group
            .entry(group.to_string())
            .or_default()
            .entry((resource.to_string(), names.to_vec()))
            .or_default()
            .extend(verbs);
    }

    /// Rules as the API wants them: per group, resources sharing the same
    /// names and verbs are one rule.
    fn rules(&self) -> Vec<Rule> {
        let mut rules = Vec::new();
        for (group, resources) in &self.by_group {
            let mut by_verbs: BTreeMap<(Vec<String>, Vec<&'static str>), Vec<String>> =
                BTreeMap::new();
            for ((resource, names), verbs) in resources {
                by_verbs
                    .entry((names.clone(), verbs.iter().copied().collect()))
                    .or_default()
                    .push(resource.clone());
            }
            for ((names, verbs), resources) in by_verbs {
                rules.push(Rule {
                    group: group.clone(),
                    resources,
                    names,
                    verbs,
                });
            }
        }
        rules
    }
}

const READ: &[&str] = &["get", "list", "watch"];

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

/// Grants split between the ClusterRole and a Role per namespace.
#[derive(Default)]
struct Placement {
    cluster: Grants,
    namespaced: BTreeMap<String, Grants>,
}

impl Placement {
    fn cluster(&mut self, group: &str, resource: &str, verbs: &[&'static str]) {
        self.cluster.grant(group, resource, &[], verbs);
    }

    fn namespace(&mut self, namespace: &str, group: &str, resource: &str, verbs: &[&'static str]) {
        self.namespaced
            .entry(namespace.to_string())
            .or_default()
            .grant(group, resource, &[], verbs);
    }
}

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
    let mut placement = Placement::default();
    let mut unknown_scope = BTreeSet::new();
    let mut grant = |placement: &mut Placement, kind: &KindRef, resource: &str, verbs| {
        let kind_scope = plurals.scope(kind);
        if kind_scope.is_none() {
            unknown_scope.insert(kind.to_string());
        }
        if scope.namespaces.is_empty() || kind_scope != Some(KindScope::Namespaced) {
            placement.cluster(&kind.group, resource, verbs);
        } else {
            for namespace in &scope.namespaces {
                placement.namespace(namespace, &kind.group, resource, verbs);
            }
        }
    };
    let mut events_outside_namespaces = false;
    for plugin in plugins {
        for kind in plugin.declared_kinds() {
            grant(&mut placement, kind, &plurals.plural(kind), READ);
        }
        for kind in &plugin.owns {
            grant(
                &mut placement,
                kind,
                &plurals.plural(kind),
                &["create", "patch", "delete"],
            );
        }
        for kind in &plugin.writes {
            grant(&mut placement, kind, &plurals.plural(kind), &["patch"]);
        }
        let primary = &plugin.primary;
        let plural = plurals.plural(primary);
        grant(
            &mut placement,
            primary,
            &format!("{plural}/status"),
            &["patch", "update"],
        );
        // Sharding labels each primary with its bucket, once.
        if plugin.finalizer.is_some() || scope.sharding {
            grant(&mut placement, primary, &plural, &["patch"]);
        }
        events_outside_namespaces |= plurals.scope(primary) != Some(KindScope::Namespaced);
    }
    const EVENTS: &[&str] = &["create", "patch"];
    if scope.namespaces.is_empty() {
        placement.cluster("events.k8s.io", "events", EVENTS);
    } else {
        for namespace in &scope.namespaces {
            placement.namespace(namespace, "events.k8s.io", "events", EVENTS);
        }
        // Events about a cluster-scoped object go to `default`.
        if events_outside_namespaces {
            placement.namespace("default", "events.k8s.io", "events", EVENTS);
        }
    }
    // The Lease by name; its `create` cannot name it (see the module
    // documentation), so a Role keeps that to the Lease's namespace.
    if !scope.member {
        let leases = placement
            .namespaced
            .entry(scope.lease_namespace.clone())
            .or_default();
        leases.grant(
            "coordination.k8s.io",
            "leases",
            std::slice::from_ref(&scope.lease_name),
            &["get", "patch", "update"],
        );
        leases.grant("coordination.k8s.io", "leases", &[], &["create"]);
        if scope.sharding {
            // A replica's Lease is named after its pod, unknown here; it
            // lists the ring's and deletes its own on leaving.
            leases.grant(
                "coordination.k8s.io",
                "leases",
                &[],
                &["delete", "get", "list", "patch", "update"],
            );
        }
    }
    if let Some(namespace) = &scope.admission_secret_namespace {
        let names: Vec<String> = scope.webhook_configurations.iter().cloned().collect();
        for resource in [
            "mutatingwebhookconfigurations",
            "validatingwebhookconfigurations",
        ] {
            if !names.is_empty() {
                placement.cluster.grant(
                    "admissionregistration.k8s.io",
                    resource,
                    &names,
                    &["create", "delete", "get", "patch"],
                );
            }
            placement.cluster("admissionregistration.k8s.io", resource, &["list"]);
        }
        placement.namespace(namespace, "", "secrets", &["create", "get", "update"]);
        // The host's Namespace owns the webhook configurations.
        placement.cluster("", "namespaces", &["get"]);
    }
    if scope.plugin_resources {
        // Plugins (cluster-scoped) and their status; their Events go to
        // `default`, as every cluster-scoped object's do; their keys and
        // pull secrets are read in the host's own namespace only.
        let group = crate::plugin_resources::GROUP;
        placement.cluster(group, "plugins", READ);
        placement.cluster(group, "plugins/status", &["patch", "update"]);
        if !scope.namespaces.is_empty() {
            placement.namespace("default", "events.k8s.io", "events", EVENTS);
        }
        placement.namespace(&scope.service_account_namespace, "", "secrets", &["get"]);
        placement.namespace(&scope.service_account_namespace, "", "configmaps", &["get"]);
    }
    if scope.cluster_secrets {
        // Member clusters' kubeconfigs, followed in the host's namespace,
        // and the Events that say what became of each.
        placement.namespace(&scope.service_account_namespace, "", "secrets", READ);
        placement.namespace(
            &scope.service_account_namespace,
            "events.k8s.io",
            "events",
            &["create", "patch"],
        );
    }
    if !scope.member {
        placement.cluster("authentication.k8s.io", "tokenreviews", &["create"]);
        placement.cluster("authorization.k8s.io", "subjectaccessreviews", &["create"]);
    }
    if scope.install_crds {
        placement.cluster(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            &["get", "create", "patch"],
        );
    }

    let mut names: Vec<String> = plugins
        .iter()
        .map(|p| format!("{} {}", p.name, p.version))
        .collect();
    names.sort();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Generated by `reconciler-host rbac` for: {}.",
        if names.is_empty() {
            "no plugins".to_string()
        } else {
            names.join(", ")
        }
    );
    out.push_str("# Regenerate it when the plugins change what they declare.\n");
    if !scope.namespaces.is_empty() {
        let namespaces: Vec<&str> = scope.namespaces.iter().map(String::as_str).collect();
        let _ = writeln!(
            out,
            "# Namespaced kinds are granted in {} only, by the Roles below; bind the\n# ClusterRole (cluster-wide needs only) as deploy/cluster-role-binding.yaml does.",
            namespaces.join(", ")
        );
    }
    if !unknown_scope.is_empty() && !scope.namespaces.is_empty() {
        let kinds: Vec<&str> = unknown_scope.iter().map(String::as_str).collect();
        let _ = writeln!(
            out,
            "# Granted cluster-wide because their scope is unknown (pass their CRDs with --crds): {}.",
            kinds.join(", ")
        );
    }
    write_role(
        &mut out,
        "ClusterRole",
        &scope.name,
        None,
        &placement.cluster,
    );
    for (namespace, grants) in &placement.namespaced {
        out.push_str("---\n");
        write_role(&mut out, "Role", &scope.name, Some(namespace), grants);
        out.push_str("---\n");
        write_role_binding(&mut out, scope, namespace);
    }
    out
}

fn write_role(out: &mut String, kind: &str, name: &str, namespace: Option<&str>, grants: &Grants) {
    let _ = writeln!(
        out,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}"
    );
    let _ = writeln!(out, "metadata:\n  name: {name}");
    if let Some(namespace) = namespace {
        let _ = writeln!(out, "  namespace: {namespace}");
    }
    let rules = grants.rules();
    if rules.is_empty() {
        out.push_str("rules: []\n");
        return;
    }
    out.push_str("rules:\n");
    for rule in rules {
        let _ = writeln!(out, "  - apiGroups: [{}]", quoted(&rule.group));
        let resources: Vec<String> = rule.resources.iter().map(|r| quoted(r)).collect();
        let _ = writeln!(out, "    resources: [{}]", resources.join(", "));
        if !rule.names.is_empty() {
            let names: Vec<String> = rule.names.iter().map(|n| quoted(n)).collect();
            let _ = writeln!(out, "    resourceNames: [{}]", names.join(", "));
        }
        let _ = writeln!(out, "    verbs: [{}]", rule.verbs.join(", "));
    }
}

fn write_role_binding(out: &mut String, scope: &RbacScope, namespace: &str) {
    let _ = writeln!(
        out,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: {name}\n  namespace: {namespace}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: {name}\nsubjects:\n  - kind: ServiceAccount\n    name: {account}\n    namespace: {account_namespace}",
        name = scope.name,
        account = scope.service_account,
        account_namespace = scope.service_account_namespace,
    );
}

fn quoted(s: &str) -> String {
    format!("\"{s}\"")
}

#[cfg(test)]
mod tests {
    use reconciler_contract::MapRule;
    use serde_json::json;

    use super::*;

    fn kind(group: &str, version: &str, kind: &str) -> KindRef {
        KindRef::new(group, version, kind)
    }

    /// The rules of the ClusterRole as (group, resource, verbs) triples.
    fn triples(yaml: &str) -> BTreeSet<(String, String, String)> {
        rules_of(&documents(yaml)[&("ClusterRole".to_string(), String::new())])
    }

    /// (group, resource, verbs) per resource of each rule; a rule limited
    /// to names gives `resource=name,name`.
    fn rules_of(role: &Value) -> BTreeSet<(String, String, String)> {
        let mut out = BTreeSet::new();
        for rule in role["rules"].as_array().unwrap() {
            let names: Vec<&str> = rule["resourceNames"]
                .as_array()
                .map(|names| names.iter().map(|n| n.as_str().unwrap()).collect())
                .unwrap_or_default();
            let verbs: Vec<&str> = rule["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            for resource in rule["resources"].as_array().unwrap() {
                let mut resource = resource.as_str().unwrap().to_string();
                if !names.is_empty() {
                    resource = format!("{resource}={}", names.join(","));
                }
                out.insert((
                    rule["apiGroups"][0].as_str().unwrap().to_string(),
                    resource,
                    verbs.join(","),
                ));
            }
        }
        out
    }

    fn t(group: &str, resource: &str, verbs: &str) -> (String, String, String) {
        (group.into(), resource.into(), verbs.into())
    }

    #[test]
    fn each_role_of_a_kind_gets_only_its_verbs() {
        let plugin = PluginMetadata::new("web", "1.0.0", kind("example.com", "v1", "Website"))
            .owns(kind("apps", "v1", "Deployment"))
            .owns(kind("networking.k8s.io", "v1", "Ingress"))
            .reads(kind("", "v1", "Pod"), MapRule::None, true)
            .writes(kind("", "v1", "ConfigMap"));
        let yaml = cluster_role(&[plugin], &Plurals::default(), "reconciler-host");
        let rules = triples(&yaml);
        for expected in [
            t("example.com", "websites", "get,list,watch"),
            t("example.com", "websites/status", "patch,update"),
            t("apps", "deployments", "create,delete,get,list,patch,watch"),
            t(
                "networking.k8s.io",
                "ingresses",
                "create,delete,get,list,patch,watch",
            ),
            t("", "pods", "get,list,watch"),
            t("", "configmaps", "get,list,patch,watch"),
            t("events.k8s.io", "events", "create,patch"),
            t("authentication.k8s.io", "tokenreviews", "create"),
            t("authorization.k8s.io", "subjectaccessreviews", "create"),
            // Following Plugin resources (run does by default).
            t("reconciler-host.io", "plugins", "get,list,watch"),
            t("reconciler-host.io", "plugins/status", "patch,update"),
        ] {
            assert!(
                rules.contains(&expected),
                "{expected:?} missing from\n{yaml}"
            );
        }
        assert_eq!(rules.len(), 11, "nothing more:\n{yaml}");
    }

    #[test]
    fn a_finalizer_adds_patch_on_the_primary_and_crds_name_plurals() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("crd.yaml"),
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: octopi.example.com}\nspec:\n  group: example.com\n  names: {kind: Octopus, plural: octopi}\n  scope: Namespaced\n  versions: []\n",
        )
        .unwrap();
        let plurals = Plurals::from_crds(dir.path()).unwrap();
        let plugin = PluginMetadata::new("sea", "1.0.0", kind("example.com", "v1", "Octopus"))
            .finalizer("example.com/cleanup");
        let rules = triples(&cluster_role(&[plugin], &plurals, "x"));
        assert!(rules.contains(&t("example.com", "octopi", "get,list,patch,watch")));
        assert!(rules.contains(&t("example.com", "octopi/status", "patch,update")));
    }

    #[test]
    fn the_same_plugins_give_the_same_text() {
        let a = PluginMetadata::new("a", "1", kind("example.com", "v1", "A")).owns(kind(
            "apps",
            "v1",
            "Deployment",
        ));
        let b = PluginMetadata::new("b", "1", kind("example.com", "v1", "B")).reads(
            kind("apps", "v1", "Deployment"),
            MapRule::None,
            false,
        );
        let one = cluster_role(&[a.clone(), b.clone()], &Plurals::default(), "r");
        let two = cluster_role(&[b, a], &Plurals::default(), "r");
        assert_eq!(one, two);
    }

    /// Every document of a multi-document YAML text, by (kind, namespace).
    fn documents(yaml: &str) -> BTreeMap<(String, String), Value> {
        use serde::Deserialize;
        serde_yaml_ng::Deserializer::from_str(yaml)
            .map(|doc| {
                let v = Value::deserialize(doc).unwrap();
                let key = (
                    v["kind"].as_str().unwrap().to_string(),
                    v["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                );
                (key, v)
            })
            .collect()
    }

    fn in_namespaces(namespaces: &[&str]) -> RbacScope {
        RbacScope {
            plugin_resources: false,
            cluster_secrets: false,
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            ..RbacScope::cluster_wide("reconciler-host")
        }
    }

    fn website_crd(scope: &str) -> Plurals {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("crd.yaml"),
            format!("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: websites.example.com}}\nspec:\n  group: example.com\n  names: {{kind: Website, plural: websites}}\n  scope: {scope}\n  versions: []\n"),
        )
        .unwrap();
        Plurals::from_crds(dir.path()).unwrap()
    }

    fn website() -> PluginMetadata {
        PluginMetadata::new("web", "1.0.0", kind("example.com", "v1", "Website"))
            .owns(kind("apps", "v1", "Deployment"))
            .reads_in_namespace(kind("", "v1", "Pod"), MapRule::None, true)
            .writes(kind("", "v1", "ConfigMap"))
            .finalizer("example.com/cleanup")
    }

    #[test]
    fn with_namespaces_namespaced_kinds_are_granted_by_a_role_in_each() {
        let yaml = rbac(
            &[website()],
            &website_crd("Namespaced"),
            &in_namespaces(&["team-a", "team-b"]),
        );
        let docs = documents(&yaml);
        let cluster = &docs[&("ClusterRole".to_string(), String::new())];
        assert_eq!(
            rules_of(cluster),
            BTreeSet::from([
                t("authentication.k8s.io", "tokenreviews", "create"),
                t("authorization.k8s.io", "subjectaccessreviews", "create"),
            ]),
            "cluster-wide only the reviews of metrics readers:\n{yaml}"
        );
        for namespace in ["team-a", "team-b"] {
            let role = &docs[&("Role".to_string(), namespace.to_string())];
            assert_eq!(
                rules_of(role),
                BTreeSet::from([
                    t("example.com", "websites", "get,list,patch,watch"),
                    t("example.com", "websites/status", "patch,update"),
                    t("apps", "deployments", "create,delete,get,list,patch,watch"),
                    t("", "pods", "get,list,watch"),
                    t("", "configmaps", "get,list,patch,watch"),
                    t("events.k8s.io", "events", "create,patch"),
                ]),
                "{namespace}:\n{yaml}"
            );
            let binding = &docs[&("RoleBinding".to_string(), namespace.to_string())];
            assert_eq!(
                binding["roleRef"],
                json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reconciler-host"})
            );
            assert_eq!(
                binding["subjects"],
                json!([{"kind": "ServiceAccount", "name": "reconciler-host", "namespace": "reconciler-host"}])
            );
        }
        // The Lease: a Role of its own in the service account's namespace.
        let leases = &docs[&("Role".to_string(), "reconciler-host".to_string())];
        assert_eq!(rules_of(leases), lease_rules("reconciler-host"));
        assert!(docs.contains_key(&("RoleBinding".to_string(), "reconciler-host".to_string())));
        assert_eq!(docs.len(), 1 + 3 * 2, "{yaml}");
    }

    #[test]
    fn cluster_scoped_and_unknown_kinds_stay_in_the_cluster_role() {
        let plugin = website().owns(kind("", "v1", "Namespace")).reads(
            kind("other.io", "v1", "Gadget"),
            MapRule::None,
            false,
        );
        let yaml = rbac(
            &[plugin],
            &website_crd("Cluster"),
            &in_namespaces(&["team-a"]),
        );
        let docs = documents(&yaml);
        let cluster = rules_of(&docs[&("ClusterRole".to_string(), String::new())]);
        for expected in [
            t("example.com", "websites", "get,list,patch,watch"),
            t("example.com", "websites/status", "patch,update"),
            t("", "namespaces", "create,delete,get,list,patch,watch"),
            t("other.io", "gadgets", "get,list,watch"),
        ] {
            assert!(cluster.contains(&expected), "{expected:?}:\n{yaml}");
        }
        let role = rules_of(&docs[&("Role".to_string(), "team-a".to_string())]);
        assert!(role.contains(&t(
            "apps",
            "deployments",
            "create,delete,get,list,patch,watch"
        )));
        assert!(
            !role
                .iter()
                .any(|(_, r, _)| r == "namespaces" || r == "websites")
        );
        // Events about a cluster-scoped Website are recorded in `default`.
        let default = rules_of(&docs[&("Role".to_string(), "default".to_string())]);
        assert_eq!(
            default,
            BTreeSet::from([t("events.k8s.io", "events", "create,patch")])
        );
        assert!(
            yaml.contains(
                "because their scope is unknown (pass their CRDs with --crds): other.io/v1 Gadget."
            ),
            "{yaml}"
        );
    }

    /// What the host needs of its Lease `name`: that one by name, and
    /// `create`, which cannot name it.
    fn lease_rules(name: &str) -> BTreeSet<(String, String, String)> {
        BTreeSet::from([
            t(
                "coordination.k8s.io",
                &format!("leases={name}"),
                "get,patch,update",
            ),
            t("coordination.k8s.io", "leases", "create"),
        ])
    }

    #[test]
    fn admission_adds_webhook_configurations_and_the_certificate_secret_only_in_its_namespace() {
        let scope = RbacScope {
            admission_secret_namespace: Some("ops".into()),
            webhook_configurations: BTreeSet::from(["reconciler-host-web".into()]),
            plugin_resources: false,
            cluster_secrets: false,
            ..RbacScope::cluster_wide("reconciler-host")
        };
        let yaml = rbac(&[website()], &website_crd("Namespaced"), &scope);
        let docs = documents(&yaml);
        let cluster = rules_of(&docs[&("ClusterRole".to_string(), String::new())]);
        for resource in [
            "validatingwebhookconfigurations",
            "mutatingwebhookconfigurations",
        ] {
            let granted: BTreeSet<_> = cluster
                .iter()
                .filter(|(group, _, _)| group == "admissionregistration.k8s.io")
                .filter(|(_, r, _)| r.starts_with(resource))
                .cloned()
                .collect();
            assert_eq!(
                granted,
                BTreeSet::from([
                    t(
                        "admissionregistration.k8s.io",
                        &format!("{resource}=reconciler-host-web"),
                        "create,delete,get,patch"
                    ),
                    t("admissionregistration.k8s.io", resource, "list"),
                ]),
                "changes by name only, and a list to find stale ones:\n{yaml}"
            );
        }
        assert!(
            !cluster.iter().any(|(_, resource, _)| resource == "secrets"),
            "no Secrets cluster-wide: {yaml}"
        );
        let role = rules_of(&docs[&("Role".to_string(), "ops".to_string())]);
        assert_eq!(
            role,
            BTreeSet::from([t("", "secrets", "create,get,update")]),
            "{yaml}"
        );
        assert!(docs.contains_key(&("RoleBinding".to_string(), "ops".to_string())));

        let without = rbac(
            &[website()],
            &website_crd("Namespaced"),
            &RbacScope {
                plugin_resources: false,
                cluster_secrets: false,
                ..RbacScope::cluster_wide("reconciler-host")
            },
        );
        assert!(
            !without.contains("webhookconfigurations") && !without.contains("secrets"),
            "{without}"
        );
    }

    #[test]
    fn a_member_cluster_grants_the_plugins_kinds_and_nothing_of_the_hubs() {
        let hub = RbacScope::cluster_wide("reconciler-host");
        let member = hub.clone().member();
        let yaml = rbac(&[website()], &website_crd("Namespaced"), &member);
        for absent in [
            "leases",
            "tokenreviews",
            "subjectaccessreviews",
            "secrets",
            "plugins",
        ] {
            let quoted = format!("[\"{absent}\"]");
            assert!(!yaml.contains(&quoted), "{absent} in\n{yaml}");
        }
        let hub_yaml = rbac(&[website()], &website_crd("Namespaced"), &hub);
        let docs = documents(&yaml);
        let hub_docs = documents(&hub_yaml);
        let cluster = rules_of(&docs[&("ClusterRole".to_string(), String::new())]);
        let hub_cluster = rules_of(&hub_docs[&("ClusterRole".to_string(), String::new())]);
        // The plugin's kinds and Events are granted as on the hub.
        for rule in &hub_cluster {
            if rule.0 == "example.com" || rule.1 == "deployments" || rule.1 == "events" {
                assert!(cluster.contains(rule), "{rule:?} missing in\n{yaml}");
            }
        }
    }

    #[test]
    fn cluster_secrets_are_read_in_the_hosts_namespace_only() {
        let scope = RbacScope {
            service_account_namespace: "ops".into(),
            cluster_secrets: true,
            ..in_namespaces(&["team-a"])
        };
        let yaml = rbac(&[website()], &website_crd("Namespaced"), &scope);
        let docs = documents(&yaml);
        let ops = rules_of(&docs[&("Role".to_string(), "ops".to_string())]);
        assert!(ops.contains(&t("", "secrets", "get,list,watch")), "{yaml}");
        let cluster = rules_of(&docs[&("ClusterRole".to_string(), String::new())]);
        assert!(!cluster.iter().any(|(_, r, _)| r == "secrets"), "{yaml}");
    }

    #[test]
    fn plugin_resources_add_plugins_cluster_wide_and_keys_in_the_hosts_namespace_only() {
        let scope = RbacScope {
            service_account_namespace: "ops".into(),
            ..in_namespaces(&["team-a"])
        };
        let with = RbacScope {
            plugin_resources: true,
            ..scope.clone()
        };
        let yaml = rbac(&[website()], &website_crd("Namespaced"), &with);
        let docs = documents(&yaml);
        let cluster = rules_of(&docs[&("ClusterRole".to_string(), String::new())]);
        assert!(
            cluster.contains(&t("reconciler-host.io", "plugins", "get,list,watch")),
            "{yaml}"
        );
        assert!(
            cluster.contains(&t("reconciler-host.io", "plugins/status", "patch,update")),
            "{yaml}"
        );
        assert!(
            !cluster
                .iter()
                .any(|(_, r, _)| r == "secrets" || r == "configmaps"),
            "{yaml}"
        );
        let ops = rules_of(&docs[&("Role".to_string(), "ops".to_string())]);
        assert!(
            ops.contains(&t("", "secrets", "get")) && ops.contains(&t("", "configmaps", "get")),
            "{yaml}"
        );
        // Their Events go to `default`, as every cluster-scoped object's.
        let default = rules_of(&docs[&("Role".to_string(), "default".to_string())]);
        assert!(
            default.contains(&t("events.k8s.io", "events", "create,patch")),
            "{yaml}"
        );

        let without = rbac(&[website()], &website_crd("Namespaced"), &scope);
        assert!(
            !without.contains("reconciler-host.io") && !without.contains("secrets"),
            "{without}"
        );
    }

    #[test]
    fn install_crds_adds_crd_rules_to_the_cluster_role() {
        for namespaces in [&[][..], &["team-a"][..]] {
            let scope = RbacScope {
                install_crds: true,
                ..in_namespaces(namespaces)
            };
            let yaml = rbac(&[website()], &website_crd("Namespaced"), &scope);
            let cluster = rules_of(&documents(&yaml)[&("ClusterRole".to_string(), String::new())]);
            assert!(
                cluster.contains(&t(
                    "apiextensions.k8s.io",
                    "customresourcedefinitions",
                    "create,get,patch"
                )),
                "{yaml}"
            );
        }
    }

    #[test]
    fn sharding_grants_the_leases_of_the_namespace_and_nothing_beyond() {
        let scope = RbacScope {
            lease_namespace: "ops".into(),
            sharding: true,
            ..RbacScope::cluster_wide("r")
        };
        let yaml = rbac(&[website()], &website_crd("Namespaced"), &scope);
        let docs = documents(&yaml);
        let role = rules_of(&docs[&("Role".to_string(), "ops".to_string())]);
        assert!(
            role.contains(&t(
                "coordination.k8s.io",
                "leases",
                "create,delete,get,list,patch,update"
            )),
            "{yaml}"
        );
        let cluster = rules_of(&docs[&("ClusterRole".to_string(), String::new())]);
        assert!(
            !cluster.iter().any(|(_, r, _)| r.starts_with("leases")),
            "{yaml}"
        );
    }

    #[test]
    fn sharding_may_patch_primaries_to_label_them_with_their_shard() {
        let plain = PluginMetadata::new("plain", "1", kind("example.com", "v1", "Website"));
        let websites = |sharding: bool| {
            let scope = RbacScope {
                sharding,
                ..RbacScope::cluster_wide("r")
            };
            let yaml = rbac(
                std::slice::from_ref(&plain),
                &website_crd("Namespaced"),
                &scope,
            );
            let docs = documents(&yaml);
            rules_of(&docs[&("ClusterRole".to_string(), String::new())])
                .into_iter()
                .filter(|(group, resource, _)| group == "example.com" && resource == "websites")
                .map(|(_, _, verbs)| verbs)
                .collect::<Vec<_>>()
        };
        assert_eq!(websites(false), vec!["get,list,watch"]);
        assert_eq!(websites(true), vec!["get,list,patch,watch"]);
    }

    #[test]
    fn without_namespaces_only_the_lease_is_granted_outside_the_cluster_role() {
        let plurals = website_crd("Namespaced");
        let scope = RbacScope {
            lease_namespace: "ops".into(),
            lease_name: "web-leader".into(),
            plugin_resources: false,
            cluster_secrets: false,
            ..RbacScope::cluster_wide("r")
        };
        let yaml = rbac(&[website()], &plurals, &scope);
        let docs = documents(&yaml);
        assert_eq!(
            docs.keys().cloned().collect::<Vec<_>>(),
            vec![
                ("ClusterRole".to_string(), String::new()),
                ("Role".to_string(), "ops".to_string()),
                ("RoleBinding".to_string(), "ops".to_string()),
            ],
            "{yaml}"
        );
        let rules = triples(&yaml);
        assert!(
            !rules
                .iter()
                .any(|(_, resource, _)| resource.starts_with("leases")),
            "no Lease cluster-wide, kube-system's and the nodes' included:\n{yaml}"
        );
        assert!(rules.contains(&t(
            "apps",
            "deployments",
            "create,delete,get,list,patch,watch"
        )));
        assert_eq!(
            rules_of(&docs[&("Role".to_string(), "ops".to_string())]),
            lease_rules("web-leader")
        );
    }
}
