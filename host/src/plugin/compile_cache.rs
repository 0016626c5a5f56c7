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

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

use super::compiler::Compiler;

#[derive(Clone, Debug)]
pub struct CompileCache {
    dir: PathBuf,
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
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
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
                Ok(component) => return Ok((component, CompileSource::Cached)),
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
            Ok(()) => unsafe { Component::deserialize_file(engine, &entry) }?,
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
