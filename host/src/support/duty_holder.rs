//! Whether this replica holds the once-only duties (CRD installs, webhook
//! configurations, Plugin status). The admission server and the Plugin
//! resources ask it; only the process contends for the duties
//! (`process::duties`), so the question lives beneath both.

use tokio::sync::watch;

/// Whether this replica holds the duties now; always yes without sharding.
#[derive(Clone)]
pub struct DutyHolder(watch::Receiver<bool>);

impl DutyHolder {
    /// Follows the holder's state as a contention for the duties reports it
    /// (`process::duties::contend`).
    pub fn following(state: watch::Receiver<bool>) -> Self {
        Self(state)
    }

    /// A single replica, or one leader: it does every duty.
    pub fn always() -> Self {
        let (tx, rx) = watch::channel(true);
        // The receiver keeps the last value once the sender is gone.
        drop(tx);
        Self(rx)
    }

    pub fn holds(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves when this replica gains or loses the duties; pending for
    /// ever once that can no longer happen.
    pub async fn changed(&mut self) {
        if self.0.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
