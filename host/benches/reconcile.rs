//! One podset reconcile through the compiled plugin versus the same logic
//! called natively through the SDK, with the same ~10 KB of JSON in and out;
//! plus compile and warm-cache load times of podset.wasm.
//!
//! A bench binary rather than criterion because the targets are stated as
//! median and p99 of single calls, which this measures directly: in wall
//! time, and in the calling thread's CPU time, which other processes on a
//! shared machine stretch far less (a call that loses the CPU for a few
//! milliseconds shows in the wall-time p99, not in the CPU time).
//!
//!     scripts/build-plugins && cargo bench -p reconciler-host --bench reconcile
//!
//! Environment: BENCH_ITERATIONS (default 10000).

mod podset_fixture;

use podset_fixture::{fixture, input};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use podset::PodSets;
use reconciler_host::plugin::response_rules::validate_response;
use reconciler_host::plugin::{CompileSource, Sandbox, SandboxConfig};
use reconciler_sdk::contract::Projection;
use reconciler_sdk::memory_cache::MemoryCache;
use reconciler_sdk::testing::Harness;
use reconciler_sdk::{KindRef, Reconciler};
use serde_json::json;

fn main() -> anyhow::Result<()> {
    let iterations: usize = std::env::var("BENCH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let wasm = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/podset.wasm");
    anyhow::ensure!(
        wasm.is_file(),
        "{} is missing: run scripts/build-plugins first",
        wasm.display()
    );

    // Compile (no cache) and load with a warm cache.
    let cache_dir = tempfile::tempdir()?;
    let config = SandboxConfig {
        compile_cache: Some(cache_dir.path().to_path_buf()),
        ..SandboxConfig::default()
    };
    let sandbox = Sandbox::new(config)?;
    let (_, cold) = sandbox.load_with_report(&wasm)?;
    assert_eq!(cold.source, CompileSource::Compiled);
    let mut warm = Vec::new();
    for _ in 0..20 {
        let (_, report) = sandbox.load_with_report(&wasm)?;
        assert_eq!(report.source, CompileSource::Cached);
        warm.push(report.total);
    }
    warm.sort();
    let plugin = sandbox.load(&wasm)?;

    let (primary, cache) = fixture();
    let request = cache.request_for(&primary, &plugin.metadata().owns);
    let cache = Arc::new(cache);
    let request_bytes = request.primary.len() + stored_bytes(&cache);
    let crossing = request.primary.len() + listed_bytes(&cache);
    let response = plugin.reconcile(input(&request, &cache))?;
    let response_bytes: usize = response
        .apply
        .iter()
        .map(|d| d.object.to_string().len())
        .sum::<usize>()
        + json!(response.status).to_string().len();

    let wasm_times = measure(iterations, || {
        plugin
            .reconcile(input(&request, &cache))
            .expect("reconcile");
    });
    let metadata = PodSets::metadata();
    // The SDK's test harness is the native host: same cache rules, same
    // metadata-only projection of Pods.
    let mut native_host = Harness::<PodSets>::new();
    for object in cache.iter() {
        native_host.insert(&object);
    }
    let native_host = native_host.host_for(Some("default"));
    let native_times = measure(iterations, || {
        reconciler_sdk::dispatch::<PodSets>(&request, &native_host).expect("reconcile");
    });
    let native_validated_times = measure(iterations, || {
        let r = reconciler_sdk::dispatch::<PodSets>(&request, &native_host).expect("reconcile");
        validate_response(&metadata, Some("default"), r).expect("valid");
    });

    // The fixed cost of a fresh sandboxed instance: a plugin that answers
    // one tiny object (the test suite's hostile plugin in its "ok" mode).
    let trivial =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-plugins/hostile.wasm");
    let trivial_times = if trivial.is_file() {
        let hostile = sandbox.load(&trivial)?;
        let primary = json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
            "metadata": {"name": "x", "namespace": "default"}, "spec": {"mode": "ok"}});
        let empty = Arc::new(MemoryCache::new());
        let request = empty.request_for(&primary, &hostile.metadata().owns);
        Some(measure(iterations, || {
            hostile
                .reconcile(input(&request, &empty))
                .expect("reconcile");
        }))
    } else {
        None
    };
    println!("podset.wasm: {} bytes", std::fs::metadata(&wasm)?.len());
    println!("compile (cold, release host): {:>9.2} ms", ms(cold.compile));
    println!(
        "load, warm compile cache:     {:>9.2} ms median of 20",
        ms(warm[warm.len() / 2])
    );
    println!(
        "request {request_bytes} bytes in (primary + the 20 pods as stored), {crossing} as they cross (pods metadata-only), {response_bytes} bytes out; n = {iterations}"
    );
    println!("{:<38} {:>27}   {:>27}", "", "wall time", "thread CPU time");
    let wasm_median = report("wasm: instantiate + call + validate", &wasm_times);
    let native_median = report("native SDK: same JSON in and out", &native_times);
    report("native SDK + host validation", &native_validated_times);
    if let Some(times) = &trivial_times {
        report("wasm: trivial plugin (fixed cost)", times);
    }
    println!(
        "ratio wasm / native (median): {:.2}x wall, {:.2}x CPU",
        wasm_median.0.as_secs_f64() / native_median.0.as_secs_f64(),
        wasm_median.1.as_secs_f64() / native_median.1.as_secs_f64()
    );
    println!(
        "kept resident by idle instance slots: {} KiB",
        sandbox.idle_slots_resident_bytes() / 1024
    );
    Ok(())
}

fn listed_bytes(cache: &MemoryCache) -> usize {
    cache
        .list_json(
            &KindRef::new("", "v1", "Pod"),
            Some("default"),
            "app=podset,podset=web",
            Projection::MetadataOnly,
        )
        .expect("list")
        .iter()
        .map(String::len)
        .sum()
}

fn stored_bytes(cache: &MemoryCache) -> usize {
    cache
        .iter()
        .filter(|v| v["kind"] == "Pod")
        .map(|v| v.to_string().len())
        .sum()
}

/// Wall and thread CPU times of single calls, each sorted.
struct Times {
    wall: Vec<Duration>,
    cpu: Vec<Duration>,
}

fn measure(iterations: usize, mut f: impl FnMut()) -> Times {
    for _ in 0..iterations / 10 {
        f();
    }
    let (mut wall, mut cpu): (Vec<_>, Vec<_>) = (0..iterations)
        .map(|_| {
            let t = Instant::now();
            let c = thread_cpu();
            f();
            let c = thread_cpu() - c;
            (t.elapsed(), c)
        })
        .unzip();
    wall.sort();
    cpu.sort();
    Times { wall, cpu }
}

/// CPU time the calling thread has used (user and kernel).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to write.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Prints median and p99 of both; returns the medians (wall, CPU).
fn report(label: &str, times: &Times) -> (Duration, Duration) {
    let at = |v: &[Duration], q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    println!(
        "{label:<38} median {:>7.1} us   p99 {:>7.1} us   median {:>7.1} us   p99 {:>7.1} us",
        us(at(&times.wall, 0.5)),
        us(at(&times.wall, 0.99)),
        us(at(&times.cpu, 0.5)),
        us(at(&times.cpu, 0.99)),
    );
    (at(&times.wall, 0.5), at(&times.cpu, 0.5))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
