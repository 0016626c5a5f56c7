//! Cosign signatures: making them on push and checking them before a
//! plugin runs.
//!
//! A signature is cosign's for key pairs: the simple-signing payload (the
//! manifest digest it vouches for, under `critical.image`), signed with
//! ECDSA P-256 over SHA-256, stored as a layer of the manifest tagged
//! `sha256-<hex>.sig` in the plugin's repository. So `cosign verify --key`
//! accepts what `reconciler-host push --sign-key` makes, and the host
//! accepts what `cosign sign --key` makes. Keyless signatures (a Fulcio
//! certificate and a Rekor bundle in the layer's annotations) are checked
//! against a trust root given as files: nothing is fetched from the public
//! Sigstore instance, so an air-gapped cluster verifies as any other.
//!
//! The payload names the digest; sigstore refuses a layer whose payload
//! names another, so a signature made for one build never vouches for
//! another pushed under the same tag.

use std::collections::BTreeMap;
use std::fmt;

use sha2::Digest as _;

use sigstore::cosign::verification_constraint::cert_subject_email_verifier::StringVerifier;
use sigstore::cosign::verification_constraint::{
    CertSubjectEmailVerifier, CertSubjectUrlVerifier, PublicKeyVerifier, VerificationConstraint,
};
use sigstore::cosign::{ClientBuilder, Constraint, CosignCapabilities, SignatureLayer};
use sigstore::crypto::signing_key::SigStoreKeyPair;
use sigstore::crypto::{SigStoreSigner, SigningScheme};
use sigstore::registry::{Auth, OciReference};
use sigstore::trust::ManualTrustRoot;

use super::client::{RegistryOptions, error_chain};
use super::reference::{Digest, PluginReference};

/// Environment variable holding a private key's password, as cosign names it.
pub const PASSWORD_ENV: &str = "COSIGN_PASSWORD";

/// A public key a signature may verify against, with a name for status.
#[derive(Clone)]
pub struct TrustedKey {
    /// Where the key came from: a file, or `Secret ns/name key`.
    pub name: String,
    pem: Vec<u8>,
}

impl fmt::Debug for TrustedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TrustedKey({})", self.name)
    }
}

impl TrustedKey {
    /// The key's PEM text.
    pub fn pem(&self) -> &[u8] {
        &self.pem
    }

    /// A PEM public key (`cosign.pub`); refused now if it is not one, so a
    /// typo is reported where the key is named, not at the first pull.
    pub fn from_pem(name: impl Into<String>, pem: &[u8]) -> Result<Self, VerifyError> {
        let name = name.into();
        PublicKeyVerifier::try_from(pem).map_err(|e| {
            VerifyError::Unusable(format!("{name} is not a PEM public key cosign uses: {e}"))
        })?;
        Ok(Self {
            name,
            pem: pem.to_vec(),
        })
    }
}

/// A keyless signer the policy trusts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeylessIdentity {
    /// The certificate's subject: an email or a URI (a CI workflow).
    pub subject: String,
    /// The OIDC issuer that vouched for it.
    pub issuer: String,
}

/// PEM and DER material for keyless verification, given as files.
#[derive(Clone, Debug, Default)]
pub struct TrustRootFiles {
    /// Fulcio's root and intermediate certificates (PEM).
    pub fulcio_pem: Vec<Vec<u8>>,
    /// Rekor's public keys (PEM).
    pub rekor_pem: Vec<Vec<u8>>,
}

/// What a signature must verify against for a plugin to run.
#[derive(Clone, Debug, Default)]
pub struct TrustPolicy {
    pub keys: Vec<TrustedKey>,
    pub keyless: Vec<KeylessIdentity>,
    pub trust_root: Option<TrustRootFiles>,
}

impl TrustPolicy {
    /// Nothing to check: plugins run unsigned.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.keyless.is_empty()
    }
}

/// Who signed the digest that runs, as status shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signer {
    Key(String),
    Keyless { subject: String, issuer: String },
}

impl fmt::Display for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Signer::Key(name) => write!(f, "key {name}"),
            Signer::Keyless { subject, issuer } => write!(f, "{subject} (issuer {issuer})"),
        }
    }
}

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
            VerifyError::Unusable(_) => "VerificationUnavailable",
        }
    }
}

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

/// The tag cosign keeps a digest's signatures under.
pub fn signature_tag(digest: &Digest) -> String {
    format!("sha256-{}.sig", digest.hex())
}

/// Checks that a signature on exactly `digest` verifies under `policy`;
/// who signed it.
pub async fn verify(
    options: &RegistryOptions,
    policy: &TrustPolicy,
    reference: &PluginReference,
    digest: &Digest,
    auth: &oci_client::secrets::RegistryAuth,
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
        .map(|pem| {
            pem_to_der(pem).map(|der| (super::client::hex(&sha2::Sha256::digest(&der)), der))
        })
        .collect::<Result<_, _>>()?;
    let root = ManualTrustRoot {
        fulcio_certs: fulcio_der.iter().map(|d| d.as_slice().into()).collect(),
        rekor_keys,
        ctfe_keys: BTreeMap::new(),
    };
    let mut client = ClientBuilder::default()
        .with_oci_client_config(sigstore_config(options))
        .with_trust_repository(&root)
        .and_then(|b| b.build())
        .map_err(|e| VerifyError::Unusable(format!("cannot set up the signature check: {e}")))?;
    let layers = client
        .trusted_signature_layers(&sigstore_auth(auth), &sigstore_reference(reference, digest))
        .await
        .map_err(|e| VerifyError::Unreachable {
            reference: pinned.clone(),
            message: error_chain(&e),
        })?;
    if layers.is_empty() {
        return Err(VerifyError::Missing {
            reference: pinned,
            tag: signature_tag(digest),
        });
    }
    for key in &policy.keys {
        let verifier = PublicKeyVerifier::try_from(key.pem.as_slice())
            .map_err(|e| VerifyError::Unusable(format!("{}: {e}", key.name)))?;
        if layers
            .iter()
            .any(|layer| verifier.verify(layer).unwrap_or(false))
        {
            return Ok(Signer::Key(key.name.clone()));
        }
    }
    for identity in &policy.keyless {
        let matches = |layer: &SignatureLayer| -> bool {
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
        };
        if layers.iter().any(matches) {
            return Ok(Signer::Keyless {
                subject: identity.subject.clone(),
                issuer: identity.issuer.clone(),
            });
        }
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
    use super::*;

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
