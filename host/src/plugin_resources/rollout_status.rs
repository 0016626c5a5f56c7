//! Where a Plugin's candidate reports: its own follower's status under
//! `status.rollout.candidate` (the same fields and conditions as the
//! Plugin's own), what the candidate found in shadow under
//! `status.rollout.shadow`, and a one-line `status.rollout.summary` that
//! `kubectl get plugins` shows.

use serde_json::{Value, json};

use crate::engine::shadow_book::PluginShadow;

/// Which version of a Plugin a follower keeps served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `spec.source`: the version that serves.
    Serving,
    /// `spec.rollout.candidate`: runs in shadow beside it.
    Candidate,
}

impl Role {
    /// The status merge patch that writes `status` (the follower's own
    /// fields) where this role's status lives.
    pub fn status_patch(self, status: Value) -> Value {
        match self {
            Role::Serving => json!({ "status": status }),
            Role::Candidate => json!({ "status": { "rollout": { "candidate": status } } }),
        }
    }

    /// An Event's reason for this role: a candidate's are told apart
    /// (`CandidateLoaded`), since they land on the same Plugin.
    pub fn reason(self, reason: &str) -> String {
        match self {
            Role::Serving => reason.to_string(),
            Role::Candidate => format!("Candidate{reason}"),
        }
    }
}

/// The merge patch that writes what `shadow` found, or clears it; with
/// the one-line summary when `summary` (a canary writes its own).
pub fn shadow_patch(shadow: Option<&PluginShadow>, summary: bool) -> Value {
    let Some(shadow) = shadow else {
        let mut patch = json!({ "status": { "rollout": { "shadow": null } } });
        if summary {
            patch["status"]["rollout"]["summary"] = Value::Null;
        }
        return patch;
    };
    let c = &shadow.counts;
    let last = shadow
        .differing
        .front()
        .map(|d| Value::String(d.object.clone()))
        .unwrap_or(Value::Null);
    let mut patch = json!({ "status": { "rollout": {
        "shadow": {
            "candidateVersion": shadow.candidate_version,
            "candidateSha256": shadow.candidate_sha256,
            "agreed": c.agreed,
            "differed": c.differed,
            "failed": c.failed,
            "shed": c.shed,
            "lastDiffering": last,
            "decided": shadow.decided.reconciled,
            "decidedFailed": shadow.decided.failed,
        },
    } } });
    if summary {
        patch["status"]["rollout"]["summary"] = json!(format!(
            "shadow {}: {} agreed, {} differed, {} failed, {} shed",
            shadow.candidate_version, c.agreed, c.differed, c.failed, c.shed
        ));
    }
    patch
}

/// The patch that removes everything of a rollout once the Plugin has none.
pub fn cleared() -> Value {
    json!({ "status": { "rollout": null } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_candidates_status_lands_under_rollout_and_its_events_are_told_apart() {
        let patch = Role::Candidate.status_patch(json!({"digest": "sha256:1"}));
        assert_eq!(
            patch["status"]["rollout"]["candidate"]["digest"],
            "sha256:1"
        );
        assert_eq!(
            Role::Serving.status_patch(json!({"digest": "sha256:1"}))["status"]["digest"],
            "sha256:1"
        );
        assert_eq!(Role::Candidate.reason("Loaded"), "CandidateLoaded");
        assert_eq!(Role::Serving.reason("Loaded"), "Loaded");
        assert_eq!(
            shadow_patch(None, true)["status"]["rollout"]["shadow"],
            Value::Null
        );
    }
}
