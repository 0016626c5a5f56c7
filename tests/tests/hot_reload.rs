//! Hot reload on the embedded cluster: plugins arriving, changing, breaking,
//! leaving and racing in a plugins directory, as files really arrive.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reconciler_host::cluster::VirtualClock;
use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::cluster::{BackendError, ClusterBackend};
use reconciler_host::engine::{Engine, PrimarySelectors, ReconcileRecord, ServeScope};
use reconciler_host::plugin::hot_reload::{PluginDirectory, ReloadEvent};
use reconciler_host::process::simulate::{SimulationConfig, run};
use reconciler_tests::intercepted::{Call, Hook, Intercepted};
use reconciler_tests::world::key;
use reconciler_tests::{sandbox, test_plugin};
use serde_json::{Value, json};

struct Host {
    dir: tempfile::TempDir,
    clock: VirtualClock,
    cluster: Arc<EmbeddedCluster>,
    engine: Engine<EmbeddedCluster>,
    plugins: PluginDirectory,
}

impl Host {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let clock = VirtualClock::at(reconciler_sdk::testing::DEFAULT_NOW_MILLIS);
        let cluster = Arc::new(EmbeddedCluster::new(Arc::new(clock.clone())));
        let engine = Engine::empty(cluster.clone(), Arc::new(clock.clone()));
        let plugins = PluginDirectory::new(dir.path(), sandbox().clone());
        Self {
            dir,
            clock,
            cluster,
            engine,
            plugins,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Puts a file in place the way an editor or `kubectl cp` does: written
    /// under a temporary dotfile name, then renamed.
    fn drop_in(&self, from: &Path, name: &str) {
        let tmp = self.path(&format!(".{name}.tmp"));
        std::fs::copy(from, &tmp).unwrap();
        std::fs::rename(&tmp, self.path(name)).unwrap();
    }

    async fn sync(&mut self) -> Vec<ReloadEvent> {
        self.plugins.sync(&self.engine).await
    }

    async fn settle(&self) -> Vec<ReconcileRecord> {
        let config = SimulationConfig {
            start_millis: reconciler_host::cluster::Clock::now_millis(&self.clock),
            ..SimulationConfig::default()
        };
        run(&self.engine, &self.clock, &config).await.records
    }

    async fn config_map(&self, name: &str) -> Option<Value> {
        self.cluster
            .get(&key("", "v1", "ConfigMap", "default", name))
            .await
            .unwrap()
    }
}

fn hostile(name: &str) -> Value {
    json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"mode": "ok"}})
}

