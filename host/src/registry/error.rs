//! Why a registry operation failed, in the words a Plugin's status shows:
//! one error type for every kind of registry read (bounded reads, pulls,
//! pushes), so each reports failures the same way without depending on the
//! others.

use std::path::PathBuf;

use oci_client::errors::OciDistributionError;

use super::artifact::ArtifactError;
use super::reference::PluginReference;

/// Why a registry operation failed; [`RegistryError::reason`] is the
/// condition reason a Plugin's status shows.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("{reference}: the registry cannot be reached or refused the request: {message}")]
    Unreachable { reference: String, message: String },
    #[error(
        "{reference}: the registry refused the credentials ({message}); give them in a docker config (pull secret, or ~/.docker/config.json)"
    )]
    Unauthorized { reference: String, message: String },
    #[error("{reference}: not found in the registry ({message})")]
    NotFound { reference: String, message: String },
    #[error("{reference} is not a plugin: {error}")]
    NotAPlugin {
        reference: String,
        error: ArtifactError,
    },
    #[error(
        "{reference}: the registry sent content whose digest is {actual}, not the {expected} asked for"
    )]
    DigestMismatch {
        reference: String,
        expected: String,
        actual: String,
    },
    #[error(
        "{reference}: the component's bytes do not match its digest ({detail}): the registry's copy is corrupt or was tampered with, and nothing of it is kept"
    )]
    ContentMismatch { reference: String, detail: String },
    #[error(
        "{reference}: the registry sent more than {cap} bytes for {what}; nothing of it is kept"
    )]
    TooLarge {
        reference: String,
        what: String,
        cap: usize,
    },
    #[error("{reference}: the manifest is not an OCI image manifest: {message}")]
    BadManifest { reference: String, message: String },
    #[error("{reference}: cannot write the pulled plugin to {dir}: {error}")]
    Cache {
        reference: String,
        dir: PathBuf,
        error: std::io::Error,
    },
}

impl RegistryError {
    /// A word for `kubectl get plugins` and Events.
    pub fn reason(&self) -> &'static str {
        match self {
            RegistryError::Unreachable { .. } | RegistryError::Cache { .. } => "PullFailed",
            RegistryError::Unauthorized { .. } => "PullUnauthorized",
            RegistryError::NotFound { .. } => "NotFound",
            RegistryError::NotAPlugin { .. }
            | RegistryError::BadManifest { .. }
            | RegistryError::TooLarge { .. } => "NotAPlugin",
            RegistryError::DigestMismatch { .. } | RegistryError::ContentMismatch { .. } => {
                "DigestMismatch"
            }
        }
    }
}

/// Sorts an oci-client error into what a user can act on.
pub(crate) fn classify(reference: &PluginReference, error: OciDistributionError) -> RegistryError {
    let reference = reference.to_string();
    let message = error_chain(&error);
    match &error {
        OciDistributionError::AuthenticationFailure(_)
        | OciDistributionError::UnauthorizedError { .. } => {
            RegistryError::Unauthorized { reference, message }
        }
        OciDistributionError::ImageManifestNotFoundError(_) => {
            RegistryError::NotFound { reference, message }
        }
        OciDistributionError::ServerError {
            code: 401 | 403, ..
        } => RegistryError::Unauthorized { reference, message },
        OciDistributionError::ServerError { code: 404, .. } => {
            RegistryError::NotFound { reference, message }
        }
        OciDistributionError::RegistryError { envelope, .. }
            if envelope.errors.iter().any(|e| {
                matches!(
                    e.code,
                    oci_client::errors::OciErrorCode::Unauthorized
                        | oci_client::errors::OciErrorCode::Denied
                )
            }) =>
        {
            RegistryError::Unauthorized { reference, message }
        }
        OciDistributionError::RegistryError { envelope, .. }
            if envelope.errors.iter().any(|e| {
                matches!(
                    e.code,
                    oci_client::errors::OciErrorCode::ManifestUnknown
                        | oci_client::errors::OciErrorCode::NameUnknown
                        | oci_client::errors::OciErrorCode::BlobUnknown
                )
            }) =>
        {
            RegistryError::NotFound { reference, message }
        }
        _ if message.contains("UnknownIssuer") || message.contains("invalid peer certificate") => {
            RegistryError::Unreachable {
                reference,
                message: format!("{message} (give the registry's CA with --registry-ca)"),
            }
        }
        _ => RegistryError::Unreachable { reference, message },
    }
}

/// An error and its causes on one line: reqwest's own text says only
/// "error sending request".
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}
