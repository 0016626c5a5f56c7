//! The CustomResourceDefinitions a test needs, installed and never removed.
//!
//! Tests run in parallel, in this process and in others (the host crate's
//! real-cluster test applies `crds/` too): a CRD one test deleted would
//! vanish under another, taking that test's objects with it. So tests
//! install what they need by server-side apply, which is idempotent and
//! safe to race, and leave it for the next run; only namespaces are
//! per-test.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde::Deserialize as _;
use serde_json::Value;

use super::poll::Probe;
use super::{RealCluster, TEST_MANAGER};

/// A CRD just created takes a moment to be Established.
const ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(60);

/// What the tests need to know of an installed CRD.
#[derive(Clone, Debug)]
pub struct InstalledCrd {
    pub name: String,
    pub resource: ApiResource,
    pub namespaced: bool,
}

/// The CRD documents of a YAML file.
fn crds_in(path: &Path) -> Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut crds = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let value =
            Value::deserialize(document).with_context(|| format!("parsing {}", path.display()))?;
        if value["kind"] == "CustomResourceDefinition" {
            crds.push(value);
        }
    }
    anyhow::ensure!(
        !crds.is_empty(),
        "{} holds no CustomResourceDefinition",
        path.display()
    );
    Ok(crds)
}

fn crd_api(client: &Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    );
    Api::all_with(client.clone(), &resource)
}

/// How a CRD's objects are reached: its storage version (else the first).
fn describe(crd: &Value, path: &Path) -> Result<InstalledCrd> {
    let field = |pointer: &str| {
        crd.pointer(pointer)
            .and_then(Value::as_str)
            .with_context(|| format!("{}: a CRD without {pointer}", path.display()))
    };
    let name = field("/metadata/name")?;
    let group = field("/spec/group")?;
    let kind = field("/spec/names/kind")?;
    let plural = field("/spec/names/plural")?;
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .with_context(|| format!("{}: CRD {name} lists no versions", path.display()))?;
    let version = versions
        .iter()
        .find(|v| v["storage"] == true)
        .or_else(|| versions.first())
        .and_then(|v| v["name"].as_str())
        .with_context(|| format!("{}: CRD {name} has no named version", path.display()))?;
    Ok(InstalledCrd {
        name: name.to_string(),
        resource: ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, kind),
            plural,
        ),
        namespaced: field("/spec/scope")? == "Namespaced",
    })
}

impl RealCluster {
    /// Server-side applies every CRD of the YAML file `path` and waits until
    /// each is Established.
    pub async fn install_crds(&mut self, path: &Path) -> Result<Vec<InstalledCrd>> {
        let api = crd_api(&self.client);
        let mut installed = Vec::new();
        for crd in crds_in(path)? {
            let described = describe(&crd, path)?;
            // Forced: the host's `--install-crds` may have applied the same
            // fields as another manager; the values are the same.
            api.patch(
                &described.name,
                &PatchParams::apply(TEST_MANAGER).force(),
                &Patch::Apply(&crd),
            )
            .await
            .with_context(|| {
                format!(
                    "applying CustomResourceDefinition {} of {} (is the cluster of KUBECONFIG reachable?)",
                    described.name,
                    path.display()
                )
            })?;
            installed.push(described);
        }
        for crd in &installed {
            self.wait_for(
                &format!("CustomResourceDefinition {} to be Established", crd.name),
                ESTABLISHED_TIMEOUT,
                async || {
                    let Some(found) = api.get_opt(&crd.name).await? else {
                        return Ok(Probe::Pending("not found".to_string()));
                    };
                    let conditions: Vec<String> = found.data["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|c| {
                            format!(
                                "{}={}",
                                c["type"].as_str().unwrap_or("?"),
                                c["status"].as_str().unwrap_or("?")
                            )
                        })
                        .collect();
                    if conditions.iter().any(|c| c == "Established=True") {
                        Ok(Probe::Ready(()))
                    } else {
                        Ok(Probe::Pending(format!("conditions {conditions:?}")))
                    }
                },
            )
            .await?;
        }
        self.crds.extend(installed.iter().cloned());
        Ok(installed)
    }
}
