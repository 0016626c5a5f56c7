//! Talking to a registry: resolving tags, pulling and pushing plugins.
//!
//! Everything runs by digest: a tag is resolved to the digest of its
//! manifest, and that digest is what is pulled, verified, cached and run.
//! The manifest's bytes are hashed here and compared with the digest asked
//! for, and the component's layer is hashed while it streams to disk, with
//! its size capped, so neither a registry nor anything between can hand
//! the host other bytes than the digest names. Manifests are read with a
//! size cap ([`super::bounded_reads`]), and every request has a deadline
//! (`--registry-timeout-secs`), so a registry cannot make the host hold or
//! wait without bound either.

use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use oci_client::client::{
    Certificate, CertificateEncoding, ClientConfig, ClientProtocol, Config, ImageLayer,
};
use oci_client::errors::OciDistributionError;
use oci_client::manifest::{
    IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest,
};
use oci_client::secrets::RegistryAuth;

use super::artifact::{ComponentInterfaces, WASM_CONFIG, WASM_LAYER, WasmConfig, component_layer};
use super::artifact_cache::ArtifactCache;
use super::bounded_reads::{BoundedReader, MAX_MANIFEST_BYTES, Target};
use super::content_digest::sha256_digest;
use super::credentials::Credentials;
use super::error::{RegistryError, classify};
use super::options::RegistryOptions;
use super::reference::{Digest, PluginReference};

/// A client for the registries one set of options reaches.
pub struct RegistryClient {
    options: RegistryOptions,
    oci: oci_client::Client,
    reader: BoundedReader,
}

/// A pulled plugin: the manifest digest it was pulled by and its file in
/// the artifact cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pulled {
    pub digest: Digest,
    pub path: PathBuf,
    /// The component's SHA-256 (hex), checked against its manifest: what
    /// the file must still hash to when it loads.
    pub sha256: String,
    /// Served from the cache without a request.
    pub cached: bool,
}

impl RegistryClient {
    pub fn new(options: RegistryOptions) -> Self {
        let oci = oci_client::Client::new(oci_config(&options));
        let reader = BoundedReader::new(&options);
        Self {
            options,
            oci,
            reader,
        }
    }

    /// `work`, or an Unreachable error once the deadline passed.
    async fn in_time<T>(
        &self,
        reference: &PluginReference,
        work: impl std::future::Future<Output = Result<T, RegistryError>>,
    ) -> Result<T, RegistryError> {
        tokio::time::timeout(self.options.timeout, work)
            .await
            .unwrap_or_else(|_| {
                Err(RegistryError::Unreachable {
                    reference: reference.to_string(),
                    message: format!(
                        "the registry did not answer in full within {} s (--registry-timeout-secs)",
                        self.options.timeout.as_secs()
                    ),
                })
            })
    }

    pub fn options(&self) -> &RegistryOptions {
        &self.options
    }

    /// The auth for `reference`: from `extra` (a Plugin's pull secrets)
    /// first, then the user's docker config.
    pub fn auth_for(
        &self,
        reference: &PluginReference,
        extra: Option<&Credentials>,
    ) -> RegistryAuth {
        if let Some(extra) = extra
            && let auth @ RegistryAuth::Basic(..) = extra.auth_for(reference.registry())
        {
            return auth;
        }
        self.options.credentials.auth_for(reference.registry())
    }

    /// The digest `reference` names now: its own, or its tag's.
    pub async fn resolve(
        &self,
        reference: &PluginReference,
        auth: &RegistryAuth,
    ) -> Result<Digest, RegistryError> {
        if let Some(digest) = reference.digest() {
            return Ok(digest);
        }
        // The manifest itself, hashed here: its digest is what its bytes
        // hash to, whatever a header says.
        let tag = reference.oci().tag().unwrap_or("latest");
        let bytes = self
            .reader
            .get(
                reference,
                auth,
                Target::Manifest(tag),
                &[OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE],
                MAX_MANIFEST_BYTES,
            )
            .await?;
        let text = sha256_digest(&bytes);
        Digest::parse(&text).map_err(|message| RegistryError::BadManifest {
            reference: reference.to_string(),
            message,
        })
    }

