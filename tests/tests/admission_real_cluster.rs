//! Admission against a real API server: `reconciler-host run` serves the
//! webhooks over HTTPS on 127.0.0.1 and registers them by URL; the API
//! server calls them for the test's namespace.
//!
//! Skipped (passing, with a SKIPPED line) unless `RECONCILER_E2E=1` and
//! `KUBECONFIG` are set:
//!
//! ```text
//! scripts/build-plugins
//! eval "$(../shared/kube/kube up)"
//! RECONCILER_E2E=1 cargo test -p reconciler-tests --test admission_real_cluster -- --nocapture
//! ```
//!
//! The webhook configurations are cluster-scoped: each test names them
//! after its namespace (`--admission-webhook-prefix`), they select only the
//! test's namespace, and the test deletes them at the end.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use reconciler_host::admission::serving_cert::ServingCert;
use reconciler_sdk::KindRef;
use reconciler_sdk::k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use reconciler_sdk::k8s_openapi::jiff::Timestamp;
use reconciler_tests::real_cluster::{Probe, RealCluster, Suite};
use reconciler_tests::{example_plugin, https_client, root, test_plugin};
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

const SUITE: Suite = Suite {
    name: "admission_real_cluster",
    host_binary: env!("CARGO_BIN_EXE_reconciler-host-under-test"),
};

const WAIT: Duration = Duration::from_secs(60);
const PREFIX_LABEL: &str = "reconciler-host.io/webhook-prefix";

fn free_port() -> Result<u16> {
    Ok(reconciler_tests::free_loopback_port()?)
}

/// Starts the host with admission on a free port of 127.0.0.1, its
/// certificate generated into a Secret of the test's namespace; returns the
/// webhook prefix.
fn start_host_with_admission(
    cx: &mut RealCluster,
    plugins: &[std::path::PathBuf],
) -> Result<String> {
    start_host_with_admission_and(cx, plugins, &[])
}

/// [`start_host_with_admission`] with more flags for `run`.
fn start_host_with_admission_and(
    cx: &mut RealCluster,
    plugins: &[std::path::PathBuf],
    more: &[&str],
) -> Result<String> {
    start_host_with_admission_on(cx, free_port()?, plugins, more)
}

/// [`start_host_with_admission_and`] on a given port of 127.0.0.1.
fn start_host_with_admission_on(
    cx: &mut RealCluster,
    port: u16,
    plugins: &[std::path::PathBuf],
    more: &[&str],
) -> Result<String> {
    let prefix = format!("e2e-{}", cx.namespace);
    let mut args = admission_flags(cx, port, &prefix);
    args.extend(more.iter().map(ToString::to_string));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    cx.start_host_with_args(plugins, &args)?;
    Ok(prefix)
}

/// The flags of a host serving admission on 127.0.0.1:`port`, registered by
/// URL under `prefix`, its certificate in a Secret of the test's namespace.
fn admission_flags(cx: &RealCluster, port: u16, prefix: &str) -> Vec<String> {
    [
        "--admission-listen",
        &format!("127.0.0.1:{port}"),
        "--admission-url",
        &format!("https://127.0.0.1:{port}"),
        "--admission-cert-secret",
        &format!("{}/admission-tls", cx.namespace),
        "--admission-webhook-prefix",
        prefix,
    ]
    .map(ToString::to_string)
    .to_vec()
}

/// Deletes the test's webhook configurations (they outlive its namespace).
async fn remove_configurations(cx: &RealCluster, prefix: &str) -> Result<()> {
    let selector = ListParams::default().labels(&format!("{PREFIX_LABEL}={prefix}"));
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(cx.client.clone());
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(cx.client.clone());
    validating
        .delete_collection(&DeleteParams::default(), &selector)
        .await?;
    mutating
        .delete_collection(&DeleteParams::default(), &selector)
        .await?;
    Ok(())
}

/// Waits until the validating configuration of `plugin` has `policy`.
async fn wait_for_configuration(
    cx: &RealCluster,
    prefix: &str,
    plugin: &str,
    policy: &str,
) -> Result<()> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(cx.client.clone());
    let name = format!("{prefix}-{plugin}");
    cx.wait_for(
        &format!("ValidatingWebhookConfiguration {name} with failurePolicy {policy}"),
        WAIT,
        async || {
            Ok(match api.get_opt(&name).await? {
                Some(c) => {
                    let seen = c
                        .webhooks
                        .as_ref()
                        .and_then(|w| w.first())
                        .and_then(|w| w.failure_policy.clone())
                        .unwrap_or_default();
                    if seen == policy {
                        Probe::Ready(())
                    } else {
                        Probe::Pending(format!("failurePolicy {seen}"))
                    }
                }
                None => Probe::Pending("absent".into()),
            })
        },
    )
    .await
}

