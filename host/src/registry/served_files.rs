//! The files pulled plugins are served from.
//!
//! Hot reload serves files; a pulled plugin is given one here, named for
//! its reference or its Plugin resource, that points at the component in
//! the artifact cache. Replacing it (a new digest) is a rename, so the
//! directory's rescan sees the old version or the new one and never half
//! of either; removing it unloads the plugin as removing a file from the
//! plugins directory does. The directory belongs to one process: two hosts
//! sharing a cache never serve each other's plugins.

use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct ServedFiles {
    dir: tempfile::TempDir,
}

impl ServedFiles {
    /// A directory of this process's own under `parent` (the artifact
    /// cache's, so serving is a hard link, and writable where the root
    /// filesystem is not).
    pub fn new(parent: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(parent)?;
        Ok(Self {
            dir: tempfile::Builder::new()
                .prefix(".served-")
                .tempdir_in(parent)?,
        })
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The file `name` is served from.
    pub fn path_of(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.wasm"))
    }

    /// Serves `component` as `name`: a hard link when the cache is on the
    /// same filesystem, a copy otherwise.
    pub fn place(&self, name: &str, component: &Path) -> std::io::Result<PathBuf> {
        let target = self.path_of(name);
        let tmp = self
            .dir
            .path()
            .join(format!(".{name}.{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        if std::fs::hard_link(component, &tmp).is_err() {
            std::fs::copy(component, &tmp)?;
        }
        std::fs::rename(&tmp, &target)?;
        Ok(target)
    }

    /// Stops serving `name`.
    pub fn remove(&self, name: &str) -> std::io::Result<()> {
        match std::fs::remove_file(self.path_of(name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placing_replaces_whole_files_and_removing_unserves() {
        let cache = tempfile::tempdir().unwrap();
        let (a, b) = (cache.path().join("a"), cache.path().join("b"));
        std::fs::write(&a, b"one").unwrap();
        std::fs::write(&b, b"two").unwrap();
        let served = ServedFiles::new(cache.path()).unwrap();
        let path = served.place("podset", &a).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"one");
        served.place("podset", &b).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(
            std::fs::read(&a).unwrap(),
            b"one",
            "the cache's file is untouched"
        );
        let names: Vec<_> = crate::plugin::directory::plugin_files(served.dir()).unwrap();
        assert_eq!(names, vec![path.clone()], "temporary files are dotfiles");
        served.remove("podset").unwrap();
        served.remove("podset").unwrap();
        assert!(!path.exists());
    }
}
