//! Host memory: idle with every example plugin loaded, and with 1,000 and
//! 10,000 Pods in the cache.
//!
//!     scripts/build-plugins && cargo bench -p reconciler-host --bench cache_memory
//!
//! Each figure comes from its own child process (this binary run again with
//! `--child`), so what one measurement allocated cannot linger in the next.
//! A child builds what a host holds: the sandbox with plugins loaded from a
//! warm compile cache, the Kubernetes backend on a mocked API server, and an
//! engine that has listed every declared kind. It then lets things settle and
//! reads VmRSS and VmHWM from /proc/self/status. The mocked server answers
//! lists of Pods from files the parent wrote, page by page as asked (the
//! host's watch asks for pages of 100, and with a limit kube leaves out
//! resourceVersion=0, so a real API server pages the list too); lists of
//! other kinds are empty, and
//! watches are never answered, so the host sits idle as on a quiet cluster.
//!
//! Children also report live heap bytes, counted by a global allocator
//! wrapper: RSS adds the binary's code pages, malloc's per-allocation
//! overhead and what it keeps after the peak of the first list; live heap
//! is what the host's data structures hold. To tell where the per-Pod bytes
//! go, a host child then drops the engine but keeps its cache, then drops
//! the cache, reading the heap each time; and the parent prints what one Pod
//! takes as a JSON tree and as text.
//!
//! Everything a host child holds was built by the host's own code (list
//! and conversion in the backend, the engine's cache), so changes to what
//! is cached show up here on the next run.
//!
//! Environment: BENCH_PODS (default "1000,10000"), BENCH_SETTLE_MS (default
//! 2000), BENCH_MALLOC_TRIM=1 (children call glibc's `malloc_trim` before
//! measuring: how much RSS is free memory the allocator kept). glibc's own
//! MALLOC_ARENA_MAX passes through to the children.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use http::{Request, Response};
use kube::client::Body;
use reconciler_host::cluster::RealClock;
use reconciler_host::cluster::backend::slimmed;
use reconciler_host::cluster::kubernetes::KubernetesBackend;
use reconciler_host::engine::Engine;
use reconciler_host::plugin::{LoadedPlugin, Sandbox, SandboxConfig};
use reconciler_sdk::memory_cache::metadata_only;
use serde_json::{Value, json};

mod measured_child;
use measured_child::{Measured, print_measured, proc_status, proc_status_kb, run_child};

/// Counts live heap bytes so a child can tell its data from allocator slack.
struct CountingAllocator;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let now = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// wrapper only keeps counts.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, layout, new_size) };
        if !q.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        q
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// The example plugins, as `scripts/build-plugins` names them.
const EXAMPLES: [&str; 5] = [
    "podset",
    "memcached",
    "kubernetescluster",
    "rollout_schedules",
    "rollout_restarter",
];

const NAMESPACES: [&str; 4] = ["shop", "payments", "search", "accounts"];

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        return child(&args[i + 1..]);
    }
    parent()
}

// ---------------------------------------------------------------------------
// Parent: prepares inputs, runs one child per measurement, prints the tables.

/// One child process to run.
struct Run {
    label: String,
    what: &'static str,
    plugins: Vec<PathBuf>,
    pods: usize,
    compile_cache: CacheUse,
}

/// Where a child's plugins come from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CacheUse {
    /// A compile cache the parent filled: a restarted host.
    Warm,
    /// An empty compile cache directory: a new pod, whose cache is an
    /// emptyDir (deploy/deployment.yaml). Plugins are compiled and stored.
    Empty,
    /// No compile cache at all: compiled on every start.
    Off,
}

