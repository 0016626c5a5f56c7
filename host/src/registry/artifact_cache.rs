//! Pulled plugins on disk, by manifest digest.
//!
//! A component is stored once it has been pulled in full and its digest
//! checked, under the digest of the manifest it came with
//! (`components/sha256-HEX.wasm`), written to a temporary file and renamed
//! into place. So a host restarted with the cache on a volume finds every
//! digest it ran without a request, and no reader ever sees a partial file.
//! The last digest each tag resolved to is kept too (`tags/`), so a host
//! restarted while its registry is down still starts what it ran.
//!
//! The manifest is kept beside its component (`sha256-HEX.manifest.json`),
//! and a cached component is checked before it is handed out: the
//! manifest must hash to the digest, and the component to the layer digest
//! the manifest names. So a cache on a shared or persistent volume is only
//! ever a shortcut: a file changed or planted there is not served, it is
//! removed and pulled again.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::Digest as _;

use super::reference::{Digest, PluginReference};

#[derive(Clone, Debug)]
pub struct ArtifactCache {
    dir: PathBuf,
}

/// A cached component, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedComponent {
    pub path: PathBuf,
    /// Its SHA-256 (hex), the layer digest of its manifest.
    pub sha256: String,
}

impl ArtifactCache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn components(&self) -> PathBuf {
        self.dir.join("components")
    }

    fn path_of(&self, digest: &Digest) -> PathBuf {
        self.components()
            .join(format!("sha256-{}.wasm", digest.hex()))
    }

    fn manifest_of(&self, digest: &Digest) -> PathBuf {
        self.components()
            .join(format!("sha256-{}.manifest.json", digest.hex()))
    }

    /// The component pulled for `digest`, if it was and its bytes are still
    /// the ones its manifest names; one that is not is removed (and so
    /// pulled again).
    pub fn component(&self, digest: &Digest) -> Option<CachedComponent> {
        let path = self.path_of(digest);
        if !path.is_file() {
            return None;
        }
        match self.check(digest, &path) {
            Ok(sha256) => Some(CachedComponent { path, sha256 }),
            Err(why) => {
                tracing::warn!(
                    "the cached component of {digest} ({}) is not served: {why}; it is pulled again",
                    path.display()
                );
                let _ = std::fs::remove_file(&path);
                let _ = std::fs::remove_file(self.manifest_of(digest));
                None
            }
        }
    }

    /// The component's SHA-256 when its manifest hashes to `digest` and it
    /// hashes to the manifest's layer digest; why not otherwise.
    fn check(&self, digest: &Digest, path: &Path) -> Result<String, String> {
        let manifest_path = self.manifest_of(digest);
        let size = std::fs::metadata(&manifest_path)
            .map_err(|e| format!("its manifest cannot be read: {e}"))?
            .len();
        if size > super::bounded_reads::MAX_MANIFEST_BYTES as u64 {
            return Err(format!("its manifest is {size} bytes"));
        }
        let manifest = std::fs::read(&manifest_path)
            .map_err(|e| format!("its manifest cannot be read: {e}"))?;
        if super::content_digest::hex(&sha2::Sha256::digest(&manifest)) != digest.hex() {
            return Err("its manifest does not hash to the digest".into());
        }
        let manifest: oci_client::manifest::OciImageManifest = serde_json::from_slice(&manifest)
            .map_err(|e| format!("its manifest is not one: {e}"))?;
        let layer = super::artifact::component_layer(&manifest, u64::MAX)
            .map_err(|e| format!("its manifest is not a plugin's: {e}"))?;
        let expected = layer.digest.strip_prefix("sha256:").unwrap_or_default();
        let actual = sha256_of_file(path).map_err(|e| format!("it cannot be read: {e}"))?;
        if actual != expected {
            return Err(format!(
                "its bytes hash to sha256:{actual}, not the layer digest {} of its manifest",
                layer.digest
            ));
        }
        Ok(actual)
    }

    /// Whether the component cached for `digest` is still intact and hashes
    /// to `sha256` (hex), the hash it had when it was verified.
    pub fn is_intact(&self, digest: &Digest, sha256: &str) -> bool {
        self.component(digest).is_some_and(|c| c.sha256 == sha256)
    }

    /// A new temporary file beside the components (same filesystem, so
    /// [`Self::keep_component`] is a rename).
    pub fn new_temp(&self) -> std::io::Result<(PathBuf, std::fs::File)> {
        let dir = self.components();
        std::fs::create_dir_all(&dir)?;
        let file = tempfile::Builder::new()
            .prefix(".pull-")
            .tempfile_in(&dir)?;
        let (file, path) = file.keep().map_err(|e| e.error)?;
        Ok((path, file))
    }

    /// Moves a fully pulled and checked `tmp` into place for `digest`,
    /// with `manifest`, the bytes `digest` is the hash of.
    pub fn keep_component(
        &self,
        tmp: &Path,
        digest: &Digest,
        manifest: &[u8],
    ) -> std::io::Result<PathBuf> {
        let path = self.path_of(digest);
        let mut manifest_file = tempfile::NamedTempFile::new_in(self.components())?;
        manifest_file.write_all(manifest)?;
        manifest_file.as_file().sync_all()?;
        manifest_file
            .persist(self.manifest_of(digest))
            .map_err(|e| e.error)?;
        std::fs::File::open(tmp)?.sync_all()?;
        std::fs::rename(tmp, &path)?;
        Ok(path)
    }

    fn tag_file(&self, reference: &PluginReference) -> PathBuf {
        let hash = sha2::Sha256::digest(reference.to_string().as_bytes());
        self.dir
            .join("tags")
            .join(super::content_digest::hex(&hash[..16]))
    }

    /// Remembers that `reference` (a tag) resolved to `digest`.
    pub fn remember_tag(&self, reference: &PluginReference, digest: &Digest) {
        let path = self.tag_file(reference);
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(path.parent().expect("tags/ has a parent"))?;
            let mut tmp =
                tempfile::NamedTempFile::new_in(path.parent().expect("tags/ has a parent"))?;
            tmp.write_all(format!("{digest}\n{reference}\n").as_bytes())?;
            tmp.persist(&path).map_err(|e| e.error)?;
            Ok(())
        };
        if let Err(e) = write() {
            tracing::warn!(dir = %self.dir.display(), "cannot remember what {reference} resolved to: {e}");
        }
    }

    /// The digest `reference` last resolved to, when its component is
    /// still cached.
    pub fn last_resolved(&self, reference: &PluginReference) -> Option<Digest> {
        let text = std::fs::read_to_string(self.tag_file(reference)).ok()?;
        let (digest, rest) = text.split_once('\n')?;
        if rest.trim_end() != reference.to_string() {
            return None;
        }
        let digest = Digest::parse(digest).ok()?;
        self.component(&digest).map(|_| digest)
    }
}

