//! End to end against a real Kubernetes API server: `reconciler-host run`
//! with the compiled podset plugin, driven and observed through the API.
//!
//! Skipped (it passes, printing why) unless both `RECONCILER_E2E=1` and
//! `KUBECONFIG` are set. To run it:
//!
//! ```text
//! scripts/build-plugins
//! RECONCILER_E2E=1 KUBECONFIG=~/.kube/config \
//!     cargo test -p reconciler-host --test real_cluster -- --nocapture
//! ```
//!
//! What it does, in order:
//! 1. notes which CustomResourceDefinitions of `crds/` already exist;
//! 2. creates a namespace `reconciler-e2e-<random>` (server-generated name,
//!    labelled `pod-security.kubernetes.io/enforce: baseline`, which the
//!    busybox pods pass, for clusters that enforce "restricted" by default);
//! 3. starts `reconciler-host run --plugins-dir <tmp> --install-crds crds/
//!    --namespace <ns>`, the temporary plugins directory holding only
//!    `podset.wasm`, its log going to a file that is printed on failure;
//! 4. waits for every CRD of `crds/` to be Established (the ones it created
//!    must carry an Apply entry of field manager `reconciler-host`);
//! 5. creates PodSet `e2e` with `spec.size: 2` and checks the Deployment `e2e`:
//!    2 replicas, a controller ownerReference to the PodSet's uid, the labels
//!    the pods are selected by, and an Apply entry of `reconciler-host/podset`;
//! 6. waits for `status.podNames` to list 2 pods that exist in the namespace,
//!    written through the status subresource by `reconciler-host/podset`;
//! 7. patches `spec.size` to 3: the Deployment goes to 3 replicas and
//!    `status.podNames` to 3 existing pods;
//! 8. deletes the PodSet: it disappears (the plugin declares no finalizer) and
//!    the cluster's garbage collector deletes the Deployment;
//! 9. always, also after a failure: sends SIGTERM to the host and expects it
//!    to exit with code 0 within 30 s; deletes the namespace and waits until
//!    it is gone. A failure prints the host's log;
//! 10. the host ran with `--record`: every reconcile it made against the
//!     real cluster is a golden case, and `reconciler-host test` replays them
//!     all with the same answers.
//!
//! The CRDs stay installed: the real-cluster suites of the tests crate
//! (`tests/tests/real_cluster_*.rs`) apply the same ones and run at the same
//! time (the CI runs the whole workspace against one cluster, and libtest
//! runs tests in parallel); deleting a CRD would delete their objects under
//! them. Remove them by hand if you want them gone:
//! `kubectl delete -f crds/`.
//!
//! What it needs from the cluster:
//! - Kubernetes 1.28 or later, reached through `KUBECONFIG`'s current context
//!   with the right to create and delete CustomResourceDefinitions and
//!   namespaces, and in the namespace to manage PodSets, Deployments and
//!   Events and to list and watch Pods (the host runs with the same
//!   credentials);
//! - a running kube-controller-manager: the ReplicaSet controller creates the
//!   pods, the service-account controller the namespace's `default` account
//!   pods need, the garbage collector deletes the Deployment.
//! - Pods need not run: `status.podNames` names the pods that exist with the
//!   PodSet's labels, whatever their phase, so a node that cannot pull
//!   `busybox:1.36` (or no schedulable node at all) does not fail the test.
//! - No other podset controller (e.g. a host deployed from `deploy/`) watching
//!   the test namespace.
//!
//! CRDs of `crds/` that already existed are applied over by the host (field
//! manager `reconciler-host`). A run killed before its cleanup leaves its
//! namespace behind, labelled
//! `app.kubernetes.io/created-by=reconciler-host-e2e-test`.
//!
//! A run takes a minute or two, much of it waiting for the namespace to go:
//! running pods (`sleep` ignores SIGTERM) take their whole 30 s grace period.
#![cfg(unix)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use futures::FutureExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use serde::Deserialize as _;
use serde_json::json;

