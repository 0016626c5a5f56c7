//! The last look before a write leaves: does this replica still hold the
//! Lease it reconciles under, with time to spare?
//!
//! A reconcile is started only while the Lease holds, but it may then wait
//! (for a slot, a plugin call, an earlier request, a pause of the whole
//! process) past the moment its Lease lapses and another replica may take
//! its objects. So the backend asks again immediately before every request
//! that changes something, and refuses it unless the Lease holds for
//! [`WRITE_MARGIN`] more: the time a write has to land before the renew
//! deadline is up, inside the gap the other replicas leave (they take over
//! a lease duration after the last renewal they saw, five seconds after
//! the renew deadline by default). A write refused here fails its
//! reconcile with a transient error naming why; by the time it is retried
//! the replica has stopped, or renewed.
//!
//! What no check in the host can close: a process frozen between this
//! check and the request leaving. The API server's own fence
//! (`rbac`/`deploy`'s admission policy) is for that.

use std::fmt::Display;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::cluster::backend::BackendError;

/// How long the Lease must still hold when a write leaves.
pub const WRITE_MARGIN: Duration = Duration::from_secs(2);

/// Until when this replica holds its Lease, as it last renewed it; `None`
/// once it lost it.
pub type HeldUntil = Arc<dyn Fn() -> Option<Instant> + Send + Sync>;

/// Shared by every backend of the process; open until told which Lease
/// writes depend on (a host with no Lease writes freely).
#[derive(Clone, Default)]
pub struct WriteFence {
    held_until: Arc<OnceLock<HeldUntil>>,
}

impl std::fmt::Debug for WriteFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.held_until.get() {
            Some(_) => "held to a Lease",
            None => "open",
        };
        f.debug_tuple("WriteFence").field(&state).finish()
    }
}

impl WriteFence {
    /// From now on writes need `held_until` to hold for the margin. Set
    /// once: a second call is ignored.
    pub fn hold_to(&self, held_until: HeldUntil) {
        let _ = self.held_until.set(held_until);
    }

    /// Whether `what` (a write about to be sent) may leave now.
    pub fn check(&self, what: impl Display) -> Result<(), BackendError> {
        self.check_at(Instant::now(), what)
    }

    fn check_at(&self, now: Instant, what: impl Display) -> Result<(), BackendError> {
        let Some(held_until) = self.held_until.get() else {
            return Ok(());
        };
        match held_until() {
            Some(until) if now + WRITE_MARGIN < until => Ok(()),
            Some(until) => Err(BackendError::Transient(format!(
                "withheld {what}: this replica's Lease holds for {} ms more, less than the {} s a write is given to land",
                until.saturating_duration_since(now).as_millis(),
                WRITE_MARGIN.as_secs()
            ))),
            None => Err(BackendError::Transient(format!(
                "withheld {what}: this replica no longer holds its Lease"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn a_write_leaves_only_while_the_lease_holds_for_the_margin() {
        let now = Instant::now();
        let fence = WriteFence::default();
        assert!(fence.check_at(now, "apply").is_ok(), "no Lease: open");
        let until = Arc::new(Mutex::new(Some(now + Duration::from_secs(10))));
        let read = until.clone();
        fence.hold_to(Arc::new(move || *read.lock().unwrap()));
        assert!(fence.check_at(now, "apply").is_ok());
        *until.lock().unwrap() = Some(now + WRITE_MARGIN);
        let refused = fence.check_at(now, "apply of Deployment default/web");
        let message = refused.unwrap_err().to_string();
        assert!(
            message.contains("withheld apply of Deployment default/web") && message.contains("2 s"),
            "{message}"
        );
        *until.lock().unwrap() = None;
        let lost = fence.check_at(now, "delete").unwrap_err().to_string();
        assert!(lost.contains("no longer holds its Lease"), "{lost}");
    }
}
