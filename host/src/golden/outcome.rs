//! What a golden case came to, and the diff that shows a failure: shared
//! by the reconcile cases (`runner`) and the admission cases
//! (`admission_case`), which each decide their own outcome.

use std::path::PathBuf;
use std::time::Duration;

/// The result of one case file.
#[derive(Debug)]
pub struct CaseResult {
    pub file: PathBuf,
    pub description: Option<String>,
    pub elapsed: Duration,
    pub outcome: CaseOutcome,
}

#[derive(Debug)]
pub enum CaseOutcome {
    Passed,
    /// The plugin answered differently: a readable explanation or diff.
    Failed(String),
    /// The case file itself is wrong.
    Broken(String),
}

impl CaseResult {
    pub fn passed(&self) -> bool {
        matches!(self.outcome, CaseOutcome::Passed)
    }
}

pub(crate) fn to_yaml(e: &impl serde::Serialize) -> String {
    serde_yaml_ng::to_string(e).unwrap_or_else(|err| format!("<cannot print: {err}>"))
}

/// A unified diff of two expectations printed as YAML.
pub(crate) fn diff_yaml(
    expected: &impl serde::Serialize,
    actual: &impl serde::Serialize,
) -> String {
    let (expected, actual) = (to_yaml(expected), to_yaml(actual));
    similar::TextDiff::from_lines(&expected, &actual)
        .unified_diff()
        .context_radius(3)
        .header("expected", "actual")
        .to_string()
}
