use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use reconciler_contract::PluginMetadata;
use reconciler_contract::{CONTRACT_PACKAGE, CONTRACT_VERSION};
use serde::Serialize;

use super::registry_args::PluginRefArgs;
use super::sandbox_args::SandboxArgs;
use crate::plugin::LoadedPlugin;
use crate::plugin::directory::{load_candidates, load_files, plugin_files};
use crate::registry::PluginReference;
use crate::registry::reference::looks_like_reference;

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Compiled plugins (.wasm), directories of them, or references (oci://HOST/REPO:TAG). Several
    /// are checked as one host would serve them: a plugin whose name or primary kind an earlier
    /// one's plugin has is refused.
    #[arg(value_name = "PLUGIN|DIR|REF", required_unless_present = "plugins")]
    pub paths: Vec<String>,
    #[command(flatten)]
    pub references: PluginRefArgs,
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
    max_events: usize,
    max_applies: usize,
    max_deletes: usize,
    max_concurrent_reconciles: usize,
}

fn inspection<'a>(
    plugin: &'a LoadedPlugin,
    shown_as: &std::collections::BTreeMap<PathBuf, String>,
) -> Inspection<'a> {
    let limits = plugin.limits();
    Inspection {
        file: shown_as
            .get(plugin.path())
            .cloned()
            .unwrap_or_else(|| plugin.path().display().to_string()),
        sha256: plugin.sha256(),
        contract: format!("{CONTRACT_PACKAGE}@{CONTRACT_VERSION}"),
        metadata: plugin.metadata(),
        limits: Limits {
            memory_mib: limits.memory_bytes >> 20,
            timeout_ms: limits.timeout.as_millis(),
            max_output_kib: limits.output_bytes >> 10,
            max_events: limits.max_events,
            max_applies: limits.max_applies,
            max_deletes: limits.max_deletes,
            max_concurrent_reconciles: limits.concurrency,
        },
    }
}

pub fn run(sandbox: &SandboxArgs, args: InspectArgs) -> anyhow::Result<ExitCode> {
    let sandbox = sandbox.sandbox()?;
    let mut files = Vec::new();
    let mut positional_refs = Vec::new();
    for text in &args.paths {
        if looks_like_reference(text) {
            positional_refs.push(PluginReference::parse(text)?);
            continue;
        }
        let path = PathBuf::from(text);
        if path.is_dir() {
            files.extend(plugin_files(&path).map_err(|e| {
                anyhow::anyhow!("cannot read the plugins directory {}: {e}", path.display())
            })?);
        } else {
            files.push(path.clone());
        }
    }
    let mut keep = None;
    let fetched = args.references.fetch_all(
        &positional_refs,
        sandbox.compile_cache().map(|c| c.dir()),
        &mut keep,
    )?;
    let shown_as = super::registry_args::fetched_files(&fetched)
        .into_iter()
        .collect();
    files.extend(fetched.iter().map(|f| f.path.clone()));
    if files.is_empty() {
        anyhow::bail!("no plugin (*.wasm) in {}", args.paths.join(", "));
    }
    // A candidate (NAME.candidate.wasm) given with its serving file is
    // inspected as the candidate it is; alone, as any plugin.
    let given: std::collections::BTreeSet<PathBuf> = files.iter().cloned().collect();
    let (files, candidate_files): (Vec<PathBuf>, Vec<PathBuf>) = files.into_iter().partition(|f| {
        crate::plugin::candidates::serving_file_of(f).is_none_or(|s| !given.contains(&s))
    });
    let (plugins, mut failures) = load_files(&sandbox, &files);
    let (candidates, unfit) = load_candidates(&sandbox, &candidate_files, &plugins);
    failures.extend(unfit);
    // One plugin asked for and refused: its error is the command's.
    if let ([], [], [only]) = (
        plugins.as_slice(),
        candidates.as_slice(),
        failures.as_slice(),
    ) {
        anyhow::bail!("{only}");
    }
    for failure in &failures {
        eprintln!("error: {failure}");
    }
    let shown = plugins.iter().map(|p| (p, None));
    let shown = shown.chain(candidates.iter().map(|c| (c, Some(c.name()))));
    for (i, (plugin, candidate_of)) in shown.enumerate() {
        if i > 0 {
            println!("---");
        }
        if let Some(name) = candidate_of {
            println!("# candidate of plugin {name}: runs in shadow beside it");
        }
        print!(
            "{}",
            serde_yaml_ng::to_string(&inspection(plugin, &shown_as))?
        );
    }
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
