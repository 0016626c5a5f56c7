//! `bench-cluster run`: each side on a fresh cluster, the phases one after
//! the other, then the table.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};

use crate::audit::{AuditTail, Writes};
use crate::cluster::{CONTROLLER_USER, Cluster, LocalKube, Target};
use crate::controller::{ControllerProcess, HostSetup, KopfSetup, Side};
use crate::observer::{Observer, key};
use crate::podset::{CRD_YAML, PodSet};
use crate::procfs;
use crate::stats::percentile;
use crate::table::{Shape, SideRun, render};

pub(crate) const PROBE_NAMESPACE: &str = "bench-probe";
const SINGLES_NAMESPACE: &str = "bench-singles";
pub(crate) const BULK_NAMESPACE: &str = "bench-bulk";

/// What both `run` and `replicas` take: the bulk phase, the cluster, the host.
#[derive(Debug, clap::Args)]
pub struct BulkArgs {
    /// PodSets of the bulk phase.
    #[arg(long, default_value_t = 1000)]
    pub count: usize,
    /// Concurrent creators of the bulk phase.
    #[arg(long, default_value_t = 16)]
    pub creators: usize,
    /// spec.size of every PodSet (each gets that many Pods, which stay Pending).
    #[arg(long, default_value_t = 2)]
    pub size: i32,
    /// A candidate the host runs in shadow beside podset (copied in as
    /// podset.candidate.wasm). With --baseline host, the host without it is
    /// the baseline: what shadow costs.
    #[arg(long)]
    pub candidate: Option<PathBuf>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Where a bench runs and what it starts: every mode's.
#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    /// The kube script of a control plane for the bench's own use; without it
    /// `run` runs against the cluster KUBECONFIG names (`replicas` and `scale` need it).
    #[arg(long, default_value = "../shared/kube/kube")]
    pub kube: PathBuf,
    /// The state dir of that control plane, removed at the end
    /// [default: <temp dir>/reconciler-bench-cluster-<pid>].
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Keep the state dir (controller logs, audit log of the last side).
    #[arg(long)]
    pub keep_state: bool,
    /// The host binary.
    #[arg(long, default_value = "target/release/reconciler-host")]
    pub host_bin: PathBuf,
    /// The podset plugin the host runs.
    #[arg(long, default_value = "plugins/podset.wasm")]
    pub plugin: PathBuf,
    /// Longest wait for any one phase.
    #[arg(long, default_value_t = 600)]
    pub timeout_secs: u64,
}

