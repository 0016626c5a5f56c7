//! Shared setup for the end-to-end tests: where the compiled plugins are,
//! one sandbox per test process, and the harness of the real-cluster tests.

pub mod container;
pub mod https_client;
pub mod intercepted;
pub mod log_capture;
pub mod oci_registry;
pub mod response_fuzz;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use reconciler_host::plugin::{HostLimits, LoadedPlugin, Sandbox, SandboxConfig};

pub mod real_cluster;

/// A port of 127.0.0.1 free now (another process may take it before the
/// caller binds it; tests bind at once).
pub fn free_loopback_port() -> std::io::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// The text a host serves on /metrics at `address` (host:port, plain
/// HTTP, as `--metrics-insecure` serves it on loopback), headers included.
pub fn metrics_text(address: &str) -> std::io::Result<String> {
    report_text(address, "/metrics")
}

/// The text a host serves on `path` of its reports port at `address`
/// (plain HTTP, `--metrics-insecure`), headers included.
pub fn report_text(address: &str, path: &str) -> std::io::Result<String> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(address)?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}

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

/// One sandbox for the whole test process. Its compile cache is shared by
/// every test binary and kept in the target directory, so it is reused across
/// runs and removed by `cargo clean`; entries are keyed by content and written
/// atomically, so concurrent test processes cannot see a partial one.
pub fn sandbox() -> &'static Arc<Sandbox> {
    static SANDBOX: OnceLock<Arc<Sandbox>> = OnceLock::new();
    SANDBOX.get_or_init(|| {
        let cache = test_compile_cache_dir();
        Arc::new(
            Sandbox::new(SandboxConfig {
                limits: test_limits(),
                compile_cache: Some(cache),
                ..SandboxConfig::default()
            })
            .expect("create the sandbox"),
        )
    })
}

/// `target/<profile>/test-compile-cache`, found from the running test binary
/// (`target/<profile>/deps/<test>`), so it follows `CARGO_TARGET_DIR`.
pub fn test_compile_cache_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.ancestors()
        .nth(2)
        .unwrap_or_else(|| Path::new("."))
        .join("test-compile-cache")
}

/// A plugin loaded into [`sandbox`], panicking with the load error.
pub fn load(path: &Path) -> LoadedPlugin {
    sandbox().load(path).unwrap_or_else(|e| panic!("{e}"))
}

/// An engine over the embedded cluster on a virtual clock, with the user's
/// side of the cluster (apply, delete) and a way to let it settle.
pub mod world {
    use std::sync::Arc;
    use std::time::Duration;

    use reconciler_host::cluster::embedded::{EmbeddedCluster, RecordedEvent};
    use reconciler_host::cluster::{ClusterBackend, ObjectKey, VirtualClock};
    use reconciler_host::engine::{Engine, ReconcileRecord};
    use reconciler_host::process::simulate::{SimulationConfig, run};
    use reconciler_sdk::KindRef;
    use serde_json::Value;

    pub struct World {
        pub clock: VirtualClock,
        pub cluster: Arc<EmbeddedCluster>,
        pub engine: Engine<EmbeddedCluster>,
        pub records: Vec<ReconcileRecord>,
    }

    impl World {
        /// A world running the given compiled plugins.
        pub async fn new(plugins: &[&std::path::Path]) -> Self {
            let clock = VirtualClock::at(reconciler_sdk::testing::DEFAULT_NOW_MILLIS);
            let cluster = Arc::new(EmbeddedCluster::new(Arc::new(clock.clone())));
            let plugins = plugins.iter().map(|p| Arc::new(super::load(p))).collect();
            let engine = Engine::new(cluster.clone(), Arc::new(clock.clone()), plugins)
                .await
                .expect("engine starts");
            Self {
                clock,
                cluster,
                engine,
                records: Vec::new(),
            }
        }

        /// Runs until nothing is ready, letting the clock move by at most
        /// `advance` to fire requeues and backoffs. Returns this run's records.
        pub async fn settle_for(&mut self, advance: Duration) -> Vec<ReconcileRecord> {
            let config = SimulationConfig {
                start_millis: reconciler_host::cluster::Clock::now_millis(&self.clock),
                advance,
                ..SimulationConfig::default()
            };
            let report = run(&self.engine, &self.clock, &config).await;
            assert!(report.unsettled.is_none(), "{:?}", report.unsettled);
            self.records.extend(report.records.iter().cloned());
            report.records
        }

        pub async fn settle(&mut self) -> Vec<ReconcileRecord> {
            self.settle_for(Duration::ZERO).await
        }

        pub fn apply(&self, object: Value) -> Value {
            self.cluster.apply_as_user(object).expect("apply as user")
        }

        pub fn delete(&self, key: &ObjectKey) {
            self.cluster.delete_as_user(key).expect("delete as user")
        }

        pub async fn get(&self, key: &ObjectKey) -> Option<Value> {
            self.cluster.get(key).await.expect("get")
        }

        pub fn events(&self) -> Vec<RecordedEvent> {
            self.cluster.events()
        }

        /// The names of the plugins the engine serves.
        pub fn served(&self) -> Vec<String> {
            let plugins = self.engine.plugins();
            plugins.iter().map(|p| p.name().to_string()).collect()
        }
    }

    pub fn key(group: &str, version: &str, kind: &str, namespace: &str, name: &str) -> ObjectKey {
        ObjectKey::new(KindRef::new(group, version, kind), Some(namespace), name)
    }
}

/// A cache holding `count` Pods in `default`, each carrying an annotation
/// of `blob_bytes`: lists of a known size, for the list limits.
pub fn pods_with_blobs(
    count: usize,
    blob_bytes: usize,
) -> reconciler_sdk::memory_cache::MemoryCache {
    let mut cache = reconciler_sdk::memory_cache::MemoryCache::new();
    let blob = "x".repeat(blob_bytes);
    for i in 0..count {
        cache
            .insert(serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("p{i:02}"), "namespace": "default",
                    "annotations": {"blob": blob}}}))
            .unwrap();
    }
    cache
}
