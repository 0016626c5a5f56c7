//! Golden cases for admission: an AdmissionReview's request in, the
//! verdict and the JSON patch out.
//!
//! ```yaml
//! description: changing spec.masters is denied
//! admission:
//!   operation: UPDATE                # CREATE, UPDATE, DELETE or CONNECT
//!   object: {apiVersion: ..., kind: KubernetesCluster, ...}
//!   oldObject: {...}                 # update and delete
//!   userInfo: {username: alice}      # optional
//!   dryRun: false                    # optional
//! expect:                            # every key is checked; absent means none
//!   allowed: false
//!   message: "spec.masters cannot change ..."
//!   warnings: [...]
//!   patch: [{op: add, path: /spec/version, value: "1.33"}]
//! ```
//!
//! The case runs what the host's webhook runs for the request
//! ([`LoadedPlugin::admit`]): defaulting, validation and the failure policy,
//! so a failing plugin's case expects the policy's answer.

use reconciler_contract::{AdmissionRequest, Operation, UserInfo};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::outcome::{CaseOutcome, diff_yaml};
use crate::plugin::{AdmissionDecision, LoadedPlugin};

/// The request half of an admission case, named as in an AdmissionReview.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AdmissionCase {
    pub operation: Operation,
    #[serde(default)]
    pub object: Option<Value>,
    #[serde(default)]
    pub old_object: Option<Value>,
    #[serde(default)]
    pub user_info: UserInfo,
    #[serde(default)]
    pub dry_run: bool,
}

/// What an admission case expects, in the shape the runner prints the
/// actual answer in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AdmissionExpectation {
    pub allowed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patch: Vec<Value>,
}

impl AdmissionCase {
    pub fn request(&self) -> AdmissionRequest {
        AdmissionRequest {
            operation: self.operation,
            object: self.object.as_ref().map(Value::to_string),
            old_object: self.old_object.as_ref().map(Value::to_string),
            user_info: self.user_info.clone(),
            dry_run: self.dry_run,
        }
    }

    /// `namespace/name` of the object, for logs.
    pub fn object_name(&self) -> String {
        let object = self.object.as_ref().or(self.old_object.as_ref());
        let s = |p: &str| {
            object
                .and_then(|o| o.pointer(p))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        format!("{}/{}", s("/metadata/namespace"), s("/metadata/name"))
    }
}

/// The answer in the expectation's shape.
pub fn expectation_of(decision: AdmissionDecision) -> AdmissionExpectation {
    AdmissionExpectation {
        allowed: decision.allowed,
        message: decision.message,
        warnings: decision.warnings,
        patch: decision.patch,
    }
}

/// Runs one admission case.
pub fn check_admission(
    plugin: &LoadedPlugin,
    case: &AdmissionCase,
    expect: Value,
    now_millis: i64,
) -> CaseOutcome {
    let expected: AdmissionExpectation = match serde_json::from_value(expect) {
        Ok(e) => e,
        Err(e) => return CaseOutcome::Broken(format!("not a valid admission expectation: {e}")),
    };
    if plugin.admission().is_none() {
        return CaseOutcome::Failed(format!(
            "plugin {} serves no admission (its admission settings are none, or it was built for the 0.2.0 contract)",
            plugin.name()
        ));
    }
    let decision = plugin.admit(case.request(), &case.object_name(), now_millis);
    let actual = expectation_of(decision);
    if expected == actual {
        CaseOutcome::Passed
    } else {
        CaseOutcome::Failed(diff_yaml(&expected, &actual))
    }
}
