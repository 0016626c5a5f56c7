//! Finalizers across plugin versions, on the embedded cluster: a reload that
//! renames or drops the finalizer, and a plugin that is removed, never leave
//! objects held in silence.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::cluster::{ClusterBackend, ObjectKey, VirtualClock};
use reconciler_host::engine::Engine;
use reconciler_host::plugin::finalizer_report::FinalizerHandover;
use reconciler_host::plugin::hot_reload::{PluginDirectory, ReloadEvent};
use reconciler_host::process::simulate::{SimulationConfig, run};
use reconciler_tests::world::key;
use reconciler_tests::{sandbox, test_plugin};
use serde_json::{Value, json};

const OLD: &str = "hostile.example.com/cleanup";
const RENAMED: &str = "hostile.example.com/cleanup-v2";

struct Host {
    dir: tempfile::TempDir,
    clock: VirtualClock,
    cluster: Arc<EmbeddedCluster>,
    engine: Engine<EmbeddedCluster>,
    plugins: PluginDirectory,
}

impl Host {
    /// A host serving the first version of the hostile plugin, with the
    /// objects `names` reconciled once by it (so they carry its finalizer).
    async fn serving(names: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let clock = VirtualClock::at(reconciler_sdk::testing::DEFAULT_NOW_MILLIS);
        let cluster = Arc::new(EmbeddedCluster::new(Arc::new(clock.clone())));
        let engine = Engine::empty(cluster.clone(), Arc::new(clock.clone()));
        let plugins = PluginDirectory::new(dir.path(), sandbox().clone());
        let mut host = Self {
            dir,
            clock,
            cluster,
            engine,
            plugins,
        };
        host.drop_in(&test_plugin("hostile"));
        host.sync().await;
        for name in names {
            host.cluster.apply_as_user(hostile(name, &[])).unwrap();
        }
        host.settle().await;
        for name in names {
            assert_eq!(host.finalizers(name).await, [OLD], "{name}");
        }
        host
    }

    fn file(&self) -> PathBuf {
        self.dir.path().join("hostile.wasm")
    }

    fn drop_in(&self, from: &Path) {
        let tmp = self.dir.path().join(".hostile.wasm.tmp");
        std::fs::copy(from, &tmp).unwrap();
        std::fs::rename(&tmp, self.file()).unwrap();
    }

    async fn sync(&mut self) -> Vec<ReloadEvent> {
        self.plugins.sync(&self.engine).await
    }

    /// Reloads with `variant` and returns what the reload did about the
    /// finalizer, and its line.
    async fn reload(&mut self, variant: &str) -> (Option<FinalizerHandover>, String) {
        self.drop_in(&test_plugin(variant));
        let events = self.sync().await;
        match events.as_slice() {
            [ReloadEvent::Reloaded { finalizers, .. }] => {
                (finalizers.clone(), events[0].to_string())
            }
            other => panic!("expected one reload, got {other:?}"),
        }
    }

    async fn settle(&self) {
        let config = SimulationConfig {
            start_millis: reconciler_host::cluster::Clock::now_millis(&self.clock),
            ..SimulationConfig::default()
        };
        let report = run(&self.engine, &self.clock, &config).await;
        assert!(report.unsettled.is_none(), "{:?}", report.unsettled);
    }

    async fn get(&self, name: &str) -> Option<Value> {
        self.cluster.get(&primary(name)).await.unwrap()
    }

    async fn finalizers(&self, name: &str) -> Vec<String> {
        let object = self.get(name).await.expect("the object exists");
        serde_json::from_value(object["metadata"]["finalizers"].clone()).unwrap_or_default()
    }

    /// The events recorded on `name`, as (reason, message).
    fn events_on(&self, name: &str) -> Vec<(String, String)> {
        self.cluster
            .events()
            .into_iter()
            .filter(|e| e.record.regarding == primary(name))
            .map(|e| (e.record.reason, e.record.message))
            .collect()
    }

    /// Deletes `name` as a user would; its finalizer holds it.
    async fn delete(&self, name: &str) {
        self.cluster.delete_as_user(&primary(name)).unwrap();
        self.settle().await;
        let held = self.get(name).await.expect("held by its finalizer");
        assert!(held["metadata"]["deletionTimestamp"].is_string());
    }
}

fn primary(name: &str) -> ObjectKey {
    key("hostile.example.com", "v1", "Hostile", "default", name)
}

