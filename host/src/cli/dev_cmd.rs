use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use super::SandboxArgs;
use crate::dev::{DevConfig, run};

#[derive(Debug, Args)]
pub struct DevArgs {
    /// Directory of compiled plugins (*.wasm).
    #[arg(long, default_value = "plugins", value_name = "DIR")]
    pub plugins_dir: PathBuf,
    /// Directory of object YAML files to seed and follow.
    #[arg(long, default_value = "examples", value_name = "DIR")]
    pub objects: PathBuf,
    /// Exit once every object has settled instead of running until Ctrl-C.
    #[arg(long)]
    pub until_settled: bool,
}

pub fn run_cmd(sandbox: &SandboxArgs, args: DevArgs) -> anyhow::Result<ExitCode> {
    let sandbox = sandbox.sandbox()?;
    let (plugins, failures) = crate::plugin::directory::load_dir(&sandbox, &args.plugins_dir)
        .map_err(|e| anyhow::anyhow!("cannot read the plugins directory {}: {e} (build plugins with scripts/build-plugins)", args.plugins_dir.display()))?;
    for failure in &failures {
        eprintln!("error: {failure}");
    }
    for p in &plugins {
        println!(
            "loaded {} {} from {} (reconciles {})",
            p.name(),
            p.metadata().version,
            p.path().display(),
            p.metadata().primary
        );
    }
    if plugins.is_empty() {
        anyhow::bail!(
            "no plugin loaded from {} (build them with scripts/build-plugins)",
            args.plugins_dir.display()
        );
    }
    let runtime = tokio::runtime::Runtime::new()?;
    let config = DevConfig {
        objects_dir: args.objects,
        until_settled: args.until_settled,
    };
    let plugins = plugins.into_iter().map(Arc::new).collect();
    let mut out = std::io::stdout();
    runtime.block_on(run(plugins, config, &mut out))?;
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
