use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use super::builtins_args::BuiltinArgs;
use super::embedded_clusters_args::EmbeddedClustersArgs;
use super::journal_args::JournalArgs;
use super::listen::{Listen, parse_listen};
use super::record_args::RecordArgs;
use super::registry_args::PluginRefArgs;
use super::sandbox_args::SandboxArgs;
use crate::process::dev::{DevConfig, run};

#[derive(Debug, Args)]
pub struct DevArgs {
    /// Directory of compiled plugins (*.wasm).
    #[arg(long, default_value = "plugins", value_name = "DIR")]
    pub plugins_dir: PathBuf,
    /// Directory of object YAML files to seed and follow.
    #[arg(long, default_value = "examples", value_name = "DIR")]
    pub objects: PathBuf,
    /// CustomResourceDefinitions to apply before the objects, so the embedded cluster knows which
    /// custom kinds are cluster-scoped (a plugin whose namespaced primary owns or writes one is
    /// refused, as on a real cluster) [default: crds, when that directory exists].
    #[arg(long, value_name = "DIR")]
    pub crds: Option<PathBuf>,
    /// Exit once every object has settled instead of running until Ctrl-C.
    #[arg(long)]
    pub until_settled: bool,
    #[command(flatten)]
    pub record: RecordArgs,
    #[command(flatten)]
    pub builtins: BuiltinArgs,
    #[command(flatten)]
    pub references: PluginRefArgs,
    #[command(flatten)]
    pub clusters: EmbeddedClustersArgs,
    #[command(flatten)]
    pub journal: JournalArgs,
    /// Where the decision journal is served for `reconciler-host explain`, or `off`. It asks for
    /// no token and shows what objects held: keep it on loopback.
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_listen, default_value = crate::process::dev::DEV_EXPLAIN_ADDR)]
    pub explain_listen: Listen,
}

/// Where `dev` looks for CRDs when `--crds` is not given: the project's own.
const DEFAULT_CRDS_DIR: &str = "crds";

pub fn run_cmd(sandbox: &SandboxArgs, args: DevArgs) -> anyhow::Result<ExitCode> {
    let config = sandbox.config()?;
    let members = args.clusters.members()?;
    let mut keep = None;
    let fetched = args
        .references
        .fetch_all(&[], config.compile_cache.as_deref(), &mut keep)?;
    // Plugin objects among the objects: pulled, and followed as their files change.
    let object_plugins = if args.objects.exists() {
        let cache = args
            .references
            .access
            .cache(config.compile_cache.as_deref(), &mut keep)?;
        Some(
            crate::plugin_resources::from_objects::ObjectPlugins::new(
                args.references.access.options()?,
                cache,
            )
            .map_err(|e| {
                anyhow::anyhow!("creating the directory pulled plugins are served from: {e}")
            })?,
        )
    } else {
        None
    };
    let has_plugin_objects = args.objects.exists()
        && !crate::plugin_resources::from_objects::plugin_objects(
            &crate::process::manifests::read_all(&args.objects)?
                .into_iter()
                .map(|(_, o)| o)
                .collect::<Vec<_>>(),
        )
        .is_empty();
    let pulled = super::registry_args::serve_fetched(&fetched)?;
    let sandbox = Arc::new(crate::plugin::Sandbox::new(config)?);
    // Plugins by reference alone need no plugins directory: an empty one
    // of the process's stands in (and new files dropped there still load).
    let mut plugins_dir = args.plugins_dir.clone();
    let mut empty_plugins_dir = None;
    if !plugins_dir.is_dir() {
        if fetched.is_empty() && !has_plugin_objects {
            anyhow::bail!(
                "the plugins directory {} does not exist (build the example plugins with scripts/build-plugins)",
                args.plugins_dir.display()
            );
        }
        let dir = tempfile::Builder::new()
            .prefix("reconciler-host-plugins-")
            .tempdir()?;
        plugins_dir = dir.path().to_path_buf();
        empty_plugins_dir = Some(dir);
    }
    let crds_dir = match args.crds {
        Some(dir) if !dir.exists() => {
            anyhow::bail!("the CRD directory {} does not exist", dir.display())
        }
        Some(dir) => Some(dir),
        None => Some(PathBuf::from(DEFAULT_CRDS_DIR)).filter(|d| d.is_dir()),
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let config = DevConfig {
        plugins_dir,
        pulled_dir: pulled.as_ref().and_then(|p| p.dir()).map(Path::to_path_buf),
        object_plugins,
        objects_dir: args.objects,
        crds_dir,
        until_settled: args.until_settled,
        record: args.record.options(),
        builtins: args.builtins.config(),
        members,
        journal: {
            let journal = crate::engine::journal::Journal::default();
            journal.set_limits(args.journal.limits());
            journal.loops.set_rule(args.journal.loops());
            Arc::new(journal)
        },
        explain_listen: match args.explain_listen {
            Listen::Off => None,
            Listen::At(addr) => Some(addr),
        },
    };
    let _keep_alive = (empty_plugins_dir, pulled, keep);
    let refused = crate::process::main_task::block_on_worker(&runtime, async move {
        run(sandbox, config, &mut std::io::stdout()).await
    })?;
    Ok(if refused == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
