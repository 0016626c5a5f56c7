//! The check before a plugin runs: a signature on exactly the digest,
//! under the policy, by key or keyless, and who made it.

use oci_client::secrets::RegistryAuth;

use super::capped_read::signature_layers;
use super::layout::signature_tag;
use super::policy::{Signer, TrustPolicy};
use super::verify_error::VerifyError;
use super::{keyed, keyless};
use crate::registry::options::RegistryOptions;
use crate::registry::reference::{Digest, PluginReference};

/// Checks that a signature on exactly `digest` verifies under `policy`;
/// who signed it.
pub async fn verify(
    options: &RegistryOptions,
    policy: &TrustPolicy,
    reference: &PluginReference,
    digest: &Digest,
    auth: &RegistryAuth,
) -> Result<Signer, VerifyError> {
    let pinned = reference.at_digest(digest).to_string();
    if policy.is_empty() {
        return Err(VerifyError::Unusable(
            "no key or identity to verify against".into(),
        ));
    }
    if !policy.keyless.is_empty()
        && policy
            .trust_root
            .as_ref()
            .is_none_or(|r| r.fulcio_pem.is_empty())
    {
        return Err(VerifyError::Unusable(
            "keyless identities need a trust root (Fulcio certificates, and Rekor keys) given as files".into(),
        ));
    }
    let root = keyless::trust_root(policy)?;
    let Some((layers, replayed)) = signature_layers(options, reference, digest, auth).await? else {
        return Err(VerifyError::Missing {
            reference: pinned,
            tag: signature_tag(digest),
        });
    };
    if let Some(signer) = keyed::key_signer(&policy.keys, &layers)? {
        return Ok(signer);
    }
    // With no layer through the capped read there is nothing for sigstore
    // to certify, and no replay is started.
    if !layers.is_empty()
        && let Some(signer) =
            keyless::keyless_signer(options, policy, &root, reference, digest, replayed).await?
    {
        return Ok(signer);
    }
    let mut trusted: Vec<String> = policy.keys.iter().map(|k| k.name.clone()).collect();
    trusted.extend(
        policy
            .keyless
            .iter()
            .map(|i| format!("{} (issuer {})", i.subject, i.issuer)),
    );
    Err(VerifyError::NotTrusted {
        reference: pinned,
        count: layers.len(),
        trusted: trusted.join(", "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::signatures::KeylessIdentity;

    #[tokio::test]
    async fn keyless_identities_without_a_trust_root_are_refused_not_run_unchecked() {
        let policy = TrustPolicy {
            keyless: vec![KeylessIdentity {
                subject: "ci@example.com".into(),
                issuer: "https://issuer.example".into(),
            }],
            ..TrustPolicy::default()
        };
        let reference = PluginReference::parse("oci://127.0.0.1:1/podset:1").unwrap();
        let digest = Digest::parse(&format!("sha256:{}", "0".repeat(64))).unwrap();
        let auth = oci_client::secrets::RegistryAuth::Anonymous;
        let e = verify(
            &RegistryOptions::default(),
            &policy,
            &reference,
            &digest,
            &auth,
        )
        .await
        .unwrap_err();
        assert_eq!(e.reason(), "VerificationUnavailable", "{e}");
        let e = verify(
            &RegistryOptions::default(),
            &TrustPolicy::default(),
            &reference,
            &digest,
            &auth,
        )
        .await
        .unwrap_err();
        assert_eq!(e.reason(), "VerificationUnavailable", "{e}");
    }
}
