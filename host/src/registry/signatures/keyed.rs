//! Signatures made with a key pair (`cosign sign --key`, `push
//! --sign-key`): checked on the layers the capped read took, with no
//! further read.

use sigstore::cosign::SignatureLayer;
use sigstore::cosign::verification_constraint::{PublicKeyVerifier, VerificationConstraint};

use super::policy::{Signer, TrustedKey};
use super::verify_error::VerifyError;

/// The first of `keys` one of `layers` verifies against.
pub(super) fn key_signer(
    keys: &[TrustedKey],
    layers: &[SignatureLayer],
) -> Result<Option<Signer>, VerifyError> {
    for key in keys {
        let verifier = PublicKeyVerifier::try_from(key.pem())
            .map_err(|e| VerifyError::Unusable(format!("{}: {e}", key.name)))?;
        if layers
            .iter()
            .any(|layer| verifier.verify(layer).unwrap_or(false))
        {
            return Ok(Some(Signer::Key(key.name.clone())));
        }
    }
    Ok(None)
}
