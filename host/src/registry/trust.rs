//! What a digest must meet to run: the host's trust policy
//! (`run --require-signatures`) and the reference's own (a Plugin's
//! `spec.verification`, or `--verify-key` for `--plugin`), both at once.
//!
//! The host's policy is the operator's; a Plugin's is whoever may write
//! Plugins'. Requiring both means a Plugin can narrow what runs but never
//! widen it: leaving `spec.verification` out, or naming a key of its own,
//! does not let an unsigned or foreign digest through.

use std::fmt;
use std::path::PathBuf;

use super::reference::{Digest, PluginReference};
use super::signatures::{
    self, KeylessIdentity, Signer, TrustPolicy, TrustRootFiles, TrustedKey, VerifyError,
};

/// The host's policy as the operator gave it (`--require-signatures`).
/// Its key files are read again at every use: a key rotated in a mounted
/// ConfigMap (the kubelet swaps the files in) takes effect, and has what
/// serves verified again, without a restart.
#[derive(Clone, Debug)]
pub struct HostPolicy {
    pub key_files: Vec<PathBuf>,
    pub keyless: Vec<KeylessIdentity>,
    pub trust_root: Option<TrustRootFiles>,
}

impl HostPolicy {
    /// The policy as its files say now.
    pub fn load(&self) -> Result<TrustPolicy, VerifyError> {
        let mut keys = Vec::new();
        for file in &self.key_files {
            let pem = std::fs::read(file).map_err(|e| {
                VerifyError::Unusable(format!("--verify-key {}: {e}", file.display()))
            })?;
            keys.push(TrustedKey::from_pem(file.display().to_string(), &pem)?);
        }
        let policy = TrustPolicy {
            keys,
            keyless: self.keyless.clone(),
            trust_root: self.trust_root.clone(),
        };
        if policy.is_empty() {
            return Err(VerifyError::Unusable(
                "--require-signatures names nothing a signature could verify against: give --verify-key FILE (a cosign public key) or --verify-identity SUBJECT,ISSUER".into(),
            ));
        }
        Ok(policy)
    }
}

/// The policies a digest must each verify under; none means nothing is
/// checked.
#[derive(Clone, Debug, Default)]
pub struct Requirements {
    /// `--require-signatures`: every reference, whatever it says itself.
    pub host: Option<TrustPolicy>,
    /// The reference's own.
    pub own: Option<TrustPolicy>,
}

impl Requirements {
    /// Only the reference's own policy (`dev`, `simulate`, `test`,
    /// `inspect`, which have no host-wide one).
    pub fn own(policy: &TrustPolicy) -> Self {
        Self {
            host: None,
            own: (!policy.is_empty()).then(|| policy.clone()),
        }
    }

    /// The policies to check, each once.
    fn policies(&self) -> Vec<&TrustPolicy> {
        let mut policies: Vec<&TrustPolicy> = Vec::new();
        for policy in [&self.host, &self.own].into_iter().flatten() {
            if !policy.is_empty()
                && !policies
                    .iter()
                    .any(|p| p.fingerprint() == policy.fingerprint())
            {
                policies.push(policy);
            }
        }
        policies
    }

    /// Nothing to check: the digest runs unsigned.
    pub fn is_empty(&self) -> bool {
        self.policies().is_empty()
    }

    /// What a digest of `reference` was admitted under: the policies and
    /// the repository its signatures were read from (signatures live beside
    /// the artifact, so the same digest in another repository is another
    /// question). A serving digest whose admission differs from the one in
    /// force now must be verified again before it keeps serving.
    pub fn admission(&self, reference: &PluginReference) -> Admission {
        let mut text = format!("{}/{}", reference.registry(), reference.repository());
        for policy in self.policies() {
            text.push('\n');
            text.push_str(&policy.fingerprint());
        }
        Admission(text)
    }

    /// Checks `digest` under every policy; who signed it for each (empty
    /// when nothing was checked).
    pub async fn verify(
        &self,
        options: &super::RegistryOptions,
        reference: &PluginReference,
        digest: &Digest,
        auth: &oci_client::secrets::RegistryAuth,
    ) -> Result<Vec<Signer>, VerifyError> {
        let mut signers = Vec::new();
        for policy in self.policies() {
            let signer = signatures::verify(options, policy, reference, digest, auth).await?;
            if !signers.contains(&signer) {
                signers.push(signer);
            }
        }
        Ok(signers)
    }
}

/// The trust a serving digest was admitted under (see
/// [`Requirements::admission`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission(String);

impl fmt::Display for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::TrustedKey;

    fn policy(name: &str) -> TrustPolicy {
        let (_, public) = signatures::generate_key_pair(b"").unwrap();
        TrustPolicy {
            keys: vec![TrustedKey::from_pem(name, public.as_bytes()).unwrap()],
            ..TrustPolicy::default()
        }
    }

    #[test]
    fn an_admission_changes_with_any_key_its_content_or_the_repository() {
        let reference = PluginReference::parse("oci://r.example/plugins/podset:1").unwrap();
        let other_repo = PluginReference::parse("oci://r.example/mirror/podset:1").unwrap();
        let host = policy("host.pub");
        let own = policy("plugin-keys");
        let both = Requirements {
            host: Some(host.clone()),
            own: Some(own.clone()),
        };
        let unsigned = Requirements::default();
        assert!(unsigned.is_empty());
        assert!(!both.is_empty());
        assert_ne!(unsigned.admission(&reference), both.admission(&reference));
        assert_ne!(both.admission(&reference), both.admission(&other_repo));
        let rotated = Requirements {
            host: Some(host.clone()),
            // Same name, another key: a rotation in the same Secret.
            own: Some(policy("plugin-keys")),
        };
        assert_ne!(both.admission(&reference), rotated.admission(&reference));
        assert_eq!(
            both.admission(&reference),
            both.clone().admission(&reference)
        );
        // The same policy twice is checked once.
        let same = Requirements {
            host: Some(host.clone()),
            own: Some(host),
        };
        assert_eq!(same.policies().len(), 1);
    }
}
