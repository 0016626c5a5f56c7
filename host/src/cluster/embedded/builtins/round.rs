//! One round of the built-in controllers: the store, the time, the timers
//! set and the changes made, and the two writes every controller makes
//! through it (an apply and a status).
//!
//! Why a module: each controller (Deployments, ReplicaSets, Pods, Jobs)
//! acts through a round, and the round is run by [`super::BuiltinControllers`];
//! with the round here the controllers need nothing from the module that
//! runs them.

use std::time::Duration;

use serde_json::Value;

use super::changes::BuiltinChange;
use super::config::BuiltinConfig;
use crate::cluster::backend::ObjectKey;
use crate::cluster::embedded::store::EmbeddedStore;

/// The field manager of every write the built-in controllers make, as on a
/// real cluster.
pub const FIELD_MANAGER: &str = "kube-controller-manager";

/// Something a controller does later.
#[derive(Clone, Debug)]
pub(super) enum Timer {
    /// The Pod starts running.
    StartPod(ObjectKey),
    /// The Job's Pod ends, failed or not.
    FinishJob {
        job: ObjectKey,
        pod: ObjectKey,
        failed: bool,
    },
}

/// One round's view: the store, the time, and the timers it sets.
pub(super) struct Round<'a> {
    pub(super) store: &'a mut EmbeddedStore,
    pub(super) now: i64,
    pub(super) config: &'a BuiltinConfig,
    pub(super) timers: Vec<(i64, Timer)>,
    pub(super) changes: Vec<BuiltinChange>,
}

impl Round<'_> {
    pub(super) fn note(&mut self, verb: &'static str, key: &ObjectKey, detail: String) {
        let object = match &key.namespace {
            Some(namespace) => format!("{namespace}/{}", key.name),
            None => key.name.clone(),
        };
        self.changes.push(BuiltinChange {
            at_millis: self.now,
            verb,
            kind: key.kind.kind.clone(),
            object,
            detail,
        });
    }

    pub(super) fn after(&mut self, delay: Duration, timer: Timer) {
        let delay = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
        self.timers.push((self.now.saturating_add(delay), timer));
    }
}

/// Writes `status` when it differs from the stored one. A failure (the
/// object went, the namespace is terminating) leaves it to the next change.
pub(super) fn write_status(round: &mut Round<'_>, key: &ObjectKey, status: Value) {
    let current = round.store.get(key).and_then(|o| o.get("status").cloned());
    if current.as_ref() == Some(&status) {
        return;
    }
    if let Err(e) = round
        .store
        .apply_status(key, status, FIELD_MANAGER, None, round.now)
    {
        tracing::debug!("built-in controllers: cannot write the status of {key}: {e}");
    }
}

/// Applies `object` as kube-controller-manager; a failure is logged and
/// left to the next change.
pub(super) fn apply(round: &mut Round<'_>, object: Value) -> Option<Value> {
    match round.store.apply(object, FIELD_MANAGER, true, round.now) {
        Ok(outcome) => {
            if outcome.created
                && let Some(key) = ObjectKey::of(&outcome.object)
            {
                round.note("created", &key, String::new());
            }
            Some(outcome.object)
        }
        Err(e) => {
            tracing::debug!("built-in controllers: {e}");
            None
        }
    }
}
