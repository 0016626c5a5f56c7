//! What a failed reconcile says: a short reason (its Event's and its
//! record's) and a message that tells the whole story, including what
//! reached the cluster before the failure.
//!
//! Every stage of a reconcile can fail (the plugin call, the scope check,
//! the plan, each write), and the record, the Warning Event and the
//! backoff all take the same two words, so they are one type here rather
//! than a pair of strings each stage builds its own way.

use super::record::{CLUSTER_UNAVAILABLE, Change};
use crate::cluster::BackendError;

/// Why a reconcile failed. Nothing more of it is applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub reason: String,
    pub message: String,
}

impl Failure {
    pub fn new(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A cluster call that failed at `step`, before anything was written.
    pub fn backend(step: &str, e: BackendError) -> Self {
        let reason = match e {
            BackendError::Conflict { .. } => "Conflict",
            BackendError::Forbidden { .. } => "Forbidden",
            BackendError::Invalid { .. } => "ApplyRejected",
            BackendError::NamespaceTerminating { .. } => "NamespaceTerminating",
            BackendError::Transient(_) => CLUSTER_UNAVAILABLE,
            BackendError::OverBudget { .. } => "OverBudget",
            _ => "ApplyFailed",
        };
        Self::new(reason, format!("{step}: {e}"))
    }

    /// A failure after part of a response reached the cluster: the message
    /// says what was done before it, so the Event tells the whole story.
    /// The next attempt starts again from a fresh read.
    pub fn partial(step: &str, e: BackendError, done: &[Change]) -> Self {
        let failure = Self::backend(step, e);
        let writes: Vec<String> = done
            .iter()
            .filter(|c| !matches!(c, Change::Event { .. }))
            .map(ToString::to_string)
            .collect();
        if writes.is_empty() {
            return failure;
        }
        Self::new(
            failure.reason,
            format!(
                "{} (partial apply: {} done before this failed; the rest was not applied and the reconcile is retried)",
                failure.message,
                writes.join(", ")
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use reconciler_contract::{EventType, KindRef};

    use super::*;
    use crate::cluster::ObjectKey;

    #[test]
    fn a_cluster_that_does_not_answer_is_said_apart_from_a_refusal() {
        let unavailable = Failure::backend(
            "applying Deployment default/web",
            BackendError::Transient("timed out".into()),
        );
        assert_eq!(unavailable.reason, CLUSTER_UNAVAILABLE);
        assert_eq!(
            unavailable.message,
            "applying Deployment default/web: transient error, will retry: timed out"
        );
        let refused = Failure::backend(
            "updating the status",
            BackendError::Forbidden {
                message: "no".into(),
            },
        );
        assert_eq!(refused.reason, "Forbidden");
        let gone = Failure::backend("deleting x", BackendError::NotFound { key: "x".into() });
        assert_eq!(gone.reason, "ApplyFailed");
    }

    #[test]
    fn a_partial_failure_names_the_writes_done_before_it_and_not_the_events() {
        let deployment = ObjectKey::new(
            KindRef::new("apps", "v1", "Deployment"),
            Some("default"),
            "web",
        );
        let done = [
            Change::Created(deployment),
            Change::Event {
                event_type: EventType::Normal,
                reason: "Scaled".into(),
                message: "to 3".into(),
            },
        ];
        let failure = Failure::partial(
            "updating the status",
            BackendError::Transient("reset".into()),
            &done,
        );
        assert_eq!(failure.reason, CLUSTER_UNAVAILABLE);
        assert!(
            failure.message.starts_with(
                "updating the status: transient error, will retry: reset (partial apply: created Deployment default/web done before this failed;"
            ),
            "{}",
            failure.message
        );
        assert!(!failure.message.contains("Scaled"), "{}", failure.message);
        let nothing_done = Failure::partial(
            "updating the status",
            BackendError::Transient("reset".into()),
            &done[1..],
        );
        assert_eq!(
            nothing_done.message,
            "updating the status: transient error, will retry: reset"
        );
    }
}
