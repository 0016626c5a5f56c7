//! Compiled components on disk, so a restart does not recompile.
//!
//! Compiling a plugin costs tens of milliseconds in release (half a second in
//! a debug build); loading a precompiled one costs well under a millisecond.
//! An entry is keyed by the SHA-256 of the Wasm bytes and by the engine's
//! compatibility hash (wasmtime version and every setting that affects code
//! generation), so a changed plugin or a changed host never loads stale code.
//!
//! Loading precompiled code is `unsafe` in wasmtime: the bytes are trusted to
//! be wasmtime's own output, and are run as native code. So only files the
//! host's own user could have written are read: the cache lives in a
//! directory that user owns and no one else may write (when the directory
//! given is shared, such as a volume writable by all, a private
//! `host-<uid>` directory inside it), and an entry is loaded only if it is a
//! regular file owned by that user and writable by no one else. An entry
//! that fails any of that, or fails to load, is recompiled and replaced
//! rather than trusted. What this cannot tell apart is another process
//! running as the same user: a volume shared with such a process is shared
//! with the host itself.
//!
//! Every new plugin build adds an entry (a compiled Python plugin is about
//! 36 MB), and nothing else ever removes one, so the cache is bounded: after
//! each write the least recently used entries go until the cache fits
//! (`--compile-cache-max-mib`). A load counts as a use. Removing an entry
//! another host process has loaded is safe: its code stays mapped until that
//! process drops it.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use wasmtime::Engine;
use wasmtime::component::Component;

use super::compiler::Compiler;

/// The bound on the cache's compiled entries by default: room for a few
/// dozen plugins in any language.
pub const DEFAULT_MAX_MIB: u64 = 1024;

/// A partial write older than this was left by a process that died while
/// writing; a live one finishes in well under a second.
const ABANDONED_WRITE_AGE: Duration = Duration::from_secs(3600);

#[derive(Clone, Debug)]
pub struct CompileCache {
    dir: PathBuf,
    max_bytes: u64,
    /// Where entries are read and written, found on first use: `dir`, or
    /// a private directory inside it; `None` when neither can be trusted.
    private: std::sync::Arc<std::sync::OnceLock<Option<PathBuf>>>,
}

/// Where a component came from, for the load log line and benchmarks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompileSource {
    /// Compiled now, and written to the cache if there is one.
    Compiled,
    /// Loaded from the on-disk cache.
    Cached,
}

