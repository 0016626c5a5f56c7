//! `bench-cluster scale`: what sharding is for, holding more than one
//! process can. Many PodSets on an API server without
//! kube-controller-manager (so a PodSet and its Deployment are all the
//! objects there are), then one host, a ring of one and N replicas started
//! in turn against that same cluster, each replica behind a relay of its
//! own that counts what the API server sent it. Per replica, once it has
//! settled: the objects it caches, its RSS above the idle floor of its
//! configuration, and the bytes it received. See BENCHMARKS.md, "Sharding
//! at scale".
//!
//! Every side starts the way a restarted Deployment does: the cluster holds
//! every object already, so each replica lists its share and reconciles
//! each of its primaries once (the API server finds every apply a no-op).
//! A seeding ring of one makes the Deployments and labels every object
//! with its bucket before the first measured side, so no side pays for
//! work another side left undone.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::capacity;
use crate::cgroup::{CpuCgroup, MemoryCgroup};
use crate::cluster::{CONTROLLER_USER, LocalKube, REPLICA_USERS, Target};
use crate::controller::{ControllerProcess, HostSetup, Side};
use crate::driver::{
    BULK_NAMESPACE, ClusterArgs, client_for, create_namespace, create_podsets_timed, install_crd,
    load_average,
};
use crate::moves;
use crate::procfs;
use crate::queue_waits::QueueWaits;
use crate::replicas::{mib, settle_lines, side_name};
use reconciler_tests::real_cluster::kubeconfig;
use reconciler_tests::real_cluster::severable_link::{SeverableLink, Traffic};

#[derive(Debug, clap::Args)]
pub struct ScaleArgs {
    /// PodSets created before the first side (each gets one Deployment: twice as many
    /// cached objects).
    #[arg(long, default_value_t = 50_000)]
    pub podsets: usize,
    /// The sharded sides measured after one host and a ring of one.
    #[arg(long, value_delimiter = ',', default_value = "2,3,4")]
    pub replicas: Vec<usize>,
    /// Concurrent creators of the PodSets.
    #[arg(long, default_value_t = 32)]
    pub creators: usize,
    /// A side has settled once no replica has reconciled anything for this long (and
    /// every queue is empty).
    #[arg(long, default_value_t = 5)]
    pub quiet_secs: u64,
    /// Then the capacity run: each replica in a memory cgroup of this many MiB (cgroup v2
    /// `memory.max`, or v1 `memory.limit_in_bytes`; needs root), as a pod's limits.memory. First
    /// one replica, which must pause over the cache budget the host derives from its limit
    /// (with a clear status, not an OOM kill), then three, which must hold every object. 0: the
    /// limit whose budget is the objects / 2.8. Not given: no capacity run.
    #[arg(long, value_name = "MIB")]
    pub memory_limit_mib: Option<u64>,
    /// With --memory-limit-mib: the capacity run alone, not the sides before it.
    #[arg(long, requires = "memory_limit_mib")]
    pub capacity_only: bool,
    /// Then the moves (last): three replicas, then one joins, one stops (SIGTERM) and one is
    /// killed (SIGKILL); for each, the replicas' object writes, the bytes each received against
    /// one full list, the time to settle on the new ring and the p99 latency of keys that did
    /// not move, before and after.
    #[arg(long)]
    pub moves: bool,
    /// The moves alone, not the sides before them (nor a capacity run).
    #[arg(long, conflicts_with_all = ["capacity_only", "memory_limit_mib"])]
    pub moves_only: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// One replica's figures once its side settled.
#[derive(Debug, Clone, Copy)]
struct Reading {
    podsets: u64,
    deployments: u64,
    rss: u64,
    /// From the start of the replica.
    traffic: Traffic,
}

impl Reading {
    fn cached(&self) -> u64 {
        self.podsets + self.deployments
    }
}

/// One side, settled.
#[derive(Debug)]
struct SideRun {
    replicas: usize,
    sharded: bool,
    settled_after: Duration,
    /// By replica.
    readings: Vec<Reading>,
    /// The idle RSS of this side's configuration.
    floor: u64,
}

impl SideRun {
    fn largest(&self, of: impl Fn(&Reading) -> u64) -> u64 {
        self.readings.iter().map(of).max().unwrap_or(0)
    }