fn parent() -> anyhow::Result<()> {
    let sizes: Vec<usize> = std::env::var("BENCH_PODS")
        .unwrap_or_else(|_| "1000,10000".into())
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .context("BENCH_PODS: comma-separated counts")
        })
        .collect::<anyhow::Result<_>>()?;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let all: Vec<PathBuf> = EXAMPLES
        .iter()
        .map(|p| root.join(format!("plugins/{p}.wasm")))
        .collect();
    for wasm in &all {
        ensure!(
            wasm.is_file(),
            "{} is missing: run scripts/build-plugins first",
            wasm.display()
        );
    }
    let podset = vec![all[0].clone()];
    // A test plugin that reads Pods whole: the cost of a kind cached in full,
    // as a controller that decides on Pods' specs or status would have it.
    let whole_pods = root.join("target/test-plugins/hostile-v2.wasm");
    ensure!(
        whole_pods.is_file(),
        "{} is missing: run scripts/build-plugins first",
        whole_pods.display()
    );
    let whole_pods = vec![whole_pods];

    // Children load plugins as a restarted host does: from a warm cache.
    let work = tempfile::tempdir()?;
    let cache_dir = work.path().join("compile-cache");
    let sandbox = Sandbox::new(SandboxConfig {
        compile_cache: Some(cache_dir.clone()),
        ..SandboxConfig::default()
    })?;
    for wasm in all.iter().chain(&whole_pods) {
        sandbox.load(wasm)?;
    }
    drop(sandbox);
    for &n in &sizes {
        write_pod_list(&pods_file(work.path(), n), n)?;
    }

    let run = |label: &str, what, plugins: &[PathBuf], pods, compile_cache| Run {
        label: label.to_string(),
        what,
        plugins: plugins.to_vec(),
        pods,
        compile_cache,
    };
    let mut runs = vec![
        run(
            "process floor (runtime, nothing loaded)",
            "floor",
            &[],
            0,
            CacheUse::Warm,
        ),
        run("sandbox, no plugin", "sandbox", &[], 0, CacheUse::Warm),
        run("all 5 plugins, idle", "host", &all, 0, CacheUse::Warm),
        run(
            "all 5 plugins, idle, compiled at start into an empty compile cache",
            "host",
            &all,
            0,
            CacheUse::Empty,
        ),
        run(
            "all 5 plugins, idle, compiled at start (no compile cache)",
            "host",
            &all,
            0,
            CacheUse::Off,
        ),
        run("podset only, idle", "host", &podset, 0, CacheUse::Warm),
        run(
            "Pods read whole, idle",
            "host",
            &whole_pods,
            0,
            CacheUse::Warm,
        ),
    ];
    for &n in &sizes {
        runs.push(run("podset only", "host", &podset, n, CacheUse::Warm));
        runs.push(run("all 5 plugins", "host", &all, n, CacheUse::Warm));
        runs.push(run(
            "Pods read whole",
            "host",
            &whole_pods,
            n,
            CacheUse::Warm,
        ));
    }

    let mut results = Vec::new();
    for r in &runs {
        eprintln!("measuring: {} ({} pods)", r.label, r.pods);
        let measured = spawn_child(r, work.path(), &cache_dir)?;
        results.push(measured);
    }
    print_report(&runs, &results);
    Ok(())
}

fn pods_file(dir: &Path, n: usize) -> PathBuf {
    dir.join(format!("pods-{n}.json"))
}

fn spawn_child(run: &Run, work: &Path, cache_dir: &Path) -> anyhow::Result<Measured> {
    let plugins = if run.plugins.is_empty() {
        "-".to_string()
    } else {
        let names: Vec<_> = run
            .plugins
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        names.join(",")
    };
    let pods = if run.pods == 0 {
        "-".to_string()
    } else {
        pods_file(work, run.pods).display().to_string()
    };
    let cache = match run.compile_cache {
        CacheUse::Warm => cache_dir.display().to_string(),
        CacheUse::Empty => {
            let empty = work.join("empty-compile-cache");
            if empty.exists() {
                std::fs::remove_dir_all(&empty)?;
            }
            std::fs::create_dir(&empty)?;
            empty.display().to_string()
        }
        CacheUse::Off => "-".to_string(),
    };
    let measured = run_child(&run.label, &[run.what.to_string(), plugins, pods, cache])?;
    // Only Pods exist on the mocked server.
    let cached = measured["cached"] as usize;
    ensure!(
        cached == run.pods,
        "child {} cached {cached} objects, expected {}",
        run.label,
        run.pods
    );
    Ok(measured)
}

