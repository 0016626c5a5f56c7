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
//!
//! `run` below is the sequence of steps; each lives in the module named
//! for its job.

mod abort_on_drop;
mod config;
mod endpoints;
mod fleet;
mod leadership;
mod once_only;
mod plugin_sources;
mod ring;
mod signals;
mod stop;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::sync::Arc;

use crate::cluster::kubernetes::KubernetesBackend;
use crate::cluster::kubernetes::write_fence::WriteFence;
use crate::plugin::Sandbox;
use crate::plugin::background_reload::BackgroundReload;

pub use config::{PulledConfig, RunConfig, ShardingConfig};
pub use signals::shutdown_signal;

use endpoints::serve_endpoints;
use fleet::{build_fleet, case_recorder, held_until, start_serving};
use leadership::{Elected, elect, released_on_error};
use once_only::{install_crds_alone, once_only_duties};
use plugin_sources::{PluginSources, PulledInto, serve_admission, start_pulled};
use ring::{follow_ring, join_ring};
use stop::{Serving, serve_until_stop, shut_down};

/// Runs until `shutdown` resolves (the command passes [`shutdown_signal`]:
/// SIGTERM or SIGINT); it resolves with what asked to stop.
pub async fn run(
    sandbox: Arc<Sandbox>,
    client: kube::Client,
    mut config: RunConfig,
    shutdown: impl Future<Output = &'static str>,
) -> anyhow::Result<()> {
    let status = serve_endpoints(&mut config, &client).await?;
    let sources = PluginSources::open(&config, &sandbox)?;
    let candidates = sources.directory.candidates();
    let _plugins_watch = sources.watch;
    // CRDs, webhook configurations and Plugin status: one replica does
    // them when several shard the work, the one process otherwise.
    // Every write of the process is checked against the Lease it
    // reconciles under, once there is one (below).
    let fence = WriteFence::default();
    let backend = Arc::new(KubernetesBackend::new(client.clone()).with_fence(fence.clone()));
    let (duties, duties_task) = once_only_duties(&config, &client, &backend);
    let before_engine = serve_admission(
        &mut config,
        &sandbox,
        &client,
        sources.directory,
        sources.changes,
        &sources.admission,
        &duties,
    )
    .await?;
    tokio::pin!(shutdown);
    let election = config.leader_election.take();
    let mut leadership = match elect(election, &client, &status, &mut shutdown).await? {
        Elected::Go(leadership) => leadership,
        Elected::Stopped => return Ok(()),
    };
    // Plugins from registries: Plugin resources and --plugin references,
    // each followed by a task of its own that serves through `served`.
    let into = PulledInto {
        served: sources.served.clone(),
        rescan: sources.rescan,
        candidates: candidates.clone(),
    };
    let _pulled = start_pulled(
        &config,
        &status,
        into,
        client.clone(),
        &sandbox,
        duties.clone(),
    );
    let coordinator = join_ring(&client, config.sharding.take()).await?;
    if let Some(held) = held_until(leadership.as_ref(), coordinator.as_ref()) {
        fence.hold_to(held);
    }
    let installed = install_crds_alone(&config, &backend, &status, coordinator.is_some()).await;
    released_on_error(installed, &mut leadership).await?;
    let recorder = released_on_error(case_recorder(&config), &mut leadership).await?;
    let fleet = build_fleet(
        &config,
        &sandbox,
        &status,
        leadership.as_ref(),
        coordinator.as_ref(),
        recorder,
        candidates,
    );
    let _follow_ring = follow_ring(coordinator.as_ref(), &status, &fleet, &client, &duties);
    let (mut plugins, changes) = before_engine.into_directory().await?;
    let _sources = start_serving(&config, &status, &fleet, client, &mut plugins, &fence).await;
    // Later plugin files load, and waiting ones are retried, beside the
    // members, which keep serving.
    let mut reloads =
        BackgroundReload::start(plugins, fleet.clone(), changes, Some(config.retry_every));
    let stop = serve_until_stop(
        &status,
        &mut reloads,
        &mut shutdown,
        &mut leadership,
        coordinator.as_deref(),
    )
    .await;
    let serving = Serving {
        fleet: &fleet,
        leadership,
        coordinator: coordinator.as_deref(),
        duties: duties_task,
        shutdown_timeout: config.shutdown_timeout,
    };
    shut_down(&status, stop, serving).await
}
