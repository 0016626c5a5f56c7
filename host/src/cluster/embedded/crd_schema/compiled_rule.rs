//! One `x-kubernetes-validations` rule, as written in the CRD and as
//! compiled when the CRD is stored ([`CompiledRule::compile`], with the
//! rest of the CEL work, in [`super::cel_rules`]).
//!
//! Why the type stands apart from the CEL work: a schema holds its
//! compiled rules, and the CEL work walks the schema; with the type here
//! the schema owns its rules without depending on how they run.

use cel_interpreter::Program;
use serde::Deserialize;

/// One `x-kubernetes-validations` entry as written in the CRD.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleSpec {
    pub rule: String,
    pub message: Option<String>,
    pub field_path: Option<String>,
    pub reason: Option<String>,
}

/// One rule, parsed.
#[derive(Debug)]
pub struct CompiledRule {
    pub(super) spec: RuleSpec,
    pub(super) program: Program,
    /// A transition rule: it reads `oldSelf`, so it only runs on an update
    /// of a value that was there before.
    pub(super) transition: bool,
}
