//! The fleet `run` reconciles with: its settings (the scope, the gate of
//! the Lease or the ring, the recorder, the metrics' hook), the member
//! clusters it follows, and the start of serving, after which the host
//! says it is ready.

use std::sync::Arc;
use std::time::Duration;

use super::config::RunConfig;
use crate::cluster::kubernetes::KubernetesBackend;
use crate::cluster::kubernetes::write_fence::{HeldUntil, WriteFence};
use crate::fleet::Fleet;
use crate::golden::recorder::CaseRecorder;
use crate::plugin::Sandbox;
use crate::plugin::hot_reload::{PluginDirectory, ReloadEvent};
use crate::process::http_server::HostStatus;
use crate::process::leader_election::Leadership;
use crate::sharding::coordinator::Coordinator;

/// How long readiness waits for the local member's plugins to start.
const LOCAL_START: Duration = Duration::from_secs(120);

/// The recorder of `--record`, if asked for.
pub(super) fn case_recorder(config: &RunConfig) -> anyhow::Result<Option<Arc<CaseRecorder>>> {
    let Some(record) = &config.record else {
        return Ok(None);
    };
    match CaseRecorder::new(record, "run") {
        Ok(recorder) => Ok(Some(Arc::new(recorder))),
        Err(e) => anyhow::bail!("cannot record into {}: {e}", record.dir.display()),
    }
}

/// Until when this process holds the Lease it reconciles under: the
/// leader's, else its place in the ring's; `None` for a host with neither.
/// What a reconcile must hold to start, and a write to leave.
pub(super) fn held_until(
    leadership: Option<&Leadership>,
    coordinator: Option<&Arc<Coordinator>>,
) -> Option<HeldUntil> {
    match (leadership, coordinator) {
        (Some(l), _) => {
            let gate = l.gate();
            Some(Arc::new(move || gate.held_until()))
        }
        (None, Some(c)) => {
            let c = c.clone();
            Some(Arc::new(move || c.held_until()))
        }
        (None, None) => None,
    }
}

/// The fleet, reconciling only while `leadership` or the ring's
/// `coordinator` allows, with its queues and members reported by `status`.
pub(super) fn build_fleet(
    config: &RunConfig,
    sandbox: &Sandbox,
    status: &Arc<HostStatus>,
    leadership: Option<&Leadership>,
    coordinator: Option<&Arc<Coordinator>>,
    recorder: Option<Arc<CaseRecorder>>,
    candidates: Arc<crate::plugin::candidates::Candidates>,
) -> Arc<Fleet<KubernetesBackend>> {
    let metrics_status = status.clone();
    let settings = crate::fleet::Settings {
        scope: config.scope.clone(),
        coalesce: config.coalesce,
        instances: sandbox.reconcile_instances(),
        max_backoff: config.retry_every.max(Duration::from_secs(1)),
        on_finished: Some(Arc::new(move |cluster, record, took| {
            metrics_status.metrics.reconciled_in(cluster, record, took)
        })),
        gate: held_until(leadership, coordinator).map(|held| {
            Arc::new(move || held().is_some_and(|until| tokio::time::Instant::now() < until))
                as Arc<dyn Fn() -> bool + Send + Sync>
        }),
        ownership: coordinator.map(|c| c.ownership()),
        recorder,
        cache_budget: config.clusters.cache_budget,
        candidates,
        shadow: status.shadow.clone(),
        journal: status.journal.clone(),
        ..crate::fleet::Settings::default()
    };
    let fleet = Arc::new(Fleet::new(config.clusters.selection.clone(), settings));
    let sampler_fleet = fleet.clone();
    status.set_sampler(move || sampler_fleet.queue_and_cache());
    let clusters_fleet = fleet.clone();
    status.set_clusters(move || clusters_fleet.statuses());
    fleet
}

/// Loads the plugins into the fleet, follows the member clusters, and
/// turns ready once the local cluster serves; the task following the
/// members.
pub(super) async fn start_serving(
    config: &RunConfig,
    status: &HostStatus,
    fleet: &Arc<Fleet<KubernetesBackend>>,
    client: kube::Client,
    plugins: &mut PluginDirectory,
    fence: &WriteFence,
) -> tokio::task::JoinHandle<()> {
    status.not_ready("loading plugins and filling their caches");
    let mut events = plugins.attach(&**fleet).await;
    events.extend(plugins.sync(&**fleet).await);
    publish(status, plugins, &events);
    let sources = crate::fleet::sources::follow(
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
            fence: fence.clone(),
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
    crate::support::startup_code::release_startup_code_soon();
    warn_if_unserved(config, fleet, plugins);
    sources
}

/// Warns of --selector names no plugin has, and of a host with nothing
/// to serve.
fn warn_if_unserved(
    config: &RunConfig,
    fleet: &Fleet<KubernetesBackend>,
    plugins: &PluginDirectory,
) {
    for name in config.scope.selectors.named_plugins() {
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
}

/// Makes what a rescan did visible at /plugins and /metrics.
fn publish(status: &HostStatus, plugins: &PluginDirectory, events: &[ReloadEvent]) {
    status.metrics.reloaded(events);
    status.set_plugins(plugins.status());
}