/// Waits until the API server calls the kubernetescluster plugin's
/// defaulting webhook: it takes up a configuration a moment after the
/// configuration is stored, so a create right after `wait_for_configuration`
/// may still go undefaulted. A dry-run create shows when it is called.
async fn wait_for_defaulting(cx: &RealCluster) -> Result<()> {
    let probe = cluster("defaulting-probe", 3);
    let kind = KindRef::of_object(&probe).context("a kind")?;
    let api: Api<DynamicObject> = cx.api(&kind).await?;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    cx.wait_for(
        "the API server to call the defaulting webhook",
        WAIT,
        async || {
            Ok(match answered_create(cx, &api, &probe, &dry_run).await? {
                Ok(created) if created["spec"]["version"] == "1.33" => Probe::Ready(()),
                Ok(created) => {
                    Probe::Pending(format!("a dry run not defaulted: {}", created["spec"]))
                }
                Err(denied) => Probe::Pending(format!("a dry run denied: {denied}")),
            })
        },
    )
    .await
}

/// Waits until `plugin` has no configuration of either kind.
async fn wait_for_no_configuration(cx: &RealCluster, prefix: &str, plugin: &str) -> Result<()> {
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(cx.client.clone());
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(cx.client.clone());
    let name = format!("{prefix}-{plugin}");
    cx.wait_for(
        &format!("the webhook configurations {name} to be removed"),
        WAIT,
        async || {
            let left = [
                validating.get_opt(&name).await?.map(|_| "validating"),
                mutating.get_opt(&name).await?.map(|_| "mutating"),
            ];
            let left: Vec<&str> = left.into_iter().flatten().collect();
            Ok(if left.is_empty() {
                Probe::Ready(())
            } else {
                Probe::Pending(format!("still there: {}", left.join(", ")))
            })
        },
    )
    .await
}

/// Creates `object`, retrying while the API server cannot reach the webhook
/// yet (its configuration is new): returns the object, or the denial.
async fn try_create(cx: &RealCluster, object: &Value) -> Result<Result<Value, String>> {
    let kind = KindRef::of_object(object).context("a kind")?;
    let api: Api<DynamicObject> = cx.api(&kind).await?;
    answered_create(cx, &api, object, &PostParams::default()).await
}

/// `api.create(object)` with `params`, retried while the API server cannot
/// reach the webhook: the stored (or dry-run) form, or the denial.
async fn answered_create(
    cx: &RealCluster,
    api: &Api<DynamicObject>,
    object: &Value,
    params: &PostParams,
) -> Result<Result<Value, String>> {
    let body: DynamicObject = serde_json::from_value(object.clone())?;
    cx.wait_for(
        "the API server to answer a create",
        WAIT,
        async || match api.create(params, &body).await {
            Ok(created) => Ok(Probe::Ready(Ok(serde_json::to_value(created)?))),
            Err(kube::Error::Api(e)) if e.message.contains("failed calling webhook") => {
                Ok(Probe::Pending(e.message))
            }
            Err(kube::Error::Api(e)) => Ok(Probe::Ready(Err(e.message))),
            Err(e) => Err(e.into()),
        },
    )
    .await
}

fn cluster(name: &str, masters: i64) -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "KubernetesCluster",
        "metadata": {"name": name}, "spec": {"masters": masters, "workers": 1}})
}

fn hostile(name: &str, mode: &str) -> Value {
    json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
        "metadata": {"name": name}, "spec": {"mode": mode}})
}

#[test]
fn the_api_server_denies_a_change_of_masters_and_gets_defaults() {
    SUITE.run(
        "the_api_server_denies_a_change_of_masters_and_gets_defaults",
        async |cx| {
            cx.install_crds(&root().join("crds/kubernetescluster.yaml"))
                .await?;
            let prefix = start_host_with_admission(cx, &[example_plugin("kubernetescluster")])?;
            let result = async {
                wait_for_configuration(cx, &prefix, "kubernetescluster", "Fail").await?;
                wait_for_defaulting(cx).await?;
                let created = match try_create(cx, &cluster("prod", 3)).await? {
                    Ok(created) => created,
                    Err(denied) => bail!("a valid cluster was denied: {denied}"),
                };
                if created["spec"]["version"] != "1.33" {
                    bail!("defaulting did not fill spec.version: {}", created["spec"]);
                }
                cx.step("created with spec.version defaulted to 1.33");
                let kind = KindRef::new("example.com", "v1alpha1", "KubernetesCluster");
                let denied = cx
                    .merge_patch(&kind, "prod", json!({"spec": {"masters": 5}}))
                    .await
                    .err()
                    .context("an update of spec.masters was admitted")?;
                let message = format!("{denied:#}");
                if !message.contains(
                    "spec.masters cannot change after creation: it is 3, the update asks for 5",
                ) {
                    bail!("not the plugin's message: {message}");
                }
                cx.step(format!("update denied: {message}"));
                let stored = cx.must_get(&kind, "prod").await?;
                if stored["spec"]["masters"] != 3 {
                    bail!("the denied change was stored: {}", stored["spec"]);
                }
                cx.merge_patch(&kind, "prod", json!({"spec": {"workers": 4}}))
                    .await
                    .context("another change is admitted")?;
                Ok(())
            }
            .await;
            remove_configurations(cx, &prefix).await?;
            result
        },
    );
}

