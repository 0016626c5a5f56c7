//! Which kinds the embedded cluster serves cluster-scoped.
//!
//! Why it matters: an API server stores a cluster-scoped object without a
//! namespace (it drops one sent with it), and a cluster-scoped object cannot
//! have a namespaced owner. The engine refuses a namespaced primary's plugin
//! that owns or writes a cluster-scoped kind, so the embedded cluster must
//! answer as a real one would, or `dev` and `simulate` would accept a plugin
//! a real cluster refuses.
//!
//! Where the answers come from:
//! 1. a table of the built-in kinds an API server (1.28 and later) serves
//!    cluster-scoped;
//! 2. every `apiextensions.k8s.io` CustomResourceDefinition stored in the
//!    cluster: its `spec.group`, `spec.names.kind` and `spec.scope`, which
//!    hold for every version it lists;
//! 3. anything else is namespaced, as most kinds are.
//!
//! Guarantees: a CRD with a missing or unknown scope, group or kind is
//! refused before it is stored (the API server answers 422 too), and a CRD's
//! scope cannot change once learned (`spec.scope` is immutable on an API
//! server), so the key of every stored object stays right.
//!
//! Caveat: a CRD deleted from the embedded cluster is still remembered; its
//! objects are not deleted with it, as they would be on an API server.

use std::collections::BTreeMap;

use reconciler_contract::KindRef;
use serde_json::Value;

use crate::cluster::backend::KindScope;

