//! A canary rollout: the candidate decides and writes for a growing share
//! of the primaries, one step at a time, and each step must keep the gate
//! for its whole interval before the next begins. A step that breaks the
//! gate rolls the candidate back at once: its share returns to the serving
//! version, which reconciles those primaries back.
//!
//! The rollout's state lives in the Plugin's `status.rollout.canary`
//! ([`CanaryRecord`]), written by the one replica that writes Plugins'
//! status and read by every other, so each replica gives the candidate the
//! same share and a new leader continues (or rolls back) from the step the
//! last one reached. What is decided here is pure: [`next`] takes the
//! record, the plan and what the candidate did, and says what comes next.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::cluster::clock::rfc3339;
use crate::engine::shadow_book::GateWindow;
use crate::plugin::canary_share::CanaryShare;

/// The steps when the spec gives none.
pub const DEFAULT_STEPS: [u32; 3] = [10, 50, 100];
/// How long a step lasts when the spec does not say.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(300);
/// The shortest step: a gate needs reconciles to judge.
pub const MIN_INTERVAL: Duration = Duration::from_secs(5);
/// The share of failed reconciles a step tolerates when the spec does not
/// say.
pub const DEFAULT_MAX_ERROR_RATE: f64 = 0.05;

/// A valid canary `spec.rollout`.
#[derive(Clone, Debug, PartialEq)]
pub struct CanaryPlan {
    /// Percent of the eligible primaries at each step; rising, ending at
    /// 100 (each 100 when the steps are waves).
    pub steps: Vec<u32>,
    /// Waves of member clusters, by their labels: at step `i` the
    /// candidate decides in the clusters the first `i + 1` select.
    pub waves: Vec<BTreeMap<String, String>>,
    pub interval: Duration,
    pub namespaces: BTreeSet<String>,
    pub match_labels: BTreeMap<String, String>,
    pub gate: Gate,
}

/// What a step must stay within.
#[derive(Clone, Debug, PartialEq)]
pub struct Gate {
    pub max_error_rate: f64,
    pub max_p99: Option<Duration>,
    pub max_disagreement: Option<f64>,
}

impl CanaryPlan {
    /// The share the candidate `candidate_sha256` decides for in `record`'s
    /// state; `None` once rolled back.
    pub fn share(&self, record: &CanaryRecord) -> Option<CanaryShare> {
        let (percent, clusters) = match record.phase {
            Phase::RolledBack => return None,
            Phase::Promoted => (100, Vec::new()),
            Phase::Progressing => {
                let waves = self.waves.get(..=record.step).unwrap_or_default();
                (*self.steps.get(record.step)?, waves.to_vec())
            }
        };
        Some(CanaryShare {
            candidate_sha256: record.candidate_sha256.clone(),
            percent,
            namespaces: self.namespaces.clone(),
            match_labels: self.match_labels.clone(),
            clusters,
        })
    }

    /// What step `step` gives the candidate, in words.
    pub fn describe(&self, step: usize, percent: u32) -> String {
        match self.waves.get(step) {
            Some(labels) => format!(
                "wave {} of {}: the candidate decides for every eligible primary in the clusters of waves 1 to {} (this one: {})",
                step + 1,
                self.waves.len(),
                step + 1,
                selector_text(labels)
            ),
            None => format!(
                "step {} of {}: the candidate decides for {percent}% of the eligible primaries",
                step + 1,
                self.steps.len()
            ),
        }
    }
}

