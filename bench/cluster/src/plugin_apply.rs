//! `bench-cluster plugin-apply`: time from `kubectl apply` of a Plugin to
//! the first reconcile of the plugin it names, cold (pull and compile) and
//! warm (digest and compiled code cached), for the Rust and the Python
//! podset; and, as the baseline measured in the same run, the same plugin
//! dropped into the plugins directory (cold: compiling; warm: compile cache
//! hit). BENCHMARKS.md, "Plugins by reference".

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Args;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use reconciler_tests::oci_registry::{Mode, Registry};
use serde_json::json;

#[derive(Args)]
pub struct PluginApplyArgs {
    /// The release host binary.
    #[arg(long, default_value = "target/release/reconciler-host")]
    host: PathBuf,
    /// Rounds per case.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

const NAMESPACE: &str = "bench-plugin-apply";
const TIMEOUT: Duration = Duration::from_secs(300);

struct Case {
    label: &'static str,
    file: PathBuf,
}

#[derive(Clone, Copy, PartialEq)]
enum Source {
    Plugin,
    File,
}

pub async fn run(args: PluginApplyArgs) -> Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let host = root.join(&args.host);
    anyhow::ensure!(
        host.is_file(),
        "{} is missing: cargo build --release -p reconciler-host",
        host.display()
    );
    if let Some(why) = reconciler_tests::oci_registry::unavailable(Mode::Anonymous) {
        bail!("{why}");
    }
    let client = kube::Client::try_default().await.context("KUBECONFIG")?;
    let registry = Registry::start(Mode::Anonymous);
    let cases = [
        Case {
            label: "podset (Rust, 0.6 MB)",
            file: root.join("plugins/podset.wasm"),
        },
        Case {
            label: "podset-py (Python, 18.6 MB)",
            file: root.join("plugins/podset-py/podset-py.wasm"),
        },
    ];
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?,
        )
        .await;
    let work = tempfile::tempdir()?;
    println!("| plugin | how | cold median | warm median | cold / baseline | warm / baseline |");
    println!("|---|---|---|---|---|---|");
    for (i, case) in cases.iter().enumerate() {
        let reference = registry.reference(&format!("bench/podset-{i}:1"));
        let out = Command::new(&host)
            .args([
                "push",
                case.file.to_str().unwrap(),
                &reference,
                "--insecure-registry",
                &registry.host,
            ])
            .env("DOCKER_CONFIG", work.path())
            .stderr(Stdio::null())
            .output()?;
        anyhow::ensure!(out.status.success(), "push {} failed", case.file.display());
        let mut results = Vec::new();
        for source in [Source::File, Source::Plugin] {
            let (mut cold, mut warm) = (Vec::new(), Vec::new());
            for round in 0..args.rounds {
                let caches = work
                    .path()
                    .join(format!("caches-{i}-{round}-{}", source as u8));
                cold.push(
                    measure(
                        &client,
                        &host,
                        &root,
                        &caches,
                        case,
                        &reference,
                        source,
                        &format!("c{i}{round}"),
                    )
                    .await?,
                );
                warm.push(
                    measure(
                        &client,
                        &host,
                        &root,
                        &caches,
                        case,
                        &reference,
                        source,
                        &format!("w{i}{round}"),
                    )
                    .await?,
                );
            }
            results.push((source, median(&mut cold), median(&mut warm)));
        }
        let (_, base_cold, base_warm) = results[0];
        for (source, cold, warm) in results {
            println!(
                "| {} | {} | {:.0} ms | {:.0} ms | {:.2}x | {:.2}x |",
                case.label,
                if source == Source::Plugin {
                    "kubectl apply of a Plugin"
                } else {
                    "file into the plugins directory (baseline)"
                },
                cold.as_secs_f64() * 1e3,
                warm.as_secs_f64() * 1e3,
                cold.as_secs_f64() / base_cold.as_secs_f64(),
                warm.as_secs_f64() / base_warm.as_secs_f64(),
            );
        }
    }
    let _ = namespaces.delete(NAMESPACE, &DeleteParams::default()).await;
    Ok(())
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// Starts a host with `caches`, waits for it, creates a PodSet, then serves
/// the plugin (a Plugin applied, or the file copied in) and times until the
/// PodSet's Deployment exists.
#[allow(clippy::too_many_arguments)]
async fn measure(
    client: &kube::Client,
    host: &Path,
    root: &Path,
    caches: &Path,
    case: &Case,
    reference: &str,
    source: Source,
    name: &str,
) -> Result<Duration> {
    let plugins = caches.join("plugins");
    std::fs::create_dir_all(&plugins)?;
    for stale in std::fs::read_dir(&plugins)? {
        std::fs::remove_file(stale?.path())?;
    }
    let log = caches.join("host.log");
    let mut child = HostChild(
        Command::new(host)
            .arg("--compile-cache")
            .arg(caches.join("compiled"))
            .args(["run", "--install-crds"])
            .arg(root.join("crds"))
            .arg("--plugins-dir")
            .arg(&plugins)
            .args([
                "--namespace",
                NAMESPACE,
                "--http-listen",
                "off",
                "--plugin-selector",
                "bench=plugin-apply",
            ])
            .arg("--registry-cache")
            .arg(caches.join("registry"))
            .args(["--plugin-secrets-namespace", NAMESPACE])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?,
    );
    wait_for_log(&log, "no plugin is serving", &mut child.0).await?;
    let podsets: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &resource("example.com", "v1alpha1", "PodSet", "podsets"),
    );
    podsets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
            "apiVersion": "example.com/v1alpha1", "kind": "PodSet",
            "metadata": {"name": name}, "spec": {"size": 1}}))?,
        )
        .await?;
    let plugin_api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource("reconciler-host.io", "v1alpha1", "Plugin", "plugins"),
    );
    let plugin_name = format!("bench-{name}");
    let started = Instant::now();
    match source {
        Source::Plugin => {
            plugin_api
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({
                    "apiVersion": "reconciler-host.io/v1alpha1", "kind": "Plugin",
                    "metadata": {"name": plugin_name, "labels": {"bench": "plugin-apply"}},
                    "spec": {"source": reference, "insecure": true}}))?,
                )
                .await?;
        }
        Source::File => {
            let tmp = plugins.join(".podset.wasm.tmp");
            std::fs::copy(&case.file, &tmp)?;
            std::fs::rename(&tmp, plugins.join("podset.wasm"))?;
        }
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let took = loop {
        if deployments.get_opt(name).await?.is_some() {
            break started.elapsed();
        }
        if started.elapsed() > TIMEOUT {
            bail!(
                "no Deployment {name} within {TIMEOUT:?}: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        if let Some(status) = child.0.try_wait()? {
            bail!(
                "the host exited ({status}): {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    drop(child);
    let _ = plugin_api
        .delete(&plugin_name, &DeleteParams::default())
        .await;
    let _ = podsets.delete(name, &DeleteParams::default()).await;
    let _ = deployments.delete(name, &DeleteParams::default()).await;
    Ok(took)
}

async fn wait_for_log(log: &Path, needle: &str, child: &mut Child) -> Result<()> {
    let started = Instant::now();
    loop {
        if std::fs::read_to_string(log)
            .unwrap_or_default()
            .contains(needle)
        {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!(
                "the host exited ({status}): {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        if started.elapsed() > TIMEOUT {
            bail!("the host did not log {needle:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Stops the host when dropped.
struct HostChild(Child);

impl Drop for HostChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
