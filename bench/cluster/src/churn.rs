//! `bench-cluster churn`: what sharding buys in throughput (issue 51,
//! point 2). Each replica runs under a CPU quota of its own, as a pod's
//! `limits.cpu` holds it, and the driver raises a churn of PodSet creates
//! and spec changes step by step, without pausing between steps, as the
//! scale-out runs of kubernetes-controller-sharding do. A side's capacity
//! is the rate of the last step before the first that misses an aim:
//!
//! - p99 queue wait at most 1 s: the replicas' own
//!   `workqueue_queue_duration_seconds`, scraped at each step's edges;
//! - p99 from a change to its effect at most 5 s: from the driver's
//!   request to its watch seeing the PodSet's Deployment at the new size
//!   (the reconcile's output; the podset plugin's status says nothing of
//!   the size on a cluster without Pods);
//! - every request sent on time and answered: a driver that falls behind
//!   measures nothing.
//!
//! Each side starts on a fresh cluster without kube-controller-manager
//! holding the same PodSets, reconciled once before the first step. Beside
//! each step: the CPU each replica and the API server spent in it, and how
//! often the quota throttled each replica.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use tokio::sync::Semaphore;

use reconciler_host::engine::shard_selection::SHARD_LABEL;

use crate::cgroup::Throttling;
use crate::cluster::{LocalKube, REPLICA_USERS, Target};
use crate::controller::HostSetup;
use crate::driver::{
    ClusterArgs, client_for, create_namespace, create_podsets_timed, install_crd, load_average,
};
use crate::following::{Samples, follow_deployments};
use crate::podset::PodSet;
use crate::procfs;
use crate::queue_waits::QueueWaits;
use crate::replicas::side_name;
use crate::scale::{Fleet, FleetSetup, Limits, without_controller_manager};
use crate::stats::percentile;

const NAMESPACE: &str = "bench-churn";
/// The aims of a step: p99 queue wait within a bucket edge of 1 s, p99
/// change-to-effect within 5 s.
const WAIT_AIM_SECS: f64 = 1.0;
const LATENCY_AIM: Duration = Duration::from_secs(5);
/// Three replicas against one: capacity at least 2.6x, total CPU at the
/// ring of one's capacity at most 1.25x.
const CAPACITY_AIM: f64 = 2.6;
const CPU_AIM: f64 = 1.25;
/// Requests of the driver in flight at once; a step that needs more has
/// outrun the API server, not the replicas.
const IN_FLIGHT: usize = 256;

