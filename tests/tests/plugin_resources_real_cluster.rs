//! Plugin resources against a real API server and a real registry: a
//! Plugin applied serves the pushed Python podset, a new push under the
//! same tag is followed within the interval, a wrong key, a missing
//! signature, a tampered blob and a registry that is down each leave the
//! last good version serving with the condition that says why, and a
//! deleted Plugin stops its controller.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, ensure};
use reconciler_sdk::KindRef;
use reconciler_tests::oci_registry::{Mode, Registry, skip};
use reconciler_tests::real_cluster::{Probe, RealCluster, Suite};
use reconciler_tests::{example_plugin, root, test_plugin};
use serde_json::{Value, json};

const SUITE: Suite = Suite {
    name: "plugin_resources_real_cluster",
    host_binary: env!("CARGO_BIN_EXE_reconciler-host-under-test"),
};

/// Long enough for a cold compile of the 18 MB Python component in a
/// debug host beside other suites.
const LOAD_TIMEOUT: Duration = Duration::from_secs(180);
/// Interval 5 s, plus a pull and a load of a cached component.
const FOLLOW_TIMEOUT: Duration = Duration::from_secs(60);

fn plugins_kind() -> KindRef {
    KindRef::new("reconciler-host.io", "v1alpha1", "Plugin")
}

fn crd(file: &str) -> PathBuf {
    root().join("crds").join(file)
}

fn push(
    cx: &RealCluster,
    registry: &Registry,
    file: &std::path::Path,
    key: Option<&str>,
) -> Result<String> {
    push_as(cx, registry, file, key, "stable")
}

