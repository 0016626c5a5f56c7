use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::SandboxArgs;
use crate::golden::{CaseOutcome, discover, run_case};
use crate::plugin::RandomKey;

#[derive(Debug, Args)]
pub struct TestArgs {
    /// The compiled plugin (.wasm).
    pub plugin: PathBuf,
    /// A directory of case files (*.yaml), or one case file.
    pub cases: PathBuf,
}

pub fn run(sandbox: &SandboxArgs, args: TestArgs) -> anyhow::Result<ExitCode> {
    // Runs must repeat exactly: the random streams plugins see depend only
    // on the plugin and the object (plugin/call_random.rs).
    let sandbox = sandbox.sandbox_with(RandomKey::fixed())?;
    let plugin = sandbox.load(&args.plugin)?;
    let files = discover(&args.cases)?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "running {} case{} from {} against {} ({} {})",
        files.len(),
        if files.len() == 1 { "" } else { "s" },
        args.cases.display(),
        args.plugin.display(),
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
