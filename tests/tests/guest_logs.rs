//! Guest stdout and `log` calls become host log events tagged with the
//! plugin and the object.

use std::sync::Arc;

use reconciler_host::plugin::ReconcileInput;
use reconciler_sdk::memory_cache::MemoryCache;
use reconciler_tests::log_capture::LogCapture;
use reconciler_tests::{load, test_plugin};
use serde_json::json;

#[test]
fn guest_output_and_logs_are_tagged_with_plugin_and_object() {
    let recorded = LogCapture::default();
    tracing::subscriber::with_default(recorded.subscriber(), || {
        let plugin = load(&test_plugin("hostile"));
        let primary = json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
            "metadata": {"name": "chatty", "namespace": "default"}, "spec": {"mode": "log"}});
        let cache = MemoryCache::new();
        let request = cache.request_for(&primary, &plugin.metadata().owns);
        plugin
            .reconcile(ReconcileInput {
                request,
                primary_namespace: Some("default".into()),
                object: "default/chatty".into(),
                reader: Arc::new(cache),
                now_millis: 0,
                cluster: Default::default(),
            })
            .unwrap();
    });
    let lines = recorded.lines();
    let find = |needle: &str| {
        lines
            .iter()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no event with {needle:?} in {lines:#?}"))
            .clone()
    };
    let logged = find("hello from the sandbox");
    assert!(
        logged.contains("plugin=hostile") && logged.contains("object=default/chatty"),
        "{logged}"
    );
    let printed = find("a line on stdout");
    assert!(
        printed.contains("stream=stdout") && printed.contains("object=default/chatty"),
        "{printed}"
    );
}