fn hostile(name: &str, annotations: &[(&str, &str)]) -> Value {
    let annotations: serde_json::Map<String, Value> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"mode": "ok"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeping_the_finalizer_touches_no_object() {
    let mut host = Host::serving(&["a"]).await;
    let (finalizers, line) = host.reload("hostile-v2").await;
    assert_eq!(finalizers, None, "{line}");
    assert!(!line.contains("finalizer"), "{line}");
    host.settle().await;
    assert_eq!(host.finalizers("a").await, [OLD]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_object_gets_the_renamed_finalizer_in_place_of_the_old() {
    let mut host = Host::serving(&["a"]).await;
    let (finalizers, line) = host.reload("hostile-renamed-finalizer").await;
    let finalizers = finalizers.expect("the finalizer changed");
    assert_eq!(
        (finalizers.released_live, finalizers.handed_over),
        (1, 0),
        "{line}"
    );
    assert!(
        line.contains(&format!(
            "; finalizer {OLD} -> {RENAMED}: removed from 1 live object(s), 0 deleting object(s) wait for 0.3.0 to finalize them"
        )),
        "{line}"
    );
    assert!(
        host.finalizers("a").await.is_empty(),
        "the old one is gone at once"
    );
    let events = host.events_on("a");
    let (_, message) = events
        .iter()
        .find(|(reason, _)| reason == "FinalizerReplaced")
        .unwrap_or_else(|| panic!("a FinalizerReplaced Event: {events:?}"));
    assert!(
        message.contains(&format!(
            "hostile 0.3.0 declares finalizer {RENAMED} instead of {OLD}"
        )),
        "{message}"
    );

    // The next reconcile adds the new one; deleting then waits for it.
    host.settle().await;
    assert_eq!(host.finalizers("a").await, [RENAMED]);
    host.delete("a").await;
    host.cluster
        .apply_as_user(hostile(
            "a",
            &[("hostile.example.com/cleanup-done", "true")],
        ))
        .unwrap();
    host.settle().await;
    assert!(host.get("a").await.is_none(), "released by the new version");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleting_object_is_released_when_the_new_version_says_finalized() {
    let mut host = Host::serving(&["a"]).await;
    host.delete("a").await;

    let (finalizers, line) = host.reload("hostile-renamed-finalizer").await;
    assert_eq!(finalizers.expect("changed").handed_over, 1, "{line}");
    assert!(
        line.contains("1 deleting object(s) wait for 0.3.0"),
        "{line}"
    );
    let events = host.events_on("a");
    let (_, message) = events
        .iter()
        .find(|(reason, _)| reason == "FinalizerHandedOver")
        .unwrap_or_else(|| panic!("a FinalizerHandedOver Event: {events:?}"));
    assert!(
        message.contains(&format!(
            "hostile 0.3.0 finalizes this object in place of the version that added {OLD}"
        )) && message.contains(RENAMED),
        "{message}"
    );

    // The new version holds it while its cleanup is not done...
    host.settle().await;
    assert_eq!(
        host.finalizers("a").await,
        [OLD],
        "still held: the new version has not said finalized"
    );
    // ...and releases the old finalizer once it is.
    host.cluster
        .apply_as_user(hostile(
            "a",
            &[("hostile.example.com/cleanup-done", "true")],
        ))
        .unwrap();
    host.settle().await;
    assert!(
        host.get("a").await.is_none(),
        "deleted: {:?}",
        host.get("a").await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_without_a_finalizer_releases_every_object_at_once() {
    let mut host = Host::serving(&["gone", "live"]).await;
    host.delete("gone").await;

    let (finalizers, line) = host.reload("hostile-no-finalizer").await;
    let finalizers = finalizers.expect("the finalizer was dropped");
    assert_eq!(
        (finalizers.released_live, finalizers.released_deleting),
        (1, 1)
    );
    assert!(
        line.contains(&format!(
            "; finalizer {OLD} dropped: released 2 object(s) (1 live, 1 deleting)"
        )),
        "{line}"
    );
    assert!(
        host.get("gone").await.is_none(),
        "the deleting object is released without waiting for a reconcile"
    );
    assert!(host.finalizers("live").await.is_empty());
    let events = host.events_on("live");
    assert!(
        events
            .iter()
            .any(|(reason, message)| reason == "FinalizerRemoved"
                && message.contains(&format!(
                    "hostile 0.4.0 declares no finalizer for this object: removed {OLD}"
                ))),
        "{events:?}"
    );
    host.settle().await;
    assert!(
        host.finalizers("live").await.is_empty(),
        "nothing adds one back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_plugin_names_the_objects_its_finalizer_holds_and_how_to_release_them() {
    let mut host = Host::serving(&["held", "live"]).await;
    host.delete("held").await;
    // Another controller's finalizer on the live one is kept out of the command.
    let mut live = host.get("live").await.unwrap();
    live["metadata"]["finalizers"] = json!(["other.example.com/keep", OLD]);
    host.cluster.apply_as_user(live).unwrap();
    host.settle().await;

    std::fs::remove_file(host.file()).unwrap();
    let events = host.sync().await;
    let [ReloadEvent::Unloaded { holds, .. }] = events.as_slice() else {
        panic!("expected one unload, got {events:?}");
    };
    assert_eq!(holds.len(), 2, "{holds:?}");
    let text = events[0].to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].contains(&format!(
            "2 object(s) still carry the finalizer {OLD} of plugin hostile"
        )),
        "{text}"
    );
    assert_eq!(
        lines[1],
        format!(
            r#"  Hostile default/held (deleting): kubectl patch hostile.v1.hostile.example.com held -n default --type=json -p '[{{"op":"test","path":"/metadata/finalizers/0","value":"{OLD}"}},{{"op":"remove","path":"/metadata/finalizers/0"}}]'"#
        ),
        "{text}"
    );
    // The command points at where the finalizer is in that object's list.
    let live = host.finalizers("live").await;
    assert_eq!(live.len(), 2, "{live:?}");
    let index = live.iter().position(|f| f == OLD).unwrap();
    assert!(
        lines[2].starts_with("  Hostile default/live: kubectl patch")
            && lines[2].contains(&format!(
                r#"{{"op":"test","path":"/metadata/finalizers/{index}","value":"{OLD}"}}"#
            ))
            && !lines[2].contains("other.example.com"),
        "{text}"
    );
    // Nothing is removed: the plugin may come back.
    assert_eq!(host.finalizers("held").await, [OLD]);
    // Said once.
    assert!(host.sync().await.is_empty());
}