fn loaded(events: &[ReloadEvent]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            ReloadEvent::Loaded { name, version, .. } => Some((name.clone(), version.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_dropped_in_starts_reconciling() {
    let mut host = Host::new();
    host.cluster.apply_as_user(hostile("a")).unwrap();
    assert!(
        host.sync().await.is_empty(),
        "an empty directory serves nothing"
    );
    assert!(host.settle().await.is_empty());

    host.drop_in(&test_plugin("hostile"), "hostile.wasm");
    let events = host.sync().await;
    assert_eq!(
        loaded(&events),
        [("hostile".to_string(), "0.1.0".to_string())]
    );
    host.settle().await;
    assert_eq!(
        host.config_map("a").await.expect("converged")["data"]["version"],
        "0.1.0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_version_is_swapped_in_and_reconciles_every_object() {
    let mut host = Host::new();
    host.drop_in(&test_plugin("hostile"), "hostile.wasm");
    host.sync().await;
    host.cluster.apply_as_user(hostile("a")).unwrap();
    host.cluster.apply_as_user(hostile("b")).unwrap();
    host.settle().await;

    host.drop_in(&test_plugin("hostile-v2"), "hostile.wasm");
    let events = host.sync().await;
    match events.as_slice() {
        [
            ReloadEvent::Reloaded {
                name,
                old_version,
                version,
                old_sha256,
                sha256,
                ..
            },
        ] => {
            assert_eq!(
                (name.as_str(), old_version.as_str(), version.as_str()),
                ("hostile", "0.1.0", "0.2.0")
            );
            assert_ne!(old_sha256, sha256);
            let line = events[0].to_string();
            assert!(
                line.contains("0.1.0 (") && line.contains("-> 0.2.0 ("),
                "{line}"
            );
        }
        other => panic!("expected one reload, got {other:?}"),
    }
    let records = host.settle().await;
    assert_eq!(
        records.len(),
        2 + 2,
        "each object once by the new version, then once more for its own update"
    );
    for name in ["a", "b"] {
        assert_eq!(
            host.config_map(name).await.unwrap()["data"]["version"],
            "0.2.0",
            "{name}"
        );
    }
    // Re-syncing an unchanged directory does nothing.
    assert!(host.sync().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_version_leaves_the_old_one_serving_and_is_reported_once() {
    let mut host = Host::new();
    host.drop_in(&test_plugin("hostile"), "hostile.wasm");
    host.sync().await;

    std::fs::write(
        host.path("hostile.wasm"),
        b"\0asm\x0d\0\x01\0 definitely not a component",
    )
    .unwrap();
    let events = host.sync().await;
    match events.as_slice() {
        [ReloadEvent::Failed { file, reason, .. }] => {
            assert!(file.ends_with("hostile.wasm"));
            assert!(reason.contains("cannot compile"), "{reason}");
            assert!(events[0].to_string().contains("keeps serving"));
        }
        other => panic!("expected one failure, got {other:?}"),
    }
    assert_eq!(host.plugins.failures(), 1);
    assert!(
        host.sync().await.is_empty(),
        "the same broken file is reported once"
    );
    assert_eq!(host.plugins.failures(), 1);

    // The old version still serves, new objects included.
    host.cluster.apply_as_user(hostile("late")).unwrap();
    host.settle().await;
    assert_eq!(
        host.config_map("late")
            .await
            .expect("served by the old version")["data"]["version"],
        "0.1.0"
    );

    // Fixing the file brings the new version in.
    host.drop_in(&test_plugin("hostile-v2"), "hostile.wasm");
    assert!(matches!(
        host.sync().await.as_slice(),
        [ReloadEvent::Reloaded { .. }]
    ));
}

/// A `metadata` that sleeps an hour used to hang the sync, and with it the
/// whole `dev` or `run` loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_whose_metadata_sleeps_is_refused_and_the_others_keep_serving() {
    let mut host = Host::new();
    host.drop_in(&test_plugin("hostile"), "hostile.wasm");
    host.sync().await;

    host.drop_in(&test_plugin("hostile-sleepy-metadata"), "sleepy.wasm");
    let events = tokio::time::timeout(Duration::from_secs(60), host.sync())
        .await
        .expect("loading a plugin whose metadata sleeps must end");
    match events.as_slice() {
        [ReloadEvent::Failed { file, reason, .. }] => {
            assert!(file.ends_with("sleepy.wasm"), "{file:?}");
            assert!(
                reason.contains("metadata did not return within 200 ms"),
                "{reason}"
            );
        }
        other => panic!("expected the sleepy plugin refused, got {other:?}"),
    }

    // An object added afterwards is reconciled by the plugin that serves.
    host.cluster.apply_as_user(hostile("after")).unwrap();
    host.settle().await;
    assert_eq!(
        host.config_map("after").await.expect("still served")["data"]["version"],
        "0.1.0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_written_file_is_never_loaded() {
    let mut host = Host::new();
    host.drop_in(&test_plugin("hostile"), "hostile.wasm");
    host.sync().await;
    let full = std::fs::read(test_plugin("hostile-v2")).unwrap();
    std::fs::write(host.path("hostile.wasm"), &full[..full.len() / 2]).unwrap();
    let events = host.sync().await;
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, ReloadEvent::Reloaded { .. } | ReloadEvent::Loaded { .. })),
        "{events:?}"
    );
    assert_eq!(host.engine.plugins()[0].metadata().version, "0.1.0");
    std::fs::write(host.path("hostile.wasm"), &full).unwrap();
    assert!(
        matches!(host.sync().await.as_slice(), [ReloadEvent::Reloaded { version, .. }] if version == "0.2.0")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_plugin_stops_and_leaves_its_objects() {
    let mut host = Host::new();
    host.drop_in(&test_plugin("hostile"), "hostile.wasm");
    host.sync().await;
    host.cluster.apply_as_user(hostile("a")).unwrap();
    host.settle().await;

    std::fs::remove_file(host.path("hostile.wasm")).unwrap();
    let events = host.sync().await;
    assert!(
        matches!(events.as_slice(), [ReloadEvent::Unloaded { name, .. }] if name == "hostile"),
        "{events:?}"
    );
    assert!(host.engine.plugins().is_empty());

    // Its objects stay, finalizer and children included; nothing reconciles them.
    let primary = host
        .cluster
        .get(&key("hostile.example.com", "v1", "Hostile", "default", "a"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        primary["metadata"]["finalizers"],
        json!(["hostile.example.com/cleanup"])
    );
    assert!(host.config_map("a").await.is_some());
    host.cluster.apply_as_user(hostile("b")).unwrap();
    assert!(host.settle().await.is_empty());
    assert!(host.config_map("b").await.is_none());
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_volume_symlink_swap_reloads() {
    use std::os::unix::fs::symlink;

    let mut host = Host::new();
    let root = host.dir.path().to_path_buf();
    // The layout kubelet writes for a ConfigMap volume.
    std::fs::create_dir(root.join("..2024_01_01_00_00_00.000000001")).unwrap();
    std::fs::copy(
        test_plugin("hostile"),
        root.join("..2024_01_01_00_00_00.000000001/hostile.wasm"),
    )
    .unwrap();
    symlink("..2024_01_01_00_00_00.000000001", root.join("..data")).unwrap();
    symlink("..data/hostile.wasm", root.join("hostile.wasm")).unwrap();
    assert_eq!(
        loaded(&host.sync().await),
        [("hostile".to_string(), "0.1.0".to_string())]
    );

    // An update: a new timestamped directory, then an atomic swap of ..data.
    std::fs::create_dir(root.join("..2024_01_01_00_05_00.000000002")).unwrap();
    std::fs::copy(
        test_plugin("hostile-v2"),
        root.join("..2024_01_01_00_05_00.000000002/hostile.wasm"),
    )
    .unwrap();
    symlink("..2024_01_01_00_05_00.000000002", root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    let events = host.sync().await;
    assert!(
        matches!(events.as_slice(), [ReloadEvent::Reloaded { version, .. }] if version == "0.2.0"),
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_plugins_racing_for_one_primary_kind() {
    let mut host = Host::new();
    host.drop_in(&test_plugin("hostile"), "a-hostile.wasm");
    host.drop_in(&test_plugin("hostile-rival"), "b-rival.wasm");
    let events = host.sync().await;
    assert_eq!(
        loaded(&events),
        [("hostile".to_string(), "0.1.0".to_string())]
    );
    let refusal = events.iter().find_map(|e| match e {
        ReloadEvent::Failed { file, reason, .. } => Some((file.clone(), reason.clone())),
        _ => None,
    });
    let (file, reason) = refusal.expect("the rival is refused");
    assert!(file.ends_with("b-rival.wasm"));
    assert!(
        reason.contains(
            "plugin rival reconciles hostile.example.com/v1 Hostile, which plugin hostile from"
        ) && reason.contains("a-hostile.wasm already reconciles"),
        "{reason}"
    );
    assert_eq!(host.plugins.failures(), 1);

    // When the holder leaves, the waiting rival takes the kind over.
    std::fs::remove_file(host.path("a-hostile.wasm")).unwrap();
    let events = host.sync().await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ReloadEvent::Unloaded { name, .. } if name == "hostile")),
        "{events:?}"
    );
    assert_eq!(
        loaded(&events),
        [("rival".to_string(), "0.1.0".to_string())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_directory_watcher_reports_a_rename_into_place() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let _watch = reconciler_host::support::dir_watch::watch_dir(dir.path(), tx)
        .expect("watching works here");
    let tmp = dir.path().join(".podset.wasm.tmp");
    std::fs::write(&tmp, b"bytes").unwrap();
    std::fs::rename(&tmp, dir.path().join("podset.wasm")).unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await;
    assert_eq!(
        got.expect("a batch arrives within the debounce window"),
        Some(())
    );
}

/// The embedded cluster, except that it does not serve PodSets until
/// `open`: a CRD installed after the host started.
fn gated(clock: &VirtualClock, open: Arc<AtomicBool>) -> Intercepted<Hook> {
    let podsets = reconciler_sdk::KindRef::new("example.com", "v1alpha1", "PodSet");
    Intercepted::new(
        EmbeddedCluster::new(Arc::new(clock.clone())),
        Box::new(move |call| match call {
            Call::Watch(kind, _) if *kind == podsets && !open.load(Ordering::SeqCst) => {
                Err(BackendError::UnknownKind {
                    kind: format!("{} {}", kind.api_version(), kind.kind),
                })
            }
            _ => Ok(()),
        }),
    )
}

#[tokio::test]
async fn a_plugin_whose_kind_is_not_served_waits_while_the_others_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(test_plugin("hostile"), dir.path().join("hostile.wasm")).unwrap();
    std::fs::copy(
        reconciler_tests::example_plugin("podset"),
        dir.path().join("podset.wasm"),
    )
    .unwrap();
    let clock = VirtualClock::at(reconciler_sdk::testing::DEFAULT_NOW_MILLIS);
    let open = Arc::new(AtomicBool::new(false));
    let backend = Arc::new(gated(&clock, open.clone()));
    let engine = Engine::empty(backend.clone(), Arc::new(clock.clone()));
    let mut plugins = PluginDirectory::new(dir.path(), sandbox().clone());
    let settle = async |engine: &Engine<Intercepted<Hook>>| {
        let config = SimulationConfig {
            start_millis: reconciler_host::cluster::Clock::now_millis(&clock),
            ..SimulationConfig::default()
        };
        run(engine, &clock, &config).await.records
    };

    let events = plugins.sync(&engine).await;
    assert_eq!(
        loaded(&events),
        [("hostile".to_string(), "0.1.0".to_string())]
    );
    let waiting: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            ReloadEvent::Failed {
                retrying: true,
                file,
                ..
            } if file.ends_with("podset.wasm") => Some(e.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(waiting.len(), 1, "{events:?}");
    assert!(
        waiting[0].contains("does not serve example.com/v1alpha1 PodSet")
            && waiting[0].contains("CustomResourceDefinition")
            && waiting[0].contains("retried"),
        "{}",
        waiting[0]
    );
    assert!(plugins.waiting());

    // Still not served: tried again quietly, not reported or counted again.
    assert!(plugins.retry_waiting(&engine).await.is_empty());
    assert_eq!(plugins.failures(), 1);

    // The other plugin runs meanwhile.
    backend.cluster.apply_as_user(hostile("calm")).unwrap();
    let records = settle(&engine).await;
    assert!(
        records
            .iter()
            .any(|r| r.plugin == "hostile" && r.object.name == "calm"),
        "{records:?}"
    );

    // The CRD arrives: the next retry starts the plugin, which reconciles.
    open.store(true, Ordering::SeqCst);
    let events = plugins.retry_waiting(&engine).await;
    assert_eq!(
        loaded(&events),
        [("podset".to_string(), "0.1.0".to_string())]
    );
    assert!(!plugins.waiting());
    backend
        .cluster
        .apply_as_user(
            json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
            "metadata": {"name": "web", "namespace": "default"}, "spec": {"size": 1}}),
        )
        .unwrap();
    settle(&engine).await;
    let deployment = backend
        .cluster
        .get(&key("apps", "v1", "Deployment", "default", "web"))
        .await
        .unwrap();
    assert!(
        deployment.is_some(),
        "podset serves once its kind is served"
    );
}

fn pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_read_as_metadata_is_watched_whole_once_a_plugin_needs_it() {
    let mut host = Host::new();
    host.cluster.apply_as_user(pod()).unwrap();
    let pod_kind = reconciler_sdk::KindRef::new("", "v1", "Pod");
    let pod_key = key("", "v1", "Pod", "default", "p");

    host.drop_in(&test_plugin("hostile"), "hostile.wasm");
    host.sync().await;
    assert_eq!(host.engine.watched_kinds().get(&pod_kind), Some(&true));
    let cached = host.engine.cache().get(&pod_key).unwrap();
    assert_eq!(cached["metadata"]["labels"]["app"], "x");
    assert!(cached.get("spec").is_none(), "metadata only: {cached}");

    // v2 reads Pods whole: the watch is replaced and the cache refilled.
    host.drop_in(&test_plugin("hostile-v2"), "hostile.wasm");
    let events = host.sync().await;
    assert!(
        matches!(events[..], [ReloadEvent::Reloaded { .. }]),
        "{events:?}"
    );
    assert_eq!(host.engine.watched_kinds().get(&pod_kind), Some(&false));
    let cached = host.engine.cache().get(&pod_key).unwrap();
    assert_eq!(cached["spec"]["containers"][0]["image"], "busybox");

    // Changes keep arriving through the new watch.
    host.cluster.delete_as_user(&pod_key).unwrap();
    host.engine.pump();
    assert!(host.engine.cache().get(&pod_key).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_and_selectors_restrict_what_is_reconciled() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(test_plugin("hostile"), dir.path().join("hostile.wasm")).unwrap();
    let clock = VirtualClock::at(reconciler_sdk::testing::DEFAULT_NOW_MILLIS);
    let cluster = Arc::new(EmbeddedCluster::new(Arc::new(clock.clone())));
    let scope = ServeScope {
        namespaces: ["team".to_string()].into(),
        selectors: PrimarySelectors::parse(["hostile:tier=prod"]).unwrap(),
    };
    let engine = Engine::scoped(cluster.clone(), Arc::new(clock.clone()), scope);
    let mut plugins = PluginDirectory::new(dir.path(), sandbox().clone());
    plugins.sync(&engine).await;
    let object = |namespace: &str, name: &str, tier: &str| {
        json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
            "metadata": {"name": name, "namespace": namespace, "labels": {"tier": tier}},
            "spec": {"mode": "ok"}})
    };
    cluster.apply_as_user(object("team", "a", "prod")).unwrap();
    cluster.apply_as_user(object("team", "b", "dev")).unwrap();
    cluster
        .apply_as_user(object("default", "c", "prod"))
        .unwrap();
    let settle = async || {
        let config = SimulationConfig {
            start_millis: reconciler_host::cluster::Clock::now_millis(&clock),
            ..SimulationConfig::default()
        };
        let records = run(&engine, &clock, &config).await.records;
        let mut names: Vec<String> = records.iter().map(|r| r.object.to_string()).collect();
        names.sort();
        names.dedup();
        names
    };
    assert_eq!(settle().await, ["team/a"]);
    assert!(
        engine
            .cache()
            .list(&reconciler_sdk::KindRef::new(
                "hostile.example.com",
                "v1",
                "Hostile"
            ))
            .iter()
            .all(|o| o["metadata"]["namespace"] == "team"),
        "other namespaces are not even cached"
    );

    // A primary relabelled into the selector is picked up.
    cluster.apply_as_user(object("team", "b", "prod")).unwrap();
    assert_eq!(settle().await, ["team/b"]);
}