/// The opt-out label is its namespace owner's to set, not an object's
/// writer's: a KubernetesCluster created with it is still defaulted, and
/// its forbidden change of `spec.masters` is still refused by the webhook
/// the API server calls.
#[test]
fn an_object_labelled_to_opt_out_still_goes_through_admission() {
    SUITE.run(
        "an_object_labelled_to_opt_out_still_goes_through_admission",
        async |cx| {
            cx.install_crds(&root().join("crds/kubernetescluster.yaml"))
                .await?;
            let prefix = start_host_with_admission(cx, &[example_plugin("kubernetescluster")])?;
            let result = async {
                wait_for_configuration(cx, &prefix, "kubernetescluster", "Fail").await?;
                wait_for_defaulting(cx).await?;
                let mut labelled = cluster("labelled", 3);
                labelled["metadata"]["labels"] =
                    json!({"reconciler-host.io/admission": "disabled"});
                let created = match try_create(cx, &labelled).await? {
                    Ok(created) => created,
                    Err(denied) => bail!("a valid cluster was denied: {denied}"),
                };
                if created["spec"]["version"] != "1.33" {
                    bail!(
                        "the labelled create skipped defaulting: {}",
                        created["spec"]
                    );
                }
                let kind = KindRef::new("example.com", "v1alpha1", "KubernetesCluster");
                let denied = cx
                    .merge_patch(&kind, "labelled", json!({"spec": {"masters": 5}}))
                    .await
                    .err()
                    .context("the label let an update of spec.masters through")?;
                let message = format!("{denied:#}");
                if !message.contains("spec.masters cannot change after creation") {
                    bail!("not the plugin's message: {message}");
                }
                let stored = cx.must_get(&kind, "labelled").await?;
                if stored["spec"]["masters"] != 3 {
                    bail!("the denied change was stored: {}", stored["spec"]);
                }
                cx.step(format!(
                    "the labelled cluster's change was denied: {message}"
                ));
                Ok(())
            }
            .await;
            remove_configurations(cx, &prefix).await?;
            result
        },
    );
}

/// With `--admission-client-ca`, a real API server given a client
/// certificate for the webhook's host, by the AdmissionConfiguration and
/// kubeconfig docs/cluster.md shows, is served: it gets defaults and the
/// plugin's denial. A caller without that certificate gets no answer.
#[test]
fn an_api_server_presenting_the_client_certificate_is_served_and_no_one_else() {
    let test = "an_api_server_presenting_the_client_certificate_is_served_and_no_one_else";
    // The API server reads its admission configuration at start: written
    // before its control plane comes up, for the port the host will take.
    let files = tempfile::tempdir().expect("a directory for the API server's files");
    let port = free_port().expect("a free port");
    let (ca_pem, identity) =
        https_client::ClientIdentity::signed_by_new_ca("kube-apiserver").expect("certificates");
    let path = |name: &str| files.path().join(name).display().to_string();
    let written = [
        ("callers-ca.crt", ca_pem),
        ("apiserver-webhooks.crt", identity.cert_pem.clone()),
        ("apiserver-webhooks.key", identity.key_pem.clone()),
        (
            "config.yaml",
            ["ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"]
                .iter()
                .fold(
                    "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n"
                        .to_string(),
                    |yaml, plugin| {
                        yaml + &format!(
                            "  - name: {plugin}\n    configuration:\n      apiVersion: apiserver.config.k8s.io/v1\n      kind: WebhookAdmissionConfiguration\n      kubeConfigFile: {}\n",
                            path("webhooks.kubeconfig")
                        )
                    },
                ),
        ),
        (
            "webhooks.kubeconfig",
            format!(
                "apiVersion: v1\nkind: Config\nusers:\n  - name: 127.0.0.1:{port}\n    user:\n      client-certificate: {}\n      client-key: {}\n",
                path("apiserver-webhooks.crt"),
                path("apiserver-webhooks.key")
            ),
        ),
    ];
    for (name, text) in &written {
        std::fs::write(files.path().join(name), text).expect("writing the API server's files");
    }
    let flag = format!("--admission-control-config-file={}", path("config.yaml"));
    SUITE.run_on_own_control_plane(test, &[("APISERVER_EXTRA", &flag)], async |cx| {
        cx.install_crds(&root().join("crds/kubernetescluster.yaml"))
            .await?;
        let callers = path("callers-ca.crt");
        let prefix = start_host_with_admission_on(
            cx,
            port,
            &[example_plugin("kubernetescluster")],
            &["--admission-client-ca", &callers],
        )?;
        wait_for_configuration(cx, &prefix, "kubernetescluster", "Fail").await?;
        wait_for_defaulting(cx).await?;
        let created = match try_create(cx, &cluster("prod", 3)).await? {
            Ok(created) => created,
            Err(denied) => bail!("the API server's create was not admitted: {denied}"),
        };
        if created["spec"]["version"] != "1.33" {
            bail!("defaulting did not fill spec.version: {}", created["spec"]);
        }
        let kind = KindRef::new("example.com", "v1alpha1", "KubernetesCluster");
        let denied = cx
            .merge_patch(&kind, "prod", json!({"spec": {"masters": 5}}))
            .await
            .err()
            .context("an update of spec.masters was admitted")?;
        let message = format!("{denied:#}");
        if !message.contains("spec.masters cannot change after creation") {
            bail!("not the plugin's message: {message}");
        }
        cx.step("the API server, presenting its certificate, got defaults and the denial");

        let secret = KindRef::new("", "v1", "Secret");
        let served = cx.must_get(&secret, "admission-tls").await?;
        let bundle = secret_text(&served, "ca.crt");
        let request = "POST /admission/kubernetescluster/validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        match https_client::send_as(addr, &bundle, None, request).await {
            Ok((code, body)) => bail!("a caller without a certificate was answered: {code} {body}"),
            Err(e) if format!("{e:#}").contains("alert") => {}
            Err(e) => bail!("not refused by the TLS handshake: {e:#}"),
        }
        cx.step("a caller without the certificate was refused");
        remove_configurations(cx, &prefix).await
    });
}

