//! One plugin set for the engine and admission: the plugins directory loads
//! each version once and decides what serves; the admission server answers
//! from exactly that decision, before this replica leads (a standby) and
//! after (the engine).

use std::path::Path;
use std::sync::Arc;

use reconciler_host::admission::plugin_set::AdmissionPlugins;
use reconciler_host::cluster::VirtualClock;
use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::engine::Engine;
use reconciler_host::plugin::LoadedPlugin;
use reconciler_host::plugin::hot_reload::{PluginDirectory, ReloadEvent};
use reconciler_host::plugin::standby::Standby;
use reconciler_tests::{example_plugin, sandbox, test_plugin};

fn engine() -> Engine<EmbeddedCluster> {
    let clock = VirtualClock::at(reconciler_sdk::testing::DEFAULT_NOW_MILLIS);
    let cluster = Arc::new(EmbeddedCluster::new(Arc::new(clock.clone())));
    Engine::empty(cluster, Arc::new(clock))
}

/// Puts `from` in place as `name`, written aside and renamed as `kubectl cp`
/// and editors do.
fn drop_in(dir: &Path, from: &Path, name: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::copy(from, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

fn failed(events: &[ReloadEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            ReloadEvent::Failed { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

fn served_by_engine(engine: &Engine<EmbeddedCluster>, name: &str) -> Arc<LoadedPlugin> {
    engine
        .plugins()
        .into_iter()
        .find(|p| p.name() == name)
        .unwrap_or_else(|| panic!("the engine serves no {name}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_version_keeps_the_last_good_one_answering_admission() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine();
    let admission = Arc::new(AdmissionPlugins::new());
    let mut plugins =
        PluginDirectory::new(dir.path(), sandbox().clone()).publishing_to(admission.clone());
    let mut changes = admission.subscribe();
    changes.mark_unchanged();

    drop_in(
        dir.path(),
        &example_plugin("kubernetescluster"),
        "kubernetescluster.wasm",
    );
    let events = plugins.sync(&engine).await;
    assert!(failed(&events).is_empty(), "{events:?}");
    let good = admission
        .get("kubernetescluster")
        .expect("its admission is served");
    assert!(
        Arc::ptr_eq(&good, &served_by_engine(&engine, "kubernetescluster")),
        "admission and the engine hold one loaded copy"
    );
    assert!(changes.has_changed().unwrap(), "a new plugin is a change");
    changes.mark_unchanged();

    // A broken version of the same file: refused, and the last good
    // version keeps answering admission as it keeps reconciling.
    std::fs::write(dir.path().join("kubernetescluster.wasm"), b"\0asm broken").unwrap();
    let events = plugins.sync(&engine).await;
    assert_eq!(failed(&events).len(), 1, "{events:?}");
    let after = admission
        .get("kubernetescluster")
        .expect("admission is still served after a failed reload");
    assert!(Arc::ptr_eq(&after, &good), "the last good version answers");
    assert!(Arc::ptr_eq(
        &after,
        &served_by_engine(&engine, "kubernetescluster")
    ));
    assert!(
        !changes.has_changed().unwrap(),
        "nothing that serves changed, so the webhook configurations are left alone"
    );

    // Removing the file stops both.
    std::fs::remove_file(dir.path().join("kubernetescluster.wasm")).unwrap();
    plugins.sync(&engine).await;
    assert!(admission.get("kubernetescluster").is_none());
    assert!(engine.plugins().is_empty());
    assert!(changes.has_changed().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_applies_the_engines_rules_and_hands_its_plugins_over_without_loading_again() {
    let dir = tempfile::tempdir().unwrap();
    let admission = Arc::new(AdmissionPlugins::new());
    let mut plugins =
        PluginDirectory::new(dir.path(), sandbox().clone()).publishing_to(admission.clone());
    // `hostile-rival` reconciles hostile's primary kind under another name:
    // the later file is refused, as the engine refuses it.
    drop_in(dir.path(), &test_plugin("hostile"), "a-hostile.wasm");
    drop_in(dir.path(), &test_plugin("hostile-rival"), "b-rival.wasm");

    let standby = Standby::new();
    let events = plugins.sync(&standby).await;
    let refused = failed(&events);
    assert_eq!(refused.len(), 1, "{events:?}");
    assert!(
        refused[0].contains("a primary kind has one plugin"),
        "{refused:?}"
    );
    let before_leading = admission.get("hostile").expect("served while a standby");

    // Leading: the engine takes what the standby served, the same copy.
    let engine = engine();
    let events = plugins.attach(&engine).await;
    assert!(failed(&events).is_empty(), "{events:?}");
    let names: Vec<String> = engine
        .plugins()
        .iter()
        .map(|p| p.name().to_string())
        .collect();
    assert_eq!(names, ["hostile"]);
    assert!(Arc::ptr_eq(
        &served_by_engine(&engine, "hostile"),
        &before_leading
    ));
    assert!(Arc::ptr_eq(
        &admission.get("hostile").unwrap(),
        &before_leading
    ));
    // Nothing changed on disk: a sync after attaching loads nothing.
    assert!(plugins.sync(&engine).await.is_empty());
}
