//! The engine on the embedded cluster: N PodSets converging with the
//! compiled podset plugin.
//!
//!     scripts/build-plugins && cargo bench -p reconciler-host --bench embedded_converge
//!
//! Each measurement is its own child process (this binary run again with
//! `--child`, see `measured_child`), so its peak RSS is its own. A child
//! builds what `dev` builds: an embedded cluster with the CRDs of `crds/`,
//! N PodSets spread over several namespaces (applied as a user would, before
//! the engine starts: a host starting on a cluster that already holds them),
//! a sandbox with podset loaded from a warm compile cache, an engine with
//! the sandbox's instance pool, and `dev`'s dispatch loop. The clock starts
//! when the engine is created and stops when the loop is idle: nothing
//! queued, nothing in flight, no watch event left. The child then checks
//! that idle is converged: every PodSet has its Deployment, of its size and
//! owned by it, and its status written. The embedded cluster runs no
//! built-in controllers, so no Pods exist and every `podNames` is empty.
//!
//! Reported per child: wall time to converge, reconciles (and reconciles per
//! second), the process's CPU time (user + system, getrusage) over the
//! converge, RSS when the engine starts (the cluster already filled) and
//! the peak (VmHWM) of the whole child.
//!
//! Sizes: `BENCH_PODSETS` (comma-separated, default "1000,10000") or the
//! same as arguments (`cargo bench ... -- 10000`); `BENCH_RUNS` children per
//! size (default 3), of which the table shows the median and the range.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::cluster::{ClusterBackend, ObjectKey, RealClock};
use reconciler_host::engine::dispatch::{Dispatcher, Wake};
use reconciler_host::engine::{Engine, Outcome};
use reconciler_host::plugin::{Sandbox, SandboxConfig};
use reconciler_host::process::dev::seed_crds;
use reconciler_host::process::main_task::block_on_worker;
use reconciler_sdk::KindRef;
use serde_json::{Value, json};

mod measured_child;
use measured_child::{
    Measured, cpu_time, print_measured, proc_status, proc_status_kb, run_child, spread,
};

/// Where the PodSets go, round robin.
const NAMESPACES: [&str; 8] = [
    "shop", "payments", "search", "accounts", "billing", "catalog", "checkout", "support",
];

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        return child(&args[i + 1..]);
    }
    // `cargo bench` passes `--bench`; anything else not a flag is a size.
    let sizes: Vec<String> = args[1..]
        .iter()
        .filter(|a| !a.starts_with("--"))
        .cloned()
        .collect();
    parent(sizes)
}

// ---------------------------------------------------------------------------
// Parent: warms the compile cache, runs the children, prints the table.

