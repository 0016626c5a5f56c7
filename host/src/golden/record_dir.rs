//! The directory `--record` writes cases into, kept so that recording can
//! run for as long as the host does:
//! - a case is never overwritten: numbers continue from the highest found
//!   (a restart goes on where the last run stopped) and a file is only
//!   ever created new, so two hosts recording into one directory skip each
//!   other's numbers instead of replacing each other's cases;
//! - the cases together stay within a size budget: past it the oldest are
//!   removed, so a plugin that reads many objects cannot fill the volume;
//! - cases and the directories made for them are readable by the host's
//!   user only, as they hold whatever the plugin read.

use std::collections::BTreeMap;
use std::fs::{DirBuilder, OpenOptions};
use std::io::{ErrorKind, Write as _};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Why a case was not written.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(
        "a case of {bytes} bytes is larger than the whole recording budget of {max_bytes} bytes (raise --record-max-mib)"
    )]
    TooLarge { bytes: u64, max_bytes: u64 },
    #[error("cannot write {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Case files under one root, oldest first.
pub struct RecordDir {
    root: PathBuf,
    max_bytes: u64,
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    /// The number the next case gets.
    next: u64,
    /// Every case known, by number (the order they were written in) and
    /// path (two hosts writing at once may give two plugins' cases one
    /// number), with its size.
    cases: BTreeMap<(u64, PathBuf), u64>,
    bytes: u64,
}

impl RecordDir {
    /// Opens `root` (created if missing), counting the cases earlier runs
    /// left in `<root>/<plugin>/` towards the budget of `max_bytes`.
    pub fn open(root: &Path, max_bytes: u64) -> std::io::Result<Self> {
        private_dir(root)?;
        let mut kept = Kept {
            next: 1,
            ..Kept::default()
        };
        for plugin in std::fs::read_dir(root)? {
            let plugin = plugin?.path();
            if !plugin.is_dir() {
                continue;
            }
            for file in std::fs::read_dir(&plugin)? {
                let file = file?;
                let Some(number) = case_number(&file.file_name().to_string_lossy()) else {
                    continue;
                };
                let size = file.metadata()?.len();
                kept.next = kept.next.max(number.saturating_add(1));
                kept.bytes += size;
                kept.cases.insert((number, file.path()), size);
            }
        }
        let dir = Self {
            root: root.to_path_buf(),
            max_bytes,
            kept: Mutex::new(kept),
        };
        dir.evict(&mut dir.kept());
        Ok(dir)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Writes `text` as a new case `<plugin>/<number>-<name>.yaml`, then
    /// removes the oldest cases while all of them are over the budget.
    pub fn write(&self, plugin: &str, name: &str, text: &str) -> Result<PathBuf, RecordError> {
        let bytes = text.len() as u64;
        if bytes > self.max_bytes {
            return Err(RecordError::TooLarge {
                bytes,
                max_bytes: self.max_bytes,
            });
        }
        let dir = self.root.join(plugin);
        private_dir(&dir).map_err(|source| RecordError::Io {
            path: dir.clone(),
            source,
        })?;
        let (number, path) = loop {
            let number = {
                let mut kept = self.kept();
                let number = kept.next;
                kept.next += 1;
                number
            };
            let path = dir.join(format!("{number:06}-{name}.yaml"));
            match create_private(&path, text) {
                Ok(()) => break (number, path),
                // Another host recording here took this number.
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(source) => return Err(RecordError::Io { path, source }),
            }
        };
        let mut kept = self.kept();
        kept.cases.insert((number, path.clone()), bytes);
        kept.bytes += bytes;
        self.evict(&mut kept);
        Ok(path)
    }

    fn kept(&self) -> MutexGuard<'_, Kept> {
        // Every update leaves the counts whole before it can panic.
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Removes the oldest cases until the rest fit the budget.
    fn evict(&self, kept: &mut Kept) {
        while kept.bytes > self.max_bytes {
            let Some(((_, path), size)) = kept.cases.pop_first() else {
                break;
            };
            kept.bytes -= size;
            if let Err(e) = std::fs::remove_file(&path)
                && e.kind() != ErrorKind::NotFound
            {
                tracing::warn!(
                    "cannot remove the old recorded case {} to keep {} within --record-max-mib: {e}",
                    path.display(),
                    self.root.display()
                );
            }
        }
    }
}

/// The number a case file's name starts with (`000042-default-web.yaml`).
fn case_number(file_name: &str) -> Option<u64> {
    let (number, _) = file_name.split_once('-')?;
    if !file_name.ends_with(".yaml") || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    number.parse().ok()
}

/// Creates `dir` and its missing parents, readable by this user only.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Writes `text` to `path`, which must not exist yet, readable by this user
/// only; a file not written whole is removed.
fn create_private(path: &Path, text: &str) -> std::io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes()).inspect_err(|_| {
        let _ = std::fs::remove_file(path);
    })
}
