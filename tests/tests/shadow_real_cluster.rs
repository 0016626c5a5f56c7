//! A candidate in shadow against a real API server and a real registry: a
//! Plugin serving the JS podset with `spec.rollout` naming a candidate
//! that asks for twice each size. The candidate decides on every PodSet
//! and the Plugin's status counts each as differed, `/plugins/NAME/shadow`
//! shows each PodSet's `spec.replicas: n -> 2n`, an Event names a
//! differing PodSet, and the API server's audit log shows that no write to
//! a Deployment ever carried the candidate's decision: every Deployment
//! keeps its size. Taking the rollout out of the spec stops the candidate
//! and clears `status.rollout`.
//!
//! It needs an audit log, so it starts a control plane of its own.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use reconciler_sdk::KindRef;
use reconciler_tests::oci_registry::{Mode, Registry, skip};
use reconciler_tests::real_cluster::{Probe, RealCluster, Suite, audit_log_flags};
use reconciler_tests::report_text;
use serde_json::{Value, json};

const SUITE: Suite = Suite {
    name: "shadow_real_cluster",
    host_binary: env!("CARGO_BIN_EXE_reconciler-host-under-test"),
};

const TIMEOUT: Duration = Duration::from_secs(180);
const SIZES: [(&str, i64); 3] = [("small", 1), ("medium", 2), ("large", 3)];

fn plugins_kind() -> KindRef {
    KindRef::new("reconciler-host.io", "v1alpha1", "Plugin")
}

fn deployments() -> KindRef {
    KindRef::new("apps", "v1", "Deployment")
}

/// Every write to a Deployment, with what it sent (Request level).
fn audit_flags(dir: &Path) -> Result<String> {
    audit_log_flags(
        dir,
        "- level: Request\n  verbs: [create, update, patch]\n  resources:\n  \
         - group: apps\n    resources: [deployments]\n",
    )
}

/// `spec.replicas` of every audited Deployment write that sets it, by name.
fn replicas_written(dir: &Path) -> Result<BTreeMap<String, Vec<i64>>> {
    let text = std::fs::read_to_string(dir.join("audit.log")).context("reading the audit log")?;
    let mut written: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for line in text.lines() {
        let entry: Value = serde_json::from_str(line)?;
        let Some(name) = entry["objectRef"]["name"].as_str() else {
            continue;
        };
        if let Some(n) = entry["requestObject"]["spec"]["replicas"].as_i64() {
            written.entry(name.to_string()).or_default().push(n);
        }
    }
    Ok(written)
}

/// The host's reports address, from its log.
fn reports_address(cx: &RealCluster) -> Result<String> {
    let marker = "serving /metrics and /plugins on http://";
    let line = cx
        .host()?
        .log_lines_with(&[marker])
        .into_iter()
        .next()
        .context("the host has not said where it serves its reports")?;
    line.split(marker)
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .context("no address after the marker")
}

/// The JSON body of a report.
fn report(address: &str, path: &str) -> Result<Value> {
    let response = report_text(address, path)?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body)
        .context("no body")?;
    serde_json::from_str(body).with_context(|| format!("{path}: {response}"))
}

#[test]
fn a_candidate_in_shadow_decides_on_every_podset_and_writes_nothing() {
    const TEST: &str = "a_candidate_in_shadow_decides_on_every_podset_and_writes_nothing";
    if skip(SUITE.name, TEST, Mode::Anonymous) {
        return;
    }
    let audit = tempfile::tempdir().expect("a temporary directory");
    let flags = audit_flags(audit.path()).expect("the audit policy");
    SUITE.run_on_own_control_plane(TEST, &[("APISERVER_EXTRA", flags.as_str())], async |cx| {
        shadow(cx, audit.path()).await
    });
}

