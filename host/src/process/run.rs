//! `run`: plugins as controllers of a real Kubernetes cluster.
//!
//! The same engine and hot reload as `dev`, over the Kubernetes backend.
//! What `run` adds is what a long-lived process in a cluster needs: plugins
//! whose kinds are not served yet wait and are retried while the others
//! run, and SIGTERM stops it cleanly: no new reconciles, the ones in flight
//! finish within a bound, and nothing is applied half (each reconcile
//! applies its steps in an order that is safe to stop between, and the next
//! start reconciles every object again from a fresh list).
//!
//! With leader election (`--leader-election`), replicas take turns: each
//! waits for the Lease before it installs CRDs, watches or reconciles
//! anything; the leader stops dispatching and exits with an error the
//! moment it loses the Lease (so a restart makes it a standby), and gives
//! the Lease up after draining on SIGTERM so a standby takes over at once.
//!
//! With sharding (`--sharding`), every replica reconciles a share: each
//! joins the ring with a Lease of its own, its engines dispatch only the
//! keys it owns (`sharding/`), and once-only duties (CRDs, webhook
//! configurations, Plugin status) go to one replica by a Lease of their
//! own (`duties.rs`). A replica whose renewals lapse exits, as a leader
//! that lost its Lease does; one stopped by SIGTERM drains, then leaves the
//! ring so the others take its keys at once.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::mpsc;

use crate::admission::plugin_set::AdmissionPlugins;
use crate::admission::shard_labels::ShardLabels;
use crate::cluster::kubernetes::KubernetesBackend;
use crate::engine::ServeScope;
use crate::fleet::{ClustersConfig, Fleet};
use crate::golden::recorder::{CaseRecorder, RecordOptions};
use crate::plugin::Sandbox;
use crate::plugin::background_reload::BackgroundReload;
use crate::plugin::hot_reload::{PluginDirectory, ReloadEvent};
use crate::plugin::standby::Standby;
use crate::process::crd_install::install_crds;
use crate::process::http_server::{HostStatus, serve};
use crate::process::leader_election::{LeaderElectionConfig, Leadership, LeadershipLost, acquire};
use crate::process::metrics_server::{MetricsServing, serve_metrics};
use crate::sharding::coordinator::{Coordinator, OnShards, ShardBy};
use crate::support::dir_watch::watch_dir;
use crate::support::duty_holder::DutyHolder;

/// Options of one `run`.
pub struct RunConfig {
    pub plugins_dir: PathBuf,
    /// Plugins pulled from registries: --plugin and Plugin resources.
    pub pulled: PulledConfig,
    pub scope: ServeScope,
    /// CRDs to apply and wait for before any plugin starts.
    pub install_crds: Option<PathBuf>,
    /// How long in-flight reconciles may take to finish on shutdown.
    pub shutdown_timeout: Duration,
    /// How often plugins whose kinds cannot be watched are tried again.
    pub retry_every: Duration,
    /// Where to serve /healthz and /readyz; `None`: nowhere.
    pub http_listen: Option<SocketAddr>,
    /// Where and to whom to serve /metrics and /plugins; `None`: nowhere.
    pub metrics: Option<MetricsServing>,
    /// Reconcile only while holding this Lease. `None` (the default of
    /// `run`) starts at once: one process on a laptop has nobody to share with.
    pub leader_election: Option<LeaderElectionConfig>,
    /// Write every reconcile as a golden case under this directory.
    pub record: Option<RecordOptions>,
    /// How long a change of a child or read object waits for others before
    /// its primary is reconciled ([`Engine::with_coalescing`]).
    pub coalesce: Duration,
    /// Serve admission webhooks for the plugins that declare admission, on
    /// every replica; `None`: no admission.
    pub admission: Option<crate::admission::service::AdmissionConfig>,
    /// The member clusters the plugins run on.
    pub clusters: ClustersConfig,
    /// Share the reconciles with the other replicas; `None`: this process
    /// reconciles everything it serves (alone, or as the leader).
    pub sharding: Option<ShardingConfig>,
}

/// How `run --sharding` shares the work.
pub struct ShardingConfig {
    pub membership: crate::sharding::membership::MembershipConfig,
    pub by: ShardBy,
    /// `--sharding-pod-labels`: Pods carry their primary's bucket too.
    pub pods_follow: bool,
    /// The Lease of the once-only duties.
    pub duties: LeaderElectionConfig,
}

