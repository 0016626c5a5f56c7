//! What a member cluster costs the host, and whether spreading work over
//! members costs anything: issue 29's figures, on embedded members (a
//! machine holds 100 of them, not 100 API servers).
//!
//!     scripts/build-plugins && cargo bench -p reconciler-host --bench fleet_members
//!
//! Each measurement is its own child process (`measured_child`):
//!
//! - `members M`: M embedded clusters, each with the podset CRD and one
//!   PodSet, are created first (the clusters' own memory is the API
//!   servers', not the host's, so it is in the baseline). Then the fleet
//!   engages them all with podset; once every member is converged, the RSS
//!   growth over the baseline, divided by M, is a member's memory. The
//!   process's CPU time over 5 s of idling with M members, against 5 s
//!   before any was engaged, is their idle CPU. The first ten members are
//!   engaged one at a time, each timed from `engage` until its podset
//!   serves (first lists done): the time to engage. Then every member is
//!   disengaged, engaged again and disengaged again: the RSS growth over
//!   that cycle, divided by M, is what a member that went leaves behind.
//! - `converge N K`: N PodSets spread over K members, all engaged at once;
//!   the wall time until every PodSet has its Deployment. The same N in one
//!   member is the baseline the K-member figure is a ratio to.
//!
//! `BENCH_MEMBERS` (default 100), `BENCH_PODSETS` (default 1000),
//! `BENCH_SPREAD` (default 10), `BENCH_RUNS` (default 3).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::cluster::{ClusterBackend, ObjectKey, RealClock};
use reconciler_host::fleet::{Fleet, Identity, PluginClusters, Settings};
use reconciler_host::plugin::plugin_host::PluginHost;
use reconciler_host::plugin::{Sandbox, SandboxConfig};
use reconciler_host::process::dev::seed_crds;
use reconciler_host::process::main_task::block_on_worker;
use reconciler_sdk::KindRef;
use serde_json::json;

mod measured_child;
use measured_child::{
    Measured, cpu_time, print_measured, proc_status, proc_status_kb, run_child, spread,
};

const IDLE_WINDOW: Duration = Duration::from_secs(5);

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        return child(&args[i + 1..]);
    }
    parent()
}

fn env_number(name: &str, default: usize) -> anyhow::Result<usize> {
    match std::env::var(name) {
        Ok(v) => v.parse().with_context(|| format!("{name}: a count")),
        Err(_) => Ok(default),
    }
}

fn parent() -> anyhow::Result<()> {
    let members = env_number("BENCH_MEMBERS", 100)?;
    let podsets = env_number("BENCH_PODSETS", 1000)?;
    let members_spread = env_number("BENCH_SPREAD", 10)?;
    let runs = env_number("BENCH_RUNS", 3)?;
    ensure!(
        runs > 0 && members >= 10 && members_spread > 1,
        "BENCH_RUNS >= 1, BENCH_MEMBERS >= 10, BENCH_SPREAD >= 2"
    );
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let podset = root.join("plugins/podset.wasm");
    ensure!(
        podset.is_file(),
        "{} is missing: run scripts/build-plugins first",
        podset.display()
    );
    let work = tempfile::tempdir()?;
    let cache = work.path().join("compile-cache");
    Sandbox::new(SandboxConfig {
        compile_cache: Some(cache.clone()),
        ..SandboxConfig::default()
    })?
    .load(&podset)?;
    let common = [
        podset.display().to_string(),
        cache.display().to_string(),
        root.join("crds").display().to_string(),
    ];

    let mut member_runs = Vec::new();
    let mut converge_runs: BTreeMap<usize, Vec<Measured>> = BTreeMap::new();
    for run in 1..=runs {
        eprintln!("run {run} of {runs}: {members} idle members");
        let mut args = vec!["members".to_string(), members.to_string()];
        args.extend(common.iter().cloned());
        member_runs.push(run_child("members", &args)?);
        // Alternated, so drift in the machine hits both alike.
        for k in [1, members_spread] {
            eprintln!("run {run} of {runs}: {podsets} PodSets over {k} member(s)");
            let mut args = vec!["converge".to_string(), podsets.to_string(), k.to_string()];
            args.extend(common.iter().cloned());
            converge_runs
                .entry(k)
                .or_default()
                .push(run_child("converge", &args)?);
        }
    }

    println!();
    println!("| {members} idle members, podset on each | median [min-max] of {runs} |");
    println!("|---|---:|");
    let per_member = spread(&member_runs, |m| {
        (m["rss_engaged_kb"] as f64 - m["rss_base_kb"] as f64) / m["members"] as f64
    });
    println!(
        "| memory per member (RSS growth / members) | {} KiB |",
        per_member.show(0)
    );
    let kept = spread(&member_runs, |m| {
        (m["rss_cycled_kb"] as f64 - m["rss_disengaged_kb"] as f64) / m["members"] as f64
    });
    println!(
        "| memory left per member by an engage and disengage of every member (RSS growth / members) | {} KiB |",
        kept.show(1)
    );
    let idle = spread(&member_runs, |m| {
        (m["idle_cpu_us"] as f64 - m["base_cpu_us"] as f64)
            / m["members"] as f64
            / IDLE_WINDOW.as_secs_f64()
            / 1000.0
    });
    println!(
        "| idle CPU per member (over the host with none) | {} ms/s |",
        idle.show(3)
    );
    let engage = spread(&member_runs, |m| m["engage_median_us"] as f64 / 1000.0);
    println!(
        "| time to engage one member (engage to podset serving) | {} ms |",
        engage.show(1)
    );
    println!();
    println!("| {podsets} PodSets | time to converge | ratio to one member |");
    println!("|---|---:|---:|");
    let one = spread(&converge_runs[&1], |m| m["converge_us"] as f64 / 1e6);
    for (k, runs) in &converge_runs {
        let wall = spread(runs, |m| m["converge_us"] as f64 / 1e6);
        println!(
            "| over {k} member(s) | {} s | {:.2} |",
            wall.show(3),
            wall.median / one.median
        );
    }
    println!();
    println!(
        "{} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    Ok(())
}

fn child(args: &[String]) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    let args = args.to_vec();
    block_on_worker(&runtime, async move {
        match args.as_slice() {
            [mode, m, podset, cache, crds] if mode == "members" => {
                members(
                    m.parse()?,
                    Path::new(podset),
                    Path::new(cache),
                    Path::new(crds),
                )
                .await
            }
            [mode, n, k, podset, cache, crds] if mode == "converge" => {
                converge(
                    n.parse()?,
                    k.parse()?,
                    Path::new(podset),
                    Path::new(cache),
                    Path::new(crds),
                )
                .await
            }
            other => bail!(
                "--child: members M podset cache crds | converge N K podset cache crds, not {other:?}"
            ),
        }
    })?;
    std::process::exit(0)
}

