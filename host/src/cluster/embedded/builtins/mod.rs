//! The built-in controllers of the embedded cluster: small, deterministic
//! stand-ins for the parts of kube-controller-manager (and of a kubelet)
//! that the example plugins rely on, so `dev` and `simulate` show whole
//! lifecycles instead of a Deployment nothing ever acts on.
//!
//! What they play:
//! - Deployment -> ReplicaSet `<deployment>-<pod-template-hash>` (labels,
//!   annotations and controller ownerReference as the real controller sets
//!   them); a changed template gets a new ReplicaSet and the old ones are
//!   scaled to 0 at once (no gradual rolling update).
//! - ReplicaSet -> Pods `<replicaset>-<suffix>`; scaling adds and removes
//!   Pods (Pending ones first, then the newest), and a deleted Pod is
//!   replaced.
//! - Pods start `Pending` and turn `Running` (and Ready) after
//!   [`BuiltinConfig::pod_start_delay`], as if a node ran them.
//! - Job -> one Pod, which ends `Succeeded` (Job condition `Complete`) or
//!   `Failed` (Job condition `Failed`, reason `BackoffLimitExceeded`) after
//!   [`BuiltinConfig::job_duration`], or what the Job's annotations
//!   [`JOB_DURATION_ANNOTATION`] and [`JOB_OUTCOME_ANNOTATION`] say.
//! - Status of Deployments, ReplicaSets and Jobs with the fields the real
//!   controllers write (zero counts left out as they leave them out).
//!
//! Garbage collection and namespace termination are the store's own
//! ([`super::garbage_collector`], [`super::namespaces`]).
//!
//! They react inside the call that made a change, like the garbage
//! collector, and their delays run on the cluster's [`Clock`]: in
//! `simulate` the virtual clock moves to [`BuiltinControllers::next_due`]
//! as it moves to the engine's requeues, so a run prints the same every time.
//! Names the real controllers draw at random are hashes of the object here.
//!
//! [`Clock`]: crate::cluster::Clock

mod changes;
mod config;
mod jobs;
mod names;
mod objects;
mod pods;
mod replicas;
mod round;

use std::collections::{BTreeMap, BTreeSet};

pub use reconciler_contract::selector::LabelSelector;
use serde_json::Value;

use self::objects::controller_key;
use self::round::{Round, Timer};
use super::store::{EmbeddedStore, StoreEvent};
use crate::cluster::backend::ObjectKey;

pub use changes::{BuiltinChange, group_changes};
pub use config::BuiltinConfig;
pub use jobs::{JOB_DURATION_ANNOTATION, JOB_OUTCOME_ANNOTATION};
pub use round::FIELD_MANAGER;

/// How many changes are kept for showing when nobody takes them (oldest
/// dropped first).
const MAX_CHANGES: usize = 10_000;

/// The built-in controllers' state: what changed and what is due.
pub struct BuiltinControllers {
    config: BuiltinConfig,
    /// (due at, order set) -> what to do.
    timers: BTreeMap<(i64, u64), Timer>,
    timers_set: u64,
    /// Objects whose controller must look at them again.
    dirty: BTreeSet<ObjectKey>,
    /// What they did, until taken.
    changes: Vec<BuiltinChange>,
}

/// How many rounds of reactions one change may cause before the built-ins
/// stop for this call: far more than any chain (Deployment, ReplicaSet,
/// Pods, statuses) needs, a bound should two writes ever feed each other.
const MAX_ROUNDS: usize = 64;

/// The first field the built-ins read as an object that is something else
/// in `object`. The API server's schema makes these objects; the embedded
/// cluster stores built-in kinds without a schema, so a hand-written
/// `template: 5` is passed by (and reported), not followed into a panic.
fn unreadable_field(object: &Value) -> Option<&'static str> {
    const OBJECTS: [(&str, &str); 8] = [
        ("/spec", "spec"),
        ("/spec/selector", "spec.selector"),
        ("/spec/selector/matchLabels", "spec.selector.matchLabels"),
        ("/spec/strategy", "spec.strategy"),
        ("/spec/template", "spec.template"),
        ("/spec/template/metadata", "spec.template.metadata"),
        (
            "/spec/template/metadata/labels",
            "spec.template.metadata.labels",
        ),
        ("/spec/template/spec", "spec.template.spec"),
    ];
    OBJECTS.iter().find_map(|(path, field)| {
        object
            .pointer(path)
            .is_some_and(|v| !v.is_object() && !v.is_null())
            .then_some(*field)
    })
}