fn print_report(runs: &[Run], results: &[Measured]) {
    let one = pod(0);
    let served = one.to_string().len();
    let cached = slimmed(one.clone()).to_string().len();
    let metadata_text = metadata_only(&one).to_string().len();
    println!(
        "one Pod as JSON: {served} bytes as served (with managedFields), {cached} without \
         managedFields, {metadata_text} as apiVersion/kind/metadata only"
    );
    let (tree_heap, tree) = heap_of(|| slimmed(pod(0)));
    let (metadata_heap, _metadata) = heap_of(|| metadata_only(&tree));
    let (text_heap, _text) = heap_of(|| tree.to_string().into_boxed_str());
    let (objects, strings) = allocations(&tree);
    println!(
        "one Pod without managedFields in memory: {} as a serde_json::Value tree ({objects} \
         non-empty objects, {strings} keys and strings, each a heap allocation), {} as a tree \
         of its metadata only, {} as JSON text",
        kib(tree_heap as f64),
        kib(metadata_heap as f64),
        kib(text_heap as f64),
    );
    println!();
    println!(
        "| what | Pods | VmRSS | VmHWM (peak) | RssAnon | RssFile | live heap | heap peak | per Pod, RSS | per Pod, heap |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (i, (r, m)) in runs.iter().zip(results).enumerate() {
        let per_pod = |key: &str, unit: u64| match baseline(runs, results, i) {
            Some(b) if r.pods > 0 => {
                kib((m[key] as f64 - b[key] as f64) * unit as f64 / r.pods as f64)
            }
            _ => String::new(),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.label,
            r.pods,
            mib(m["rss_kb"] * 1024),
            mib(m["hwm_kb"] * 1024),
            mib(m["anon_kb"] * 1024),
            mib(m["file_kb"] * 1024),
            mib(m["heap"]),
            mib(m["heap_peak"]),
            per_pod("rss_kb", 1024),
            per_pod("heap", 1),
        );
    }

    println!();
    println!("live heap per Pod, by holder (the same runs, taken apart):");
    println!();
    println!(
        "| what | Pods | engine's SharedCache | rest: watch forwarders, watcher, engine | total |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (i, (r, m)) in runs.iter().zip(results).enumerate() {
        let Some(b) = baseline(runs, results, i).filter(|_| r.what == "host" && r.pods > 0) else {
            continue;
        };
        let n = r.pods as f64;
        let delta = |m: &Measured, b: &Measured, key: &str| m[key] as f64 - b[key] as f64;
        // Each holder's share: what dropping it freed, beyond the same with no Pods.
        let freed = |m: &Measured, from: &str, to: &str| m[from] as f64 - m[to] as f64;
        let cache = freed(m, "heap_no_engine", "heap_no_cache")
            - freed(b, "heap_no_engine", "heap_no_cache");
        let rest = freed(m, "heap", "heap_no_engine") - freed(b, "heap", "heap_no_engine");
        println!(
            "| {} | {} | {} | {} | {} |",
            r.label,
            r.pods,
            kib(cache / n),
            kib(rest / n),
            kib(delta(m, b, "heap") / n),
        );
    }
    println!();
    println!("KiB = 1024 bytes, MiB = 1024 KiB");
}

/// Live heap held by what `build` returns. Only for the parent, whose other
/// threads are gone by the time it reports.
fn heap_of<T>(build: impl FnOnce() -> T) -> (usize, T) {
    let before = LIVE.load(Ordering::Relaxed);
    let built = build();
    (LIVE.load(Ordering::Relaxed).saturating_sub(before), built)
}

/// Non-empty JSON objects (one B-tree node each, at least) and strings
/// (keys included) in `value`.
fn allocations(value: &Value) -> (usize, usize) {
    match value {
        Value::Object(map) => map.iter().fold(
            (usize::from(!map.is_empty()), map.len()),
            |(objects, strings), (_, v)| {
                let (o, s) = allocations(v);
                (objects + o, strings + s)
            },
        ),
        Value::Array(items) => items
            .iter()
            .map(allocations)
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1)),
        Value::String(_) => (0, 1),
        _ => (0, 0),
    }
}

/// The run a per-Pod figure is taken against: a host with the same plugins
/// and no Pods.
fn baseline<'a>(runs: &[Run], results: &'a [Measured], i: usize) -> Option<&'a Measured> {
    let r = &runs[i];
    runs.iter()
        .position(|b| {
            b.what == "host"
                && b.pods == 0
                && b.compile_cache == CacheUse::Warm
                && b.plugins == r.plugins
        })
        .map(|j| &results[j])
}

