//! The resource names (plurals) and scopes of kinds, which rules are
//! written in and placed by: a plugin declares kinds, RBAC grants
//! resources, and only a kind's scope says whether a Role in a namespace
//! can grant it.

use std::collections::BTreeMap;
use std::path::Path;

use kube::api::{ApiResource, GroupVersionKind};
use reconciler_contract::KindRef;
use serde_json::Value;

use crate::cluster::KindScope;
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
