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
    let host = cx.wait_for_reports_url().await?;
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
    let ns = &cx.namespace;
    let block: Vec<&str> = text[resize..]
        .lines()
        .take_while(|l| !l.is_empty())
        .collect();
    let has = |needle: &str| block.iter().any(|l| l.contains(needle));
    ensure!(
        has(&format!("why:  PodSet {ns}/web changed .spec.size 1 -> 2")),
        "the trigger names the field that changed, old and new\n{text}"
    );
    ensure!(
        has(&format!("did:  updated Deployment {ns}/web")),
        "the resize's reconcile updated the Deployment\n{text}"
    );
    ensure!(
        has(&format!(
            "api:  apply Deployment {ns}/web: changed .spec.replicas 1 -> 2"
        )),
        "what the API server did with the write\n{text}"
    );
    ensure!(
        has(&format!("read: list Pod in {ns}")),
        "the reads the plugin made\n{text}"
    );

    // The last reconcile as a golden case, replayed against the plugin.
    let cases = tempfile::tempdir()?;
    let dir = cases.path().to_string_lossy().into_owned();
    let (code, out, err) = explain(&[&object, "--host", &host, "--as-case", &dir])?;
    cx.step(format!("explain --as-case: exit {code}: {out}{err}"));
    ensure!(
        code == 0 && out.contains("replay it:"),
        "exit {code}: {out}{err}"
    );
    let written =
        std::fs::read_to_string(cases.path().join(format!("podset/000001-{ns}-web.yaml")))?;
    ensure!(
        written.contains("primary:") && written.contains("expect:"),
        "{written}"
    );
    let replay = Command::new(HOST)
        .args([
            "test",
            &example_plugin("podset").to_string_lossy(),
            &format!("{dir}/podset"),
        ])
        .output()?;
    let replayed = String::from_utf8_lossy(&replay.stdout);
    cx.step(format!("replayed: {replayed}"));
    ensure!(
        replay.status.success(),
        "the case passes against the plugin that decided it: {replayed}{}",
        String::from_utf8_lossy(&replay.stderr)
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
