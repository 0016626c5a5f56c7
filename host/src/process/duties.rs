//! Work that must run once however many replicas serve (`run --sharding`):
//! installing CRDs and keeping the webhook configurations in step. One
//! replica at a time holds the duties, by leader election on a Lease of
//! their own; every replica keeps reconciling its share and serving
//! admission whoever holds them.
//!
//! Why not every replica: two replicas that load different plugin sets for
//! a moment (one hot-reloaded first) would each apply its own webhook
//! configurations and remove the other's, back and forth.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};

use crate::process::leader_election::{LeaderElectionConfig, acquire};
pub use crate::support::duty_holder::DutyHolder;

/// The contention for the duties: stops when dropped; [`Self::release`]
/// also lets go of the Lease, on a clean stop.
pub struct Duties {
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Duties {
    /// Stops contending and, if this replica holds the duties, deletes
    /// nothing but gives up the Lease, so another replica takes them within
    /// its retry period rather than once the Lease expires (15 s without
    /// webhook configuration syncs on every rolling update otherwise).
    pub async fn release(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(RELEASE_WAIT, &mut self.task).await;
    }
}

impl Drop for Duties {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How long a clean stop waits for the duties Lease to be given up.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// Contends for the duties Lease in the background, for as long as the
/// returned [`Duties`] lives; `on_acquired` runs each time this replica
/// gains them (CRD installs, which are idempotent).
pub fn contend<F, Fut>(
    client: kube::Client,
    election: LeaderElectionConfig,
    on_acquired: F,
) -> (DutyHolder, Duties)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let (tx, rx) = watch::channel(false);
    let (stop_tx, mut stop) = oneshot::channel::<()>();
    let on_acquired = Arc::new(on_acquired);
    let task = tokio::spawn(async move {
        loop {
            let acquired = tokio::select! {
                acquired = acquire(client.clone(), election.clone()) => acquired,
                _ = &mut stop => return,
            };
            let mut leadership = match acquired {
                Ok(leadership) => leadership,
                Err(e) => {
                    tracing::warn!(
                        "cannot contend for the duties Lease {}: {e} (CRDs and webhook configurations are left to the other replicas; trying again in 30s)",
                        election.lease()
                    );
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(30)) => continue,
                        _ = &mut stop => return,
                    }
                }
            };
            tracing::info!(
                "this replica holds the once-only duties (Lease {}): CRD installs, webhook configurations, Plugin status",
                election.lease()
            );
            let _ = tx.send(true);
            on_acquired().await;
            let lost = tokio::select! {
                lost = leadership.lost() => Some(lost),
                _ = &mut stop => None,
            };
            let _ = tx.send(false);
            let Some(lost) = lost else {
                if let Err(e) = leadership.release().await {
                    tracing::warn!(
                        "cannot give up the once-only duties (the Lease expires instead): {e}"
                    );
                }
                return;
            };
            tracing::warn!("gave up the once-only duties: {lost}; contending again");
        }
    });
    (
        DutyHolder::following(rx),
        Duties {
            stop: Some(stop_tx),
            task,
        },
    )
}
