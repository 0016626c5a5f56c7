//! The manifests in deploy/ that are derived from code stay in step with it.

use reconciler_host::admission::webhook_configs::{DEFAULT_WEBHOOK_PREFIX, configuration_name};
use reconciler_host::process::http_server::{OBJECT_PATHS, REPORT_PATHS, SHADOW_PATH};
use reconciler_host::process::rbac::{FenceScope, Plurals, RbacScope, fence, rbac};
use reconciler_tests::{example_plugin, load, root};

const EXAMPLES: [&str; 5] = [
    "kubernetescluster",
    "memcached",
    "podset",
    "rollout_restarter",
    "rollout_schedules",
];

#[test]
fn the_cluster_role_in_deploy_is_what_rbac_generates_for_the_example_plugins() {
    let metadata: Vec<_> = EXAMPLES
        .iter()
        .map(|name| load(&example_plugin(name)).metadata().clone())
        .collect();
    let plurals = Plurals::from_crds(&root().join("crds")).unwrap();
    // kubernetescluster serves admission: its webhook configurations, and
    // the certificate Secret in the host's namespace; with sharding, the
    // configuration labelling new primaries with their shard too.
    let scope = RbacScope {
        admission_secret_namespace: Some("reconciler-host".into()),
        webhook_configurations: std::collections::BTreeSet::from([
            configuration_name(DEFAULT_WEBHOOK_PREFIX, "kubernetescluster"),
            reconciler_host::admission::shard_labels::configuration_name(DEFAULT_WEBHOOK_PREFIX),
        ]),
        // deploy/ runs three replicas with --sharding.
        sharding: true,
        ..RbacScope::cluster_wide("reconciler-host")
    };
    in_step(
        "cluster-role.yaml",
        &rbac(&metadata, &plurals, &scope),
        "rbac --plugins-dir plugins --crds crds --sharding",
    );
}

/// Fails unless deploy/`file` is `generated`, saying how to regenerate it
/// (`command`, the host's arguments).
fn in_step(file: &str, generated: &str, command: &str) {
    let path = root().join("deploy").join(file);
    let checked_in = std::fs::read_to_string(&path).unwrap();
    assert!(
        generated == checked_in,
        "{} is stale; regenerate it with\n  cargo run -p reconciler-host -- {command} > deploy/{file}\n--- generated:\n{generated}",
        path.display()
    );
}

#[test]
fn the_shard_fence_in_deploy_is_what_rbac_write_fence_generates() {
    let scope = FenceScope {
        prefix: DEFAULT_WEBHOOK_PREFIX.into(),
        api_version: "v1".into(),
        users: vec!["system:serviceaccount:reconciler-host:reconciler-host".into()],
        // deploy/'s replicas shard under the default ring name, in their
        // own namespace.
        namespace: "reconciler-host".into(),
        ring: "reconciler-host".into(),
    };
    in_step("shard-fence.yaml", &fence(&scope), "rbac --write-fence");
}

fn manifest(name: &str) -> serde_json::Value {
    manifests(name).remove(0)
}

/// Every document of a manifest file.
fn manifests(name: &str) -> Vec<serde_json::Value> {
    use serde::Deserialize as _;
    let path = root().join("deploy").join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| {
            serde_json::Value::deserialize(doc)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .collect()
}

#[test]
fn deploy_installs_the_plugin_crd_as_crds_defines_it() {
    let deployed = manifests("plugin-crd.yaml");
    let defined: serde_json::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(root().join("crds/plugin.yaml")).unwrap())
            .unwrap();
    assert_eq!(
        deployed,
        vec![defined],
        "deploy/plugin-crd.yaml differs from crds/plugin.yaml: copy it over"
    );
}