/// `a=b,c=d`, or `every cluster` for an empty selector.
fn selector_text(labels: &BTreeMap<String, String>) -> String {
    match labels.is_empty() {
        true => "every cluster".into(),
        false => labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// Percent steps rise above 0 and end at 100.
pub fn check_steps(steps: &[u32]) -> Result<(), String> {
    if steps.windows(2).any(|w| w[0] >= w[1]) || steps.first() == Some(&0) {
        return Err(format!(
            "spec.rollout.steps is {steps:?}: each step is a percent above the one before, starting above 0"
        ));
    }
    if steps.last() != Some(&100) {
        return Err(format!(
            "spec.rollout.steps is {steps:?}: the last step is 100, where the candidate decides for every primary"
        ));
    }
    Ok(())
}

/// Where a rollout stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// At `step`, its gate being watched.
    Progressing,
    /// Every step passed: the candidate decides for every primary.
    Promoted,
    /// A step broke the gate: the serving version decides for every primary.
    RolledBack,
}

/// `status.rollout.canary`: the state every replica follows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CanaryRecord {
    /// The candidate version this rollout is of: another one starts over.
    pub candidate_sha256: String,
    /// Index into `spec.rollout.steps`.
    pub step: usize,
    /// That step's percent, for people.
    pub percent: u32,
    /// When the step began (RFC 3339).
    pub step_started_at: String,
    pub phase: Phase,
    /// Why it rolled back, or was promoted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl CanaryRecord {
    /// The record in a Plugin's `status.rollout.canary`, if there is one
    /// that parses.
    pub fn of_status(status: &Value) -> Option<Self> {
        serde_json::from_value(status["rollout"]["canary"].clone()).ok()
    }

    /// When its step started, if `stepStartedAt` reads as a time.
    pub fn started_millis(&self) -> Option<i64> {
        self.step_started_at
            .parse::<k8s_openapi::jiff::Timestamp>()
            .ok()
            .map(|t| t.as_millisecond())
    }

    fn at_step(sha: &str, plan: &CanaryPlan, step: usize, now_millis: i64) -> Self {
        Self {
            candidate_sha256: sha.to_string(),
            step,
            percent: plan.steps[step],
            step_started_at: rfc3339(now_millis),
            phase: Phase::Progressing,
            reason: None,
            message: None,
        }
    }
}

/// What comes next for a rollout.
#[derive(Clone, Debug, PartialEq)]
pub enum Next {
    /// Nothing changes.
    Stay,
    /// The rollout starts (or starts over for a new candidate) at its first step.
    Start(CanaryRecord),
    /// The step passed: the next one begins.
    Advance(CanaryRecord),
    /// The last step passed.
    Promote(CanaryRecord),
    /// The gate broke; the reason says which limit.
    RollBack(CanaryRecord),
}

/// A change of a rollout's state, as it is told: in an Event, a log line,
/// a line of `dev` or `simulate`.
#[derive(Clone, Debug, PartialEq)]
pub struct Told {
    pub record: CanaryRecord,
    /// A rollback: a warning, not news.
    pub warning: bool,
    /// `CanaryStep`, `CanaryPromoted` or `RolledBack`.
    pub reason: &'static str,
    pub note: String,
}

impl Next {
    /// The new state and how it is told; `None` when nothing changes.
    pub fn told(self, plan: &CanaryPlan) -> Option<Told> {
        let (record, warning, reason, note) = match self {
            Next::Stay => return None,
            Next::Start(r) => {
                let note = format!(
                    "canary rollout started, {} for {}s",
                    plan.describe(r.step, r.percent),
                    plan.interval.as_secs()
                );
                (r, false, "CanaryStep", note)
            }
            Next::Advance(r) => {
                let note = plan.describe(r.step, r.percent);
                (r, false, "CanaryStep", note)
            }
            Next::Promote(r) => {
                let note = r.message.clone().unwrap_or_default();
                (r, false, "CanaryPromoted", note)
            }
            Next::RollBack(r) => {
                let note = format!("rolled back: {}", r.message.as_deref().unwrap_or_default());
                (r, true, "RolledBack", note)
            }
        };
        Some(Told {
            record,
            warning,
            reason,
            note,
        })
    }
}

