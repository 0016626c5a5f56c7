//! Trigger filters against a real API server: the Deployment controller of
//! kube-controller-manager reports on podset's Deployment, the kubelet's
//! part is played on a Pod's status, and podset, which wakes on
//! generations and Pod labels only (contract 0.2.3), is not called for any
//! of it; a spec change of the Deployment still calls it, and the size
//! changed by hand is put back. The calls are counted from the host's
//! record of every reconcile (debug level).

use std::time::Duration;

use anyhow::{Result, ensure};
use reconciler_sdk::KindRef;
use reconciler_tests::real_cluster::podset_convergence::{deployments, podsets, problem};
use reconciler_tests::real_cluster::{Probe, RealCluster, Suite};
use reconciler_tests::{example_plugin, root};
use serde_json::json;

const SUITE: Suite = Suite {
    name: "trigger_filters_real_cluster",
    host_binary: env!("CARGO_BIN_EXE_reconciler-host-under-test"),
};

const HOST_TIMEOUT: Duration = Duration::from_secs(90);

/// Long enough for a watch event to reach the host and a reconcile to run.
const QUIET_FOR: Duration = Duration::from_secs(4);

/// podset's reconciles of the PodSet `web` so far.
fn calls(cx: &RealCluster) -> Result<usize> {
    let object = format!("podset PodSet {}/web: ", cx.namespace);
    Ok(cx.host()?.log_lines_with(&[&object]).len())
}

#[test]
fn status_updates_call_no_podset_reconcile_and_a_spec_change_does() {
    SUITE.run(
        "status_updates_call_no_podset_reconcile_and_a_spec_change_does",
        async |cx| {
            cx.install_crds(&root().join("crds").join("podset.yaml"))
                .await?;
            cx.start_host_with_env(
                &[example_plugin("podset")],
                &[("RUST_LOG", "info,reconciler_host::engine::record=debug")],
            )?;
            cx.wait_for_log(&["loaded plugin podset"], HOST_TIMEOUT)
                .await?;
            cx.create(
                json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
                "metadata": {"name": "web"}, "spec": {"size": 2}}),
            )
            .await?;
            // Converged: the Deployment, the two Pods the ReplicaSet
            // controller made, and kube-controller-manager's report on the
            // Deployment (observedGeneration, replicas).
            cx.wait_for(
                "web to converge and its Deployment to be reported on",
                HOST_TIMEOUT,
                async || {
                    if let Some(problem) = problem(cx, 1).await? {
                        return Ok(Probe::Pending(problem));
                    }
                    let d = cx.must_get(&deployments(), "web").await?;
                    let reported = d["status"]["observedGeneration"] == d["metadata"]["generation"]
                        && d["status"]["replicas"] == 2;
                    Ok(if reported {
                        Probe::Ready(())
                    } else {
                        Probe::Pending(format!("Deployment status {}", d["status"]))
                    })
                },
            )
            .await?;
            tokio::time::sleep(QUIET_FOR).await;
            let settled = calls(cx)?;
            ensure!(settled >= 1, "no reconcile of web was logged");
            cx.step(format!("web converged after {settled} reconciles"));

            // A status report on the Deployment, as the Deployment
            // controller writes one (which it then writes back to the
            // truth: a second status update), and a Pod's phase.
            let deployment = cx.must_get(&deployments(), "web").await?;
            let version = deployment["metadata"]["resourceVersion"].clone();
            cx.merge_patch_status(
                &deployments(),
                "web",
                json!({"status": {"readyReplicas": 2, "availableReplicas": 2}}),
            )
            .await?;
            let pod = cx
                .list(&KindRef::new("", "v1", "Pod"), "podset=web")
                .await?;
            let pod_name = pod[0]["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            cx.merge_patch_status(
                &KindRef::new("", "v1", "Pod"),
                &pod_name,
                json!({"status": {"phase": "Running"}}),
            )
            .await?;
            tokio::time::sleep(QUIET_FOR).await;
            let after = cx.must_get(&deployments(), "web").await?;
            ensure!(
                after["metadata"]["resourceVersion"] != version,
                "the Deployment's status did not change (resourceVersion {version}): the test proves nothing"
            );
            ensure!(
                calls(cx)? == settled,
                "status updates called podset: {} reconciles of web, {settled} before them",
                calls(cx)?
            );
            let primary = cx.must_get(&podsets(), "web").await?;
            ensure!(
                primary["metadata"]["generation"] == 1,
                "the PodSet's spec never changed: {}",
                primary["metadata"]
            );

            // Someone scales the Deployment by hand: its generation moves,
            // podset is called and puts the size back.
            cx.merge_patch(&deployments(), "web", json!({"spec": {"replicas": 5}}))
                .await?;
            cx.wait_for("podset to put web's size back", HOST_TIMEOUT, async || {
                let d = cx.must_get(&deployments(), "web").await?;
                Ok(if d["spec"]["replicas"] == 2 && calls(cx)? > settled {
                    Probe::Ready(())
                } else {
                    Probe::Pending(format!(
                        "replicas {}, {} reconciles",
                        d["spec"]["replicas"],
                        calls(cx)?
                    ))
                })
            })
            .await?;
            Ok(())
        },
    );
}