/// Where `run` pulls plugins from, and how.
pub struct PulledConfig {
    pub options: crate::registry::RegistryOptions,
    pub cache: crate::registry::ArtifactCache,
    /// Keeps a process-owned cache directory alive, when there is one.
    pub keep_cache: Option<tempfile::TempDir>,
    /// `--plugin` references, followed like Plugins without status.
    pub references: Vec<crate::registry::PluginReference>,
    /// `--verify-key`: what `--plugin` references must be signed by.
    pub verify_keys: crate::registry::TrustPolicy,
    pub trust_root: Option<crate::registry::signatures::TrustRootFiles>,
    /// `--require-signatures`: what every pulled plugin must be signed by.
    pub required: Option<crate::registry::trust::HostPolicy>,
    /// `--registry-allow`: the only registries sources may name.
    pub allowed_registries: Option<Vec<String>>,
    /// The host's namespace, where Plugins' keys and pull secrets are read.
    pub namespace: String,
    /// Watch Plugin resources.
    pub watch_resources: bool,
    /// Only the Plugins with these labels.
    pub selector: Option<String>,
}

impl PulledConfig {
    /// Nothing pulled: no references, no Plugin resources watched.
    pub fn none() -> Self {
        Self {
            options: crate::registry::RegistryOptions::default(),
            cache: crate::registry::ArtifactCache::new(
                std::env::temp_dir().join("reconciler-host-registry-unused"),
            ),
            keep_cache: None,
            references: Vec::new(),
            verify_keys: crate::registry::TrustPolicy::default(),
            trust_root: None,
            required: None,
            allowed_registries: None,
            namespace: "default".into(),
            watch_resources: false,
            selector: None,
        }
    }
}

