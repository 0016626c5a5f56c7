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
    /// The directory, or why there is none: a host whose cache cannot be
    /// written (a read-only root without its volume) still serves its
    /// plugins directory, and says why pulled plugins fail.
    dir: Result<tempfile::TempDir, String>,
}

impl ServedFiles {
    /// A directory of this process's own under `parent` (the artifact
    /// cache's, so serving is a hard link, and writable where the root
    /// filesystem is not).
    pub fn new(parent: &Path) -> std::io::Result<Self> {
        Ok(Self {
            dir: Ok(Self::make(parent)?),
        })
    }

    /// [`Self::new`], or, where `parent` cannot be written, files that
    /// refuse every plugin with the reason (logged once here).
    pub fn new_or_refusing(parent: &Path) -> Self {
        let dir = Self::make(parent).map_err(|e| {
            let why = format!(
                "pulled plugins cannot be served: {} cannot be written ({e}); mount a writable volume there (deploy/deployment.yaml mounts one at /cache) or name one with --registry-cache",
                parent.display()
            );
            tracing::error!("{why}; the plugins directory is served as usual");
            why
        });
        Self { dir }
    }

    fn make(parent: &Path) -> std::io::Result<tempfile::TempDir> {
        std::fs::create_dir_all(parent)?;
        tempfile::Builder::new()
            .prefix(".served-")
            .tempdir_in(parent)
    }

    /// The directory, unless it could not be made.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_ref().ok().map(tempfile::TempDir::path)
    }

    fn served_dir(&self) -> std::io::Result<&Path> {
        match &self.dir {
            Ok(dir) => Ok(dir.path()),
            Err(why) => Err(std::io::Error::other(why.clone())),
        }
    }

    /// The file `name` is served from.
    fn path_of(dir: &Path, name: &str) -> PathBuf {
        dir.join(format!("{name}.wasm"))
    }

    /// Serves `component` as `name`: a hard link when the cache is on the
    /// same filesystem, a copy otherwise.
    pub fn place(&self, name: &str, component: &Path) -> std::io::Result<PathBuf> {
        let dir = self.served_dir()?;
        let target = Self::path_of(dir, name);
        let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        if std::fs::hard_link(component, &tmp).is_err() {
            std::fs::copy(component, &tmp)?;
        }
        std::fs::rename(&tmp, &target)?;
        Ok(target)
    }

    /// Stops serving `name`.
    pub fn remove(&self, name: &str) -> std::io::Result<()> {
        let Some(dir) = self.dir() else {
            return Ok(()); // nothing was ever served
        };
        match std::fs::remove_file(Self::path_of(dir, name)) {
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
        let names: Vec<_> = crate::plugin::directory::plugin_files(served.dir().unwrap()).unwrap();
        assert_eq!(names, vec![path.clone()], "temporary files are dotfiles");
        served.remove("podset").unwrap();
        served.remove("podset").unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn an_unwritable_parent_refuses_each_plugin_with_the_reason() {
        let parent = tempfile::tempdir().unwrap();
        let file = parent.path().join("a-file");
        std::fs::write(&file, b"not a directory").unwrap();
        let served = ServedFiles::new_or_refusing(&file.join("registry"));
        assert!(served.dir().is_none());
        let refused = served.place("podset", &file).unwrap_err().to_string();
        assert!(
            refused.contains("registry") && refused.contains("--registry-cache"),
            "{refused}"
        );
        served.remove("podset").unwrap();
    }
}
