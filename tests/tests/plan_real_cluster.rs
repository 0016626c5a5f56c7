//! `reconciler-host plan` against a real API server, as a CI job would run
//! it: with the read-only role `rbac --plan` generates, bound to a service
//! account of its own. A candidate podset that asks for twice each
//! PodSet's size is shown to change every Deployment's replicas and makes
//! the plan exit 1; the serving version planned against itself exits 0;
//! nothing in the cluster moves.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use reconciler_sdk::KindRef;
use reconciler_tests::oci_registry::{Mode, Registry};
use reconciler_tests::real_cluster::kubeconfig;
use reconciler_tests::real_cluster::podset_convergence::{deployments, problem};
use reconciler_tests::real_cluster::{Probe, RealCluster, Suite};
use reconciler_tests::{example_plugin, root, test_plugin};
use serde_json::{Value, json};

const SUITE: Suite = Suite {
    name: "plan_real_cluster",
    host_binary: env!("CARGO_BIN_EXE_reconciler-host-under-test"),
};

const HOST_TIMEOUT: Duration = Duration::from_secs(90);
const SIZES: [(&str, i64); 3] = [("a", 1), ("b", 2), ("c", 3)];

fn serving() -> PathBuf {
    example_plugin("podset-js/podset-js")
}

#[test]
fn a_candidate_that_doubles_sizes_is_planned_read_only_and_exits_1() {
    SUITE.run(
        "a_candidate_that_doubles_sizes_is_planned_read_only_and_exits_1",
        async |cx| {
            cx.install_crds(&root().join("crds").join("podset.yaml"))
                .await?;
            cx.start_host(&[serving()])?;
            cx.wait_for_log(&["loaded plugin podset-js"], HOST_TIMEOUT)
                .await?;
            for (name, size) in SIZES {
                cx.create(
                    json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
                    "metadata": {"name": name}, "spec": {"size": size}}),
                )
                .await?;
            }
            cx.wait_for("the PodSets to converge", HOST_TIMEOUT, async || {
                Ok(match problem(cx, SIZES.len()).await? {
                    Some(problem) => Probe::Pending(problem),
                    None => Probe::Ready(()),
                })
            })
            .await?;
            cx.stop_host().await?;
            let planner = planner_kubeconfig(cx).await?;
            cx.step("converged by podset-js; a read-only planner is bound");

            let (code, report) = plan(cx, &planner, &test_plugin("podset-doubled-js"))?;
            ensure!(
                code == Some(1),
                "plan of the doubling candidate exited {code:?}: {report}"
            );
            let report: Value = serde_json::from_str(&report).context("plan --output json")?;
            ensure!(
                report["primaries"] == SIZES.len() && report["differing"] == SIZES.len(),
                "every PodSet should differ: {report:#}"
            );
            for (name, size) in SIZES {
                let object = format!("{}/{name}", cx.namespace);
                let entry = report["objects"]
                    .as_array()
                    .and_then(|all| all.iter().find(|o| o["object"] == object))
                    .with_context(|| format!("{object} is not in the plan: {report:#}"))?;
                let replicas = json!({"in": "apply",
                    "object": format!("apps/v1 Deployment {object}"), "path": "spec.replicas",
                    "serving": size, "candidate": size * 2});
                ensure!(
                    entry["differences"]
                        .as_array()
                        .is_some_and(|d| d.contains(&replicas)),
                    "{object}: no replicas {size} -> {}: {entry:#}",
                    size * 2
                );
            }
            cx.step("the doubling candidate: every Deployment's replicas, exit 1");

            let (code, report) = plan(cx, &planner, &serving())?;
            ensure!(
                code == Some(0),
                "plan of the serving version against itself exited {code:?}: {report}"
            );
            let report: Value = serde_json::from_str(&report)?;
            ensure!(report["differing"] == 0, "{report:#}");

            for (name, size) in SIZES {
                let deployment = cx.must_get(&deployments(), name).await?;
                ensure!(
                    deployment["spec"]["replicas"] == size,
                    "the plan changed Deployment {name}: {}",
                    deployment["spec"]
                );
            }
            cx.step("the unchanged candidate exits 0; every Deployment kept its size");
            Ok(())
        },
    );
}

