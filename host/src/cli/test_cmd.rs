use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::registry_args::PluginRefArgs;
use super::sandbox_args::SandboxArgs;
use crate::golden::{CaseOutcome, discover, run_case};
use crate::plugin::RandomKey;
use crate::registry::reference::looks_like_reference;

#[derive(Debug, Args)]
pub struct TestArgs {
    /// The compiled plugin (.wasm), or a reference (oci://HOST/REPO:TAG); with --plugin, leave it
    /// out.
    #[arg(value_name = "PLUGIN|REF")]
    pub plugin: String,
    /// Directories of case files (*.yaml) and single case files, run in
    /// the order given (a directory's cases by name).
    pub cases: Vec<PathBuf>,
    /// Compare instead of check: give each reconcile case's input to OLD (the version serving: a
    /// file or a reference) and to PLUGIN, and report what PLUGIN decides differently (applied
    /// fields, status, deletes, Events, requeue, errors); `expect` is not read. Exits 1 when any
    /// case differs.
    #[arg(long, value_name = "OLD")]
    pub against: Option<String>,
    #[command(flatten)]
    pub references: PluginRefArgs,
}

pub fn run(sandbox: &SandboxArgs, args: TestArgs) -> anyhow::Result<ExitCode> {
    // Runs must repeat exactly: the random streams plugins see depend only
    // on the plugin and the object (plugin/call_random.rs).
    let sandbox = sandbox.sandbox_with(RandomKey::fixed())?;
    // `test --plugin REF CASES...` gives only cases as positionals.
    let (plugin_arg, cases) = match (args.cases.is_empty(), args.references.plugins.as_slice()) {
        (false, []) => (args.plugin.clone(), args.cases.clone()),
        (true, [reference]) => (reference.to_string(), vec![PathBuf::from(&args.plugin)]),
        (true, []) => {
            anyhow::bail!("give the plugin and the cases: reconciler-host test PLUGIN CASES...")
        }
        (false, [_]) if looks_like_reference(&args.plugin) || args.plugin.ends_with(".wasm") => {
            anyhow::bail!("give the plugin once: as PLUGIN or as --plugin, not both")
        }
        (false, [reference]) => {
            let mut all = vec![PathBuf::from(&args.plugin)];
            all.extend(args.cases.iter().cloned());
            (reference.to_string(), all)
        }
        (_, [_, _, ..]) => anyhow::bail!("test runs one plugin: give --plugin once"),
    };
    let mut keep = None;
    let cache_dir = sandbox.compile_cache().map(|c| c.dir());
    let (path, shown) = args.references.file_of(&plugin_arg, cache_dir, &mut keep)?;
    let plugin = sandbox.load(&path)?;
    let mut files = Vec::new();
    for path in &cases {
        files.extend(discover(path)?);
    }
    let from = match cases.as_slice() {
        [one] => one.display().to_string(),
        several => format!("{} paths", several.len()),
    };
    if let Some(old) = &args.against {
        let (old_path, old_shown) = args.references.file_of(old, cache_dir, &mut keep)?;
        let serving = sandbox.load(&old_path)?;
        let candidate = plugin.drawing_random_as(&serving);
        return compare_cases(&candidate, (&serving, &old_shown), &shown, &files);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "running {} case{} from {} against {} ({} {})",
        files.len(),
        if files.len() == 1 { "" } else { "s" },
        from,
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

/// `test --against`: one line per case, the differences under it.
fn compare_cases(
    candidate: &crate::plugin::LoadedPlugin,
    (serving, serving_shown): (&crate::plugin::LoadedPlugin, &str),
    candidate_shown: &str,
    files: &[PathBuf],
) -> anyhow::Result<ExitCode> {
    use crate::decision_diff::golden_cases::{Compared, compare_case};
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "comparing {} ({} {}) with the serving {} ({} {}) on {} case(s)",
        candidate_shown,
        candidate.name(),
        candidate.metadata().version,
        serving_shown,
        serving.name(),
        serving.metadata().version,
        files.len()
    )?;
    let width = files.iter().map(|f| label(f).len()).max().unwrap_or(0);
    let (mut same, mut differ, mut broken, mut skipped) = (0, 0, 0, 0);
    for file in files {
        let name = label(file);
        let (description, compared) = compare_case(candidate, serving, file);
        let about = description.map(|d| format!("  {d}")).unwrap_or_default();
        match compared {
            Compared::Same => {
                same += 1;
                writeln!(out, "same    {name:width$}{about}")?;
            }
            Compared::Differs(differences) => {
                differ += 1;
                writeln!(out, "DIFFERS {name:width$}{about}")?;
                for d in &differences {
                    writeln!(out, "          {}", crate::decision_diff::report::line(d))?;
                }
            }
            Compared::NotAReconcileCase => {
                skipped += 1;
                writeln!(
                    out,
                    "skip    {name:width$}  (a change or admission case: not compared)"
                )?;
            }
            Compared::Broken(why) => {
                broken += 1;
                writeln!(out, "BROKEN  {name:width$}{about}")?;
                writeln!(out, "          {why}")?;
            }
        }
    }
    writeln!(
        out,
        "{same} the same, {differ} decided differently, {broken} broken, {skipped} not compared"
    )?;
    Ok(if differ == 0 && broken == 0 {
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