fn sha256_of_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hash = sha2::Sha256::new();
    std::io::copy(&mut file, &mut hash)?;
    Ok(super::content_digest::hex(&hash.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manifest naming `component` as its one layer, and its digest.
    fn manifest_of(component: &[u8]) -> (Vec<u8>, Digest) {
        let layer = oci_client::client::ImageLayer::new(
            component.to_vec(),
            super::super::artifact::WASM_LAYER.to_string(),
            None,
        );
        let config = oci_client::client::Config::new(
            b"{}".to_vec(),
            super::super::artifact::WASM_CONFIG.to_string(),
            None,
        );
        let manifest = oci_client::manifest::OciImageManifest::build(&[layer], &config, None);
        let bytes = serde_json::to_vec(&manifest).unwrap();
        let hash = super::super::content_digest::hex(&sha2::Sha256::digest(&bytes));
        (bytes, Digest::parse(&format!("sha256:{hash}")).unwrap())
    }

    fn keep(cache: &ArtifactCache, component: &[u8]) -> (Digest, PathBuf) {
        let (manifest, digest) = manifest_of(component);
        let (tmp, mut file) = cache.new_temp().unwrap();
        file.write_all(component).unwrap();
        let kept = cache.keep_component(&tmp, &digest, &manifest).unwrap();
        (digest, kept)
    }

    #[test]
    fn a_component_is_found_only_once_kept_and_tags_remember_their_digest() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ArtifactCache::new(dir.path());
        let (manifest, digest) = manifest_of(b"\0asm");
        assert_eq!(cache.component(&digest), None);
        let (tmp, mut file) = cache.new_temp().unwrap();
        file.write_all(b"\0asm").unwrap();
        assert_eq!(
            cache.component(&digest),
            None,
            "a pull in progress is not a component"
        );
        let kept = cache.keep_component(&tmp, &digest, &manifest).unwrap();
        let found = cache.component(&digest).unwrap();
        assert_eq!(found.path, kept);
        assert_eq!(
            found.sha256,
            super::super::content_digest::hex(&sha2::Sha256::digest(b"\0asm"))
        );
        assert_eq!(std::fs::read(kept).unwrap(), b"\0asm");

        let tag = PluginReference::parse("oci://r.example/podset:1").unwrap();
        let other = PluginReference::parse("oci://r.example/podset:2").unwrap();
        assert_eq!(cache.last_resolved(&tag), None);
        cache.remember_tag(&tag, &digest);
        assert_eq!(cache.last_resolved(&tag), Some(digest));
        assert_eq!(cache.last_resolved(&other), None);
    }

    #[test]
    fn a_cached_component_changed_on_disk_or_planted_without_its_manifest_is_not_served() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ArtifactCache::new(dir.path());
        let (digest, kept) = keep(&cache, b"\0asm good");
        assert!(cache.component(&digest).is_some());
        // Another writer of the volume swaps the bytes, same length.
        std::fs::write(&kept, b"\0asm evil").unwrap();
        assert_eq!(cache.component(&digest), None);
        assert!(
            !kept.exists(),
            "the changed file is removed, to be pulled again"
        );

        // A file planted under a digest, with a manifest of its own making.
        let (other, planted) = keep(&cache, b"\0asm other");
        let (forged, _) = manifest_of(b"\0asm planted");
        std::fs::write(&planted, b"\0asm planted").unwrap();
        std::fs::write(cache.manifest_of(&other), forged).unwrap();
        assert_eq!(cache.component(&other), None);

        // A component without its manifest (a cache from before manifests
        // were kept, or planted whole).
        let (third, path) = keep(&cache, b"\0asm third");
        std::fs::remove_file(cache.manifest_of(&third)).unwrap();
        assert_eq!(cache.component(&third), None);
        assert!(!path.exists());
    }
}
