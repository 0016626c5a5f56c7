//! `bench-cluster replicas`: one host against N replicas of it sharing the
//! same work (`run --sharding`), each on the same API server reset for it.
//! What each replica costs next to the one host (CPU, writes, memory),
//! whether the whole converges as fast, and how many keys move when one of
//! the replicas is lost. See BENCHMARKS.md, "Replicas sharding the work".
//!
//! Each replica has a client certificate of its own, so the audit log
//! tells their writes apart.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::audit::{AuditTail, Writes};
use crate::cluster::{CONTROLLER_USER, LocalKube, REPLICA_USERS};
use crate::controller::{ControllerProcess, HostSetup, Side, reconciles_at};
use crate::driver::{
    BULK_NAMESPACE, BulkArgs, PROBE_NAMESPACE, client_for, create_namespace, create_podsets,
    create_podsets_timed, install_crd, latest, load_average,
};
use crate::observer::{Observer, key};
use crate::procfs;

#[derive(Debug, clap::Args)]
pub struct ReplicasArgs {
    /// Replicas of the sharded side (the other side is one host).
    #[arg(long, default_value_t = 3)]
    pub replicas: usize,
    /// Leave out `--sharding-pod-labels`: every replica then receives every Pod.
    #[arg(long)]
    pub no_pod_labels: bool,
    /// Serve no admission on the replicas: new PodSets are then labelled by their owners (one
    /// more write each) instead of by the webhook at creation.
    #[arg(long)]
    pub no_admission: bool,
    #[command(flatten)]
    pub bulk: BulkArgs,
}

/// One side: one host, or N sharding replicas.
#[derive(Debug)]
struct SideRun {
    replicas: usize,
    all_deployments: Duration,
    all_pod_names: Duration,
    /// By replica.
    cpu: Vec<Duration>,
    writes: Vec<Writes>,
    /// Reconciles run in the window, by replica (from each one's /metrics).
    reconciles: Vec<u64>,
    rss: Vec<u64>,
    apiserver_cpu: Duration,
    loss: Option<Loss>,
}

/// What losing one replica (SIGKILL) cost.
#[derive(Debug)]
struct Loss {
    /// From the kill to every survivor settled on the ring without it.
    settled_after: Duration,
    /// Keys the survivors took over (their "arrived now" counts).
    moved: usize,
    /// Keys over every survivor after it.
    owned: usize,
}

pub async fn run(args: ReplicasArgs) -> anyhow::Result<()> {
    if args.replicas < 2 || args.replicas > REPLICA_USERS {
        bail!("--replicas must be between 2 and {REPLICA_USERS}");
    }
    if !args.bulk.kube.is_file() {
        bail!(
            "no control plane at {} (give --kube): the replicas' writes come from an audit log of the bench's own API server",
            args.bulk.kube.display()
        );
    }
    let state = args.bulk.state();
    let mut kube = LocalKube::new(args.bulk.kube.clone(), state.clone(), args.bulk.keep_state)?;
    std::fs::create_dir_all(state.join("work"))?;
    let host = HostSetup::prepare(
        args.bulk.host_bin.clone(),
        &args.bulk.plugin,
        &state.join("work"),
        Vec::new(),
    )?;
    let load_at_start = load_average();
    let mut runs = Vec::new();
    for n in [1, args.replicas] {
        eprintln!("[{n} replica(s)] starting a fresh cluster");
        let run = measure(&args, &mut kube, &host, &state, n)
            .await
            .with_context(|| format!("the run with {n} replica(s)"))?;
        eprintln!("[{n} replica(s)] {run:?}");
        runs.push(run);
    }
    println!("{}", render(&args, &runs[0], &runs[1]));
    println!(
        "Load average (1, 5, 15 min) at the start: {load_at_start}; at the end: {}.",
        load_average()
    );
    Ok(())
}

fn replica_user(i: usize) -> String {
    format!("{CONTROLLER_USER}-{i}")
}

fn settled_line(n: usize) -> String {
    format!("every one of the {n} replica(s) of shard ring")
}

/// The lines of `log` that say every one of `n` replicas settled.
fn settle_lines(log: &Path, n: usize) -> Vec<String> {
    let needle = settled_line(n);
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&needle))
        .map(str::to_string)
        .collect()
}

