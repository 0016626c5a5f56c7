//! The same podset decisions from a plugin written in Rust, Python
//! (componentize-py) and JavaScript (componentize-js), through the host as it
//! serves them: component size, compile and warm-cache load time, the linear
//! memory one instance needs, and one reconcile (a fresh instance, the call,
//! the host's validation) with ~10 KB of JSON in. Rust's figures come from the
//! same run, so the ratios hold whatever the machine's load.
//!
//! A bench binary rather than criterion, like `reconcile.rs`: the figures are
//! medians of single calls, plus the calling thread's CPU time, which other
//! processes on a loaded machine disturb less than wall time.
//!
//!     scripts/build-plugins && cargo bench -p reconciler-host --bench guest_languages
//!
//! Environment: BENCH_ITERATIONS (default 1000 reconciles per plugin),
//! BENCH_ONLY (one language, e.g. `Python`; the ratio column is then to the
//! first measured), BENCH_PLUGIN=LABEL=PATH (one more component to measure).

mod podset_fixture;

use podset_fixture::{fixture, input};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reconciler_host::plugin::{CompileSource, HostLimits, Sandbox, SandboxConfig};
use reconciler_sdk::contract::ReconcileRequest;
use reconciler_sdk::memory_cache::MemoryCache;

/// The plugins compared, by language, as scripts/build-plugins leaves them.
const PLUGINS: [(&str, &str); 3] = [
    ("Rust", "plugins/podset.wasm"),
    ("Python", "plugins/podset-py/podset-py.wasm"),
    ("JavaScript", "plugins/podset-js/podset-js.wasm"),
];

struct Figures {
    language: String,
    bytes: u64,
    compile: Duration,
    compile_cpu: Duration,
    warm_load: Duration,
    memory_mib: u32,
    wall: Duration,
    cpu: Duration,
}

fn main() -> anyhow::Result<()> {
    let iterations: usize = std::env::var("BENCH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let cache_dir = tempfile::tempdir()?;
    let (primary, cache) = fixture();
    let cache = Arc::new(cache);

    // BENCH_ONLY=Python measures one language (for a profile of its calls).
    let only = std::env::var("BENCH_ONLY").ok();
    let mut all = Vec::new();
    // BENCH_PLUGIN=LABEL=PATH adds one more component (a variant under study).
    let extra = std::env::var("BENCH_PLUGIN").ok();
    let extra = extra.as_deref().and_then(|e| e.split_once('='));
    for (language, file) in PLUGINS.into_iter().chain(extra) {
        if only
            .as_deref()
            .is_some_and(|o| !o.eq_ignore_ascii_case(language))
        {
            continue;
        }
        let wasm = root.join(file);
        anyhow::ensure!(
            wasm.is_file(),
            "{} is missing: run scripts/build-plugins first",
            wasm.display()
        );
        let sandbox = sandbox(cache_dir.path(), HostLimits::default())?;
        let cpu_before = process_cpu();
        let (plugin, cold) = sandbox.load_with_report(&wasm)?;
        let compile_cpu = process_cpu().saturating_sub(cpu_before);
        anyhow::ensure!(
            cold.source == CompileSource::Compiled,
            "{file}: not compiled cold"
        );
        let mut warm: Vec<Duration> = (0..10)
            .map(|_| sandbox.load_with_report(&wasm).map(|(_, r)| r.total))
            .collect::<Result<_, _>>()?;
        warm.sort();

        let request = cache.request_for(&primary, &plugin.metadata().owns);
        let (wall, cpu) = measure(iterations, || {
            plugin
                .reconcile(input(&request, &cache))
                .expect("reconcile");
        });
        all.push(Figures {
            language: language.to_string(),
            bytes: std::fs::metadata(&wasm)?.len(),
            compile: cold.compile,
            compile_cpu,
            warm_load: warm[warm.len() / 2],
            memory_mib: least_memory(cache_dir.path(), &wasm, &request, &cache)?,
            wall,
            cpu,
        });
    }

    println!(
        "one podset reconcile (instantiate + call + validate), 20 pods listed metadata-only; n = {iterations}"
    );
    println!(
        "{:<11} {:>10} {:>11} {:>12} {:>8} {:>11} {:>10} {:>9} {:>7}",
        "language",
        "bytes",
        "compile ms",
        "compile cpu",
        "load ms",
        "memory MiB",
        "median us",
        "cpu us",
        "x Rust"
    );
    anyhow::ensure!(
        !all.is_empty(),
        "BENCH_ONLY names none of Rust, Python, JavaScript"
    );
    let rust_cpu = all[0].cpu.as_secs_f64();
    for f in &all {
        println!(
            "{:<11} {:>10} {:>11.1} {:>12.1} {:>8.2} {:>11} {:>10.1} {:>9.1} {:>7.1}",
            f.language,
            f.bytes,
            ms(f.compile),
            ms(f.compile_cpu),
            ms(f.warm_load),
            f.memory_mib,
            us(f.wall),
            us(f.cpu),
            f.cpu.as_secs_f64() / rust_cpu
        );
    }
    println!(
        "compile: cold, no cache, wall time and the process's CPU time (every compiling thread); load: warm compile cache, median of 10; memory: the smallest \
         --plugin-memory-mib under which this reconcile succeeds; cpu: the calling thread's CPU \
         time per reconcile (mean); x Rust: cpu over Rust's"
    );
    Ok(())
}

fn sandbox(cache_dir: &Path, limits: HostLimits) -> anyhow::Result<Sandbox> {
    Sandbox::new(SandboxConfig {
        limits,
        compile_cache: Some(cache_dir.to_path_buf()),
        ..SandboxConfig::default()
    })
}

/// The smallest memory cap, in whole MiB, under which the plugin loads and
/// answers the fixture: what one instance needs (its initial linear memory
/// plus what the reconcile grows it by).
fn least_memory(
    cache_dir: &Path,
    wasm: &Path,
    request: &ReconcileRequest,
    cache: &Arc<MemoryCache>,
) -> anyhow::Result<u32> {
    for mib in 1..=HostLimits::default().memory_max_mib {
        let limits = HostLimits {
            memory_mib: mib,
            ..HostLimits::default()
        };
        let answered = sandbox(cache_dir, limits)?
            .load(wasm)
            .map(|plugin| plugin.reconcile(input(request, cache)).is_ok());
        if let Ok(true) = answered {
            return Ok(mib);
        }
    }
    anyhow::bail!(
        "{} needs more than the host's maximum memory",
        wasm.display()
    )
}

/// The median wall time of one call, and the mean CPU time of the calling
/// thread per call, after a warm-up of a tenth as many calls.
fn measure(iterations: usize, mut f: impl FnMut()) -> (Duration, Duration) {
    for _ in 0..iterations / 10 {
        f();
    }
    let cpu_start = thread_cpu();
    let mut times: Vec<Duration> = (0..iterations)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    let cpu = thread_cpu().saturating_sub(cpu_start) / iterations.max(1) as u32;
    times.sort();
    (times[times.len() / 2], cpu)
}

/// CPU time of the calling thread: the reconcile runs on it, while the
/// epoch ticker and other processes run elsewhere.
#[cfg(unix)]
fn thread_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for clock_gettime to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

#[cfg(not(unix))]
fn thread_cpu() -> Duration {
    Duration::ZERO
}

/// CPU time of the whole process, user and system: a compile runs on
/// several threads at once.
#[cfg(unix)]
fn process_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for clock_gettime to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

#[cfg(not(unix))]
fn process_cpu() -> Duration {
    Duration::ZERO
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
