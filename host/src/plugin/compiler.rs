//! Compiling plugins on an engine that lives only for the compile.
//!
//! Cranelift keeps the contexts it compiled with in the engine, to reuse
//! them: after the five example plugins that is ~15 MiB of heap, held for
//! good by a host that compiles again only when a plugin changes, and it
//! tripled the idle memory of a host started without a warm compile cache
//! (BENCHMARKS.md). So a plugin is compiled on a short-lived engine with the
//! same code-generation settings as the one that runs it, serialized, and
//! loaded into the long-lived engine as a compile-cache entry is. The
//! short-lived engine's memory is freed with it and handed back to the
//! kernel.

use crate::support::heap_trim::release_freed_memory;
use wasmtime::component::Component;
use wasmtime::{Config, Engine};

/// Compiles components for engines built from the same settings.
#[derive(Clone)]
pub(crate) struct Compiler {
    /// The running engine's settings without its instance allocator: the
    /// pooling allocator reserves address space for every slot up front,
    /// which a compile does not need, and it does not change generated code.
    config: Config,
}

impl Compiler {
    pub(crate) fn new(config: Config) -> Self {
        Self { config }
    }

    /// `wasm` compiled and serialized, for an engine whose code-generation
    /// settings match `config`'s.
    pub(crate) fn precompile(&self, wasm: &[u8]) -> wasmtime::Result<Artifact> {
        let engine = Engine::new(&self.config)?;
        let artifact = engine.precompile_component(wasm);
        drop(engine);
        release_freed_memory();
        artifact.map(Artifact)
    }
}

/// A component serialized by a [`Compiler`]: only `precompile` makes one,
/// which is what makes loading it sound.
pub(crate) struct Artifact(Vec<u8>);

impl Artifact {
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// The component, loaded into `engine`.
    pub(crate) fn load(&self, engine: &Engine) -> wasmtime::Result<Component> {
        // SAFETY: the bytes are wasmtime's own serialization (see
        // `Compiler::precompile`), never read from outside; wasmtime checks
        // that `engine`'s code-generation settings match the compiler's.
        unsafe { Component::deserialize(engine, &self.0) }
    }
}