    fn total(&self, of: impl Fn(&Reading) -> u64) -> u64 {
        self.readings.iter().map(of).sum()
    }

    fn above_floor(&self, r: &Reading) -> u64 {
        r.rss.saturating_sub(self.floor)
    }
}

pub async fn run(args: ScaleArgs) -> anyhow::Result<()> {
    if let Some(bad) = args
        .replicas
        .iter()
        .find(|n| **n < 2 || **n > REPLICA_USERS)
    {
        bail!("--replicas {bad}: each side must have between 2 and {REPLICA_USERS} replicas");
    }
    if args.podsets == 0 {
        bail!("--podsets must be at least 1");
    }
    let cluster = &args.cluster;
    let (mut kube, host) = without_controller_manager(cluster, "scale")?;
    let state = cluster.state();
    let timeout = Duration::from_secs(cluster.timeout_secs);
    let quiet = Duration::from_secs(args.quiet_secs);
    let load_at_start = load_average();
    let target = kube.fresh()?;
    let client = client_for(&target.admin_kubeconfig).await?;
    install_crd(&client).await?;
    create_namespace(&client, BULK_NAMESPACE).await?;

    let setup = FleetSetup {
        kube: &kube,
        target: &target,
        host: &host,
        state: &state,
    };
    // The idle floors, on the empty cluster: what a host of each
    // configuration holds before it caches anything.
    let mut floors = Vec::new();
    for sharded in [false, true] {
        let mut fleet = Fleet::start(&setup, 1, sharded, "idle")?;
        fleet.settle(0, quiet, timeout).await?;
        let floor = fleet.readings()?[0].rss;
        eprintln!("[idle] {}: {}", side_name(1, sharded), mib(floor));
        fleet.stop()?;
        floors.push(floor);
    }

    let names: Vec<String> = (0..args.podsets).map(|i| format!("ps-{i:06}")).collect();
    let created = Instant::now();
    create_podsets_timed(&client, BULK_NAMESPACE, &names, 0, args.creators).await?;
    eprintln!(
        "[load] {} PodSets created in {:.1} s",
        args.podsets,
        created.elapsed().as_secs_f64()
    );
    {
        let mut seed = Fleet::start(&setup, 1, true, "seed")?;
        let took = seed.settle(args.podsets, quiet, timeout).await?;
        eprintln!(
            "[seed] a ring of one made every Deployment and labelled every object in {:.1} s",
            took.as_secs_f64()
        );
        seed.stop()?;
    }

    let mut sides = vec![(1, false), (1, true)];
    sides.extend(args.replicas.iter().map(|n| (*n, true)));
    if args.capacity_only || args.moves_only {
        sides.clear();
    }
    let mut runs = Vec::new();
    for (n, sharded) in sides {
        let what = side_name(n, sharded);
        let mut fleet = Fleet::start(&setup, n, sharded, "side")?;
        let settled_after = fleet
            .settle(args.podsets, quiet, timeout)
            .await
            .with_context(|| format!("the run with {what}"))?;
        let run = SideRun {
            replicas: n,
            sharded,
            settled_after,
            readings: fleet.readings()?,
            floor: floors[usize::from(sharded)],
        };
        eprintln!("[{what}] {run:?}");
        runs.push(run);
        fleet.stop()?;
    }
    if !runs.is_empty() {
        println!("{}", render(&args, &runs));
    }
    if let Some(mib) = args.memory_limit_mib {
        let limit = match mib {
            0 => capacity::limit_for(2 * args.podsets as u64),
            mib => mib << 20,
        };
        let report = capacity::run(&setup, args.podsets, limit, quiet, timeout).await?;
        println!("{report}");
    }
    if args.moves || args.moves_only {
        let report = moves::run(&setup, args.podsets, quiet, timeout).await?;
        println!("{report}");
    }
    println!(
        "Load average (1, 5, 15 min) at the start: {load_at_start}; at the end: {}.",
        load_average()
    );
    Ok(())
}

/// A control plane of the bench's own without kube-controller-manager, and
/// the host to start on it; `bench` names the bench in the error.
pub(crate) fn without_controller_manager(
    cluster: &ClusterArgs,
    bench: &str,
) -> anyhow::Result<(LocalKube, HostSetup)> {
    if !cluster.kube.is_file() {
        bail!(
            "no control plane at {} (give --kube): the {bench} bench starts one of its own without kube-controller-manager",
            cluster.kube.display()
        );
    }
    let state = cluster.state();
    let kube = LocalKube::new(cluster.kube.clone(), state.clone(), cluster.keep_state)?
        .without_controller_manager();
    std::fs::create_dir_all(state.join("work"))?;
    let host = HostSetup::prepare(
        cluster.host_bin.clone(),
        &cluster.plugin,
        None,
        &state.join("work"),
        Vec::new(),
    )?;
    Ok((kube, host))
}

/// Each of `n` replicas' admission port on loopback, and one front that
/// hands each connection to the next of them, as a Service does. TLS
/// passes through: the replicas share one serving certificate.
pub(crate) fn admission_front(n: usize) -> anyhow::Result<(Vec<u16>, SeverableLink)> {
    let ports: Vec<u16> = (0..n)
        .map(|_| reconciler_tests::free_loopback_port())
        .collect::<Result<_, _>>()?;
    let front = SeverableLink::start_spread(
        ports
            .iter()
            .map(|port| SocketAddr::from(([127, 0, 0, 1], *port)))
            .collect(),
    )?;
    Ok((ports, front))
}

/// What cgroups hold each replica to, as a pod's `limits` do.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Limits {
    /// Bytes (`limits.memory`).
    pub memory: Option<u64>,
    /// Cores (`limits.cpu`): a CFS quota of this much of a core per period.
    pub cpu: Option<f64>,
}

