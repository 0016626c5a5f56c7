use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;

use crate::scaffold::{Checkout, Language, PluginName, Scaffold, parse_kind};

#[derive(Debug, Args)]
pub struct NewArgs {
    /// The plugin's name: lowercase letters, digits and '-' (also its directory, crate, module and
    /// .wasm name).
    pub name: String,
    /// The language to write it in.
    #[arg(long, value_enum)]
    pub lang: Language,
    /// The kind it reconciles, as GROUP/VERSION/KIND (VERSION/KIND for the core group): a custom
    /// kind gets a CRD, a built-in one (apps/v1/Deployment) does not.
    #[arg(long, value_name = "GROUP/VERSION/KIND")]
    pub kind: String,
    /// Also serve admission for the kind: validation and defaulting stubs, with a golden case each.
    #[arg(long)]
    pub admission: bool,
    /// Make the custom kind cluster-scoped (its CRD's scope); custom kinds are namespaced
    /// otherwise, built-in ones have their own scope.
    #[arg(long)]
    pub cluster_scoped: bool,
    /// Where to write the project [default: ./NAME]; it must not exist, or be empty.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// The reconciler-host checkout whose SDK, WIT and pinned tools the project uses [default:
    /// the checkout this binary was built from].
    #[arg(long, value_name = "DIR")]
    pub sdk: Option<PathBuf>,
}

pub fn run(args: NewArgs) -> anyhow::Result<ExitCode> {
    let name = PluginName::parse(&args.name)?;
    let kind = parse_kind(&args.kind)?;
    let checkout = match &args.sdk {
        Some(dir) => Checkout::at(dir)?,
        None => Checkout::of_this_build().context(
            "this binary's reconciler-host checkout is gone: give --sdk the directory of your clone",
        )?,
    };
    let scaffold = Scaffold::new(
        name,
        args.lang,
        kind,
        args.admission,
        args.cluster_scoped,
        checkout,
    )?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(scaffold.name.as_str()));
    let files = scaffold.write(&dir)?;
    println!(
        "wrote {} ({} plugin for {} {}{}):",
        dir.display(),
        match args.lang {
            Language::Rust => "a Rust",
            Language::Python => "a Python",
            Language::Js => "a JavaScript",
        },
        scaffold.kind.api_version(),
        scaffold.kind.kind,
        if args.admission {
            ", with admission"
        } else {
            ""
        }
    );
    for file in &files {
        println!("  {}", file.display());
    }
    println!(
        "next: cd {} and follow its README.md (test natively, build, run the golden cases)",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}
