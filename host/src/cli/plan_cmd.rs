//! `reconciler-host plan NEW [--against OLD]`: what a new version of a
//! plugin would do differently, before it does anything.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use reconciler_contract::ClusterInfo;
use serde_json::Value;

use super::builtins_args::BuiltinArgs;
use super::registry_args::{PluginRefArgs, RegistryAccessArgs};
use super::sandbox_args::SandboxArgs;
use crate::cluster::{Clock as _, RealClock};
use crate::decision_diff::{Snapshot, live_objects, plan, report};
use crate::plugin::{LoadedPlugin, RandomKey, Sandbox};
use crate::process::simulate::{SimulatedCluster, SimulationConfig, simulate_clusters};
use crate::registry::PluginReference;

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
reconciler-host plan target/podset-next.wasm --objects examples/   on the embedded cluster, after the serving version converged it\n  \
reconciler-host plan oci://registry.example/podset:1.3 --against oci://registry.example/podset:1.2\n  \
reconciler-host plan podset-next.wasm --output json > plan.json     against the cluster KUBECONFIG names\n\n\
Both versions get the same objects, clock, cluster and random numbers; the report lists, per object,\n\
the applied fields that would change (a field-path diff of each server-side apply), status, deletes,\n\
Events, requeue and errors. Exit status: 0 when the candidate decides everything as the serving version\n\
does, 1 when anything differs (gate a CI job on it), 2 on an error. Against a live cluster it only gets\n\
and lists: `reconciler-host rbac --plan` prints a read-only role for it.")]
pub struct PlanArgs {
    /// The candidate: a compiled plugin (.wasm) or a reference (oci://HOST/REPO:TAG or @sha256:...).
    #[arg(value_name = "NEW")]
    pub candidate: String,
    /// The version serving now, a file or a reference [default: against a live cluster, the digest
    /// its Plugin resource serving the candidate's name reports in status; else the plugin of that
    /// name in --plugins-dir].
    #[arg(long, value_name = "OLD")]
    pub against: Option<String>,
    /// Where the serving version is found when --against is not given.
    #[arg(long, default_value = "plugins", value_name = "DIR")]
    pub plugins_dir: PathBuf,
    /// Plan over these objects (a YAML file or a directory of them) on the embedded cluster,
    /// after the serving version has converged them. Without it, the plan reads the live cluster
    /// KUBECONFIG (or the pod's service account) names.
    #[arg(long, value_name = "FILE|DIR")]
    pub objects: Option<PathBuf>,
    /// CustomResourceDefinitions to apply before --objects.
    #[arg(long, value_name = "FILE|DIR", requires = "objects")]
    pub crds: Option<PathBuf>,
    /// Against a live cluster: plan the primaries of this namespace only (repeatable), reading
    /// namespaced kinds there only, as `run --namespace` serves them.
    #[arg(
        long,
        short = 'n',
        value_name = "NAMESPACE",
        conflicts_with = "objects"
    )]
    pub namespace: Vec<String>,
    /// `text` for people, `json` for tools.
    #[arg(long, value_enum, default_value_t = PlanOutput::Text)]
    pub output: PlanOutput,
    /// A cosign public key (PEM) a plugin named by reference must be signed by (repeatable).
    #[arg(long = "verify-key", value_name = "FILE")]
    pub verify_key: Vec<PathBuf>,
    #[command(flatten)]
    pub builtins: BuiltinArgs,
    #[command(flatten)]
    pub access: RegistryAccessArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanOutput {
    Text,
    Json,
}