/// What every side's replicas start from.
pub(crate) struct FleetSetup<'a> {
    pub kube: &'a LocalKube,
    pub target: &'a Target,
    pub host: &'a HostSetup,
    pub state: &'a Path,
}

/// Replicas of one side, each behind a relay of its own; dropping it stops
/// them.
pub(crate) struct Fleet {
    // Declared first: the replicas stop before their relays.
    controllers: Vec<ControllerProcess>,
    links: Vec<SeverableLink>,
    /// The ports replicas serve the shard-label webhook on, by replica, and
    /// the front that hands each review to the next of them, as a Service
    /// does (none without admission).
    admission: Option<(Vec<u16>, SeverableLink)>,
    metrics: Vec<String>,
    probes: Vec<String>,
    logs: Vec<PathBuf>,
    /// Each replica's memory cgroup, in the capacity run; removed after
    /// the replicas are gone.
    pub cgroups: Vec<MemoryCgroup>,
    /// Each replica's CPU cgroup, in the churn run; the same.
    pub cpu_cgroups: Vec<CpuCgroup>,
    sharded: bool,
    started: Instant,
    /// Replicas started so far: the next one's user and log are numbered by it.
    spawned: usize,
    /// Its phase and first size, naming its logs and cgroups.
    name: String,
}

impl Fleet {
    pub(crate) fn start(
        setup: &FleetSetup<'_>,
        n: usize,
        sharded: bool,
        phase: &str,
    ) -> anyhow::Result<Self> {
        Self::start_limited(setup, n, sharded, phase, Limits::default())
    }

    /// As [`Self::start_limited`], sharded, the replicas serving the
    /// shard-label webhook behind one front, so a new PodSet is born with
    /// its bucket's label (as a deployed fleet has it).
    pub(crate) fn start_admitted(
        setup: &FleetSetup<'_>,
        n: usize,
        phase: &str,
        limits: Limits,
    ) -> anyhow::Result<Self> {
        let mut fleet = Self::empty(n, true, phase);
        fleet.admission = Some(admission_front(n)?);
        for _ in 0..n {
            fleet.spawn(setup, limits)?;
        }
        Ok(fleet)
    }

    fn empty(n: usize, sharded: bool, phase: &str) -> Self {
        Fleet {
            controllers: Vec::new(),
            links: Vec::new(),
            admission: None,
            metrics: Vec::new(),
            probes: Vec::new(),
            logs: Vec::new(),
            cgroups: Vec::new(),
            cpu_cgroups: Vec::new(),
            sharded,
            started: Instant::now(),
            spawned: 0,
            name: format!("{phase}-{n}{}", if sharded { "s" } else { "" }),
        }
    }