    /// The component of `reference` at `digest`, from `cache` or pulled
    /// into it.
    pub async fn pull(
        &self,
        reference: &PluginReference,
        digest: &Digest,
        auth: &RegistryAuth,
        cache: &ArtifactCache,
    ) -> Result<Pulled, RegistryError> {
        if let Some(cached) = cache.component(digest) {
            return Ok(Pulled {
                digest: digest.clone(),
                path: cached.path,
                sha256: cached.sha256,
                cached: true,
            });
        }
        let pinned = reference.at_digest(digest);
        let (bytes, layer) = self.component_manifest(&pinned, digest, auth).await?;
        let tmp = self.download(&pinned, &layer, auth, cache).await?;
        let path = cache
            .keep_component(&tmp, digest, &bytes)
            .map_err(|error| RegistryError::Cache {
                reference: pinned.to_string(),
                dir: cache.dir().to_path_buf(),
                error,
            })?;
        let sha256 = layer
            .digest
            .strip_prefix("sha256:")
            .unwrap_or(&layer.digest)
            .to_string();
        Ok(Pulled {
            digest: digest.clone(),
            path,
            sha256,
            cached: false,
        })
    }

    /// The manifest of `pinned` (its bytes, checked to hash to `digest`)
    /// and the component layer it names, within the size cap.
    async fn component_manifest(
        &self,
        pinned: &PluginReference,
        digest: &Digest,
        auth: &RegistryAuth,
    ) -> Result<(Vec<u8>, OciDescriptor), RegistryError> {
        let name = pinned.to_string();
        let bytes = self
            .reader
            .get(
                pinned,
                auth,
                Target::Manifest(digest.as_str()),
                &[OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE],
                MAX_MANIFEST_BYTES,
            )
            .await?;
        let actual = sha256_digest(&bytes);
        if actual != digest.as_str() {
            return Err(RegistryError::DigestMismatch {
                reference: name,
                expected: digest.to_string(),
                actual,
            });
        }
        let manifest: OciImageManifest =
            serde_json::from_slice(&bytes).map_err(|e| RegistryError::BadManifest {
                reference: name.clone(),
                message: e.to_string(),
            })?;
        let layer = component_layer(&manifest, self.options.max_bytes)
            .map_err(|error| RegistryError::NotAPlugin {
                reference: name.clone(),
                error,
            })?
            .clone();
        Ok((bytes, layer))
    }

    /// Streams `layer` of `pinned` into a new scratch file of `cache`,
    /// capped at the layer's size and within the deadline; the file's path.
    /// A file that fails a check is removed.
    async fn download(
        &self,
        pinned: &PluginReference,
        layer: &OciDescriptor,
        auth: &RegistryAuth,
        cache: &ArtifactCache,
    ) -> Result<PathBuf, RegistryError> {
        let name = pinned.to_string();
        let (tmp, file) = cache.new_temp().map_err(|error| RegistryError::Cache {
            reference: name.clone(),
            dir: cache.dir().to_path_buf(),
            error,
        })?;
        let mut writer = CappedWriter {
            file: tokio::fs::File::from_std(file),
            written: 0,
            cap: layer.size as u64,
        };
        // oci-client streams the layer to disk, checking its digest; it
        // is handed the token read here, so it asks the registry for none.
        let authorized = self.reader.authorize(pinned, auth).await?;
        self.oci
            .store_auth_if_needed(pinned.oci().resolve_registry(), &authorized)
            .await;
        let pulled = tokio::time::timeout(
            self.options.timeout,
            self.oci.pull_blob(pinned.oci(), layer, &mut writer),
        )
        .await;
        let written = writer.written;
        let Ok(pulled) = pulled else {
            let _ = std::fs::remove_file(&tmp);
            return Err(RegistryError::Unreachable {
                reference: name,
                message: format!(
                    "the registry did not send the plugin's {} bytes within {} s (--registry-timeout-secs)",
                    layer.size,
                    self.options.timeout.as_secs()
                ),
            });
        };
        if let Err(e) = pulled {
            let _ = std::fs::remove_file(&tmp);
            return Err(blob_error(pinned, layer, e));
        }
        if written != layer.size as u64 {
            let _ = std::fs::remove_file(&tmp);
            return Err(RegistryError::ContentMismatch {
                reference: name,
                detail: format!("{written} bytes, not the {} its manifest says", layer.size),
            });
        }
        Ok(tmp)
    }

