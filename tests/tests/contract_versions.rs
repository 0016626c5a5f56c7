//! Plugins built for an older contract keep loading: the `contract-0-2-0`
//! test plugin is compiled against the frozen 0.2.0 WIT
//! (tests/plugins/contract-0-2-0/wit), and this host speaks 0.2.1.

use std::sync::Arc;

use reconciler_host::plugin::ReconcileInput;
use reconciler_sdk::memory_cache::MemoryCache;
use reconciler_tests::{example_plugin, load, test_plugin};
use serde_json::json;

#[test]
fn a_plugin_built_for_0_2_0_loads_and_reconciles_unchanged() {
    let path = test_plugin("contract-0-2-0");
    // The test means something only if the component really names 0.2.0.
    let bytes = std::fs::read(&path).unwrap();
    let names_0_2_0 = bytes
        .windows(b"reconciler:plugin/reconciler@0.2.0".len())
        .any(|w| w == b"reconciler:plugin/reconciler@0.2.0");
    assert!(
        names_0_2_0,
        "{} exports no reconciler@0.2.0",
        path.display()
    );

    let plugin = load(&path);
    assert_eq!(plugin.name(), "legacy");
    assert!(
        plugin.admission().is_none(),
        "a 0.2.0 plugin serves no admission"
    );
    let primary = json!({"apiVersion": "legacy.example.com/v1", "kind": "Legacy",
        "metadata": {"name": "old", "namespace": "default", "uid": "u-1"}});
    let cache = MemoryCache::new();
    let request = cache.request_for(&primary, &plugin.metadata().owns);
    let response = plugin
        .reconcile(ReconcileInput {
            request,
            primary_namespace: Some("default".into()),
            object: "default/old".into(),
            reader: Arc::new(cache),
            now_millis: 0,
        })
        .expect("the 0.2.0 plugin reconciles");
    assert_eq!(response.status.unwrap()["contract"], "0.2.0");
    assert_eq!(response.apply[0].object["metadata"]["name"], "old");
}

#[test]
fn an_sdk_plugin_that_does_not_opt_in_serves_no_admission() {
    let plugin = load(&example_plugin("podset"));
    assert!(plugin.admission().is_none());
}