    /// As [`Self::start`], each replica in cgroups of its own that hold it
    /// to `limits`.
    pub(crate) fn start_limited(
        setup: &FleetSetup<'_>,
        n: usize,
        sharded: bool,
        phase: &str,
        limits: Limits,
    ) -> anyhow::Result<Self> {
        let mut fleet = Self::empty(n, sharded, phase);
        for _ in 0..n {
            fleet.spawn(setup, limits)?;
        }
        Ok(fleet)
    }

    /// Starts one more replica, behind a relay of its own (and in cgroups
    /// of its own holding it to `limits`). Returns its index.
    pub(crate) fn spawn(
        &mut self,
        setup: &FleetSetup<'_>,
        limits: Limits,
    ) -> anyhow::Result<usize> {
        let FleetSetup {
            kube,
            target,
            host,
            state,
        } = setup;
        let i = self.spawned;
        if i >= REPLICA_USERS {
            bail!("more than the {REPLICA_USERS} replica users the audit policy names");
        }
        self.spawned += 1;
        let apiserver = api_server_address(&target.admin_kubeconfig)?;
        let user = format!("{CONTROLLER_USER}-{i}");
        let credentials = kube.credentials(target, &user)?;
        let link = SeverableLink::start(apiserver)?;
        let through = state.join(format!("{user}-relayed.kubeconfig"));
        kubeconfig::with_server(Some(&credentials), &link.url(), &through)?;
        let probe = format!("127.0.0.1:{}", reconciler_tests::free_loopback_port()?);
        let mut more = vec!["--http-listen".to_string(), probe.clone()];
        if self.sharded {
            more.extend(["--sharding", "--sharding-namespace", "default"].map(String::from));
        }
        if let Some((ports, front)) = &self.admission {
            let port = ports
                .get(i)
                .context("a replica beyond those the admission front was made for")?;
            more.extend([
                "--admission-listen".to_string(),
                format!("127.0.0.1:{port}"),
                "--admission-url".to_string(),
                format!("https://{}", front.address()),
                "--admission-cert-secret".to_string(),
                "default/reconciler-host-bench-admission".to_string(),
            ]);
        }
        let mut setup = host.with_more_args(&more.iter().map(String::as_str).collect::<Vec<_>>());
        if let Some(limit) = limits.memory {
            let cgroup =
                MemoryCgroup::create(&format!("reconciler-bench-{}-{i}", self.name), limit)?;
            setup = setup.in_cgroup(cgroup.procs());
            self.cgroups.push(cgroup);
        }
        if let Some(cores) = limits.cpu {
            let cgroup =
                CpuCgroup::create(&format!("reconciler-bench-{}-{i}-cpu", self.name), cores)?;
            if limits.memory.is_some() && cgroup.version() == crate::cgroup::Version::V2 {
                bail!(
                    "under cgroup v2 a process is in one cgroup: give a replica a memory limit or a CPU quota, not both"
                );
            }
            setup = setup.in_cgroup(cgroup.procs());
            self.cpu_cgroups.push(cgroup);
        }
        let log = state.join(format!("scale-{}-{i}.log", self.name));
        let controller =
            ControllerProcess::start(Side::Host, Some(&setup), None, &through, log.clone())?;
        self.metrics.push(
            controller
                .metrics_address()
                .context("hosts serve /metrics")?,
        );
        self.controllers.push(controller);
        self.links.push(link);
        self.probes.push(probe);
        self.logs.push(log);
        Ok(self.controllers.len() - 1)
    }

    /// Takes replica `i` out of the fleet: SIGTERM (and waits for it to
    /// exit), or SIGKILL when `graceful` is false. Its relay goes with it.
    pub(crate) fn remove(&mut self, i: usize, graceful: bool) -> anyhow::Result<()> {
        let mut controller = self.controllers.remove(i);
        // Stopped before its relay goes: a replica stopping gracefully
        // deletes its Lease through it.
        let stopped = if graceful {
            controller.terminate(Duration::from_secs(30))
        } else {
            controller.kill();
            Ok(())
        };
        self.links.remove(i);
        self.metrics.remove(i);
        self.probes.remove(i);
        self.logs.remove(i);
        stopped
    }

    /// What each replica's relay has carried so far, in the fleet's order.
    pub(crate) fn traffic(&self) -> Vec<Traffic> {
        self.links
            .iter()
            .map(|l| l.traffic().first().copied().unwrap_or_default())
            .collect()
    }

