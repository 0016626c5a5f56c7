//! How `run` serves until something stops it, and how it stops: cleanly on
//! a signal (no new reconciles, the ones in flight drain within a bound,
//! then the ring, the duties and the Lease are given up), at once when it
//! lost the Lease or its place in the ring (another replica may already
//! own its keys).

use std::future::Future;
use std::time::Duration;

use super::leadership::{leadership_lost, lost_leadership, release};
use super::ring::out_of_ring;
use crate::cluster::kubernetes::KubernetesBackend;
use crate::fleet::Fleet;
use crate::plugin::background_reload::BackgroundReload;
use crate::process::duties::Duties;
use crate::process::http_server::HostStatus;
use crate::process::leader_election::{Leadership, LeadershipLost};
use crate::sharding::coordinator::Coordinator;

/// Why the loop of `run` stopped.
pub(super) enum Stop {
    Signal(&'static str),
    Lost(LeadershipLost),
    /// This replica's ring renewals lapsed.
    OutOfRing,
}

/// Publishes what the plugins directory's reloads do until a signal, the
/// loss of the Lease or of the ring says to stop.
pub(super) async fn serve_until_stop(
    status: &HostStatus,
    reloads: &mut BackgroundReload,
    shutdown: &mut (impl Future<Output = &'static str> + Unpin),
    leadership: &mut Option<Leadership>,
    coordinator: Option<&Coordinator>,
) -> Stop {
    loop {
        if let Some(Err(lost)) = leadership.as_ref().map(Leadership::check) {
            break Stop::Lost(lost);
        }
        tokio::select! {
            update = reloads.next() => {
                status.metrics.reloaded(&update.events);
                status.set_plugins(update.status);
            }
            signal = &mut *shutdown => break Stop::Signal(signal),
            lost = leadership_lost(leadership) => break Stop::Lost(lost),
            () = out_of_ring(coordinator) => break Stop::OutOfRing,
        }
    }
}

/// What `run` holds while it serves, for stopping it.
pub(super) struct Serving<'a> {
    pub fleet: &'a Fleet<KubernetesBackend>,
    pub leadership: Option<Leadership>,
    pub coordinator: Option<&'a Coordinator>,
    pub duties: Option<Duties>,
    pub shutdown_timeout: Duration,
}

/// Stops as `stop` asks: on a signal, drains, then leaves the ring, gives
/// up the duties and the Lease; otherwise stops reconciling at once and
/// fails, for a restart.
pub(super) async fn shut_down(
    status: &HostStatus,
    stop: Stop,
    serving: Serving<'_>,
) -> anyhow::Result<()> {
    let Serving {
        fleet,
        leadership,
        coordinator,
        duties,
        shutdown_timeout,
    } = serving;
    status.not_ready("stopping");
    let signal = match stop {
        Stop::Signal(signal) => signal,
        Stop::Lost(lost) => {
            // The members' gates already start nothing more.
            let abandoned = fleet.stop_all(Duration::ZERO).await;
            return Err(lost_leadership(lost, abandoned));
        }
        Stop::OutOfRing => {
            let abandoned = fleet.stop_all(Duration::ZERO).await;
            return Err(out_of_ring_error(abandoned));
        }
    };
    tracing::info!(
        "{signal}: stopping; no new reconciles, waiting up to {}s for {} in flight",
        shutdown_timeout.as_secs(),
        fleet.in_flight()
    );
    // Each member's drain ends early should the Lease it reconciles under
    // lapse meanwhile; whatever still runs then is aborted and awaited.
    let abandoned = fleet.stop_all(shutdown_timeout).await;
    if let Some(Err(lost)) = leadership.as_ref().map(Leadership::check) {
        return Err(lost_leadership(lost, abandoned));
    }
    if coordinator.is_some_and(|c| !c.is_live()) {
        return Err(out_of_ring_error(abandoned));
    }
    if abandoned > 0 {
        // A request an abandoned reconcile had sent may still land. The
        // Leases are kept until they expire, so no other replica takes
        // these keys (nor the duties) before that cannot matter.
        tracing::warn!(
            "{signal}: {abandoned} reconcile(s) still ran after {}s and were abandoned: this replica's Leases are left to expire rather than given up",
            shutdown_timeout.as_secs()
        );
        return Ok(());
    }
    tracing::info!("stopped cleanly");
    // Nothing reconciles here any more: the others may take the keys now.
    if let Some(coordinator) = coordinator {
        coordinator.leave().await;
    }
    if let Some(duties) = duties {
        duties.release().await;
    }
    release(leadership).await;
    Ok(())
}

fn out_of_ring_error(abandoned: usize) -> anyhow::Error {
    anyhow::anyhow!(
        "this replica's Lease in the shard ring was not renewed within the renew deadline: stopped reconciling ({abandoned} in flight abandoned) before another replica may take its keys; exiting to restart and join again"
    )
}