fn kib(bytes: f64) -> String {
    format!("{:.1} KiB", bytes / 1024.0)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

// ---------------------------------------------------------------------------
// Child: builds one state, settles, reports.

fn child(args: &[String]) -> anyhow::Result<()> {
    let [what, plugins, pods, cache] = args else {
        bail!("--child takes: what plugins pods cache");
    };
    let optional = |s: &String| (s != "-").then(|| PathBuf::from(s));
    let plugins: Vec<PathBuf> = optional(plugins)
        .map(|_| plugins.split(',').map(PathBuf::from).collect())
        .unwrap_or_default();
    let pods = optional(pods);
    let cache = optional(cache);
    let settle = Duration::from_millis(
        std::env::var("BENCH_SETTLE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2000),
    );

    // As a host's `#[tokio::main]`: one worker thread per core.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let figures = match what.as_str() {
            "floor" => measure(0, settle).await?,
            "sandbox" => {
                let _sandbox = Sandbox::new(config(cache))?;
                measure(0, settle).await?
            }
            "host" => {
                let (engine, _sandbox) = host(&plugins, pods, cache).await?;
                let mut figures = measure(engine.cache().len(), settle).await?;
                // Where the heap goes: drop the engine (its watch tasks end
                // with it) but keep its cache, then drop the cache too.
                let shared = engine.cache().clone();
                drop(engine);
                tokio::time::sleep(Duration::from_millis(500)).await;
                figures.push(("heap_no_engine", LIVE.load(Ordering::Relaxed) as u64));
                drop(shared);
                figures.push(("heap_no_cache", LIVE.load(Ordering::Relaxed) as u64));
                figures
            }
            other => bail!("unknown child {other}"),
        };
        print_measured(&figures);
        Ok(())
    })
}

/// Lets background tasks finish, then reads RSS and the heap counters.
async fn measure(cached: usize, settle: Duration) -> anyhow::Result<Vec<(&'static str, u64)>> {
    tokio::time::sleep(settle).await;
    if std::env::var_os("BENCH_MALLOC_TRIM").is_some_and(|v| v == "1") {
        trim();
    }
    let status = proc_status()?;
    let kb = |key: &str| proc_status_kb(&status, key);
    Ok(vec![
        ("cached", cached as u64),
        ("rss_kb", kb("VmRSS")?),
        ("hwm_kb", kb("VmHWM")?),
        ("anon_kb", kb("RssAnon")?),
        ("file_kb", kb("RssFile")?),
        ("heap", LIVE.load(Ordering::Relaxed) as u64),
        ("heap_peak", PEAK.load(Ordering::Relaxed) as u64),
    ])
}

fn config(compile_cache: Option<PathBuf>) -> SandboxConfig {
    SandboxConfig {
        compile_cache,
        ..SandboxConfig::default()
    }
}

/// A host after start-up: plugins loaded, every declared kind listed and
/// watched through the Kubernetes backend, the cache filled.
async fn host(
    plugins: &[PathBuf],
    pods: Option<PathBuf>,
    compile_cache: Option<PathBuf>,
) -> anyhow::Result<(Engine<KubernetesBackend>, Sandbox)> {
    let sandbox = Sandbox::new(config(compile_cache))?;
    let mut loaded = Vec::new();
    for wasm in plugins {
        loaded.push(Arc::new(sandbox.load(wasm)?));
    }
    let backend =
        KubernetesBackend::with_reporting_instance(mocked_api(pods), "cache-memory-bench");
    remember_kinds(&backend, &loaded);
    let engine = Engine::new(Arc::new(backend), Arc::new(RealClock), loaded).await?;
    engine.pump();
    Ok((engine, sandbox))
}

/// Registers every declared kind so the mocked server needs no discovery.
/// All kinds the example plugins declare are namespaced and take a regular
/// plural (pods, deployments, configmaps, jobs, and the CRDs in crds/).
fn remember_kinds(backend: &KubernetesBackend, plugins: &[Arc<LoadedPlugin>]) {
    for plugin in plugins {
        for kind in plugin.metadata().declared_kinds() {
            let plural = format!("{}s", kind.kind.to_lowercase());
            backend.remember_kind(kind.clone(), &plural, true);
        }
    }
}