/// Every replica serves admission, leader or not: a host that never gets
/// the Lease (another holder keeps it for an hour) still answers the API
/// server's webhook calls, and reconciles nothing.
#[test]
fn a_standby_replica_serves_admission_and_reconciles_nothing() {
    SUITE.run(
        "a_standby_replica_serves_admission_and_reconciles_nothing",
        async |cx| {
            cx.install_crds(&root().join("crds/kubernetescluster.yaml"))
                .await?;
            let leases = KindRef::new("coordination.k8s.io", "v1", "Lease");
            let renewed = Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
                .to_string();
            cx.create(
                json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "admission-standby"},
                "spec": {"holderIdentity": "another-replica", "leaseDurationSeconds": 3600,
                    "acquireTime": renewed, "renewTime": renewed}}),
            )
            .await
            .context("the Lease another replica holds")?;
            let namespace = cx.namespace.clone();
            let prefix = start_host_with_admission_and(
                cx,
                &[example_plugin("kubernetescluster")],
                &[
                    "--leader-election",
                    "--leader-election-namespace",
                    &namespace,
                    "--leader-election-id",
                    "admission-standby",
                ],
            )?;
            let result = async {
                wait_for_configuration(cx, &prefix, "kubernetescluster", "Fail").await?;
                wait_for_defaulting(cx).await?;
                let created = match try_create(cx, &cluster("standby", 3)).await? {
                    Ok(created) => created,
                    Err(denied) => bail!("a valid cluster was denied: {denied}"),
                };
                if created["spec"]["version"] != "1.33" {
                    bail!(
                        "the standby did not default spec.version: {}",
                        created["spec"]
                    );
                }
                let kind = KindRef::new("example.com", "v1alpha1", "KubernetesCluster");
                let denied = cx
                    .merge_patch(&kind, "standby", json!({"spec": {"masters": 5}}))
                    .await
                    .err()
                    .context("the standby admitted an update of spec.masters")?;
                let message = format!("{denied:#}");
                if !message.contains("spec.masters cannot change after creation") {
                    bail!("not the plugin's message: {message}");
                }
                cx.step("the standby defaulted the create and denied the update");
                // A leader would have added its finalizer at the first
                // reconcile; the standby must not have reconciled at all.
                tokio::time::sleep(Duration::from_secs(2)).await;
                let stored = cx.must_get(&kind, "standby").await?;
                if stored["metadata"]["finalizers"].is_array() || stored.get("status").is_some() {
                    bail!("the standby reconciled: {stored}");
                }
                let lease = cx.must_get(&leases, "admission-standby").await?;
                if lease["spec"]["holderIdentity"] != "another-replica" {
                    bail!("the Lease changed hands: {}", lease["spec"]);
                }
                Ok(())
            }
            .await;
            remove_configurations(cx, &prefix).await?;
            result
        },
    );
}