/// The CRD the podset plugin's primary kind comes from.
const PODSET_CRD: &str = "podsets.example.com";
/// The PodSet the test creates; the plugin names its Deployment the same.
const PODSET: &str = "e2e";
/// The field manager the host applies the plugin's objects and status with.
const PLUGIN_MANAGER: &str = "reconciler-host/podset";
/// The field manager the host installs CRDs with.
const CRD_MANAGER: &str = "reconciler-host";
/// The field manager of the test's own writes.
const TEST_MANAGER: &str = "reconciler-host-e2e-test";

const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// Host start-up (compiling the plugin) plus CRD installation.
const CRD_TIMEOUT: Duration = Duration::from_secs(120);
const SERVICE_ACCOUNT_TIMEOUT: Duration = Duration::from_secs(60);
/// A CRD just Established can still answer 404 for a moment.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
const DEPLOYMENT_TIMEOUT: Duration = Duration::from_secs(120);
/// Pods need only exist, but the ReplicaSet controller backs off on errors.
const POD_NAMES_TIMEOUT: Duration = Duration::from_secs(180);
const PODSET_GONE_TIMEOUT: Duration = Duration::from_secs(60);
const GARBAGE_COLLECTION_TIMEOUT: Duration = Duration::from_secs(120);
/// The host's default --shutdown-timeout-secs is 25.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Pods running `sleep` take their 30 s grace period to stop.
const NAMESPACE_GONE_TIMEOUT: Duration = Duration::from_secs(240);
/// How much of the host's log a failure prints.
const LOG_TAIL_LINES: usize = 400;

#[test]
fn podset_lifecycle_on_a_real_cluster() {
    common::run_or_skip(
        "real_cluster",
        "podset_lifecycle_on_a_real_cluster",
        "To run it against a cluster: scripts/build-plugins, then RECONCILER_E2E=1 KUBECONFIG=~/.kube/config cargo test -p reconciler-host --test real_cluster -- --nocapture",
        end_to_end,
    );
}

/// Progress lines, visible with `--nocapture` and on failure.
fn step(message: impl std::fmt::Display) {
    static START: OnceLock<Instant> = OnceLock::new();
    let elapsed = START.get_or_init(Instant::now).elapsed();
    eprintln!("[real_cluster {:6.1}s] {message}", elapsed.as_secs_f64());
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}