pub fn run(sandbox: &SandboxArgs, args: PlanArgs) -> anyhow::Result<ExitCode> {
    // Both versions draw from the same streams (plugin/call_random.rs):
    // fixed here, and the candidate's seeded as the serving version's.
    let sandbox = sandbox.sandbox_with(RandomKey::fixed())?;
    let mut keep = None;
    let (candidate_file, candidate_source) = resolve(&args, &args.candidate, &sandbox, &mut keep)?;
    let candidate = sandbox
        .load(&candidate_file)
        .map_err(|e| anyhow::anyhow!("the candidate {}: {e}", args.candidate))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Against a live cluster: one client for finding the serving version
    // and for reading the objects.
    let client = match &args.objects {
        Some(_) => None,
        None => Some(
            runtime.block_on(crate::cluster::kubernetes::api_client::connect(Some(
                crate::cluster::kubernetes::api_client::DEFAULT_REQUEST_TIMEOUT,
            )))?,
        ),
    };
    let served = match (&args.against, &client) {
        (None, Some(client)) => runtime.block_on(served_by_plugin_resource(
            client,
            &candidate.metadata().name,
        ))?,
        _ => None,
    };
    let (serving, serving_source) = match (args.against.clone(), served) {
        (Some(old), _) => load_version(&args, &old, &sandbox, &mut keep, None)?,
        (None, Some((reference, plugin))) => {
            load_version(&args, &reference, &sandbox, &mut keep, Some(plugin))?
        }
        (None, None) => serving_in_dir(
            &sandbox,
            &args.plugins_dir,
            candidate.metadata().name.as_str(),
        )?,
    };
    let candidate = candidate.drawing_random_as(&serving);
    let serving = Arc::new(serving);

    let (objects, now_millis) = match (&args.objects, &client) {
        (Some(path), _) => (
            converged(&args, path, &serving, &runtime)?,
            SimulationConfig::default().start_millis,
        ),
        (None, Some(client)) => {
            let kinds = live_objects::kinds_of(&[serving.metadata(), candidate.metadata()]);
            let objects =
                runtime.block_on(live_objects::list_all(client, &kinds, &args.namespace))?;
            (objects, RealClock.now_millis())
        }
        (None, None) => unreachable!("a client is made whenever there are no --objects"),
    };
    let primary = &serving.metadata().primary;
    let (snapshot, skipped) = Snapshot::of(objects, primary);
    for why in skipped {
        eprintln!("warning: an object was left out of the plan: {why}");
    }
    let plans = plan(
        &serving,
        &candidate,
        &snapshot,
        now_millis,
        Arc::new(ClusterInfo::local()),
    )?;
    let names = (
        report::VersionName::of(&serving, serving_source),
        report::VersionName::of(&candidate, candidate_source),
    );
    match args.output {
        PlanOutput::Text => print!(
            "{}",
            report::text(&names.0, &names.1, &primary.kind, &plans)
        ),
        PlanOutput::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report::json(&names.0, &names.1, &primary.kind, &plans))?
        ),
    }
    Ok(if report::differs(&plans) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The serving version from `given` (a file or a reference); `plugin`
/// names the Plugin resource it was found through.
fn load_version(
    args: &PlanArgs,
    given: &str,
    sandbox: &Sandbox,
    keep: &mut Option<tempfile::TempDir>,
    plugin: Option<String>,
) -> anyhow::Result<(LoadedPlugin, String)> {
    let (file, source) = resolve(args, given, sandbox, keep)?;
    let loaded = sandbox
        .load(&file)
        .map_err(|e| anyhow::anyhow!("the serving version {given}: {e}"))?;
    let source = match plugin {
        Some(plugin) => format!("{source}, served by Plugin {plugin}"),
        None => source,
    };
    Ok((loaded, source))
}

/// The digest a Plugin resource of the cluster serves for the plugin
/// `name` (its status), as a reference to pull, and that Plugin's name;
/// `None` when no Plugin serves it (or the cluster has no Plugin kind).
async fn served_by_plugin_resource(
    client: &kube::Client,
    name: &str,
) -> anyhow::Result<Option<(String, String)>> {
    use kube::api::{Api, DynamicObject, ListParams};
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &crate::plugin_resources::kind::api_resource(),
    );
    let listed = match api.list(&ListParams::default()).await {
        Ok(listed) => listed,
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
        Err(e) => return Err(e).context("listing Plugin resources for the version serving"),
    };
    // Plugin name -> (reference, the Plugin resource), for every Plugin
    // serving `name`. Two serving it at different digests leave no one
    // answer: the user says which with --against.
    let mut found: Vec<(String, String)> = Vec::new();
    for plugin in listed.items {
        let object = serde_json::to_value(&plugin)?;
        let status = &object["status"];
        let (Some(serves), Some(digest), Some(source)) = (
            status["pluginName"].as_str(),
            status["digest"].as_str(),
            object["spec"]["source"].as_str(),
        ) else {
            continue;
        };
        if serves != name {
            continue;
        }
        let at = plugin.metadata.name.clone().unwrap_or_default();
        let digest = crate::registry::reference::Digest::parse(digest)
            .map_err(|e| anyhow::anyhow!("Plugin {at}: status.digest: {e}"))?;
        let reference = PluginReference::parse_source(source)
            .map_err(|e| anyhow::anyhow!("Plugin {at}: spec.source: {e}"))?
            .at_digest(&digest);
        found.push((reference.to_string(), at));
    }
    found.sort();
    found.dedup_by(|a, b| a.0 == b.0);
    match found.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.clone())),
        several => anyhow::bail!(
            "several Plugin resources serve {name} at different digests ({}): give the serving version with --against",
            several
                .iter()
                .map(|(reference, at)| format!("{at}: {reference}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A file as it is, or a reference pulled (and verified with --verify-key).
fn resolve(
    args: &PlanArgs,
    given: &str,
    sandbox: &Sandbox,
    keep: &mut Option<tempfile::TempDir>,
) -> anyhow::Result<(PathBuf, String)> {
    let pulling = PluginRefArgs {
        plugins: Vec::new(),
        verify_key: args.verify_key.clone(),
        access: args.access.clone(),
    };
    pulling.file_of(given, sandbox.compile_cache().map(|c| c.dir()), keep)
}

/// The plugin named `name` in `dir`: `NAME.wasm` if it is that plugin,
/// else whichever file loads as it.
fn serving_in_dir(
    sandbox: &Sandbox,
    dir: &Path,
    name: &str,
) -> anyhow::Result<(LoadedPlugin, String)> {
    let named = dir.join(format!("{name}.wasm"));
    let mut files = vec![named.clone()];
    files.extend(
        crate::plugin::directory::plugin_files(dir)
            .with_context(|| format!("cannot read the plugins directory {}", dir.display()))?
            .into_iter()
            .filter(|f| f != &named),
    );
    for file in files.into_iter().filter(|f| f.is_file()) {
        if let Ok(plugin) = sandbox.load(&file)
            && plugin.metadata().name == name
        {
            return Ok((plugin, file.display().to_string()));
        }
    }
    anyhow::bail!(
        "no plugin named {name:?} in {}: give the serving version with --against",
        dir.display()
    )
}

/// `path`'s objects after the serving version converged them on the
/// embedded cluster, as `simulate` would leave them.
fn converged(
    args: &PlanArgs,
    path: &Path,
    serving: &Arc<LoadedPlugin>,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<Vec<Value>> {
    let mut objects = match &args.crds {
        Some(dir) => crate::process::manifests::read_crds(dir)?,
        None => Vec::new(),
    };
    objects.extend(
        crate::process::manifests::read_all(path)?
            .into_iter()
            .map(|(_, o)| o),
    );
    let config = SimulationConfig {
        builtins: args.builtins.config(),
        ..SimulationConfig::default()
    };
    let cluster = SimulatedCluster {
        info: ClusterInfo::local(),
        objects,
    };
    let (report, clusters) = runtime.block_on(simulate_clusters(
        vec![serving.clone()],
        vec![cluster],
        &config,
    ))?;
    if let Some(unsettled) = report.unsettled {
        anyhow::bail!(
            "the serving version never settled the objects, so there is nothing stable to plan against: {unsettled}"
        );
    }
    Ok(clusters.first().map(|c| c.objects()).unwrap_or_default())
}