/// Fail, then Ignore after a hot reload of the same file; then the file is
/// removed and its webhook configurations go with it.
#[test]
fn a_trapping_plugin_gets_its_failure_policy_across_a_hot_reload() {
    SUITE.run(
        "a_trapping_plugin_gets_its_failure_policy_across_a_hot_reload",
        async |cx| {
            cx.install_crds(&root().join("tests/crds/hostile.yaml"))
                .await?;
            let prefix = start_host_with_admission(cx, &[test_plugin("hostile")])?;
            let result = async {
                wait_for_configuration(cx, &prefix, "hostile", "Fail").await?;
                match try_create(cx, &hostile("trap", "admit-trap")).await? {
                    Ok(_) => bail!("a trapping plugin under Fail admitted the object"),
                    Err(message) if message.contains("failure policy Fail") => {
                        cx.step(format!("denied under Fail: {message}"));
                    }
                    Err(message) => bail!("denied, but not by the failure policy: {message}"),
                }
                // The same file name, a version whose policy is Ignore.
                let ignore = std::fs::read(test_plugin("hostile-admission-ignore"))?;
                cx.host()?.put_plugin("hostile.wasm", &ignore)?;
                wait_for_configuration(cx, &prefix, "hostile", "Ignore").await?;
                let admitted = cx
                    .wait_for(
                        "the reloaded plugin to admit under Ignore",
                        WAIT,
                        async || {
                            Ok(
                                match try_create(cx, &hostile("trap", "admit-trap")).await? {
                                    Ok(created) => Probe::Ready(created),
                                    Err(message) => Probe::Pending(message),
                                },
                            )
                        },
                    )
                    .await?;
                cx.step(format!(
                    "admitted under Ignore after the reload: {}",
                    admitted["metadata"]["name"]
                ));
                match try_create(cx, &hostile("denied", "admit-deny")).await? {
                    Ok(_) => bail!("the reloaded plugin's denial was not applied"),
                    Err(message) if message.contains("hostile says no") => {
                        cx.step(format!("denied by the reloaded plugin: {message}"));
                    }
                    Err(message) => bail!("denied with another message: {message}"),
                }
                // Removing the plugin removes its webhook: the configuration
                // goes, and what it denied is admitted.
                let file = cx.host()?.plugins_dir().join("hostile.wasm");
                std::fs::remove_file(&file)
                    .with_context(|| format!("removing {}", file.display()))?;
                wait_for_no_configuration(cx, &prefix, "hostile").await?;
                cx.step("the configuration is gone with the plugin");
                let admitted = cx
                    .wait_for(
                        "the API server to stop calling the removed plugin",
                        WAIT,
                        async || {
                            Ok(
                                match try_create(cx, &hostile("after", "admit-deny")).await? {
                                    Ok(created) => Probe::Ready(created),
                                    Err(message) => Probe::Pending(message),
                                },
                            )
                        },
                    )
                    .await?;
                cx.step(format!(
                    "admitted once the plugin was removed: {}",
                    admitted["metadata"]["name"]
                ));
                Ok(())
            }
            .await;
            remove_configurations(cx, &prefix).await?;
            result
        },
    );
}

/// A version that fails to load leaves the last good one answering: its
/// webhook configuration stays, and the API server still gets its denials.
#[test]
fn a_broken_reload_keeps_the_last_good_version_answering_admission() {
    SUITE.run(
        "a_broken_reload_keeps_the_last_good_version_answering_admission",
        async |cx| {
            cx.install_crds(&root().join("tests/crds/hostile.yaml"))
                .await?;
            let prefix = start_host_with_admission(cx, &[test_plugin("hostile")])?;
            let result = async {
                wait_for_configuration(cx, &prefix, "hostile", "Fail").await?;
                match try_create(cx, &hostile("before", "admit-deny")).await? {
                    Err(message) if message.contains("hostile says no") => {
                        cx.step(format!("denied by the plugin: {message}"));
                    }
                    other => bail!("expected the plugin's denial, got {other:?}"),
                }
                cx.host()?
                    .put_plugin("hostile.wasm", b"\0asm this is not a component")?;
                let line = cx
                    .wait_for_log(
                        &["hostile.wasm", "whatever was serving keeps serving"],
                        WAIT,
                    )
                    .await?;
                cx.step(format!("the broken version was refused: {line}"));
                // Admission reacts to a directory change within a second;
                // give a configuration that was about to go the time to go.
                tokio::time::sleep(Duration::from_secs(3)).await;
                let api: Api<ValidatingWebhookConfiguration> = Api::all(cx.client.clone());
                let name = format!("{prefix}-hostile");
                if api.get_opt(&name).await?.is_none() {
                    bail!("the failed reload removed {name}");
                }
                match try_create(cx, &hostile("after", "admit-deny")).await? {
                    Err(message) if message.contains("hostile says no") => {
                        cx.step(format!("still denied by the last good version: {message}"));
                    }
                    other => bail!("the last good version no longer answers: {other:?}"),
                }
                Ok(())
            }
            .await;
            remove_configurations(cx, &prefix).await?;
            result
        },
    );
}

/// A client to the host's webhook port that trusts the CA bundle the host
/// put in its configuration, as the API server does.
async fn webhook_connector(cx: &RealCluster, configuration: &str) -> Result<TlsConnector> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(cx.client.clone());
    let config = api.get(configuration).await?;
    let bundle = config
        .webhooks
        .and_then(|w| w.into_iter().next())
        .and_then(|w| w.client_config.ca_bundle)
        .context("a caBundle in the configuration")?;
    https_client::connector(&bundle.0)
}

async fn connect(addr: SocketAddr, tls: &TlsConnector) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    tls.connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
}

/// Until `until`: connects, announces a body of the largest size, and
/// sends it a byte per half second; connects again whenever the host
/// closes the connection. Returns how many connections it opened.
async fn drip(addr: SocketAddr, tls: TlsConnector, path: String, until: Instant) -> usize {
    let mut opened = 0;
    while Instant::now() < until {
        let Ok(mut conn) = connect(addr, &tls).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        opened += 1;
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{{",
            4 << 20
        );
        if conn.write_all(head.as_bytes()).await.is_err() {
            continue;
        }
        while Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if conn.write_all(b" ").await.is_err() || conn.flush().await.is_err() {
                break;
            }
        }
    }
    opened
}

