//! Keyless signatures (a Fulcio certificate and a Rekor bundle in the
//! layer's annotations), checked against a trust root given as files:
//! nothing is fetched from the public Sigstore instance, so an air-gapped
//! cluster verifies as any other.
//!
//! sigstore verifies certificates and bundles only as it reads the layers
//! itself, so it reads them again, from a replay of what the capped read
//! took ([`super::replay`]), never from the registry.

use std::collections::BTreeMap;

use sha2::Digest as _;
use sigstore::cosign::verification_constraint::cert_subject_email_verifier::StringVerifier;
use sigstore::cosign::verification_constraint::{
    CertSubjectEmailVerifier, CertSubjectUrlVerifier, VerificationConstraint,
};
use sigstore::cosign::{ClientBuilder, CosignCapabilities, SignatureLayer};
use sigstore::registry::{Auth, OciReference};
use sigstore::trust::ManualTrustRoot;

use super::policy::{KeylessIdentity, Signer, TrustPolicy};
use super::replay::{Replay, Replayed};
use super::verify_error::VerifyError;
use crate::registry::content_digest::hex;
use crate::registry::error::error_chain;
use crate::registry::options::RegistryOptions;
use crate::registry::reference::{Digest, PluginReference};

/// The policy's trust root as sigstore takes it; refused if a file is not
/// PEM.
pub(super) fn trust_root(policy: &TrustPolicy) -> Result<ManualTrustRoot<'static>, VerifyError> {
    let fulcio_der: Vec<Vec<u8>> = policy
        .trust_root
        .iter()
        .flat_map(|r| r.fulcio_pem.iter())
        .map(|pem| pem_to_der(pem))
        .collect::<Result<_, _>>()?;
    // A Rekor bundle names its log by the SHA-256 of the log's public key
    // (DER): that is the key sigstore looks it up by.
    let rekor_keys: BTreeMap<String, Vec<u8>> = policy
        .trust_root
        .iter()
        .flat_map(|r| r.rekor_pem.iter())
        .map(|pem| pem_to_der(pem).map(|der| (hex(&sha2::Sha256::digest(&der)), der)))
        .collect::<Result<_, _>>()?;
    Ok(ManualTrustRoot {
        fulcio_certs: fulcio_der.into_iter().map(Into::into).collect(),
        rekor_keys,
        ctfe_keys: BTreeMap::new(),
    })
}

/// The first of the policy's keyless identities a signature of `digest`
/// is certified for, sigstore checking the layers `replayed` holds.
pub(super) async fn keyless_signer(
    options: &RegistryOptions,
    policy: &TrustPolicy,
    root: &ManualTrustRoot<'static>,
    reference: &PluginReference,
    digest: &Digest,
    replayed: Replayed,
) -> Result<Option<Signer>, VerifyError> {
    if policy.keyless.is_empty() {
        return Ok(None);
    }
    let certified = certified_layers(options, root, reference, digest, replayed).await?;
    for identity in &policy.keyless {
        if certified.iter().any(|layer| certified_for(identity, layer)) {
            return Ok(Some(Signer::Keyless {
                subject: identity.subject.clone(),
                issuer: identity.issuer.clone(),
            }));
        }
    }
    Ok(None)
}

/// The layers sigstore vouches for (chain to the Fulcio roots, Rekor
/// bundle), read from a replay of `replayed` within the request deadline.
async fn certified_layers(
    options: &RegistryOptions,
    root: &ManualTrustRoot<'static>,
    reference: &PluginReference,
    digest: &Digest,
    replayed: Replayed,
) -> Result<Vec<SignatureLayer>, VerifyError> {
    let pinned = reference.at_digest(digest).to_string();
    let replay = Replay::start(replayed)
        .await
        .map_err(|e| VerifyError::Unusable(format!("cannot set up the signature check: {e}")))?;
    let config = sigstore::registry::ClientConfig {
        protocol: sigstore::registry::ClientProtocol::HttpsExcept(vec![replay.host()]),
        ..Default::default()
    };
    let mut client = ClientBuilder::default()
        .with_oci_client_config(config)
        .with_trust_repository(root)
        .and_then(|b| b.build())
        .map_err(|e| VerifyError::Unusable(format!("cannot set up the signature check: {e}")))?;
    let source = OciReference::with_digest(
        replay.host(),
        reference.repository().to_string(),
        digest.to_string(),
    );
    let read = client.trusted_signature_layers(&Auth::Anonymous, &source);
    match tokio::time::timeout(options.timeout, read).await {
        Ok(Ok(layers)) => Ok(layers),
        Ok(Err(e)) => Err(VerifyError::Unreachable {
            reference: pinned,
            message: error_chain(&e),
        }),
        Err(_) => Err(VerifyError::Unreachable {
            reference: pinned,
            message: format!(
                "the registry did not answer in full within {} s (--registry-timeout-secs)",
                options.timeout.as_secs()
            ),
        }),
    }
}

/// Whether certified `layer` is `identity`'s: its certificate names the
/// subject (as an email or a URI) and issuer, and the layer's signature
/// was made with that certificate's key.
fn certified_for(identity: &KeylessIdentity, layer: &SignatureLayer) -> bool {
    let email = CertSubjectEmailVerifier {
        email: StringVerifier::ExactMatch(identity.subject.clone()),
        issuer: Some(StringVerifier::ExactMatch(identity.issuer.clone())),
    };
    let url = CertSubjectUrlVerifier {
        url: identity.subject.clone(),
        issuer: identity.issuer.clone(),
    };
    let identity_matches =
        email.verify(layer).unwrap_or(false) || url.verify(layer).unwrap_or(false);
    // sigstore vouches for the certificate (chain to the Fulcio
    // roots, Rekor bundle); that the layer's signature was made with
    // that certificate's key is checked here.
    identity_matches && signed_by_certificate(layer)
}

/// Whether `layer`'s signature verifies under the key of its (verified)
/// certificate.
fn signed_by_certificate(layer: &SignatureLayer) -> bool {
    let (Some(certificate), Some(signature)) = (&layer.certificate_signature, &layer.signature)
    else {
        return false;
    };
    certificate
        .verification_key
        .verify_signature(
            sigstore::crypto::Signature::Base64Encoded(signature.as_bytes()),
            &layer.raw_data,
        )
        .is_ok()
}

fn pem_to_der(pem: &[u8]) -> Result<Vec<u8>, VerifyError> {
    let text = std::str::from_utf8(pem)
        .map_err(|_| VerifyError::Unusable("a trust root file is not PEM text".into()))?;
    let body: String = text
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(body.trim())
        .map_err(|e| VerifyError::Unusable(format!("a trust root file is not PEM: {e}")))
}