fn parent(arg_sizes: Vec<String>) -> anyhow::Result<()> {
    let sizes = if arg_sizes.is_empty() {
        std::env::var("BENCH_PODSETS").unwrap_or_else(|_| "1000,10000".into())
    } else {
        arg_sizes.join(",")
    };
    let sizes: Vec<usize> = sizes
        .split(',')
        .map(|s| s.trim().parse().context("PodSet counts: comma-separated"))
        .collect::<anyhow::Result<_>>()?;
    let runs: usize = match std::env::var("BENCH_RUNS") {
        Ok(v) => v.parse().context("BENCH_RUNS: a count")?,
        Err(_) => 3,
    };
    ensure!(runs > 0, "BENCH_RUNS: at least 1");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let podset = root.join("plugins/podset.wasm");
    ensure!(
        podset.is_file(),
        "{} is missing: run scripts/build-plugins first",
        podset.display()
    );
    let crds = root.join("crds");

    // Children load podset as a restarted host does: from a warm cache.
    let work = tempfile::tempdir()?;
    let cache_dir = work.path().join("compile-cache");
    let sandbox = Sandbox::new(SandboxConfig {
        compile_cache: Some(cache_dir.clone()),
        ..SandboxConfig::default()
    })?;
    sandbox.load(&podset)?;
    drop(sandbox);

    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut rows = Vec::new();
    for &n in &sizes {
        let mut measured = Vec::new();
        for run in 1..=runs {
            eprintln!("measuring: {n} PodSets, run {run} of {runs}");
            let args = [
                n.to_string(),
                path_arg(&podset),
                path_arg(&cache_dir),
                path_arg(&crds),
            ];
            let m = run_child(&format!("{n} PodSets"), &args)?;
            eprintln!(
                "  {} reconciles in {:.3} s, CPU {:.3} s, peak RSS {:.1} MiB",
                m["reconciles"],
                m["converge_us"] as f64 / 1e6,
                (m["user_us"] + m["sys_us"]) as f64 / 1e6,
                m["hwm_kb"] as f64 / 1024.0
            );
            measured.push(m);
        }
        rows.push((n, measured));
    }
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    print_report(&rows);
    println!();
    println!(
        "load average (1, 5, 15 min) before: {}, after: {}; {} cores",
        first_three(&load_before),
        first_three(&load_after),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    Ok(())
}

fn path_arg(path: &Path) -> String {
    path.display().to_string()
}

fn first_three(loadavg: &str) -> String {
    loadavg
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn print_report(rows: &[(usize, Vec<Measured>)]) {
    println!();
    println!(
        "| PodSets | time to converge (wall) | reconciles | reconciles/s | CPU (user+sys) | CPU per reconcile | RSS at engine start | peak RSS (VmHWM) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (n, measured) in rows {
        let wall = spread(measured, |m| m["converge_us"] as f64 / 1e6);
        let reconciles = spread(measured, |m| m["reconciles"] as f64);
        let rate = spread(measured, |m| {
            m["reconciles"] as f64 / (m["converge_us"] as f64 / 1e6)
        });
        let cpu = spread(measured, |m| (m["user_us"] + m["sys_us"]) as f64 / 1e6);
        let per = spread(measured, |m| {
            (m["user_us"] + m["sys_us"]) as f64 / m["reconciles"] as f64
        });
        let start = spread(measured, |m| m["rss_start_kb"] as f64 / 1024.0);
        let hwm = spread(measured, |m| m["hwm_kb"] as f64 / 1024.0);
        println!(
            "| {n} | {} s | {} | {} | {} s | {} us | {} MiB | {} MiB |",
            wall.show(3),
            reconciles.show(0),
            rate.show(0),
            cpu.show(3),
            per.show(1),
            start.show(1),
            hwm.show(1),
        );
    }
    println!();
    println!("median of the runs, [min-max] when they differ; MiB = 1024 KiB");
}

// ---------------------------------------------------------------------------
// Child: one cluster, one engine, converged once.

fn child(args: &[String]) -> anyhow::Result<()> {
    let [n, podset, cache, crds] = args else {
        bail!("--child takes: podsets podset.wasm compile-cache crds-dir");
    };
    let n: usize = n.parse().context("a PodSet count")?;
    // As `dev`: a multi-threaded runtime, one worker per core, the loop on
    // a worker.
    let runtime = tokio::runtime::Runtime::new()?;
    let (podset, cache, crds) = (
        PathBuf::from(podset),
        PathBuf::from(cache),
        PathBuf::from(crds),
    );
    block_on_worker(&runtime, async move {
        converge(n, &podset, &cache, &crds).await
    })?;
    // Measured and printed: tearing 10,000 objects down would only add time.
    std::process::exit(0)
}

async fn converge(n: usize, podset: &Path, cache: &Path, crds: &Path) -> anyhow::Result<()> {
    let sandbox = Sandbox::new(SandboxConfig {
        compile_cache: Some(cache.to_path_buf()),
        ..SandboxConfig::default()
    })?;
    let plugin = Arc::new(sandbox.load(podset)?);

    // Room for the PodSets, their Deployments and the namespaces.
    let capacity = (2 * n + NAMESPACES.len() + 100).max(100_000);
    let cluster = Arc::new(EmbeddedCluster::with_capacity(
        Arc::new(RealClock),
        capacity,
    ));
    for line in seed_crds(crds, &cluster) {
        ensure!(!line.starts_with("error"), "{line}");
    }
    for namespace in NAMESPACES {
        cluster.apply_as_user(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace}}))?;
    }
    for i in 0..n {
        cluster.apply_as_user(podset_object(i))?;
    }

    let rss_start = proc_status_kb(&proc_status()?, "VmRSS")?;
    let cpu_start = cpu_time()?;
    let started = Instant::now();
    let engine = Arc::new(
        Engine::empty(cluster.clone(), Arc::new(RealClock))
            .with_instance_pool(sandbox.reconcile_instances()),
    );
    engine.add_plugin(plugin).await?;
    let mut dispatcher = Dispatcher::new(engine.clone());
    let mut reconciles = 0u64;
    let mut failures = 0u64;
    let mut tally = |outcome: &Outcome, what: &dyn std::fmt::Display| {
        reconciles += 1;
        if let Outcome::Failed { .. } | Outcome::Unloaded = outcome {
            failures += 1;
            if failures <= 5 {
                eprintln!("{what}");
            }
        }
    };
    // `dev`'s loop, stopping once idle.
    loop {
        let changes = dispatcher.dispatch();
        if dispatcher.outstanding() == 0
            && changes == 0
            && engine.in_flight() == 0
            && engine.next_wakeup().is_none()
        {
            break;
        }
        if let Wake::Finished(record) = dispatcher.wake().await {
            tally(&record.outcome, &record);
        }
    }
    let elapsed = started.elapsed();
    let cpu = cpu_time()?.since(&cpu_start);
    let status = proc_status()?;
    ensure!(failures == 0, "{failures} reconciles failed");
    check_converged(&cluster, n).await?;

    print_measured(&[
        ("podsets", n as u64),
        ("converge_us", duration_us(elapsed)),
        ("reconciles", reconciles),
        ("user_us", duration_us(cpu.user)),
        ("sys_us", duration_us(cpu.system)),
        ("rss_start_kb", rss_start),
        ("rss_kb", proc_status_kb(&status, "VmRSS")?),
        ("hwm_kb", proc_status_kb(&status, "VmHWM")?),
        ("events", cluster.events().len() as u64),
    ]);
    Ok(())
}

