//! The host's trust in what registries and Plugins hand it, against a real
//! API server and a real registry: `run --require-signatures` holds every
//! Plugin and every `--plugin` to the operator's keys whatever the Plugin
//! says; a host without it says so and never reports an unchecked digest
//! as verified; and a change of policy (verification added, a key rotated
//! in its Secret, the source moved to a repository holding the same
//! digest, the host's own key rotated in its file) verifies the serving
//! digest again, falling back to the last good digest that passes, or to
//! nothing. `--registry-allow` keeps Plugins
//! to the registries it names.

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, ensure};
use reconciler_sdk::KindRef;
use reconciler_tests::oci_registry::{Mode, Registry, skip};
use reconciler_tests::real_cluster::{Probe, RealCluster, Suite};
use reconciler_tests::{example_plugin, root, test_plugin};
use serde_json::{Value, json};

const SUITE: Suite = Suite {
    name: "plugin_trust_real_cluster",
    host_binary: env!("CARGO_BIN_EXE_reconciler-host-under-test"),
};

/// A pull, a signature check and a load of a small Rust plugin, beside
/// other suites; the follower re-reads its keys every 30 s without an
/// interval, and every 5 s with the tests' interval.
const TIMEOUT: Duration = Duration::from_secs(120);

fn plugins_kind() -> KindRef {
    KindRef::new("reconciler-host.io", "v1alpha1", "Plugin")
}

fn secrets_kind() -> KindRef {
    KindRef::new("", "v1", "Secret")
}

/// A key pair under the test's directory: (private key file, public key PEM).
fn keygen(cx: &RealCluster, name: &str) -> Result<(String, String)> {
    let prefix = cx.workdir().join(name);
    cx.host_cli(&["keygen", "--output", prefix.to_str().unwrap()])?;
    Ok((
        prefix.with_extension("key").display().to_string(),
        std::fs::read_to_string(prefix.with_extension("pub"))?,
    ))
}

/// Pushes `file` as `repo_tag`, signed with `key` when given; its digest.
fn push(
    cx: &RealCluster,
    registry: &Registry,
    file: &Path,
    repo_tag: &str,
    key: Option<&str>,
) -> Result<String> {
    let reference = registry.reference(repo_tag);
    let file = file.display().to_string();
    let mut args = vec![
        "push",
        file.as_str(),
        reference.as_str(),
        "--insecure-registry",
        registry.host.as_str(),
    ];
    if let Some(key) = key {
        args.extend(["--sign-key", key]);
    }
    let digest = cx.host_cli(&args)?;
    cx.step(format!(
        "pushed {file} as {repo_tag} ({digest}){}",
        if key.is_some() { ", signed" } else { "" }
    ));
    Ok(digest)
}

fn condition<'a>(plugin: &'a Value, type_: &str) -> Option<&'a Value> {
    plugin["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn is(plugin: &Value, type_: &str, status: &str, reason: &str) -> bool {
    condition(plugin, type_).is_some_and(|c| c["status"] == status && c["reason"] == reason)
}

async fn wait_for_status(
    cx: &RealCluster,
    name: &str,
    what: &str,
    ready: impl Fn(&Value) -> bool,
) -> Result<Value> {
    cx.wait_for(&format!("Plugin {name} with {what}"), TIMEOUT, async || {
        let plugin = cx.must_get(&plugins_kind(), name).await?;
        Ok(if ready(&plugin) {
            Probe::Ready(plugin)
        } else {
            Probe::Pending(plugin["status"].to_string())
        })
    })
    .await
}

/// A Plugin of the test (labelled so only its host follows it).
async fn create_plugin(cx: &RealCluster, name: &str, spec: Value) -> Result<String> {
    let namespace = cx.namespace.clone();
    let name = format!("{namespace}-{name}");
    cx.create(json!({
        "apiVersion": "reconciler-host.io/v1alpha1", "kind": "Plugin",
        "metadata": {"name": name, "labels": {"reconciler-tests/namespace": namespace}},
        "spec": spec,
    }))
    .await?;
    Ok(name)
}

fn cache_args(cx: &RealCluster) -> Vec<String> {
    vec![
        "--registry-cache".into(),
        cx.workdir().join("registry-cache").display().to_string(),
        "--plugin-secrets-namespace".into(),
        cx.namespace.clone(),
    ]
}