    /// Waits until every replica is ready (and, sharded, settled on the
    /// ring of all of them), the PodSets and the Deployments cached over
    /// them all number `podsets` each, they reconciled at least `podsets`
    /// times, every queue is empty and nothing was reconciled for `quiet`. Returns how long after the start that was.
    pub(crate) async fn settle(
        &mut self,
        podsets: usize,
        quiet: Duration,
        timeout: Duration,
    ) -> anyhow::Result<Duration> {
        let n = self.controllers.len();
        let deadline = Instant::now() + timeout;
        let mut last_reconciles = None;
        let mut last_seen = String::from("nothing yet");
        let mut quiet_since = Instant::now();
        loop {
            if Instant::now() > deadline {
                bail!(
                    "{} did not settle within {} s (last seen: {last_seen})",
                    side_name(n, self.sharded),
                    timeout.as_secs()
                );
            }
            self.check_running()?;
            tokio::time::sleep(Duration::from_millis(500)).await;
            let ready = self.probes.iter().all(|p| {
                reconciler_tests::report_text(p, "/readyz")
                    .is_ok_and(|r| r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200"))
            });
            let ringed = !self.sharded || self.logs.iter().all(|l| !settle_lines(l, n).is_empty());
            let Ok(scraped) = self.scrape() else {
                continue;
            };
            let busy = scraped.iter().any(|s| s.depth + s.in_flight > 0);
            let reconciles: u64 = scraped.iter().map(|s| s.reconciles).sum();
            let cached: u64 = scraped.iter().map(|s| s.podsets).sum();
            let children: u64 = scraped.iter().map(|s| s.deployments).sum();
            last_seen = format!(
                "ready {ready}, on one ring {ringed}, busy {busy}, {reconciles} reconciles, {cached} PodSets and {children} Deployments cached of {podsets} each"
            );
            if busy || last_reconciles != Some(reconciles) {
                quiet_since = Instant::now();
            }
            last_reconciles = Some(reconciles);
            // Every primary reconciled at least once since the start, and
            // each object cached exactly once over the replicas: a replica
            // still holding more than its share has not settled.
            let podsets = podsets as u64;
            let done = ready
                && ringed
                && !busy
                && cached == podsets
                && children == podsets
                && reconciles >= podsets;
            // Settled when the last reconcile ran, not when the quiet ran out.
            if done && quiet_since.elapsed() >= quiet {
                return Ok(quiet_since.saturating_duration_since(self.started));
            }
        }
    }

    /// SIGTERM to every replica at once, as a rollout's scale-down does,
    /// and waits for each: their Leases are gone once this returns.
    pub(crate) fn stop(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        let grace = Duration::from_secs(30);
        let results: Vec<anyhow::Result<()>> = std::thread::scope(|s| {
            let stopping: Vec<_> = self
                .controllers
                .iter_mut()
                .map(|c| s.spawn(move || c.terminate(grace)))
                .collect();
            stopping
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a stop panicked")))
                })
                .collect()
        });
        results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
        eprintln!(
            "  stopped {} in {:.1} s",
            side_name(self.controllers.len(), self.sharded),
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// Each replica's log.
    pub(crate) fn logs(&self) -> &[PathBuf] {
        &self.logs
    }

    pub(crate) fn check_running(&mut self) -> anyhow::Result<()> {
        self.controllers
            .iter_mut()
            .try_for_each(ControllerProcess::check_running)
    }

    /// Each replica's pid, in the fleet's order.
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.controllers
            .iter()
            .map(ControllerProcess::pid)
            .collect()
    }

    pub(crate) fn scrape(&self) -> anyhow::Result<Vec<Scraped>> {
        self.metrics.iter().map(|a| Scraped::at(a)).collect()
    }

    fn readings(&self) -> anyhow::Result<Vec<Reading>> {
        let scraped = self.scrape()?;
        self.controllers
            .iter()
            .zip(&self.links)
            .zip(scraped)
            .map(|((c, link), s)| {
                Ok(Reading {
                    podsets: s.podsets,
                    deployments: s.deployments,
                    rss: procfs::rss_bytes(c.pid())?,
                    traffic: link.traffic().first().copied().unwrap_or_default(),
                })
            })
            .collect()
    }
}