#[test]
fn kustomization_lists_every_manifest_in_deploy() {
    let kustomization = manifest("kustomization.yaml");
    let mut listed: Vec<String> = kustomization["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    listed.sort();
    let mut present: Vec<String> = std::fs::read_dir(root().join("deploy"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    present.sort();
    assert_eq!(listed, present);
    for name in &present {
        for object in manifests(name) {
            assert!(
                object["apiVersion"].is_string() && object["kind"].is_string(),
                "{name}"
            );
        }
    }
}

#[test]
fn the_deployment_runs_the_host_with_flags_it_has() {
    let deployment = manifest("deployment.yaml");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let parsed = <reconciler_host::cli::Cli as clap::Parser>::try_parse_from(
        std::iter::once("reconciler-host").chain(args.iter().copied()),
    );
    assert!(parsed.is_ok(), "{args:?}: {}", parsed.unwrap_err());
    // Every replica reconciles a share; voluntary disruptions take one at a time.
    assert!(args.contains(&"--sharding"), "{args:?}");
    assert!(deployment["spec"]["replicas"].as_i64().unwrap() >= 3);
    let budget = manifest("pod-disruption-budget.yaml");
    assert_eq!(budget["spec"]["maxUnavailable"], 1);
    assert_eq!(
        budget["spec"]["selector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    // Admission on every replica, reached through the Service's webhooks port.
    assert!(
        args.contains(&"--admission-listen=0.0.0.0:8443"),
        "{args:?}"
    );
    assert!(
        args.contains(&"--admission-service=reconciler-host/reconciler-host:8443"),
        "{args:?}"
    );
    let service = manifest("service.yaml");
    let webhooks = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "webhooks")
        .expect("the Service exposes the webhooks port");
    assert_eq!(webhooks["port"], 8443);
    assert!(
        container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "webhooks" && p["containerPort"] == 8443),
        "{container}"
    );
    // Metrics over HTTPS with tokens, on a port of their own.
    assert!(args.contains(&"--metrics-listen=0.0.0.0:8444"), "{args:?}");
    assert!(!args.contains(&"--metrics-insecure"), "{args:?}");
    let metrics = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "metrics")
        .expect("the Service exposes the metrics port");
    assert_eq!(metrics["port"], 8444);
    let reader = manifest("metrics-reader.yaml");
    let granted = &reader["rules"][0]["nonResourceURLs"];
    for path in REPORT_PATHS {
        assert!(
            granted
                .as_array()
                .is_some_and(|g| g.iter().any(|p| p == path)),
            "deploy/metrics-reader.yaml does not grant {path}, which the metrics port serves: {granted}"
        );
    }
    // Below /plugins: a candidate's shadow report (SHADOW_PATH).
    assert!(
        SHADOW_PATH.starts_with("/plugins/")
            && granted
                .as_array()
                .is_some_and(|g| g.iter().any(|p| p == "/plugins/*")),
        "deploy/metrics-reader.yaml does not grant /plugins/*, under which {SHADOW_PATH} is served: {granted}"
    );
    // Below /objects: each object's decision journal (`explain`).
    for path in OBJECT_PATHS {
        assert!(
            path.starts_with("/objects/")
                && granted
                    .as_array()
                    .is_some_and(|g| g.iter().any(|p| p == "/objects/*")),
            "deploy/metrics-reader.yaml does not grant /objects/*, under which {path} is served: {granted}"
        );
    }
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"],
        true
    );
    assert!(container["resources"]["limits"]["memory"].is_string());
    // Plugins from registries run only when signed by the installer's key,
    // mounted from a ConfigMap the pod cannot start without.
    assert!(args.contains(&"--require-signatures"), "{args:?}");
    let key = args
        .iter()
        .find_map(|a| a.strip_prefix("--verify-key="))
        .expect("--require-signatures names the key");
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| key.starts_with(m["mountPath"].as_str().unwrap()))
        .expect("the key's directory is mounted");
    let volume = deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert_eq!(
        volume["configMap"]["name"], "reconciler-host-trust",
        "{volume}"
    );
    assert_ne!(volume["configMap"]["optional"], true, "{volume}");
}

