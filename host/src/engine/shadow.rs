//! Shadow: a plugin's candidate version decides beside the serving one on
//! every reconcile, with the same inputs, and is never applied.
//!
//! The candidate is sent the very request the serving version was (the
//! primary and children as cached when they were shown), the same clock
//! reading and cluster, and draws the same random numbers; a candidate
//! that declares other child kinds is shown its own. Its answer is held to
//! every rule the serving version's is (the runtime's checks, the scope
//! rule, the shard label, the plan) and compared field by field with the
//! serving decision ([`crate::decision_diff::compare`]).
//!
//! It never delays or fails the serving call: it runs after the serving
//! reconcile has settled, on a low-priority thread of its own
//! ([`shadow_threads`](super::shadow_threads)), in shadow slots of its own
//! ([`ShadowBook::slot`]), once serving calls have paused, and is shed
//! (counted, not run) whenever no slot frees or the serving calls do not
//! pause within a few seconds, a serving call waits for an instance, or
//! the guest memory budget is more than half spent. A read the serving call
//! made is answered to the candidate as it was to the serving call
//! ([`shadow_reads`](super::shadow_reads)); only what the serving version
//! never asked comes from the cache as it is when the candidate runs.

use std::sync::Arc;

use reconciler_contract::EventType;
use tracing::Instrument;

use super::failure::Failure;
use super::plan::uid_of;
use super::reconcile::Reconciler;
use super::shadow_book::{CandidateId, SLOT_WAIT, ShadowBook, ShadowDifference, ShadowOutcome};
use super::shadow_job::ShadowJob;
use super::shadow_reads::ReplayedReads;
use super::shadow_threads::Ran;
use super::watches::Wiring;
use crate::cluster::clock::rfc3339;
use crate::cluster::{ClusterBackend, EventRecord};
use crate::decision_diff::report::line;
use crate::decision_diff::{Decision, Difference, compare};
use crate::golden::runner::expectation_of;
use crate::plugin::{CallError, LoadedPlugin, ReconcileInput, ValidResponse};

/// A shadow call that timed out having had less than half its deadline
/// of CPU: it runs at the lowest priority
/// ([`shadow_threads`](super::shadow_threads)), so on a busy machine its
/// wall-clock deadline can pass while it waits for a core. That says
/// nothing about the candidate, so it is shed, not counted as a failure
/// (which a canary's gate would hold against it).
struct Starved;

fn starved(ran: &Ran<Result<ValidResponse, CallError>>) -> bool {
    match (&ran.answer, ran.cpu) {
        (Err(CallError::Timeout { limit }), Some(cpu)) => cpu < *limit / 2,
        _ => false,
    }
}

/// What a shadow run needs of the engine: the reconcile stages its answer
/// is checked by, and the wiring that watches the candidate's kinds.
pub struct Shadow<'a, B: ClusterBackend> {
    pub reconciler: Reconciler<'a, B>,
    pub wiring: Wiring<'a, B>,
}

