use std::collections::{BTreeMap, BTreeSet};

use reconciler_contract::{KindRef, MapRule, PluginMetadata};
use serde_json::{Value, json};

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
    // The shard fence's ConfigMap: read and replaced by name only.
    assert!(
        role.contains(&t("", "configmaps=reconciler-host-writers", "get,update")),
        "{yaml}"
    );
    assert!(role.contains(&t("", "configmaps", "create")), "{yaml}");
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

#[test]
fn a_plan_role_reads_the_plugins_kinds_and_plugin_resources_and_writes_nothing() {
    let scope = RbacScope::cluster_wide("reconciler-host-plan").plan();
    let rules = triples(&rbac(&[website()], &website_crd("Namespaced"), &scope));
    let read = |group: &str, resource: &str| {
        (
            group.to_string(),
            resource.to_string(),
            "get,list,watch".to_string(),
        )
    };
    assert_eq!(
        rules,
        BTreeSet::from([
            read("example.com", "websites"),
            read("apps", "deployments"),
            read("", "pods"),
            read("", "configmaps"),
            (
                "reconciler-host.io".to_string(),
                "plugins".to_string(),
                "get,list".to_string()
            ),
        ])
    );
}