/// The NetworkPolicy covers the host's pods and leaves each of their ports
/// open to whom it must be, except the webhooks port, which no pod reaches
/// (kube-system's tunnel agents aside): only addresses outside the pod
/// network, the API server's.
#[test]
fn the_network_policy_keeps_pods_off_the_webhooks_port() {
    let policy = manifest("network-policy.yaml");
    let deployment = manifest("deployment.yaml");
    assert_eq!(
        policy["metadata"]["namespace"],
        deployment["metadata"]["namespace"]
    );
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"],
        deployment["spec"]["template"]["metadata"]["labels"],
        "the policy selects the host's pods"
    );
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let ports: Vec<&str> = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let rules = policy["spec"]["ingress"].as_array().unwrap();
    let rule_of = |port: &str| {
        let found: Vec<_> = rules
            .iter()
            .filter(|r| {
                r["ports"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p["port"] == port)
            })
            .collect();
        assert_eq!(found.len(), 1, "one rule for port {port}: {rules:?}");
        found[0]
    };
    for port in &ports {
        // A port no rule names would be closed to everyone: the probes
        // would fail, or the scraper would.
        rule_of(port);
    }
    for rule in rules {
        for port in rule["ports"].as_array().unwrap() {
            assert!(
                ports.iter().any(|p| port["port"] == *p),
                "the policy names a port the container does not have: {port}"
            );
        }
    }
    let webhooks = rule_of("webhooks");
    let from = webhooks["from"]
        .as_array()
        .expect("the webhooks port says who may connect");
    for peer in from {
        if let Some(block) = peer.get("ipBlock") {
            assert!(
                block["except"].as_array().is_some_and(|e| !e.is_empty()),
                "an address block that does not leave out the pod network: {peer}"
            );
        } else {
            assert_eq!(
                peer,
                &serde_json::json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}),
                "pods may reach the webhooks port only from kube-system"
            );
        }
    }
}

/// Without --namespace, the host may touch its own Lease and webhook
/// configurations by name: not kube-system's Leases, not a node's, not
/// another webhook configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_rbac_grants_the_lease_and_webhook_configurations_by_name_on_a_real_cluster() {
    use std::collections::BTreeSet;

    use anyhow::Context as _;

    let Some(client) = real_cluster_client(
        "generated_rbac_grants_the_lease_and_webhook_configurations_by_name_on_a_real_cluster",
    )
    .await
    else {
        return;
    };
    let host = real_cluster::namespace(&client, "rbac-e2e-names-")
        .await
        .expect("a namespace");
    // Cluster-scoped names are shared by every run: the namespace's own
    // (server-generated) name makes them unique.
    let prefix = host.clone();
    let mine = configuration_name(&prefix, "kubernetescluster");
    let other = configuration_name(&prefix, "another");
    let result = async {
        let metadata: Vec<_> = EXAMPLES
            .iter()
            .map(|name| load(&example_plugin(name)).metadata().clone())
            .collect();
        let plurals = Plurals::from_crds(&root().join("crds"))?;
        let scope = RbacScope {
            service_account_namespace: host.clone(),
            lease_namespace: host.clone(),
            admission_secret_namespace: Some(host.clone()),
            webhook_configurations: BTreeSet::from([mine.clone()]),
            // As `rbac --cluster-secrets`: member clusters from Secrets.
            cluster_secrets: true,
            ..RbacScope::cluster_wide(&host)
        };
        let yaml = rbac(&metadata, &plurals, &scope);
        let account = (host.as_str(), "reconciler-host");
        let webhooks = |resource: &str, name: &str| format!("{resource}={name}");
        let (validating_mine, mutating_mine, validating_other, mutating_other) = (
            webhooks("validatingwebhookconfigurations", &mine),
            webhooks("mutatingwebhookconfigurations", &mine),
            webhooks("validatingwebhookconfigurations", &other),
            webhooks("mutatingwebhookconfigurations", &other),
        );
        real_cluster::apply_cluster_role(&client, &yaml, account).await?;
        real_cluster::apply_roles(&client, &yaml).await?;
        for request in [
            (
                "update",
                "coordination.k8s.io",
                "leases=reconciler-host",
                host.as_str(),
            ),
            ("create", "coordination.k8s.io", "leases", host.as_str()),
            (
                "patch",
                "admissionregistration.k8s.io",
                &validating_mine,
                "",
            ),
            ("delete", "admissionregistration.k8s.io", &mutating_mine, ""),
            (
                "list",
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations",
                "",
            ),
            // Member clusters' kubeconfig Secrets, and Events on them, in
            // the host's own namespace.
            ("watch", "", "secrets", host.as_str()),
            ("create", "events.k8s.io", "events", host.as_str()),
        ] {
            real_cluster::expect_can(&client, account, request, true).await?;
        }
        for request in [
            (
                "update",
                "coordination.k8s.io",
                "leases=kube-controller-manager",
                "kube-system",
            ),
            ("create", "coordination.k8s.io", "leases", "kube-system"),
            ("list", "", "secrets", "kube-system"),
            (
                "update",
                "coordination.k8s.io",
                "leases=node-a",
                "kube-node-lease",
            ),
            (
                "update",
                "coordination.k8s.io",
                "leases=someone-else",
                host.as_str(),
            ),
            ("update", "coordination.k8s.io", "leases", ""),
            (
                "patch",
                "admissionregistration.k8s.io",
                &validating_other,
                "",
            ),
            (
                "delete",
                "admissionregistration.k8s.io",
                &mutating_other,
                "",
            ),
            (
                "create",
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations",
                "",
            ),
        ] {
            real_cluster::expect_can(&client, account, request, false).await?;
        }
        // What the host does: a server-side apply that creates the
        // configuration, authorized by its name.
        let as_host = real_cluster::impersonating(account).await?;
        real_cluster::apply_webhook_configuration(&as_host, &mine)
            .await
            .with_context(|| format!("the host applies {mine}"))?;
        let refused = real_cluster::apply_webhook_configuration(&as_host, &other).await;
        anyhow::ensure!(
            refused
                .as_ref()
                .is_err_and(|e| format!("{e:#}").contains("forbidden")),
            "applying {other} should be forbidden: {refused:?}"
        );
        anyhow::Ok(())
    }
    .await;
    real_cluster::delete_webhook_configuration(&client, &mine).await;
    real_cluster::delete_webhook_configuration(&client, &other).await;
    real_cluster::delete_cluster_role(&client, &host).await;
    real_cluster::delete_namespace(&client, &host).await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}

