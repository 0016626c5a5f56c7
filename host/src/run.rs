//! `run`: plugins as controllers of a real Kubernetes cluster.
//!
//! The same engine and hot reload as `dev`, over the Kubernetes backend.
//! What `run` adds is what a long-lived process in a cluster needs: plugins
//! whose kinds are not served yet wait and are retried while the others
//! run, and SIGTERM stops it cleanly: no new reconciles, the ones in flight
//! finish within a bound, and nothing is applied half (each reconcile
//! applies its steps in an order that is safe to stop between, and the next
//! start reconciles every object again from a fresh list).

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::mpsc;

use crate::cluster::RealClock;
use crate::cluster::kubernetes::KubernetesBackend;
use crate::crd_install::install_crds;
use crate::dir_watch::watch_dir;
use crate::dispatch::Dispatcher;
use crate::engine::{Engine, Outcome, ReconcileRecord, ServeScope};
use crate::hot_reload::{PluginDirectory, ReloadEvent};
use crate::http_server::{HostStatus, serve};
use crate::plugin::Sandbox;

/// Options of one `run`.
pub struct RunConfig {
    pub plugins_dir: PathBuf,
    pub scope: ServeScope,
    /// CRDs to apply and wait for before any plugin starts.
    pub install_crds: Option<PathBuf>,
    /// How long in-flight reconciles may take to finish on shutdown.
    pub shutdown_timeout: Duration,
    /// How often plugins whose kinds cannot be watched are tried again.
    pub retry_every: Duration,
    /// Where to serve /healthz, /readyz, /plugins and /metrics; `None`: nowhere.
    pub http_listen: Option<SocketAddr>,
}

/// How long `--install-crds` waits for the CRDs to be established.
const CRD_WAIT: Duration = Duration::from_secs(60);

/// Runs until `shutdown` resolves (the command passes [`shutdown_signal`]:
/// SIGTERM or SIGINT); it resolves with what asked to stop.
pub async fn run(
    sandbox: Arc<Sandbox>,
    client: kube::Client,
    config: RunConfig,
    shutdown: impl Future<Output = &'static str>,
) -> anyhow::Result<()> {
    let status = Arc::new(HostStatus::new());
    if let Some(addr) = config.http_listen {
        serve(addr, status.clone()).await?;
    }
    let backend = Arc::new(KubernetesBackend::new(client));
    if let Some(dir) = &config.install_crds {
        status.not_ready("installing CRDs");
        let names = install_crds(&*backend, dir, CRD_WAIT).await?;
        tracing::info!("installed {} CRD(s) from {}", names.len(), dir.display());
    }
    let selectors = config.scope.selectors.clone();
    let engine = Arc::new(Engine::scoped(backend, Arc::new(RealClock), config.scope));
    let sampler_engine = engine.clone();
    status.set_sampler(move || {
        (
            sampler_engine.queue_stats(),
            sampler_engine.cache().counts_by_kind(),
        )
    });
    let mut plugins = PluginDirectory::new(&config.plugins_dir, sandbox);
    status.not_ready("loading plugins and filling their caches");
    let events = plugins.sync(&engine).await;
    publish(&status, &plugins, &events);
    // Every plugin present at start serves from filled caches (a plugin's
    // first list completes before it is added); ones waiting for their
    // kinds do not hold readiness back, or one missing CRD would keep the
    // whole host out of service.
    status.set_ready();
    for name in selectors.named_plugins() {
        if !engine.plugins().iter().any(|p| p.name() == name) {
            tracing::warn!(
                "--selector names plugin {name}, which is not loaded (yet): check the name with `reconciler-host inspect`"
            );
        }
    }
    if engine.plugins().is_empty() && !plugins.waiting() {
        tracing::warn!(
            "no plugin is serving: drop a compiled plugin (*.wasm) into {}",
            config.plugins_dir.display()
        );
    }

    let (plugins_tx, mut plugins_rx) = mpsc::unbounded_channel();
    let _plugins_watch = watch_dir(&config.plugins_dir, plugins_tx);
    let mut retry = tokio::time::interval(config.retry_every);
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    retry.reset();
    let metrics_status = status.clone();
    let mut dispatcher = Dispatcher::new(engine.clone()).on_finished(Arc::new(
        move |record: &ReconcileRecord, took: Duration| {
            metrics_status.metrics.reconciled(record, took)
        },
    ));
    tokio::pin!(shutdown);

    let signal = loop {
        while let Some(record) = dispatcher.try_finished() {
            log_record(&record);
        }
        dispatcher.dispatch();
        let wait = dispatcher.idle_wait();
        tokio::select! {
            record = dispatcher.finished() => log_record(&record),
            Some(()) = plugins_rx.recv() => {
                while plugins_rx.try_recv().is_ok() {}
                let events = plugins.sync(&engine).await;
                publish(&status, &plugins, &events);
            }
            _ = retry.tick(), if plugins.waiting() => {
                let events = plugins.retry_waiting(&engine).await;
                publish(&status, &plugins, &events);
            }
            _ = tokio::time::sleep(wait) => {}
            signal = &mut shutdown => break signal,
        }
    };
    status.not_ready("stopping");
    tracing::info!(
        "{signal}: stopping; no new reconciles, waiting up to {}s for {} in flight",
        config.shutdown_timeout.as_secs(),
        dispatcher.outstanding()
    );
    let (records, abandoned) = dispatcher.drain(config.shutdown_timeout).await;
    for record in &records {
        log_record(record);
    }
    if abandoned > 0 {
        tracing::warn!(
            "{abandoned} reconcile(s) still running after {}s are abandoned; their objects are reconciled again from a fresh read on the next start",
            config.shutdown_timeout.as_secs()
        );
    } else {
        tracing::info!("stopped cleanly");
    }
    Ok(())
}

