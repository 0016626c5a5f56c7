//! A digest's signatures read capped, within the request deadline: the
//! `.sig` manifest and its layers, rather than by sigstore's client, which
//! pulls whatever the manifest lists into memory. What passes here is both
//! what keys are checked on and all a replay ([`super::replay`]) gives
//! sigstore for the keyless check.

use std::collections::BTreeMap;

use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use sigstore::cosign::SignatureLayer;
use sigstore::cosign::simple_signing::SimpleSigning;

use super::layout::{SIGNATURE_ANNOTATION, SIMPLE_SIGNING, signature_tag};
use super::replay::Replayed;
use super::verify_error::VerifyError;
use crate::registry::bounded_reads::{BoundedReader, MAX_MANIFEST_BYTES, Target};
use crate::registry::content_digest::sha256_digest;
use crate::registry::error::RegistryError;
use crate::registry::options::RegistryOptions;
use crate::registry::reference::{Digest, PluginReference};

/// The most signature layers read for one digest: cosign adds one per
/// signing, and a handful of signers is the most a plugin has.
pub const MAX_SIGNATURES: usize = 16;
/// The largest signature layer read: a simple-signing payload is a few
/// hundred bytes.
pub const MAX_SIGNATURE_BYTES: usize = 64 << 10;

/// The signature layers of `digest` that are what their descriptors say
/// and name `digest`, read capped, and the same as a replay for sigstore's
/// keyless check; `None` when it has no signature tag.
///
/// The layers are built here rather than by sigstore's client, which reads
/// without a cap; they carry no certificate, which only keys need.
pub(super) async fn signature_layers(
    options: &RegistryOptions,
    reference: &PluginReference,
    digest: &Digest,
    auth: &RegistryAuth,
) -> Result<Option<(Vec<SignatureLayer>, Replayed)>, VerifyError> {
    let read = SignatureRead {
        reader: BoundedReader::new(options),
        reference,
        digest,
        auth,
        pinned: reference.at_digest(digest).to_string(),
        tag: signature_tag(digest),
    };
    let Some(manifest) = read.manifest().await? else {
        return Ok(None);
    };
    let mut layers = Vec::new();
    let mut replayed_layers = Vec::new();
    let mut blobs = BTreeMap::new();
    for descriptor in &manifest.layers {
        if descriptor.media_type != SIMPLE_SIGNING {
            continue;
        }
        let Some(layer) = read.layer(descriptor).await? else {
            continue;
        };
        replayed_layers.push(descriptor.clone());
        blobs.insert(descriptor.digest.clone(), layer.raw_data.clone());
        layers.push(layer);
    }
    // sigstore pulls the signature image whole, its config too: read capped
    // and checked as the layers are.
    if !layers.is_empty() {
        let config = read.blob(&manifest.config.digest).await?;
        if sha256_digest(&config) == manifest.config.digest {
            blobs.insert(manifest.config.digest.clone(), config);
        }
    }
    let replayed = read.replayed(manifest, replayed_layers, blobs)?;
    Ok(Some((layers, replayed)))
}

/// One capped read of a digest's signatures.
struct SignatureRead<'a> {
    reader: BoundedReader,
    reference: &'a PluginReference,
    digest: &'a Digest,
    auth: &'a RegistryAuth,
    /// The reference at the digest, as errors name it.
    pinned: String,
    /// The digest's signature tag.
    tag: String,
}