/// deploy/metrics-reader.yaml, bound to a scraper's service account as the
/// docs say, lets it read every report the metrics port serves: the API
/// server's authorizer (the SubjectAccessReview the host sends for each
/// request) allows `get` on each path, and refuses an account left unbound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_reader_role_lets_a_scraper_read_every_report_on_a_real_cluster() {
    let Some(client) = real_cluster_client(
        "the_metrics_reader_role_lets_a_scraper_read_every_report_on_a_real_cluster",
    )
    .await
    else {
        return;
    };
    let namespace = real_cluster::namespace(&client, "metrics-reader-e2e-")
        .await
        .expect("a namespace");
    // The role is cluster-scoped: named after the test's namespace, so runs
    // in parallel (or an installed host) keep their own.
    let mut role = manifest("metrics-reader.yaml");
    let name = format!("{namespace}-metrics-reader");
    role["metadata"]["name"] = serde_json::json!(name);
    let result = async {
        let yaml = serde_yaml_ng::to_string(&role)?;
        real_cluster::apply_cluster_role(&client, &yaml, (&namespace, "prometheus")).await?;
        let shadow = SHADOW_PATH.replace("{name}", "podset");
        for path in REPORT_PATHS.into_iter().chain([shadow.as_str()]) {
            real_cluster::expect_can_get(&client, (&namespace, "prometheus"), path, true).await?;
            real_cluster::expect_can_get(&client, (&namespace, "stranger"), path, false).await?;
        }
        anyhow::Ok(())
    }
    .await;
    real_cluster::delete_cluster_role(&client, &name).await;
    real_cluster::delete_namespace(&client, &namespace).await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}

/// The API server takes deploy/network-policy.yaml as it is (in a
/// namespace of the test's own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_policy_in_deploy_is_accepted_by_a_real_api_server() {
    let Some(client) =
        real_cluster_client("the_network_policy_in_deploy_is_accepted_by_a_real_api_server").await
    else {
        return;
    };
    let namespace = real_cluster::namespace(&client, "network-policy-e2e-")
        .await
        .expect("a namespace");
    let mut policy = manifest("network-policy.yaml");
    policy["metadata"]["namespace"] = serde_json::json!(namespace);
    let result = real_cluster::apply_namespaced(
        &client,
        &policy,
        (
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "networkpolicies",
        ),
    )
    .await;
    real_cluster::delete_namespace(&client, &namespace).await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}