/// Built-in kinds an API server serves cluster-scoped, by group and kind.
/// Kinds of one version only are listed too: scope does not change with it.
const CLUSTER_SCOPED_BUILTINS: &[(&str, &str)] = &[
    ("", "ComponentStatus"),
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
    ("authentication.k8s.io", "SelfSubjectReview"),
    ("authentication.k8s.io", "TokenReview"),
    ("authorization.k8s.io", "SelfSubjectAccessReview"),
    ("authorization.k8s.io", "SelfSubjectRulesReview"),
    ("authorization.k8s.io", "SubjectAccessReview"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("certificates.k8s.io", "ClusterTrustBundle"),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
    ("internal.apiserver.k8s.io", "StorageVersion"),
    ("metrics.k8s.io", "NodeMetrics"),
    ("networking.k8s.io", "IPAddress"),
    ("networking.k8s.io", "IngressClass"),
    ("networking.k8s.io", "ServiceCIDR"),
    ("node.k8s.io", "RuntimeClass"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("resource.k8s.io", "DeviceClass"),
    ("resource.k8s.io", "ResourceSlice"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("storagemigration.k8s.io", "StorageVersionMigration"),
];

const CRD_GROUP: &str = "apiextensions.k8s.io";
const CRD_KIND: &str = "CustomResourceDefinition";

/// Whether `kind` is the CustomResourceDefinition kind.
pub fn is_crd(kind: &KindRef) -> bool {
    kind.group == CRD_GROUP && kind.kind == CRD_KIND
}

/// What one CustomResourceDefinition says about its kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrdScope {
    pub group: String,
    pub kind: String,
    pub scope: KindScope,
}

impl CrdScope {
    /// Reads `spec.group`, `spec.names.kind` and `spec.scope` of a CRD.
    /// Errors name the field and say what it must be, as the API server's
    /// 422 answer does.
    pub fn of(crd: &Value) -> Result<Self, String> {
        let text = |pointer: &str| {
            crd.pointer(pointer)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let group = text("/spec/group").ok_or("spec.group: Required value")?;
        let kind = text("/spec/names/kind").ok_or("spec.names.kind: Required value")?;
        let scope = match crd.pointer("/spec/scope") {
            Some(Value::String(s)) if s == "Namespaced" => KindScope::Namespaced,
            Some(Value::String(s)) if s == "Cluster" => KindScope::Cluster,
            None | Some(Value::Null) => return Err("spec.scope: Required value".into()),
            Some(other) => {
                return Err(format!(
                    "spec.scope: Unsupported value: {other}: supported values: \"Cluster\", \"Namespaced\""
                ));
            }
        };
        Ok(Self {
            group: group.to_string(),
            kind: kind.to_string(),
            scope,
        })
    }
}

/// The scopes of custom kinds learned from CRDs. See the module documentation.
#[derive(Clone, Debug, Default)]
pub struct KindScopes {
    /// (group, kind) -> scope, from CRDs.
    custom: BTreeMap<(String, String), KindScope>,
}

impl KindScopes {
    /// Whether objects of `kind` live in a namespace.
    pub fn scope_of(&self, kind: &KindRef) -> KindScope {
        let builtin = CLUSTER_SCOPED_BUILTINS
            .iter()
            .any(|(group, k)| *group == kind.group && *k == kind.kind);
        if builtin {
            return KindScope::Cluster;
        }
        self.custom
            .get(&(kind.group.clone(), kind.kind.clone()))
            .copied()
            .unwrap_or(KindScope::Namespaced)
    }

    /// Whether a CRD may be stored: it keeps the scope learned before.
    pub fn check(&self, crd: &CrdScope) -> Result<(), String> {
        let learned = self
            .custom
            .get(&(crd.group.clone(), crd.kind.clone()))
            .copied();
        match learned {
            Some(scope) if scope != crd.scope => Err(format!(
                "spec.scope: Invalid value: {:?}: field is immutable ({} {} is served {})",
                scope_name(crd.scope),
                crd.group,
                crd.kind,
                scope_name(scope)
            )),
            _ => Ok(()),
        }
    }

    /// Remembers the scope a stored CRD gives its kind.
    pub fn learn(&mut self, crd: CrdScope) {
        self.custom.insert((crd.group, crd.kind), crd.scope);
    }
}

/// `Namespaced` or `Cluster`, as CRDs spell it.
pub fn scope_name(scope: KindScope) -> &'static str {
    match scope {
        KindScope::Namespaced => "Namespaced",
        KindScope::Cluster => "Cluster",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn crd(group: &str, kind: &str, scope: Value) -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{}s.{group}", kind.to_lowercase())},
            "spec": {"group": group, "names": {"kind": kind, "plural": format!("{}s", kind.to_lowercase())},
                     "scope": scope, "versions": [{"name": "v1", "served": true, "storage": true},
                                                  {"name": "v2", "served": true, "storage": false}]}})
    }

    #[test]
    fn built_in_kinds_are_served_as_an_api_server_serves_them() {
        let scopes = KindScopes::default();
        let scope = |api_version: &str, kind: &str| {
            scopes.scope_of(&KindRef::from_api_version(api_version, kind))
        };
        for (api_version, kind) in [
            ("v1", "Namespace"),
            ("v1", "Node"),
            ("v1", "PersistentVolume"),
            ("rbac.authorization.k8s.io/v1", "ClusterRole"),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            ("storage.k8s.io/v1", "StorageClass"),
            (
                "admissionregistration.k8s.io/v1",
                "ValidatingWebhookConfiguration",
            ),
            ("networking.k8s.io/v1", "IngressClass"),
        ] {
            assert_eq!(scope(api_version, kind), KindScope::Cluster, "{kind}");
        }
        for (api_version, kind) in [
            ("v1", "ConfigMap"),
            ("v1", "PersistentVolumeClaim"),
            ("rbac.authorization.k8s.io/v1", "Role"),
            ("apps/v1", "Deployment"),
            // Same kind name, another group: not the built-in.
            ("example.com/v1", "Namespace"),
            ("example.com/v1", "Unknown"),
        ] {
            assert_eq!(scope(api_version, kind), KindScope::Namespaced, "{kind}");
        }
    }

    #[test]
    fn a_crd_teaches_the_scope_of_its_kind_for_every_version() {
        let mut scopes = KindScopes::default();
        let tenant = CrdScope::of(&crd("example.com", "Tenant", json!("Cluster"))).unwrap();
        scopes.check(&tenant).unwrap();
        scopes.learn(tenant);
        for version in ["v1", "v2"] {
            assert_eq!(
                scopes.scope_of(&KindRef::new("example.com", version, "Tenant")),
                KindScope::Cluster
            );
        }
        assert_eq!(
            scopes.scope_of(&KindRef::new("other.example.com", "v1", "Tenant")),
            KindScope::Namespaced
        );
    }

    #[test]
    fn a_crd_without_a_valid_scope_group_or_kind_is_refused_naming_the_field() {
        let err = CrdScope::of(&crd("example.com", "Tenant", json!("Global"))).unwrap_err();
        assert!(
            err.starts_with("spec.scope: Unsupported value: \"Global\""),
            "{err}"
        );
        let err = CrdScope::of(&crd("example.com", "Tenant", Value::Null)).unwrap_err();
        assert_eq!(err, "spec.scope: Required value");
        let err = CrdScope::of(&crd("", "Tenant", json!("Cluster"))).unwrap_err();
        assert_eq!(err, "spec.group: Required value");
        let err = CrdScope::of(&crd("example.com", "", json!("Cluster"))).unwrap_err();
        assert_eq!(err, "spec.names.kind: Required value");
    }

    #[test]
    fn a_learned_scope_cannot_change() {
        let mut scopes = KindScopes::default();
        scopes.learn(CrdScope::of(&crd("example.com", "Tenant", json!("Namespaced"))).unwrap());
        let flipped = CrdScope::of(&crd("example.com", "Tenant", json!("Cluster"))).unwrap();
        let err = scopes.check(&flipped).unwrap_err();
        assert!(
            err.starts_with("spec.scope: Invalid value: \"Cluster\": field is immutable"),
            "{err}"
        );
        let same = CrdScope::of(&crd("example.com", "Tenant", json!("Namespaced"))).unwrap();
        assert_eq!(scopes.check(&same), Ok(()));
    }
}
