use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::SandboxArgs;
use super::registry_args::PluginRefArgs;
use crate::golden::{CaseOutcome, discover, run_case};
use crate::plugin::RandomKey;
use crate::registry::PluginReference;
use crate::registry::reference::looks_like_reference;

#[derive(Debug, Args)]
pub struct TestArgs {
    /// The compiled plugin (.wasm), or a reference (oci://HOST/REPO:TAG); with --plugin, leave it
    /// out.
    #[arg(value_name = "PLUGIN|REF")]
    pub plugin: String,
    /// A directory of case files (*.yaml), or one case file.
    pub cases: Option<PathBuf>,
    #[command(flatten)]
    pub references: PluginRefArgs,
}

pub fn run(sandbox: &SandboxArgs, args: TestArgs) -> anyhow::Result<ExitCode> {
    // Runs must repeat exactly: the random streams plugins see depend only
    // on the plugin and the object (plugin/call_random.rs).
    let sandbox = sandbox.sandbox_with(RandomKey::fixed())?;
    // `test --plugin REF CASES` gives one positional: the cases.
    let (plugin_arg, cases) = match (&args.cases, args.references.plugins.as_slice()) {
        (Some(cases), []) => (args.plugin.clone(), cases.clone()),
        (None, [reference]) => (reference.to_string(), PathBuf::from(&args.plugin)),
        (None, []) => {
            anyhow::bail!("give the plugin and the cases: reconciler-host test PLUGIN CASES")
        }
        (Some(_), [_]) => anyhow::bail!("give the plugin once: as PLUGIN or as --plugin, not both"),
        (_, [_, _, ..]) => anyhow::bail!("test runs one plugin: give --plugin once"),
    };
    let mut keep = None;
    let (path, shown) = if looks_like_reference(&plugin_arg) {
        let reference = PluginReference::parse(&plugin_arg)?;
        let only = PluginRefArgs {
            plugins: Vec::new(),
            ..args.references.clone()
        };
        let fetched = only.fetch_all(
            &[reference],
            sandbox.compile_cache().map(|c| c.dir()),
            &mut keep,
        )?;
        let fetched = &fetched[0];
        (
            fetched.path.clone(),
            format!("{}@{}", fetched.reference, fetched.digest),
        )
    } else {
        (PathBuf::from(&plugin_arg), plugin_arg.clone())
    };
    let plugin = sandbox.load(&path)?;
    let files = discover(&cases)?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "running {} case{} from {} against {} ({} {})",
        files.len(),
        if files.len() == 1 { "" } else { "s" },
        cases.display(),
        shown,
        plugin.name(),
        plugin.metadata().version
    )?;
    let width = files.iter().map(|f| label(f).len()).max().unwrap_or(0);
    let (mut passed, mut failed) = (0, 0);
    for file in &files {
        let result = run_case(&plugin, file);
        let ms = result.elapsed.as_secs_f64() * 1000.0;
        let name = label(file);
        let about = result
            .description
            .as_deref()
            .map(|d| format!("  {d}"))
            .unwrap_or_default();
        match &result.outcome {
            CaseOutcome::Passed => {
                passed += 1;
                writeln!(out, "ok     {name:width$}  {ms:7.2} ms{about}")?;
            }
            CaseOutcome::Failed(why) | CaseOutcome::Broken(why) => {
                failed += 1;
                let tag = if matches!(result.outcome, CaseOutcome::Broken(_)) {
                    "BROKEN"
                } else {
                    "FAIL  "
                };
                writeln!(out, "{tag} {name:width$}  {ms:7.2} ms{about}")?;
                for line in why.lines() {
                    writeln!(out, "         {line}")?;
                }
            }
        }
    }
    writeln!(out, "{passed} passed, {failed} failed")?;
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn label(file: &std::path::Path) -> String {
    file.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}
