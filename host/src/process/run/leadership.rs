//! Leader election as `run` lives it: a standby waits for the Lease
//! before it touches the cluster, a leader that loses it stops at once
//! and exits, and one that stops cleanly gives it up so a standby need not
//! wait for it to expire.

use std::future::Future;

use anyhow::Context;

use crate::process::http_server::HostStatus;
use crate::process::leader_election::{LeaderElectionConfig, Leadership, LeadershipLost, acquire};

/// What the election came to.
pub(super) enum Elected {
    /// Go on: leading, or alone (`None`: no election asked for).
    Go(Option<Leadership>),
    /// A signal came while waiting for the Lease.
    Stopped,
}

/// Waits for the Lease, if `election` asks for one, before anything writes
/// to the cluster (CRDs included) or fills a cache.
pub(super) async fn elect(
    election: Option<LeaderElectionConfig>,
    client: &kube::Client,
    status: &HostStatus,
    shutdown: &mut (impl Future<Output = &'static str> + Unpin),
) -> anyhow::Result<Elected> {
    let Some(election) = election else {
        return Ok(Elected::Go(None));
    };
    // A standby is ready: it has nothing to fill, and a standby that
    // never turned ready would stall every rolling update.
    status.set_ready();
    tokio::select! {
        acquired = acquire(client.clone(), election) => {
            Ok(Elected::Go(Some(acquired.context("leader election")?)))
        }
        signal = shutdown => {
            tracing::info!("{signal}: stopping while waiting for leadership");
            Ok(Elected::Stopped)
        }
    }
}

/// Resolves when leadership is lost; never without leader election.
pub(super) async fn leadership_lost(leadership: &mut Option<Leadership>) -> LeadershipLost {
    match leadership {
        Some(leadership) => leadership.lost().await,
        None => std::future::pending().await,
    }
}

/// The error `run` exits with when it lost the Lease: exiting (non-zero)
/// is what ends the reconciles in flight, and a restart comes back as a
/// standby.
pub(super) fn lost_leadership(lost: LeadershipLost, in_flight: usize) -> anyhow::Error {
    anyhow::Error::new(lost).context(format!(
        "lost leadership: stopped reconciling ({in_flight} in flight abandoned); exiting to restart as a standby"
    ))
}

/// Gives the Lease up, if held, so a standby need not wait for it to expire.
pub(super) async fn release(leadership: Option<Leadership>) {
    if let Some(leadership) = leadership
        && let Err(e) = leadership.release().await
    {
        tracing::warn!("{:#}", anyhow::Error::new(e));
    }
}

/// `result`, having given the Lease up first if it is an error: a step
/// that fails before serving leaves it to a standby at once.
pub(super) async fn released_on_error<T>(
    result: anyhow::Result<T>,
    leadership: &mut Option<Leadership>,
) -> anyhow::Result<T> {
    if result.is_err() {
        release(leadership.take()).await;
    }
    result
}
