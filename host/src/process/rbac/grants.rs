//! Grants gathered as verbs per resource, and where each goes: the
//! ClusterRole or the Role of a namespace. Gathering by resource first
//! and writing rules last lets every feature add what it needs without
//! knowing what the others add; the rules come out merged and in a stable
//! order.

use std::collections::{BTreeMap, BTreeSet};

/// Verbs per resource and object names (none: every object), per API
/// group.
#[derive(Default)]
pub(super) struct Grants {
    by_group: BTreeMap<String, VerbsByResource>,
}

/// Verbs by (resource, object names) within one API group.
type VerbsByResource = BTreeMap<(String, Vec<String>), BTreeSet<&'static str>>;

/// One rule of a role.
pub(super) struct Rule {
    pub group: String,
    pub resources: Vec<String>,
    /// `resourceNames`; empty: every object.
    pub names: Vec<String>,
    pub verbs: Vec<&'static str>,
}

impl Grants {
    /// `verbs` on the objects of `resource` named `names`, or on every
    /// object of it when `names` is empty.
    pub(super) fn grant(
        &mut self,
        group: &str,
        resource: &str,
        names: &[String],
        verbs: &[&'static str],
    ) {
        self.by_group
            .entry(group.to_string())
            .or_default()
            .entry((resource.to_string(), names.to_vec()))
            .or_default()
            .extend(verbs);
    }

    /// Rules as the API wants them: per group, resources sharing the same
    /// names and verbs are one rule.
    pub(super) fn rules(&self) -> Vec<Rule> {
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

/// Grants split between the ClusterRole and a Role per namespace.
#[derive(Default)]
pub(super) struct Placement {
    pub cluster: Grants,
    pub namespaced: BTreeMap<String, Grants>,
}

impl Placement {
    pub(super) fn cluster(&mut self, group: &str, resource: &str, verbs: &[&'static str]) {
        self.cluster.grant(group, resource, &[], verbs);
    }

    pub(super) fn namespace(
        &mut self,
        namespace: &str,
        group: &str,
        resource: &str,
        verbs: &[&'static str],
    ) {
        self.namespaced
            .entry(namespace.to_string())
            .or_default()
            .grant(group, resource, &[], verbs);
    }
}
