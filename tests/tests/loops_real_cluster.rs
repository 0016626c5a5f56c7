//! Reconcile loops found by the host, on a real API server: two real fights.
//!
//! 1. The podset plugin against a second field manager that keeps scaling
//!    the PodSet's Deployment by hand: each reconcile sets `.spec.replicas`
//!    back, each change of the other writer queues the next. The host puts a
//!    Warning Event `ReconcileLoop` on the PodSet naming the field and the
//!    other manager (from `managedFields`), counts it in
//!    `reconciler_reconcile_loops_total`, and `explain` shows it with the
//!    trigger's field change and what the API server did with each write.
//! 2. A plugin that writes base64 wrapped in lines into a ConfigMap: the API
//!    server keeps it unwrapped, so the host finds it different and sends it
//!    at every reconcile for nothing. The Event says the API server
//!    normalizes the value.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use reconciler_sdk::KindRef;
use reconciler_tests::real_cluster::{Probe, RealCluster, Suite, TEST_MANAGER};
use reconciler_tests::{example_plugin, root, test_plugin};
use serde_json::json;

const HOST: &str = env!("CARGO_BIN_EXE_reconciler-host-under-test");

const SUITE: Suite = Suite {
    name: "loops_real_cluster",
    host_binary: HOST,
};

#[test]
fn two_real_fights_are_found_as_reconcile_loops() {
    SUITE.run("two_real_fights_are_found_as_reconcile_loops", async |cx| {
        fights(cx).await
    });
}

fn deployments() -> KindRef {
    KindRef::new("apps", "v1", "Deployment")
}

/// Waits for the Warning Event `ReconcileLoop` on `kind` `name` saying
/// `expected`, running `meanwhile` at each look.
async fn loop_event(
    cx: &RealCluster,
    kind: &str,
    name: &str,
    expected: &str,
    meanwhile: impl AsyncFnMut() -> Result<Option<String>>,
) -> Result<()> {
    let found = cx
        .wait_for_warning(kind, name, &[expected], Duration::from_secs(90), meanwhile)
        .await?;
    cx.step(format!("Event {}: {}", found.reason, found.message));
    ensure!(found.reason == "ReconcileLoop", "{found:?}");
    Ok(())
}

fn explain(object: &str, host: &str) -> Result<String> {
    let out = Command::new(HOST)
        .args(["explain", object, "--host", host])
        .output()?;
    ensure!(
        out.status.success(),
        "explain {object}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

async fn fights(cx: &mut RealCluster) -> Result<()> {
    cx.install_crds(&root().join("crds/podset.yaml")).await?;
    cx.install_crds(&root().join("tests/crds/hostile.yaml"))
        .await?;
    cx.start_host_with_args(
        &[example_plugin("podset"), test_plugin("hostile")],
        &["--metrics-listen", "127.0.0.1:0", "--metrics-insecure"],
    )?;
    let host = cx.wait_for_reports_url().await?;
    let ns = cx.namespace.clone();

    cx.step("fight 1: a second field manager keeps scaling the PodSet's Deployment to 3");
    cx.create(
        json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "fought"}, "spec": {"size": 1}}),
    )
    .await?;
    cx.wait_for(
        "the Deployment of PodSet fought",
        Duration::from_secs(60),
        async || {
            Ok(match cx.get(&deployments(), "fought").await? {
                Some(d) => Probe::Ready(d),
                None => Probe::Pending("not yet".into()),
            })
        },
    )
    .await?;
    let fighting = format!(
        "Deployment {ns}/fought .spec.replicas set to 1 each time, and changed back each time by {TEST_MANAGER} (Update)"
    );
    loop_event(cx, "PodSet", "fought", &fighting, async || {
        // The other writer: scales it by hand whenever the plugin has set
        // it back.
        let held = cx.must_get(&deployments(), "fought").await?;
        if held.pointer("/spec/replicas") != Some(&json!(3)) {
            cx.merge_patch(&deployments(), "fought", json!({"spec": {"replicas": 3}}))
                .await?;
        }
        Ok(None)
    })
    .await?;

    let metrics = reconciler_tests::report_text(host.trim_start_matches("http://"), "/metrics")?;
    let counted = metrics
        .lines()
        .find(|l| l.starts_with("reconciler_reconcile_loops_total{controller=\"podset\"}"))
        .context("no loop counted for podset")?;
    cx.step(format!("metric: {counted}"));
    ensure!(!counted.ends_with(" 0"), "{counted}");

    let text = explain(&format!("podset/{ns}/fought"), &host)?;
    cx.step(format!("explain podset/{ns}/fought:\n{text}"));
    ensure!(
        text.contains("  LOOP: ") && text.contains(" reconciles wrote in the last 60s, "),
        "explain shows the loop\n{text}"
    );
    ensure!(
        text.contains(&format!(
            "Deployment {ns}/fought changed .spec.replicas 1 -> 3 [managed by {TEST_MANAGER} (Update)]"
        )),
        "the trigger names the field, old and new, and its manager\n{text}"
    );
    ensure!(
        text.contains(&format!(
            "api:  apply Deployment {ns}/fought: changed .spec.replicas 3 -> 1"
        )),
        "what the API server did with the write\n{text}"
    );

    cx.step(
        "fight 2: a plugin writes base64 wrapped in lines, which the API server keeps unwrapped",
    );
    cx.create(
        json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
        "metadata": {"name": "wrapped"}, "spec": {"mode": "wrapped-base64"}}),
    )
    .await?;
    let normalized = format!(
        "ConfigMap {ns}/wrapped-wrapped .binaryData.blob sent as \"aGVsbG8g\\nd29ybGQ=\" each time, and the API server keeps it as \"aGVsbG8gd29ybGQ=\": it normalizes the value"
    );
    loop_event(cx, "Hostile", "wrapped", &normalized, async || Ok(None)).await?;
    let text = explain(&format!("hostile/{ns}/wrapped"), &host)?;
    ensure!(
        text.contains(&format!("api:  apply ConfigMap {ns}/wrapped-wrapped: no change; the API server holds, as sent -> as stored,")),
        "each write a no-op at the API server\n{text}"
    );
    Ok(())
}
