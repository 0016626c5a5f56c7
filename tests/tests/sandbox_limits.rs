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
    let plugin = hostile();
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