async fn end_to_end() -> Result<()> {
    step("starting");
    let root = repo_root();
    let plugin = root.join("plugins").join("podset.wasm");
    ensure!(
        plugin.is_file(),
        "{} is missing: build the plugins first with scripts/build-plugins",
        plugin.display()
    );
    let crds_dir = root.join("crds");
    let crd_names = crd_names_in(&crds_dir)?;
    ensure!(
        crd_names.contains(PODSET_CRD),
        "{} defines no CustomResourceDefinition {PODSET_CRD}",
        crds_dir.display()
    );
    let workdir = tempfile::tempdir().context("creating a temporary directory")?;

    let client = Client::try_default()
        .await
        .context("building a Kubernetes client from KUBECONFIG")?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut existing_before = BTreeSet::new();
    for name in &crd_names {
        let found = crds.get_opt(name).await.with_context(|| {
            format!(
                "reading CustomResourceDefinition {name} (is the cluster of KUBECONFIG reachable?)"
            )
        })?;
        if let Some(crd) = found {
            ensure!(
                crd.metadata.deletion_timestamp.is_none(),
                "CustomResourceDefinition {name} is being deleted; run the test again once it is gone"
            );
            existing_before.insert(name.clone());
        }
    }
    // Only these are sure to be created by the host, with its Apply entry.
    let to_install: Vec<String> = crd_names.difference(&existing_before).cloned().collect();
    step(format!(
        "CRDs of crds/ already in the cluster: {existing_before:?}; to be installed (and kept): {to_install:?}"
    ));

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = Namespace {
        metadata: ObjectMeta {
            generate_name: Some("reconciler-e2e-".to_string()),
            labels: Some(
                [
                    ("app.kubernetes.io/created-by", TEST_MANAGER),
                    // The busybox pods pass "baseline" but not "restricted",
                    // which some clusters enforce by default.
                    ("pod-security.kubernetes.io/enforce", "baseline"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    let namespace = namespaces
        .create(&post_params(), &namespace)
        .await
        .context("creating the test namespace")?;
    let ns = namespace
        .metadata
        .name
        .context("the created namespace has no name")?;
    step(format!("created namespace {ns}"));

    // From here on everything the test created must be removed whatever
    // happens, so the scenario's outcome (or panic) is only reported after
    // the cleanup.
    let mut host: Option<Host> = None;
    let outcome = AssertUnwindSafe(async {
        let host = host.insert(Host::start(workdir.path(), &plugin, &crds_dir, &ns)?);
        scenario(&client, &ns, host, &crd_names, &to_install).await
    })
    .catch_unwind()
    .await
    .unwrap_or_else(|panic| Err(anyhow!("the test panicked: {}", panic_message(&*panic))));

    let mut problems = Vec::new();
    if let Err(e) = &outcome {
        problems.push(format!("{e:#}"));
    }
    let cleanup_problems = cleanup(&client, &ns, host.as_mut()).await;
    problems.extend(cleanup_problems);
    if problems.is_empty()
        && let Err(e) = replay_recorded(workdir.path(), &plugin)
    {
        problems.push(format!("{e:#}"));
    }
    if problems.is_empty() {
        step("passed; everything the test created is gone");
        return Ok(());
    }
    if let Some(host) = &host {
        eprintln!("{}", host.log_tail());
    }
    bail!("{}", problems.join("\n"))
}

/// `run --record` wrote each reconcile of the real cluster as a golden case;
/// the compiled plugin must answer every one of them the same way again.
fn replay_recorded(workdir: &Path, plugin: &Path) -> Result<()> {
    let cases = workdir.join("recorded").join("podset");
    let count = std::fs::read_dir(&cases)
        .with_context(|| format!("reading the recorded cases in {}", cases.display()))?
        .count();
    // Created, scaled and (deleting or gone) at least.
    ensure!(count >= 2, "only {count} reconciles were recorded");
    let out = Command::new(env!("CARGO_BIN_EXE_reconciler-host"))
        .arg("--compile-cache")
        .arg(workdir.join("compile-cache"))
        .arg("test")
        .arg(plugin)
        .arg(&cases)
        .output()
        .context("running reconciler-host test")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success() && stdout.contains(&format!("{count} passed, 0 failed")),
        "replaying the {count} recorded cases failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    step(format!(
        "replayed the {count} reconciles recorded from the real cluster: all pass"
    ));
    Ok(())
}

/// The steps against the running host; `Err` on the first thing that is not
/// as expected.
async fn scenario(
    client: &Client,
    ns: &str,
    host: &mut Host,
    crd_names: &BTreeSet<String>,
    installed: &[String],
) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in crd_names {
        let crd = poll(
            Some(&mut *host),
            &format!("CustomResourceDefinition {name} to be Established"),
            CRD_TIMEOUT,
            async || {
                let Some(crd) = crds.get_opt(name).await? else {
                    return Ok(Probe::Pending("not found".to_string()));
                };
                let conditions: Vec<String> = crd
                    .status
                    .iter()
                    .flat_map(|s| s.conditions.iter().flatten())
                    .map(|c| format!("{}={}", c.type_, c.status))
                    .collect();
                if conditions.iter().any(|c| c == "Established=True") {
                    Ok(Probe::Ready(crd))
                } else {
                    Ok(Probe::Pending(format!("conditions {conditions:?}")))
                }
            },
        )
        .await?;
        if installed.contains(name) {
            ensure!(
                has_apply_entry(&crd.metadata, CRD_MANAGER, None),
                "CustomResourceDefinition {name} was created without an Apply entry of field manager \
                 {CRD_MANAGER}; managedFields: {}",
                managed_fields_summary(&crd.metadata)
            );
        }
    }
    step(format!("CRDs established: {crd_names:?}"));

    // Pods cannot be created before the namespace's default service account.
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    poll(
        Some(&mut *host),
        &format!("service account {ns}/default"),
        SERVICE_ACCOUNT_TIMEOUT,
        async || {
            Ok(match accounts.get_opt("default").await? {
                Some(_) => Probe::Ready(()),
                None => Probe::Pending("not found".to_string()),
            })
        },
    )
    .await?;

    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1alpha1", "PodSet"),
        "podsets",
    );
    let podsets: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    let podset = DynamicObject::new(PODSET, &resource)
        .within(ns)
        .data(json!({"spec": {"size": 2}}));
    let created = poll(
        Some(&mut *host),
        &format!("the API server to accept PodSet {ns}/{PODSET}"),
        CREATE_TIMEOUT,
        async || match podsets.create(&post_params(), &podset).await {
            Ok(created) => Ok(Probe::Ready(created)),
            Err(e) if is_not_found(&e) => Ok(Probe::Pending(format!("{e}"))),
            Err(e) => Err(e).context(format!("creating PodSet {ns}/{PODSET}")),
        },
    )
    .await?;
    let uid = created
        .metadata
        .uid
        .context("the created PodSet has no uid")?;
    step(format!(
        "created PodSet {ns}/{PODSET} (uid {uid}) with spec.size 2"
    ));

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);

    let deployment = wait_for_replicas(host, &deployments, ns, 2).await?;
    check_deployment(&deployment, &uid)?;
    step(
        "Deployment has 2 replicas, a controller ownerReference to the PodSet and the host's Apply entry",
    );
    let podset = wait_for_pod_names(host, &podsets, &pods, ns, 2).await?;
    ensure!(
        has_apply_entry(&podset.metadata, PLUGIN_MANAGER, Some("status")),
        "status.podNames was not written by an Apply of {PLUGIN_MANAGER} on the status subresource; \
         managedFields: {}",
        managed_fields_summary(&podset.metadata)
    );
    step(format!("status.podNames: {:?}", pod_names(&podset)));

    let patch = PatchParams {
        field_manager: Some(TEST_MANAGER.to_string()),
        ..PatchParams::default()
    };
    podsets
        .patch(PODSET, &patch, &Patch::Merge(json!({"spec": {"size": 3}})))
        .await
        .with_context(|| format!("setting spec.size of PodSet {ns}/{PODSET} to 3"))?;
    step("patched spec.size to 3");
    wait_for_replicas(host, &deployments, ns, 3).await?;
    let podset = wait_for_pod_names(host, &podsets, &pods, ns, 3).await?;
    step(format!(
        "Deployment has 3 replicas; status.podNames: {:?}",
        pod_names(&podset)
    ));

    podsets
        .delete(PODSET, &DeleteParams::background())
        .await
        .with_context(|| format!("deleting PodSet {ns}/{PODSET}"))?;
    step("deleted the PodSet");
    poll(
        Some(&mut *host),
        &format!("PodSet {ns}/{PODSET} to disappear"),
        PODSET_GONE_TIMEOUT,
        async || {
            Ok(match podsets.get_opt(PODSET).await? {
                None => Probe::Ready(()),
                Some(p) => Probe::Pending(format!(
                    "still there, deletionTimestamp {:?}, finalizers {:?}",
                    p.metadata.deletion_timestamp, p.metadata.finalizers
                )),
            })
        },
    )
    .await?;
    poll(
        Some(&mut *host),
        &format!("the garbage collector to delete Deployment {ns}/{PODSET}"),
        GARBAGE_COLLECTION_TIMEOUT,
        async || {
            Ok(match deployments.get_opt(PODSET).await? {
                None => Probe::Ready(()),
                Some(d) => Probe::Pending(format!(
                    "still there, deletionTimestamp {:?}, ownerReferences {:?}",
                    d.metadata.deletion_timestamp, d.metadata.owner_references
                )),
            })
        },
    )
    .await?;
    step("the PodSet and its Deployment are gone");
    Ok(())
}