async fn shadow(cx: &mut RealCluster, audit: &Path) -> Result<()> {
    let registry = Registry::with_podset_versions(cx).await?;

    cx.step("1. three PodSets, served by podset-js from a Plugin");
    for (name, size) in SIZES {
        cx.create(
            json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
            "metadata": {"name": name}, "spec": {"size": size}}),
        )
        .await?;
    }
    let namespace = cx.namespace.clone();
    let cache = cx.workdir().join("registry-cache").display().to_string();
    cx.start_host_with_args(
        &[],
        &[
            "--registry-cache",
            &cache,
            "--plugin-secrets-namespace",
            &namespace,
            "--metrics-listen",
            "127.0.0.1:0",
            "--metrics-insecure",
        ],
    )?;
    let plugin = format!("{namespace}-podset");
    let verification = json!({"publicKeys": [{"secretRef": {"name": "plugin-keys"}}]});
    cx.create(json!({
        "apiVersion": "reconciler-host.io/v1alpha1", "kind": "Plugin",
        "metadata": {"name": plugin, "labels": {"reconciler-tests/namespace": namespace}},
        "spec": {
            "source": registry.reference("plugins/podset:1"),
            "insecure": true,
            "verification": verification,
            "rollout": {"candidate": registry.reference("plugins/podset:2")},
        },
    }))
    .await?;

    cx.step(
        "2. the candidate decides on every PodSet; the Plugin's status counts each as differed",
    );
    let status = cx
        .wait_for(
            "status.rollout.shadow counting every PodSet",
            TIMEOUT,
            async || {
                let p = cx.must_get(&plugins_kind(), &plugin).await?;
                let shadow = &p["status"]["rollout"]["shadow"];
                Ok(
                    if shadow["differed"].as_u64() >= Some(SIZES.len() as u64)
                        && p["status"]["rollout"]["candidate"]["digest"].is_string()
                    {
                        Probe::Ready(p["status"].clone())
                    } else {
                        Probe::Pending(p["status"].to_string())
                    },
                )
            },
        )
        .await?;
    ensure!(
        status["rollout"]["shadow"]["agreed"] == 0 && status["rollout"]["shadow"]["failed"] == 0,
        "a doubling candidate agrees on nothing and fails nothing: {status}"
    );
    ensure!(
        status["rollout"]["summary"]
            .as_str()
            .is_some_and(|s| s.contains("differed")),
        "{status}"
    );
    cx.step(format!("status.rollout: {}", status["rollout"]["summary"]));

    cx.step("3. every Deployment keeps the serving version's size");
    for (name, size) in SIZES {
        cx.wait_for(&format!("Deployment {name}"), TIMEOUT, async || {
            Ok(match cx.get(&deployments(), name).await? {
                Some(d) if d["spec"]["replicas"] == size => Probe::Ready(()),
                Some(d) => Probe::Pending(format!("replicas {}", d["spec"]["replicas"])),
                None => Probe::Pending("not created yet".into()),
            })
        })
        .await?;
    }

    cx.step("4. /plugins/podset-js/shadow lists each PodSet with spec.replicas n -> 2n");
    let address = reports_address(cx)?;
    let shadow = report(&address, "/plugins/podset-js/shadow")?;
    let differing = shadow["differing"].as_array().context("differing")?;
    for (name, size) in SIZES {
        let object = format!("PodSet {namespace}/{name}");
        let entry = differing
            .iter()
            .find(|d| d["object"] == object.as_str())
            .with_context(|| format!("{object} is not among the differing: {shadow}"))?;
        let replicas = entry["differences"]
            .as_array()
            .context("differences")?
            .iter()
            .find(|d| d["in"] == "apply" && d["path"] == "spec.replicas")
            .with_context(|| format!("no spec.replicas difference for {object}: {entry}"))?;
        ensure!(
            replicas["serving"] == size && replicas["candidate"] == 2 * size,
            "{object}: {replicas}"
        );
    }
    let metrics = report_text(&address, "/metrics")?;
    ensure!(
        metrics.lines().any(|l| l
            .starts_with("reconciler_host_shadow_reconciles{plugin=\"podset-js\"")
            && l.contains("outcome=\"differed\"")),
        "no shadow series in /metrics"
    );

    cx.step("5. a CandidateDiffers Event names a differing PodSet");
    let mut announced = Vec::new();
    for (name, _) in SIZES {
        let events = cx.events_about("PodSet", name).await?;
        announced.extend(
            events
                .into_iter()
                .filter(|e| e.reason == "CandidateDiffers")
                .map(|e| e.message),
        );
    }
    // At most one a minute for the plugin (the book's unit test counts
    // them); here the PodSets differ within seconds of one another.
    ensure!(
        !announced.is_empty() && announced.iter().all(|m| m.contains("spec.replicas")),
        "a CandidateDiffers Event naming spec.replicas: {announced:?}"
    );

    cx.step("6. the audit log: no Deployment write carried the candidate's size");
    let written = replicas_written(audit)?;
    for (name, size) in SIZES {
        let sizes = written
            .get(name)
            .with_context(|| format!("no write of Deployment {name} audited: {written:?}"))?;
        ensure!(
            sizes.iter().all(|n| *n == size),
            "Deployment {name} was written with {sizes:?}; the serving size is {size}"
        );
    }
    cx.step(format!(
        "{} Deployment writes audited, all at the serving sizes",
        written.values().map(Vec::len).sum::<usize>()
    ));

    cx.step("7. taking spec.rollout out stops the candidate and clears status.rollout");
    cx.merge_patch(&plugins_kind(), &plugin, json!({"spec": {"rollout": null}}))
        .await?;
    cx.wait_for("status.rollout cleared", TIMEOUT, async || {
        let p = cx.must_get(&plugins_kind(), &plugin).await?;
        Ok(if p["status"].get("rollout").is_none() {
            Probe::Ready(())
        } else {
            Probe::Pending(p["status"]["rollout"].to_string())
        })
    })
    .await?;
    cx.wait_for_log(&["candidate of plugin podset-js stopped"], TIMEOUT)
        .await?;
    Ok(())
}