/// [`push`] under another tag of the same repository.
fn push_as(
    cx: &RealCluster,
    registry: &Registry,
    file: &std::path::Path,
    key: Option<&str>,
    tag: &str,
) -> Result<String> {
    let reference = registry.reference(&format!("plugins/podset:{tag}"));
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
        "pushed {file} as {digest}{}",
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

/// Waits until the Plugin's status satisfies `ready`, showing its status meanwhile.
async fn wait_for_status(
    cx: &RealCluster,
    name: &str,
    what: &str,
    timeout: Duration,
    ready: impl Fn(&Value) -> bool,
) -> Result<Value> {
    cx.wait_for(&format!("Plugin {name} with {what}"), timeout, async || {
        let plugin = cx.must_get(&plugins_kind(), name).await?;
        Ok(if ready(&plugin) {
            Probe::Ready(plugin)
        } else {
            Probe::Pending(plugin["status"].to_string())
        })
    })
    .await
}

fn is(plugin: &Value, type_: &str, status: &str, reason: &str) -> bool {
    condition(plugin, type_).is_some_and(|c| c["status"] == status && c["reason"] == reason)
}

#[test]
fn a_plugin_serves_follows_its_tag_keeps_the_last_good_version_and_stops_when_deleted() {
    const TEST: &str =
        "a_plugin_serves_follows_its_tag_keeps_the_last_good_version_and_stops_when_deleted";
    if skip(SUITE.name, TEST, Mode::Anonymous) {
        return;
    }
    SUITE.run(TEST, async |cx| {
        let mut registry = Registry::start(Mode::Anonymous);
        cx.install_crds(&crd("podset.yaml")).await?;
        cx.install_crds(&crd("plugin.yaml")).await?;
        let keys = cx.workdir().join("signer");
        let other = cx.workdir().join("other");
        cx.host_cli(&["keygen", "--output", keys.to_str().unwrap()])?;
        cx.host_cli(&["keygen", "--output", other.to_str().unwrap()])?;
        let key = keys.with_extension("key").display().to_string();
        let other_key = other.with_extension("key").display().to_string();
        let public = std::fs::read_to_string(keys.with_extension("pub"))?;
        cx.create(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "plugin-keys"},
                         "stringData": {"cosign.pub": public}}),
        )
        .await?;

        let python = push(
            cx,
            &registry,
            &root().join("plugins/podset-py/podset-py.wasm"),
            Some(&key),
        )?;
        let namespace = cx.namespace.clone();
        let cache = cx.workdir().join("registry-cache").display().to_string();
        cx.start_host_with_args(
            &[],
            &[
                "--registry-cache",
                &cache,
                "--plugin-secrets-namespace",
                &namespace,
            ],
        )?;
        // The host reads keys in its own namespace: the test's.
        let name = format!("{namespace}-podset");
        cx.create(json!({
            "apiVersion": "reconciler-host.io/v1alpha1", "kind": "Plugin",
            "metadata": {"name": name, "labels": {"reconciler-tests/namespace": namespace}},
            "spec": {
                "source": registry.reference("plugins/podset:stable"),
                "insecure": true,
                "interval": "5s",
                "verification": {"publicKeys": [{"secretRef": {"name": "plugin-keys"}}]},
            },
        }))
        .await?;
        let plugin = wait_for_status(cx, &name, "the Python podset serving", LOAD_TIMEOUT, |p| {
            is(p, "Ready", "True", "Serving") && p["status"]["digest"] == python.as_str()
        })
        .await?;
        ensure!(
            plugin["status"]["primaryKind"]
                .as_str()
                .is_some_and(|k| k.contains("PodSet")),
            "{}",
            plugin["status"]
        );
        ensure!(
            plugin["status"]["signer"]
                .as_str()
                .is_some_and(|s| s.contains("plugin-keys")),
            "{}",
            plugin["status"]
        );
        ensure!(
            is(&plugin, "Verified", "True", "SignatureVerified"),
            "{}",
            plugin["status"]
        );
        cx.step("kubectl apply of a Plugin: the pushed Python podset serves, verified");

        cx.create(
            json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
                         "metadata": {"name": "a"}, "spec": {"size": 1}}),
        )
        .await?;
        let deployments = KindRef::new("apps", "v1", "Deployment");
        cx.wait_for("Deployment a", LOAD_TIMEOUT, async || {
            Ok(match cx.get(&deployments, "a").await? {
                Some(d) => Probe::Ready(d),
                None => Probe::Pending("no Deployment a yet".into()),
            })
        })
        .await?;
        cx.step("PodSet a converged: Deployment a exists");

        // A new build under the same tag is followed within the interval.
        let v2 = push(cx, &registry, &test_plugin("podset-v2"), Some(&key))?;
        wait_for_status(cx, &name, "the new digest serving", FOLLOW_TIMEOUT, |p| {
            is(p, "Ready", "True", "Serving") && p["status"]["digest"] == v2.as_str()
        })
        .await?;
        cx.wait_for(
            "Deployment a rebuilt by podset-v2",
            FOLLOW_TIMEOUT,
            async || {
                let d = cx.must_get(&deployments, "a").await?;
                Ok(
                    if d["spec"]["template"]["metadata"]["annotations"]["podset.example.com/build"]
                        == "test-v2"
                    {
                        Probe::Ready(())
                    } else {
                        Probe::Pending(d["spec"]["template"]["metadata"].to_string())
                    },
                )
            },
        )
        .await?;
        cx.step("a push under the same tag was followed and reconciled every PodSet");

        let last_good = |p: &Value| {
            is(p, "Ready", "True", "ServingLastGood") && p["status"]["digest"] == v2.as_str()
        };

        // A registry that is down.
        registry.stop();
        wait_for_status(
            cx,
            &name,
            "Loaded False PullFailed, v2 serving",
            FOLLOW_TIMEOUT,
            |p| last_good(p) && is(p, "Loaded", "False", "PullFailed"),
        )
        .await?;
        registry.restart();
        wait_for_status(cx, &name, "serving again", FOLLOW_TIMEOUT, |p| {
            is(p, "Ready", "True", "Serving")
        })
        .await?;
        cx.step("a registry that was down: v2 kept serving, PullFailed, then Serving again");

        // A wrong key: the Rust podset signed by a key the Plugin does not trust.
        push(cx, &registry, &example_plugin("podset"), Some(&other_key))?;
        wait_for_status(
            cx,
            &name,
            "Verified False SignatureNotTrusted",
            FOLLOW_TIMEOUT,
            |p| last_good(p) && is(p, "Verified", "False", "SignatureNotTrusted"),
        )
        .await?;
        cx.step("a wrong key: v2 kept serving, SignatureNotTrusted");

        // A missing signature.
        push(cx, &registry, &example_plugin("memcached"), None)?;
        wait_for_status(
            cx,
            &name,
            "Verified False SignatureMissing",
            FOLLOW_TIMEOUT,
            |p| last_good(p) && is(p, "Verified", "False", "SignatureMissing"),
        )
        .await?;
        cx.step("a missing signature: v2 kept serving, SignatureMissing");

        // A tampered blob: signed, but the registry's bytes changed. Pushed
        // under another tag and tampered there, then tagged `stable`: the
        // host never sees it before the change.
        let tampered = push_as(
            cx,
            &registry,
            &example_plugin("rollout_restarter"),
            Some(&key),
            "staging",
        )?;
        let layer = registry_layer(&registry, "plugins/podset", &tampered).await?;
        let blob = registry.blob_file(&layer);
        let mut bytes = std::fs::read(&blob)?;
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0xff;
        std::fs::write(&blob, bytes)?;
        retag(&registry, "plugins/podset", "staging", "stable").await?;
        wait_for_status(
            cx,
            &name,
            "Loaded False DigestMismatch",
            FOLLOW_TIMEOUT,
            |p| last_good(p) && is(p, "Loaded", "False", "DigestMismatch"),
        )
        .await?;
        cx.step("a tampered blob: v2 kept serving, DigestMismatch");
        let events = plugin_events(cx, &name).await?;
        for reason in [
            "SignatureVerified",
            "Loaded",
            "SignatureNotTrusted",
            "SignatureMissing",
            "DigestMismatch",
        ] {
            ensure!(
                events.iter().any(|r| r == reason),
                "no Event {reason} about Plugin {name}: {events:?}"
            );
        }
        cx.step(format!("Events about the Plugin: {events:?}"));

        cx.delete(&plugins_kind(), &name).await?;
        cx.wait_for_log(&["unloaded plugin podset"], FOLLOW_TIMEOUT)
            .await?;
        cx.create(
            json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
                         "metadata": {"name": "after"}, "spec": {"size": 1}}),
        )
        .await?;
        tokio::time::sleep(Duration::from_secs(5)).await;
        ensure!(
            cx.get(&deployments, "after").await?.is_none(),
            "a deleted Plugin still reconciles"
        );
        cx.step("the Plugin deleted: its controller stopped");
        Ok(())
    });
}