impl ClusterArgs {
    /// The state dir asked for, or one of this process's own.
    pub fn state(&self) -> PathBuf {
        self.state_dir.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!("reconciler-bench-cluster-{}", std::process::id()))
        })
    }
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// What the host is compared with: the native kube-rs controller, or the
    /// PodSet operator written with kopf (bench/cluster/kopf; give the host
    /// the Python podset with --plugin plugins/podset-py/podset-py.wasm).
    #[arg(long, value_enum, default_value_t = Side::Native)]
    pub baseline: Side,
    /// Run one side only.
    #[arg(long, value_enum)]
    pub only: Option<Side>,
    /// The virtualenv holding kopf (bench/cluster/kopf/requirements.txt).
    #[arg(long, default_value = "target/guest-tools/kopf")]
    pub kopf_venv: PathBuf,
    /// Seconds to measure the controller's CPU for once it has settled.
    #[arg(long, default_value_t = 30)]
    pub after_secs: u64,
    /// Runs of each side, each on a freshly reset cluster.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// PodSets created one at a time before the bulk phase.
    #[arg(long, default_value_t = 50)]
    pub singles: usize,
    /// An extra flag for `reconciler-host run` (repeatable), e.g.
    /// `--host-arg=--plugin-concurrency=64`.
    #[arg(long, value_name = "ARG", allow_hyphen_values = true)]
    pub host_arg: Vec<String>,
    #[command(flatten)]
    pub bulk: BulkArgs,
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    if args.runs == 0 || args.bulk.creators == 0 || args.bulk.count == 0 || args.bulk.size < 0 {
        bail!("--runs, --count and --creators must be at least 1, --size at least 0");
    }
    let state = args.bulk.cluster.state();
    let mut cluster = if args.bulk.cluster.kube.is_file() {
        eprintln!(
            "bench-cluster: control plane from {}, state in {}",
            args.bulk.cluster.kube.display(),
            state.display()
        );
        Cluster::Local(LocalKube::new(
            args.bulk.cluster.kube.clone(),
            state.clone(),
            args.bulk.cluster.keep_state,
        )?)
    } else {
        let kubeconfig = std::env::var_os("KUBECONFIG").with_context(|| {
            format!(
                "no control plane at {} (give --kube) and no KUBECONFIG: nothing to run against",
                args.bulk.cluster.kube.display()
            )
        })?;
        eprintln!(
            "bench-cluster: no {}: running against KUBECONFIG={}; kube-apiserver CPU and the controller's writes are n/a (they need an API server and an audit log of the bench's own)",
            args.bulk.cluster.kube.display(),
            kubeconfig.to_string_lossy()
        );
        std::fs::create_dir_all(&state)?;
        Cluster::External(PathBuf::from(kubeconfig))
    };
    // The local cluster removes its state dir itself when dropped.
    let _state_guard = RemoveOnDrop(
        (matches!(cluster, Cluster::External(_)) && !args.bulk.cluster.keep_state)
            .then(|| state.clone()),
    );
    std::fs::create_dir_all(state.join("work"))?;

    if args.baseline == Side::Host && args.bulk.candidate.is_none() {
        bail!(
            "--baseline host compares the host with itself running --candidate in shadow: give --candidate (or choose native or kopf)"
        );
    }
    let sides: Vec<Side> = match args.only {
        Some(side) => vec![side],
        None => vec![args.baseline, Side::Host],
    };
    // The host without its candidate, when it is the baseline.
    let plain_host = if args.baseline == Side::Host && args.only.is_none() {
        Some(HostSetup::prepare(
            args.bulk.cluster.host_bin.clone(),
            &args.bulk.cluster.plugin,
            None,
            &state.join("work").join("baseline"),
            args.host_arg.clone(),
        )?)
    } else {
        None
    };
    let kopf = if sides.contains(&Side::Kopf) {
        Some(KopfSetup::check(
            &args.kopf_venv,
            std::path::Path::new("bench/cluster/kopf/podset_operator.py"),
        )?)
    } else {
        None
    };
    let host = if sides.contains(&Side::Host) {
        Some(HostSetup::prepare(
            args.bulk.cluster.host_bin.clone(),
            &args.bulk.cluster.plugin,
            args.bulk.candidate.as_deref(),
            &state.join("work"),
            args.host_arg.clone(),
        )?)
    } else {
        None
    };

    let load_at_start = load_average();
    let mut baseline_runs = Vec::new();
    let mut host_runs = Vec::new();
    for (index, &side) in sides.iter().enumerate() {
        let is_baseline = index == 0 && sides.len() > 1;
        let host = match (is_baseline, &plain_host) {
            (true, Some(plain)) => Some(plain),
            _ => host.as_ref(),
        };
        for run in 1..=args.runs {
            let label = format!("{side} {run}/{}", args.runs);
            eprintln!("[{label}] starting a fresh cluster");
            let target = cluster.fresh()?;
            if matches!(cluster, Cluster::External(_)) {
                clean_up(&target).await?;
            }
            let result =
                measure_side(&args, side, (host, kopf.as_ref()), &target, &state, &label).await;
            if matches!(cluster, Cluster::External(_)) {
                clean_up(&target).await?;
            }
            let result = result.with_context(|| format!("the {label} run"))?;
            match is_baseline || side != Side::Host {
                true => baseline_runs.push(result),
                false => host_runs.push(result),
            }
        }
    }
    let shape = Shape {
        count: args.bulk.count,
        creators: args.bulk.creators,
        singles: args.singles,
        after_secs: args.after_secs,
    };
    let baseline = args
        .only
        .filter(|side| *side != Side::Host)
        .unwrap_or(args.baseline);
    println!("{}", render(&shape, baseline, &baseline_runs, &host_runs));
    if matches!(cluster, Cluster::External(_)) {
        println!(
            "kube-apiserver CPU and the writes are n/a: the bench ran against KUBECONFIG, not an API server of its own, so it has neither the API server's pid nor an audit log of the controller's requests."
        );
    }
    println!(
        "Load average (1, 5, 15 min) at the start: {load_at_start}; at the end: {}.",
        load_average()
    );
    Ok(())
}

