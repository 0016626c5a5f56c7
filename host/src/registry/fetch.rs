//! One reference to one verified file on disk.
//!
//! Resolve the tag (or take the digest), check the signature on that exact
//! digest when the policy asks for one, then pull by digest into the
//! artifact cache. The signature is checked before any byte of the
//! component is fetched, and the pull checks the manifest and the layer
//! against the digest that was verified, so what lands on disk is what
//! was signed.

use std::fmt;
use std::path::PathBuf;

use super::ArtifactCache;
use super::client::{Pulled, RegistryClient};
use super::credentials::Credentials;
use super::error::RegistryError;
use super::reference::{Digest, PluginReference};
use super::signatures::{Signer, TrustPolicy, VerifyError};
use super::trust::Requirements;

/// A reference pulled, and verified when the policy asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchedPlugin {
    pub reference: PluginReference,
    pub digest: Digest,
    pub path: PathBuf,
    /// Who signed it, for each policy it was checked under; empty when
    /// nothing was checked.
    pub signers: Vec<Signer>,
    /// The file came from the cache without a pull.
    pub cached: bool,
    /// The registry could not be asked what the tag names now: this is the
    /// digest it named last time.
    pub stale_tag: bool,
}

impl fmt::Display for FetchedPlugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is {} ({})",
            self.reference,
            self.digest,
            if self.cached { "cached" } else { "pulled" }
        )?;
        if !self.signers.is_empty() {
            write!(f, ", signed by {}", signers_text(&self.signers))?;
        }
        if self.stale_tag {
            write!(
                f,
                "; the registry is unreachable, so this is what the tag named last time"
            )?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Verify(#[from] VerifyError),
}

impl FetchError {
    pub fn reason(&self) -> &'static str {
        match self {
            FetchError::Registry(e) => e.reason(),
            FetchError::Verify(e) => e.reason(),
        }
    }

    /// Whether the same digest may pass on a later try: the registry was
    /// not reached, or its signature was not there yet or not readable (a
    /// signer commonly pushes the signature just after the image). Any
    /// other failure is the digest's own: refused until something changes.
    pub fn may_pass_later(&self) -> bool {
        matches!(
            self,
            FetchError::Registry(RegistryError::Unreachable { .. })
                | FetchError::Verify(VerifyError::Missing { .. } | VerifyError::Unreachable { .. })
        )
    }

    /// Whether the signature check is what failed (the Verified condition).
    pub fn is_verification(&self) -> bool {
        matches!(self, FetchError::Verify(_))
    }
}

/// The digest `reference` names now, falling back (when `fall_back`) to
/// the one it named last when the registry cannot be reached and that one
/// is cached; and whether it fell back.
pub async fn resolve(
    client: &RegistryClient,
    cache: &ArtifactCache,
    reference: &PluginReference,
    pull_secrets: Option<&Credentials>,
    fall_back: bool,
) -> Result<(Digest, bool), RegistryError> {
    let auth = client.auth_for(reference, pull_secrets);
    match client.resolve(reference, &auth).await {
        Ok(digest) => {
            if reference.digest().is_none() {
                cache.remember_tag(reference, &digest);
            }
            Ok((digest, false))
        }
        Err(e @ RegistryError::Unreachable { .. }) if fall_back => {
            match cache.last_resolved(reference) {
                Some(digest) => {
                    tracing::warn!("{e}; using {digest}, what it named last time");
                    Ok((digest, true))
                }
                None => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Signers as status shows them: `key a.pub and key b.pub`.
pub fn signers_text(signers: &[Signer]) -> String {
    signers
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" and ")
}

/// Verifies (under every policy of `requirements`) and pulls `reference`
/// at `digest`.
pub async fn fetch_digest(
    client: &RegistryClient,
    cache: &ArtifactCache,
    requirements: &Requirements,
    reference: &PluginReference,
    digest: &Digest,
    pull_secrets: Option<&Credentials>,
) -> Result<(Pulled, Vec<Signer>), FetchError> {
    let auth = client.auth_for(reference, pull_secrets);
    let signers = requirements
        .verify(client.options(), reference, digest, &auth)
        .await?;
    let pulled = client.pull(reference, digest, &auth, cache).await?;
    Ok((pulled, signers))
}

/// [`resolve`] then [`fetch_digest`].
pub async fn fetch_once(
    client: &RegistryClient,
    cache: &ArtifactCache,
    policy: &TrustPolicy,
    reference: &PluginReference,
    pull_secrets: Option<&Credentials>,
) -> Result<FetchedPlugin, FetchError> {
    let (digest, stale_tag) = resolve(client, cache, reference, pull_secrets, true).await?;
    let (pulled, signers) = fetch_digest(
        client,
        cache,
        &Requirements::own(policy),
        reference,
        &digest,
        pull_secrets,
    )
    .await?;
    Ok(FetchedPlugin {
        reference: reference.clone(),
        digest,
        path: pulled.path,
        signers,
        cached: pulled.cached,
        stale_tag,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(reference: &str) -> (String, String) {
        (reference.to_string(), "it said no".to_string())
    }

    #[test]
    fn a_signature_not_there_yet_is_tried_again_and_one_that_fails_is_refused() {
        let (reference, message) = said("oci://r/p@sha256:1");
        let later = [
            FetchError::Registry(RegistryError::Unreachable {
                reference: reference.clone(),
                message: message.clone(),
            }),
            FetchError::Verify(VerifyError::Missing {
                reference: reference.clone(),
                tag: "sha256-1.sig".into(),
            }),
            FetchError::Verify(VerifyError::Unreachable {
                reference: reference.clone(),
                message: message.clone(),
            }),
        ];
        assert!(later.iter().all(FetchError::may_pass_later));
        let refused = [
            FetchError::Verify(VerifyError::NotTrusted {
                reference: reference.clone(),
                count: 1,
                trusted: "key k".into(),
            }),
            FetchError::Registry(RegistryError::Unauthorized { reference, message }),
        ];
        assert!(!refused.iter().any(FetchError::may_pass_later));
    }
}
