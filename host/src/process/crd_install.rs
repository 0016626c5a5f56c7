//! `run --install-crds DIR`: the CustomResourceDefinitions a host's plugins
//! need, applied at start and waited for.
//!
//! A plugin whose kind is not served yet waits and is retried, so this is a
//! convenience, not a requirement: it spares the first retry interval and
//! makes a broken CRD fail the start loudly instead of leaving a plugin
//! waiting for ever. The CRDs are server-side applied by one field manager,
//! so a host started again with changed files updates them in place.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use reconciler_contract::KindRef;
use serde_json::Value;

use crate::cluster::{ClusterBackend, ObjectKey};
use crate::process::manifests::read_all;

/// The field manager of installed CRDs.
pub const FIELD_MANAGER: &str = "reconciler-host";

fn crd_kind() -> KindRef {
    KindRef::new("apiextensions.k8s.io", "v1", "CustomResourceDefinition")
}

/// Applies every CustomResourceDefinition in the YAML files of `dir` (or
/// the one file `dir` names) and waits, up to `within`, until each is
/// Established. Other objects in the files are refused: the directory is
/// meant to hold CRDs only, and applying anything else at start would
/// surprise. Returns the names of the CRDs installed.
pub async fn install_crds<B: ClusterBackend>(
    backend: &B,
    dir: &Path,
    within: Duration,
) -> anyhow::Result<Vec<String>> {
    let objects = read_all(dir).with_context(|| format!("reading CRDs from {}", dir.display()))?;
    let mut names = Vec::new();
    for (file, object) in &objects {
        let key = ObjectKey::of(object).with_context(|| {
            format!(
                "{}: an object without apiVersion, kind or name",
                file.display()
            )
        })?;
        if key.kind != crd_kind() {
            bail!(
                "{}: {key} is not a CustomResourceDefinition (apiextensions.k8s.io/v1); --install-crds applies CRDs only",
                file.display()
            );
        }
        names.push(key.name);
    }
    if names.is_empty() {
        bail!("no CustomResourceDefinition found in {}", dir.display());
    }
    for (file, object) in objects {
        backend
            .apply(object, FIELD_MANAGER, true)
            .await
            .with_context(|| format!("applying the CRD in {}", file.display()))?;
    }
    let deadline = tokio::time::Instant::now() + within;
    for name in &names {
        wait_established(backend, name, deadline).await?;
        tracing::info!("CustomResourceDefinition {name} is established");
    }
    Ok(names)
}

/// What a CRD's conditions say about it.
#[derive(Debug, PartialEq, Eq)]
enum Readiness {
    Established,
    /// The API server refused its names; it will never be established.
    NamesRejected(String),
    Pending,
}

fn readiness(crd: &Value) -> Readiness {
    let conditions = crd
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let condition = |kind: &str| {
        conditions
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
    };
    let status = |c: &Value| c.get("status").and_then(Value::as_str).map(str::to_string);
    if condition("Established").and_then(status).as_deref() == Some("True") {
        return Readiness::Established;
    }
    if let Some(names) = condition("NamesAccepted")
        && status(names).as_deref() == Some("False")
    {
        let message = names
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("no message");
        return Readiness::NamesRejected(message.to_string());
    }
    Readiness::Pending
}

async fn wait_established<B: ClusterBackend>(
    backend: &B,
    name: &str,
    deadline: tokio::time::Instant,
) -> anyhow::Result<()> {
    let key = ObjectKey::new(crd_kind(), None, name);
    loop {
        let current = backend
            .get(&key)
            .await
            .with_context(|| format!("reading CustomResourceDefinition {name}"))?;
        match current.as_ref().map(readiness) {
            Some(Readiness::Established) => return Ok(()),
            Some(Readiness::NamesRejected(message)) => {
                bail!("CustomResourceDefinition {name}: its names were not accepted: {message}")
            }
            Some(Readiness::Pending) | None => {}
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "CustomResourceDefinition {name} is not established after waiting; its status: {}",
                current
                    .and_then(|c| c.get("status").cloned())
                    .unwrap_or(Value::Null)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::cluster::RealClock;
    use crate::cluster::embedded::EmbeddedCluster;

    const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions: [{name: v1, served: true, storage: true}]
";

    fn crd_key() -> ObjectKey {
        ObjectKey::new(crd_kind(), None, "widgets.example.com")
    }

    /// Plays the API server's part: sets a condition once the CRD exists.
    fn answer_with(cluster: Arc<EmbeddedCluster>, condition: Value) {
        tokio::spawn(async move {
            loop {
                if cluster.get(&crd_key()).await.ok().flatten().is_some() {
                    let status = json!({"conditions": [condition]});
                    cluster
                        .apply_status(&crd_key(), status, "apiextensions-controller", None)
                        .await
                        .unwrap();
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
    }

    #[tokio::test]
    async fn crds_are_applied_and_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("widget.yaml"), CRD).unwrap();
        let cluster = Arc::new(EmbeddedCluster::new(Arc::new(RealClock)));
        answer_with(
            cluster.clone(),
            json!({"type": "Established", "status": "True"}),
        );
        let names = install_crds(&*cluster, dir.path(), Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(names, ["widgets.example.com"]);
        let stored = cluster.get(&crd_key()).await.unwrap().unwrap();
        assert_eq!(stored["spec"]["names"]["kind"], "Widget");
    }

    #[tokio::test]
    async fn rejected_names_fail_the_start_with_the_servers_reason() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("widget.yaml"), CRD).unwrap();
        let cluster = Arc::new(EmbeddedCluster::new(Arc::new(RealClock)));
        answer_with(
            cluster.clone(),
            json!({"type": "NamesAccepted", "status": "False",
                   "message": "\"widgets\" is already in use"}),
        );
        let err = install_crds(&*cluster, dir.path(), Duration::from_secs(10))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("already in use"), "{err:#}");
    }

    #[tokio::test]
    async fn a_crd_never_established_times_out_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("widget.yaml"), CRD).unwrap();
        let cluster = EmbeddedCluster::new(Arc::new(RealClock));
        let err = install_crds(&cluster, dir.path(), Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("widgets.example.com is not established"),
            "{err:#}"
        );
    }

    #[tokio::test]
    async fn other_objects_are_refused_before_anything_is_applied() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), CRD).unwrap();
        std::fs::write(
            dir.path().join("b.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: default}\n",
        )
        .unwrap();
        let cluster = EmbeddedCluster::new(Arc::new(RealClock));
        let err = install_crds(&cluster, dir.path(), Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("ConfigMap default/x is not a CustomResourceDefinition"),
            "{err:#}"
        );
        assert!(
            cluster.get(&crd_key()).await.unwrap().is_none(),
            "nothing half-applied"
        );
    }
}