/// What one replica's /metrics says.
#[derive(Debug, Default)]
pub(crate) struct Scraped {
    depth: u64,
    in_flight: u64,
    pub reconciles: u64,
    pub podsets: u64,
    pub deployments: u64,
    /// Clusters paused over their cache budget.
    pub paused: u64,
    /// How long objects waited in the queue.
    pub waits: QueueWaits,
}

impl Scraped {
    fn at(address: &str) -> anyhow::Result<Self> {
        let text = reconciler_tests::metrics_text(address)
            .with_context(|| format!("reading /metrics on {address}"))?;
        let mut s = Scraped::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let value = value as u64;
            s.waits.add_line(name, value);
            if name.starts_with("workqueue_depth{") {
                s.depth += value;
            } else if name.starts_with("controller_runtime_active_workers{") {
                s.in_flight += value;
            } else if name.starts_with("controller_runtime_reconcile_total{") {
                s.reconciles += value;
            } else if name.starts_with("reconciler_host_cluster_paused{") {
                s.paused += value;
            } else if name.starts_with("reconciler_host_cache_objects{") {
                if name.contains("kind=\"PodSet\"") {
                    s.podsets += value;
                } else if name.contains("kind=\"Deployment\"") {
                    s.deployments += value;
                }
            }
        }
        Ok(s)
    }
}

/// Where the API server of `kubeconfig` (its first cluster) listens.
pub(crate) fn api_server_address(kubeconfig: &Path) -> anyhow::Result<SocketAddr> {
    let config = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let server = config
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref()?.server.clone())
        .with_context(|| format!("{} names no server", kubeconfig.display()))?;
    let address = server
        .strip_prefix("https://")
        .unwrap_or(&server)
        .trim_end_matches('/');
    address.parse().with_context(|| {
        format!(
            "the server {server} of {} is not an address",
            kubeconfig.display()
        )
    })
}

/// `value` over `base`, to three places.
fn against(value: f64, base: f64) -> String {
    if base > 0.0 {
        format!("{:.3}", value / base)
    } else {
        "-".into()
    }
}

/// The table: a row per side, each replica's figure the largest of its
/// side's, and that figure against the even share (total/N) and against
/// one host's figure over N.
fn render(args: &ScaleArgs, runs: &[SideRun]) -> String {
    let total = args.podsets as f64 * 2.0;
    let mut out = format!(
        "{} PodSets (size 0) and their Deployments, {total:.0} objects, on kube-apiserver without kube-controller-manager; \
         each side started against the populated cluster and measured once every replica settled \
         (queues empty, nothing reconciled for {} s). Each replica behind a relay of its own.\n\n",
        args.podsets, args.quiet_secs
    );
    let Some(one) = runs.first() else {
        return out;
    };
    let one_above = one.above_floor(&one.readings[0]) as f64;
    let one_bytes = one.readings[0].traffic.bytes_out as f64;
    out.push_str(
        "| side | settled after | cached objects, largest replica | / (total/N) | RSS above idle floor, largest | / (one host's / N) | bytes from the API server, largest | / (one host's / N) | all replicas: RSS above floor, bytes |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for run in runs {
        let n = run.replicas as f64;
        let cached = run.largest(Reading::cached) as f64;
        let above = run.largest(|r| run.above_floor(r)) as f64;
        let bytes = run.largest(|r| r.traffic.bytes_out) as f64;
        out.push_str(&format!(
            "| {} | {:.1} s | {cached:.0} | {} | {} | {} | {} | {} | {}, {} |\n",
            side_name(run.replicas, run.sharded),
            run.settled_after.as_secs_f64(),
            against(cached, total / n),
            mib(above as u64),
            against(above, one_above / n),
            mib(bytes as u64),
            against(bytes, one_bytes / n),
            mib(run.total(|r| run.above_floor(r))),
            mib(run.total(|r| r.traffic.bytes_out)),
        ));
    }
    out.push_str(&format!(
        "\nIdle floors: one host {}, a ring of one {}.\n",
        mib(runs.iter().find(|r| !r.sharded).map_or(0, |r| r.floor)),
        mib(runs.iter().find(|r| r.sharded).map_or(0, |r| r.floor)),
    ));
    out
}
