//! Issue 12 in the sandbox: what a plugin does through WASI and the host's
//! imports can neither hang, flood nor blur the host. Each test runs the
//! compiled hostile plugin and then checks the same process still serves.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reconciler_host::plugin::{CallError, LoadedPlugin, ReconcileInput, ValidResponse};
use reconciler_sdk::memory_cache::MemoryCache;
use reconciler_tests::log_capture::LogCapture;
use reconciler_tests::{load, pods_with_blobs, test_limits, test_plugin};
use serde_json::{Value, json};

fn hostile_object(mode: &str) -> Value {
    json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
        "metadata": {"name": format!("h-{mode}"), "namespace": "default", "uid": "u-1"},
        "spec": {"mode": mode}})
}

fn call(plugin: &LoadedPlugin, mode: &str, cache: MemoryCache) -> Result<ValidResponse, CallError> {
    let primary = hostile_object(mode);
    let request = cache.request_for(&primary, &plugin.metadata().owns);
    plugin.reconcile(ReconcileInput {
        request,
        primary_namespace: Some("default".into()),
        object: format!("default/h-{mode}"),
        reader: Arc::new(cache),
        now_millis: 0,
        cluster: Default::default(),
    })
}

fn hostile() -> LoadedPlugin {
    load(&test_plugin("hostile"))
}

/// The next object after a failure is served as usual.
fn next_object_is_served(plugin: &LoadedPlugin) {
    let ok = call(plugin, "ok", MemoryCache::new()).expect("the next object reconciles");
    assert_eq!(ok.status.unwrap()["ok"], true);
}

#[test]
fn a_sleep_in_reconcile_ends_with_the_timeout_error_within_the_deadline() {
    let plugin = hostile();
    let started = Instant::now();
    let err = call(&plugin, "sleep", MemoryCache::new()).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, CallError::Timeout { .. }), "{err:?}");
    assert!(err.to_string().contains("timed out after 200 ms"), "{err}");
    let deadline = Duration::from_millis(test_limits().timeout_ms.into());
    assert!(
        took < deadline + Duration::from_secs(1),
        "a one-hour sleep took {took:?} against a {deadline:?} deadline"
    );
    next_object_is_served(&plugin);
}

