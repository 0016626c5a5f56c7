//! `bench-cluster`: the reconciler host against a native kube-rs controller
//! on a real API server (issue 14). See BENCHMARKS.md, "On a real API server".

mod audit;
mod capacity;
mod cgroup;
mod churn;
mod cluster;
mod controller;
mod driver;
mod following;
mod moves;
mod native;
mod observer;
mod plugin_apply;
mod podset;
mod procfs;
mod queue_waits;
mod replicas;
mod scale;
mod stats;
mod table;

use std::process::ExitCode;

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
    /// One host against N replicas sharding the same PodSets (`run --sharding`): each
    /// replica's CPU, writes and memory next to the one host's, the time to converge, and the
    /// keys that move when one replica is killed.
    Replicas(replicas::ReplicasArgs),
    /// Sharding at scale: tens of thousands of PodSets on an API server without
    /// kube-controller-manager, then one host, a ring of one and N replicas in turn, each
    /// behind a counting relay: cached objects, RSS above the idle floor and bytes received, by
    /// replica.
    Scale(scale::ScaleArgs),
    /// Throughput under a CPU quota: each replica in a CPU cgroup of its own (needs root), a
    /// churn of PodSet creates and size changes raised step by step until a step misses its
    /// aims (p99 queue wait 1 s, p99 change to effect 5 s); a ring of one against N replicas.
    Churn(churn::ChurnArgs),
    /// Time from applying a Plugin to its first reconcile, cold and warm, against dropping the
    /// same plugin into the plugins directory (KUBECONFIG; a registry on loopback).
    PluginApply(plugin_apply::PluginApplyArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = tokio::runtime::Runtime::new()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| {
            runtime.block_on(async {
                match cli.command {
                    Command::NativeController => native::run().await.map(|()| ExitCode::SUCCESS),
                    Command::Replicas(args) => {
                        replicas::run(args).await.map(|()| ExitCode::SUCCESS)
                    }
                    Command::Scale(args) => scale::run(args).await.map(|()| ExitCode::SUCCESS),
                    Command::Churn(args) => churn::run(args).await.map(|()| ExitCode::SUCCESS),
                    Command::PluginApply(args) => {
                        plugin_apply::run(args).await.map(|()| ExitCode::SUCCESS)
                    }
                    Command::Run(args) => {
                        // Dropping the run on Ctrl-C stops the controller and
                        // the cluster and removes the state dir (their Drop
                        // impls).
                        tokio::select! {
                            result = driver::run(args) => result.map(|()| ExitCode::SUCCESS),
                            _ = tokio::signal::ctrl_c() => {
                                eprintln!("bench-cluster: interrupted; stopping what it started");
                                Ok(ExitCode::from(130))
                            }
                        }
                    }
                }
            })
        });
    result.unwrap_or_else(|e| {
        eprintln!("bench-cluster: {e:#}");
        ExitCode::FAILURE
    })
}