async fn wait_for_replicas(
    host: &mut Host,
    deployments: &Api<Deployment>,
    ns: &str,
    replicas: i32,
) -> Result<Deployment> {
    poll(
        Some(host),
        &format!("Deployment {ns}/{PODSET} with spec.replicas {replicas}"),
        DEPLOYMENT_TIMEOUT,
        async || {
            let Some(deployment) = deployments.get_opt(PODSET).await? else {
                return Ok(Probe::Pending("not found".to_string()));
            };
            let seen = deployment.spec.as_ref().and_then(|s| s.replicas);
            if seen == Some(replicas) {
                Ok(Probe::Ready(deployment))
            } else {
                Ok(Probe::Pending(format!("spec.replicas {seen:?}")))
            }
        },
    )
    .await
}

/// The labels the plugin gives the Deployment's pods.
fn pod_selector() -> String {
    format!("app=podset,podset={PODSET}")
}

fn check_deployment(deployment: &Deployment, podset_uid: &str) -> Result<()> {
    let controllers: Vec<_> = deployment
        .metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|r| r.controller == Some(true))
        .collect();
    ensure!(
        controllers.len() == 1,
        "the Deployment should have exactly one controller ownerReference; ownerReferences: {:?}",
        deployment.metadata.owner_references
    );
    let owner = controllers[0];
    ensure!(
        owner.api_version == "example.com/v1alpha1"
            && owner.kind == "PodSet"
            && owner.name == PODSET
            && owner.uid == podset_uid,
        "the Deployment's controller should be PodSet {PODSET} (example.com/v1alpha1, uid {podset_uid}); it is {owner:?}"
    );
    ensure!(
        has_apply_entry(&deployment.metadata, PLUGIN_MANAGER, None),
        "the Deployment has no Apply entry of field manager {PLUGIN_MANAGER}; managedFields: {}",
        managed_fields_summary(&deployment.metadata)
    );
    let selector = deployment
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.clone())
        .unwrap_or_default();
    let expected: BTreeMap<String, String> = [
        ("app".to_string(), "podset".to_string()),
        ("podset".to_string(), PODSET.to_string()),
    ]
    .into();
    ensure!(
        selector == expected,
        "the Deployment's spec.selector.matchLabels should be {expected:?}, not {selector:?}"
    );
    Ok(())
}

