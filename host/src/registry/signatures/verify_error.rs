//! Why a digest's signatures did not let it run, in the words a Plugin's
//! status shows; shared by the policy (a key that is not one), the capped
//! read and both checks.

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error(
        "{reference} has no signature (no {tag} tag in its repository); sign it with `reconciler-host push --sign-key` or cosign"
    )]
    Missing { reference: String, tag: String },
    #[error("{reference}: none of its {count} signature(s) verifies against {trusted}")]
    NotTrusted {
        reference: String,
        count: usize,
        trusted: String,
    },
    #[error("{reference}: cannot read its signatures: {message}")]
    Unreachable { reference: String, message: String },
    #[error("{reference}: its signatures are refused unread: {message}")]
    TooLarge { reference: String, message: String },
    #[error("the signature check cannot be performed: {0}")]
    Unusable(String),
}

impl VerifyError {
    /// A word for `kubectl get plugins` and Events.
    pub fn reason(&self) -> &'static str {
        match self {
            VerifyError::Missing { .. } => "SignatureMissing",
            VerifyError::NotTrusted { .. } => "SignatureNotTrusted",
            VerifyError::Unreachable { .. } => "SignatureUnreadable",
            VerifyError::TooLarge { .. } => "SignatureTooLarge",
            VerifyError::Unusable(_) => "VerificationUnavailable",
        }
    }
}
