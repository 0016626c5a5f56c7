//! Two capability rules against a real API server that
//! `real_cluster_capabilities.rs` does not cover with a host: a response is
//! checked whole before anything reaches the API server, and a deleted
//! namespace is not held by kubernetescluster's cleanup Job, which it can
//! never create.
//!
//! Skipped (passing, with a SKIPPED line) unless `RECONCILER_E2E=1` and
//! `KUBECONFIG` are set; see `real_cluster_capabilities.rs` for how to run.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use reconciler_sdk::KindRef;
use reconciler_tests::real_cluster::{Probe, Suite};
use reconciler_tests::{example_plugin, root, test_plugin};
use serde_json::json;

const SUITE: Suite = Suite {
    name: "real_cluster_all_or_nothing",
    host_binary: env!("CARGO_BIN_EXE_reconciler-host-under-test"),
};

const HOST_TIMEOUT: Duration = Duration::from_secs(90);
const NAMESPACE_GONE_TIMEOUT: Duration = Duration::from_secs(90);
const CLUSTER_FINALIZER: &str = "example.com/cluster-cleanup";

/// Point 6: the hostile plugin returns a legal ConfigMap, then one with a
/// numeric label value. The host refuses the response before applying the
/// first, so the API server never sees either.
#[test]
fn a_legal_object_before_an_illegal_one_is_not_applied_on_a_real_cluster() {
    SUITE.run(
        "a_legal_object_before_an_illegal_one_is_not_applied_on_a_real_cluster",
        async |cx| {
            cx.install_crds(&root().join("tests/crds/hostile.yaml"))
                .await?;
            cx.start_host(&[test_plugin("hostile")])?;
            cx.create(json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
                "metadata": {"name": "mixed"}, "spec": {"mode": "numeric-label-second"}}))
                .await?;
            let config_maps = KindRef::new("", "v1", "ConfigMap");
            let event = cx
                .wait_for_warning(
                    "Hostile",
                    "mixed",
                    &["apply[1] (v1 ConfigMap mixed-2)", "labels"],
                    HOST_TIMEOUT,
                    async || {
                        for name in ["mixed", "mixed-2"] {
                            if cx.get(&config_maps, name).await?.is_some() {
                                return Ok(Some(format!(
                                    "ConfigMap {name} exists: part of a refused response was applied"
                                )));
                            }
                        }
                        Ok(None)
                    },
                )
                .await?;
            ensure!(
                event.reason == "InvalidResponse",
                "the refusal's reason should be InvalidResponse: {event}"
            );
            for name in ["mixed", "mixed-2"] {
                ensure!(
                    cx.get(&config_maps, name).await?.is_none(),
                    "ConfigMap {name} exists after the refusal"
                );
            }
            Ok(())
        },
    );
}

/// Point 8: a KubernetesCluster holds itself with a cleanup finalizer, and
/// its cleanup is a Job. Deleting its namespace deletes it; the Job it asks
/// for is refused (the namespace is terminating), so the cleanup can never
/// run: the host releases the finalizer and the namespace goes.
#[test]
fn a_kubernetes_cluster_does_not_hold_its_deleted_namespace_on_a_real_cluster() {
    SUITE.run(
        "a_kubernetes_cluster_does_not_hold_its_deleted_namespace_on_a_real_cluster",
        async |cx| {
            cx.install_crds(&root().join("crds/kubernetescluster.yaml"))
                .await?;
            cx.start_host(&[example_plugin("kubernetescluster")])?;
            cx.create(
                json!({"apiVersion": "example.com/v1alpha1", "kind": "KubernetesCluster",
                "metadata": {"name": "prod",
                    "annotations": {"app.kubernetes.io/operation": "creating"}},
                "spec": {"masters": 3, "workers": 2, "version": "1.33", "timeoutSeconds": 600}}),
            )
            .await?;
            let clusters = KindRef::new("example.com", "v1alpha1", "KubernetesCluster");
            cx.wait_for(
                "KubernetesCluster prod to carry its cleanup finalizer and a creating Job",
                HOST_TIMEOUT,
                async || {
                    let now = cx.must_get(&clusters, "prod").await?;
                    let held = now["metadata"]["finalizers"]
                        .as_array()
                        .is_some_and(|f| f.iter().any(|f| f == CLUSTER_FINALIZER));
                    let phase = now["status"]["phase"].as_str().unwrap_or("").to_string();
                    Ok(if held && phase == "Creating" {
                        Probe::Ready(())
                    } else {
                        Probe::Pending(format!("finalizer held: {held}, phase {phase:?}"))
                    })
                },
            )
            .await?;

            cx.api(&KindRef::new("", "v1", "Namespace"))
                .await?
                .delete(&cx.namespace, &Default::default())
                .await
                .context("deleting the test's namespace")?;
            cx.step("deleted the namespace; waiting until it is gone");
            if let Err(e) = cx.wait_for_namespace_gone(NAMESPACE_GONE_TIMEOUT).await {
                let held = cx
                    .get(&clusters, "prod")
                    .await?
                    .map(|c| c["metadata"]["finalizers"].to_string());
                bail!("{e:#}; KubernetesCluster prod still there with finalizers {held:?}");
            }
            let log = cx.host()?.log_text();
            ensure!(
                log.lines().any(|l| l.contains("refuses new objects")
                    && l.contains("Job")
                    && l.contains(CLUSTER_FINALIZER)),
                "the host's log should say the cleanup Job was refused and the finalizer released"
            );
            Ok(())
        },
    );
}
