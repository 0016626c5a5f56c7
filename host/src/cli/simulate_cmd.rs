use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use super::builtins_args::BuiltinArgs;
use super::embedded_clusters_args::{EmbeddedClustersArgs, MemberSeed};
use super::record_args::RecordArgs;
use super::registry_args::PluginRefArgs;
use super::sandbox_args::SandboxArgs;
use crate::plugin::candidates::Candidates;
use crate::plugin::{LoadedPlugin, RandomKey, Sandbox};
use crate::process::canary_files::FileRollouts;
use crate::process::simulate::{SimulatedCluster, SimulationConfig, simulate_clusters};
use crate::support::duration_text::parse_duration;
use reconciler_contract::ClusterInfo;

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Directory of compiled plugins (*.wasm).
    #[arg(long, default_value = "plugins", value_name = "DIR")]
    pub plugins_dir: PathBuf,
    /// Objects to start from: a YAML file (several documents allowed) or a directory of them.
    /// With several clusters, every cluster starts from them.
    #[arg(
        long,
        value_name = "FILE|DIR",
        required_unless_present = "cluster_objects"
    )]
    pub objects: Option<PathBuf>,
    /// CustomResourceDefinitions to apply before the objects, so the embedded cluster knows which
    /// custom kinds are cluster-scoped (a plugin whose namespaced primary owns or writes one is
    /// refused, as on a real cluster). CRDs among --objects count too.
    #[arg(long, value_name = "FILE|DIR")]
    pub crds: Option<PathBuf>,
    /// Advance the virtual clock by this much, firing requeues on the way (e.g. 90s, 1h30m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "0s")]
    pub advance: std::time::Duration,
    /// The virtual time at the start (RFC 3339).
    #[arg(long, value_name = "TIME", default_value = "2024-01-01T00:00:00Z", value_parser = parse_time)]
    pub start: Timestamp,
    /// Reconciles of one object at one instant before it counts as never settling.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub max_rounds: u32,
    #[command(flatten)]
    pub record: RecordArgs,
    #[command(flatten)]
    pub builtins: BuiltinArgs,
    #[command(flatten)]
    pub references: PluginRefArgs,
    #[command(flatten)]
    pub clusters: EmbeddedClustersArgs,
}

fn parse_time(text: &str) -> Result<Timestamp, String> {
    text.parse()
        .map_err(|e| format!("{text:?} is not an RFC 3339 time like 2024-01-01T00:00:00Z: {e}"))
}

