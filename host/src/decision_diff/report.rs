//! A plan as people and CI read it: per differing primary, what the
//! candidate would do differently, then a summary; or the same as JSON.

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::{Value, json};

use super::both_versions::PrimaryPlan;
use super::compare::Difference;
use crate::plugin::LoadedPlugin;

/// Which version is which, as the report names them.
#[derive(Serialize)]
pub struct VersionName {
    pub name: String,
    pub version: String,
    pub sha256: String,
    pub source: String,
}

impl VersionName {
    pub fn of(plugin: &LoadedPlugin, source: String) -> Self {
        Self {
            name: plugin.metadata().name.clone(),
            version: plugin.metadata().version.clone(),
            sha256: plugin.sha256().to_string(),
            source,
        }
    }

    fn short(&self) -> String {
        format!(
            "{} {} ({}, {})",
            self.name,
            self.version,
            &self.sha256[..self.sha256.len().min(12)],
            self.source
        )
    }
}

/// True when some primary would be decided differently.
pub fn differs(plans: &[PrimaryPlan]) -> bool {
    plans.iter().any(|p| !p.differences.is_empty())
}

pub fn text(
    serving: &VersionName,
    candidate: &VersionName,
    kind: &str,
    plans: &[PrimaryPlan],
) -> String {
    let mut out = format!(
        "plan: {} against the serving {}, over {} {kind}(s)\n",
        candidate.short(),
        serving.short(),
        plans.len()
    );
    for plan in plans.iter().filter(|p| !p.differences.is_empty()) {
        let _ = writeln!(
            out,
            "\n{kind} {}: the candidate decides differently",
            plan.object
        );
        for d in &plan.differences {
            let _ = writeln!(out, "  {}", line(d));
        }
    }
    let differing = plans.iter().filter(|p| !p.differences.is_empty()).count();
    let _ = writeln!(
        out,
        "\n{differing} of {} {kind}(s) decided differently, {} the same",
        plans.len(),
        plans.len() - differing
    );
    out
}

pub fn json(
    serving: &VersionName,
    candidate: &VersionName,
    kind: &str,
    plans: &[PrimaryPlan],
) -> Value {
    let objects: Vec<Value> = plans
        .iter()
        .filter(|p| !p.differences.is_empty())
        .map(|p| json!({"object": p.object, "differences": p.differences}))
        .collect();
    json!({
        "serving": serving,
        "candidate": candidate,
        "kind": kind,
        "primaries": plans.len(),
        "differing": objects.len(),
        "objects": objects,
    })
}

pub(crate) fn line(d: &Difference) -> String {
    match d {
        Difference::Apply {
            object,
            path,
            serving,
            candidate,
        } => match (path.is_empty(), serving, candidate) {
            (true, None, Some(_)) => format!("apply {object}: only the candidate applies it"),
            (true, Some(_), None) => {
                format!("apply {object}: only the serving version applies it")
            }
            _ => format!(
                "apply {object}: {path}: {} -> {}",
                value(serving),
                value(candidate)
            ),
        },
        Difference::Status {
            path,
            serving,
            candidate,
        } => format!("status {path}: {} -> {}", value(serving), value(candidate)),
        Difference::Delete {
            object, candidate, ..
        } => {
            if *candidate {
                format!("delete {object}: only the candidate deletes it")
            } else {
                format!("delete {object}: only the serving version deletes it")
            }
        }
        Difference::Event {
            event,
            serving,
            candidate,
        } => format!("event {event}: posted {serving} -> {candidate} time(s)"),
        Difference::Requeue { serving, candidate } => format!(
            "requeue after: {} -> {}",
            serving.as_deref().unwrap_or("none"),
            candidate.as_deref().unwrap_or("none")
        ),
        Difference::Finalized { serving, candidate } => {
            format!("finalized: {serving} -> {candidate}")
        }
        Difference::Error { serving, candidate } => format!(
            "error: {} -> {}",
            serving.as_deref().unwrap_or("none"),
            candidate.as_deref().unwrap_or("none")
        ),
    }
}

/// A value on one line, shortened past 120 characters; `(none)` when
/// absent.
fn value(v: &Option<Value>) -> String {
    let Some(v) = v else {
        return "(none)".into();
    };
    let text = v.to_string();
    if text.chars().count() > 120 {
        format!("{}...", text.chars().take(117).collect::<String>())
    } else {
        text
    }
}
