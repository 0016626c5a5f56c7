//! Change cases: does a change of one object wake its primary, by the
//! plugin's declared triggers (WIT `triggers`, 0.2.3)? The host's own
//! comparison decides, so a passing case is what `run` does.
//!
//! ```yaml
//! description: the Deployment controller's status updates wake nothing
//! change:
//!   old: {apiVersion: apps/v1, kind: Deployment, metadata: {generation: 1, ...}, status: {readyReplicas: 1}}
//!   new: {apiVersion: apps/v1, kind: Deployment, metadata: {generation: 1, ...}, status: {readyReplicas: 2}}
//! expect:
//!   wakes: false
//! ```

use reconciler_contract::{KindRef, MapRule, triggers};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::outcome::{CaseOutcome, diff_yaml};
use crate::plugin::LoadedPlugin;

/// An object as the host held it and as a watch event brings it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeCase {
    pub old: Value,
    pub new: Value,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangeExpectation {
    wakes: bool,
}

pub fn check_change(plugin: &LoadedPlugin, case: &ChangeCase, expect: Value) -> CaseOutcome {
    let expected: ChangeExpectation = match serde_json::from_value(expect) {
        Ok(e) => e,
        Err(e) => {
            return CaseOutcome::Broken(format!(
                "not a valid change expectation (`wakes: true` or `wakes: false`): {e}"
            ));
        }
    };
    let (Some(kind), Some(old_kind)) =
        (KindRef::of_object(&case.new), KindRef::of_object(&case.old))
    else {
        return CaseOutcome::Broken(
            "`change.old` and `change.new` need apiVersion and kind".into(),
        );
    };
    if kind != old_kind {
        return CaseOutcome::Broken(format!(
            "`change.old` is a {old_kind} and `change.new` a {kind}: a change is of one object"
        ));
    }
    let metadata = plugin.metadata();
    let mapped = kind == metadata.primary
        || metadata.owns_kind(&kind)
        || metadata
            .reads
            .iter()
            .any(|r| r.kind == kind && r.maps_by != MapRule::None);
    if !mapped {
        return CaseOutcome::Broken(format!(
            "plugin {} has no primary, owned or mapped read kind {kind}: its changes wake nothing",
            plugin.name()
        ));
    }
    let actual = ChangeExpectation {
        wakes: metadata
            .trigger_of(&kind)
            .is_none_or(|changes| triggers::wakes(changes, &case.old, &case.new)),
    };
    if actual == expected {
        CaseOutcome::Passed
    } else {
        let declared = match metadata.trigger_of(&kind) {
            Some(changes) => format!("it wakes on {}", super::outcome::to_yaml(&changes).trim()),
            None => "it names no trigger for it, so any change wakes".into(),
        };
        CaseOutcome::Failed(format!(
            "{kind}: {declared}\n{}",
            diff_yaml(&expected, &actual)
        ))
    }
}