/// Until `until`: sends `body` whole, waits for the answer, and again.
async fn flood(
    addr: SocketAddr,
    tls: TlsConnector,
    path: String,
    body: Arc<Vec<u8>>,
    until: Instant,
) {
    while Instant::now() < until {
        let Ok(mut conn) = connect(addr, &tls).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        if conn.write_all(head.as_bytes()).await.is_err() || conn.write_all(&body).await.is_err() {
            continue;
        }
        let mut answer = Vec::new();
        let _ = conn.read_to_end(&mut answer).await;
    }
}

/// An AdmissionReview of just under 4 MiB whose object is an array of
/// zeros: a few bytes each as text, tens of bytes each as a parsed tree.
fn numbers_review() -> Vec<u8> {
    let mut body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"flood","kind":{"group":"hostile.example.com","version":"v1","kind":"Hostile"},"operation":"CREATE","object":["#.to_vec();
    while body.len() < (4 << 20) - 64 {
        body.extend_from_slice(b"0,");
    }
    body.extend_from_slice(b"0]}}");
    body
}

/// The host's peak resident memory, from /proc.
fn peak_rss_mib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .context("VmHWM in /proc/PID/status")?
        .parse()?;
    Ok(kib / 1024)
}

/// 300 connections that drip their bodies and 10 that send 4 MiB reviews
/// of small numbers, over and over: the API server's own call still gets
/// the plugin's answer, and the host stays far below a pod's memory limit.
#[test]
fn slow_and_hostile_clients_do_not_keep_the_api_server_out() {
    SUITE.run(
        "slow_and_hostile_clients_do_not_keep_the_api_server_out",
        async |cx| {
            cx.install_crds(&root().join("tests/crds/hostile.yaml"))
                .await?;
            let port = free_port()?;
            let prefix = start_host_with_admission_on(cx, port, &[test_plugin("hostile")], &[])?;
            let result = async {
                wait_for_configuration(cx, &prefix, "hostile", "Fail").await?;
                let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
                let tls = webhook_connector(cx, &format!("{prefix}-hostile")).await?;
                let path = "/admission/hostile/validate".to_string();
                let until = Instant::now() + Duration::from_secs(40);
                let mut drippers = Vec::new();
                for _ in 0..300 {
                    drippers.push(tokio::spawn(drip(addr, tls.clone(), path.clone(), until)));
                }
                let body = Arc::new(numbers_review());
                let mut floods = Vec::new();
                for _ in 0..10 {
                    floods.push(tokio::spawn(flood(
                        addr,
                        tls.clone(),
                        path.clone(),
                        body.clone(),
                        until,
                    )));
                }
                // Let them take every slot first.
                tokio::time::sleep(Duration::from_secs(5)).await;
                cx.step("300 drippers and 10 floods running");
                let kind = KindRef::new("hostile.example.com", "v1", "Hostile");
                let api: Api<DynamicObject> = cx.api(&kind).await?;
                for attempt in 0..3 {
                    let object: DynamicObject =
                        serde_json::from_value(hostile(&format!("amid-{attempt}"), "admit-deny"))?;
                    match api.create(&PostParams::default(), &object).await {
                        Err(kube::Error::Api(e)) if e.message.contains("hostile says no") => {
                            cx.step(format!("the API server got the plugin's answer: {}", e.message));
                        }
                        other => bail!(
                            "the API server's call was not answered by the plugin amid the flood: {other:?}"
                        ),
                    }
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
                let mut opened = 0;
                for dripper in drippers {
                    opened += dripper.await?;
                }
                for flood in floods {
                    flood.await?;
                }
                let peak = peak_rss_mib(cx.host()?.pid())?;
                cx.step(format!(
                    "drippers opened {opened} connections; the host's peak RSS is {peak} MiB"
                ));
                if peak >= 256 {
                    bail!("the host's peak RSS reached {peak} MiB, past deploy/'s 256Mi limit");
                }
                Ok(())
            }
            .await;
            remove_configurations(cx, &prefix).await?;
            result
        },
    );
}

/// The PEM texts of `secret`'s data, by key.
fn secret_text(secret: &Value, key: &str) -> String {
    use base64::Engine as _;
    secret["data"][key]
        .as_str()
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

/// Whether the webhook server on 127.0.0.1:`port` presents a certificate
/// that `ca_pem` (and nothing else) vouches for.
async fn serves_certificate_of(port: u16, ca_pem: &str) -> bool {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()).flatten() {
        let _ = roots.add(cert);
    }
    let Ok(config) = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions() else {
        return false;
    };
    let config = config.with_root_certificates(roots).with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let Ok(tcp) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    let name = ServerName::try_from("127.0.0.1").expect("an IP address");
    connector.connect(name, tcp).await.is_ok()
}

/// The caBundle of `prefix`'s validating configuration of `plugin`, PEM.
async fn applied_bundle(cx: &RealCluster, prefix: &str, plugin: &str) -> Result<String> {
    use base64::Engine as _;
    let api: Api<ValidatingWebhookConfiguration> = Api::all(cx.client.clone());
    let Some(config) = api.get_opt(&format!("{prefix}-{plugin}")).await? else {
        return Ok(String::new());
    };
    let bundle = config
        .webhooks
        .as_ref()
        .and_then(|w| w.first())
        .and_then(|w| w.client_config.ca_bundle.clone())
        .map(|b| b.0)
        .unwrap_or_default();
    // Some clients hand the bundle back decoded, others still base64.
    Ok(
        match base64::engine::general_purpose::STANDARD.decode(&bundle) {
            Ok(decoded) if decoded.starts_with(b"-----BEGIN") => {
                String::from_utf8_lossy(&decoded).into_owned()
            }
            _ => String::from_utf8_lossy(&bundle).into_owned(),
        },
    )
}

/// Two replicas share a generated certificate ten days from expiry: it is
/// renewed through their Secret, both replicas trust both CAs before either
/// serves the new certificate, both end up serving it, and every create
/// meanwhile is answered by both webhooks (a TLS failure would deny it:
/// the policy is Fail). Afterwards the configurations stay put instead of
/// being rewritten by one replica after the other.
#[test]
fn an_expiring_certificate_is_renewed_through_the_shared_secret_without_a_failed_call() {
    SUITE.run(
        "an_expiring_certificate_is_renewed_through_the_shared_secret_without_a_failed_call",
        async |cx| {
            cx.install_crds(&root().join("crds/kubernetescluster.yaml"))
                .await?;
            let day = Duration::from_secs(24 * 3600);
            let now = std::time::SystemTime::now();
            let old = ServingCert::generate_valid(&["127.0.0.1".to_string()], now - 20 * day, 30 * day)?;
            cx.create(json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": "admission-tls"},
                "stringData": {"tls.crt": old.cert_pem, "tls.key": old.key_pem, "ca.crt": old.ca_bundle_pem}}))
                .await
                .context("the Secret with an expiring certificate")?;
            let plugin = example_plugin("kubernetescluster");
            let mut replicas = Vec::new();
            let mut prefixes = Vec::new();
            for name in ["a", "b"] {
                let port = free_port()?;
                let prefix = format!("e2e-{}-{name}", cx.namespace);
                let mut args = admission_flags(cx, port, &prefix);
                args.extend(["--admission-resync-secs".to_string(), "1".to_string()]);
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                replicas.push((cx.start_replica(&format!("replica-{name}"), std::slice::from_ref(&plugin), &args)?, port));
                prefixes.push(prefix);
            }
            let result = async {
                let secrets = KindRef::new("", "v1", "Secret");
                for prefix in &prefixes {
                    wait_for_configuration(cx, prefix, "kubernetescluster", "Fail").await?;
                    wait_for_defaulting(cx).await?;
                }
                if let Err(denied) = try_create(cx, &cluster("before", 3)).await? {
                    bail!("a valid cluster was denied: {denied}");
                }
                let mut created = 0;
                let renewed = cx
                    .wait_for("both replicas to serve a renewed certificate", WAIT, async || {
                        // Every create on the way must be answered by both.
                        let name = format!("during-{created}");
                        created += 1;
                        let kind = KindRef::new("example.com", "v1alpha1", "KubernetesCluster");
                        let api: Api<DynamicObject> = cx.api(&kind).await?;
                        let mut body = cluster(&name, 3);
                        body["metadata"]["namespace"] = json!(cx.namespace);
                        let body: DynamicObject = serde_json::from_value(body)?;
                        if let Err(e) = api.create(&PostParams::default(), &body).await {
                            bail!("a create during the renewal failed: {e}");
                        }
                        let secret = cx.must_get(&secrets, "admission-tls").await?;
                        let (cert, bundle) = (secret_text(&secret, "tls.crt"), secret_text(&secret, "ca.crt"));
                        if cert == old.cert_pem {
                            return Ok(Probe::Pending("the Secret still serves the old certificate".into()));
                        }
                        let new = ServingCert { cert_pem: cert, key_pem: String::new(), ca_bundle_pem: bundle.clone() };
                        if new.not_after().is_none_or(|t| t < now + 300 * day) {
                            bail!("the renewed certificate expires too soon: {:?}", new.not_after());
                        }
                        let new_ca = bundle.split_inclusive("-----END CERTIFICATE-----\n").next().unwrap_or_default().to_string();
                        for (_, port) in &replicas {
                            if !serves_certificate_of(*port, &new_ca).await {
                                return Ok(Probe::Pending(format!("the replica on port {port} serves the old certificate")));
                            }
                        }
                        for prefix in &prefixes {
                            if applied_bundle(cx, prefix, "kubernetescluster").await? != bundle {
                                return Ok(Probe::Pending(format!("{prefix}'s caBundle is not the Secret's")));
                            }
                        }
                        Ok(Probe::Ready(bundle))
                    })
                    .await?;
                if !renewed.contains(old.ca_bundle_pem.trim()) {
                    bail!("the old CA left the bundle while it is still valid: {renewed}");
                }
                cx.step(format!("renewed; {created} creates answered on the way"));
                // Settled: several resyncs later, nothing rewrote the bundles.
                let validating: Api<ValidatingWebhookConfiguration> = Api::all(cx.client.clone());
                let mut versions = Vec::new();
                for prefix in &prefixes {
                    let c = validating.get(&format!("{prefix}-kubernetescluster")).await?;
                    versions.push(c.metadata.resource_version);
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
                for (prefix, version) in prefixes.iter().zip(&versions) {
                    let c = validating.get(&format!("{prefix}-kubernetescluster")).await?;
                    if &c.metadata.resource_version != version {
                        bail!("{prefix}'s configuration was rewritten after the renewal settled");
                    }
                }
                if let Err(denied) = try_create(cx, &cluster("after", 3)).await? {
                    bail!("a valid cluster was denied after the renewal: {denied}");
                }
                Ok(())
            }
            .await;
            drop(replicas);
            for prefix in &prefixes {
                remove_configurations(cx, prefix).await?;
            }
            result
        },
    );
}

