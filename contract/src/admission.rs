//! Plain Rust mirrors of the WIT `admission` interface (0.2.1).
//!
//! The host builds an [`AdmissionRequest`] from an AdmissionReview, the
//! guest glue and the native harness hand it to the plugin, and the plugin's
//! [`Verdict`] and defaulted object come back the same way. Field names
//! follow AdmissionReview's (camelCase), so golden cases read like the review
//! kubectl users see.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What the API server is doing to the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        })
    }
}

/// Who asked (AdmissionReview `userInfo`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserInfo {
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub groups: Vec<String>,
    /// Extra attributes, sorted by key.
    #[serde(default)]
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

/// One admission request, objects as JSON text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmissionRequest {
    pub operation: Operation,
    /// The new object: create and update.
    pub object: Option<String>,
    /// The object before the change: update and delete.
    pub old_object: Option<String>,
    pub user_info: UserInfo,
    pub dry_run: bool,
}

/// A plugin's answer to one request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub allowed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl Verdict {
    /// Admit the request.
    pub fn allow() -> Self {
        Self {
            allowed: true,
            ..Self::default()
        }
    }

    /// Refuse the request; `message` is what kubectl shows the user.
    pub fn deny(message: impl Into<String>) -> Self {
        Self {
            allowed: false,
            message: Some(message.into()),
            warnings: Vec::new(),
        }
    }

    /// Adds a warning kubectl shows whether allowed or not.
    pub fn warn(mut self, warning: impl Into<String>) -> Self {
        self.warnings.push(warning.into());
        self
    }
}

/// What the host does when an admission call fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailurePolicy {
    /// Deny the request, naming the failure.
    #[default]
    Fail,
    /// Admit the request unchanged.
    Ignore,
}

impl fmt::Display for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        })
    }
}

/// A plugin's declaration that it serves admission for its primary kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionSettings {
    /// Empty means create and update.
    #[serde(default)]
    pub operations: Vec<Operation>,
    /// The plugin defaults objects (`apply-defaults`).
    #[serde(default)]
    pub mutating: bool,
    #[serde(default)]
    pub failure_policy: FailurePolicy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u32>,
}

impl Default for AdmissionSettings {
    fn default() -> Self {
        Self::validating()
    }
}

impl AdmissionSettings {
    /// Deadline of one admission call when the plugin sets none.
    pub const DEFAULT_TIMEOUT_MS: u32 = 2_000;

    /// Validation of creates and updates, failing closed.
    pub fn validating() -> Self {
        Self {
            operations: Vec::new(),
            mutating: false,
            failure_policy: FailurePolicy::Fail,
            timeout_ms: None,
        }
    }

    /// Also defaults objects.
    pub fn mutating(mut self) -> Self {
        self.mutating = true;
        self
    }

    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.failure_policy = policy;
        self
    }

    pub fn operations(mut self, operations: impl IntoIterator<Item = Operation>) -> Self {
        self.operations = operations.into_iter().collect();
        self
    }

    pub fn timeout_ms(mut self, ms: u32) -> Self {
        self.timeout_ms = Some(ms);
        self
    }

    /// The operations the plugin is called for, empty resolved.
    pub fn effective_operations(&self) -> Vec<Operation> {
        if self.operations.is_empty() {
            vec![Operation::Create, Operation::Update]
        } else {
            let mut ops = self.operations.clone();
            ops.sort();
            ops.dedup();
            ops
        }
    }
}
