//! Pulled plugins on disk, by manifest digest.
//!
//! A component is stored once it has been pulled in full and its digest
//! checked, under the digest of the manifest it came with
//! (`components/sha256-HEX.wasm`), written to a temporary file and renamed
//! into place. So a host restarted with the cache on a volume finds every
//! digest it ran without a request, and no reader ever sees a partial file.
//! The last digest each tag resolved to is kept too (`tags/`), so a host
//! restarted while its registry is down still starts what it ran.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::Digest as _;

use super::reference::{Digest, PluginReference};

#[derive(Clone, Debug)]
pub struct ArtifactCache {
    dir: PathBuf,
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

    /// The component pulled for `digest`, if it was.
    pub fn component(&self, digest: &Digest) -> Option<PathBuf> {
        let path = self.path_of(digest);
        path.is_file().then_some(path)
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

    /// Moves a fully pulled and checked `tmp` into place for `digest`.
    pub fn keep_component(&self, tmp: &Path, digest: &Digest) -> std::io::Result<PathBuf> {
        let path = self.path_of(digest);
        std::fs::File::open(tmp)?.sync_all()?;
        std::fs::rename(tmp, &path)?;
        Ok(path)
    }

    fn tag_file(&self, reference: &PluginReference) -> PathBuf {
        let hash = sha2::Sha256::digest(reference.to_string().as_bytes());
        self.dir.join("tags").join(super::client::hex(&hash[..16]))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_component_is_found_only_once_kept_and_tags_remember_their_digest() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ArtifactCache::new(dir.path());
        let digest = Digest::parse(&format!("sha256:{}", "ab".repeat(32))).unwrap();
        assert_eq!(cache.component(&digest), None);
        let (tmp, mut file) = cache.new_temp().unwrap();
        file.write_all(b"\0asm").unwrap();
        assert_eq!(
            cache.component(&digest),
            None,
            "a pull in progress is not a component"
        );
        let kept = cache.keep_component(&tmp, &digest).unwrap();
        assert_eq!(cache.component(&digest), Some(kept.clone()));
        assert_eq!(std::fs::read(kept).unwrap(), b"\0asm");

        let tag = PluginReference::parse("oci://r.example/podset:1").unwrap();
        let other = PluginReference::parse("oci://r.example/podset:2").unwrap();
        assert_eq!(cache.last_resolved(&tag), None);
        cache.remember_tag(&tag, &digest);
        assert_eq!(cache.last_resolved(&tag), Some(digest));
        assert_eq!(cache.last_resolved(&other), None);
    }
}