    /// Pushes `wasm` as a plugin artifact to `reference`; the manifest's
    /// digest.
    pub async fn push(
        &self,
        reference: &PluginReference,
        wasm: Vec<u8>,
        interfaces: ComponentInterfaces,
        auth: &RegistryAuth,
    ) -> Result<Digest, RegistryError> {
        let layer = ImageLayer::new(wasm, WASM_LAYER.to_string(), None);
        let config = WasmConfig::new(layer.sha256_digest(), interfaces);
        let config = Config::new(
            serde_json::to_vec(&config).expect("a WasmConfig serializes"),
            WASM_CONFIG.to_string(),
            None,
        );
        let manifest = OciImageManifest::build(std::slice::from_ref(&layer), &config, None);
        let manifest_bytes = serde_json::to_vec(&manifest).expect("a manifest serializes");
        let layers = [layer];
        let pushed = self
            .oci
            .push(reference.oci(), &layers, config, auth, Some(manifest));
        self.in_time(reference, async {
            pushed.await.map_err(|e| classify(reference, e))
        })
        .await?;
        // What oci-client sent is the manifest serialized the same way.
        let digest = sha256_digest(&manifest_bytes);
        let resolved = self.resolve(reference, auth).await?;
        if resolved.as_str() != digest {
            tracing::debug!(%reference, "the registry names the pushed manifest {resolved}, computed {digest}");
        }
        Ok(resolved)
    }
}

/// The oci-client configuration for `options`; made anew for every client
/// (it is not `Clone`).
pub fn oci_config(options: &RegistryOptions) -> ClientConfig {
    ClientConfig {
        protocol: if options.insecure.is_empty() {
            ClientProtocol::Https
        } else {
            ClientProtocol::HttpsExcept(options.insecure.clone())
        },
        extra_root_certificates: options
            .extra_ca_pem
            .iter()
            .map(|pem| Certificate {
                encoding: CertificateEncoding::Pem,
                data: pem.clone(),
            })
            .collect(),
        connect_timeout: Some(Duration::from_secs(10)),
        read_timeout: Some(Duration::from_secs(60)),
        user_agent: concat!("reconciler-host/", env!("CARGO_PKG_VERSION")),
        ..ClientConfig::default()
    }
}

/// Why streaming `layer` of `pinned` failed: a digest that does not match
/// and more bytes than the manifest said are both a mismatch.
fn blob_error(
    pinned: &PluginReference,
    layer: &OciDescriptor,
    error: OciDistributionError,
) -> RegistryError {
    let name = pinned.to_string();
    match error {
        OciDistributionError::DigestError(e) => RegistryError::DigestMismatch {
            reference: name,
            expected: layer.digest.clone(),
            actual: e.to_string(),
        },
        OciDistributionError::IoError(e) if e.kind() == std::io::ErrorKind::FileTooLarge => {
            RegistryError::DigestMismatch {
                reference: name,
                expected: format!("{} ({} bytes)", layer.digest, layer.size),
                actual: format!("more than {} bytes", layer.size),
            }
        }
        e => classify(pinned, e),
    }
}

/// Writes to a file, failing once more than `cap` bytes arrive: a registry
/// cannot send more than the manifest said.
struct CappedWriter {
    file: tokio::fs::File,
    written: u64,
    cap: u64,
}

impl tokio::io::AsyncWrite for CappedWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.written + buf.len() as u64 > self.cap {
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                format!(
                    "the blob is larger than the {} bytes its manifest says",
                    self.cap
                ),
            )));
        }
        let this = &mut *self;
        let polled = Pin::new(&mut this.file).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            this.written += n as u64;
        }
        polled
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.file).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.file).poll_shutdown(cx)
    }
}
