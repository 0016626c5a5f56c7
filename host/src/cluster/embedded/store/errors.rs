//! How a store call fails, and the errors its checks build, worded as the
//! API server words them so a refusal in `dev` reads as it will on a cluster.

use crate::cluster::backend::ObjectKey;
use crate::cluster::embedded::field_set::FieldConflict;

/// Why a store call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("{key} not found")]
    NotFound { key: String },
    #[error("{key} is invalid: {message}")]
    Invalid { key: String, message: String },
    #[error("conflict on {key}: {message}")]
    Conflict { key: String, message: String },
    #[error("the embedded cluster is full: it holds at most {limit} objects")]
    Full { limit: usize },
    /// A create in a namespace whose Namespace object is being deleted.
    #[error(
        "{key} is forbidden: unable to create new content in namespace {namespace} because it is being terminated"
    )]
    NamespaceTerminating { key: String, namespace: String },
}

pub(super) fn not_found(key: &ObjectKey) -> StoreError {
    StoreError::NotFound {
        key: key.to_string(),
    }
}

pub(super) fn invalid(key: &ObjectKey, message: &str) -> StoreError {
    StoreError::Invalid {
        key: key.to_string(),
        message: message.to_string(),
    }
}

pub(super) fn conflict(key: &ObjectKey, conflicts: &[FieldConflict]) -> StoreError {
    let fields: Vec<String> = conflicts.iter().map(ToString::to_string).collect();
    let message = format!(
        "apply would change fields owned by others: {}; apply with force to take them over",
        fields.join("; ")
    );
    StoreError::Conflict {
        key: key.to_string(),
        message,
    }
}

pub(super) fn require_manager(key: &ObjectKey, field_manager: &str) -> Result<(), StoreError> {
    if field_manager.trim().is_empty() {
        return Err(invalid(key, "a field manager is required"));
    }
    Ok(())
}

pub(super) fn require_finalizer(key: &ObjectKey, finalizer: &str) -> Result<(), StoreError> {
    if finalizer.trim().is_empty() {
        return Err(invalid(key, "a finalizer must be a non-empty string"));
    }
    Ok(())
}
