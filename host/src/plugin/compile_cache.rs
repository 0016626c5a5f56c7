//! Compiled components on disk, so a restart does not recompile.
//!
//! Compiling a plugin costs tens of milliseconds in release (half a second in
//! a debug build); loading a precompiled one costs well under a millisecond.
//! An entry is keyed by the SHA-256 of the Wasm bytes and by the engine's
//! compatibility hash (wasmtime version and every setting that affects code
//! generation), so a changed plugin or a changed host never loads stale code.
//!
//! Loading precompiled code is `unsafe` in wasmtime: the bytes are trusted to
//! be wasmtime's own output. Only files this cache wrote are read (written
//! atomically under a name no one else chooses), and an entry that fails to
//! load is recompiled and replaced rather than trusted further.
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

    fn entry(&self, engine: &Engine, wasm_sha256: &str) -> PathBuf {
        let mut h = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        self.dir
            .join(format!("{wasm_sha256}-{:016x}.cwasm", h.finish()))
    }

    /// Whether the compiled code of `wasm_sha256` for `engine` is cached.
    pub fn holds(&self, engine: &Engine, wasm_sha256: &str) -> bool {
        self.entry(engine, wasm_sha256).is_file()
    }

    /// The cached component of `wasm_sha256` loaded again: a copy with a
    /// module identity of its own (idle_release.rs).
    pub(crate) fn reload(&self, engine: &Engine, wasm_sha256: &str) -> wasmtime::Result<Component> {
        // SAFETY: as in `load_or_compile`: only this cache writes the entry,
        // under a name that carries the engine's compatibility hash.
        unsafe { Component::deserialize_file(engine, self.entry(engine, wasm_sha256)) }
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
        let entry = self.entry(engine, wasm_sha256);
        if entry.is_file() {
            // SAFETY: the file was written by `store` below from
            // `Component::serialize` of an engine with the same compatibility
            // hash (part of the file name), in a directory only this host
            // writes. A file that fails validation is recompiled.
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
        std::fs::create_dir_all(&self.dir)?;
        let (tmp, mut file) = tempfile_in(&self.dir)?;
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
        let entries = match std::fs::read_dir(&self.dir) {
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
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
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
