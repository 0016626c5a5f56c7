//! Signing on push (`reconciler-host push --sign-key`, `keygen`): the
//! signature cosign makes for a key pair, so `cosign verify --key` accepts
//! it as the host does.

use sigstore::cosign::{ClientBuilder, Constraint, CosignCapabilities, SignatureLayer};
use sigstore::crypto::signing_key::SigStoreKeyPair;
use sigstore::crypto::{SigStoreSigner, SigningScheme};
use sigstore::registry::{Auth, OciReference};

use super::layout::signature_tag;
use crate::registry::error::error_chain;
use crate::registry::options::RegistryOptions;
use crate::registry::reference::{Digest, PluginReference};

/// Environment variable holding a private key's password, as cosign names it.
pub const PASSWORD_ENV: &str = "COSIGN_PASSWORD";

fn sigstore_config(options: &RegistryOptions) -> sigstore::registry::ClientConfig {
    sigstore::registry::ClientConfig {
        protocol: if options.insecure.is_empty() {
            sigstore::registry::ClientProtocol::Https
        } else {
            sigstore::registry::ClientProtocol::HttpsExcept(options.insecure.clone())
        },
        extra_root_certificates: options
            .extra_ca_pem
            .iter()
            .map(|pem| sigstore::registry::Certificate {
                encoding: sigstore::registry::CertificateEncoding::Pem,
                data: pem.clone(),
            })
            .collect(),
        ..Default::default()
    }
}

fn sigstore_auth(auth: &oci_client::secrets::RegistryAuth) -> Auth {
    match auth {
        oci_client::secrets::RegistryAuth::Basic(user, password) => {
            Auth::Basic(user.clone(), password.clone())
        }
        oci_client::secrets::RegistryAuth::Bearer(token) => Auth::Bearer(token.clone()),
        oci_client::secrets::RegistryAuth::Anonymous => Auth::Anonymous,
    }
}

fn sigstore_reference(reference: &PluginReference, digest: &Digest) -> OciReference {
    OciReference::with_digest(
        reference.registry().to_string(),
        reference.repository().to_string(),
        digest.to_string(),
    )
}

/// A new ECDSA P-256 key pair: the private key encrypted with `password`
/// as cosign writes it (`cosign.key`), and the public key (`cosign.pub`).
pub fn generate_key_pair(password: &[u8]) -> anyhow::Result<(String, String)> {
    let signer = SigningScheme::ECDSA_P256_SHA256_ASN1.create_signer()?;
    let pair = signer.to_sigstore_keypair()?;
    let private = pair.private_key_to_encrypted_pem(password)?;
    Ok((private.to_string(), pair.public_key_to_pem()?))
}

/// A private key from `cosign.key` text (encrypted with `password`, or
/// plain PKCS#8 PEM).
pub fn signing_key(pem: &[u8], password: &[u8]) -> anyhow::Result<SigStoreSigner> {
    let text = String::from_utf8_lossy(pem);
    let pair = if text.contains("ENCRYPTED") {
        SigStoreKeyPair::from_encrypted_pem(pem, password).map_err(|e| {
            anyhow::anyhow!("cannot decrypt the key (is {PASSWORD_ENV} its password?): {e}")
        })?
    } else {
        SigStoreKeyPair::from_pem(pem)?
    };
    Ok(pair.to_sigstore_signer(&SigningScheme::ECDSA_P256_SHA256_ASN1)?)
}

/// Signs `digest` of `reference` with `key` and pushes the signature to
/// the `sha256-<hex>.sig` tag (replacing what that tag held).
pub async fn sign(
    options: &RegistryOptions,
    reference: &PluginReference,
    digest: &Digest,
    key: SigStoreSigner,
    auth: &oci_client::secrets::RegistryAuth,
) -> anyhow::Result<()> {
    let source = sigstore_reference(reference, digest);
    let mut layer = SignatureLayer::new_unsigned(&source, digest.as_str())?;
    sigstore::cosign::constraint::PrivateKeySigner::new_with_signer(key)
        .add_constraint(&mut layer)?;
    let mut client = ClientBuilder::default()
        .with_oci_client_config(sigstore_config(options))
        .build()?;
    let target = OciReference::with_tag(
        reference.registry().to_string(),
        reference.repository().to_string(),
        signature_tag(digest),
    );
    client
        .push_signature(None, &sigstore_auth(auth), &target, vec![layer])
        .await
        .map_err(|e| anyhow::anyhow!("pushing the signature to {target}: {}", error_chain(&e)))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use sigstore::cosign::verification_constraint::{PublicKeyVerifier, VerificationConstraint};

    use super::*;
    use crate::registry::signatures::TrustedKey;

    #[test]
    fn a_key_pair_signs_what_its_public_key_verifies_and_no_other() {
        let (private, public) = generate_key_pair(b"pw").unwrap();
        assert!(signing_key(private.as_bytes(), b"wrong").is_err());
        let signer = signing_key(private.as_bytes(), b"pw").unwrap();
        let reference = sigstore::registry::OciReference::with_digest(
            "r.example".into(),
            "podset".into(),
            format!("sha256:{}", "a".repeat(64)),
        );
        let mut layer =
            SignatureLayer::new_unsigned(&reference, &format!("sha256:{}", "a".repeat(64)))
                .unwrap();
        sigstore::cosign::constraint::PrivateKeySigner::new_with_signer(signer)
            .add_constraint(&mut layer)
            .unwrap();
        let payload: serde_json::Value = serde_json::from_slice(&layer.raw_data).unwrap();
        assert_eq!(
            payload["critical"]["type"],
            "cosign container image signature"
        );
        assert_eq!(
            payload["critical"]["image"]["docker-manifest-digest"],
            format!("sha256:{}", "a".repeat(64))
        );
        let key = PublicKeyVerifier::try_from(public.as_bytes()).unwrap();
        assert!(key.verify(&layer).unwrap());
        let (_, other) = generate_key_pair(b"").unwrap();
        let other = PublicKeyVerifier::try_from(other.as_bytes()).unwrap();
        assert!(!other.verify(&layer).unwrap_or(false));
        assert!(TrustedKey::from_pem("typo.pub", b"not a key").is_err());
    }
}