/// A client of the cluster in KUBECONFIG, or `None` after printing why
/// `test` is skipped.
async fn real_cluster_client(test: &str) -> Option<kube::Client> {
    use std::io::Write as _;

    if let Some(why) = real_cluster_skip_reason() {
        let _ = writeln!(
            std::io::stderr(),
            "deploy_manifests: SKIPPED {test}: {why}. To run it: RECONCILER_E2E=1 KUBECONFIG=~/.kube/config cargo test -p reconciler-tests --test deploy_manifests"
        );
        return None;
    }
    Some(
        kube::Client::try_default()
            .await
            .expect("a Kubernetes client from KUBECONFIG"),
    )
}

/// Why the real-cluster test does not run here, or `None` if it does.
fn real_cluster_skip_reason() -> Option<String> {
    let mut missing = Vec::new();
    match std::env::var_os("RECONCILER_E2E") {
        Some(v) if v == "1" => {}
        Some(v) => missing.push(format!("RECONCILER_E2E is {v:?}, not \"1\"")),
        None => missing.push("RECONCILER_E2E is not set".to_string()),
    }
    match std::env::var_os("KUBECONFIG") {
        Some(v) if !v.is_empty() => {}
        _ => missing.push("KUBECONFIG is not set".to_string()),
    }
    (!missing.is_empty()).then(|| missing.join(" and "))
}

mod real_cluster {
    use std::time::{Duration, Instant};

    use anyhow::{Context, Result, bail};
    use kube::Client;
    use kube::api::{
        Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
        PostParams,
    };
    use serde_json::{Value, json};

    fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
    }

    /// A namespace of the test's own, named by the server.
    pub async fn namespace(client: &Client, prefix: &str) -> Result<String> {
        let api: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &resource("", "v1", "Namespace", "namespaces"),
        );
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"generateName": prefix,
                "labels": {"app.kubernetes.io/created-by": "reconciler-host-e2e-test"}}
        }))?;
        let created = api.create(&PostParams::default(), &object).await?;
        created
            .metadata
            .name
            .context("the server named the namespace")
    }

    pub async fn delete_namespace(client: &Client, name: &str) {
        let api: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &resource("", "v1", "Namespace", "namespaces"),
        );
        let _ = api.delete(name, &DeleteParams::default()).await;
    }

    /// Server-side applies the Roles and RoleBindings of a generated text.
    pub async fn apply_roles(client: &Client, yaml: &str) -> Result<usize> {
        let mut applied = 0;
        for document in yaml.split("\n---\n") {
            let object: Value = serde_yaml_ng::from_str(document)?;
            let (kind, plural) = match object["kind"].as_str() {
                Some("Role") => ("Role", "roles"),
                Some("RoleBinding") => ("RoleBinding", "rolebindings"),
                _ => continue,
            };
            let namespace = object["metadata"]["namespace"]
                .as_str()
                .context("a Role has a namespace")?;
            let api: Api<DynamicObject> = Api::namespaced_with(
                client.clone(),
                namespace,
                &resource("rbac.authorization.k8s.io", "v1", kind, plural),
            );
            apply(&api, &object).await?;
            applied += 1;
        }
        Ok(applied)
    }

    /// Server-side applies the ClusterRole of a generated text and binds it
    /// to `account`, as deploy/cluster-role-binding.yaml does.
    pub async fn apply_cluster_role(
        client: &Client,
        yaml: &str,
        account: (&str, &str),
    ) -> Result<String> {
        let role: Value = serde_yaml_ng::from_str(
            yaml.split("\n---\n")
                .next()
                .context("the text starts with the ClusterRole")?,
        )?;
        let name = role["metadata"]["name"]
            .as_str()
            .context("a name")?
            .to_string();
        let roles: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &resource(
                "rbac.authorization.k8s.io",
                "v1",
                "ClusterRole",
                "clusterroles",
            ),
        );
        apply(&roles, &role).await?;
        let bindings: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &resource(
                "rbac.authorization.k8s.io",
                "v1",
                "ClusterRoleBinding",
                "clusterrolebindings",
            ),
        );
        let binding = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": account.1, "namespace": account.0}],
        });
        apply(&bindings, &binding).await?;
        Ok(name)
    }

    /// Removes what [`apply_cluster_role`] made.
    pub async fn delete_cluster_role(client: &Client, name: &str) {
        for (kind, plural) in [
            ("ClusterRole", "clusterroles"),
            ("ClusterRoleBinding", "clusterrolebindings"),
        ] {
            let api: Api<DynamicObject> = Api::all_with(
                client.clone(),
                &resource("rbac.authorization.k8s.io", "v1", kind, plural),
            );
            let _ = api.delete(name, &DeleteParams::default()).await;
        }
    }

    /// Server-side applies `object`, of the kind `(group, version, kind,
    /// plural)`, in its namespace.
    pub async fn apply_namespaced(
        client: &Client,
        object: &Value,
        (group, version, kind, plural): (&str, &str, &str, &str),
    ) -> Result<()> {
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .context("a namespace")?;
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            namespace,
            &resource(group, version, kind, plural),
        );
        apply(&api, object).await
    }

    async fn apply(api: &Api<DynamicObject>, object: &Value) -> Result<()> {
        let kind = object["kind"].as_str().unwrap_or("object");
        let name = object["metadata"]["name"].as_str().context("a name")?;
        api.patch(
            name,
            &PatchParams::apply("reconciler-host-e2e-test"),
            &Patch::Apply(object),
        )
        .await
        .with_context(|| format!("applying {kind} {name}"))?;
        Ok(())
    }

    /// A client that acts as `account` (namespace/name), through the
    /// kubeconfig user's right to impersonate.
    pub async fn impersonating(account: (&str, &str)) -> Result<Client> {
        let mut config = kube::Config::infer().await?;
        config.auth_info.impersonate =
            Some(format!("system:serviceaccount:{}:{}", account.0, account.1));
        Ok(Client::try_from(config)?)
    }

    /// Server-side applies an empty ValidatingWebhookConfiguration `name`
    /// with `client`.
    pub async fn apply_webhook_configuration(client: &Client, name: &str) -> Result<()> {
        let api: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &resource(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingWebhookConfiguration",
                "validatingwebhookconfigurations",
            ),
        );
        let object = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name}, "webhooks": [],
        });
        api.patch(
            name,
            &PatchParams::apply("reconciler-host-e2e-test"),
            &Patch::Apply(&object),
        )
        .await?;
        Ok(())
    }

    pub async fn delete_webhook_configuration(client: &Client, name: &str) {
        let api: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &resource(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingWebhookConfiguration",
                "validatingwebhookconfigurations",
            ),
        );
        let _ = api.delete(name, &DeleteParams::default()).await;
    }

    /// Whether the API server's authorizer lets `account` (namespace/name)
    /// do `verb` on `resource` of `group` in `namespace`; `resource=name`
    /// asks about the object `name` only.
    pub async fn can(
        client: &Client,
        account: (&str, &str),
        verb: &str,
        group: &str,
        resource_name: &str,
        namespace: &str,
    ) -> Result<bool> {
        let api: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &resource(
                "authorization.k8s.io",
                "v1",
                "SubjectAccessReview",
                "subjectaccessreviews",
            ),
        );
        let (account_namespace, account_name) = account;
        let (resource_name, object_name) =
            resource_name.split_once('=').unwrap_or((resource_name, ""));
        let review: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "metadata": {},
            "spec": {
                "user": format!("system:serviceaccount:{account_namespace}:{account_name}"),
                "groups": ["system:serviceaccounts",
                    format!("system:serviceaccounts:{account_namespace}"), "system:authenticated"],
                "resourceAttributes": {"namespace": namespace, "verb": verb,
                    "group": group, "resource": resource_name, "name": object_name}
            }
        }))?;
        let answered = api.create(&PostParams::default(), &review).await?;
        Ok(answered.data["status"]["allowed"] == json!(true))
    }

    /// Whether the API server's authorizer lets `account` (namespace/name)
    /// `get` the non-resource URL `path`, as the host asks before serving
    /// a report.
    pub async fn can_get(client: &Client, account: (&str, &str), path: &str) -> Result<bool> {
        let api: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &resource(
                "authorization.k8s.io",
                "v1",
                "SubjectAccessReview",
                "subjectaccessreviews",
            ),
        );
        let (account_namespace, account_name) = account;
        let review: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "metadata": {},
            "spec": {
                "user": format!("system:serviceaccount:{account_namespace}:{account_name}"),
                "groups": ["system:serviceaccounts",
                    format!("system:serviceaccounts:{account_namespace}"), "system:authenticated"],
                "nonResourceAttributes": {"path": path, "verb": "get"}
            }
        }))?;
        let answered = api.create(&PostParams::default(), &review).await?;
        Ok(answered.data["status"]["allowed"] == json!(true))
    }

    /// [`can_get`] asked until the answer is `expected`, as [`expect_can`].
    pub async fn expect_can_get(
        client: &Client,
        account: (&str, &str),
        path: &str,
        expected: bool,
    ) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let allowed = can_get(client, account, path).await?;
            if allowed == expected {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "service account {}/{} {} get {path}",
                    account.0,
                    account.1,
                    if allowed { "may" } else { "may not" }
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Asks until the answer is `expected` (RBAC reaches the authorizer
    /// through a watch, so a Role just applied can take a moment).
    pub async fn expect_can(
        client: &Client,
        account: (&str, &str),
        request: (&str, &str, &str, &str),
        expected: bool,
    ) -> Result<()> {
        let (verb, group, resource_name, namespace) = request;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let allowed = can(client, account, verb, group, resource_name, namespace).await?;
            if allowed == expected {
                return Ok(());
            }
            if Instant::now() > deadline {
                let resource_name = if group.is_empty() {
                    resource_name.to_string()
                } else {
                    format!("{resource_name}.{group}")
                };
                bail!(
                    "service account {}/{} {} {verb} {resource_name} in namespace {namespace:?}",
                    account.0,
                    account.1,
                    if allowed { "may" } else { "may not" }
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_roles_grant_the_service_account_its_namespaces_only_on_a_real_cluster() {
    use std::collections::BTreeSet;

    use reconciler_host::process::rbac::{RbacScope, rbac};

    let Some(client) = real_cluster_client(
        "generated_roles_grant_the_service_account_its_namespaces_only_on_a_real_cluster",
    )
    .await
    else {
        return;
    };
    let served = real_cluster::namespace(&client, "rbac-e2e-served-")
        .await
        .expect("a namespace");
    let other = real_cluster::namespace(&client, "rbac-e2e-other-")
        .await
        .expect("a second namespace");
    let result = async {
        let metadata: Vec<_> = EXAMPLES
            .iter()
            .map(|name| load(&example_plugin(name)).metadata().clone())
            .collect();
        let plurals = Plurals::from_crds(&root().join("crds"))?;
        let scope = RbacScope {
            namespaces: BTreeSet::from([served.clone()]),
            service_account_namespace: served.clone(),
            lease_namespace: served.clone(),
            admission_secret_namespace: None,
            // What Plugin resources and member clusters' Secrets add is
            // tested in host/src/process/rbac/tests.rs; here the namespaces' Roles alone.
            plugin_resources: false,
            cluster_secrets: false,
            ..RbacScope::cluster_wide("reconciler-host-e2e")
        };
        let yaml = rbac(&metadata, &plurals, &scope);
        let applied = real_cluster::apply_roles(&client, &yaml).await?;
        anyhow::ensure!(
            applied == 2,
            "one Role and one RoleBinding expected:\n{yaml}"
        );
        let account = (served.as_str(), "reconciler-host");
        for request in [
            ("list", "", "configmaps", served.as_str()),
            ("watch", "", "pods", served.as_str()),
            ("create", "apps", "deployments", served.as_str()),
            ("patch", "example.com", "podsets/status", served.as_str()),
            ("create", "events.k8s.io", "events", served.as_str()),
            (
                "update",
                "coordination.k8s.io",
                "leases=reconciler-host",
                served.as_str(),
            ),
        ] {
            real_cluster::expect_can(&client, account, request, true).await?;
        }
        for request in [
            ("list", "", "configmaps", other.as_str()),
            ("list", "", "configmaps", ""),
            ("delete", "", "pods", served.as_str()),
            ("list", "", "secrets", served.as_str()),
        ] {
            real_cluster::expect_can(&client, account, request, false).await?;
        }
        anyhow::Ok(())
    }
    .await;
    real_cluster::delete_namespace(&client, &served).await;
    real_cluster::delete_namespace(&client, &other).await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}
