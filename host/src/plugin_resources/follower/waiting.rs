//! A follower between attempts: it waits for its Plugin to change or its
//! next attempt to be due, and a candidate's follower writes what the
//! candidate found in shadow meanwhile (`status.rollout`, see
//! [`rollout_status`](super::super::rollout_status)) and steps a canary
//! rollout ([`canary_steps`](super::canary_steps)).

use std::time::Duration;

use tokio::sync::watch;

use super::super::api_error::api_error_text;
use super::super::rollout_status::{self, Role};
use super::{Desired, Follower, SHADOW_REPORT, Woke};

impl Follower {
    /// Waits `wait` (`None`: for ever) or until `desired` changes; a
    /// candidate's follower writes its shadow counts meanwhile.
    pub(super) async fn wait(
        &mut self,
        desired: &mut watch::Receiver<Option<Desired>>,
        wait: Option<Duration>,
        current: &Desired,
    ) -> Woke {
        let sleep = async {
            match wait {
                Some(wait) => tokio::time::sleep(wait).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(sleep);
        let reports = self.role == Role::Candidate;
        loop {
            let report = async {
                match reports {
                    true => tokio::time::sleep(SHADOW_REPORT).await,
                    false => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = desired.changed() => {
                    return match changed {
                        Ok(()) => Woke::Changed,
                        Err(_) => Woke::Closed,
                    };
                }
                () = &mut sleep => return Woke::Slept,
                () = report => {
                    let observed = desired
                        .borrow()
                        .as_ref()
                        .and_then(|d| d.observed_canary.clone());
                    self.step_canary(current, observed).await;
                    self.publish_shadow(current).await;
                }
            }
        }
    }

    /// Writes what the candidate found in shadow so far into the Plugin's
    /// `status.rollout`, when it changed.
    async fn publish_shadow(&mut self, desired: &Desired) {
        let Some(plugin) = self.status.plugin_name.clone() else {
            return;
        };
        let shadow = self.shared.shadow.of(&plugin);
        let counts = shadow
            .as_ref()
            .map(|s| (s.candidate_sha256.clone(), s.counts, s.decided));
        if counts == self.shadow_written {
            return;
        }
        let summary = desired.canary.is_none();
        if self
            .patch(
                desired,
                rollout_status::shadow_patch(shadow.as_ref(), summary),
            )
            .await
        {
            self.shadow_written = counts;
        }
    }

    /// Removes `status.rollout` once the Plugin has no candidate.
    pub(super) async fn clear_rollout(&mut self, desired: Option<&Desired>) {
        if let Some(desired) = desired {
            self.patch(desired, rollout_status::cleared()).await;
        }
    }

    /// Merge-patches the Plugin's status, when this replica writes it;
    /// whether it was written.
    pub(super) async fn patch(&self, desired: &Desired, patch: serde_json::Value) -> bool {
        if !self.shared.writes_status.holds() {
            return false;
        }
        let Some(name) = desired.object.as_ref().and_then(|o| o.name.as_ref()) else {
            return false;
        };
        let params = kube::api::PatchParams::default();
        match self
            .shared
            .api
            .patch_status(name, &params, &kube::api::Patch::Merge(&patch))
            .await
        {
            Ok(_) => true,
            // Deleted: a status of its own went with it.
            Err(kube::Error::Api(answer)) if answer.code == 404 => {
                tracing::debug!("{}: gone, no status to write", self.label);
                false
            }
            Err(e) => {
                tracing::warn!(
                    "{}: cannot write its status: {}",
                    self.label,
                    api_error_text(&e)
                );
                false
            }
        }
    }
}
