//! Canary rollouts of candidate files, for `dev` and `simulate`: a
//! `NAME.rollout.yaml` beside `NAME.candidate.wasm` holds what a Plugin's
//! `spec.rollout` would (`steps`, `interval`, `namespaces`, `selector`,
//! `gate`, `clusters`; `mode` is canary unless it says shadow). The
//! rollout is stepped here on the engine's clock by the rules a Plugin's
//! follows ([`canary`]), so `simulate` steps it in virtual time, the same
//! every run. Its state lives in this process only and is told as lines.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::engine::shadow_book::ShadowBook;
use crate::plugin::candidates::{CANDIDATE_SUFFIX, Candidates};
use crate::plugin_resources::canary::{self, CanaryPlan, CanaryRecord, Phase};
use crate::plugin_resources::spec::RolloutSpec;

/// The suffix of a candidate file's rollout.
pub const ROLLOUT_SUFFIX: &str = ".rollout.yaml";

/// The rollouts of a plugins directory's candidate files.
#[derive(Clone, Debug, Default)]
pub struct FileRollouts {
    dir: PathBuf,
    /// By file stem (`podset` for `podset.rollout.yaml`): the plan, or why
    /// the file is not one; `None` for a shadow-only rollout.
    plans: BTreeMap<String, Result<Option<CanaryPlan>, String>>,
    /// Problems told already, so each is told once.
    told: BTreeMap<String, String>,
    /// By plugin name: where its rollout stands, when its step began, and
    /// how long a step lasts.
    states: BTreeMap<String, (CanaryRecord, i64, Duration)>,
}

impl FileRollouts {
    /// The rollout files of `dir` as they are now.
    pub fn read(dir: &Path) -> Self {
        let mut rollouts = Self {
            dir: dir.to_path_buf(),
            ..Self::default()
        };
        rollouts.reread();
        rollouts
    }

    /// Reads the directory's rollout files again (a file added, changed or
    /// removed takes effect at the next step).
    pub fn reread(&mut self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            self.plans.clear();
            return;
        };
        let mut plans = BTreeMap::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(stem) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(ROLLOUT_SUFFIX))
            else {
                continue;
            };
            plans.insert(stem.to_string(), plan_in(&path));
        }
        self.plans = plans;
    }

    /// One look at every candidate's rollout at `now`: each is started,
    /// stepped, promoted or rolled back as its gate says, and its candidate
    /// given the share its state says. Returns what happened, as lines.
    pub fn step(&mut self, candidates: &Candidates, book: &ShadowBook, now: i64) -> Vec<String> {
        let mut lines = self.problems();
        let mut stepped = Vec::new();
        for (plugin, candidate) in candidates.all() {
            let stem = candidate
                .path()
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(CANDIDATE_SUFFIX))
                .unwrap_or_default()
                .to_string();
            let Some(Ok(Some(plan))) = self.plans.get(&stem) else {
                candidates.set_share(&plugin, None);
                continue;
            };
            stepped.push(plugin.clone());
            let sha = candidate.sha256();
            let state = self.states.get(&plugin);
            let record = state.map(|(r, _, _)| r);
            let since = state.map_or(now, |(_, since, _)| *since);
            let window = book.window(&plugin, sha, since);
            let next = canary::next(plan, record, sha, &window, since, now);
            if let Some(told) = next.told(plan) {
                let version = &candidate.metadata().version;
                lines.push(format!("canary {plugin} {version}: {}", told.note));
                let state = (told.record, now, plan.interval);
                self.states.insert(plugin.clone(), state);
            }
            let share = self.states.get(&plugin).and_then(|(r, _, _)| plan.share(r));
            candidates.set_share(&plugin, share);
        }
        self.states.retain(|plugin, _| stepped.contains(plugin));
        lines
    }

    /// When the next step of a rollout in progress is due.
    pub fn next_due(&self) -> Option<i64> {
        self.states
            .values()
            .filter(|(record, _, _)| record.phase == Phase::Progressing)
            .map(|(_, since, interval)| since + interval.as_millis() as i64)
            .min()
    }

    /// Rollout files that are not rollouts, each told once.
    fn problems(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        for (stem, plan) in &self.plans {
            if let Err(why) = plan
                && self.told.get(stem) != Some(why)
            {
                lines.push(format!(
                    "{stem}{ROLLOUT_SUFFIX}: {why}; its candidate runs in shadow"
                ));
                self.told.insert(stem.clone(), why.clone());
            }
        }
        lines
    }
}

/// The plan a rollout file holds.
fn plan_in(path: &Path) -> Result<Option<CanaryPlan>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot be read: {e}"))?;
    let mut value: serde_json::Value = match text.trim().is_empty() {
        true => serde_json::json!({}),
        false => serde_yaml_ng::from_str(&text).map_err(|e| format!("is not YAML: {e}"))?,
    };
    let Some(fields) = value.as_object_mut() else {
        return Err("is not a mapping of spec.rollout's fields".into());
    };
    if fields.contains_key("candidate") {
        return Err("names a candidate: the candidate is the NAME.candidate.wasm beside it".into());
    }
    fields.insert("candidate".into(), serde_json::json!("file"));
    let spec: RolloutSpec = serde_json::from_value(value).map_err(|e| e.to_string())?;
    match spec.mode.as_deref() {
        None | Some("canary") => spec.canary_plan().map(Some),
        Some("shadow") => Ok(None),
        Some(other) => Err(format!("mode is {other:?}: it is canary or shadow")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollout_file_is_spec_rollouts_fields_without_the_candidate() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        write("podset.rollout.yaml", "steps: [50, 100]\ninterval: 1m\n");
        write("web.rollout.yaml", "mode: shadow\n");
        write("bad.rollout.yaml", "steps: [50]\n");
        write("named.rollout.yaml", "candidate: x\n");
        let mut rollouts = FileRollouts::read(dir.path());
        let plan = rollouts.plans["podset"].clone().unwrap().unwrap();
        assert_eq!(plan.steps, [50, 100]);
        assert_eq!(rollouts.plans["web"], Ok(None));
        let problems = rollouts.problems();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("bad.rollout.yaml: spec.rollout.steps"));
        assert!(problems[1].contains("names a candidate"));
        assert!(rollouts.problems().is_empty(), "each told once");
    }
}
