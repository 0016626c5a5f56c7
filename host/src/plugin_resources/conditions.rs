//! A Plugin's status: conditions with reasons, and what serves.

use serde::Serialize;

/// One condition, as Kubernetes writes them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: &'static str,
    /// "True", "False" or "Unknown".
    pub status: &'static str,
    pub reason: String,
    pub message: String,
    pub last_transition_time: String,
    pub observed_generation: i64,
}

/// What the host last found for a Plugin.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginResourceStatus {
    pub observed_generation: i64,
    /// The digest serving now (the last good one while a newer fails).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The digest the source names now, when it differs from the one serving.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latest_digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugin_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugin_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primary_kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    pub conditions: Vec<Condition>,
}

/// A condition's state without its time: what a transition compares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    pub ok: Option<bool>,
    pub reason: String,
    pub message: String,
}

impl State {
    pub fn yes(reason: &str, message: impl Into<String>) -> Self {
        Self {
            ok: Some(true),
            reason: reason.into(),
            message: message.into(),
        }
    }
    pub fn no(reason: &str, message: impl Into<String>) -> Self {
        Self {
            ok: Some(false),
            reason: reason.into(),
            message: message.into(),
        }
    }
    pub fn unknown(reason: &str, message: impl Into<String>) -> Self {
        Self {
            ok: None,
            reason: reason.into(),
            message: message.into(),
        }
    }
    fn status(&self) -> &'static str {
        match self.ok {
            Some(true) => "True",
            Some(false) => "False",
            None => "Unknown",
        }
    }
}

/// Sets condition `type_` to `state`, keeping its transition time unless
/// its status changed; whether the status or reason changed (an Event).
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &'static str,
    state: &State,
    generation: i64,
    now: &str,
) -> bool {
    let existing = conditions.iter_mut().find(|c| c.type_ == type_);
    match existing {
        Some(c) => {
            let changed = c.status != state.status() || c.reason != state.reason;
            if c.status != state.status() {
                c.last_transition_time = now.to_string();
            }
            c.status = state.status();
            c.reason = state.reason.clone();
            c.message = state.message.clone();
            c.observed_generation = generation;
            changed
        }
        None => {
            conditions.push(Condition {
                type_,
                status: state.status(),
                reason: state.reason.clone(),
                message: state.message.clone(),
                last_transition_time: now.to_string(),
                observed_generation: generation,
            });
            true
        }
    }
}

/// The reason a load refusal shows, from the directory's account of it.
pub fn load_reason(error: &str, waiting_for_kinds: bool) -> &'static str {
    let lower = error.to_lowercase();
    if waiting_for_kinds {
        if lower.contains("forbidden") || lower.contains("rbac") {
            "RBACShort"
        } else {
            "KindNotServed"
        }
    } else if lower.contains("contract")
        || lower.contains("cannot link")
        || lower.contains("export")
    {
        "ContractMismatch"
    } else if lower.contains("already reconciles") || lower.contains("already used") {
        "KindTaken"
    } else {
        "LoadFailed"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transition_keeps_its_time_until_the_status_changes() {
        let mut c = Vec::new();
        assert!(set(
            &mut c,
            "Ready",
            &State::no("PullFailed", "down"),
            1,
            "t1"
        ));
        assert!(!set(
            &mut c,
            "Ready",
            &State::no("PullFailed", "still down"),
            1,
            "t2"
        ));
        assert_eq!(
            (c[0].last_transition_time.as_str(), c[0].message.as_str()),
            ("t1", "still down")
        );
        assert!(set(
            &mut c,
            "Ready",
            &State::no("SignatureMissing", "x"),
            2,
            "t3"
        ));
        assert_eq!(
            c[0].last_transition_time, "t1",
            "same status, new reason: same transition"
        );
        assert!(set(&mut c, "Ready", &State::yes("Serving", "ok"), 2, "t4"));
        assert_eq!(
            (c[0].status, c[0].last_transition_time.as_str()),
            ("True", "t4")
        );
    }

    #[test]
    fn load_refusals_get_the_reasons_users_look_for() {
        assert_eq!(
            load_reason("cannot watch x: 403 forbidden", true),
            "RBACShort"
        );
        assert_eq!(
            load_reason(
                "cannot watch example.com/v1 PodSet: the server does not serve it",
                true
            ),
            "KindNotServed"
        );
        assert_eq!(
            load_reason(
                "plugin podset reconciles X, which plugin a from b already reconciles",
                false
            ),
            "KindTaken"
        );
        assert_eq!(
            load_reason("cannot link the component: missing import", false),
            "ContractMismatch"
        );
        assert_eq!(
            load_reason("calling metadata failed: trapped", false),
            "LoadFailed"
        );
    }
}
