//! Member clusters for tests of a hub: a client from a member's kubeconfig,
//! the podset CRD and the test's namespace on it, the kubeconfig Secret that
//! names it on the hub, and PodSets and Deployments read and written there.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

use super::RealCluster;
use crate::root;

/// The field manager the tests write members' objects with.
pub const MANAGER: &str = "multi-cluster-test";

pub fn podset_resource() -> ApiResource {
    ApiResource {
        group: "example.com".into(),
        version: "v1alpha1".into(),
        api_version: "example.com/v1alpha1".into(),
        kind: "PodSet".into(),
        plural: "podsets".into(),
    }
}

pub fn deployment_resource() -> ApiResource {
    ApiResource {
        group: "apps".into(),
        version: "v1".into(),
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        plural: "deployments".into(),
    }
}

pub async fn client_of(kubeconfig: &str) -> Result<kube::Client> {
    let parsed = kube::config::Kubeconfig::from_yaml(kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(parsed, &kube::config::KubeConfigOptions::default())
            .await?;
    Ok(kube::Client::try_from(config)?)
}

/// The podset CRD, applied and established on a member that is not the
/// test's own cluster.
pub async fn install_podset_crd(client: &kube::Client) -> Result<()> {
    let text = std::fs::read_to_string(root().join("crds/podset.yaml"))?;
    let crd: Value = serde_yaml_ng::from_str(&text)?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.patch(
        "podsets.example.com",
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await
    .context("applying the podset CRD on B")?;
    for _ in 0..120 {
        let found = api.get("podsets.example.com").await?;
        let established = found
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!("the podset CRD was not established on B within 30 s")
}

pub async fn apply(
    client: &kube::Client,
    resource: &ApiResource,
    ns: &str,
    object: Value,
) -> Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, resource);
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await
    .with_context(|| format!("applying {} {ns}/{name}", resource.kind))?;
    Ok(())
}

pub async fn create_podset(client: &kube::Client, ns: &str, name: &str, size: i64) -> Result<()> {
    let object = json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": name, "namespace": ns,
            "labels": {"reconciler-tests/namespace": ns}},
        "spec": {"size": size}});
    apply(client, &podset_resource(), ns, object).await
}

pub async fn replicas_of(client: &kube::Client, ns: &str, name: &str) -> Result<Option<i64>> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &deployment_resource());
    Ok(api
        .get_opt(name)
        .await?
        .and_then(|d| d.data["spec"]["replicas"].as_i64()))
}

/// Applies the kubeconfig Secret naming member `name` in the test's
/// namespace of `cluster` (the hub), with `labels` besides the member label.
pub async fn member_secret_labelled(
    cluster: &RealCluster,
    name: &str,
    kubeconfig: &str,
    labels: &[(&str, &str)],
) -> Result<()> {
    use base64::Engine as _;
    let ns = &cluster.namespace;
    let mut labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    labels.insert("reconciler-host.io/cluster".into(), json!(name));
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": format!("member-{name}"), "namespace": ns,
            "labels": labels},
        "data": {"kubeconfig": base64::engine::general_purpose::STANDARD.encode(kubeconfig)}});
    let api: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(cluster.client.clone(), ns);
    api.patch(
        &format!("member-{name}"),
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&secret),
    )
    .await
    .with_context(|| format!("applying the kubeconfig Secret of member {name}"))?;
    Ok(())
}

/// The namespace and the podset CRD on a member.
pub async fn prepare_member(client: &kube::Client, ns: &str) -> Result<()> {
    install_podset_crd(client).await?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            ns,
            &PatchParams::apply(MANAGER),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns}})),
        )
        .await?;
    Ok(())
}

/// Applies the kubeconfig Secret naming member `name` in the test's
/// namespace of `cluster` (the hub).
pub async fn member_secret(cluster: &RealCluster, name: &str, kubeconfig: &str) -> Result<()> {
    member_secret_labelled(cluster, name, kubeconfig, &[]).await
}