impl CompileCache {
    /// A cache in `dir` bounded at [`DEFAULT_MAX_MIB`].
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self::bounded(dir, DEFAULT_MAX_MIB << 20)
    }

    /// A cache in `dir` whose compiled entries take at most `max_bytes`
    /// (the entry just written is kept even when it alone is larger).
    pub fn bounded(dir: impl Into<PathBuf>, max_bytes: u64) -> Self {
        Self {
            dir: dir.into(),
            max_bytes,
            private: Default::default(),
        }
    }

    /// `$XDG_CACHE_HOME/reconciler-host` or `~/.cache/reconciler-host`.
    pub fn default_dir() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(base.join("reconciler-host"))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory entries live in (see the module documentation), or
    /// `None` when no directory there can be trusted (said once).
    fn private_dir(&self) -> Option<&Path> {
        self.private
            .get_or_init(|| match private_dir(&self.dir) {
                Ok(dir) => Some(dir),
                Err(why) => {
                    tracing::warn!(dir = %self.dir.display(), "the compile cache is not used: {why}; plugins are compiled at every start");
                    None
                }
            })
            .as_deref()
    }

    fn entry(&self, engine: &Engine, wasm_sha256: &str) -> Option<PathBuf> {
        let mut h = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        Some(
            self.private_dir()?
                .join(format!("{wasm_sha256}-{:016x}.cwasm", h.finish())),
        )
    }

    /// Whether the compiled code of `wasm_sha256` for `engine` is cached,
    /// in an entry the host may trust.
    pub fn holds(&self, engine: &Engine, wasm_sha256: &str) -> bool {
        self.entry(engine, wasm_sha256)
            .is_some_and(|entry| trusted_entry(&entry).is_ok())
    }

    /// The cached component of `wasm_sha256` loaded again: a copy with a
    /// module identity of its own (idle_release.rs).
    pub(crate) fn reload(&self, engine: &Engine, wasm_sha256: &str) -> wasmtime::Result<Component> {
        let entry = self
            .entry(engine, wasm_sha256)
            .ok_or_else(|| wasmtime::format_err!("the compile cache is not used"))?;
        trusted_entry(&entry).map_err(|why| wasmtime::format_err!("{}: {why}", entry.display()))?;
        // SAFETY: as in `load_or_compile`: the entry is a file of the host's
        // own user, in a directory no one else may write, under a name that
        // carries the engine's compatibility hash.
        unsafe { Component::deserialize_file(engine, entry) }
    }

    /// The component for these bytes: from the cache, or compiled (by
    /// `compiler`, for `engine`) and cached. A cache that cannot be written
    /// only costs a recompile next time, so write failures are logged, not
    /// returned.
    pub(crate) fn load_or_compile(
        &self,
        engine: &Engine,
        compiler: &Compiler,
        wasm: &[u8],
        wasm_sha256: &str,
    ) -> wasmtime::Result<(Component, CompileSource)> {
        let Some(entry) = self.entry(engine, wasm_sha256) else {
            return Ok((
                compiler.precompile(wasm)?.load(engine)?,
                CompileSource::Compiled,
            ));
        };
        match trusted_entry(&entry) {
            Ok(()) => {
                // SAFETY: the file is the host's own user's, in a directory
                // no one else may write (checked just now), written by
                // `store` below from `Component::serialize` of an engine with
                // the same compatibility hash (part of the file name). A file
                // that fails validation is recompiled.
                match unsafe { Component::deserialize_file(engine, &entry) } {
                    Ok(component) => {
                        mark_used(&entry);
                        return Ok((component, CompileSource::Cached));
                    }
                    Err(e) => {
                        tracing::warn!(path = %entry.display(), "compile cache entry unusable, recompiling: {e:#}")
                    }
                }
            }
            Err(EntryDistrust::Missing) => {}
            Err(why) => {
                tracing::warn!(path = %entry.display(), "compile cache entry not trusted, recompiling: {why}")
            }
        }
        let artifact = compiler.precompile(wasm)?;
        // Loaded from the file, as on a cache hit, its code is file-backed:
        // the kernel can drop those pages and read them again.
        let component = match self.store(&entry, artifact.bytes()) {
            // SAFETY: `entry` is `artifact` as `store` just wrote it, and
            // wasmtime checks that `engine`'s settings match the compiler's.
            Ok(()) => {
                self.trim(&entry);
                unsafe { Component::deserialize_file(engine, &entry) }?
            }
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), "cannot write the compile cache: {e:#}");
                artifact.load(engine)?
            }
        };
        Ok((component, CompileSource::Compiled))
    }

    fn store(&self, entry: &Path, artifact: &[u8]) -> anyhow::Result<()> {
        let dir = entry
            .parent()
            .expect("an entry lies in the cache's directory");
        let (tmp, mut file) = tempfile_in(dir)?;
        let written = file
            .write_all(artifact)
            .and_then(|()| file.sync_all())
            .and_then(|()| std::fs::rename(&tmp, entry));
        if written.is_err() {
            // A full disk must not also fill the directory with partial files.
            let _ = std::fs::remove_file(&tmp);
        }
        Ok(written?)
    }
}