#[derive(Debug, clap::Args)]
pub struct ChurnArgs {
    /// The sides, in turn: a ring of this many replicas each, every replica under the quota.
    #[arg(long, value_delimiter = ',', default_value = "1,3")]
    pub replicas: Vec<usize>,
    /// Each replica's CPU quota, in cores (a pod's limits.cpu; a CFS quota per 100 ms period;
    /// needs root).
    #[arg(long, default_value_t = 0.2)]
    pub cpu_quota: f64,
    /// PodSets in the cluster before the first step; the spec changes go to them in turn.
    #[arg(long, default_value_t = 2000)]
    pub podsets: usize,
    /// Concurrent creators of those PodSets.
    #[arg(long, default_value_t = 32)]
    pub creators: usize,
    /// The first step's rate, in changes (creates and spec changes) per second.
    #[arg(long, default_value_t = 10.0)]
    pub start_rate: f64,
    /// What each step adds to the rate.
    #[arg(long, default_value_t = 10.0)]
    pub step_rate: f64,
    /// How long each step lasts.
    #[arg(long, default_value_t = 30)]
    pub step_secs: u64,
    /// The most steps a side runs (it stops at its first missed step anyway).
    #[arg(long, default_value_t = 40)]
    pub max_steps: usize,
    /// Of the changes, the share that creates a new PodSet (the rest change a size), in percent.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub creates_percent: u8,
    /// Serve no admission on the replicas: each new PodSet then reaches every replica unlabelled
    /// and its owner labels it (one more write and an event at every replica per create)
    /// instead of the shard-label webhook labelling it at creation, as a deployed fleet does.
    #[arg(long)]
    pub no_admission: bool,
    /// Before the first step, the side has settled once nothing was reconciled for this long.
    #[arg(long, default_value_t = 5)]
    pub quiet_secs: u64,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// CPU so far, by replica, and of the API server.
struct Reading {
    at: Instant,
    replicas: Vec<Duration>,
    apiserver: Option<Duration>,
    throttling: Vec<Option<Throttling>>,
    waits: QueueWaits,
    reconciles: u64,
}

impl Reading {
    fn take(fleet: &Fleet, target: &Target) -> anyhow::Result<Self> {
        let replicas = fleet
            .pids()
            .into_iter()
            .map(procfs::cpu_time)
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut waits = QueueWaits::default();
        let mut reconciles = 0;
        for scraped in fleet.scrape()? {
            waits.add(&scraped.waits);
            reconciles += scraped.reconciles;
        }
        Ok(Reading {
            at: Instant::now(),
            replicas,
            apiserver: target
                .apiserver_pid
                .and_then(|pid| procfs::cpu_time(pid).ok()),
            throttling: fleet.cpu_cgroups.iter().map(|c| c.throttling()).collect(),
            waits,
            reconciles,
        })
    }
}

/// One step, measured.
struct Step {
    rate: f64,
    from: Instant,
    to: Instant,
    sent: usize,
    /// Changes the driver could not send on time.
    behind: usize,
    waits: QueueWaits,
    /// Reconciles of all replicas in the step.
    reconciles: u64,
    /// Cores used, by replica.
    cores: Vec<f64>,
    apiserver_cores: Option<f64>,
    /// Share of CFS periods throttled, by replica.
    throttled: Vec<Option<f64>>,
    latency_p99: Option<Duration>,
    answer_p99: Option<Duration>,
    failed: usize,
}

impl Step {
    fn new(rate: f64, sent: usize, behind: usize, before: &Reading, after: &Reading) -> Self {
        let secs = after.at.duration_since(before.at).as_secs_f64().max(1e-9);
        Step {
            rate,
            from: before.at,
            to: after.at,
            sent,
            behind,
            waits: after.waits.since(&before.waits),
            reconciles: after.reconciles.saturating_sub(before.reconciles),
            cores: after
                .replicas
                .iter()
                .zip(&before.replicas)
                .map(|(a, b)| a.saturating_sub(*b).as_secs_f64() / secs)
                .collect(),
            apiserver_cores: after
                .apiserver
                .zip(before.apiserver)
                .map(|(a, b)| a.saturating_sub(b).as_secs_f64() / secs),
            throttled: after
                .throttling
                .iter()
                .zip(&before.throttling)
                .map(|(a, b)| {
                    let (a, b) = ((*a)?, (*b)?);
                    let periods = a.periods.saturating_sub(b.periods);
                    (periods > 0)
                        .then(|| a.throttled.saturating_sub(b.throttled) as f64 / periods as f64)
                })
                .collect(),
            latency_p99: None,
            answer_p99: None,
            failed: 0,
        }
    }

    /// Reads the step's samples (after they have had time to finish).
    fn judge(&mut self, samples: &Samples) {
        self.latency_p99 = percentile(&samples.latencies(self.from, self.to, |_| true), 0.99);
        self.answer_p99 = percentile(&samples.answers(self.from, self.to), 0.99);
        self.failed = samples.failures(self.from, self.to);
    }

    fn wait_ok(&self) -> bool {
        self.waits
            .share_within(WAIT_AIM_SECS)
            .is_some_and(|share| share >= 0.99)
    }

    fn latency_ok(&self) -> bool {
        self.latency_p99.is_some_and(|p| p <= LATENCY_AIM)
    }

    fn passed(&self) -> bool {
        self.behind == 0 && self.failed == 0 && self.wait_ok() && self.latency_ok()
    }

    fn total_cores(&self) -> f64 {
        self.cores.iter().sum()
    }

    /// CPU of all replicas per reconcile, in ms.
    fn cpu_per_reconcile_ms(&self) -> Option<f64> {
        let secs = self.to.duration_since(self.from).as_secs_f64();
        (self.reconciles > 0).then(|| self.total_cores() * secs * 1000.0 / self.reconciles as f64)
    }
}

/// One side's steps.
struct SideRun {
    replicas: usize,
    steps: Vec<Step>,
}

impl SideRun {
    /// The rate of the last step before the first missed one (0: the first
    /// missed), and whether a step was missed at all.
    fn capacity(&self) -> (f64, bool) {
        let first_missed = self.steps.iter().position(|s| !s.passed());
        let passed = first_missed.unwrap_or(self.steps.len());
        let rate = passed
            .checked_sub(1)
            .map_or(0.0, |last| self.steps[last].rate);
        (rate, first_missed.is_some())
    }

