//! What a signature must verify against for a plugin to run, and who
//! signed the digest that does: the policy's own terms, apart from how a
//! signature is read or checked, so the host's and a Plugin's policies
//! (`trust.rs`) are built without the checking machinery.

use std::fmt;

use sha2::Digest as _;
use sigstore::cosign::verification_constraint::PublicKeyVerifier;

use super::verify_error::VerifyError;

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
        super::super::content_digest::hex(&hash.finalize())
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
