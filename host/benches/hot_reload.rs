//! Time from the rename of a new plugin version into the plugins directory
//! to the first reconcile by that version, through the real directory
//! watcher: with the compiled version already in the compile cache, and
//! without (compiling on the spot).
//!
//!     scripts/build-plugins && cargo bench -p reconciler-host --bench hot_reload
//!
//! Uses the test suite's hostile plugin (versions 0.1.0 and 0.2.0), whose
//! ConfigMap says which version applied it. Environment: BENCH_ROUNDS
//! (default 20).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::cluster::{ClusterBackend, ObjectKey, RealClock};
use reconciler_host::engine::Engine;
use reconciler_host::plugin::hot_reload::PluginDirectory;
use reconciler_host::plugin::{Sandbox, SandboxConfig};
use reconciler_host::support::dir_watch::{DEBOUNCE, watch_dir};
use reconciler_sdk::KindRef;
use serde_json::json;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-plugins");
    let (v1, v2) = (built.join("hostile.wasm"), built.join("hostile-v2.wasm"));
    anyhow::ensure!(
        v1.is_file() && v2.is_file(),
        "run scripts/build-plugins first"
    );

    let warm = measure(&v1, &v2, rounds, true).await?;
    let cold = measure(&v1, &v2, rounds.min(5), false).await?;
    println!("debounce window: {} ms", DEBOUNCE.as_millis());
    report(
        "rename -> first reconcile by the new version, compile cache hit",
        &warm,
    );
    report(
        "rename -> first reconcile by the new version, compiling",
        &cold,
    );
    Ok(())
}

/// Alternates v1 and v2 into the directory `rounds` times. With `cached`,
/// both versions were compiled once before the first round; without, each
/// round gets a fresh compile cache.
async fn measure(
    v1: &Path,
    v2: &Path,
    rounds: usize,
    cached: bool,
) -> anyhow::Result<Vec<Duration>> {
    let mut times = Vec::new();
    let cache_root = tempfile::tempdir()?;
    for round in 0..rounds {
        let cache = if cached {
            cache_root.path().join("shared")
        } else {
            cache_root.path().join(round.to_string())
        };
        let sandbox = Arc::new(Sandbox::new(SandboxConfig {
            compile_cache: Some(cache),
            ..SandboxConfig::default()
        })?);
        if cached {
            sandbox.load(v1)?;
            sandbox.load(v2)?;
        }
        let dir = tempfile::tempdir()?;
        std::fs::copy(v1, dir.path().join("hostile.wasm"))?;
        let cluster = Arc::new(EmbeddedCluster::new(Arc::new(RealClock)));
        cluster.apply_as_user(
            json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
            "metadata": {"name": "h", "namespace": "default"}, "spec": {"mode": "ok"}}),
        )?;
        let engine = Engine::empty(cluster.clone(), Arc::new(RealClock));
        let mut plugins = PluginDirectory::new(dir.path(), sandbox.clone());
        plugins.sync(&engine).await;
        drain(&engine).await;

        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let _watch = watch_dir(dir.path(), tx).ok_or_else(|| anyhow::anyhow!("cannot watch"))?;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let staged = dir.path().join(".hostile.wasm.tmp");
        std::fs::copy(v2, &staged)?;

        let started = Instant::now();
        std::fs::rename(&staged, dir.path().join("hostile.wasm"))?;
        loop {
            rx.recv().await;
            plugins.sync(&engine).await;
            if engine
                .plugins()
                .first()
                .is_some_and(|p| p.metadata().version == "0.2.0")
            {
                break;
            }
        }
        drain(&engine).await;
        let elapsed = started.elapsed();
        let key = ObjectKey::new(KindRef::new("", "v1", "ConfigMap"), Some("default"), "h");
        let cm = cluster.get(&key).await?.expect("the ConfigMap");
        anyhow::ensure!(
            cm["data"]["version"] == "0.2.0",
            "reconciled by the new version"
        );
        times.push(elapsed);
    }
    times.sort();
    Ok(times)
}

/// Runs every ready reconcile.
async fn drain(engine: &Engine<EmbeddedCluster>) {
    loop {
        engine.pump();
        let Some((plugin, key)) = engine.next_ready() else {
            break;
        };
        engine.reconcile(&plugin, key).await;
    }
}

fn report(label: &str, times: &[Duration]) {
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    println!(
        "{label}: median {:.1} ms, max {:.1} ms (n = {})",
        at(0.5).as_secs_f64() * 1e3,
        times.last().map_or(0.0, |t| t.as_secs_f64() * 1e3),
        times.len()
    );
}