/// What the gate says of `window`: `Err` names the limit broken.
pub fn judge(gate: &Gate, window: &GateWindow) -> Result<(), (&'static str, String)> {
    if window.decided > 0 {
        let rate = window.failed as f64 / window.decided as f64;
        if rate > gate.max_error_rate {
            return Err((
                "ErrorRate",
                format!(
                    "{} of the candidate's {} reconciles failed ({:.1}%, above maxErrorRate {:.1}%)",
                    window.failed,
                    window.decided,
                    rate * 100.0,
                    gate.max_error_rate * 100.0
                ),
            ));
        }
    }
    if let (Some(limit), Some(p99)) = (gate.max_p99, window.p99)
        && p99 > limit
    {
        return Err((
            "Latency",
            format!(
                "the candidate's p99 reconcile took {} ms, above maxP99 {} ms",
                p99.as_millis(),
                limit.as_millis()
            ),
        ));
    }
    if let Some(limit) = gate.max_disagreement
        && window.compared > 0
    {
        let rate = window.differed as f64 / window.compared as f64;
        if rate > limit {
            return Err((
                "Disagreement",
                format!(
                    "in shadow on the serving version's primaries the candidate decided differently in {} of {} reconciles ({:.1}%, above maxDisagreement {:.1}%)",
                    window.differed,
                    window.compared,
                    rate * 100.0,
                    limit * 100.0
                ),
            ));
        }
    }
    Ok(())
}

/// The step after `record` for candidate `sha`, given what the candidate
/// did since this replica began watching the step (`window`, from
/// `watching_since_millis`). A step passes once this replica has watched
/// it for a whole interval with the gate kept, so a new leader judges a
/// full interval of its own before it moves on; a broken gate rolls back
/// at once.
pub fn next(
    plan: &CanaryPlan,
    record: Option<&CanaryRecord>,
    sha: &str,
    window: &GateWindow,
    watching_since_millis: i64,
    now_millis: i64,
) -> Next {
    let record = match record {
        Some(r) if r.candidate_sha256 == sha && r.step < plan.steps.len() => r,
        _ => return Next::Start(CanaryRecord::at_step(sha, plan, 0, now_millis)),
    };
    if record.phase != Phase::Progressing {
        return Next::Stay;
    }
    if let Err((reason, message)) = judge(&plan.gate, window) {
        return Next::RollBack(CanaryRecord {
            phase: Phase::RolledBack,
            reason: Some(reason.to_string()),
            message: Some(format!(
                "at step {} ({}%): {message}; every primary is the serving version's again",
                record.step + 1,
                record.percent
            )),
            ..record.clone()
        });
    }
    let began = record
        .started_millis()
        .unwrap_or(now_millis)
        .max(watching_since_millis);
    if now_millis - began < plan.interval.as_millis() as i64 {
        return Next::Stay;
    }
    match record.step + 1 < plan.steps.len() {
        true => Next::Advance(CanaryRecord::at_step(
            sha,
            plan,
            record.step + 1,
            now_millis,
        )),
        false => Next::Promote(CanaryRecord {
            phase: Phase::Promoted,
            reason: Some("AllStepsPassed".into()),
            message: Some(format!(
                "every step passed ({:?}): the candidate decides for every primary; make it the serving version (spec.source, or the NAME.wasm file) to end the rollout",
                plan.steps
            )),
            ..record.clone()
        }),
    }
}

