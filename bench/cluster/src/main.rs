//! `bench-cluster`: the reconciler host against a native kube-rs controller
//! on a real API server (issue 14). See BENCHMARKS.md, "On a real API server".

mod audit;
mod cluster;
mod controller;
mod driver;
mod native;
mod observer;
mod podset;
mod procfs;
mod stats;
mod table;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "bench-cluster",
    about = "The host with podset against a native kube-rs PodSet controller, on a real API server.",
    long_about = "The host with podset against a native kube-rs PodSet controller, on a real API server.\n\n\
`run` starts the control plane of ../shared/kube (or uses KUBECONFIG), resets it for each side, \
starts the controller, measures and prints a Markdown table. Usually started through scripts/bench-cluster, \
which builds what it needs first."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure both sides and print the table.
    Run(driver::RunArgs),
    /// The native PodSet controller (KUBECONFIG), as the driver starts it.
    NativeController,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        match cli.command {
            Command::NativeController => native::run().await,
            Command::Run(args) => {
                // Dropping the run on Ctrl-C stops the controller and the
                // cluster and removes the state dir (their Drop impls).
                tokio::select! {
                    result = driver::run(args) => result,
                    _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted; cleaned up"),
                }
            }
        }
    })
}