    fn step_at(&self, rate: f64) -> Option<&Step> {
        self.steps.iter().find(|s| (s.rate - rate).abs() < 1e-9)
    }
}

/// Which change comes next: a create or a new size, in a mix.
struct Mix {
    /// PodSets whose size changes, in turn, and their sizes now.
    pool: Vec<String>,
    sizes: HashMap<String, i32>,
    cursor: usize,
    created: usize,
    ops: u64,
    creates_percent: u64,
}

/// The driver's changes, sent at a rate.
struct Churn {
    client: kube::Client,
    samples: Arc<Samples>,
    mix: Mix,
    permits: Arc<Semaphore>,
    errors_shown: usize,
}

enum Change {
    Create(String),
    Resize(String, i32),
}

impl Mix {
    fn new(pool: Vec<String>, creates_percent: u8) -> Self {
        Mix {
            pool,
            sizes: HashMap::new(),
            cursor: 0,
            created: 0,
            ops: 0,
            creates_percent: u64::from(creates_percent),
        }
    }

    /// The next change: creates spread evenly among the size changes.
    /// None when every PodSet of the pool still waits on its last change.
    fn next(&mut self, samples: &Samples) -> Option<Change> {
        let i = self.ops;
        self.ops += 1;
        let p = self.creates_percent;
        if (i + 1) * p / 100 > i * p / 100 {
            self.created += 1;
            return Some(Change::Create(format!("churn-{:06}", self.created)));
        }
        // The next PodSet whose last change has been followed: a change
        // still on its way is not overtaken (its latency would be lost).
        for _ in 0..self.pool.len() {
            let name = &self.pool[self.cursor];
            self.cursor = (self.cursor + 1) % self.pool.len();
            if !samples.is_pending(name) {
                let size = self.sizes.get(name).map_or(2, |s| 3 - s);
                self.sizes.insert(name.clone(), size);
                return Some(Change::Resize(name.clone(), size));
            }
        }
        None
    }
}

impl Churn {
    /// Sends changes at `rate` a second for `length`; returns how many were
    /// sent and how many could not be sent on time.
    async fn run_for(&mut self, rate: f64, length: Duration) -> (usize, usize) {
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let end = tokio::time::Instant::now() + length;
        let (mut sent, mut behind) = (0, 0);
        let (tx, mut errors) = tokio::sync::mpsc::unbounded_channel::<String>();
        loop {
            let at = tick.tick().await;
            if at >= end {
                break;
            }
            while let Ok(error) = errors.try_recv() {
                if self.errors_shown < 10 {
                    eprintln!("bench-cluster: churn: {error}");
                    self.errors_shown += 1;
                }
            }
            let Ok(permit) = self.permits.clone().try_acquire_owned() else {
                behind += 1;
                continue;
            };
            let Some(change) = self.mix.next(&self.samples) else {
                behind += 1;
                continue;
            };
            let api = Api::<PodSet>::namespaced(self.client.clone(), NAMESPACE);
            let samples = self.samples.clone();
            let tx = tx.clone();
            let (name, size) = match &change {
                Change::Create(name) => (name.clone(), 1),
                Change::Resize(name, size) => (name.clone(), *size),
            };
            let i = samples.sent(&name, size, Instant::now());
            sent += 1;
            tokio::spawn(async move {
                let result = match change {
                    Change::Create(name) => api
                        .create(&PostParams::default(), &PodSet::new(&name, 1))
                        .await
                        .map(drop),
                    Change::Resize(name, size) => {
                        let patch = Patch::Merge(serde_json::json!({"spec": {"size": size}}));
                        api.patch(&name, &PatchParams::default(), &patch)
                            .await
                            .map(drop)
                    }
                };
                samples.answered(i, result.is_ok());
                if let Err(e) = result {
                    let _ = tx.send(format!("{name}: {e}"));
                }
                drop(permit);
            });
        }
        (sent, behind)
    }
}

pub async fn run(args: ChurnArgs) -> anyhow::Result<()> {
    if let Some(bad) = args
        .replicas
        .iter()
        .find(|n| **n < 1 || **n > REPLICA_USERS)
    {
        bail!("--replicas {bad}: each side must have between 1 and {REPLICA_USERS} replicas");
    }
    if !args.replicas.contains(&1) {
        bail!("--replicas must include 1: every side is measured against a ring of one");
    }
    if !(args.start_rate > 0.0 && args.step_rate >= 0.0) || args.step_secs == 0 {
        bail!("--start-rate must be above 0, --step-rate at least 0 and --step-secs at least 1");
    }
    if args.podsets == 0 && args.creates_percent < 100 {
        bail!(
            "--podsets must be at least 1 unless every change is a create (--creates-percent 100)"
        );
    }
    let cluster = &args.cluster;
    let (mut kube, host) = without_controller_manager(cluster, "churn")?;
    let load_at_start = load_average();
    let mut sides = Vec::new();
    for &n in &args.replicas {
        let side = run_side(&args, &mut kube, &host, n)
            .await
            .with_context(|| format!("the churn with {}", side_name(n, true)))?;
        sides.push(side);
    }
    println!("{}", render(&args, &sides));
    println!(
        "Load average (1, 5, 15 min) at the start: {load_at_start}; at the end: {}.",
        load_average()
    );
    Ok(())
}

async fn run_side(
    args: &ChurnArgs,
    kube: &mut LocalKube,
    host: &HostSetup,
    n: usize,
) -> anyhow::Result<SideRun> {
    let what = side_name(n, true);
    let timeout = Duration::from_secs(args.cluster.timeout_secs);
    let step_length = Duration::from_secs(args.step_secs);
    let state = args.cluster.state();
    let target = kube.fresh()?;
    let client = client_for(&target.admin_kubeconfig).await?;
    install_crd(&client).await?;
    create_namespace(&client, NAMESPACE).await?;
    let pool: Vec<String> = (0..args.podsets).map(|i| format!("base-{i:05}")).collect();
    create_podsets_timed(&client, NAMESPACE, &pool, 1, args.creators).await?;
    let setup = FleetSetup {
        kube,
        target: &target,
        host,
        state: &state,
    };
    let limits = Limits {
        memory: None,
        cpu: Some(args.cpu_quota),
    };
    let mut fleet = if args.no_admission {
        Fleet::start_limited(&setup, n, true, "churn", limits)?
    } else {
        Fleet::start_admitted(&setup, n, "churn", limits)?
    };
    if let Some(cgroup) = fleet.cpu_cgroups.first() {
        eprintln!(
            "[churn] {what}: each replica under {} cores (cgroup {})",
            args.cpu_quota,
            cgroup.version()
        );
    }
    let settled = fleet
        .settle(args.podsets, Duration::from_secs(args.quiet_secs), timeout)
        .await?;
    eprintln!(
        "[churn] {what}: {} PodSets reconciled, settled after {:.1} s",
        args.podsets,
        settled.as_secs_f64()
    );
    if !args.no_admission {
        wait_for_shard_labels(&client, timeout).await?;
    }
    let samples = Arc::new(Samples::default());
    let watching = follow_deployments(client.clone(), NAMESPACE, samples.clone()).await?;
    let mut churn = Churn {
        client,
        samples: samples.clone(),
        mix: Mix::new(pool, args.creates_percent),
        permits: Arc::new(Semaphore::new(IN_FLIGHT)),
        errors_shown: 0,
    };
    let mut steps: Vec<Step> = Vec::new();
    let mut before = Reading::take(&fleet, &target)?;
    for k in 0..args.max_steps {
        let rate = args.start_rate + k as f64 * args.step_rate;
        let (sent, behind) = churn.run_for(rate, step_length).await;
        fleet.check_running()?;
        let after = Reading::take(&fleet, &target)?;
        let step = Step::new(rate, sent, behind, &before, &after);
        before = after;
        // The step before has had this whole step to finish.
        if let Some(last) = steps.last_mut() {
            last.judge(&samples);
        }
        eprintln!(
            "[churn] {what}: {rate} a second: sent {sent}, behind {behind}, waits within 1 s {}, cores {:?}, API server {:?}",
            step.waits
                .share_within(WAIT_AIM_SECS)
                .map_or("-".into(), |s| format!("{:.4}", s)),
            step.cores,
            step.apiserver_cores
        );
        let missed =
            !step.wait_ok() || step.behind > 0 || steps.last().is_some_and(|last| !last.passed());
        steps.push(step);
        if missed {
            break;
        }
    }
    // The last step's changes get as long as the others had to finish.
    let drain_until = Instant::now() + step_length;
    while Instant::now() < drain_until
        && steps.last().is_some_and(|s| {
            !samples
                .latencies(s.from, s.to, |_| true)
                .iter()
                .all(|l| *l <= LATENCY_AIM)
        })
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if let Some(last) = steps.last_mut() {
        last.judge(&samples);
    }
    watching.abort();
    fleet.stop()?;
    Ok(SideRun { replicas: n, steps })
}

/// Waits until the API server calls the shard-label webhook: a PodSet
/// created in a dry run comes back labelled.
async fn wait_for_shard_labels(client: &kube::Client, timeout: Duration) -> anyhow::Result<()> {
    let api = Api::<PodSet>::namespaced(client.clone(), NAMESPACE);
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = Instant::now() + timeout;
    loop {
        let created = api
            .create(&params, &PodSet::new("admission-probe", 1))
            .await;
        if let Ok(created) = &created
            && created
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(SHARD_LABEL))
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the shard-label webhook did not label a new PodSet within {timeout:?} (last: {:?}); --no-admission runs without it",
                created.map(|c| c.metadata.labels)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn cores(values: &[f64]) -> String {
    values
        .iter()
        .map(|c| format!("{c:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn render(args: &ChurnArgs, sides: &[SideRun]) -> String {
    let mut out = format!(
        "### Throughput under a CPU quota of {} cores per replica\n\n\
         {} PodSets, then {}% creates and {}% size changes, {} a second more every {} s; {}. A step passes when the p99 \
         queue wait is at most {WAIT_AIM_SECS} s, the p99 from a change to its Deployment following at most {} s, and \
         every change was sent on time and accepted.\n\n",
        args.cpu_quota,
        args.podsets,
        args.creates_percent,
        100 - args.creates_percent,
        args.step_rate,
        args.step_secs,
        if args.no_admission {
            "no admission: each new PodSet is labelled by its owner"
        } else {
            "the replicas serve the shard-label webhook behind one front, so a new PodSet is born labelled"
        },
        LATENCY_AIM.as_secs()
    );
    for side in sides {
        let (capacity, missed) = side.capacity();
        out.push_str(&format!(
            "#### {}: capacity {capacity} changes a second{}\n\n\
             | rate | sent | behind | failed | waits within 1 s | p99 wait (bucket) | p99 change to Deployment | p99 API answer | cores by replica | total | reconciles per change | CPU per reconcile | API server cores | throttled periods | passed |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
            side_name(side.replicas, true),
            if missed { "" } else { " (no step missed: the last step run)" }
        ));
        for s in &side.steps {
            let ms =
                |d: Option<Duration>| d.map_or("-".into(), |d| format!("{} ms", d.as_millis()));
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {} | {} | {} | {} |\n",
                s.rate,
                s.sent,
                s.behind,
                s.failed,
                s.waits
                    .share_within(WAIT_AIM_SECS)
                    .map_or("-".into(), |x| format!("{:.2}%", x * 100.0)),
                s.waits
                    .quantile_edge(0.99)
                    .map_or("> 60 s".into(), |e| format!("<= {e} s")),
                ms(s.latency_p99),
                ms(s.answer_p99),
                cores(&s.cores),
                s.total_cores(),
                s.reconciles as f64 / s.sent.max(1) as f64,
                s.cpu_per_reconcile_ms()
                    .map_or("-".into(), |ms| format!("{ms:.2} ms")),
                s.apiserver_cores.map_or("-".into(), |c| format!("{c:.2}")),
                s.throttled
                    .iter()
                    .map(|t| t.map_or("-".into(), |t| format!("{:.0}%", t * 100.0)))
                    .collect::<Vec<_>>()
                    .join(", "),
                if s.passed() { "yes" } else { "no" },
            ));
        }
        out.push('\n');
    }
    let Some(one) = sides.iter().find(|s| s.replicas == 1) else {
        return out;
    };
    let (base, _) = one.capacity();
    out.push_str("| side | capacity | / a ring of one | aim | total cores at the ring of one's capacity | / a ring of one | aim | total cores at the first step | / a ring of one |\n|---|---|---|---|---|---|---|---|---|\n");
    let first = args.start_rate;
    for side in sides {
        let (capacity, _) = side.capacity();
        let ratio = (base > 0.0).then(|| capacity / base);
        let at_base = side.step_at(base).map(Step::total_cores);
        let one_at_base = one.step_at(base).map(Step::total_cores);
        let cpu_ratio = at_base.zip(one_at_base).map(|(a, b)| a / b.max(1e-9));
        let at_first = side.step_at(first).map(Step::total_cores);
        let first_ratio = at_first
            .zip(one.step_at(first).map(Step::total_cores))
            .map(|(a, b)| a / b.max(1e-9));
        out.push_str(&format!(
            "| {} | {capacity} | {} | {} | {} | {} | {} | {} | {} |\n",
            side_name(side.replicas, true),
            ratio.map_or("-".into(), |r| format!("{r:.2}x")),
            if side.replicas == 3 {
                format!(">= {CAPACITY_AIM}x")
            } else {
                "".into()
            },
            at_base.map_or("-".into(), |c| format!("{c:.2}")),
            cpu_ratio.map_or("-".into(), |r| format!("{r:.2}x")),
            if side.replicas > 1 {
                format!("<= {CPU_AIM}x")
            } else {
                "".into()
            },
            at_first.map_or("-".into(), |c| format!("{c:.3}")),
            first_ratio.map_or("-".into(), |r| format!("{r:.2}x")),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(rate: f64, passed: bool) -> Step {
        let now = Instant::now();
        let mut waits = QueueWaits::default();
        waits.add_line(
            "workqueue_queue_duration_seconds_bucket{le=\"1.0\",name=\"p\"}",
            99,
        );
        waits.add_line("workqueue_queue_duration_seconds_count{name=\"p\"}", 100);
        Step {
            rate,
            from: now,
            to: now,
            sent: 10,
            behind: 0,
            waits,
            reconciles: 20,
            cores: vec![0.2],
            apiserver_cores: None,
            throttled: vec![None],
            latency_p99: Some(if passed { LATENCY_AIM } else { LATENCY_AIM * 2 }),
            answer_p99: None,
            failed: 0,
        }
    }

    #[test]
    fn capacity_is_the_last_step_before_the_first_missed_one() {
        let side = |steps| SideRun { replicas: 1, steps };
        let run = side(vec![
            step(10.0, true),
            step(20.0, true),
            step(30.0, false),
            step(40.0, true),
        ]);
        assert_eq!(run.capacity(), (20.0, true));
        assert_eq!(side(vec![step(10.0, false)]).capacity(), (0.0, true));
        assert_eq!(side(vec![step(10.0, true)]).capacity(), (10.0, false));
    }

    #[test]
    fn a_step_behind_its_rate_or_over_a_second_of_waits_does_not_pass() {
        assert!(step(10.0, true).passed());
        let mut behind = step(10.0, true);
        behind.behind = 1;
        assert!(!behind.passed());
        let mut slow = step(10.0, true);
        slow.waits
            .add_line("workqueue_queue_duration_seconds_count{name=\"q\"}", 1);
        assert!(!slow.passed(), "98 of 100 within 1 s... now 99 of 101");
        let mut refused = step(10.0, true);
        refused.failed = 1;
        assert!(!refused.passed());
    }

    #[test]
    fn creates_are_spread_evenly_among_the_size_changes() {
        let samples = Samples::default();
        let mut mix = Mix::new(vec!["a".into(), "b".into()], 50);
        let mut kinds = String::new();
        for _ in 0..6 {
            match mix.next(&samples) {
                Some(Change::Create(name)) => kinds.push_str(&format!("[{name}]")),
                Some(Change::Resize(name, size)) => kinds.push_str(&format!("{name}{size}")),
                None => kinds.push('-'),
            }
        }
        assert_eq!(
            kinds, "a2[churn-000001]b2[churn-000002]a1[churn-000003]",
            "each size toggles 1 <-> 2"
        );
        // A PodSet whose last change has not been followed is passed over,
        // and with every one waiting there is no change to send.
        samples.sent("b", 1, Instant::now());
        assert!(matches!(mix.next(&samples), Some(Change::Resize(name, 2)) if name == "a"));
        samples.sent("a", 2, Instant::now());
        assert!(
            mix.next(&samples).is_some(),
            "a create needs no free PodSet"
        );
        assert!(mix.next(&samples).is_none());
    }
}
