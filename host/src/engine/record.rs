//! What one reconcile did, for logs, `dev` output and `simulate` reports.

use std::fmt;
use std::time::Duration;

use reconciler_contract::EventType;

use super::work_queue::PrimaryKey;
use crate::cluster::ObjectKey;
use crate::support::duration_text::format_duration_for_people;

/// The reason of a reconcile that failed because the cluster did not
/// answer (a timeout, a refused connection, a 5xx or 429): worth asking
/// whether the cluster is still there.
pub const CLUSTER_UNAVAILABLE: &str = "ClusterUnavailable";

/// One change the host made to the cluster on a plugin's behalf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Created(ObjectKey),
    Updated(ObjectKey),
    Deleted(ObjectKey),
    Pruned(ObjectKey),
    StatusUpdated,
    /// The status was not written: the primary changed since the reconcile
    /// read it, and the newer object is reconciled next.
    StatusStale,
    /// Creates refused because the namespace is being deleted, while the
    /// primary was deleting too.
    RefusedInTerminatingNamespace(Vec<ObjectKey>),
    Event {
        event_type: EventType,
        reason: String,
        message: String,
    },
    FinalizerAdded(String),
    FinalizerRemoved(String),
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Created(k) => write!(f, "created {k}"),
            Change::Updated(k) => write!(f, "updated {k}"),
            Change::Deleted(k) => write!(f, "deleted {k}"),
            Change::Pruned(k) => write!(f, "pruned {k}"),
            Change::StatusUpdated => write!(f, "status updated"),
            Change::StatusStale => write!(
                f,
                "status not written: the object changed since it was read (reconciled again)"
            ),
            Change::RefusedInTerminatingNamespace(keys) => {
                let keys: Vec<String> = keys.iter().map(ToString::to_string).collect();
                write!(f, "not created, namespace terminating: {}", keys.join(", "))
            }
            Change::Event {
                event_type,
                reason,
                message,
            } => write!(f, "event {event_type} {reason}: {message}"),
            Change::FinalizerAdded(n) => write!(f, "finalizer {n} added"),
            Change::FinalizerRemoved(n) => write!(f, "finalizer {n} removed"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The response was applied.
    Applied {
        changes: Vec<Change>,
        requeue_after: Option<Duration>,
    },
    /// Nothing of the response was applied, or it stopped midway; retried
    /// from a fresh read after `retry_in`.
    Failed {
        reason: String,
        message: String,
        failures: u32,
        retry_in: Duration,
    },
    /// The primary no longer exists.
    Gone,
    /// The plugin was unloaded before the reconcile started.
    Unloaded,
}

impl Outcome {
    /// One word for it, as traces and metrics label it.
    pub fn word(&self) -> &'static str {
        match self {
            Outcome::Applied { .. } => "applied",
            Outcome::Failed { .. } => "failed",
            Outcome::Gone => "gone",
            Outcome::Unloaded => "unloaded",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconcileRecord {
    pub at_millis: i64,
    /// The cluster of the object (`local` for the host's own).
    pub cluster: String,
    pub plugin: String,
    pub kind: String,
    pub object: PrimaryKey,
    pub outcome: Outcome,
    /// How long the object waited in its queue past its due time before
    /// this reconcile started (0 for one that never ran).
    pub waited_millis: i64,
}

impl ReconcileRecord {
    /// Whether it failed because the cluster did not answer.
    pub fn cluster_unavailable(&self) -> bool {
        matches!(&self.outcome, Outcome::Failed { reason, .. } if reason == CLUSTER_UNAVAILABLE)
    }
}

impl fmt::Display for ReconcileRecord {
    /// `podset PodSet default/web: created Deployment default/web; status updated`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}: ", self.plugin, self.kind, self.object)?;
        match &self.outcome {
            Outcome::Applied {
                changes,
                requeue_after,
            } => {
                if changes.is_empty() {
                    f.write_str("in sync")?;
                } else {
                    let text: Vec<String> = changes.iter().map(Change::to_string).collect();
                    f.write_str(&text.join("; "))?;
                }
                if let Some(d) = requeue_after {
                    write!(f, "; requeue in {}", format_duration_for_people(*d))?;
                }
                Ok(())
            }
            Outcome::Failed {
                reason,
                message,
                failures,
                retry_in,
            } => write!(
                f,
                "FAILED ({reason}, {failures} in a row, retry in {}): {message}",
                format_duration_for_people(*retry_in)
            ),
            Outcome::Gone => f.write_str("gone"),
            Outcome::Unloaded => f.write_str("skipped: the plugin was unloaded"),
        }
    }
}

/// Logs what a reconcile changed, at info; a reconcile that changed nothing
/// only at debug, so a converged host is quiet.
pub fn log_record(record: &ReconcileRecord) {
    // Failures are logged by the engine, in the reconcile's span; here the
    // changes a reconcile made. Reconciles that changed nothing are quiet.
    match &record.outcome {
        Outcome::Applied { changes, .. } if !changes.is_empty() => tracing::info!("{record}"),
        Outcome::Failed { .. } => {}
        _ => tracing::debug!("{record}"),
    }
}