/// `(owned, arrived)` from a settle line: "... K key(s) owned here, A of
/// them arrived now".
fn settle_counts(line: &str) -> Option<(usize, usize)> {
    let (before, after) = line.split_once(" key(s) owned here, ")?;
    let owned = before.rsplit(' ').next()?.parse().ok()?;
    let arrived = after.split(' ').next()?.parse().ok()?;
    Some((owned, arrived))
}

/// What one replica of `n` runs with, beyond the host's usual arguments:
/// nothing for one host; sharding, and what the options ask for, for more.
fn replica_args(args: &ReplicasArgs, n: usize) -> anyhow::Result<Vec<String>> {
    if n == 1 {
        return Ok(Vec::new());
    }
    let mut more: Vec<String> = ["--sharding", "--sharding-namespace", "default"]
        .map(String::from)
        .to_vec();
    if !args.no_pod_labels {
        more.push("--sharding-pod-labels".into());
    }
    if !args.no_admission {
        // Each its own port; the duties' holder registers its own URL.
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        more.extend([
            "--admission-listen".to_string(),
            format!("127.0.0.1:{port}"),
            "--admission-url".to_string(),
            format!("https://127.0.0.1:{port}"),
            "--admission-cert-secret".to_string(),
            "default/reconciler-host-bench-admission".to_string(),
        ]);
    }
    Ok(more)
}