/// A private registry (TLS from a test CA, basic auth): a Plugin without
/// credentials is refused with PullUnauthorized, and naming a docker config
/// Secret in spec.pullSecrets serves it.
#[test]
fn a_private_registry_is_reached_with_a_pull_secret() {
    const TEST: &str = "a_private_registry_is_reached_with_a_pull_secret";
    if skip(SUITE.name, TEST, Mode::AuthTls) {
        return;
    }
    SUITE.run(TEST, async |cx| {
        use reconciler_tests::oci_registry::{PASSWORD, USER};
        let registry = Registry::start(Mode::AuthTls);
        cx.install_crds(&crd("podset.yaml")).await?;
        cx.install_crds(&crd("plugin.yaml")).await?;
        let credentials = registry.docker_config(USER, PASSWORD);
        let reference = registry.reference("private/podset:1");
        let ca = registry.ca_file().display().to_string();
        let file = example_plugin("podset").display().to_string();
        let out = cx
            .host_command()
            .args(["push", &file, &reference, "--registry-ca", &ca])
            .env("DOCKER_CONFIG", credentials.path())
            .output()?;
        ensure!(
            out.status.success(),
            "push: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let config = std::fs::read_to_string(credentials.path().join("config.json"))?;
        cx.create(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "registry-login"},
                         "type": "kubernetes.io/dockerconfigjson",
                         "stringData": {".dockerconfigjson": config}}),
        )
        .await?;
        let namespace = cx.namespace.clone();
        let cache = cx.workdir().join("registry-cache").display().to_string();
        cx.start_host_with_args(
            &[],
            &[
                "--registry-cache",
                &cache,
                "--plugin-secrets-namespace",
                &namespace,
                "--registry-ca",
                &ca,
            ],
        )?;
        let name = format!("{namespace}-private");
        cx.create(json!({
            "apiVersion": "reconciler-host.io/v1alpha1", "kind": "Plugin",
            "metadata": {"name": name, "labels": {"reconciler-tests/namespace": namespace}},
            "spec": {"source": reference},
        }))
        .await?;
        wait_for_status(
            cx,
            &name,
            "Ready False PullUnauthorized",
            FOLLOW_TIMEOUT,
            |p| {
                is(p, "Ready", "False", "PullUnauthorized")
                    && is(p, "Loaded", "False", "PullUnauthorized")
            },
        )
        .await?;
        cx.step("no credentials: PullUnauthorized, nothing serves");
        cx.merge_patch(
            &plugins_kind(),
            &name,
            json!({"spec": {"pullSecrets": [{"name": "registry-login"}]}}),
        )
        .await?;
        let plugin = wait_for_status(
            cx,
            &name,
            "serving with the pull secret",
            LOAD_TIMEOUT,
            |p| is(p, "Ready", "True", "Serving") && p["status"]["observedGeneration"] == 2,
        )
        .await?;
        ensure!(
            plugin["status"]["pluginName"] == "podset",
            "{}",
            plugin["status"]
        );
        cx.step("spec.pullSecrets names the docker config Secret: podset serves");
        cx.delete(&plugins_kind(), &name).await?;
        Ok(())
    });
}