impl SignatureRead<'_> {
    fn unreadable(&self, e: RegistryError) -> VerifyError {
        match e {
            RegistryError::TooLarge { .. } => VerifyError::TooLarge {
                reference: self.pinned.clone(),
                message: e.to_string(),
            },
            e => VerifyError::Unreachable {
                reference: self.pinned.clone(),
                message: e.to_string(),
            },
        }
    }

    /// The signature tag's manifest, if the tag exists, listing no more
    /// than [`MAX_SIGNATURES`] layers.
    async fn manifest(&self) -> Result<Option<OciImageManifest>, VerifyError> {
        let accept = [
            oci_client::manifest::OCI_IMAGE_MEDIA_TYPE,
            oci_client::manifest::IMAGE_MANIFEST_MEDIA_TYPE,
        ];
        let manifest = match self
            .reader
            .get(
                self.reference,
                self.auth,
                Target::Manifest(&self.tag),
                &accept,
                MAX_MANIFEST_BYTES,
            )
            .await
        {
            Ok(bytes) => bytes,
            Err(RegistryError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.unreadable(e)),
        };
        let tag = &self.tag;
        let manifest: OciImageManifest =
            serde_json::from_slice(&manifest).map_err(|e| VerifyError::Unreachable {
                reference: self.pinned.clone(),
                message: format!("its {tag} manifest is not an image manifest: {e}"),
            })?;
        if manifest.layers.len() > MAX_SIGNATURES {
            return Err(VerifyError::TooLarge {
                reference: self.pinned.clone(),
                message: format!(
                    "{tag} lists {} layers, more than the {MAX_SIGNATURES} read",
                    manifest.layers.len()
                ),
            });
        }
        Ok(Some(manifest))
    }

    /// The simple-signing layer `descriptor` names, if its bytes are what
    /// the descriptor says, its payload names the digest and it carries a
    /// signature; refused unread past [`MAX_SIGNATURE_BYTES`].
    async fn layer(
        &self,
        descriptor: &OciDescriptor,
    ) -> Result<Option<SignatureLayer>, VerifyError> {
        if descriptor.size < 0 || descriptor.size as usize > MAX_SIGNATURE_BYTES {
            return Err(VerifyError::TooLarge {
                reference: self.pinned.clone(),
                message: format!(
                    "a layer of {} is {} bytes, more than the {MAX_SIGNATURE_BYTES} read",
                    self.tag, descriptor.size
                ),
            });
        }
        let bytes = self.blob(&descriptor.digest).await?;
        if sha256_digest(&bytes) != descriptor.digest {
            tracing::warn!(
                "{}: a signature layer is not the {} its manifest names; ignored",
                self.pinned,
                descriptor.digest
            );
            return Ok(None);
        }
        let Ok(simple_signing) = serde_json::from_slice::<SimpleSigning>(&bytes) else {
            return Ok(None);
        };
        if !simple_signing.satisfies_manifest_digest(self.digest.as_str()) {
            return Ok(None);
        }
        let Some(signature) = descriptor
            .annotations
            .as_ref()
            .and_then(|a| a.get(SIGNATURE_ANNOTATION))
            .cloned()
        else {
            return Ok(None);
        };
        Ok(Some(SignatureLayer {
            simple_signing,
            oci_digest: descriptor.digest.clone(),
            certificate_signature: None,
            bundle: None,
            signature: Some(signature),
            raw_data: bytes,
        }))
    }

    /// A blob of the signature image, at most [`MAX_SIGNATURE_BYTES`].
    async fn blob(&self, digest: &str) -> Result<Vec<u8>, VerifyError> {
        self.reader
            .get(
                self.reference,
                self.auth,
                Target::Blob(digest),
                &[],
                MAX_SIGNATURE_BYTES,
            )
            .await
            .map_err(|e| self.unreadable(e))
    }

    /// What the replay serves: `manifest` listing only the layers that
    /// passed here, and their blobs (and the config's), nothing else.
    fn replayed(
        self,
        manifest: OciImageManifest,
        replayed_layers: Vec<OciDescriptor>,
        blobs: BTreeMap<String, Vec<u8>>,
    ) -> Result<Replayed, VerifyError> {
        let mut replayed_manifest = manifest;
        replayed_manifest.layers = replayed_layers;
        Ok(Replayed {
            repository: self.reference.repository().to_string(),
            source_digest: self.digest.to_string(),
            tag: self.tag,
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
        })
    }
}