async fn measure(
    args: &ReplicasArgs,
    kube: &mut LocalKube,
    host: &HostSetup,
    state: &Path,
    n: usize,
) -> anyhow::Result<SideRun> {
    let target = kube.fresh()?;
    let client = client_for(&target.admin_kubeconfig).await?;
    install_crd(&client).await?;
    for namespace in [PROBE_NAMESPACE, BULK_NAMESPACE] {
        create_namespace(&client, namespace).await?;
    }
    let observer = Observer::start(client.clone()).await?;
    let timeout = Duration::from_secs(args.bulk.timeout_secs);
    let mut controllers = Vec::new();
    let mut logs = Vec::new();
    for i in 0..n {
        let kubeconfig = kube.credentials(&target, &replica_user(i))?;
        let log = state.join(format!("replica-{n}-{i}.log"));
        let setup = host.with_more_args(
            &replica_args(args, n)?
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        controllers.push(ControllerProcess::start(
            Side::Host,
            Some(&setup),
            None,
            &kubeconfig,
            log.clone(),
        )?);
        logs.push(log);
    }
    let pids: Vec<u32> = controllers.iter().map(ControllerProcess::pid).collect();
    let metrics: Vec<String> = controllers
        .iter()
        .map(|c| {
            c.metrics_address()
                .context("the replicas are hosts, and hosts serve /metrics")
        })
        .collect::<anyhow::Result<_>>()?;
    let mut still_ok = || {
        controllers
            .iter_mut()
            .try_for_each(ControllerProcess::check_running)
    };
    if n > 1 {
        let deadline = Instant::now() + timeout;
        while logs.iter().any(|log| settle_lines(log, n).is_empty()) {
            if Instant::now() > deadline {
                bail!("the {n} replicas did not all settle on one ring");
            }
            still_ok()?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let probe = create_podsets(
        &client,
        PROBE_NAMESPACE,
        &["probe".to_string()],
        args.bulk.size,
        1,
    )
    .await?;
    observer
        .deployments(&probe, timeout, &mut still_ok)
        .await
        .context("waiting for a first PodSet to be reconciled")?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let audit_log = target.audit_log.clone().context("an audit log")?;
    let mut tails: Vec<AuditTail> = (0..n)
        .map(|i| AuditTail::from_end(audit_log.clone(), &replica_user(i)))
        .collect::<anyhow::Result<_>>()?;
    let apiserver = target.apiserver_pid.context("the API server's pid")?;
    let apiserver_before = procfs::cpu_time(apiserver)?;
    let cpu_before: Vec<Duration> = pids
        .iter()
        .map(|pid| procfs::cpu_time(*pid))
        .collect::<anyhow::Result<_>>()?;
    let reconciles_before = reconciles(&metrics)?;
    let names: Vec<String> = (0..args.bulk.count).map(|i| format!("ps-{i:05}")).collect();
    let start = Instant::now();
    create_podsets_timed(
        &client,
        BULK_NAMESPACE,
        &names,
        args.bulk.size,
        args.bulk.creators,
    )
    .await?;
    let keys: Vec<String> = names.iter().map(|n| key(BULK_NAMESPACE, n)).collect();
    let seen = observer.deployments(&keys, timeout, &mut still_ok).await?;
    let all_deployments = latest(&seen).saturating_duration_since(start);
    let filled = observer
        .pod_names_filled(&keys, timeout, &mut still_ok)
        .await?;
    let all_pod_names = latest(&filled).saturating_duration_since(start);
    eprintln!(
        "[{n} replica(s)] {} PodSets: all Deployments after {:.2} s, all status.podNames after {:.2} s",
        args.bulk.count,
        all_deployments.as_secs_f64(),
        all_pod_names.as_secs_f64()
    );
    // Until no replica has written a Deployment, a status or an Event for
    // 3 s (at most 60 s).
    let mut writes = vec![Writes::default(); n];
    let waited = Instant::now();
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < Duration::from_secs(3)
        && waited.elapsed() < Duration::from_secs(60)
    {
        for (tail, total) in tails.iter_mut().zip(&mut writes) {
            let new = tail.read()?;
            // The Lease renewals (`other`, every 2 s) never stop: quiet
            // means no reconcile writes.
            if new.deployments + new.podset_status + new.events > 0 {
                quiet_since = Instant::now();
            }
            total.add(&new);
        }
        still_ok()?;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let cpu: Vec<Duration> = pids
        .iter()
        .zip(&cpu_before)
        .map(|(pid, before)| Ok(procfs::cpu_time(*pid)?.saturating_sub(*before)))
        .collect::<anyhow::Result<_>>()?;
    let reconciles: Vec<u64> = reconciles(&metrics)?
        .into_iter()
        .zip(reconciles_before)
        .map(|(after, before)| after.saturating_sub(before))
        .collect();
    let rss: Vec<u64> = pids
        .iter()
        .map(|pid| procfs::rss_bytes(*pid))
        .collect::<anyhow::Result<_>>()?;
    let apiserver_cpu = procfs::cpu_time(apiserver)?.saturating_sub(apiserver_before);

    let loss = if n > 1 {
        let before: Vec<usize> = logs[..n - 1]
            .iter()
            .map(|log| settle_lines(log, n - 1).len())
            .collect();
        let lost = controllers.pop().context("a replica to lose")?;
        let killed = Instant::now();
        drop(lost);
        eprintln!("[{n} replica(s)] killed one replica (SIGKILL)");
        let deadline = killed + timeout;
        let mut moved = 0;
        let mut owned = 0;
        for (log, before) in logs[..n - 1].iter().zip(before) {
            let line = loop {
                if let Some(line) = settle_lines(log, n - 1).into_iter().nth(before) {
                    break line;
                }
                if Instant::now() > deadline {
                    bail!("a survivor did not settle without the lost replica");
                }
                for c in controllers.iter_mut() {
                    c.check_running()?;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            let (o, a) = settle_counts(&line)
                .with_context(|| format!("no counts in the settle line {line:?}"))?;
            owned += o;
            moved += a;
        }
        Some(Loss {
            settled_after: killed.elapsed(),
            moved,
            owned,
        })
    } else {
        None
    };
    Ok(SideRun {
        replicas: n,
        all_deployments,
        all_pod_names,
        cpu,
        writes,
        reconciles,
        rss,
        apiserver_cpu,
        loss,
    })
}

/// Each host's reconciles so far.
fn reconciles(metrics: &[String]) -> anyhow::Result<Vec<u64>> {
    metrics.iter().map(|a| reconciles_at(a)).collect()
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// min-max of `values` as `show` renders them.
fn range<T: Copy + PartialOrd>(values: &[T], show: impl Fn(T) -> String) -> String {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    match (sorted.first(), sorted.last()) {
        (Some(lo), Some(hi)) => format!("{}-{}", show(*lo), show(*hi)),
        _ => "-".into(),
    }
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}x", a / b)
    } else {
        "-".into()
    }
}

fn render(args: &ReplicasArgs, one: &SideRun, many: &SideRun) -> String {
    let n = many.replicas;
    let max_f = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let cpu_each: Vec<f64> = many.cpu.iter().map(Duration::as_secs_f64).collect();
    let writes_each: Vec<f64> = many.writes.iter().map(|w| w.total() as f64).collect();
    let rss_each: Vec<f64> = many.rss.iter().map(|r| *r as f64).collect();
    let one_cpu = one.cpu[0].as_secs_f64();
    let one_writes = one.writes[0].total() as f64;
    let mut out = format!(
        "{} PodSets of size {} from {} concurrent creators; one host, then {n} replicas with --sharding{}{}, each on a freshly reset API server.\n\n\
         | | 1 replica | {n} replicas | {n} / 1 |\n|---|---|---|---|\n",
        args.bulk.count,
        args.bulk.size,
        args.bulk.creators,
        if args.no_pod_labels {
            ""
        } else {
            " --sharding-pod-labels"
        },
        if args.no_admission {
            ""
        } else {
            " and admission (shard labels at creation)"
        },
    );
    let mut row = |name: &str, a: String, b: String, r: String| {
        out.push_str(&format!("| {name} | {a} | {b} | {r} |\n"));
    };
    row(
        "all Deployments",
        secs(one.all_deployments),
        secs(many.all_deployments),
        ratio(
            many.all_deployments.as_secs_f64(),
            one.all_deployments.as_secs_f64(),
        ),
    );
    row(
        "all status.podNames filled",
        secs(one.all_pod_names),
        secs(many.all_pod_names),
        ratio(
            many.all_pod_names.as_secs_f64(),
            one.all_pod_names.as_secs_f64(),
        ),
    );
    row(
        "controller CPU, each replica (largest / one host's)",
        secs(one.cpu[0]),
        range(&many.cpu, secs),
        ratio(max_f(&cpu_each), one_cpu),
    );
    row(
        "controller CPU, all replicas",
        secs(one.cpu[0]),
        secs(many.cpu.iter().sum()),
        ratio(cpu_each.iter().sum(), one_cpu),
    );
    row(
        "API writes, each replica (largest / one host's)",
        one.writes[0].total().to_string(),
        range(&writes_each, |w| format!("{w:.0}")),
        ratio(max_f(&writes_each), one_writes),
    );
    row(
        "API writes, all replicas",
        one.writes[0].total().to_string(),
        format!("{:.0}", writes_each.iter().sum::<f64>()),
        ratio(writes_each.iter().sum(), one_writes),
    );
    row(
        "- of them shard labels on PodSets",
        one.writes[0].podsets.to_string(),
        range(
            &many.writes.iter().map(|w| w.podsets).collect::<Vec<_>>(),
            |w| w.to_string(),
        ),
        "-".into(),
    );
    row(
        "- of them refused",
        one.writes[0].refused.to_string(),
        many.writes
            .iter()
            .map(|w| w.refused)
            .sum::<u64>()
            .to_string(),
        "-".into(),
    );
    let reconciles_each: Vec<f64> = many.reconciles.iter().map(|r| *r as f64).collect();
    row(
        "reconciles, each replica (largest / one host's)",
        one.reconciles[0].to_string(),
        range(&many.reconciles, |r| r.to_string()),
        ratio(max_f(&reconciles_each), one.reconciles[0] as f64),
    );
    row(
        "reconciles, all replicas",
        one.reconciles[0].to_string(),
        many.reconciles.iter().sum::<u64>().to_string(),
        ratio(reconciles_each.iter().sum(), one.reconciles[0] as f64),
    );
    row(
        "RSS after, each replica",
        mib(one.rss[0]),
        range(&many.rss, mib),
        ratio(max_f(&rss_each), one.rss[0] as f64),
    );
    row(
        "kube-apiserver CPU",
        secs(one.apiserver_cpu),
        secs(many.apiserver_cpu),
        ratio(
            many.apiserver_cpu.as_secs_f64(),
            one.apiserver_cpu.as_secs_f64(),
        ),
    );
    if let Some(loss) = &many.loss {
        row(
            "one replica killed: keys moved to the others",
            "-".into(),
            format!("{} of {}", loss.moved, loss.owned),
            ratio(loss.moved as f64, loss.owned as f64),
        );
        row(
            "one replica killed: the others settled without it after",
            "-".into(),
            secs(loss.settled_after),
            "-".into(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settle_lines_give_the_keys_owned_and_arrived() {
        let line = "2026-11-27T09:24:43.299663Z  INFO reconciler_host::sharding::coordinator: every one of the 2 replica(s) of shard ring reconciler-host settled on version 63012854226f5682: 30 key(s) owned here, 11 of them arrived now ring=reconciler-host";
        assert_eq!(settle_counts(line), Some((30, 11)));
        assert_eq!(settle_counts("no counts here"), None);
    }
}
