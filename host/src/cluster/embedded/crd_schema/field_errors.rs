//! A refused field and the path that names it, as the API server writes
//! them.
//!
//! Why a module of its own: every check of a schema (the applied fields,
//! the value validations, the CEL rules) and the pruning report in these
//! terms, and none of them should have to import another for it.

/// One refused field: `spec.size: Required value`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub detail: String,
}

impl FieldError {
    /// Whether the API server leaves CEL rules unchecked because of this
    /// error: a wrong type or format, a missing field, a value outside an
    /// enum, or too long or too many (its TypeInvalid, Required,
    /// NotSupported, TooLong and TooMany errors, worded as below).
    pub fn blocks_rules(&self) -> bool {
        [
            "Required value",
            "Unsupported value",
            "Too long",
            "Too many",
        ]
        .iter()
        .any(|start| self.detail.starts_with(start))
            || self.detail.contains("in body must be of type")
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = if self.path.is_empty() {
            "<nil>"
        } else {
            &self.path
        };
        write!(f, "{path}: {}", self.detail)
    }
}

/// `spec.size`, `spec.tags[0]`: a field path as the API server writes one.
pub fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}