impl CompileCache {
    /// Removes the least recently used entries until the compiled ones fit
    /// the bound, never `keep`; and partial writes a dead process left.
    /// A failure here only leaves the cache larger, so it is logged.
    fn trim(&self, keep: &Path) {
        let Some(dir) = self.private_dir() else {
            return;
        };
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => {
                tracing::debug!(dir = %self.dir.display(), "cannot list the compile cache: {e}");
                return;
            }
        };
        let now = SystemTime::now();
        let mut compiled = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".cwasm") && meta.is_file() {
                compiled.push((used, meta.len(), path));
            } else if name.starts_with(".tmp-")
                && now.duration_since(used).unwrap_or_default() > ABANDONED_WRITE_AGE
            {
                let _ = std::fs::remove_file(&path);
            }
        }
        let mut total: u64 = compiled.iter().map(|(_, len, _)| len).sum();
        if total <= self.max_bytes {
            return;
        }
        compiled.sort();
        let (mut removed, mut freed) = (0usize, 0u64);
        for (_, len, path) in compiled {
            if total <= self.max_bytes {
                break;
            }
            if path == keep {
                continue;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    total -= len;
                    removed += 1;
                    freed += len;
                }
                Err(e) => {
                    tracing::debug!(path = %path.display(), "cannot remove a compile cache entry: {e}")
                }
            }
        }
        tracing::info!(
            dir = %self.dir.display(),
            removed,
            freed_mib = freed >> 20,
            max_mib = self.max_bytes >> 20,
            "compile cache over its bound: least recently used entries removed (--compile-cache-max-mib)"
        );
    }
}

/// Why an entry is not loaded.
#[derive(Debug, thiserror::Error)]
enum EntryDistrust {
    #[error("no such entry")]
    Missing,
    #[error("not a regular file")]
    NotAFile,
    #[error("owned by uid {owner}, not the host's {host}")]
    Owner { owner: u32, host: u32 },
    #[error("writable by others (mode {0:o})")]
    Writable(u32),
}

/// Whether `entry` may be loaded: a regular file (not a link) of the host's
/// own user that no one else may write.
fn trusted_entry(entry: &Path) -> Result<(), EntryDistrust> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = match std::fs::symlink_metadata(entry) {
        Ok(meta) => meta,
        Err(_) => return Err(EntryDistrust::Missing),
    };
    if !meta.file_type().is_file() {
        return Err(EntryDistrust::NotAFile);
    }
    let host = effective_uid();
    if meta.uid() != host {
        return Err(EntryDistrust::Owner {
            owner: meta.uid(),
            host,
        });
    }
    if meta.mode() & 0o022 != 0 {
        return Err(EntryDistrust::Writable(meta.mode() & 0o7777));
    }
    Ok(())
}

fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// `dir` if the host's user owns it and no one else may write it;
/// otherwise `dir/host-<uid>`, made private if it is not there. Shared
/// directories (a volume writable by all) are common, and a file planted in
/// one must not be run as compiled code.
fn private_dir(dir: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
    let uid = effective_uid();
    let private = |path: &Path| -> Result<bool, String> {
        let meta = std::fs::symlink_metadata(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Ok(meta.file_type().is_dir() && meta.uid() == uid && meta.mode() & 0o022 == 0)
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    if private(dir)? {
        return Ok(dir.to_path_buf());
    }
    let inner = dir.join(format!("host-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&inner) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", inner.display())),
    }
    if private(&inner)? {
        Ok(inner)
    } else {
        Err(format!(
            "{} is writable by others, and so is {}, which is not the host's own private directory",
            dir.display(),
            inner.display()
        ))
    }
}

/// Records a load as a use, for [`CompileCache::trim`]'s order.
fn mark_used(entry: &Path) {
    let touched = std::fs::File::options()
        .write(true)
        .open(entry)
        .and_then(|file| file.set_modified(SystemTime::now()));
    if let Err(e) = touched {
        tracing::debug!(path = %entry.display(), "cannot mark a compile cache entry used: {e}");
    }
}

/// A uniquely named temporary file in `dir` (same filesystem, so the rename
/// into place is atomic).
fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!(".tmp-{}-{n}", std::process::id()));
    // Writable by the host's user alone, whatever the umask: a group-writable
    // entry would not be trusted again.
    let file = std::os::unix::fs::OpenOptionsExt::mode(
        std::fs::OpenOptions::new().write(true).create_new(true),
        0o600,
    )
    .open(&path)?;
    Ok((path, file))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry_used_at(dir: &Path, name: &str, len: usize, secs_ago: u64) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, vec![0u8; len]).unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(SystemTime::now() - Duration::from_secs(secs_ago))
            .unwrap();
        path
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn the_least_recently_used_entries_go_until_the_cache_fits() {
        let dir = tempfile::tempdir().unwrap();
        entry_used_at(dir.path(), "old.cwasm", 1000, 300);
        entry_used_at(dir.path(), "used-recently.cwasm", 1000, 10);
        entry_used_at(dir.path(), "middle.cwasm", 1000, 100);
        let new = entry_used_at(dir.path(), "new.cwasm", 1000, 0);
        // Not an entry: never counted, never removed.
        std::fs::create_dir(dir.path().join("registry")).unwrap();

        CompileCache::bounded(dir.path(), 2500).trim(&new);

        assert_eq!(
            names(dir.path()),
            ["new.cwasm", "registry", "used-recently.cwasm"]
        );
    }

    #[test]
    fn the_entry_just_written_stays_even_over_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        entry_used_at(dir.path(), "other.cwasm", 10, 60);
        let new = entry_used_at(dir.path(), "large.cwasm", 5000, 60);

        CompileCache::bounded(dir.path(), 1000).trim(&new);

        assert_eq!(names(dir.path()), ["large.cwasm"]);
    }

    #[test]
    fn a_cache_within_its_bound_is_left_alone_but_abandoned_writes_go() {
        let dir = tempfile::tempdir().unwrap();
        let new = entry_used_at(dir.path(), "a.cwasm", 100, 0);
        entry_used_at(dir.path(), "b.cwasm", 100, 99_999);
        entry_used_at(dir.path(), ".tmp-1-0", 100, 7200);
        entry_used_at(dir.path(), ".tmp-2-0", 100, 1);

        CompileCache::bounded(dir.path(), 1000).trim(&new);

        assert_eq!(names(dir.path()), [".tmp-2-0", "a.cwasm", "b.cwasm"]);
    }

    #[test]
    fn a_shared_directory_holds_a_private_one_and_entries_others_could_write_are_not_loaded() {
        use std::os::unix::fs::PermissionsExt as _;
        let shared = tempfile::tempdir().unwrap();
        std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let cache = CompileCache::new(shared.path());
        let private = cache.private_dir().unwrap().to_path_buf();
        assert_eq!(
            private,
            shared.path().join(format!("host-{}", effective_uid()))
        );
        let mode = std::fs::metadata(&private).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);

        // Written as `store` writes: trusted.
        let (tmp, mut file) = tempfile_in(&private).unwrap();
        file.write_all(b"code").unwrap();
        let ours = private.join("ours.cwasm");
        std::fs::rename(&tmp, &ours).unwrap();
        assert!(trusted_entry(&ours).is_ok());
        // Made writable by others: not loaded.
        std::fs::set_permissions(&ours, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(matches!(
            trusted_entry(&ours),
            Err(EntryDistrust::Writable(0o666))
        ));
        // A link to a file elsewhere: not loaded.
        let planted = shared.path().join("planted.cwasm");
        std::fs::write(&planted, b"code").unwrap();
        let link = private.join("link.cwasm");
        std::os::unix::fs::symlink(&planted, &link).unwrap();
        assert!(matches!(trusted_entry(&link), Err(EntryDistrust::NotAFile)));
        assert!(matches!(
            trusted_entry(&private.join("absent.cwasm")),
            Err(EntryDistrust::Missing)
        ));
    }

    #[test]
    fn a_private_directory_someone_else_made_writable_is_not_used() {
        use std::os::unix::fs::PermissionsExt as _;
        let shared = tempfile::tempdir().unwrap();
        std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let inner = shared.path().join(format!("host-{}", effective_uid()));
        std::fs::create_dir(&inner).unwrap();
        std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o777)).unwrap();
        let why = private_dir(shared.path()).unwrap_err();
        assert!(why.contains("writable by others"), "{why}");
        assert!(CompileCache::new(shared.path()).private_dir().is_none());
    }

    #[test]
    fn a_load_counts_as_a_use() {
        let dir = tempfile::tempdir().unwrap();
        let loaded = entry_used_at(dir.path(), "loaded.cwasm", 1000, 600);
        entry_used_at(dir.path(), "idle.cwasm", 1000, 60);
        mark_used(&loaded);
        let new = entry_used_at(dir.path(), "new.cwasm", 1000, 0);

        CompileCache::bounded(dir.path(), 2000).trim(&new);

        assert_eq!(names(dir.path()), ["loaded.cwasm", "new.cwasm"]);
    }
}