/// A client whose server lists Pods from `pods` (a PodList as JSON, with its
/// pages beside it), lists nothing of other kinds, and keeps every watch
/// waiting forever. Any other request (discovery, writes) is a bug in the
/// bench and fails the child.
fn mocked_api(pods: Option<PathBuf>) -> kube::Client {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    tokio::spawn(async move {
        // Unanswered watches: kept so their requests stay open.
        let mut watching = Vec::new();
        while let Some((request, respond)) = handle.next_request().await {
            let path = request.uri().path().to_string();
            let query = request.uri().query().unwrap_or_default();
            if query.contains("watch=true") {
                watching.push(respond);
                continue;
            }
            let form = if request
                .headers()
                .get(http::header::ACCEPT)
                .and_then(|a| a.to_str().ok())
                .is_some_and(|a| a.contains("as=PartialObjectMetadataList"))
            {
                Form::Metadata
            } else {
                Form::Whole
            };
            let body = match (&pods, request.method()) {
                (Some(file), &http::Method::GET) if path == "/api/v1/pods" => {
                    pod_list_body(&form_file(file, form), query)
                }
                (_, &http::Method::GET) if is_cluster_wide_list(&path) => {
                    br#"{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":"1"},"items":[]}"#
                        .to_vec()
                }
                (_, method) => {
                    eprintln!("unexpected request: {method} {path}");
                    std::process::exit(3);
                }
            };
            let response = Response::builder()
                .status(200)
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(Body::from(body))
                .expect("a response");
            respond.send_response(response);
        }
    });
    kube::Client::new(service, "default")
}

/// `/api/<version>/<plural>` or `/apis/<group>/<version>/<plural>`, as the
/// watcher lists a kind in all namespaces; not a discovery path.
fn is_cluster_wide_list(path: &str) -> bool {
    let segments = path.trim_start_matches('/').split('/').count();
    (path.starts_with("/api/") && segments == 3) || (path.starts_with("/apis/") && segments == 4)
}

/// The Pods a list request asks for: the whole list without `limit`; with
/// `limit=PAGE`, the page its `continue` token names. Any other limit is a
/// change in the watcher the bench does not follow yet: fail loudly.
fn pod_list_body(file: &Path, query: &str) -> Vec<u8> {
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
    };
    let path = match param("limit") {
        None => file.to_path_buf(),
        Some(limit) if limit == PAGE.to_string() => page_file(
            file,
            param("continue")
                .map_or(Ok(0), str::parse)
                .expect("a page number"),
        ),
        Some(limit) => {
            eprintln!("the bench serves pages of {PAGE} Pods, the host asked for {limit}");
            std::process::exit(3);
        }
    };
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Hands free memory in every malloc arena back to the kernel.
#[cfg(target_env = "gnu")]
fn trim() {
    unsafe extern "C" {
        fn malloc_trim(pad: usize) -> i32;
    }
    // SAFETY: glibc's malloc_trim takes no pointers and may be called at any time.
    unsafe { malloc_trim(0) };
}

#[cfg(not(target_env = "gnu"))]
fn trim() {
    eprintln!("BENCH_MALLOC_TRIM needs glibc; ignored");
}

// ---------------------------------------------------------------------------
// Pods shaped like `kubectl get pod -o json` prints those of a Deployment.

/// Pods per list page: what the host's watch asks for (`LIST_PAGE` in the backend).
const PAGE: usize = 100;

fn page_file(list: &Path, page: usize) -> PathBuf {
    list.with_extension(format!("page-{page}.json"))
}

/// The two forms the API server lists Pods in: whole, or as
/// PartialObjectMetadata when the client asks for metadata only (as the
/// host does for a kind every plugin reads metadata-only, like podset's Pods).
#[derive(Clone, Copy)]
enum Form {
    Whole,
    Metadata,
}

fn form_file(list: &Path, form: Form) -> PathBuf {
    match form {
        Form::Whole => list.to_path_buf(),
        Form::Metadata => list.with_extension("metadata.json"),
    }
}

/// Writes the list of `n` Pods in both forms.
fn write_pod_list(path: &Path, n: usize) -> anyhow::Result<()> {
    write_pod_list_as(&form_file(path, Form::Whole), n, Form::Whole)?;
    write_pod_list_as(&form_file(path, Form::Metadata), n, Form::Metadata)
}