/// A client from kube's default configuration (KUBECONFIG or the pod's
/// service account), checked by asking the server its version.
pub async fn connect() -> anyhow::Result<kube::Client> {
    // kube's error repeats its causes; its top line says it all.
    let client = kube::Client::try_default().await.map_err(|e| {
        anyhow::anyhow!(
            "cannot configure a Kubernetes client: set KUBECONFIG (or have ~/.kube/config), or run in a pod with a service account: {e}"
        )
    })?;
    let version = client
        .apiserver_version()
        .await
        .context("cannot reach the Kubernetes API server")?;
    tracing::info!(
        "connected to Kubernetes {} ({})",
        version.git_version,
        version.platform
    );
    if !supported_version(&version.major, &version.minor) {
        tracing::warn!(
            "Kubernetes {}.{} is older than 1.28, the oldest version this host supports",
            version.major,
            version.minor
        );
    }
    Ok(client)
}

/// Whether a server's major.minor is 1.28 or newer. Minor versions may
/// carry a suffix (`28+` on some managed clusters).
fn supported_version(major: &str, minor: &str) -> bool {
    let number = |s: &str| {
        s.trim_end_matches(|c: char| !c.is_ascii_digit())
            .parse::<u32>()
            .ok()
    };
    match (number(major), number(minor)) {
        (Some(major), Some(minor)) => (major, minor) >= (1, 28),
        // An unparseable version is not a reason to warn.
        _ => true,
    }
}

/// Makes what a rescan did visible at /plugins and /metrics.
fn publish(status: &HostStatus, plugins: &PluginDirectory, events: &[ReloadEvent]) {
    status.metrics.reloaded(events);
    status.set_plugins(plugins.status());
}

fn log_record(record: &ReconcileRecord) {
    // Failures are logged by the engine, in the reconcile's span; here the
    // changes a reconcile made. Reconciles that changed nothing are quiet.
    match &record.outcome {
        Outcome::Applied { changes, .. } if !changes.is_empty() => tracing::info!("{record}"),
        Outcome::Failed { .. } => {}
        _ => tracing::debug!("{record}"),
    }
}

/// Resolves with the name of the first of SIGTERM or SIGINT to arrive.
pub async fn shutdown_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = tokio::signal::ctrl_c() => "SIGINT",
            },
            Err(e) => {
                tracing::warn!("cannot listen for SIGTERM ({e}); stop with SIGINT");
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}

#[cfg(test)]
mod tests {
    use super::supported_version;

    #[test]
    fn versions_from_1_28_on_are_supported() {
        assert!(supported_version("1", "28"));
        assert!(supported_version("1", "33+"));
        assert!(!supported_version("1", "27"));
        assert!(supported_version("", ""));
    }
}
