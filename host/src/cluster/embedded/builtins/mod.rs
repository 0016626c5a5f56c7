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

mod jobs;
mod names;
mod pods;
mod replicas;

use reconciler_contract::object_meta::MetadataField;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use reconciler_contract::KindRef;
pub use reconciler_contract::selector::LabelSelector;
use serde_json::Value;

use super::store::{EmbeddedStore, StoreEvent};
use crate::cluster::backend::ObjectKey;

pub use jobs::{JOB_DURATION_ANNOTATION, JOB_OUTCOME_ANNOTATION};

/// The field manager of every write the built-in controllers make, as on a
/// real cluster.
pub const FIELD_MANAGER: &str = "kube-controller-manager";

/// How the built-in controllers behave.
#[derive(Clone, Debug)]
pub struct BuiltinConfig {
    /// How long a new Pod stays Pending before it runs.
    pub pod_start_delay: Duration,
    /// How long a Job's Pod runs when the Job's annotation does not say.
    pub job_duration: Duration,
    /// Jobs these labels select fail instead of completing, unless the
    /// Job's annotation says otherwise.
    pub failing_jobs: Option<LabelSelector>,
}

impl Default for BuiltinConfig {
    fn default() -> Self {
        Self {
            pod_start_delay: Duration::from_secs(2),
            job_duration: Duration::from_secs(10),
            failing_jobs: None,
        }
    }
}

/// Something a controller does later.
#[derive(Clone, Debug)]
enum Timer {
    /// The Pod starts running.
    StartPod(ObjectKey),
    /// The Job's Pod ends, failed or not.
    FinishJob {
        job: ObjectKey,
        pod: ObjectKey,
        failed: bool,
    },
}

/// One change a built-in controller made, for `dev` and `simulate` to show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuiltinChange {
    pub at_millis: i64,
    /// `created`, `started`, `deleted`, `scaled`, `completed`, `failed`...
    pub verb: &'static str,
    pub kind: String,
    /// `namespace/name`.
    pub object: String,
    /// Said after the object (` to 3 replicas`), or empty.
    pub detail: String,
}

impl std::fmt::Display for BuiltinChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {}{}",
            self.verb, self.kind, self.object, self.detail
        )
    }
}

/// Changes as few lines: a run of the same verb on the same kind is one
/// line naming every object (`created Pod default/a, default/b`).
pub fn group_changes(changes: &[BuiltinChange]) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut previous: Option<&BuiltinChange> = None;
    for change in changes {
        match (previous, lines.last_mut()) {
            (Some(p), Some(line))
                if p.verb == change.verb && p.kind == change.kind && p.detail == change.detail =>
            {
                line.truncate(line.len() - p.detail.len());
                line.push_str(&format!(", {}{}", change.object, change.detail));
            }
            _ => lines.push(change.to_string()),
        }
        previous = Some(change);
    }
    lines
}

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

/// One round's view: the store, the time, and the timers it sets.
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

struct Round<'a> {
    store: &'a mut EmbeddedStore,
    now: i64,
    config: &'a BuiltinConfig,
    timers: Vec<(i64, Timer)>,
    changes: Vec<BuiltinChange>,
}

impl Round<'_> {
    fn note(&mut self, verb: &'static str, key: &ObjectKey, detail: String) {
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

    fn after(&mut self, delay: Duration, timer: Timer) {
        let delay = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
        self.timers.push((self.now.saturating_add(delay), timer));
    }
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

/// The key of the object's controller (the ownerReference with
/// `controller: true`), in the object's namespace.
fn controller_key(object: &Value, key: &ObjectKey) -> Option<ObjectKey> {
    let refs = object.metadata_field("ownerReferences")?.as_array()?;
    let owner = refs
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?;
    let api_version = owner.get("apiVersion")?.as_str()?;
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = KindRef::new(group, version, owner.get("kind")?.as_str()?);
    Some(ObjectKey::new(
        kind,
        key.namespace.as_deref(),
        owner.get("name")?.as_str()?,
    ))
}

/// Whether `object`'s controller is the object with `uid`.
fn controlled_by(object: &Value, uid: &str) -> bool {
    object
        .metadata_field("ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|r| {
            r.get("controller").and_then(Value::as_bool) == Some(true)
                && r.get("uid").and_then(Value::as_str) == Some(uid)
        })
}

/// The controller ownerReference kube-controller-manager puts on what it
/// creates.
fn controller_ref(owner: &Value) -> Value {
    let s = |p: &str| owner.pointer(p).cloned().unwrap_or(Value::Null);
    serde_json::json!({
        "apiVersion": s("/apiVersion"),
        "kind": s("/kind"),
        "name": s("/metadata/name"),
        "uid": s("/metadata/uid"),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// The live objects of `kind` that the object with `uid` controls, in key
/// order.
fn controlled(store: &EmbeddedStore, uid: &str, kind: &str) -> Vec<(ObjectKey, Value)> {
    store
        .dependents_of(uid)
        .into_iter()
        .filter(|key| key.kind.kind == kind)
        .filter_map(|key| {
            let object = store.get(&key)?;
            controlled_by(&object, uid).then_some((key, object))
        })
        .collect()
}

/// The object as a field manager sends it back: without what the server
/// sets.
fn as_applied(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
        if let Some(Value::Object(meta)) = map.get_mut("metadata") {
            for field in [
                "uid",
                "resourceVersion",
                "generation",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "managedFields",
            ] {
                meta.remove(field);
            }
        }
    }
    object
}

fn int_at(object: &Value, pointer: &str) -> Option<i64> {
    object.pointer(pointer).and_then(Value::as_i64)
}

fn str_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str)
}

/// Writes `status` when it differs from the stored one. A failure (the
/// object went, the namespace is terminating) leaves it to the next change.
fn write_status(round: &mut Round<'_>, key: &ObjectKey, status: Value) {
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
fn apply(round: &mut Round<'_>, object: Value) -> Option<Value> {
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

#[cfg(test)]
mod tests;