/// PodSet `i`: sizes 1 to 5, in the namespaces round robin.
fn podset_object(i: usize) -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": format!("podset-{i:05}"), "namespace": NAMESPACES[i % NAMESPACES.len()]},
        "spec": {"size": 1 + i % 5}})
}

/// Fails unless every PodSet has its Deployment (its size, owned by it)
/// and a written status.
async fn check_converged(cluster: &EmbeddedCluster, n: usize) -> anyhow::Result<()> {
    let deployment_kind = KindRef::new("apps", "v1", "Deployment");
    for i in 0..n {
        let podset = podset_object(i);
        let key = ObjectKey::of(&podset).context("a PodSet key")?;
        let stored = cluster
            .get(&key)
            .await?
            .with_context(|| format!("{key} is gone"))?;
        ensure!(
            stored.pointer("/status/podNames") == Some(&json!([])),
            "{key} has no status.podNames: {}",
            stored.get("status").unwrap_or(&Value::Null)
        );
        let deployment_key =
            ObjectKey::new(deployment_kind.clone(), key.namespace.as_deref(), &key.name);
        let deployment = cluster
            .get(&deployment_key)
            .await?
            .with_context(|| format!("{key} has no Deployment"))?;
        ensure!(
            deployment.pointer("/spec/replicas") == podset.pointer("/spec/size"),
            "{deployment_key} has replicas {:?}, the PodSet asks for {:?}",
            deployment.pointer("/spec/replicas"),
            podset.pointer("/spec/size")
        );
        ensure!(
            deployment.pointer("/metadata/ownerReferences/0/uid")
                == stored.pointer("/metadata/uid"),
            "{deployment_key} is not owned by {key}"
        );
    }
    Ok(())
}

fn duration_us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