/// Waits until `status.podNames` lists `size` distinct pods, each existing in
/// the namespace with the PodSet's labels, and returns that PodSet.
async fn wait_for_pod_names(
    host: &mut Host,
    podsets: &Api<DynamicObject>,
    pods: &Api<Pod>,
    ns: &str,
    size: usize,
) -> Result<DynamicObject> {
    let selector = pod_selector();
    let podset = poll(
        Some(host),
        &format!("status.podNames of PodSet {ns}/{PODSET} to name {size} existing pods"),
        POD_NAMES_TIMEOUT,
        async || {
            let podset = podsets.get(PODSET).await?;
            let names = pod_names(&podset);
            let existing: BTreeSet<String> = pods
                .list_metadata(&ListParams::default().labels(&selector))
                .await?
                .items
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect();
            let state =
                format!("status.podNames {names:?}; pods labelled {selector}: {existing:?}");
            let Some(names) = names else {
                return Ok(Probe::Pending(state));
            };
            let distinct: BTreeSet<&String> = names.iter().collect();
            if names.len() == size
                && distinct.len() == size
                && names.iter().all(|n| existing.contains(n))
            {
                Ok(Probe::Ready(podset))
            } else {
                Ok(Probe::Pending(state))
            }
        },
    )
    .await?;
    let names = pod_names(&podset).unwrap_or_default();
    ensure!(
        names.is_sorted(),
        "status.podNames should be sorted: {names:?}"
    );
    Ok(podset)
}