#[test]
fn a_long_panic_says_it_panicked_with_the_first_line_of_its_message() {
    let plugin = hostile();
    let err = call(&plugin, "long-panic", MemoryCache::new()).unwrap_err();
    match &err {
        CallError::Panic { location, message } => {
            assert!(location.contains("src/sandbox_limits.rs:"), "{location}");
            assert_eq!(message, "hostile plugin panicked with a long message");
        }
        other => panic!("expected a panic, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.starts_with("panicked at "), "{text}");
    assert!(
        text.ends_with(": hostile plugin panicked with a long message"),
        "{text}"
    );
    assert!(text.len() < 200, "the Event stays short: {text}");
    next_object_is_served(&plugin);
}

#[test]
fn listing_more_than_the_memory_limit_is_refused_naming_the_limit() {
    use reconciler_host::plugin::{HostLimits, Sandbox, SandboxConfig};
    // Building 64 MiB of JSON takes a while on a loaded machine: a deadline
    // that cannot cut it short, since the limit, not the time, is tested.
    let sandbox = Sandbox::new(SandboxConfig {
        limits: HostLimits {
            timeout_ms: 10_000,
            ..HostLimits::default()
        },
        compile_cache: Some(reconciler_tests::test_compile_cache_dir()),
        ..SandboxConfig::default()
    })
    .unwrap();
    let plugin = sandbox.load(&test_plugin("hostile")).unwrap();
    // 70 Pods of 1 MiB each: more than the 64 MiB a call may hold.
    let err = call(&plugin, "list-large", pods_with_blobs(70, 1 << 20)).unwrap_err();
    let CallError::Plugin(message) = &err else {
        panic!("expected the plugin's error from cache.list, got {err:?}");
    };
    for needle in [
        "listing v1 Pod in namespace default",
        "passed 64 MiB of JSON after 63 objects",
        "hints.memoryLimitMib",
        "narrower label selector",
    ] {
        assert!(message.contains(needle), "{needle:?} in {message}");
    }
    // A list within the limit still arrives whole.
    let mut small = MemoryCache::new();
    small
        .insert(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"}}))
        .unwrap();
    let listed = call(&plugin, "list-large", small).expect("a small list");
    assert_eq!(listed.status.unwrap()["pods"], 1);
}

#[test]
fn logging_until_the_deadline_stays_within_the_stdio_budget_and_says_what_was_dropped() {
    let recorded = LogCapture::default();
    let subscriber = recorded.subscriber();
    let plugin = hostile();
    let result = tracing::subscriber::with_default(subscriber, || {
        call(&plugin, "log-flood", MemoryCache::new())
    });
    assert!(
        matches!(result, Err(CallError::Timeout { .. })),
        "{result:?}"
    );
    let lines = recorded.events();
    let plugin_lines: Vec<&String> = lines
        .iter()
        .filter(|(target, _)| target == "plugin")
        .map(|(_, text)| text)
        .collect();
    let bytes: usize = plugin_lines.iter().map(|l| l.len()).sum();
    let budget = test_limits().stdio_kib as usize * 1024;
    assert!(
        bytes <= budget + 1024,
        "{bytes} bytes of host log in {} lines from one call",
        plugin_lines.len()
    );
    assert!(plugin_lines.len() > 100, "the budget's worth was logged");
    let notices: Vec<&&String> = plugin_lines
        .iter()
        .filter(|l| l.contains("dropped") && l.contains("log lines"))
        .collect();
    assert_eq!(notices.len(), 1, "said once: {notices:?}");
    assert!(
        notices[0].contains("object=default/h-log-flood"),
        "{}",
        notices[0]
    );
    next_object_is_served(&plugin);
}

/// Issue 27, point 1: calls that each stay within their own cap cannot
/// together take more guest memory than the host's budget; the call that
/// would is refused naming the budget, and another plugin keeps its share.
#[test]
fn calls_filling_their_memory_at_once_stop_at_the_host_budget_and_others_keep_their_share() {
    use reconciler_host::plugin::{HostLimits, Sandbox, SandboxConfig};
    use reconciler_tests::{example_plugin, test_compile_cache_dir};

    let sandbox = Sandbox::new(SandboxConfig {
        limits: HostLimits {
            // Long enough that the first call still holds its memory when
            // the others start; the test waits for it, not for a time.
            timeout_ms: 3_000,
            memory_total_mib: Some(160),
            ..HostLimits::default()
        },
        compile_cache: Some(test_compile_cache_dir()),
        ..SandboxConfig::default()
    })
    .unwrap();
    let hostile = Arc::new(sandbox.load(&test_plugin("hostile")).unwrap());
    let podset = sandbox.load(&example_plugin("podset")).unwrap();

    let first = std::thread::spawn({
        let hostile = hostile.clone();
        move || call(&hostile, "fill-and-spin", MemoryCache::new())
    });
    while sandbox.memory_budget().used_bytes() < 56 << 20 {
        assert!(!first.is_finished(), "{:?}", first.join());
        std::thread::sleep(Duration::from_millis(1));
    }

    let err = call(&hostile, "fill-and-spin", MemoryCache::new()).unwrap_err();
    assert!(matches!(err, CallError::HostMemoryBudget { .. }), "{err:?}");
    let text = err.to_string();
    for needle in ["160 MiB", "--plugin-memory-total-mib"] {
        assert!(text.contains(needle), "{needle:?} in {text}");
    }
    assert_eq!(err.reason(), "HostMemoryBudget");

    // podset has a reserve the hostile plugin could not take.
    let primary = json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "web", "namespace": "default", "uid": "u-2"}, "spec": {"size": 2}});
    let cache = MemoryCache::new();
    let response = podset
        .reconcile(ReconcileInput {
            request: cache.request_for(&primary, &podset.metadata().owns),
            primary_namespace: Some("default".into()),
            object: "default/web".into(),
            reader: Arc::new(cache),
            now_millis: 0,
            cluster: Default::default(),
        })
        .expect("podset reconciles beside a plugin filling its memory");
    assert_eq!(response.apply[0].object["spec"]["replicas"], 2);

    let first = first.join().unwrap().unwrap_err();
    assert!(matches!(first, CallError::Timeout { .. }), "{first:?}");
    assert_eq!(sandbox.memory_budget().used_bytes(), 0, "all given back");
    next_object_is_served(&hostile);
}
