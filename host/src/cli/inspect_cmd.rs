use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use reconciler_sdk::PluginMetadata;
use reconciler_sdk::contract::{CONTRACT_PACKAGE, CONTRACT_VERSION};
use serde::Serialize;

use super::SandboxArgs;

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The compiled plugin (.wasm).
    pub plugin: PathBuf,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Inspection<'a> {
    file: String,
    sha256: &'a str,
    contract: String,
    #[serde(flatten)]
    metadata: &'a PluginMetadata,
    /// What this host would run it under, after its hints.
    limits: Limits,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Limits {
    memory_mib: usize,
    timeout_ms: u128,
    max_output_kib: usize,
}

pub fn run(sandbox: &SandboxArgs, args: InspectArgs) -> anyhow::Result<ExitCode> {
    let sandbox = sandbox.sandbox()?;
    let plugin = sandbox.load(&args.plugin)?;
    let limits = plugin.limits();
    let inspection = Inspection {
        file: args.plugin.display().to_string(),
        sha256: plugin.sha256(),
        contract: format!("{CONTRACT_PACKAGE}@{CONTRACT_VERSION}"),
        metadata: plugin.metadata(),
        limits: Limits {
            memory_mib: limits.memory_bytes >> 20,
            timeout_ms: limits.timeout.as_millis(),
            max_output_kib: limits.output_bytes >> 10,
        },
    };
    print!("{}", serde_yaml_ng::to_string(&inspection)?);
    Ok(ExitCode::SUCCESS)
}