/// `status.podNames` if it is a list of strings.
fn pod_names(podset: &DynamicObject) -> Option<Vec<String>> {
    podset.data["status"]["podNames"]
        .as_array()?
        .iter()
        .map(|n| n.as_str().map(str::to_string))
        .collect()
}

/// Whether `meta` records a server-side apply by `manager` (on `subresource`,
/// or on the object itself).
fn has_apply_entry(meta: &ObjectMeta, manager: &str, subresource: Option<&str>) -> bool {
    meta.managed_fields.iter().flatten().any(|entry| {
        entry.manager.as_deref() == Some(manager)
            && entry.operation.as_deref() == Some("Apply")
            && entry.subresource.as_deref().unwrap_or("") == subresource.unwrap_or("")
    })
}

fn managed_fields_summary(meta: &ObjectMeta) -> String {
    let entries: Vec<String> = meta
        .managed_fields
        .iter()
        .flatten()
        .map(|e| {
            format!(
                "{} {} {}",
                e.manager.as_deref().unwrap_or("?"),
                e.operation.as_deref().unwrap_or("?"),
                e.subresource.as_deref().unwrap_or("-")
            )
        })
        .collect();
    format!("{entries:?}")
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(TEST_MANAGER.to_string()),
        ..PostParams::default()
    }
}

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Names of the CustomResourceDefinitions in the YAML files of `dir`.
fn crd_names_in(dir: &Path) -> Result<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        let is_yaml = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        );
        if !is_yaml {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            let value = serde_json::Value::deserialize(document)
                .with_context(|| format!("parsing {}", path.display()))?;
            if value["kind"] == "CustomResourceDefinition" {
                let name = value["metadata"]["name"].as_str().with_context(|| {
                    format!(
                        "{}: a CustomResourceDefinition without a name",
                        path.display()
                    )
                })?;
                names.insert(name.to_string());
            }
        }
    }
    Ok(names)
}

/// What one look at the cluster found.
enum Probe<T> {
    Ready(T),
    /// Not yet; what was seen instead, for the timeout message.
    Pending(String),
}

