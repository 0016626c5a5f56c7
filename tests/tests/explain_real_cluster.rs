//! `reconciler-host explain` against a host running on a real API server:
//! a PodSet converges, its size is changed, and `explain` tells, newest
//! first, that the change triggered a reconcile which updated its
//! Deployment, and, further down, the reconcile that created it. Also
//! that an object never reconciled is said so, with a non-zero exit.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use reconciler_tests::example_plugin;
use reconciler_tests::real_cluster::podset_convergence::{podsets, problem};
use reconciler_tests::real_cluster::{Probe, RealCluster, Suite};
use serde_json::json;

const HOST: &str = env!("CARGO_BIN_EXE_reconciler-host-under-test");

const SUITE: Suite = Suite {
    name: "explain_real_cluster",
    host_binary: HOST,
};

#[test]
fn explain_tells_why_an_object_was_reconciled_and_what_changed() {
    SUITE.run(
        "explain_tells_why_an_object_was_reconciled_and_what_changed",
        async |cx| explained(cx).await,
    );
}

/// Runs `reconciler-host explain ARGS`: its exit code, stdout and stderr.
fn explain(args: &[&str]) -> Result<(i32, String, String)> {
    let out = Command::new(HOST).arg("explain").args(args).output()?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

async fn converged(cx: &RealCluster) -> Result<()> {
    cx.wait_for(
        "PodSet web to converge",
        Duration::from_secs(120),
        async || {
            Ok(match problem(cx, 1).await? {
                Some(problem) => Probe::Pending(problem),
                None => Probe::Ready(()),
            })
        },
    )
    .await
}

async fn explained(cx: &mut RealCluster) -> Result<()> {
    cx.install_crds(&reconciler_tests::root().join("crds/podset.yaml"))
        .await?;
    cx.start_host_with_args(
        &[example_plugin("podset")],
        &["--metrics-listen", "127.0.0.1:0", "--metrics-insecure"],
    )?;
    let marker = "serving /metrics and /plugins on http://";
    let line = cx.wait_for_log(&[marker], Duration::from_secs(60)).await?;
    let address = line
        .split(marker)
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .context("no address after the marker")?;
    let host = format!("http://{address}");
    cx.create(
        json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "web"}, "spec": {"size": 1}}),
    )
    .await?;
    converged(cx).await?;
    cx.merge_patch(&podsets(), "web", json!({"spec": {"size": 2}}))
        .await?;
    converged(cx).await?;

    let object = format!("podset/{}/web", cx.namespace);
    let changed = format!("why:  PodSet {}/web changed", cx.namespace);
    let text = cx
        .wait_for(
            "explain to show the reconcile of the resize",
            Duration::from_secs(60),
            async || {
                let (code, out, err) = explain(&[&object, "--host", &host])?;
                Ok(if code == 0 && out.contains(&changed) {
                    Probe::Ready(out)
                } else {
                    Probe::Pending(format!("exit {code}: {out}{err}"))
                })
            },
        )
        .await?;
    cx.step(format!("explain {object}:\n{text}"));
    let resize = text.find(&changed).context("the resize")?;
    let created = text
        .find(&format!("created Deployment {}/web", cx.namespace))
        .context("the reconcile that created the Deployment")?;
    ensure!(
        resize < created,
        "newest first: the resize before the creation\n{text}"
    );
    let after_resize = &text[resize..];
    ensure!(
        after_resize
            .lines()
            .nth(1)
            .is_some_and(|l| l.contains(&format!("updated Deployment {}/web", cx.namespace))),
        "the resize's reconcile updated the Deployment\n{text}"
    );

    let (code, out, _) = explain(&[&object, "--host", &host, "-o", "json"])?;
    let entries: serde_json::Value = serde_json::from_str(&out)?;
    ensure!(code == 0 && entries[0]["plugin"] == "podset", "{out}");

    let (code, _, err) = explain(&[
        &format!("podset/{}/never-made", cx.namespace),
        "--host",
        &host,
    ])?;
    cx.step(format!("an object never reconciled: exit {code}: {err}"));
    ensure!(
        code == 1 && err.contains("no reconcile of"),
        "exit {code}: {err}"
    );
    Ok(())
}
