//! Which rules each feature of the host needs, and where: the plugins'
//! kinds, Events, the Lease, admission, Plugin resources, member clusters'
//! Secrets, the metrics' reviews, CRD installation. One function per
//! feature, so what a feature is granted reads in one place (the module
//! documentation of `rbac` says why each is what it is).

use std::collections::BTreeSet;

use reconciler_contract::{KindRef, PluginMetadata};

use super::grants::Placement;
use super::plurals::Plurals;
use super::scope::RbacScope;
use crate::cluster::KindScope;

const READ: &[&str] = &["get", "list", "watch"];
const EVENTS: &[&str] = &["create", "patch"];

/// The grants `plugins` need under a scope, placed.
pub(super) struct Needs<'a> {
    plurals: &'a Plurals,
    scope: &'a RbacScope,
    pub placement: Placement,
    /// Kinds granted cluster-wide because their scope is not known.
    pub unknown_scope: BTreeSet<String>,
}

impl<'a> Needs<'a> {
    /// Everything `plugins` and the host's features on in `scope` need.
    pub(super) fn of(
        plugins: &[PluginMetadata],
        plurals: &'a Plurals,
        scope: &'a RbacScope,
    ) -> Self {
        let mut needs = Self {
            plurals,
            scope,
            placement: Placement::default(),
            unknown_scope: BTreeSet::new(),
        };
        if scope.plan {
            // A plan reads what the plugins would reconcile; it writes nothing.
            for kind in plugins.iter().flat_map(PluginMetadata::declared_kinds) {
                needs.grant(kind, &plurals.plural(kind), READ);
            }
            // The version serving, when a Plugin resource names it.
            let group = crate::plugin_resources::GROUP;
            needs.placement.cluster(group, "plugins", &["get", "list"]);
            return needs;
        }
        let events_outside_namespaces = needs.plugin_kinds(plugins);
        needs.events(events_outside_namespaces);
        if !scope.member {
            needs.lease();
        }
        if let Some(namespace) = &scope.admission_secret_namespace {
            needs.admission(namespace);
        }
        if scope.plugin_resources {
            needs.plugin_resources();
        }
        if scope.cluster_secrets {
            needs.cluster_secrets();
        }
        if !scope.member {
            needs.metrics_reviews();
        }
        if scope.install_crds {
            needs.crd_installation();
        }
        needs
    }

    /// `verbs` on `resource` of `kind`: in the ClusterRole, or, with
    /// namespaces and a namespaced kind, in the Role of each namespace.
    fn grant(&mut self, kind: &KindRef, resource: &str, verbs: &[&'static str]) {
        let kind_scope = self.plurals.scope(kind);
        if kind_scope.is_none() {
            self.unknown_scope.insert(kind.to_string());
        }
        if self.scope.namespaces.is_empty() || kind_scope != Some(KindScope::Namespaced) {
            self.placement.cluster(&kind.group, resource, verbs);
        } else {
            for namespace in &self.scope.namespaces {
                self.placement
                    .namespace(namespace, &kind.group, resource, verbs);
            }
        }
    }

    /// What the host does for each plugin's kinds; whether some primary is
    /// not namespaced (its Events go to `default`).
    fn plugin_kinds(&mut self, plugins: &[PluginMetadata]) -> bool {
        let plurals = self.plurals;
        let mut events_outside_namespaces = false;
        for plugin in plugins {
            for kind in plugin.declared_kinds() {
                self.grant(kind, &plurals.plural(kind), READ);
            }
            for kind in &plugin.owns {
                self.grant(kind, &plurals.plural(kind), &["create", "patch", "delete"]);
            }
            for kind in &plugin.writes {
                self.grant(kind, &plurals.plural(kind), &["patch"]);
            }
            let primary = &plugin.primary;
            let plural = plurals.plural(primary);
            self.grant(primary, &format!("{plural}/status"), &["patch", "update"]);
            // Sharding labels each primary with its bucket, once.
            if plugin.finalizer.is_some() || self.scope.sharding {
                self.grant(primary, &plural, &["patch"]);
            }
            events_outside_namespaces |= plurals.scope(primary) != Some(KindScope::Namespaced);
        }
        events_outside_namespaces
    }

    /// Recording Events, where the objects they are about live.
    fn events(&mut self, outside_namespaces: bool) {
        let placement = &mut self.placement;
        if self.scope.namespaces.is_empty() {
            placement.cluster("events.k8s.io", "events", EVENTS);
        } else {
            for namespace in &self.scope.namespaces {
                placement.namespace(namespace, "events.k8s.io", "events", EVENTS);
            }
            // Events about a cluster-scoped object go to `default`.
            if outside_namespaces {
                placement.namespace("default", "events.k8s.io", "events", EVENTS);
            }
        }
    }

    /// The Lease by name; its `create` cannot name it (see the module
    /// documentation of `rbac`), so a Role keeps that to the Lease's
    /// namespace.
    fn lease(&mut self) {
        let scope = self.scope;
        let leases = self
            .placement
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
            // The duties' holder publishes who may write each bucket, for
            // the shard fence (`sharding/fence.rs`).
            let writers = crate::sharding::fence::params_name(&scope.lease_name);
            leases.grant(
                "",
                "configmaps",
                std::slice::from_ref(&writers),
                &["get", "update"],
            );
            leases.grant("", "configmaps", &[], &["create"]);
        }
    }

    /// The webhook configurations the host names, and the certificate's
    /// Secret in `namespace`.
    fn admission(&mut self, namespace: &str) {
        let placement = &mut self.placement;
        let names: Vec<String> = self.scope.webhook_configurations.iter().cloned().collect();
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

    /// Plugins (cluster-scoped) and their status; their Events go to
    /// `default`, as every cluster-scoped object's do; their keys and pull
    /// secrets are read in the host's own namespace only.
    fn plugin_resources(&mut self) {
        let scope = self.scope;
        let placement = &mut self.placement;
        let group = crate::plugin_resources::GROUP;
        placement.cluster(group, "plugins", READ);
        placement.cluster(group, "plugins/status", &["patch", "update"]);
        if !scope.namespaces.is_empty() {
            placement.namespace("default", "events.k8s.io", "events", EVENTS);
        }
        placement.namespace(&scope.service_account_namespace, "", "secrets", &["get"]);
        placement.namespace(&scope.service_account_namespace, "", "configmaps", &["get"]);
    }

    /// Member clusters' kubeconfigs, followed in the host's namespace, and
    /// the Events that say what became of each.
    fn cluster_secrets(&mut self) {
        let namespace = &self.scope.service_account_namespace;
        let placement = &mut self.placement;
        placement.namespace(namespace, "", "secrets", READ);
        placement.namespace(namespace, "events.k8s.io", "events", &["create", "patch"]);
    }

    /// Asking the API server who may read `/metrics` and `/plugins`.
    fn metrics_reviews(&mut self) {
        let placement = &mut self.placement;
        placement.cluster("authentication.k8s.io", "tokenreviews", &["create"]);
        placement.cluster("authorization.k8s.io", "subjectaccessreviews", &["create"]);
    }

    /// `run --install-crds`.
    fn crd_installation(&mut self) {
        self.placement.cluster(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            &["get", "create", "patch"],
        );
    }
}
