use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::SandboxArgs;
use crate::plugin::directory::load_dir;
use crate::rbac::{Plurals, cluster_role};

#[derive(Debug, Args)]
pub struct RbacArgs {
    /// Directory of compiled plugins (*.wasm) the role is for.
    #[arg(long, default_value = "plugins", value_name = "DIR")]
    pub plugins_dir: PathBuf,
    /// CRD manifests to take the resource names (plurals) of custom kinds from; without
    /// them a custom kind's plural is guessed the way the API server guesses (Website -> websites).
    #[arg(long, value_name = "DIR")]
    pub crds: Option<PathBuf>,
    /// The ClusterRole's name.
    #[arg(long, default_value = "reconciler-host")]
    pub name: String,
}

pub fn run(sandbox: &SandboxArgs, args: RbacArgs) -> anyhow::Result<ExitCode> {
    let sandbox = sandbox.sandbox()?;
    let (plugins, failed) = load_dir(&sandbox, &args.plugins_dir)
        .with_context(|| format!("reading {}", args.plugins_dir.display()))?;
    if let Some(error) = failed.first() {
        // A role missing a plugin's rules would fail later, in the cluster.
        anyhow::bail!("{error} (a role is only generated when every plugin loads)");
    }
    let plurals = match &args.crds {
        Some(dir) => Plurals::from_crds(dir)?,
        None => Plurals::default(),
    };
    let metadata: Vec<_> = plugins.iter().map(|p| p.metadata().clone()).collect();
    print!("{}", cluster_role(&metadata, &plurals, &args.name));
    Ok(ExitCode::SUCCESS)
}
