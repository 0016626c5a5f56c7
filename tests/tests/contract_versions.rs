//! Plugins built for an older contract keep loading: the `contract-0-2-0`,
//! `contract-0-2-1` and `contract-0-2-2` test plugins are compiled against
//! the frozen WIT of their version (tests/plugins/contract-*/wit), and this
//! host speaks 0.2.3, which added the `triggers` export (0.2.2 added the
//! `cluster` import).

use std::sync::Arc;

use reconciler_host::plugin::{LoadedPlugin, ReconcileInput};
use reconciler_sdk::contract::ClusterInfo;
use reconciler_sdk::memory_cache::MemoryCache;
use reconciler_sdk::{AdmissionRequest, Operation, UserInfo};
use reconciler_tests::{example_plugin, load, test_plugin};
use serde_json::json;

/// Loads the test plugin built for `version`, after checking that the
/// component really names that version, imports `cluster` only from 0.2.2
/// on, and exports no `triggers` (or the test would mean nothing).
fn legacy(version: &str) -> LoadedPlugin {
    let path = test_plugin(&format!("contract-{}", version.replace('.', "-")));
    let bytes = std::fs::read(&path).unwrap();
    let names = |needle: &str| bytes.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(
        names(&format!("reconciler:plugin/reconciler@{version}")),
        "{} exports no reconciler@{version}",
        path.display()
    );
    assert_eq!(
        names("reconciler:plugin/cluster"),
        version == "0.2.2",
        "{} and the cluster import, which 0.2.2 added",
        path.display()
    );
    assert!(
        !names("reconciler:plugin/triggers"),
        "{} exports triggers, which {version} did not have",
        path.display()
    );
    let plugin = load(&path);
    assert!(
        plugin.metadata().triggers.is_empty(),
        "a plugin built for {version} is woken by every change"
    );
    plugin
}

#[test]
fn a_plugin_built_for_0_2_0_loads_and_reconciles_unchanged() {
    let plugin = legacy("0.2.0");
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
            cluster: Default::default(),
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

#[test]
fn a_plugin_built_for_0_2_1_loads_reconciles_and_serves_its_admission() {
    let plugin = legacy("0.2.1");
    assert_eq!(plugin.name(), "legacy-admission");
    assert!(plugin.admission().is_some(), "its admission is found");
    let object = |name: &str| {
        json!({"apiVersion": "legacy.example.com/v1", "kind": "LegacyAdmission",
            "metadata": {"name": name, "namespace": "default"}})
        .to_string()
    };
    let request = |name: &str| AdmissionRequest {
        operation: Operation::Create,
        object: Some(object(name)),
        old_object: None,
        user_info: UserInfo::default(),
        dry_run: false,
    };
    let denied = plugin.admit(request("forbidden"), "default/forbidden", 0);
    assert!(!denied.allowed);
    assert_eq!(
        denied.message.as_deref(),
        Some("built for 0.2.1: forbidden")
    );
    assert!(plugin.admit(request("fine"), "default/fine", 0).allowed);

    let primary = json!({"apiVersion": "legacy.example.com/v1", "kind": "LegacyAdmission",
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
            cluster: Arc::new(ClusterInfo::named("east")),
        })
        .expect("the 0.2.1 plugin reconciles in a member cluster too");
    assert_eq!(response.status.unwrap()["contract"], "0.2.1");
}

#[test]
fn a_compiled_plugin_is_told_the_cluster_it_reconciles_in() {
    let plugin = load(&example_plugin("podset"));
    let primary = json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "web", "namespace": "default", "uid": "u-1"},
        "spec": {"size": 1}});
    let status_in = |cluster: ClusterInfo| {
        let cache = MemoryCache::new();
        let request = cache.request_for(&primary, &plugin.metadata().owns);
        plugin
            .reconcile(ReconcileInput {
                request,
                primary_namespace: Some("default".into()),
                object: "default/web".into(),
                reader: Arc::new(cache),
                now_millis: 0,
                cluster: Arc::new(cluster),
            })
            .expect("podset reconciles")
            .status
            .map(serde_json::Value::Object)
            .unwrap()
    };
    assert_eq!(
        status_in(ClusterInfo::named("east")),
        json!({"podNames": [], "cluster": "east"})
    );
    assert_eq!(status_in(ClusterInfo::local()), json!({"podNames": []}));
}

#[test]
fn a_plugin_built_for_0_2_2_loads_and_is_told_its_cluster() {
    let plugin = legacy("0.2.2");
    assert_eq!(plugin.name(), "legacy-cluster");
    let primary = json!({"apiVersion": "legacy.example.com/v1", "kind": "LegacyCluster",
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
            cluster: Arc::new(ClusterInfo::named("east")),
        })
        .expect("the 0.2.2 plugin reconciles");
    assert_eq!(
        serde_json::Value::Object(response.status.unwrap()),
        json!({"contract": "0.2.2", "cluster": "east"})
    );
}

#[test]
fn a_plugin_built_for_0_2_3_exports_the_triggers_it_declares() {
    use reconciler_sdk::{Change, KindRef};
    let plugin = load(&example_plugin("podset"));
    let wakes_on = |kind: KindRef| plugin.metadata().trigger_of(&kind).map(<[Change]>::to_vec);
    assert_eq!(
        wakes_on(KindRef::new("apps", "v1", "Deployment")),
        Some(vec![Change::Generation])
    );
    assert_eq!(
        wakes_on(KindRef::new("", "v1", "Pod")),
        Some(vec![Change::Labels])
    );
    // A kind a plugin does not name wakes it on every change, as before
    // 0.2.3: podset names no Secret, and hostile (built for 0.2.3) names
    // nothing at all.
    assert_eq!(wakes_on(KindRef::new("", "v1", "Secret")), None);
    assert!(load(&test_plugin("hostile")).metadata().triggers.is_empty());
}
