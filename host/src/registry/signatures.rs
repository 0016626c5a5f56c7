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
//! The payload names the digest; a layer whose payload names another is
//! ignored, so a signature made for one build never vouches for another
//! pushed under the same tag.
//!
//! The signature manifest and its layers are read here, capped (at most
//! [`MAX_SIGNATURES`] layers of at most [`MAX_SIGNATURE_BYTES`] each) and
//! within the request deadline, rather than by sigstore's client, which
//! pulls whatever the manifest lists into memory. Keys are checked on
//! those layers. Keyless identities still need sigstore's own read (it
//! checks the certificate chain and Rekor bundle as it builds its layers);
//! it runs only once the capped read has found the signatures within the
//! caps, and within the deadline.

use std::collections::BTreeMap;
use std::fmt;

use sha2::Digest as _;

use sigstore::cosign::simple_signing::SimpleSigning;
use sigstore::cosign::verification_constraint::cert_subject_email_verifier::StringVerifier;
use sigstore::cosign::verification_constraint::{
    CertSubjectEmailVerifier, CertSubjectUrlVerifier, PublicKeyVerifier, VerificationConstraint,
};
use sigstore::cosign::{ClientBuilder, Constraint, CosignCapabilities, SignatureLayer};
use sigstore::crypto::signing_key::SigStoreKeyPair;
use sigstore::crypto::{SigStoreSigner, SigningScheme};
use sigstore::registry::{Auth, OciReference};
use sigstore::trust::ManualTrustRoot;

use super::signature_replay::{Replay, Replayed};

use super::bounded_reads::{BoundedReader, MAX_MANIFEST_BYTES, Target};
use super::error::{RegistryError, error_chain};
use super::options::RegistryOptions;
use super::reference::{Digest, PluginReference};

