//! A plugin cannot flood, stall or crash the host through what it asks for:
//! Events, applies and deletes per response are capped, repeated Events are
//! one Event with a count, requeues are bounded both ways, JSON too deep to
//! read back is refused, a panic of the host fails one reconcile, the
//! instance pool is shared, and a taken name is refused by file. Each with
//! the compiled hostile plugin.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::cluster::{Clock, ClusterBackend, VirtualClock};
use reconciler_host::engine::{Engine, Outcome, ReconcileRecord};
use reconciler_host::plugin::hot_reload::{PluginDirectory, ReloadEvent};
use reconciler_host::plugin::{CallError, HostLimits, LoadFailure, Sandbox, SandboxConfig};
use reconciler_tests::intercepted::{Call, Hook, Intercepted};
use reconciler_tests::world::{World, key};
use reconciler_tests::{example_plugin, load, sandbox, test_limits, test_plugin};
use serde_json::{Value, json};

fn hostile(name: &str, mode: &str) -> Value {
    json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"mode": mode}})
}

fn podset(name: &str, size: u32) -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"size": size}})
}

fn of(records: &[ReconcileRecord], name: &str) -> Vec<ReconcileRecord> {
    records
        .iter()
        .filter(|r| r.object.name == name)
        .cloned()
        .collect()
}