/// A kubeconfig of a service account bound to `rbac --plan`'s role for
/// podset-js, and nothing else.
async fn planner_kubeconfig(cx: &mut RealCluster) -> Result<PathBuf> {
    let plugins = cx.workdir().join("plan-plugins");
    std::fs::create_dir_all(&plugins)?;
    std::fs::copy(serving(), plugins.join("podset-js.wasm"))?;
    let name = format!("planner-{}", cx.namespace);
    let output = cx
        .host_command()
        .args(["rbac", "--plan", "--plugins-dir"])
        .arg(&plugins)
        .arg("--crds")
        .arg(root().join("crds"))
        .args(["--name", &name])
        .output()?;
    ensure!(
        output.status.success(),
        "rbac --plan failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let generated = String::from_utf8(output.stdout)?;
    for document in generated.split("\n---\n") {
        let role: Value = serde_yaml_ng::from_str(document)?;
        if role["kind"] == "ClusterRole" {
            for rule in role["rules"].as_array().context("rules")? {
                let reads_only = rule["verbs"].as_array().is_some_and(|verbs| {
                    verbs
                        .iter()
                        .all(|v| ["get", "list", "watch"].contains(&v.as_str().unwrap_or("")))
                });
                ensure!(reads_only, "rbac --plan grants more than reading: {rule}");
            }
            cx.create(role).await?;
        }
    }
    cx.create(json!({"apiVersion": "v1", "kind": "ServiceAccount",
                     "metadata": {"name": "planner"}}))
        .await?;
    cx.create(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "planner", "namespace": cx.namespace}],
    }))
    .await?;
    let token = cx.service_account_token("planner").await?;
    let path = cx.workdir().join("planner.kubeconfig");
    kubeconfig::with_token(cx.kubeconfig(), &token, &path)?;
    Ok(path)
}