/// Writes a list of `n` Pods in `form` to `path`, and the same list in pages
/// of `PAGE` beside it; one Pod at a time, so the parent stays small.
fn write_pod_list_as(path: &Path, n: usize, form: Form) -> anyhow::Result<()> {
    let create = |path: &Path| -> anyhow::Result<_> {
        let file = std::fs::File::create(path).with_context(|| path.display().to_string())?;
        Ok(std::io::BufWriter::new(file))
    };
    let header = |more: Option<usize>| {
        let rv = 100_000 + n;
        let more = more.map_or(String::new(), |page| {
            format!(
                r#","continue":"{page}","remainingItemCount":{}"#,
                n - page * PAGE
            )
        });
        let (api_version, kind) = match form {
            Form::Whole => ("v1", "PodList"),
            Form::Metadata => ("meta.k8s.io/v1", "PartialObjectMetadataList"),
        };
        format!(
            r#"{{"apiVersion":"{api_version}","kind":"{kind}","metadata":{{"resourceVersion":"{rv}"{more}}},"items":["#
        )
    };
    let mut whole = create(path)?;
    whole.write_all(header(None).as_bytes())?;
    let pages = n.div_ceil(PAGE).max(1);
    for page in 0..pages {
        let mut out = create(&page_file(path, page))?;
        out.write_all(header((page + 1 < pages).then_some(page + 1)).as_bytes())?;
        for i in page * PAGE..n.min((page + 1) * PAGE) {
            // List items carry no apiVersion or kind.
            let mut item = pod(i);
            if let Some(map) = item.as_object_mut() {
                map.remove("apiVersion");
                map.remove("kind");
                if let Form::Metadata = form {
                    map.retain(|k, _| k == "metadata");
                }
            }
            let text = serde_json::to_vec(&item)?;
            for (w, first) in [(&mut whole, i == 0), (&mut out, i == page * PAGE)] {
                if !first {
                    w.write_all(b",")?;
                }
                w.write_all(&text)?;
            }
        }
        out.write_all(b"]}")?;
        out.flush()?;
    }
    whole.write_all(b"]}")?;
    whole.flush()?;
    Ok(())
}