/// Runs `probe` until it is ready, it fails, the host exits, or `timeout`
/// passes; the error names what was awaited and what was last seen.
async fn poll<T>(
    mut host: Option<&mut Host>,
    what: &str,
    timeout: Duration,
    mut probe: impl AsyncFnMut() -> Result<Probe<T>>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        let seen = match probe()
            .await
            .with_context(|| format!("while waiting for {what}"))?
        {
            Probe::Ready(value) => return Ok(value),
            Probe::Pending(seen) => seen,
        };
        if let Some(host) = host.as_deref_mut() {
            host.ensure_running()
                .with_context(|| format!("while waiting for {what} (last seen: {seen})"))?;
        }
        if Instant::now() >= deadline {
            bail!(
                "timed out after {} s waiting for {what}; last seen: {seen}",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Stops the host and removes the namespace (not the CRDs: see the module doc);
/// what went wrong, if anything. Every step is attempted even when one failed.
async fn cleanup(client: &Client, ns: &str, host: Option<&mut Host>) -> Vec<String> {
    let mut problems = Vec::new();
    // First the host, so that nothing writes into the namespace any more.
    if let Some(host) = host {
        match host.stop().await {
            Ok(()) => step("the host exited with code 0 after SIGTERM"),
            Err(e) => problems.push(format!("{e:#}")),
        }
    }

    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces.delete(ns, &DeleteParams::default()).await {
        Ok(_) => {
            step(format!("deleting namespace {ns}; waiting until it is gone"));
            let gone = poll(
                None,
                &format!("namespace {ns} to be deleted"),
                NAMESPACE_GONE_TIMEOUT,
                async || {
                    let Some(namespace) = namespaces.get_opt(ns).await? else {
                        return Ok(Probe::Ready(()));
                    };
                    let status = namespace.status.unwrap_or_default();
                    let conditions: Vec<String> = status
                        .conditions
                        .iter()
                        .flatten()
                        .map(|c| {
                            format!(
                                "{}={} {}",
                                c.type_,
                                c.status,
                                c.message.as_deref().unwrap_or("")
                            )
                        })
                        .collect();
                    Ok(Probe::Pending(format!(
                        "phase {:?}, conditions {conditions:?}",
                        status.phase
                    )))
                },
            )
            .await;
            if let Err(e) = gone {
                problems.push(format!(
                    "{e:#} (it will go once the cluster has emptied it; check with kubectl get namespace {ns})"
                ));
            }
        }
        Err(e) if is_not_found(&e) => {}
        Err(e) => problems.push(format!(
            "deleting namespace {ns} failed: {e}; delete it with kubectl delete namespace {ns}"
        )),
    }

    problems
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".to_string())
}

/// The `reconciler-host run` process; killed if dropped while running.
struct Host {
    child: Child,
    log: PathBuf,
}

impl Host {
    fn start(workdir: &Path, plugin: &Path, crds_dir: &Path, ns: &str) -> Result<Self> {
        // Only podset.wasm: the other example plugins stay out of this test.
        let plugins_dir = workdir.join("plugins");
        std::fs::create_dir_all(&plugins_dir)?;
        std::fs::copy(plugin, plugins_dir.join("podset.wasm"))
            .with_context(|| format!("copying {}", plugin.display()))?;
        let log = workdir.join("host.log");
        let log_file = File::create(&log)?;
        let child = Command::new(env!("CARGO_BIN_EXE_reconciler-host"))
            // Keep compiled plugins out of the user's cache directory.
            .arg("--compile-cache")
            .arg(workdir.join("compile-cache"))
            .arg("run")
            .arg("--plugins-dir")
            .arg(&plugins_dir)
            .arg("--install-crds")
            .arg(crds_dir)
            .arg("--namespace")
            .arg(ns)
            // Every reconcile as a golden case, replayed after the run.
            .arg("--record")
            .arg(workdir.join("recorded"))
            // Any free port: 8080 may be taken on the machine running the test.
            .arg("--http-listen")
            .arg("127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .spawn()
            .context("starting reconciler-host run")?;
        step(format!(
            "started reconciler-host run (pid {}) for namespace {ns}",
            child.id()
        ));
        Ok(Self { child, log })
    }

    /// `Err` if the host has exited.
    fn ensure_running(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => bail!("the host exited unexpectedly ({status})"),
        }
    }

    /// SIGTERM, then expects exit code 0 within `SHUTDOWN_TIMEOUT`.
    async fn stop(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("the host had already exited ({status}) before it was asked to stop");
        }
        let pid = libc::pid_t::try_from(self.child.id())?;
        // SAFETY: kill(2) on our own child, which has not been reaped yet
        // (try_wait above returned None), so the pid is still ours.
        if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
            bail!(
                "sending SIGTERM to the host: {}",
                std::io::Error::last_os_error()
            );
        }
        let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                ensure!(
                    status.success(),
                    "the host exited with {status} after SIGTERM, expected exit code 0"
                );
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!(
                    "the host did not exit within {} s of SIGTERM (it was killed)",
                    SHUTDOWN_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The end of the host's log, framed for printing.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log)
            .unwrap_or_else(|e| format!("(cannot read {}: {e})", self.log.display()));
        let lines: Vec<&str> = text.lines().collect();
        let skipped = lines.len().saturating_sub(LOG_TAIL_LINES);
        let mut out = String::from("----- reconciler-host log");
        if skipped > 0 {
            out.push_str(&format!(
                " (last {LOG_TAIL_LINES} lines of {})",
                lines.len()
            ));
        }
        out.push_str(" -----\n");
        for line in &lines[skipped..] {
            out.push_str(line);
            out.push('\n');
        }
        out.push_str("----- end of reconciler-host log -----");
        out
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