#[test]
fn require_signatures_holds_every_plugin_and_reference_to_the_hosts_keys() {
    const TEST: &str = "require_signatures_holds_every_plugin_and_reference_to_the_hosts_keys";
    if skip(SUITE.name, TEST, Mode::Anonymous) {
        return;
    }
    SUITE.run(TEST, async |cx| {
        let registry = Registry::start(Mode::Anonymous);
        cx.install_crds(&root().join("crds/podset.yaml")).await?;
        cx.install_crds(&root().join("crds/plugin.yaml")).await?;
        let (host_key, _) = keygen(cx, "host")?;
        let (own_key, own_public) = keygen(cx, "own")?;
        let host_pub_file = cx.workdir().join("host.pub").display().to_string();
        cx.create(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "own-keys"},
                         "stringData": {"cosign.pub": own_public}}),
        )
        .await?;

        let signed = push(
            cx,
            &registry,
            &example_plugin("podset"),
            "plugins/signed:1",
            Some(&host_key),
        )?;
        push(
            cx,
            &registry,
            &example_plugin("memcached"),
            "plugins/unsigned:1",
            None,
        )?;
        push(
            cx,
            &registry,
            &example_plugin("rollout_restarter"),
            "plugins/foreign:1",
            Some(&own_key),
        )?;
        push(
            cx,
            &registry,
            &example_plugin("memcached"),
            "plugins/cli-unsigned:1",
            None,
        )?;
        let cli_reference = registry.reference("plugins/cli-unsigned:1");

        let mut args = cache_args(cx);
        args.extend([
            "--require-signatures".into(),
            "--verify-key".into(),
            host_pub_file,
            "--insecure-registry".into(),
            registry.host.clone(),
            "--plugin".into(),
            cli_reference.clone(),
            "--registry-allow".into(),
            registry.host.clone(),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cx.start_host_with_args(&[], &args)?;

        // No spec.verification: the host's key still has to verify.
        let unsigned = create_plugin(
            cx,
            "unsigned",
            json!({
                "source": registry.reference("plugins/unsigned:1"), "insecure": true,
            }),
        )
        .await?;
        // Its own key only: a Plugin cannot widen what the host trusts.
        let foreign = create_plugin(
            cx,
            "foreign",
            json!({
                "source": registry.reference("plugins/foreign:1"), "insecure": true,
                "verification": {"publicKeys": [{"secretRef": {"name": "own-keys"}}]},
            }),
        )
        .await?;
        let good = create_plugin(
            cx,
            "signed",
            json!({
                "source": registry.reference("plugins/signed:1"), "insecure": true,
            }),
        )
        .await?;

        let plugin = wait_for_status(cx, &good, "Serving, verified by the host's key", |p| {
            is(p, "Ready", "True", "Serving") && is(p, "Verified", "True", "SignatureVerified")
        })
        .await?;
        ensure!(
            plugin["status"]["digest"] == signed.as_str(),
            "{}",
            plugin["status"]
        );
        ensure!(
            plugin["status"]["signer"]
                .as_str()
                .is_some_and(|s| s.contains("host.pub")),
            "{}",
            plugin["status"]
        );
        cx.step("a Plugin signed by the host's key serves without a verification of its own");

        let plugin = wait_for_status(cx, &unsigned, "Verified False SignatureMissing", |p| {
            is(p, "Verified", "False", "SignatureMissing")
                && is(p, "Ready", "False", "SignatureMissing")
        })
        .await?;
        ensure!(
            plugin["status"].get("digest").is_none(),
            "{}",
            plugin["status"]
        );
        cx.step("an unsigned Plugin without spec.verification is refused, nothing of it serves");

        let plugin = wait_for_status(cx, &foreign, "Verified False SignatureNotTrusted", |p| {
            is(p, "Verified", "False", "SignatureNotTrusted")
                && is(p, "Ready", "False", "SignatureNotTrusted")
        })
        .await?;
        ensure!(
            plugin["status"].get("digest").is_none(),
            "{}",
            plugin["status"]
        );
        cx.step("a Plugin signed only by a key of its own spec.verification is refused");

        cx.wait_for_log(
            &[&format!("{cli_reference}: "), "has no signature"],
            TIMEOUT,
        )
        .await?;
        let host = cx.host()?;
        ensure!(
            host.log_lines_with(&["unsigned plugins are allowed"])
                .is_empty(),
            "a host requiring signatures says unsigned plugins are allowed"
        );
        ensure!(
            host.log_lines_with(&["loaded plugin memcached"]).is_empty(),
            "an unsigned memcached was loaded: {}",
            host.log_tail()
        );
        cx.step("an unsigned --plugin is refused too");

        // The same registry by another name is outside --registry-allow.
        let port = registry.host.rsplit_once(':').unwrap().1;
        let elsewhere = create_plugin(
            cx,
            "elsewhere",
            json!({"source": format!("oci://localhost:{port}/plugins/signed:1"), "insecure": true}),
        )
        .await?;
        let plugin = wait_for_status(cx, &elsewhere, "Loaded False RegistryNotAllowed", |p| {
            is(p, "Loaded", "False", "RegistryNotAllowed")
                && is(p, "Ready", "False", "RegistryNotAllowed")
        })
        .await?;
        ensure!(
            plugin["status"].get("digest").is_none(),
            "{}",
            plugin["status"]
        );
        cx.step("a Plugin naming a registry outside --registry-allow is refused");

        // The host's key rotated where it is mounted (as the kubelet swaps a
        // ConfigMap's files): what it admitted is verified again and stops.
        let rotated = cx.workdir().join("host.pub.new");
        std::fs::write(&rotated, &own_public)?;
        std::fs::rename(&rotated, cx.workdir().join("host.pub"))?;
        let plugin = wait_for_status(
            cx,
            &good,
            "nothing serving after the host's key rotated",
            |p| {
                p["status"].get("digest").is_none()
                    && is(p, "Verified", "False", "SignatureNotTrusted")
                    && is(p, "Ready", "False", "SignatureNotTrusted")
            },
        )
        .await?;
        ensure!(
            condition(&plugin, "Verified").is_some_and(|c| c["message"]
                .as_str()
                .is_some_and(|m| m.contains(&signed) && m.contains("stops serving"))),
            "{}",
            plugin["status"]
        );
        cx.wait_for_log(&["unloaded plugin podset"], TIMEOUT)
            .await?;
        cx.step("the host's key rotated in its file: the digest it admitted stopped serving");
        Ok(())
    });
}