/// `plan CANDIDATE --against podset-js -n NS --output json` as the planner:
/// its exit code and what it printed.
fn plan(cx: &RealCluster, planner: &PathBuf, candidate: &PathBuf) -> Result<(Option<i32>, String)> {
    let output = cx
        .host_command()
        .env("KUBECONFIG", planner)
        .arg("plan")
        .arg(candidate)
        .arg("--against")
        .arg(serving())
        .args(["-n", &cx.namespace, "--output", "json"])
        .output()?;
    let stdout = String::from_utf8(output.stdout)?;
    if output.status.code() == Some(2) {
        anyhow::bail!("plan failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok((output.status.code(), stdout))
}

/// Without --against, the serving version is the digest a Plugin resource
/// reports serving under the candidate's name: pulled from the registry
/// (the Debian registry on loopback), verified, planned against. Two
/// Plugins serving that name at different digests give no one answer, and
/// the plan says so instead of picking one. On a control plane of its own,
/// so no other test's Plugins are listed.
#[test]
fn without_against_the_version_a_plugin_resource_serves_is_pulled_and_planned_against() {
    const TEST: &str =
        "without_against_the_version_a_plugin_resource_serves_is_pulled_and_planned_against";
    if reconciler_tests::oci_registry::skip(SUITE.name, TEST, Mode::Anonymous) {
        return;
    }
    SUITE.run_on_own_control_plane(TEST, &[], async |cx| {
        let registry = Registry::start(Mode::Anonymous);
        cx.install_crds(&root().join("crds").join("podset.yaml"))
            .await?;
        cx.install_crds(&root().join("crds").join("plugin.yaml"))
            .await?;
        let keys = cx.workdir().join("signer");
        cx.host_cli(&["keygen", "--output", &keys.display().to_string()])?;
        let public = keys.with_extension("pub").display().to_string();
        let reference = registry.reference("plugins/podset-js:stable");
        let mut push = vec!["push".to_string(), serving().display().to_string()];
        push.extend([reference.clone(), "--sign-key".into()]);
        push.push(keys.with_extension("key").display().to_string());
        push.extend(registry.access_args());
        let digest = cx.host_cli(&push.iter().map(String::as_str).collect::<Vec<_>>())?;
        // What a host following the Plugin writes once it serves it.
        let plugin = KindRef::new("reconciler-host.io", "v1alpha1", "Plugin");
        for (name, served) in [("podset-js", digest.as_str())] {
            cx.create(
                json!({"apiVersion": "reconciler-host.io/v1alpha1", "kind": "Plugin",
                "metadata": {"name": name}, "spec": {"source": reference, "insecure": true}}),
            )
            .await?;
            cx.merge_patch_status(
                &plugin,
                name,
                json!({"status": {"pluginName": "podset-js", "digest": served}}),
            )
            .await?;
        }
        cx.create(
            json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
            "metadata": {"name": "web"}, "spec": {"size": 2}}),
        )
        .await?;
        cx.step(format!(
            "podset-js pushed as {digest}, a Plugin reports serving it"
        ));

        let mut args = vec![
            "plan".to_string(),
            test_plugin("podset-doubled-js").display().to_string(),
            "-n".into(),
            cx.namespace.clone(),
            "--output".into(),
            "json".into(),
            "--verify-key".into(),
            public.clone(),
        ];
        args.extend(registry.access_args());
        let out = cx.host_command().args(&args).output()?;
        ensure!(
            out.status.code() == Some(1),
            "plan exited {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        let report: Value = serde_json::from_slice(&out.stdout)?;
        let source = report["serving"]["source"].as_str().unwrap_or_default();
        ensure!(
            source.contains(&digest) && source.contains("served by Plugin podset-js"),
            "the serving version is not the Plugin's digest: {report:#}"
        );
        ensure!(report["differing"] == 1, "{report:#}");
        cx.step("without --against: the Plugin's digest pulled, verified, planned against");

        // A second Plugin serving podset-js at another digest.
        let other = registry.reference("plugins/podset-js:other");
        let mut push = vec![
            "push".to_string(),
            test_plugin("podset-doubled-js").display().to_string(),
        ];
        push.extend([other.clone()]);
        push.extend(registry.access_args());
        let other_digest = cx.host_cli(&push.iter().map(String::as_str).collect::<Vec<_>>())?;
        cx.create(
            json!({"apiVersion": "reconciler-host.io/v1alpha1", "kind": "Plugin",
            "metadata": {"name": "podset-js-too"}, "spec": {"source": other, "insecure": true}}),
        )
        .await?;
        cx.merge_patch_status(
            &plugin,
            "podset-js-too",
            json!({"status": {"pluginName": "podset-js", "digest": other_digest}}),
        )
        .await?;
        let out = cx.host_command().args(&args).output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(
            out.status.code() == Some(2)
                && stderr.contains("several Plugin resources serve podset-js"),
            "two Plugins at two digests: exit {:?}: {stderr}",
            out.status.code()
        );
        cx.step("two Plugins serving it at two digests: the plan asks for --against");

        // A status anyone with patch on Plugins could have written: not a
        // digest. The plan names the Plugin and pulls nothing.
        cx.merge_patch_status(
            &plugin,
            "podset-js-too",
            json!({"status": {"digest": "sha256:../../etc/passwd"}}),
        )
        .await?;
        let out = cx.host_command().args(&args).output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(
            out.status.code() == Some(2) && stderr.contains("Plugin podset-js-too: status.digest"),
            "a malformed status.digest: exit {:?}: {stderr}",
            out.status.code()
        );
        cx.step("a Plugin whose status.digest is not a digest is named, nothing pulled");
        Ok(())
    });
}