fn failure_message(record: &ReconcileRecord) -> (String, String) {
    match &record.outcome {
        Outcome::Failed {
            reason, message, ..
        } => (reason.clone(), message.clone()),
        other => panic!("expected a failure: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_with_100000_events_is_refused_whole_naming_the_cap() {
    // Making 100,000 Events takes the guest longer than the test sandbox's
    // short deadline on a busy machine: the cap, not the deadline, is tested.
    let mut world = world_in(generous_sandbox(), &[&test_plugin("hostile")]).await;
    world.apply(hostile("flood", "event-flood"));
    world.apply(hostile("fine", "ok"));
    let records = world.settle().await;

    let (reason, message) = failure_message(&of(&records, "flood")[0]);
    assert_eq!(reason, "TooManyEvents");
    assert!(
        message.contains("the response carries 100000 Events, over the limit of 25 per response")
            && message.contains("hints.maxEvents, up to --plugin-events-max"),
        "{message}"
    );
    let events = world.events();
    assert!(
        events.iter().all(|e| e.record.reason != "Flood"),
        "nothing of the refused response is recorded"
    );
    assert!(
        world
            .get(&key("", "v1", "ConfigMap", "default", "flood"))
            .await
            .is_none(),
        "nor applied"
    );
    assert!(
        world
            .get(&key("", "v1", "ConfigMap", "default", "fine"))
            .await
            .is_some(),
        "the other object is served"
    );
}

#[test]
fn applies_and_deletes_past_their_caps_are_refused_naming_them() {
    let plugin = load(&test_plugin("hostile"));
    for (mode, expected) in [
        (
            "apply-flood",
            "501 objects to apply, over the limit of 500 per response (raise it with hints.maxApplies, up to --plugin-applies-max)",
        ),
        (
            "delete-flood",
            "501 objects to delete, over the limit of 500 per response (raise it with hints.maxDeletes, up to --plugin-deletes-max)",
        ),
    ] {
        let primary = hostile(&format!("h-{mode}"), mode);
        let cache = reconciler_sdk::memory_cache::MemoryCache::new();
        let request = cache.request_for(&primary, &plugin.metadata().owns);
        let err = plugin
            .reconcile(reconciler_host::plugin::ReconcileInput {
                request,
                primary_namespace: Some("default".into()),
                object: format!("default/h-{mode}"),
                reader: Arc::new(cache),
                now_millis: 0,
                cluster: Default::default(),
            })
            .unwrap_err();
        assert!(matches!(err, CallError::OverLimit(_)), "{err:?}");
        assert!(err.to_string().contains(expected), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_on_every_retry_is_one_warning_event_whose_count_grows() {
    let mut world = World::new(&[&test_plugin("hostile")]).await;
    world.apply(hostile("broken", "error"));
    let warnings = |world: &World| {
        world
            .events()
            .into_iter()
            .filter(|e| e.record.regarding.name == "broken")
            .collect::<Vec<_>>()
    };

    let early = world.settle_for(Duration::from_secs(10)).await;
    let first = warnings(&world);
    assert_eq!(first.len(), 1, "{first:?}");
    let first_count = first[0].series.expect("repeated").count;
    assert_eq!(
        first_count as usize,
        early.len(),
        "one occurrence per failure"
    );

    let later = world.settle_for(Duration::from_secs(300)).await;
    let second = warnings(&world);
    assert_eq!(second.len(), 1, "still one Event: {second:?}");
    assert_eq!(second[0].name, first[0].name);
    let count = second[0].series.expect("repeated").count;
    assert_eq!(count as usize, early.len() + later.len());
    assert!(count > first_count);
    assert_eq!(second[0].record.event_type.to_string(), "Warning");
    assert_eq!(second[0].record.reason, "ReconcileError");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_plugin_event_on_every_reconcile_is_one_event() {
    let mut world = World::new(&[&test_plugin("hostile")]).await;
    world.apply(hostile("nagger", "nag"));
    let records = world.settle_for(Duration::from_secs(60)).await;
    let nags: Vec<_> = world
        .events()
        .into_iter()
        .filter(|e| e.record.reason == "Nagging")
        .collect();
    assert_eq!(nags.len(), 1, "{nags:?}");
    assert_eq!(
        nags[0].series.map(|s| s.count as usize),
        Some(of(&records, "nagger").len())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeue_of_zero_is_rate_limited_and_a_huge_one_clamped() {
    let mut world = World::new(&[&test_plugin("hostile")]).await;
    world.apply(hostile("eager", "requeue-zero"));
    let records = world.settle_for(Duration::from_secs(60)).await;
    let eager = of(&records, "eager");
    // 0 s (twice: the finalizer's change), 1, 2, 5, 10, 21, 42: doubling.
    assert!(
        (4..=10).contains(&eager.len()),
        "{} reconciles in a minute: {eager:#?}",
        eager.len()
    );
    let delays: Vec<Option<Duration>> = eager
        .iter()
        .map(|r| match &r.outcome {
            Outcome::Applied { requeue_after, .. } => *requeue_after,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(delays[0], Some(Duration::from_secs(1)));
    assert!(
        delays.windows(2).all(|w| w[1] == w[0].map(|d| d * 2)),
        "doubling: {delays:?}"
    );

    let mut world = World::new(&[&test_plugin("hostile")]).await;
    world.apply(hostile("patient", "requeue-max"));
    let records = world.settle().await;
    let now = world.clock.now_millis();
    match &records.last().expect("reconciled").outcome {
        Outcome::Applied { requeue_after, .. } => {
            assert_eq!(*requeue_after, Some(Duration::from_secs(24 * 3600)))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(world.engine.next_wakeup(), Some(now + 24 * 3600 * 1000));
    assert_eq!(world.engine.in_flight(), 0);
    // And it fires there.
    let records = world.settle_for(Duration::from_secs(24 * 3600)).await;
    assert_eq!(of(&records, "patient").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_nested_too_deep_is_refused_and_the_others_served() {
    let mut world = World::new(&[&test_plugin("hostile"), &example_plugin("podset")]).await;
    world.apply(hostile("deep", "deep-status"));
    world.apply(hostile("fine", "ok"));
    world.apply(podset("web", 1));
    let records = world.settle_for(Duration::from_secs(10)).await;

    let deep = of(&records, "deep");
    assert!(deep.len() > 1, "retried: {deep:?}");
    let (reason, message) = failure_message(&deep[0]);
    assert_eq!(reason, "NestedTooDeep");
    assert_eq!(
        message,
        "status is nested 127 levels deep, more than the 64 levels a response may nest (the host could not read it back once stored)"
    );
    let stored = world
        .get(&key(
            "hostile.example.com",
            "v1",
            "Hostile",
            "default",
            "deep",
        ))
        .await
        .expect("the object stays");
    assert!(stored.get("status").is_none());
    assert!(
        world
            .get(&key("", "v1", "ConfigMap", "default", "fine"))
            .await
            .is_some()
    );
    assert!(
        world
            .get(&key("apps", "v1", "Deployment", "default", "web"))
            .await
            .is_some()
    );
}

/// The embedded cluster, except that an apply of an object named `boom`
/// panics: a bug of the host, reached by data a plugin returned.
fn panicking(clock: &VirtualClock) -> Intercepted<Hook> {
    Intercepted::new(
        EmbeddedCluster::new(Arc::new(clock.clone())),
        Box::new(|call| match call {
            Call::Apply(object) if object.pointer("/metadata/name") == Some(&json!("boom")) => {
                panic!("a bug in apply")
            }
            _ => Ok(()),
        }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_reconcile_fails_leaves_nothing_in_flight_and_is_retried() {
    let clock = VirtualClock::at(0);
    let backend = Arc::new(panicking(&clock));
    backend
        .cluster
        .apply_as_user(hostile("boom", "ok"))
        .unwrap();
    backend
        .cluster
        .apply_as_user(hostile("fine", "ok"))
        .unwrap();
    let plugin = Arc::new(load(&test_plugin("hostile")));
    let engine = Engine::new(backend.clone(), Arc::new(clock.clone()), vec![plugin])
        .await
        .unwrap();

    // Everything due now (the finalizer's change makes boom due twice).
    let mut failed = Vec::new();
    while let Some((plugin, key)) = engine.next_ready() {
        let record = engine.reconcile(&plugin, key).await;
        engine.pump();
        if record.object.name == "boom" {
            failed.push(record);
        }
    }
    let record = failed.last().expect("boom was reconciled");
    let (reason, message) = failure_message(record);
    assert_eq!(reason, "HostPanic");
    assert!(
        message.contains("a bug in apply") && message.contains("please report it"),
        "{message}"
    );
    assert_eq!(engine.in_flight(), 0, "the key is not left in flight");
    let Outcome::Failed { failures, .. } = record.outcome.clone() else {
        unreachable!()
    };
    let retry_at = engine.next_wakeup().expect("a retry is scheduled");
    assert!(retry_at > 0, "after a backoff, not at once");
    clock.set(retry_at);
    let (plugin, due) = engine.next_ready().expect("due again");
    assert_eq!(due.name, "boom");
    let retried = engine.reconcile(&plugin, due).await;
    assert!(
        matches!(retried.outcome, Outcome::Failed { failures: n, .. } if n == failures + 1),
        "{retried:?}"
    );
    assert!(
        backend
            .cluster
            .events()
            .iter()
            .any(|e| e.record.reason == "HostPanic" && e.record.regarding.name == "boom")
    );
    assert!(
        backend
            .cluster
            .get(&key("", "v1", "ConfigMap", "default", "fine"))
            .await
            .unwrap()
            .is_some(),
        "the other object is served"
    );
}

/// A sandbox whose plugins may ask for up to 64 reconciles at once, with
/// the host's default deadline and a pool of 5 instances.
fn generous_sandbox() -> &'static Sandbox {
    static SANDBOX: OnceLock<Sandbox> = OnceLock::new();
    SANDBOX.get_or_init(|| {
        Sandbox::new(SandboxConfig {
            limits: HostLimits {
                concurrency_max: 4096,
                timeout_ms: HostLimits::default().timeout_ms,
                ..test_limits()
            },
            compile_cache: None,
            max_instances: 5,
            ..SandboxConfig::default()
        })
        .expect("a sandbox")
    })
}

/// A [`World`] whose plugins run in `sandbox`.
async fn world_in(sandbox: &Sandbox, plugins: &[&Path]) -> World {
    let clock = VirtualClock::at(reconciler_sdk::testing::DEFAULT_NOW_MILLIS);
    let cluster = Arc::new(EmbeddedCluster::new(Arc::new(clock.clone())));
    let plugins = plugins
        .iter()
        .map(|p| Arc::new(sandbox.load(p).unwrap_or_else(|e| panic!("{e}"))))
        .collect();
    let engine = Engine::new(cluster.clone(), Arc::new(clock.clone()), plugins)
        .await
        .expect("engine starts");
    World {
        clock,
        cluster,
        engine,
        records: Vec::new(),
    }
}

#[test]
fn a_concurrency_hint_above_the_hosts_maximum_is_refused_naming_the_option() {
    let err = sandbox()
        .load(&test_plugin("hostile-greedy"))
        .err()
        .expect("refused");
    assert!(matches!(err.reason, LoadFailure::Limits(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("hints.maxConcurrentReconciles asks for 4096 reconciles, above this host's maximum of 1024 reconciles (raise it with --plugin-concurrency-max)"),
        "{text}"
    );
    let greedy = generous_sandbox()
        .load(&test_plugin("hostile-greedy"))
        .expect("loads under a higher maximum");
    assert_eq!(greedy.limits().concurrency, 4096);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greedy_plugin_leaves_the_others_their_share_of_the_instance_pool() {
    let sandbox = generous_sandbox();
    let clock = VirtualClock::at(0);
    let cluster = Arc::new(EmbeddedCluster::new(Arc::new(clock.clone())));
    // Ten reconciles whose calls each spin, holding an instance until their
    // deadline (a WASI sleep would not: its clock is virtual).
    for i in 0..10 {
        cluster
            .apply_as_user(hostile(&format!("h{i}"), "loop"))
            .unwrap();
    }
    cluster.apply_as_user(podset("web", 1)).unwrap();
    cluster.apply_as_user(podset("db", 1)).unwrap();
    let plugins = [test_plugin("hostile-greedy"), example_plugin("podset")]
        .iter()
        .map(|p| Arc::new(sandbox.load(p).unwrap()))
        .collect();
    let engine = Engine::new(cluster, Arc::new(clock), plugins)
        .await
        .unwrap()
        .with_instance_pool(sandbox.reconcile_instances());
    assert_eq!(sandbox.reconcile_instances(), 4);
    let engine = Arc::new(engine);

    // The greedy plugin's reconciles are handed out first (plugin name).
    let (done_tx, mut done) = tokio::sync::mpsc::unbounded_channel();
    while let Some((plugin, key)) = engine.next_ready() {
        let (engine, done_tx) = (engine.clone(), done_tx.clone());
        tokio::spawn(async move {
            let _ = done_tx.send(engine.reconcile(&plugin, key).await);
        });
    }
    assert_eq!(
        engine.in_flight(),
        12,
        "the pool bounds sandbox calls, not reconciles in flight"
    );
    let (mut greedy, mut podset) = (0, 0);
    while podset < 2 {
        let record = done.recv().await.expect("a record");
        match record.plugin.as_str() {
            "podset" => {
                assert!(
                    matches!(record.outcome, Outcome::Applied { .. }),
                    "{record}"
                );
                podset += 1;
            }
            _ => greedy += 1,
        }
    }
    // Without shares podset would wait behind all ten sleepers (three
    // rounds of deadlines); with them it gets its share of the first
    // instances freed, while the greedy plugin still has calls waiting.
    assert!(
        greedy <= 6,
        "podset waited for {greedy} of the greedy plugin's 10 calls"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_plugin_of_a_taken_name_is_refused_naming_the_first_file() {
    let dir = tempfile::tempdir().unwrap();
    let copy = |name: &str| {
        let to = dir.path().join(name);
        std::fs::copy(test_plugin("hostile"), &to).unwrap();
        to
    };
    let first = copy("a.wasm");
    let second = copy("b.wasm");
    let clock = VirtualClock::at(0);
    let engine = Engine::empty(
        Arc::new(EmbeddedCluster::new(Arc::new(clock.clone()))),
        Arc::new(clock),
    );
    // The loop `dev` and `run` share.
    let mut plugins = PluginDirectory::new(dir.path(), sandbox().clone());
    let events = plugins.sync(&engine).await;
    let refused: Vec<(&Path, &str)> = events
        .iter()
        .filter_map(|e| match e {
            ReloadEvent::Failed { file, reason, .. } => Some((file.as_path(), reason.as_str())),
            _ => None,
        })
        .collect();
    let expected = format!("plugin name hostile is already used by {}", first.display());
    assert_eq!(refused, [(second.as_path(), expected.as_str())]);
    assert_eq!(engine.plugins().len(), 1);
}