#[test]
fn without_require_signatures_an_unchecked_plugin_is_never_reported_verified() {
    const TEST: &str = "without_require_signatures_an_unchecked_plugin_is_never_reported_verified";
    if skip(SUITE.name, TEST, Mode::Anonymous) {
        return;
    }
    SUITE.run(TEST, async |cx| {
        let registry = Registry::start(Mode::Anonymous);
        cx.install_crds(&root().join("crds/podset.yaml")).await?;
        cx.install_crds(&root().join("crds/plugin.yaml")).await?;
        let digest = push(
            cx,
            &registry,
            &example_plugin("podset"),
            "plugins/podset:1",
            None,
        )?;
        let args = cache_args(cx);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cx.start_host_with_args(&[], &args)?;
        let name = create_plugin(
            cx,
            "podset",
            json!({
                "source": registry.reference("plugins/podset:1"), "insecure": true,
            }),
        )
        .await?;
        let plugin = wait_for_status(cx, &name, "Serving, Verified Unknown NotChecked", |p| {
            is(p, "Ready", "True", "Serving") && is(p, "Verified", "Unknown", "NotChecked")
        })
        .await?;
        ensure!(
            plugin["status"]["digest"] == digest.as_str(),
            "{}",
            plugin["status"]
        );
        ensure!(
            plugin["status"].get("signer").is_none(),
            "{}",
            plugin["status"]
        );
        let warnings = cx.host()?.log_lines_with(&["unsigned plugins are allowed"]);
        ensure!(
            warnings.len() == 1,
            "the host says once that unsigned plugins are allowed: {warnings:?}"
        );
        cx.step(
            "an unsigned Plugin serves, Verified Unknown NotChecked, and the host said so once",
        );
        Ok(())
    });
}