fn member(i: usize) -> Identity {
    let name = format!("member-{i:03}");
    Identity {
        labels: BTreeMap::from([("reconciler-host.io/cluster".to_string(), name.clone())]),
        source: "bench".into(),
        server: format!("embedded {name}"),
        name,
    }
}

fn cluster(
    crds: &Path,
    podsets: impl Iterator<Item = usize>,
) -> anyhow::Result<Arc<EmbeddedCluster>> {
    let cluster = Arc::new(EmbeddedCluster::new(Arc::new(RealClock)));
    for line in seed_crds(crds, &cluster) {
        ensure!(!line.starts_with("error"), "{line}");
    }
    for i in podsets {
        cluster.apply_as_user(
            json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
            "metadata": {"name": format!("podset-{i:05}"), "namespace": "default"},
            "spec": {"size": 1 + i % 5}}),
        )?;
    }
    Ok(cluster)
}

async fn fleet_with_podset(
    podset: &Path,
    cache: &Path,
) -> anyhow::Result<(Fleet<EmbeddedCluster>, Sandbox)> {
    let sandbox = Sandbox::new(SandboxConfig {
        compile_cache: Some(cache.to_path_buf()),
        ..SandboxConfig::default()
    })?;
    let plugin = Arc::new(sandbox.load(podset)?);
    let settings = Settings {
        instances: sandbox.reconcile_instances(),
        ..Settings::default()
    };
    let fleet = Fleet::new(PluginClusters::default(), settings);
    fleet.add_plugin(plugin).await?;
    Ok((fleet, sandbox))
}