/// Points `repo:to` at the manifest `repo:from` names, byte for byte.
async fn retag(registry: &Registry, repo: &str, from: &str, to: &str) -> Result<()> {
    let client = oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    });
    let source: oci_client::Reference = format!("{}/{repo}:{from}", registry.host).parse()?;
    let target: oci_client::Reference = format!("{}/{repo}:{to}", registry.host).parse()?;
    let media_type = oci_client::manifest::OCI_IMAGE_MEDIA_TYPE;
    let (bytes, _) = client
        .pull_manifest_raw(
            &source,
            &oci_client::secrets::RegistryAuth::Anonymous,
            &[media_type],
        )
        .await?;
    client
        .push_manifest_raw(&target, bytes, http::HeaderValue::from_static(media_type))
        .await?;
    Ok(())
}

/// The layer digest of `repo@digest`, read from the registry.
async fn registry_layer(registry: &Registry, repo: &str, digest: &str) -> Result<String> {
    let client = oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    });
    let reference: oci_client::Reference = format!("{}/{repo}@{digest}", registry.host).parse()?;
    let (manifest, _) = client
        .pull_image_manifest(&reference, &oci_client::secrets::RegistryAuth::Anonymous)
        .await?;
    Ok(manifest.layers[0].digest.clone())
}

/// The reasons of the Events about Plugin `name` (cluster-scoped: in `default`).
async fn plugin_events(cx: &RealCluster, name: &str) -> Result<Vec<String>> {
    let api: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(cx.client.clone(), "default");
    let list = api
        .list(&kube::api::ListParams::default().fields(&format!("regarding.name={name}")))
        .await?;
    Ok(list.items.into_iter().filter_map(|e| e.reason).collect())
}