/// Removes a directory on every way out of `run`, failures and Ctrl-C too.
struct RemoveOnDrop(Option<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(dir) = &self.0 {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

pub(crate) async fn client_for(kubeconfig: &std::path::Path) -> anyhow::Result<Client> {
    let kubeconfig = Kubeconfig::read_from(kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

async fn measure_side(
    args: &RunArgs,
    side: Side,
    (host, kopf): (Option<&HostSetup>, Option<&KopfSetup>),
    target: &Target,
    state: &std::path::Path,
    label: &str,
) -> anyhow::Result<SideRun> {
    let client = client_for(&target.admin_kubeconfig).await?;
    install_crd(&client).await?;
    for namespace in [PROBE_NAMESPACE, SINGLES_NAMESPACE, BULK_NAMESPACE] {
        create_namespace(&client, namespace).await?;
    }
    let observer = Observer::start(client.clone()).await?;
    let timeout = Duration::from_secs(args.bulk.cluster.timeout_secs);

    let log = state.join(format!("{side}-controller.log"));
    let mut controller =
        ControllerProcess::start(side, host, kopf, &target.controller_kubeconfig, log)?;
    let pid = controller.pid();
    let started = Instant::now();
    let probe = create_podsets(
        &client,
        PROBE_NAMESPACE,
        &["probe".to_string()],
        args.bulk.size,
        1,
    )
    .await?;
    observer
        .deployments(&probe, timeout, || controller.check_running())
        .await
        .context("waiting for the controller to reconcile a first PodSet")?;
    eprintln!(
        "[{label}] controller ready (pid {pid}): first PodSet reconciled {:.2} s after start",
        started.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_rss = procfs::rss_bytes(pid)?;

    // a. one at a time
    let mut single_latencies = Vec::with_capacity(args.singles);
    for i in 0..args.singles {
        let name = format!("single-{i:03}");
        let sent = Instant::now();
        let keys = create_podsets(&client, SINGLES_NAMESPACE, &[name], args.bulk.size, 1).await?;
        let seen = observer
            .deployments(&keys, timeout, || controller.check_running())
            .await?;
        single_latencies.push(seen[0].saturating_duration_since(sent));
    }
    let single_p50 = percentile(&single_latencies, 0.5).unwrap_or_default();
    let single_p95 = percentile(&single_latencies, 0.95).unwrap_or_default();
    eprintln!(
        "[{label}] {} single creates: p50 {:.1} ms, p95 {:.1} ms",
        args.singles,
        single_p50.as_secs_f64() * 1e3,
        single_p95.as_secs_f64() * 1e3
    );

    // b. many at once
    let names: Vec<String> = (0..args.bulk.count).map(|i| format!("ps-{i:05}")).collect();
    let mut audit = match &target.audit_log {
        Some(path) => Some(AuditTail::from_end(path.clone(), CONTROLLER_USER)?),
        None => None,
    };
    // The last single's Event or status may still be on its way: not the
    // bulk phase's.
    settle(audit.as_mut(), &mut controller, Duration::from_secs(1)).await?;
    let apiserver_cpu_before = target.apiserver_pid.map(procfs::cpu_time).transpose()?;
    let cpu_before = procfs::cpu_time(pid)?;
    let start = Instant::now();
    let sent = create_podsets_timed(
        &client,
        BULK_NAMESPACE,
        &names,
        args.bulk.size,
        args.bulk.creators,
    )
    .await?;
    let keys: Vec<String> = names.iter().map(|n| key(BULK_NAMESPACE, n)).collect();
    let deployments_seen = observer
        .deployments(&keys, timeout, || controller.check_running())
        .await?;
    let all_deployments = latest(&deployments_seen).saturating_duration_since(start);
    let lags: Vec<Duration> = deployments_seen
        .iter()
        .zip(&sent)
        .map(|(seen, sent)| seen.saturating_duration_since(*sent))
        .collect();
    eprintln!(
        "[{label}] {} PodSets: all Deployments after {:.2} s",
        args.bulk.count,
        all_deployments.as_secs_f64()
    );
    let filled = observer
        .pod_names_filled(&keys, timeout, || controller.check_running())
        .await?;
    let filled_at = latest(&filled);
    let all_pod_names = filled_at.saturating_duration_since(start);
    // The window users see: CPU up to that moment, and in the seconds that
    // follow it (kube-controller-manager still updates the Deployments'
    // status then), sampled on its own clock while the settling goes on.
    let cpu_to_pod_names = procfs::cpu_time(pid)?.saturating_sub(cpu_before);
    let window_end = tokio::time::Instant::now() + Duration::from_secs(args.after_secs);
    let cpu_window = tokio::spawn(async move {
        tokio::time::sleep_until(window_end).await;
        procfs::cpu_time(pid)
    });
    eprintln!(
        "[{label}] {} PodSets: all status.podNames after {:.2} s; waiting for the controller to settle",
        args.bulk.count,
        all_pod_names.as_secs_f64()
    );
    let writes = settle(audit.as_mut(), &mut controller, Duration::from_secs(3)).await?;
    let controller_cpu = procfs::cpu_time(pid)?.saturating_sub(cpu_before);
    let apiserver_cpu = match (target.apiserver_pid, apiserver_cpu_before) {
        (Some(api), Some(before)) => Some(procfs::cpu_time(api)?.saturating_sub(before)),
        _ => None,
    };
    let rss_after = procfs::rss_bytes(pid)?;
    // What the controller spends once there is nothing left to do.
    let cpu_settled = procfs::cpu_time(pid)?;
    tokio::time::sleep(Duration::from_secs(args.after_secs)).await;
    let cpu_after = procfs::cpu_time(pid)?.saturating_sub(cpu_settled);
    let cpu_after_pod_names = cpu_window
        .await??
        .saturating_sub(cpu_before + cpu_to_pod_names);
    controller.check_running()?;
    let result = SideRun {
        single_p50,
        single_p95,
        all_deployments,
        lag_p50: percentile(&lags, 0.5).unwrap_or_default(),
        lag_p95: percentile(&lags, 0.95).unwrap_or_default(),
        lag_p99: percentile(&lags, 0.99).unwrap_or_default(),
        all_pod_names,
        controller_cpu,
        cpu_to_pod_names,
        cpu_after_pod_names,
        apiserver_cpu,
        writes,
        rss_after,
        idle_rss,
        cpu_after: Some(cpu_after),
    };
    eprintln!("[{label}] {result:?}");
    Ok(result)
}

/// Waits until the controller has written nothing for `quiet` (at most
/// 60 s), and returns its writes since the tail's last read. Without an audit
/// log it waits `quiet`.
async fn settle(
    audit: Option<&mut AuditTail>,
    controller: &mut ControllerProcess,
    quiet: Duration,
) -> anyhow::Result<Option<Writes>> {
    let Some(audit) = audit else {
        tokio::time::sleep(quiet).await;
        return Ok(None);
    };
    let mut total = audit.read()?;
    let started = Instant::now();
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < quiet {
        if started.elapsed() > Duration::from_secs(60) {
            eprintln!("bench-cluster: the controller still writes after 60 s; counting up to now");
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        controller.check_running()?;
        let new = audit.read()?;
        if new.total() > 0 {
            quiet_since = Instant::now();
        }
        total.add(&new);
    }
    Ok(Some(total))
}

/// /proc/loadavg's first three fields: other work on the machine disturbs
/// the wall times most.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}

pub(crate) fn latest(times: &[Instant]) -> Instant {
    times.iter().copied().max().unwrap_or_else(Instant::now)
}

pub(crate) async fn install_crd(client: &Client) -> anyhow::Result<()> {
    let crd: CustomResourceDefinition =
        serde_yaml_ng::from_str(CRD_YAML).context("parsing crds/podset.yaml")?;
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    api.patch(
        "podsets.example.com",
        &PatchParams::apply("bench-cluster").force(),
        &Patch::Apply(&crd),
    )
    .await
    .context("installing the PodSet CRD")?;
    let established = kube::runtime::wait::await_condition(
        api,
        "podsets.example.com",
        kube::runtime::conditions::is_crd_established(),
    );
    tokio::time::timeout(Duration::from_secs(60), established)
        .await
        .context("the PodSet CRD was not established within 60 s")??;
    Ok(())
}

pub(crate) async fn create_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name }
    }))?;
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating namespace {name}")),
    }
}

