//! `bench-cluster replicas`: one host against N replicas of it sharing the
//! same work (`run --sharding`), each on the same API server reset for it.
//! What each replica costs next to the one host (CPU, writes, memory),
//! whether the whole converges as fast, and how many keys move when one of
//! the replicas is lost. See BENCHMARKS.md, "Replicas sharding the work".
//!
//! Two baselines, both measured in the same run: one host as plain `run`
//! (what sharding costs against not sharding), and one replica run exactly
//! as each of the N is, a ring of one (what scaling that Deployment from 1
//! to N replicas buys).
//!
//! Each replica has a client certificate of its own, so the audit log
//! tells their writes apart.

use std::net::SocketAddr;
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
    /// Leave out the second baseline: one replica run as each of the N is (a ring of one).
    #[arg(long)]
    pub no_ring_of_one: bool,
    #[command(flatten)]
    pub bulk: BulkArgs,
}

/// One side: one host, or N sharding replicas.
#[derive(Debug)]
struct SideRun {
    replicas: usize,
    /// Run with `--sharding` (and what the options add to it).
    sharded: bool,
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
    if !args.bulk.cluster.kube.is_file() {
        bail!(
            "no control plane at {} (give --kube): the replicas' writes come from an audit log of the bench's own API server",
            args.bulk.cluster.kube.display()
        );
    }
    let state = args.bulk.cluster.state();
    let mut kube = LocalKube::new(
        args.bulk.cluster.kube.clone(),
        state.clone(),
        args.bulk.cluster.keep_state,
    )?;
    std::fs::create_dir_all(state.join("work"))?;
    let host = HostSetup::prepare(
        args.bulk.cluster.host_bin.clone(),
        &args.bulk.cluster.plugin,
        args.bulk.candidate.as_deref(),
        &state.join("work"),
        Vec::new(),
    )?;
    let load_at_start = load_average();
    let mut sides = vec![(1, false)];
    if !args.no_ring_of_one {
        sides.push((1, true));
    }
    sides.push((args.replicas, true));
    let mut runs = Vec::new();
    for (n, sharded) in sides {
        let what = side_name(n, sharded);
        eprintln!("[{what}] starting a fresh cluster");
        let run = measure(&args, &mut kube, &host, &state, n, sharded)
            .await
            .with_context(|| format!("the run with {what}"))?;
        eprintln!("[{what}] {run:?}");
        runs.push(run);
    }
    let many = runs.pop().context("the replicas' run")?;
    println!("{}", render(&args, &runs, &many));
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
pub(crate) fn settle_lines(log: &Path, n: usize) -> Vec<String> {
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

/// How a side is called in the log and the table.
pub(crate) fn side_name(n: usize, sharded: bool) -> String {
    match (n, sharded) {
        (1, false) => "one host".into(),
        (1, true) => "1 replica, a ring of one".into(),
        (n, _) => format!("{n} replicas"),
    }
}

/// What a replica runs with, beyond the host's usual arguments: nothing
/// unsharded; sharding, and what the options ask for, otherwise.
/// `admission`: the port this replica serves admission on, and the
/// front every replica's `--admission-url` names.
fn replica_args(
    args: &ReplicasArgs,
    sharded: bool,
    admission: Option<(u16, SocketAddr)>,
) -> Vec<String> {
    if !sharded {
        return Vec::new();
    }
    let mut more: Vec<String> = ["--sharding", "--sharding-namespace", "default"]
        .map(String::from)
        .to_vec();
    if !args.no_pod_labels {
        more.push("--sharding-pod-labels".into());
    }
    if let Some((port, front)) = admission {
        more.extend([
            "--admission-listen".to_string(),
            format!("127.0.0.1:{port}"),
            "--admission-url".to_string(),
            format!("https://{front}"),
            "--admission-cert-secret".to_string(),
            "default/reconciler-host-bench-admission".to_string(),
        ]);
    }
    more
}

async fn measure(
    args: &ReplicasArgs,
    kube: &mut LocalKube,
    host: &HostSetup,
    state: &Path,
    n: usize,
    sharded: bool,
) -> anyhow::Result<SideRun> {
    let target = kube.fresh()?;
    let client = client_for(&target.admin_kubeconfig).await?;
    install_crd(&client).await?;
    for namespace in [PROBE_NAMESPACE, BULK_NAMESPACE] {
        create_namespace(&client, namespace).await?;
    }
    let observer = Observer::start(client.clone()).await?;
    let timeout = Duration::from_secs(args.bulk.cluster.timeout_secs);
    // Admission: each replica on a port of its own, all behind one front
    // that hands each connection to the next replica, as a Service does.
    // Without it (no Service without nodes) each replica would register
    // its own port and the duties' holder would answer every review. TLS
    // passes through: the replicas share one serving certificate. Kept
    // until the side is measured.
    let (admission_ports, front) = if sharded && !args.no_admission {
        let (ports, front) = crate::scale::admission_front(n)?;
        (ports, Some(front))
    } else {
        (Vec::new(), None)
    };
    let mut controllers = Vec::new();
    let mut logs = Vec::new();
    for i in 0..n {
        let kubeconfig = kube.credentials(&target, &replica_user(i))?;
        let log = state.join(format!(
            "replica-{n}{}-{i}.log",
            if sharded { "s" } else { "" }
        ));
        let setup = host.with_more_args(
            &replica_args(
                args,
                sharded,
                front
                    .as_ref()
                    .zip(admission_ports.get(i))
                    .map(|(front, port)| (*port, front.address())),
            )
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
    if sharded {
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
        "[{}] {} PodSets: all Deployments after {:.2} s, all status.podNames after {:.2} s",
        side_name(n, sharded),
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
    if let Some(front) = &front {
        let (connections, bytes): (Vec<u64>, Vec<u64>) = front.handed().into_iter().unzip();
        eprintln!(
            "[{}] admission through the front, by replica: {connections:?} connection(s), {bytes:?} byte(s) in",
            side_name(n, sharded)
        );
    }

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
        sharded,
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

pub(crate) fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// min-max of `values` as `show` renders them; one value if all are equal.
fn range<T: Copy + PartialOrd>(values: &[T], show: impl Fn(T) -> String) -> String {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    match (sorted.first(), sorted.last()) {
        (Some(lo), Some(hi)) if lo == hi => show(*lo),
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

/// The table: each baseline, the N replicas, and the replicas against
/// each baseline. A row's figure for the replicas is the largest one's
/// ("each") or their sum ("all").
fn render(args: &ReplicasArgs, baselines: &[SideRun], many: &SideRun) -> String {
    let n = many.replicas;
    let mut out = format!(
        "{} PodSets of size {} from {} concurrent creators; {n} replicas with --sharding{}{}, against {}; each side on a freshly reset API server.\n\n",
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
        baselines
            .iter()
            .map(|b| side_name(b.replicas, b.sharded))
            .collect::<Vec<_>>()
            .join(" and "),
    );
    let mut header = String::from("| |");
    let mut rule = String::from("|---|");
    for side in baselines.iter().chain([many]) {
        header.push_str(&format!(" {} |", side_name(side.replicas, side.sharded)));
        rule.push_str("---|");
    }
    for side in baselines {
        header.push_str(&format!(
            " {n} / {} |",
            side_name(side.replicas, side.sharded)
        ));
        rule.push_str("---|");
    }
    out.push_str(&format!("{header}\n{rule}\n"));
    // One row: how each side shows, the replicas' range, and the figure
    // compared (None: no ratio).
    let mut row = |name: &str,
                   show: &dyn Fn(&SideRun) -> String,
                   compared: Option<&dyn Fn(&SideRun) -> f64>| {
        let mut line = format!("| {name} |");
        for side in baselines.iter().chain([many]) {
            line.push_str(&format!(" {} |", show(side)));
        }
        for side in baselines {
            let r = compared.map_or("-".into(), |f| ratio(f(many), f(side)));
            line.push_str(&format!(" {r} |"));
        }
        out.push_str(&line);
        out.push('\n');
    };
    let max_f = |v: Vec<f64>| v.into_iter().fold(0.0, f64::max);
    let each_cpu = |s: &SideRun| max_f(s.cpu.iter().map(Duration::as_secs_f64).collect());
    let all_cpu = |s: &SideRun| s.cpu.iter().map(Duration::as_secs_f64).sum::<f64>();
    let each_writes = |s: &SideRun| max_f(s.writes.iter().map(|w| w.total() as f64).collect());
    let all_writes = |s: &SideRun| s.writes.iter().map(|w| w.total() as f64).sum::<f64>();
    let each_reconciles = |s: &SideRun| max_f(s.reconciles.iter().map(|r| *r as f64).collect());
    let all_reconciles = |s: &SideRun| s.reconciles.iter().map(|r| *r as f64).sum::<f64>();
    let each_rss = |s: &SideRun| max_f(s.rss.iter().map(|r| *r as f64).collect());
    let deployments = |s: &SideRun| s.all_deployments.as_secs_f64();
    let pod_names = |s: &SideRun| s.all_pod_names.as_secs_f64();
    let apiserver = |s: &SideRun| s.apiserver_cpu.as_secs_f64();
    row(
        "all Deployments",
        &|s| secs(s.all_deployments),
        Some(&deployments),
    );
    row(
        "all status.podNames filled",
        &|s| secs(s.all_pod_names),
        Some(&pod_names),
    );
    row(
        "controller CPU, each replica (largest against)",
        &|s| range(&s.cpu, secs),
        Some(&each_cpu),
    );
    row(
        "controller CPU, all replicas",
        &|s| format!("{:.2} s", all_cpu(s)),
        Some(&all_cpu),
    );
    row(
        "API writes, each replica (largest against)",
        &|s| {
            range(
                &s.writes.iter().map(Writes::total).collect::<Vec<_>>(),
                |w| w.to_string(),
            )
        },
        Some(&each_writes),
    );
    row(
        "API writes, all replicas",
        &|s| format!("{:.0}", all_writes(s)),
        Some(&all_writes),
    );
    row(
        "- of them shard labels on PodSets",
        &|s| s.writes.iter().map(|w| w.podsets).sum::<u64>().to_string(),
        None,
    );
    row(
        "- of them refused",
        &|s| s.writes.iter().map(|w| w.refused).sum::<u64>().to_string(),
        None,
    );
    row(
        "reconciles, each replica (largest against)",
        &|s| range(&s.reconciles, |r| r.to_string()),
        Some(&each_reconciles),
    );
    row(
        "reconciles, all replicas",
        &|s| format!("{:.0}", all_reconciles(s)),
        Some(&all_reconciles),
    );
    row(
        "RSS after, each replica",
        &|s| range(&s.rss, mib),
        Some(&each_rss),
    );
    row(
        "kube-apiserver CPU",
        &|s| secs(s.apiserver_cpu),
        Some(&apiserver),
    );
    if let Some(loss) = &many.loss {
        let blanks = " - |".repeat(baselines.len());
        out.push_str(&format!(
            "| one replica killed: keys moved to the others |{blanks} {} of {} ({:.2}) |{blanks}\n",
            loss.moved,
            loss.owned,
            loss.moved as f64 / loss.owned.max(1) as f64,
        ));
        out.push_str(&format!(
            "| one replica killed: the others settled without it after |{blanks} {} |{blanks}\n",
            secs(loss.settled_after),
        ));
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

    fn side(cpu: &[f64], sharded: bool) -> SideRun {
        SideRun {
            replicas: cpu.len(),
            sharded,
            all_deployments: Duration::from_secs(5),
            all_pod_names: Duration::from_secs(20),
            cpu: cpu.iter().map(|c| Duration::from_secs_f64(*c)).collect(),
            writes: vec![Writes::default(); cpu.len()],
            reconciles: vec![100; cpu.len()],
            rss: vec![1 << 20; cpu.len()],
            apiserver_cpu: Duration::from_secs(20),
            loss: None,
        }
    }

    #[test]
    fn the_replicas_are_put_against_each_baseline() {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: ReplicasArgs,
        }
        let args = Cli::parse_from(["bench"]).args;
        let table = render(
            &args,
            &[side(&[4.0], false), side(&[2.0], true)],
            &side(&[1.0, 1.6, 1.2], true),
        );
        let header = table.lines().find(|l| l.starts_with("| |")).unwrap();
        assert_eq!(
            header,
            "| | one host | 1 replica, a ring of one | 3 replicas | 3 / one host | 3 / 1 replica, a ring of one |"
        );
        let cpu = table
            .lines()
            .find(|l| l.starts_with("| controller CPU, each"))
            .unwrap();
        assert!(
            cpu.ends_with("| 4.00 s | 2.00 s | 1.00 s-1.60 s | 0.40x | 0.80x |"),
            "{cpu}"
        );
    }
}
