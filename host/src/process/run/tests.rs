use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::timeout;

use super::{PulledConfig, RunConfig, run};
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
        pulled: PulledConfig::none(),
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
        journal: crate::engine::journal::JournalLimits::default(),
        loops: crate::engine::loop_watch::LoopRule::default(),
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