/// Creates `object` in `namespace` without storing it (dry run: the API
/// server still calls the webhooks), retrying while the webhook cannot be
/// reached yet: the stored form, or the denial.
async fn try_dry_run(
    cx: &RealCluster,
    namespace: &str,
    object: &Value,
) -> Result<Result<Value, String>> {
    let kind = KindRef::of_object(object).context("a kind")?;
    let gvk = kube::api::GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
    let (resource, _) = kube::discovery::pinned_kind(&cx.client, &gvk).await?;
    let api: Api<DynamicObject> = Api::namespaced_with(cx.client.clone(), namespace, &resource);
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    answered_create(cx, &api, object, &params).await
}

/// The webhooks reach neither kube-system, nor the host's own namespace, nor
/// a namespace labelled to opt out, even where the host serves them; and
/// they are owned by the host's Namespace, so uninstalling (the Namespace
/// goes with `kubectl delete -k deploy/`) removes them instead of leaving a
/// Fail policy that denies its kind forever.
#[test]
fn the_webhooks_spare_kube_system_and_the_hosts_namespace_and_go_with_it() {
    SUITE.run(
        "the_webhooks_spare_kube_system_and_the_hosts_namespace_and_go_with_it",
        async |cx| {
            cx.install_crds(&root().join("tests/crds/hostile.yaml"))
                .await?;
            let home = format!("{}-home", cx.namespace);
            let opted_out = format!("{}-opted-out", cx.namespace);
            let namespaces = KindRef::new("", "v1", "Namespace");
            cx.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": home}}))
                .await?;
            cx.create(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": opted_out,
                "labels": {"reconciler-host.io/admission": "disabled"}}}),
            )
            .await?;
            let port = free_port()?;
            let prefix = format!("e2e-{}", cx.namespace);
            // Served everywhere the test looks, as a host serving every
            // namespace would be.
            let mut args = admission_flags(cx, port, &prefix);
            for namespace in ["kube-system", &home, &opted_out] {
                args.extend(["--namespace".to_string(), namespace.to_string()]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let host = cx.start_replica_with_env(
                "host",
                &[test_plugin("hostile")],
                &args,
                &[("POD_NAMESPACE", home.as_str())],
            )?;
            let result = async {
                wait_for_configuration(cx, &prefix, "hostile", "Fail").await?;
                let denied = hostile("denied", "admit-deny");
                match try_dry_run(cx, &cx.namespace, &denied).await? {
                    Err(message) if message.contains("hostile says no") => {}
                    other => bail!("the test's namespace is not served: {other:?}"),
                }
                for namespace in ["kube-system", home.as_str(), opted_out.as_str()] {
                    if let Err(message) = try_dry_run(cx, namespace, &denied).await? {
                        bail!("the webhook reached namespace {namespace}: {message}");
                    }
                }
                cx.step(
                    "kube-system, the host's namespace and a namespace that opted out are spared",
                );

                let api: Api<ValidatingWebhookConfiguration> = Api::all(cx.client.clone());
                let config = api.get(&format!("{prefix}-hostile")).await?;
                let uid = cx.must_get(&namespaces, &home).await?["metadata"]["uid"].clone();
                let owned = config
                    .metadata
                    .owner_references
                    .unwrap_or_default()
                    .iter()
                    .any(|o| o.kind == "Namespace" && o.name == home && json!(o.uid) == uid);
                if !owned {
                    bail!("the configuration is not owned by Namespace {home}");
                }
                drop(host);
                cx.delete(&namespaces, &home).await?;
                wait_for_no_configuration(cx, &prefix, "hostile").await?;
                cx.step("deleting the host's Namespace removed its configurations");
                Ok(())
            }
            .await;
            remove_configurations(cx, &prefix).await?;
            let _ = cx.delete(&namespaces, &opted_out).await;
            let _ = cx.delete(&namespaces, &home).await;
            result
        },
    );
}
