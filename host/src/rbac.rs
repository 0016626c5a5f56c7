//! The least-privilege ClusterRole a set of plugins needs, derived from
//! what they declare, so RBAC follows the plugins instead of being written
//! by hand and drifting.
//!
//! What the host does for a plugin, and the permission each needs:
//! - watch every declared kind (primary, owned, read, written): get, list, watch;
//! - apply owned objects (server-side apply is a PATCH that creates when the
//!   object is missing) and prune them: create, patch, delete;
//! - apply fields of written objects: patch;
//! - write a primary's status through its subresource: patch (what the host
//!   sends) and update (what other tools expect a status writer to hold);
//! - add and remove its finalizer on primaries: patch, only if it declares one;
//! - record Events (events.k8s.io): create, patch;
//! - leader election on a coordination.k8s.io Lease: get, create, update, patch.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use kube::api::{ApiResource, GroupVersionKind};
use reconciler_sdk::{KindRef, PluginMetadata};
use serde_json::Value;

use crate::manifests::read_all;

/// Resource names (plurals) of kinds: from CRDs where known, otherwise the
/// API server's own rule for built-in kinds.
#[derive(Default)]
pub struct Plurals {
    from_crds: BTreeMap<(String, String), String>,
}

impl Plurals {
    /// Reads `spec.names.plural` of every CustomResourceDefinition under `dir`.
    pub fn from_crds(dir: &Path) -> anyhow::Result<Self> {
        let mut plurals = Self::default();
        for (_, object) in read_all(dir)? {
            if object.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
                continue;
            }
            let text = |p: &str| object.pointer(p).and_then(Value::as_str);
            if let (Some(group), Some(kind), Some(plural)) = (
                text("/spec/group"),
                text("/spec/names/kind"),
                text("/spec/names/plural"),
            ) {
                plurals
                    .from_crds
                    .insert((group.to_string(), kind.to_string()), plural.to_string());
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
}

/// Verbs per resource, per API group.
#[derive(Default)]
struct Grants {
    by_group: BTreeMap<String, BTreeMap<String, BTreeSet<&'static str>>>,
}

impl Grants {
    fn grant(&mut self, group: &str, resource: &str, verbs: &[&'static str]) {
        self.by_group
            .entry(group.to_string())
            .or_default()
            .entry(resource.to_string())
            .or_default()
            .extend(verbs);
    }

    /// Rules as the API wants them: per group, resources sharing the same
    /// verbs are one rule.
    fn rules(&self) -> Vec<(String, Vec<String>, Vec<&'static str>)> {
        let mut rules = Vec::new();
        for (group, resources) in &self.by_group {
            let mut by_verbs: BTreeMap<Vec<&'static str>, Vec<String>> = BTreeMap::new();
            for (resource, verbs) in resources {
                by_verbs
                    .entry(verbs.iter().copied().collect())
                    .or_default()
                    .push(resource.clone());
            }
            for (verbs, resources) in by_verbs {
                rules.push((group.clone(), resources, verbs));
            }
        }
        rules
    }
}

const READ: &[&str] = &["get", "list", "watch"];

/// The ClusterRole `name` granting what `plugins` need, as YAML. Stable:
/// the same plugins give the same text, so it can be checked in and
/// compared.
pub fn cluster_role(plugins: &[PluginMetadata], plurals: &Plurals, name: &str) -> String {
    let mut grants = Grants::default();
    for plugin in plugins {
        for kind in plugin.declared_kinds() {
            grants.grant(&kind.group, &plurals.plural(kind), READ);
        }
        for kind in &plugin.owns {
            grants.grant(
                &kind.group,
                &plurals.plural(kind),
                &["create", "patch", "delete"],
            );
        }
        for kind in &plugin.writes {
            grants.grant(&kind.group, &plurals.plural(kind), &["patch"]);
        }
        let primary = &plugin.primary;
        let plural = plurals.plural(primary);
        grants.grant(
            &primary.group,
            &format!("{plural}/status"),
            &["patch", "update"],
        );
        if plugin.finalizer.is_some() {
            grants.grant(&primary.group, &plural, &["patch"]);
        }
    }
    grants.grant("events.k8s.io", "events", &["create", "patch"]);
    grants.grant(
        "coordination.k8s.io",
        "leases",
        &["get", "create", "update", "patch"],
    );

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
    out.push_str("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\n");
    let _ = writeln!(out, "metadata:\n  name: {name}");
    out.push_str("rules:\n");
    for (group, resources, verbs) in grants.rules() {
        let _ = writeln!(out, "  - apiGroups: [{}]", quoted(&group));
        let resources: Vec<String> = resources.iter().map(|r| quoted(r)).collect();
        let _ = writeln!(out, "    resources: [{}]", resources.join(", "));
        let _ = writeln!(out, "    verbs: [{}]", verbs.join(", "));
    }
    out
}

fn quoted(s: &str) -> String {
    format!("\"{s}\"")
}

#[cfg(test)]
mod tests {
    use reconciler_sdk::MapRule;

    use super::*;

    fn kind(group: &str, version: &str, kind: &str) -> KindRef {
        KindRef::new(group, version, kind)
    }

    /// The rules of a role as (group, resource, verbs) triples.
    fn triples(yaml: &str) -> BTreeSet<(String, String, String)> {
        let role: Value = serde_yaml_ng::from_str(yaml).unwrap();
        let mut out = BTreeSet::new();
        for rule in role["rules"].as_array().unwrap() {
            let verbs: Vec<&str> = rule["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            for resource in rule["resources"].as_array().unwrap() {
                out.insert((
                    rule["apiGroups"][0].as_str().unwrap().to_string(),
                    resource.as_str().unwrap().to_string(),
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
            t("coordination.k8s.io", "leases", "create,get,patch,update"),
        ] {
            assert!(
                rules.contains(&expected),
                "{expected:?} missing from\n{yaml}"
            );
        }
        assert_eq!(rules.len(), 8, "nothing more:\n{yaml}");
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
}
