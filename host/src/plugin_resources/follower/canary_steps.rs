//! A candidate's follower in a canary rollout: at each report it gives the
//! candidate the share the rollout's state says, and, on the replica that
//! writes Plugins' status, judges the step and moves the rollout on (see
//! [`canary`](super::super::canary)).

use kube::runtime::events::EventType;

use super::super::canary::{self, CanaryRecord, Next};
use super::{Desired, Follower};
use crate::cluster::clock::{Clock, RealClock};

impl Follower {
    /// One look at the rollout: judged and stepped where this replica
    /// writes status, then the share given as the rollout's state says.
    /// `observed` is the Plugin's `status.rollout.canary` as last seen.
    pub(super) async fn step_canary(&mut self, desired: &Desired, observed: Option<CanaryRecord>) {
        let Some(plan) = desired.canary.clone() else {
            self.end_canary();
            // No longer a canary (the mode changed): its state goes too.
            if observed.is_some() {
                let cleared = serde_json::json!({ "status": { "rollout": {
                    "canary": null, "conditions": null, "summary": null } } });
                self.patch(desired, cleared).await;
            }
            return;
        };
        let (Some(plugin), Some(sha)) = (
            self.status.plugin_name.clone(),
            self.serving.as_ref().map(|s| s.sha256.clone()),
        ) else {
            return;
        };
        let writes = self.shared.writes_status.holds();
        if !writes || self.canary.is_none() {
            self.canary = observed;
        }
        if writes {
            let now = now_millis();
            let since = self.watching_since(&sha, now);
            let started = self
                .canary
                .as_ref()
                .and_then(CanaryRecord::started_millis)
                .unwrap_or(now);
            let window = self.shared.shadow.window(&plugin, &sha, since.max(started));
            let next = canary::next(&plan, self.canary.as_ref(), &sha, &window, since, now);
            self.take(desired, &plan, next, now).await;
        } else {
            self.canary_watch = None;
        }
        let share = self
            .canary
            .as_ref()
            .filter(|r| r.candidate_sha256 == sha)
            .and_then(|r| plan.share(r));
        self.shared.candidates.set_share(&plugin, share);
    }

    /// The candidate gives up any share it had: the rollout is over or
    /// no longer a canary.
    pub(super) fn end_canary(&mut self) {
        if let Some(plugin) = &self.status.plugin_name {
            self.shared.candidates.set_share(plugin, None);
        }
        self.canary = None;
        self.canary_watch = None;
    }

    /// Since when this replica has watched the rollout's current step of
    /// candidate `sha`, as the one that writes its state.
    fn watching_since(&mut self, sha: &str, now: i64) -> i64 {
        let step = self.canary.as_ref().map_or(0, |r| r.step);
        match &self.canary_watch {
            Some((s, at_step, since)) if s == sha && *at_step == step => *since,
            _ => {
                self.canary_watch = Some((sha.to_string(), step, now));
                now
            }
        }
    }

    /// Writes the rollout's new state, with an Event saying what happened;
    /// kept only once written, so the next look tries again.
    async fn take(&mut self, desired: &Desired, plan: &canary::CanaryPlan, next: Next, now: i64) {
        let Some(told) = next.told(plan) else {
            return;
        };
        let patch = canary::status_patch(plan, &told.record, now);
        if !self.patch(desired, patch).await {
            return;
        }
        let type_ = match told.warning {
            true => {
                tracing::warn!("{}: {}", self.label, told.note);
                EventType::Warning
            }
            false => {
                tracing::info!("{}: {}", self.label, told.note);
                EventType::Normal
            }
        };
        self.publish_event(desired, type_, told.reason.to_string(), &told.note)
            .await;
        let record = told.record;
        self.canary_watch = Some((record.candidate_sha256.clone(), record.step, now));
        self.canary = Some(record);
    }
}

fn now_millis() -> i64 {
    RealClock.now_millis()
}