/// Creates PodSets `names` in `namespace` with `creators` at once; returns
/// their keys.
pub(crate) async fn create_podsets(
    client: &Client,
    namespace: &str,
    names: &[String],
    size: i32,
    creators: usize,
) -> anyhow::Result<Vec<String>> {
    create_podsets_timed(client, namespace, names, size, creators).await?;
    Ok(names.iter().map(|n| key(namespace, n)).collect())
}

/// Creates PodSets `names` in `namespace`, `creators` of them at once, each
/// creator its share in turn; returns when each create was sent, in the
/// order of `names`.
pub(crate) async fn create_podsets_timed(
    client: &Client,
    namespace: &str,
    names: &[String],
    size: i32,
    creators: usize,
) -> anyhow::Result<Vec<Instant>> {
    let api = Api::<PodSet>::namespaced(client.clone(), namespace);
    let names = Arc::new(names.to_vec());
    let mut tasks = Vec::new();
    for creator in 0..creators.min(names.len()) {
        let (api, names) = (api.clone(), names.clone());
        tasks.push(tokio::spawn(async move {
            let mut sent = Vec::new();
            for i in (creator..names.len()).step_by(creators) {
                let at = Instant::now();
                api.create(&PostParams::default(), &PodSet::new(&names[i], size))
                    .await
                    .with_context(|| format!("creating PodSet {}", names[i]))?;
                sent.push((i, at));
            }
            anyhow::Ok(sent)
        }));
    }
    let mut sent = vec![None; names.len()];
    for task in tasks {
        for (i, at) in task.await?? {
            sent[i] = Some(at);
        }
    }
    Ok(sent
        .into_iter()
        .map(|at| at.unwrap_or_else(Instant::now))
        .collect())
}

/// On a cluster not the bench's own: removes the bench's namespaces, so the
/// next side starts from nothing, and waits until they are gone.
async fn clean_up(target: &Target) -> anyhow::Result<()> {
    let client = client_for(&target.admin_kubeconfig).await?;
    let api = Api::<Namespace>::all(client);
    for namespace in [PROBE_NAMESPACE, SINGLES_NAMESPACE, BULK_NAMESPACE] {
        match api.delete(namespace, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e).with_context(|| format!("deleting namespace {namespace}")),
        }
    }
    eprintln!("bench-cluster: waiting for the bench's namespaces to be deleted");
    let deadline = Instant::now() + Duration::from_secs(600);
    for namespace in [PROBE_NAMESPACE, SINGLES_NAMESPACE, BULK_NAMESPACE] {
        while api.get_opt(namespace).await?.is_some() {
            if Instant::now() > deadline {
                bail!("namespace {namespace} still exists after 10 minutes; delete it by hand");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    Ok(())
}