impl BuiltinControllers {
    pub fn new(config: BuiltinConfig) -> Self {
        Self {
            config,
            timers: BTreeMap::new(),
            timers_set: 0,
            dirty: BTreeSet::new(),
            changes: Vec::new(),
        }
    }

    pub fn has_changes(&self) -> bool {
        !self.changes.is_empty()
    }

    /// What the controllers did since the last call, oldest first.
    pub fn take_changes(&mut self) -> Vec<BuiltinChange> {
        std::mem::take(&mut self.changes)
    }

    /// When the next delayed change is due (epoch millis).
    pub fn next_due(&self) -> Option<i64> {
        self.timers.keys().next().map(|(at, _)| *at)
    }

    /// Notes which controller a stored change concerns.
    pub(super) fn observe(&mut self, event: &StoreEvent) {
        let Some(key) = ObjectKey::of(&event.object) else {
            return;
        };
        match (key.kind.group.as_str(), key.kind.kind.as_str()) {
            ("apps", "Deployment") | ("batch", "Job") => {
                self.dirty.insert(key);
            }
            ("apps", "ReplicaSet") => {
                self.dirty.extend(controller_key(&event.object, &key));
                self.dirty.insert(key);
            }
            ("", "Pod") => {
                if jobs::holds_released_pod(&event.object) {
                    self.dirty.insert(key.clone());
                }
                self.dirty.extend(controller_key(&event.object, &key));
            }
            _ => {}
        }
    }

    /// Whether a round would do anything at `now`.
    pub(super) fn has_work(&self, now: i64) -> bool {
        !self.dirty.is_empty() || self.next_due().is_some_and(|at| at <= now)
    }

    /// One round: fires the timers due at `now`, then lets each controller
    /// look at the objects marked since the last round, in key order.
    pub(super) fn step(&mut self, store: &mut EmbeddedStore, now: i64) {
        let mut round = Round {
            store,
            now,
            config: &self.config,
            timers: Vec::new(),
            changes: Vec::new(),
        };
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            match entry.remove() {
                Timer::StartPod(pod) => pods::start(&mut round, &pod),
                Timer::FinishJob { job, pod, failed } => {
                    jobs::finish(&mut round, &job, &pod, failed)
                }
            }
        }
        for key in std::mem::take(&mut self.dirty) {
            let played = matches!(
                (key.kind.group.as_str(), key.kind.kind.as_str()),
                ("apps", "Deployment" | "ReplicaSet") | ("batch", "Job") | ("", "Pod")
            );
            if played && let Some(field) = round.store.get(&key).as_ref().and_then(unreadable_field)
            {
                round.note("skipped", &key, format!(" ({field} is not an object)"));
                continue;
            }
            match (key.kind.group.as_str(), key.kind.kind.as_str()) {
                ("apps", "Deployment") => replicas::sync_deployment(&mut round, &key),
                ("apps", "ReplicaSet") => replicas::sync_replica_set(&mut round, &key),
                ("batch", "Job") => jobs::sync_job(&mut round, &key),
                ("", "Pod") => jobs::release_pod(&mut round, &key),
                _ => {}
            }
        }
        for (at, timer) in round.timers {
            self.timers_set += 1;
            self.timers.insert((at, self.timers_set), timer);
        }
        self.changes.extend(round.changes);
        if self.changes.len() > MAX_CHANGES {
            let excess = self.changes.len() - MAX_CHANGES;
            self.changes.drain(..excess);
        }
    }

    /// Runs rounds while there is work at `now`, handing every change to
    /// `deliver` (the watches) before the next round looks at it.
    pub(super) fn settle(
        &mut self,
        store: &mut EmbeddedStore,
        now: i64,
        mut deliver: impl FnMut(Vec<StoreEvent>),
    ) {
        for _ in 0..MAX_ROUNDS {
            if !self.has_work(now) {
                return;
            }
            self.step(store, now);
            let events = store.drain_events();
            for event in &events {
                self.observe(event);
            }
            deliver(events);
        }
        tracing::warn!(
            "the embedded cluster's built-in controllers still had work after {MAX_ROUNDS} rounds; the rest waits for the next change"
        );
    }
}

#[cfg(test)]
mod tests;