impl<B: ClusterBackend> Shadow<'_, B> {
    fn book(&self) -> &ShadowBook {
        &self.wiring.shared.shadow
    }

    /// Runs `job`'s candidate (or sheds it), compares, and records the
    /// outcome in the book; a differing object may be named in an Event.
    pub async fn run(&self, job: ShadowJob) -> ShadowOutcome {
        let metadata = job.candidate.metadata();
        let span = tracing::info_span!(
            "shadow",
            plugin = %job.plugin,
            candidate = %metadata.version,
            namespace = job.primary.key.namespace.as_deref().unwrap_or(""),
            object_name = %job.primary.key.name,
        );
        let id = CandidateId {
            plugin: &job.plugin,
            version: &metadata.version,
            sha256: job.candidate.sha256(),
        };
        let now = self.wiring.shared.now();
        // Named with its cluster beside others: one name may be in each.
        let cluster = &self.wiring.shared.cluster.name;
        let object = match cluster.as_str() {
            reconciler_contract::LOCAL_CLUSTER => {
                format!("{} {}", metadata.primary.kind, job.primary.key)
            }
            _ => format!(
                "{} {} in cluster {cluster}",
                metadata.primary.kind, job.primary.key
            ),
        };
        let Some(_slot) = self.room_for(&job).await else {
            self.book()
                .record(&id, &object, ShadowOutcome::Shed, None, now);
            return ShadowOutcome::Shed;
        };
        let Ok(decided) = self.decide(&job).instrument(span.clone()).await else {
            span.in_scope(|| {
                tracing::debug!("the candidate's call was starved of CPU past its deadline: shed")
            });
            self.book()
                .record(&id, &object, ShadowOutcome::Shed, None, now);
            return ShadowOutcome::Shed;
        };
        let differences = compare(&job.serving, &decided);
        let outcome = match (&decided, differences.is_empty()) {
            (Err(_), _) => ShadowOutcome::Failed,
            (Ok(_), true) => ShadowOutcome::Agreed,
            (Ok(_), false) => ShadowOutcome::Differed,
        };
        span.in_scope(|| match &decided {
            Err(e) => tracing::debug!("the candidate failed: {e}"),
            Ok(_) => tracing::debug!(differences = differences.len(), "shadow reconcile"),
        });
        let kept = (outcome != ShadowOutcome::Agreed).then(|| ShadowDifference {
            object: object.clone(),
            cluster: self.wiring.shared.cluster.name.clone(),
            at: rfc3339(now),
            outcome: if outcome == ShadowOutcome::Failed {
                "failed"
            } else {
                "differed"
            },
            differences: differences.clone(),
        });
        if self.book().record(&id, &object, outcome, kept, now) {
            self.announce(&job, &differences).await;
        }
        outcome
    }

    /// A shadow slot, when the host has room for a shadow call: none while
    /// serving calls wait for an instance or guest memory is short, before
    /// and after the wait for a slot. With its slot, a shadow call waits
    /// until serving calls have paused (the book's pause, 50 ms), so it
    /// runs in the gaps between serving work rather than between two
    /// serving calls of a burst; one that waits longer than the slot wait
    /// is shed.
    async fn room_for(&self, job: &ShadowJob) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let slots = &self.reconciler.calls.slots;
        let pressed = || slots.waiting() > 0 || job.candidate.guest_memory_pressed();
        if pressed() {
            return None;
        }
        let slot = self.book().slot().await?;
        let pause = self.book().pause();
        tokio::time::timeout(SLOT_WAIT, slots.paused_for(pause))
            .await
            .ok()?;
        (!pressed()).then_some(slot)
    }

    /// The candidate's decision, held to every rule the serving version's
    /// is held to before anything is applied; [`Starved`] when its call
    /// timed out without having run.
    async fn decide(&self, job: &ShadowJob) -> Result<Decision, Starved> {
        let shared = self.wiring.shared;
        if let Err(e) = self.watch_kinds_of(&job.candidate).await {
            return Ok(Err(e));
        }
        let input = ReconcileInput {
            request: job.shown.request(&job.primary),
            primary_namespace: job.primary.key.namespace.clone(),
            object: job.primary.key.to_string(),
            reader: Arc::new(ReplayedReads {
                kept: job.reads.clone(),
            }),
            now_millis: job.now_millis,
            cluster: shared.cluster.clone(),
        };
        let candidate = job.candidate.clone();
        let response = match self
            .book()
            .threads()
            .run(move || candidate.reconcile(input))
            .await
        {
            Err(e) => return Ok(Err(e)),
            Ok(ran) if starved(&ran) => return Err(Starved),
            Ok(ran) => ran.answer,
        };
        Ok(self.checked(job, response))
    }

    /// The candidate's answer held to the serving version's rules.
    fn checked(&self, job: &ShadowJob, response: Result<ValidResponse, CallError>) -> Decision {
        let shared = self.wiring.shared;
        let response = response.map_err(|e| e.to_string())?;
        let decision = expectation_of(response.clone());
        let mut checked = response;
        let failed = |f: Failure| f.message;
        self.reconciler
            .validate(&job.primary, &mut checked, job.bucket.as_deref())
            .map_err(failed)?;
        let controller = shared
            .controllers
            .get(&job.plugin)
            .ok_or_else(|| format!("plugin {} stopped serving", job.plugin))?;
        let superseded = controller.state().superseded_finalizers.clone();
        self.reconciler
            .plan(
                &controller,
                job.candidate.metadata(),
                &job.primary,
                &job.shown,
                &superseded,
                checked,
            )
            .map_err(failed)?;
        Ok(decision)
    }

    /// Watches the kinds the candidate declares and the serving version
    /// may not, once per candidate version, so it reads what it would read
    /// serving. Its kinds' scopes are learned for the scope rule.
    async fn watch_kinds_of(&self, candidate: &LoadedPlugin) -> Result<(), String> {
        let shared = self.wiring.shared;
        let sha = candidate.sha256();
        if shared.candidate_kinds_watched(sha) {
            return Ok(());
        }
        let metadata = candidate.metadata();
        let scopes = super::scope_rules::check_plugin(&*shared.backend, metadata)
            .await
            .map_err(|e| e.to_string())?;
        shared.kind_scopes.learn(scopes);
        let rewiring = self.wiring.watches.rewiring().await;
        self.wiring
            .watch_kinds(candidate, &rewiring)
            .await
            .map_err(|e| e.to_string())?;
        shared.mark_candidate_kinds_watched(sha);
        Ok(())
    }

    /// A Normal Event on the primary naming what the candidate would do
    /// differently (rate-limited per plugin by the book).
    async fn announce(&self, job: &ShadowJob, differences: &[Difference]) {
        let metadata = job.candidate.metadata();
        let Some(first) = differences.first() else {
            return;
        };
        let more = match differences.len() {
            1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        let message = format!(
            "candidate {} {} ({}) would decide differently: {}{more}; its last differing objects are at /plugins/{}/shadow",
            metadata.name,
            metadata.version,
            &job.candidate.sha256()[..12.min(job.candidate.sha256().len())],
            line(first),
            job.plugin
        );
        let record = EventRecord {
            regarding: job.primary.object_key.clone(),
            regarding_uid: uid_of(&job.primary.object),
            event_type: EventType::Normal,
            reason: "CandidateDiffers".to_string(),
            message,
            reporting_controller: metadata.field_manager(),
        };
        if let Err(e) = self.wiring.shared.record_event(record).await {
            tracing::warn!(plugin = %job.plugin, object = %job.primary.key, "cannot record the shadow difference as an Event: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn ran(answer: CallError, cpu: Option<Duration>) -> Ran<Result<ValidResponse, CallError>> {
        Ran {
            answer: Err(answer),
            cpu,
        }
    }

    #[test]
    fn a_timeout_with_little_cpu_is_starvation_and_one_that_ran_is_the_candidates() {
        let timeout = || CallError::Timeout {
            limit: Duration::from_secs(1),
        };
        assert!(starved(&ran(timeout(), Some(Duration::from_millis(20)))));
        assert!(!starved(&ran(timeout(), Some(Duration::from_millis(900)))));
        // Where the CPU time is unknown, a timeout stays the candidate's.
        assert!(!starved(&ran(timeout(), None)));
        let trap = CallError::Trap {
            message: "unreachable".into(),
        };
        assert!(!starved(&ran(trap, Some(Duration::ZERO))));
    }
}