#[test]
fn a_policy_change_verifies_the_serving_digest_again() {
    const TEST: &str = "a_policy_change_verifies_the_serving_digest_again";
    if skip(SUITE.name, TEST, Mode::Anonymous) {
        return;
    }
    SUITE.run(TEST, async |cx| {
        let registry = Registry::start(Mode::Anonymous);
        cx.install_crds(&root().join("crds/podset.yaml")).await?;
        cx.install_crds(&root().join("crds/memcached.yaml")).await?;
        cx.install_crds(&root().join("crds/plugin.yaml")).await?;
        let (k1, k1_public) = keygen(cx, "k1")?;
        let (k2, k2_public) = keygen(cx, "k2")?;
        let (_, k3_public) = keygen(cx, "k3")?;
        cx.create(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "keys"},
                         "stringData": {"a.pub": k1_public, "b.pub": k2_public}}),
        )
        .await?;
        let args = cache_args(cx);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cx.start_host_with_args(&[], &args)?;

        // D1 signed by k2, then D2 unsigned under the same tag: both served
        // while nothing is required.
        let d1 = push(
            cx,
            &registry,
            &example_plugin("podset"),
            "plugins/podset:1",
            Some(&k2),
        )?;
        let name = create_plugin(cx, "podset", json!({
            "source": registry.reference("plugins/podset:1"), "insecure": true, "interval": "5s",
        }))
        .await?;
        wait_for_status(cx, &name, "D1 serving", |p| {
            is(p, "Ready", "True", "Serving") && p["status"]["digest"] == d1.as_str()
        })
        .await?;
        let d2 = push(
            cx,
            &registry,
            &test_plugin("podset-v2"),
            "plugins/podset:1",
            None,
        )?;
        wait_for_status(cx, &name, "D2 serving", |p| {
            is(p, "Ready", "True", "Serving") && p["status"]["digest"] == d2.as_str()
        })
        .await?;
        cx.step("unsigned D2 serves while the Plugin asks for no verification");

        // Verification added: D2, unsigned, stops; D1 (signed by k2) passes
        // and serves instead.
        cx.merge_patch(
            &plugins_kind(),
            &name,
            json!({"spec": {"verification": {"publicKeys": [
                {"secretRef": {"name": "keys", "key": "a.pub"}},
                {"secretRef": {"name": "keys", "key": "b.pub"}},
            ]}}}),
        )
        .await?;
        let plugin = wait_for_status(cx, &name, "D1 back, D2 refused", |p| {
            p["status"]["digest"] == d1.as_str()
                && is(p, "Ready", "True", "ServingLastGood")
                && is(p, "Verified", "False", "SignatureMissing")
        })
        .await?;
        ensure!(
            plugin["status"]["signer"]
                .as_str()
                .is_some_and(|s| s.contains("b.pub")),
            "{}",
            plugin["status"]
        );
        cx.step("spec.verification added: unsigned D2 stopped serving, D1 (signed by k2) serves");

        // k2 revoked by rotating b.pub in the Secret, the Plugin untouched:
        // D1 stops, D2 still fails, nothing serves.
        cx.merge_patch(
            &secrets_kind(),
            "keys",
            json!({"stringData": {"b.pub": k3_public}}),
        )
        .await?;
        wait_for_status(cx, &name, "nothing serving after the rotation", |p| {
            p["status"].get("digest").is_none()
                && condition(p, "Ready").is_some_and(|c| c["status"] == "False")
                && condition(p, "Verified").is_some_and(|c| c["status"] == "False")
        })
        .await?;
        cx.wait_for_log(
            &[
                &d1,
                "no longer meets the trust policy",
                "nothing of this Plugin serves",
            ],
            TIMEOUT,
        )
        .await?;
        cx.wait_for_log(&["unloaded plugin podset"], TIMEOUT)
            .await?;
        cx.step("a key rotated in its Secret: D1 (signed by the revoked key) stopped serving");

        // The same digest in another repository, without its signature there.
        let dm = push(
            cx,
            &registry,
            &example_plugin("memcached"),
            "plugins/memcached:1",
            Some(&k1),
        )?;
        let mirrored = push(
            cx,
            &registry,
            &example_plugin("memcached"),
            "mirror/memcached:1",
            None,
        )?;
        ensure!(
            dm == mirrored,
            "the same file pushes as the same digest: {dm} {mirrored}"
        );
        let memcached = create_plugin(
            cx,
            "memcached",
            json!({
                "source": registry.reference("plugins/memcached:1"), "insecure": true,
                "verification": {"publicKeys": [{"secretRef": {"name": "keys", "key": "a.pub"}}]},
            }),
        )
        .await?;
        wait_for_status(cx, &memcached, "memcached serving, signed by k1", |p| {
            is(p, "Ready", "True", "Serving") && is(p, "Verified", "True", "SignatureVerified")
        })
        .await?;
        cx.merge_patch(
            &plugins_kind(),
            &memcached,
            json!({"spec": {"source": registry.reference("mirror/memcached:1")}}),
        )
        .await?;
        wait_for_status(cx, &memcached, "the mirror's unsigned copy refused", |p| {
            p["status"].get("digest").is_none()
                && is(p, "Ready", "False", "SignatureMissing")
                && p["status"]["observedGeneration"] == 2
        })
        .await?;
        cx.wait_for_log(&["unloaded plugin memcached"], TIMEOUT)
            .await?;
        cx.step(
            "source moved to a repository holding the same digest unsigned: it stopped serving",
        );
        Ok(())
    });
}
