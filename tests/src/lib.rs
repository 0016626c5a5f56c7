//! Shared setup for the end-to-end tests: where the compiled plugins are, and
//! one sandbox per test process.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use reconciler_host::plugin::{HostLimits, LoadedPlugin, Sandbox, SandboxConfig};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf()
}

/// A compiled example plugin, `plugins/<name>.wasm`.
pub fn example_plugin(name: &str) -> PathBuf {
    built(root().join("plugins").join(format!("{name}.wasm")))
}

/// A compiled test-only plugin, `target/test-plugins/<name>.wasm`.
pub fn test_plugin(name: &str) -> PathBuf {
    built(
        root()
            .join("target/test-plugins")
            .join(format!("{name}.wasm")),
    )
}

fn built(path: PathBuf) -> PathBuf {
    assert!(
        path.is_file(),
        "{} is missing: build the plugins first with scripts/build-plugins (scripts/test does it for you)",
        path.display()
    );
    path
}

/// Limits tuned for tests: a short deadline so the infinite-loop test is
/// quick. Everything else is the host default.
pub fn test_limits() -> HostLimits {
    HostLimits {
        timeout_ms: 200,
        ..HostLimits::default()
    }
}

/// One sandbox for the whole test process, with its own compile cache.
pub fn sandbox() -> &'static Sandbox {
    static SANDBOX: OnceLock<Sandbox> = OnceLock::new();
    SANDBOX.get_or_init(|| {
        let cache =
            std::env::temp_dir().join(format!("reconciler-host-tests-{}", std::process::id()));
        Sandbox::new(SandboxConfig {
            limits: test_limits(),
            compile_cache: Some(cache),
            ..SandboxConfig::default()
        })
        .expect("create the sandbox")
    })
}

/// A plugin loaded into [`sandbox`], panicking with the load error.
pub fn load(path: &Path) -> LoadedPlugin {
    sandbox().load(path).unwrap_or_else(|e| panic!("{e}"))
}