/// The status patch that writes `record` (with a condition `RolledBack`
/// when it rolled back) and the one-line summary `kubectl get` shows.
pub fn status_patch(plan: &CanaryPlan, record: &CanaryRecord, now_millis: i64) -> Value {
    let summary = match record.phase {
        Phase::Progressing if !plan.waves.is_empty() => {
            format!("canary wave {} of {}", record.step + 1, plan.waves.len())
        }
        Phase::Progressing => format!(
            "canary {}% (step {} of {})",
            record.percent,
            record.step + 1,
            plan.steps.len()
        ),
        Phase::Promoted => "canary promoted: the candidate decides for every primary".into(),
        Phase::RolledBack => format!(
            "canary rolled back at {}%: {}",
            record.percent,
            record.reason.as_deref().unwrap_or("")
        ),
    };
    let conditions = match record.phase {
        Phase::RolledBack => json!([{
            "type": "RolledBack",
            "status": "True",
            "reason": record.reason,
            "message": record.message,
            "lastTransitionTime": rfc3339(now_millis),
        }]),
        _ => json!([]),
    };
    json!({ "status": { "rollout": {
        "canary": record,
        "conditions": conditions,
        "summary": summary,
    } } })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(json: Value) -> Result<CanaryPlan, String> {
        crate::plugin_resources::spec::rollout_plan(json)
    }

    fn basic() -> CanaryPlan {
        plan(json!({"candidate": "r/p:2", "mode": "canary", "steps": [10, 50, 100], "interval": "1m"}))
            .unwrap()
    }

    const MINUTE: i64 = 60_000;

    #[test]
    fn a_plan_has_rising_steps_to_100_a_long_enough_interval_and_shares_as_rates() {
        let p = plan(json!({"candidate": "r/p:2"})).unwrap();
        assert_eq!(p.steps, DEFAULT_STEPS);
        assert_eq!(p.interval, DEFAULT_INTERVAL);
        assert_eq!(p.gate.max_error_rate, DEFAULT_MAX_ERROR_RATE);
        for (bad, says) in [
            (json!({"steps": [50, 10, 100]}), "above the one before"),
            (json!({"steps": [0, 100]}), "above the one before"),
            (json!({"steps": [10, 50]}), "the last step is 100"),
            (json!({"interval": "1s"}), "at least 5s"),
            (json!({"gate": {"maxErrorRate": 5}}), "maxErrorRate is 5"),
            (json!({"gate": {"maxP99": "soon"}}), "maxP99"),
        ] {
            let mut spec = bad.clone();
            spec["candidate"] = json!("r/p:2");
            let e = plan(spec).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_rollout_starts_steps_up_after_each_full_interval_and_is_promoted_at_the_end() {
        let p = basic();
        let quiet = GateWindow::default();
        let Next::Start(r) = next(&p, None, "c", &quiet, 0, 0) else {
            panic!("starts")
        };
        assert_eq!((r.step, r.percent, r.phase), (0, 10, Phase::Progressing));
        assert_eq!(p.share(&r).unwrap().percent, 10);
        assert_eq!(next(&p, Some(&r), "c", &quiet, 0, MINUTE - 1), Next::Stay);
        let Next::Advance(r) = next(&p, Some(&r), "c", &quiet, 0, MINUTE) else {
            panic!("advances")
        };
        assert_eq!((r.step, r.percent), (1, 50));
        let Next::Advance(r) = next(&p, Some(&r), "c", &quiet, 0, 2 * MINUTE) else {
            panic!("advances")
        };
        let Next::Promote(r) = next(&p, Some(&r), "c", &quiet, 0, 3 * MINUTE) else {
            panic!("promoted")
        };
        assert_eq!(p.share(&r).unwrap().percent, 100);
        assert_eq!(next(&p, Some(&r), "c", &quiet, 0, 9 * MINUTE), Next::Stay);
        // Another candidate version starts over.
        assert!(matches!(
            next(&p, Some(&r), "d", &quiet, 0, 9 * MINUTE),
            Next::Start(_)
        ));
    }

    #[test]
    fn a_broken_gate_rolls_back_at_once_and_a_new_watcher_judges_a_whole_interval() {
        let p = basic();
        let Next::Start(r) = next(&p, None, "c", &GateWindow::default(), 0, 0) else {
            panic!("starts")
        };
        let failing = GateWindow {
            decided: 10,
            failed: 1,
            ..GateWindow::default()
        };
        let Next::RollBack(back) = next(&p, Some(&r), "c", &failing, 0, 1) else {
            panic!("rolls back")
        };
        assert_eq!(back.reason.as_deref(), Some("ErrorRate"));
        assert!(
            back.message
                .as_deref()
                .unwrap()
                .contains("1 of the candidate's 10")
        );
        assert_eq!(p.share(&back), None);
        assert_eq!(next(&p, Some(&back), "c", &failing, 0, MINUTE), Next::Stay);
        // A leader that began watching half-way waits a whole interval of its own.
        let quiet = GateWindow::default();
        assert_eq!(
            next(&p, Some(&r), "c", &quiet, MINUTE / 2, MINUTE),
            Next::Stay
        );
        assert!(matches!(
            next(&p, Some(&r), "c", &quiet, MINUTE / 2, MINUTE + MINUTE / 2),
            Next::Advance(_)
        ));
        let slow = plan(json!({"candidate": "r/p:2", "mode": "canary", "gate": {"maxP99": "1s", "maxDisagreement": 0.5}})).unwrap();
        let w = GateWindow {
            decided: 3,
            p99: Some(Duration::from_secs(2)),
            ..GateWindow::default()
        };
        assert_eq!(judge(&slow.gate, &w).unwrap_err().0, "Latency");
        let w = GateWindow {
            compared: 4,
            differed: 3,
            ..GateWindow::default()
        };
        assert_eq!(judge(&slow.gate, &w).unwrap_err().0, "Disagreement");
    }

    #[test]
    fn waves_of_clusters_are_steps_each_adding_its_clusters() {
        let p = plan(json!({"candidate": "r/p:2", "mode": "canary",
            "clusters": [{"matchLabels": {"env": "staging"}}, {}]}))
        .unwrap();
        assert_eq!(p.steps, [100, 100]);
        let Next::Start(r) = next(&p, None, "c", &GateWindow::default(), 0, 0) else {
            panic!("starts")
        };
        let share = p.share(&r).unwrap();
        let labels = |env: &str| BTreeMap::from([("env".to_string(), env.to_string())]);
        let object = json!({});
        assert!(share.takes(Some("ns"), "a", &object, &labels("staging")));
        assert!(!share.takes(Some("ns"), "a", &object, &labels("prod")));
        let Next::Advance(r) = next(
            &p,
            Some(&r),
            "c",
            &GateWindow::default(),
            0,
            DEFAULT_INTERVAL.as_millis() as i64,
        ) else {
            panic!("the next wave")
        };
        assert!(
            p.share(&r)
                .unwrap()
                .takes(Some("ns"), "a", &object, &labels("prod"))
        );
        assert_eq!(
            status_patch(&p, &r, 0)["status"]["rollout"]["summary"],
            "canary wave 2 of 2"
        );
        let e =
            plan(json!({"candidate": "r/p:2", "steps": [50, 100], "clusters": [{}]})).unwrap_err();
        assert!(e.contains("steps or clusters"), "{e}");
    }

    /// What a Plugin's status says is read with suspicion: a record that
    /// does not parse, names a step the plan has not, or another candidate
    /// starts the rollout over at its smallest step; a percent written
    /// into it gives nothing beyond its step's share.
    #[test]
    fn a_malformed_or_forged_record_starts_over_or_gives_only_its_steps_share() {
        let p = basic();
        let starts_over = |record: Option<&CanaryRecord>| {
            matches!(
                next(&p, record, "c", &GateWindow::default(), 0, MINUTE),
                Next::Start(r) if r.step == 0 && r.percent == 10
            )
        };
        for junk in [
            json!({"rollout": {"canary": {"step": "two"}}}),
            json!({"rollout": {"canary": {"candidateSha256": "c", "step": 1, "percent": 50,
                "stepStartedAt": "2026-01-01T00:00:00Z", "phase": "Sideways"}}}),
            json!({"rollout": {"canary": "yes"}}),
        ] {
            let record = CanaryRecord::of_status(&junk);
            assert_eq!(record, None, "{junk}");
            assert!(starts_over(record.as_ref()));
        }
        let Next::Start(mut record) = next(&p, None, "c", &GateWindow::default(), 0, 0) else {
            panic!("starts")
        };
        record.step = 7;
        assert!(starts_over(Some(&record)), "a step past the plan");
        record.step = 0;
        record.candidate_sha256 = "another".into();
        assert!(starts_over(Some(&record)), "another candidate's record");
        record.candidate_sha256 = "c".into();
        record.percent = 100;
        assert_eq!(p.share(&record).unwrap().percent, 10);
        // A time that does not read counts the step from now: not promoted
        // early.
        record.step_started_at = "yesterday".into();
        assert!(matches!(
            next(
                &p,
                Some(&record),
                "c",
                &GateWindow::default(),
                0,
                MINUTE / 2
            ),
            Next::Stay
        ));
    }

    #[test]
    fn the_record_round_trips_through_the_status_patch() {
        let p = basic();
        let Next::Start(r) = next(&p, None, "c", &GateWindow::default(), 0, 0) else {
            panic!("starts")
        };
        let patch = status_patch(&p, &r, 0);
        assert_eq!(CanaryRecord::of_status(&patch["status"]), Some(r));
        assert_eq!(
            patch["status"]["rollout"]["summary"],
            "canary 10% (step 1 of 3)"
        );
    }
}