/// Waits until every PodSet of `cluster` numbered in `podsets` has its
/// Deployment.
async fn converged(cluster: &EmbeddedCluster, podsets: &[usize]) -> anyhow::Result<()> {
    let deployment = KindRef::new("apps", "v1", "Deployment");
    let deadline = Instant::now() + Duration::from_secs(600);
    for i in podsets {
        let key = ObjectKey::new(
            deployment.clone(),
            Some("default"),
            &format!("podset-{i:05}"),
        );
        while cluster.get(&key).await?.is_none() {
            ensure!(
                Instant::now() < deadline,
                "Deployment podset-{i:05} not made in 10 minutes"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}

async fn members(m: usize, podset: &Path, cache: &Path, crds: &Path) -> anyhow::Result<()> {
    let clusters: Vec<Arc<EmbeddedCluster>> = (0..m)
        .map(|i| cluster(crds, std::iter::once(i)))
        .collect::<anyhow::Result<_>>()?;
    let (fleet, _sandbox) = fleet_with_podset(podset, cache).await?;
    let rss_base = proc_status_kb(&proc_status()?, "VmRSS")?;
    let before = cpu_time()?;
    tokio::time::sleep(IDLE_WINDOW).await;
    let base_cpu = cpu_time()?.since(&before);

    let mut engage_times = Vec::new();
    for (i, cluster) in clusters.iter().enumerate() {
        let started = Instant::now();
        let name = member(i).name;
        fleet.engage(
            member(i),
            cluster.clone(),
            reconciler_host::fleet::Hooks::default(),
            Duration::ZERO,
        );
        if i < 10 {
            // Polled every millisecond: the figure is tens of them.
            let serving = || fleet.engine(&name).is_some_and(|e| !e.plugins().is_empty());
            while !serving() {
                ensure!(
                    started.elapsed() < Duration::from_secs(60),
                    "{name} did not start podset"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            engage_times.push(started.elapsed());
        }
    }
    for (i, cluster) in clusters.iter().enumerate() {
        converged(cluster, &[i]).await?;
    }
    // Settled: what converging allocated and freed is behind.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_engaged = proc_status_kb(&proc_status()?, "VmRSS")?;
    let before = cpu_time()?;
    tokio::time::sleep(IDLE_WINDOW).await;
    let idle_cpu = cpu_time()?.since(&before);
    // Every member disengaged, then engaged and disengaged once more: what
    // a cycle leaves behind is what the host keeps of a member that went.
    // (The first disengage cannot say: the members' API servers, in this
    // process, keep what podset wrote, and the allocator keeps freed
    // pages for the next members.)
    disengage_all(&fleet, &clusters).await?;
    let rss_disengaged = proc_status_kb(&proc_status()?, "VmRSS")?;
    for (i, cluster) in clusters.iter().enumerate() {
        fleet.engage(
            member(i),
            cluster.clone(),
            reconciler_host::fleet::Hooks::default(),
            Duration::ZERO,
        );
    }
    for (i, cluster) in clusters.iter().enumerate() {
        let name = member(i).name;
        while fleet.engine(&name).is_none_or(|e| e.plugins().is_empty()) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        converged(cluster, &[i]).await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    disengage_all(&fleet, &clusters).await?;
    let rss_cycled = proc_status_kb(&proc_status()?, "VmRSS")?;
    engage_times.sort();
    let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    print_measured(&[
        ("members", m as u64),
        ("rss_base_kb", rss_base),
        ("rss_engaged_kb", rss_engaged),
        ("rss_disengaged_kb", rss_disengaged),
        ("rss_cycled_kb", rss_cycled),
        ("base_cpu_us", us(base_cpu.user + base_cpu.system)),
        ("idle_cpu_us", us(idle_cpu.user + idle_cpu.system)),
        ("engage_median_us", us(engage_times[engage_times.len() / 2])),
    ]);
    Ok(())
}

/// Disengages every member; the member API servers (in this process) end
/// the watches whose client went, as a real one does when the connection
/// closes, and freed memory goes back to the kernel.
async fn disengage_all(
    fleet: &Fleet<EmbeddedCluster>,
    clusters: &[Arc<EmbeddedCluster>],
) -> anyhow::Result<()> {
    for i in 0..clusters.len() {
        ensure!(
            fleet
                .disengage(&member(i).name, Duration::from_secs(5))
                .await,
            "member {i} was not engaged"
        );
    }
    let forgotten: usize = clusters.iter().map(|c| c.forget_closed_watches()).sum();
    ensure!(
        forgotten >= clusters.len(),
        "the disengaged members left no watch to end"
    );
    reconciler_host::support::heap_trim::release_freed_memory();
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(())
}

async fn converge(
    n: usize,
    k: usize,
    podset: &Path,
    cache: &Path,
    crds: &Path,
) -> anyhow::Result<()> {
    ensure!(
        k >= 1 && n >= k,
        "converge: N PodSets over K members, 1 <= K <= N"
    );
    let shares: Vec<Vec<usize>> = (0..k)
        .map(|j| (0..n).filter(|i| i % k == j).collect())
        .collect();
    let clusters: Vec<Arc<EmbeddedCluster>> = shares
        .iter()
        .map(|share| cluster(crds, share.iter().copied()))
        .collect::<anyhow::Result<_>>()?;
    let (fleet, _sandbox) = fleet_with_podset(podset, cache).await?;
    let started = Instant::now();
    for (j, cluster) in clusters.iter().enumerate() {
        fleet.engage(
            member(j),
            cluster.clone(),
            reconciler_host::fleet::Hooks::default(),
            Duration::ZERO,
        );
    }
    for (cluster, share) in clusters.iter().zip(&shares) {
        converged(cluster, share).await?;
    }
    let wall = started.elapsed();
    print_measured(&[
        ("podsets", n as u64),
        ("members", k as u64),
        (
            "converge_us",
            u64::try_from(wall.as_micros()).unwrap_or(u64::MAX),
        ),
    ]);
    Ok(())
}