/// The most signature layers read for one digest: cosign adds one per
/// signing, and a handful of signers is the most a plugin has.
pub const MAX_SIGNATURES: usize = 16;
/// The largest signature layer read: a simple-signing payload is a few
/// hundred bytes.
pub const MAX_SIGNATURE_BYTES: usize = 64 << 10;
/// cosign's signature layer media type and its signature annotation.
const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

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

    /// A digest of everything the policy trusts (keys by content, not only
    /// by name, identities and the trust root): equal fingerprints admit the
    /// same signatures, so a key rotated under the same name changes it.
    pub fn fingerprint(&self) -> String {
        let mut hash = sha2::Sha256::new();
        let mut add = |part: &[u8]| {
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part);
        };
        for key in &self.keys {
            add(key.name.as_bytes());
            add(&key.pem);
        }
        for identity in &self.keyless {
            add(identity.subject.as_bytes());
            add(identity.issuer.as_bytes());
        }
        if let Some(root) = &self.trust_root {
            for pem in root.fulcio_pem.iter().chain(&root.rekor_pem) {
                add(pem);
            }
        }
        super::content_digest::hex(&hash.finalize())
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
            pem_to_der(pem)
                .map(|der| (super::content_digest::hex(&sha2::Sha256::digest(&der)), der))
        })
        .collect::<Result<_, _>>()?;
    let root = ManualTrustRoot {
        fulcio_certs: fulcio_der.iter().map(|d| d.as_slice().into()).collect(),
        rekor_keys,
        ctfe_keys: BTreeMap::new(),
    };
    let Some((layers, replayed)) = signature_layers(options, reference, digest, auth).await? else {
        return Err(VerifyError::Missing {
            reference: pinned,
            tag: signature_tag(digest),
        });
    };
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
    // Keyless: sigstore verifies certificates and bundles only as it reads
    // the layers itself, so it reads them again, from a replay of what the
    // capped read took (signature_replay.rs), never from the registry.
    let certified = if policy.keyless.is_empty() || layers.is_empty() {
        Vec::new()
    } else {
        let replay = Replay::start(replayed).await.map_err(|e| {
            VerifyError::Unusable(format!("cannot set up the signature check: {e}"))
        })?;
        let config = sigstore::registry::ClientConfig {
            protocol: sigstore::registry::ClientProtocol::HttpsExcept(vec![replay.host()]),
            ..Default::default()
        };
        let mut client = ClientBuilder::default()
            .with_oci_client_config(config)
            .with_trust_repository(&root)
            .and_then(|b| b.build())
            .map_err(|e| {
                VerifyError::Unusable(format!("cannot set up the signature check: {e}"))
            })?;
        let source = OciReference::with_digest(
            replay.host(),
            reference.repository().to_string(),
            digest.to_string(),
        );
        let read = client.trusted_signature_layers(&Auth::Anonymous, &source);
        match tokio::time::timeout(options.timeout, read).await {
            Ok(Ok(layers)) => layers,
            Ok(Err(e)) => {
                return Err(VerifyError::Unreachable {
                    reference: pinned.clone(),
                    message: error_chain(&e),
                });
            }
            Err(_) => {
                return Err(VerifyError::Unreachable {
                    reference: pinned.clone(),
                    message: format!(
                        "the registry did not answer in full within {} s (--registry-timeout-secs)",
                        options.timeout.as_secs()
                    ),
                });
            }
        }
    };
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
        if certified.iter().any(matches) {
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

/// The signature layers of `digest` that are what their descriptors say
/// and name `digest`, read capped, and the same as a replay for sigstore's
/// keyless check; `None` when it has no signature tag.
///
/// The layers are built here rather than by sigstore's client, which reads
/// without a cap; they carry no certificate, which only keys need.
async fn signature_layers(
    options: &RegistryOptions,
    reference: &PluginReference,
    digest: &Digest,
    auth: &oci_client::secrets::RegistryAuth,
) -> Result<Option<(Vec<SignatureLayer>, Replayed)>, VerifyError> {
    let pinned = reference.at_digest(digest).to_string();
    let reader = BoundedReader::new(options);
    let unreadable = |e: RegistryError| match e {
        RegistryError::TooLarge { .. } => VerifyError::TooLarge {
            reference: pinned.clone(),
            message: e.to_string(),
        },
        e => VerifyError::Unreachable {
            reference: pinned.clone(),
            message: e.to_string(),
        },
    };
    let tag = signature_tag(digest);
    let accept = [
        oci_client::manifest::OCI_IMAGE_MEDIA_TYPE,
        oci_client::manifest::IMAGE_MANIFEST_MEDIA_TYPE,
    ];
    let manifest = match reader
        .get(
            reference,
            auth,
            Target::Manifest(&tag),
            &accept,
            MAX_MANIFEST_BYTES,
        )
        .await
    {
        Ok(bytes) => bytes,
        Err(RegistryError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(unreadable(e)),
    };
    let manifest: oci_client::manifest::OciImageManifest = serde_json::from_slice(&manifest)
        .map_err(|e| VerifyError::Unreachable {
            reference: pinned.clone(),
            message: format!("its {tag} manifest is not an image manifest: {e}"),
        })?;
    if manifest.layers.len() > MAX_SIGNATURES {
        return Err(VerifyError::TooLarge {
            reference: pinned,
            message: format!(
                "{tag} lists {} layers, more than the {MAX_SIGNATURES} read",
                manifest.layers.len()
            ),
        });
    }
    let mut layers = Vec::new();
    let mut replayed_layers = Vec::new();
    let mut blobs = BTreeMap::new();
    for descriptor in &manifest.layers {
        if descriptor.media_type != SIMPLE_SIGNING {
            continue;
        }
        if descriptor.size < 0 || descriptor.size as usize > MAX_SIGNATURE_BYTES {
            return Err(VerifyError::TooLarge {
                reference: pinned,
                message: format!(
                    "a layer of {tag} is {} bytes, more than the {MAX_SIGNATURE_BYTES} read",
                    descriptor.size
                ),
            });
        }
        let bytes = reader
            .get(
                reference,
                auth,
                Target::Blob(&descriptor.digest),
                &[],
                MAX_SIGNATURE_BYTES,
            )
            .await
            .map_err(unreadable)?;
        if super::content_digest::sha256_digest(&bytes) != descriptor.digest {
            tracing::warn!(
                "{pinned}: a signature layer is not the {} its manifest names; ignored",
                descriptor.digest
            );
            continue;
        }
        let Ok(simple_signing) = serde_json::from_slice::<SimpleSigning>(&bytes) else {
            continue;
        };
        if !simple_signing.satisfies_manifest_digest(digest.as_str()) {
            continue;
        }
        let Some(signature) = descriptor
            .annotations
            .as_ref()
            .and_then(|a| a.get(SIGNATURE_ANNOTATION))
            .cloned()
        else {
            continue;
        };
        replayed_layers.push(descriptor.clone());
        blobs.insert(descriptor.digest.clone(), bytes.clone());
        layers.push(SignatureLayer {
            simple_signing,
            oci_digest: descriptor.digest.clone(),
            certificate_signature: None,
            bundle: None,
            signature: Some(signature),
            raw_data: bytes,
        });
    }
    // sigstore pulls the signature image whole, its config too: read capped
    // and checked as the layers are.
    if !layers.is_empty() {
        let config = reader
            .get(
                reference,
                auth,
                Target::Blob(&manifest.config.digest),
                &[],
                MAX_SIGNATURE_BYTES,
            )
            .await
            .map_err(unreadable)?;
        if super::content_digest::sha256_digest(&config) == manifest.config.digest {
            blobs.insert(manifest.config.digest.clone(), config);
        }
    }
    // The replay holds the layers that passed here, and nothing else.
    let mut replayed_manifest = manifest.clone();
    replayed_manifest.layers = replayed_layers;
    let replayed = Replayed {
        repository: reference.repository().to_string(),
        source_digest: digest.to_string(),
        tag,
        manifest: serde_json::to_vec(&replayed_manifest).map_err(|e| {
            VerifyError::Unusable(format!(
                "cannot keep the signature manifest for the check: {e}"
            ))
        })?,
        manifest_media_type: replayed_manifest
            .media_type
            .clone()
            .unwrap_or_else(|| oci_client::manifest::OCI_IMAGE_MEDIA_TYPE.to_string()),
        blobs,
    };
    Ok(Some((layers, replayed)))
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