pub fn run(sandbox: &SandboxArgs, args: SimulateArgs) -> anyhow::Result<ExitCode> {
    // Runs must repeat exactly: the random streams plugins see depend only
    // on the plugin and the object (plugin/call_random.rs).
    let sandbox = sandbox.sandbox_with(RandomKey::fixed())?;
    let members = args.clusters.members()?;
    // Holds the pulled plugins' files until the simulation is over.
    let mut keep = None;
    let loaded = load_plugins(&sandbox, &args, &mut keep)?;
    let clusters = clusters(&args, members, &loaded.seeded)?;
    let config = SimulationConfig {
        start_millis: args.start.as_millisecond(),
        advance: args.advance,
        max_rounds: args.max_rounds,
        record: args.record.options(),
        builtins: args.builtins.config(),
        candidates: candidates_of(loaded.candidates),
        rollouts: Some(FileRollouts::read(&args.plugins_dir)),
        ..SimulationConfig::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let plugins = loaded.plugins.into_iter().map(Arc::new).collect();
    let (report, _) = runtime.block_on(simulate_clusters(plugins, clusters, &config))?;
    for refused in &report.refused {
        eprintln!("error: {refused}");
    }
    print!("{}", report.render());
    Ok(
        if report.unsettled.is_some()
            || loaded.failed
            || !report.refused.is_empty()
            || loaded.fetch_failed
        {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        },
    )
}

/// The candidates in shadow, by the plugin each stands beside.
fn candidates_of(loaded: Vec<LoadedPlugin>) -> Arc<Candidates> {
    let candidates = Candidates::new();
    candidates.set(
        loaded
            .into_iter()
            .map(|c| (c.name().to_string(), Arc::new(c)))
            .collect(),
    );
    candidates
}

/// The plugins a simulation runs, and the objects it starts from.
struct Loaded {
    plugins: Vec<LoadedPlugin>,
    /// `NAME.candidate.wasm` files of the directory, run in shadow.
    candidates: Vec<LoadedPlugin>,
    /// Some plugin file did not load (each is reported).
    failed: bool,
    /// Some Plugin object among the objects could not be pulled (each is
    /// reported).
    fetch_failed: bool,
    /// `--objects`, as read.
    seeded: Vec<Value>,
}

/// Pulls the --plugin references and the Plugin objects among the objects,
/// then loads them after the directory's files, as dev and run serve them;
/// what fails is reported on stderr. `keep` holds the pulled files.
fn load_plugins(
    sandbox: &Sandbox,
    args: &SimulateArgs,
    keep: &mut Option<tempfile::TempDir>,
) -> anyhow::Result<Loaded> {
    let mut fetched =
        args.references
            .fetch_all(&[], sandbox.compile_cache().map(|c| c.dir()), keep)?;
    // Plugin objects among the objects: pulled as references are.
    let seeded: Vec<_> = match &args.objects {
        Some(objects) => crate::process::manifests::read_all(objects)?
            .into_iter()
            .map(|(_, o)| o)
            .collect(),
        None => Vec::new(),
    };
    let (more, fetch_failures) =
        args.references
            .fetch_objects(&seeded, sandbox.compile_cache().map(|c| c.dir()), keep)?;
    for why in &fetch_failures {
        eprintln!("error: {why}");
    }
    fetched.extend(more);
    // The directory's files, then the references: as dev and run serve them.
    let mut files = if fetched.is_empty() || args.plugins_dir.is_dir() {
        crate::plugin::directory::plugin_files(&args.plugins_dir).map_err(|e| {
            anyhow::anyhow!(
                "cannot read the plugins directory {}: {e}",
                args.plugins_dir.display()
            )
        })?
    } else {
        Vec::new()
    };
    files.extend(fetched.iter().map(|f| f.path.clone()));
    let (files, candidate_files) = crate::plugin::directory::split_candidates(files);
    let (plugins, mut failures) = crate::plugin::directory::load_files(sandbox, &files);
    let (candidates, unfit) =
        crate::plugin::directory::load_candidates(sandbox, &candidate_files, &plugins);
    failures.extend(unfit);
    for failure in &failures {
        eprintln!("error: {failure}");
    }
    if plugins.is_empty() {
        anyhow::bail!("no plugin loaded from {}", args.plugins_dir.display());
    }
    Ok(Loaded {
        plugins,
        candidates,
        failed: !failures.is_empty(),
        fetch_failed: !fetch_failures.is_empty(),
        seeded,
    })
}

/// Each cluster and what it starts from: the CRDs, the shared objects,
/// then its own.
fn clusters(
    args: &SimulateArgs,
    members: Option<Vec<MemberSeed>>,
    seeded: &[Value],
) -> anyhow::Result<Vec<SimulatedCluster>> {
    let mut objects = match &args.crds {
        Some(dir) => crate::process::manifests::read_crds(dir)?,
        None => Vec::new(),
    };
    objects.extend(seeded.iter().cloned());
    let Some(members) = members else {
        return Ok(vec![SimulatedCluster {
            info: ClusterInfo::local(),
            objects,
        }]);
    };
    let mut clusters = Vec::new();
    for member in members {
        let mut own = objects.clone();
        if let Some(dir) = &member.objects_dir {
            own.extend(
                crate::process::manifests::read_all(dir)?
                    .into_iter()
                    .map(|(_, o)| o),
            );
        }
        clusters.push(SimulatedCluster {
            info: member.info,
            objects: own,
        });
    }
    Ok(clusters)
}