/// A deterministic scrambling of `n`, for ids that look random.
fn mix(n: u64) -> u64 {
    let mut x = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// `len` characters of the alphabet Kubernetes uses for generated names.
fn name_suffix(n: u64, len: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut x = mix(n);
    (0..len)
        .map(|_| {
            let c = ALPHABET[(x % ALPHABET.len() as u64) as usize];
            x /= ALPHABET.len() as u64;
            c as char
        })
        .collect()
}

fn uuid(n: u64) -> String {
    let (a, b) = (mix(n), mix(n ^ 0xdead_beef));
    format!(
        "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        b >> 52,
        b & 0xffff_ffff_ffff
    )
}

fn hex64(n: u64) -> String {
    (0..4).map(|k| format!("{:016x}", mix(n * 4 + k))).collect()
}

/// Pod `i`: ten replicas per Deployment, Deployments spread over four
/// namespaces and twenty nodes; names, uids and IPs unique.
fn pod(i: usize) -> Value {
    let i = i as u64;
    let deployment = i / 10;
    let namespace = NAMESPACES[(deployment % NAMESPACES.len() as u64) as usize];
    let app = format!("web-{deployment}");
    let hash = name_suffix(deployment, 10);
    let replica_set = format!("{app}-{hash}");
    let name = format!("{replica_set}-{}", name_suffix(i + 1_000_000, 5));
    let rs_uid = uuid(deployment + 1_000_000);
    let token_volume = format!("kube-api-access-{}", name_suffix(i + 2_000_000, 5));
    let pod_ip = format!("10.244.{}.{}", i / 250, i % 250 + 2);
    let node = i % 20;
    let host_ip = format!("10.0.0.{}", node + 10);
    let created = "2025-05-12T09:14:03Z";
    let started = "2025-05-12T09:14:05Z";
    let condition = |kind: &str, at: &str| json!({"lastProbeTime": null, "lastTransitionTime": at, "status": "True", "type": kind});
    let condition_fields = |kind: &str| {
        (
            format!(r#"k:{{"type":"{kind}"}}"#),
            json!({".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}),
        )
    };
    let conditions = [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ];
    let status_fields: serde_json::Map<String, Value> =
        conditions.iter().map(|c| condition_fields(c)).collect();
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "creationTimestamp": created,
            "generateName": format!("{replica_set}-"),
            "labels": {"app": app, "podset": app, "pod-template-hash": hash},
            "managedFields": [
                {
                    "apiVersion": "v1", "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {
                            "f:generateName": {},
                            "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}, "f:podset": {}},
                            "f:ownerReferences": {".": {}, format!(r#"k:{{"uid":"{rs_uid}"}}"#): {}},
                        },
                        "f:spec": {
                            "f:containers": {
                                r#"k:{"name":"web"}"#: {
                                    ".": {}, "f:env": {".": {},
                                        r#"k:{"name":"LOG_LEVEL"}"#: {".": {}, "f:name": {}, "f:value": {}},
                                        r#"k:{"name":"POD_NAME"}"#: {".": {}, "f:name": {}, "f:valueFrom": {".": {}, "f:fieldRef": {}}}},
                                    "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                                    "f:ports": {".": {}, r#"k:{"containerPort":8080,"protocol":"TCP"}"#:
                                        {".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
                                    "f:readinessProbe": {".": {}, "f:failureThreshold": {},
                                        "f:httpGet": {".": {}, "f:path": {}, "f:port": {}, "f:scheme": {}},
                                        "f:periodSeconds": {}, "f:successThreshold": {}, "f:timeoutSeconds": {}},
                                    "f:resources": {".": {}, "f:limits": {".": {}, "f:memory": {}},
                                        "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
                                    "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {},
                                },
                            },
                            "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {},
                            "f:schedulerName": {}, "f:securityContext": {}, "f:terminationGracePeriodSeconds": {},
                        },
                    },
                    "manager": "kube-controller-manager", "operation": "Update", "time": created,
                },
                {
                    "apiVersion": "v1", "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:status": {
                            "f:conditions": status_fields,
                            "f:containerStatuses": {}, "f:hostIP": {},
                            "f:hostIPs": {".": {}, format!(r#"k:{{"ip":"{host_ip}"}}"#): {".": {}, "f:ip": {}}},
                            "f:phase": {}, "f:podIP": {},
                            "f:podIPs": {".": {}, format!(r#"k:{{"ip":"{pod_ip}"}}"#): {".": {}, "f:ip": {}}},
                            "f:startTime": {},
                        },
                    },
                    "manager": "kubelet", "operation": "Update", "subresource": "status", "time": started,
                },
            ],
            "name": name,
            "namespace": namespace,
            "ownerReferences": [{
                "apiVersion": "apps/v1", "blockOwnerDeletion": true, "controller": true,
                "kind": "ReplicaSet", "name": replica_set, "uid": rs_uid,
            }],
            "resourceVersion": (40_000 + i).to_string(),
            "uid": uuid(i),
        },
        "spec": {
            "containers": [{
                "env": [
                    {"name": "LOG_LEVEL", "value": "info"},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                ],
                "image": "registry.example.com/shop/web:1.8.2",
                "imagePullPolicy": "IfNotPresent",
                "name": "web",
                "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                "readinessProbe": {
                    "failureThreshold": 3,
                    "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                    "periodSeconds": 10, "successThreshold": 1, "timeoutSeconds": 1,
                },
                "resources": {"limits": {"memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "volumeMounts": [{
                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                    "name": token_volume, "readOnly": true,
                }],
            }],
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": true,
            "nodeName": format!("node-{node:02}"),
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "serviceAccount": "default",
            "serviceAccountName": "default",
            "terminationGracePeriodSeconds": 30,
            "tolerations": [
                {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
                {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300},
            ],
            "volumes": [{
                "name": token_volume,
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
                        {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}, "path": "namespace"}]}},
                    ],
                },
            }],
        },
        "status": {
            "conditions": conditions.iter().map(|c| condition(c, if *c == "PodScheduled" { created } else { started })).collect::<Vec<_>>(),
            "containerStatuses": [{
                "containerID": format!("containerd://{}", hex64(i)),
                "image": "registry.example.com/shop/web:1.8.2",
                "imageID": format!("registry.example.com/shop/web@sha256:{}", hex64(u64::MAX / 3)),
                "lastState": {},
                "name": "web",
                "ready": true,
                "restartCount": 0,
                "started": true,
                "state": {"running": {"startedAt": started}},
            }],
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "phase": "Running",
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "qosClass": "Burstable",
            "startTime": started,
        },
    })
}