/// Why the loop of [`run`] stopped.
enum Stop {
    Signal(&'static str),
    Lost(LeadershipLost),
    /// This replica's ring renewals lapsed.
    OutOfRing,
}

/// How long readiness waits for the local member's plugins to start.
const LOCAL_START: Duration = Duration::from_secs(120);

/// How long `--install-crds` waits for the CRDs to be established.
const CRD_WAIT: Duration = Duration::from_secs(60);

/// Runs until `shutdown` resolves (the command passes [`shutdown_signal`]:
/// SIGTERM or SIGINT); it resolves with what asked to stop.
pub async fn run(
    sandbox: Arc<Sandbox>,
    client: kube::Client,
    mut config: RunConfig,
    shutdown: impl Future<Output = &'static str>,
) -> anyhow::Result<()> {
    let status = Arc::new(HostStatus::new());
    if let Some(addr) = config.http_listen {
        serve(addr, status.clone()).await?;
    }
    if let Some(metrics) = config.metrics.take() {
        serve_metrics(metrics, status.clone(), client.clone()).await?;
    }
    // One plugin set for the engine and admission: the directory loads
    // each version once and publishes what serves to admission.
    let admission_plugins = Arc::new(match &config.sharding {
        None => AdmissionPlugins::new(),
        // New primaries of this cluster get their bucket at creation, when
        // admission is served (the fleet's members have no webhook).
        Some(sharding) => {
            let by = sharding.by;
            AdmissionPlugins::with_shard_labels(ShardLabels::new(
                Arc::new(move |key| by.label_value(crate::fleet::sources::LOCAL, key)),
                sharding.pods_follow,
            ))
        }
    });
    let served = Arc::new(
        crate::registry::served_files::ServedFiles::new(config.pulled.cache.dir())
            .context("creating the directory pulled plugins are served from")?,
    );
    let plugins = PluginDirectory::new(&config.plugins_dir, sandbox.clone())
        .also_serving(served.dir())
        .publishing_to(admission_plugins.clone());
    let (plugins_tx, plugins_rx) = mpsc::unbounded_channel();
    let rescan = plugins_tx.clone();
    let _plugins_watch = watch_dir(&config.plugins_dir, plugins_tx);
    // Every replica serves admission, leader or not: before the election,
    // the directory serves into a standby (no engine yet), followed as it
    // changes, and is handed to the engine once this replica leads.
    // CRDs, webhook configurations and Plugin status: one replica does
    // them when several shard the work, the one process otherwise.
    let backend = Arc::new(KubernetesBackend::new(client.clone()));
    let (duties, duties_task) = match &config.sharding {
        None => (DutyHolder::always(), None),
        Some(sharding) => {
            let (backend, dir) = (backend.clone(), config.install_crds.clone());
            let (holder, task) = crate::process::duties::contend(
                client.clone(),
                sharding.duties.clone(),
                move || {
                    let (backend, dir) = (backend.clone(), dir.clone());
                    async move {
                        if let Some(dir) = dir {
                            match install_crds(&*backend, &dir, CRD_WAIT).await {
                                Ok(names) => tracing::info!(
                                    "installed {} CRD(s) from {}",
                                    names.len(),
                                    dir.display()
                                ),
                                Err(e) => tracing::warn!(
                                    "cannot install the CRDs of {}: {e:#} (plugins whose kinds are missing wait and are retried)",
                                    dir.display()
                                ),
                            }
                        }
                    }
                },
            );
            (holder, Some(task))
        }
    };
    let standby = match config.admission.take() {
        None => Err((plugins, plugins_rx)),
        Some(admission) => {
            let mut plugins = plugins;
            let host = Arc::new(Standby::new());
            plugins.sync(&host).await;
            crate::admission::service::start(
                sandbox.clone(),
                client.clone(),
                admission_plugins.clone(),
                admission,
                duties.clone(),
            )
            .await
            .context("admission")?;
            Ok(BackgroundReload::start(plugins, host, plugins_rx, None))
        }
    };
    tokio::pin!(shutdown);
    // Before anything writes to the cluster (CRDs included) or fills a cache.
    let mut leadership = match config.leader_election.take() {
        None => None,
        Some(election) => {
            // A standby is ready: it has nothing to fill, and a standby that
            // never turned ready would stall every rolling update.
            status.set_ready();
            tokio::select! {
                acquired = acquire(client.clone(), election) => {
                    Some(acquired.context("leader election")?)
                }
                signal = &mut shutdown => {
                    tracing::info!("{signal}: stopping while waiting for leadership");
                    return Ok(());
                }
            }
        }
    };
    // Plugins from registries: Plugin resources and --plugin references,
    // each followed by a task of its own that serves through `served`.
    let _pulled = start_pulled(
        &config,
        &status,
        served.clone(),
        rescan,
        client.clone(),
        &sandbox,
        duties.clone(),
    );
    // Sharding: the ring is joined before any engine exists, so nothing
    // is dispatched that another replica may own.
    let coordinator = match config.sharding.take() {
        None => None,
        Some(sharding) => Some(
            Coordinator::join(
                client.clone(),
                sharding.membership,
                sharding.by,
                sharding.pods_follow,
            )
            .await
            .context("joining the shard ring")?,
        ),
    };
    if let Some(dir) = config
        .install_crds
        .as_ref()
        .filter(|_| coordinator.is_none())
    {
        status.not_ready("installing CRDs");
        match install_crds(&*backend, dir, CRD_WAIT).await {
            Ok(names) => {
                tracing::info!("installed {} CRD(s) from {}", names.len(), dir.display())
            }
            Err(e) => {
                release(leadership).await;
                return Err(e);
            }
        }
    }
    let selectors = config.scope.selectors.clone();
    let recorder = match &config.record {
        None => None,
        Some(record) => match CaseRecorder::new(record, "run") {
            Ok(recorder) => Some(Arc::new(recorder)),
            Err(e) => {
                release(leadership).await;
                anyhow::bail!("cannot record into {}: {e}", record.dir.display());
            }
        },
    };
    let metrics_status = status.clone();
    let settings = crate::fleet::Settings {
        scope: config.scope.clone(),
        coalesce: config.coalesce,
        instances: sandbox.reconcile_instances(),
        max_backoff: config.retry_every.max(Duration::from_secs(1)),
        on_finished: Some(Arc::new(move |cluster, record, took| {
            metrics_status.metrics.reconciled_in(cluster, record, took)
        })),
        gate: match (&leadership, &coordinator) {
            (Some(l), _) => {
                let gate = l.gate();
                Some(Arc::new(move || gate.holds()) as Arc<dyn Fn() -> bool + Send + Sync>)
            }
            (None, Some(c)) => {
                let c = c.clone();
                Some(Arc::new(move || c.is_live()) as Arc<dyn Fn() -> bool + Send + Sync>)
            }
            (None, None) => None,
        },
        ownership: coordinator.as_ref().map(|c| c.ownership()),
        recorder,
        cache_max_objects: config.clusters.cache_max_objects,
        ..crate::fleet::Settings::default()
    };
    let fleet = Arc::new(Fleet::new(config.clusters.selection.clone(), settings));
    let sampler_fleet = fleet.clone();
    status.set_sampler(move || sampler_fleet.queue_and_cache());
    let clusters_fleet = fleet.clone();
    status.set_clusters(move || clusters_fleet.statuses());
    let _follow_ring = coordinator.as_ref().map(|c| {
        let shards = c.clone();
        status.set_shards(move || shards.status());
        let metrics_status = status.clone();
        let hook: OnShards = Arc::new(move |s| metrics_status.metrics.shards(s));
        AbortOnDrop(tokio::spawn(c.clone().follow(fleet.clone(), Some(hook))))
    });
    let (mut plugins, plugins_rx) = match standby {
        Err(unstarted) => unstarted,
        Ok(reloads) => reloads
            .stop()
            .await
            .context("the plugins directory's reloads ended before the engine started")?,
    };
    status.not_ready("loading plugins and filling their caches");
    let mut events = plugins.attach(&*fleet).await;
    events.extend(plugins.sync(&*fleet).await);
    publish(&status, &plugins, &events);
    let _sources = crate::fleet::sources::follow(
        fleet.clone(),
        client,
        crate::fleet::sources::SourceOptions {
            local: config.clusters.local,
            namespace: config.clusters.secrets_namespace.clone(),
            secrets: config.clusters.secrets,
            cluster_api: config.clusters.cluster_api,
            secrets_allow: config.clusters.secrets_allow.clone(),
            clusters_dir: config.clusters.clusters_dir.clone(),
            request_timeout: config.clusters.request_timeout,
            member_rate: config.clusters.member_rate,
            drain: config.shutdown_timeout,
        },
    );
    // The cluster the host runs in serves from filled caches before the
    // host says it is ready (a plugin's first list completes before it is
    // added); plugins waiting for their kinds, and other members, do not
    // hold readiness back, or one missing CRD or one unreachable member
    // would keep the whole host out of service.
    if config.clusters.local {
        fleet
            .wait_aligned(crate::fleet::sources::LOCAL, LOCAL_START)
            .await;
    }
    status.set_ready();
    for name in selectors.named_plugins() {
        if !fleet.plugins().iter().any(|p| p.name() == name) {
            tracing::warn!(
                "--selector names plugin {name}, which is not loaded (yet): check the name with `reconciler-host inspect`"
            );
        }
    }
    // --plugin references are being pulled beside the start: not a reason to warn.
    if fleet.plugins().is_empty() && !plugins.waiting() && config.pulled.references.is_empty() {
        tracing::warn!(
            "no plugin is serving: drop a compiled plugin (*.wasm) into {}{}",
            config.plugins_dir.display(),
            if config.pulled.watch_resources {
                ", or kubectl apply a Plugin (crds/plugin.yaml)"
            } else {
                ""
            }
        );
    }

    // Later plugin files load, and waiting ones are retried, beside the
    // members, which keep serving.
    let mut reloads =
        BackgroundReload::start(plugins, fleet.clone(), plugins_rx, Some(config.retry_every));

    let stop = loop {
        if let Some(Err(lost)) = leadership.as_ref().map(Leadership::check) {
            break Stop::Lost(lost);
        }
        tokio::select! {
            update = reloads.next() => {
                status.metrics.reloaded(&update.events);
                status.set_plugins(update.status);
            }
            signal = &mut shutdown => break Stop::Signal(signal),
            lost = leadership_lost(&mut leadership) => break Stop::Lost(lost),
            () = out_of_ring(coordinator.as_deref()) => break Stop::OutOfRing,
        }
    };
    status.not_ready("stopping");
    let signal = match stop {
        Stop::Signal(signal) => signal,
        Stop::Lost(lost) => {
            // The members' gates already start nothing more.
            let in_flight = fleet.in_flight();
            fleet.stop_all(Duration::ZERO).await;
            return Err(lost_leadership(lost, in_flight));
        }
        Stop::OutOfRing => {
            let in_flight = fleet.in_flight();
            fleet.stop_all(Duration::ZERO).await;
            anyhow::bail!(
                "this replica's Lease in the shard ring was not renewed within the renew deadline: stopped reconciling ({in_flight} in flight abandoned) before another replica may take its keys; exiting to restart and join again"
            );
        }
    };
    tracing::info!(
        "{signal}: stopping; no new reconciles, waiting up to {}s for {} in flight",
        config.shutdown_timeout.as_secs(),
        fleet.in_flight()
    );
    let drained = tokio::select! {
        () = fleet.stop_all(config.shutdown_timeout) => true,
        // The reconciles in flight must not outlive the Lease either.
        lost = leadership_lost(&mut leadership) => {
            return Err(lost_leadership(lost, fleet.in_flight()));
        }
    };
    if drained {
        tracing::info!("stopped cleanly");
    }
    // Nothing reconciles here any more: the others may take the keys now.
    if let Some(coordinator) = &coordinator {
        coordinator.leave().await;
    }
    if let Some(duties) = duties_task {
        duties.release().await;
    }
    release(leadership).await;
    Ok(())
}

/// Starts following --plugin references and (unless told not to) Plugin
/// resources; dropping the handle stops them.
fn start_pulled(
    config: &RunConfig,
    status: &Arc<HostStatus>,
    served: Arc<crate::registry::served_files::ServedFiles>,
    rescan: mpsc::UnboundedSender<()>,
    client: kube::Client,
    sandbox: &Arc<Sandbox>,
    writes_status: DutyHolder,
) -> Option<AbortOnDrop> {
    let pulled = &config.pulled;
    if pulled.references.is_empty() && !pulled.watch_resources {
        return None;
    }
    let feed = status.plugins_feed();
    let load_timeout = Duration::from_secs(u64::from(sandbox.limits().load_timeout_secs) + 10);
    let shared = Arc::new(crate::plugin_resources::Shared::on(
        client.clone(),
        |api, recorder| crate::plugin_resources::Shared {
            client,
            api,
            options: pulled.options.clone(),
            cache: pulled.cache.clone(),
            served,
            reload: rescan,
            feed,
            namespace: pulled.namespace.clone(),
            trust_root: pulled.trust_root.clone(),
            required: pulled.required.clone(),
            allowed_registries: pulled.allowed_registries.clone(),
            recorder,
            load_timeout,
            writes_status,
        },
    ));
    let references = pulled.references.clone();
    let verify = pulled.verify_keys.clone();
    let watch = pulled.watch_resources.then(|| pulled.selector.clone());
    Some(AbortOnDrop(tokio::spawn(async move {
        crate::plugin_resources::follow(shared, references, verify, watch).await
    })))
}

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Resolves when this replica's ring renewals lapsed; never without sharding.
async fn out_of_ring(coordinator: Option<&Coordinator>) {
    match coordinator {
        Some(coordinator) => coordinator.lost().await,
        None => std::future::pending().await,
    }
}

/// Resolves when leadership is lost; never without leader election.
async fn leadership_lost(leadership: &mut Option<Leadership>) -> LeadershipLost {
    match leadership {
        Some(leadership) => leadership.lost().await,
        None => std::future::pending().await,
    }
}

/// The error `run` exits with when it lost the Lease: exiting (non-zero)
/// is what ends the reconciles in flight, and a restart comes back as a
/// standby.
fn lost_leadership(lost: LeadershipLost, in_flight: usize) -> anyhow::Error {
    anyhow::Error::new(lost).context(format!(
        "lost leadership: stopped reconciling ({in_flight} in flight abandoned); exiting to restart as a standby"
    ))
}

/// Gives the Lease up, if held, so a standby need not wait for it to expire.
async fn release(leadership: Option<Leadership>) {
    if let Some(leadership) = leadership
        && let Err(e) = leadership.release().await
    {
        tracing::warn!("{:#}", anyhow::Error::new(e));
    }
}

/// Makes what a rescan did visible at /plugins and /metrics.
fn publish(status: &HostStatus, plugins: &PluginDirectory, events: &[ReloadEvent]) {
    status.metrics.reloaded(events);
    status.set_plugins(plugins.status());
}

/// Resolves with the name of the first of SIGTERM or SIGINT to arrive.
///
/// The handlers are installed when this is called, not when the future is
/// first polled: `run` polls it only once it serves, and a SIGTERM that
/// arrived while plugins were still loading must stop the host cleanly,
/// not kill it (the default action). Must be called within the runtime.
pub fn shutdown_signal() -> impl Future<Output = &'static str> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        async move {
            match (term, int) {
                (Ok(mut term), Ok(mut int)) => tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                },
                (term, int) => {
                    let e = term.err().or(int.err()).map(|e| e.to_string());
                    tracing::warn!(
                        "cannot listen for SIGTERM and SIGINT ({}); stop with Ctrl-C",
                        e.unwrap_or_default()
                    );
                    let _ = tokio::signal::ctrl_c().await;
                    "SIGINT"
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::oneshot;
    use tokio::task::JoinHandle;
    use tokio::time::timeout;

    use super::{RunConfig, run};
    use crate::engine::ServeScope;
    use crate::plugin::{Sandbox, SandboxConfig};
    use crate::process::leader_election::LeaderElectionConfig;
    use crate::process::leader_election::testing::{LeaseServer, NAME, NAMESPACE, held_by};

    const ME: &str = "pod-a_00000000000a";

    fn election() -> LeaderElectionConfig {
        LeaderElectionConfig {
            identity: ME.to_string(),
            ..LeaderElectionConfig::new(NAMESPACE, NAME)
        }
    }

    /// `run --leader-election` over an empty plugins directory: what it
    /// does with the Lease is all it does.
    fn start(
        lease: Option<serde_json::Value>,
    ) -> (
        JoinHandle<anyhow::Result<()>>,
        LeaseServer,
        oneshot::Sender<()>,
        tempfile::TempDir,
    ) {
        let plugins = tempfile::tempdir().unwrap();
        let sandbox = Sandbox::new(SandboxConfig {
            compile_cache: None,
            max_instances: 1,
            ..SandboxConfig::default()
        })
        .unwrap();
        let (client, server) = LeaseServer::start(lease);
        let config = RunConfig {
            pulled: super::PulledConfig::none(),
            plugins_dir: plugins.path().to_path_buf(),
            scope: ServeScope::default(),
            install_crds: None,
            shutdown_timeout: Duration::from_secs(10),
            retry_every: Duration::from_secs(30),
            http_listen: None,
            metrics: None,
            leader_election: Some(election()),
            record: None,
            coalesce: Duration::ZERO,
            admission: None,
            clusters: crate::fleet::ClustersConfig::local_only(),
            sharding: None,
        };
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let host = tokio::spawn(run(Arc::new(sandbox), client, config, async move {
            let _ = stop_rx.await;
            "SIGTERM"
        }));
        (host, server, stop_tx, plugins)
    }

    async fn until_leading(server: &LeaseServer) {
        while server.holder().as_deref() != Some(ME) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_waits_without_touching_the_cluster_and_stops_on_a_signal() {
        let (mut host, server, stop, _plugins) = start(Some(held_by("pod-b_1", Duration::ZERO)));

        assert!(timeout(Duration::from_secs(60), &mut host).await.is_err());
        assert!(server.writes().is_empty(), "{:#?}", server.writes());
        assert!(server.others().is_empty(), "{:?}", server.others());

        stop.send(()).unwrap();
        host.await.unwrap().expect("a clean stop");
        assert_eq!(server.holder().as_deref(), Some("pod-b_1"));
    }

    #[tokio::test(start_paused = true)]
    async fn losing_the_lease_ends_run_with_an_error() {
        let (host, server, _stop, _plugins) = start(None);
        until_leading(&server).await;

        server.set_lease(Some(held_by("pod-b_1", Duration::ZERO)));
        let result = timeout(election().renew_deadline, host)
            .await
            .expect("stopped before the renew deadline")
            .unwrap();

        let message = format!("{:#}", result.expect_err("an error, to exit non-zero"));
        assert!(
            message.contains("lost leadership") && message.contains("held by pod-b_1"),
            "{message}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_signal_releases_the_lease_after_draining() {
        let (host, server, stop, _plugins) = start(None);
        until_leading(&server).await;

        stop.send(()).unwrap();
        host.await.unwrap().expect("a clean stop");
        assert_eq!(server.holder(), None, "{:#?}", server.lease());
    }
}
