//! Where a reconcile's call runs: a short call stays on the async worker
//! that reached it; one that runs long is cut short there and made again on
//! a blocking thread, so a plugin that spins never holds a worker for its
//! whole deadline, and its output is logged once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use reconciler_host::engine::call_placement::{AFTER_RUNNING_LONG, CallPlacement, Placed};
use reconciler_host::plugin::{Attempt, CallError, LoadedPlugin, ReconcileInput};
use reconciler_sdk::memory_cache::MemoryCache;
use reconciler_tests::log_capture::LogCapture;
use reconciler_tests::{example_plugin, load, pods_with_blobs, test_plugin};
use serde_json::{Value, json};

fn input(plugin: &LoadedPlugin, primary: Value) -> ReconcileInput {
    input_over(plugin, primary, MemoryCache::new())
}

fn input_over(plugin: &LoadedPlugin, primary: Value, cache: MemoryCache) -> ReconcileInput {
    let request = cache.request_for(&primary, &plugin.metadata().owns);
    let name = primary["metadata"]["name"].as_str().unwrap_or_default();
    ReconcileInput {
        request,
        primary_namespace: Some("default".into()),
        object: format!("default/{name}"),
        reader: Arc::new(cache),
        now_millis: 0,
        cluster: Default::default(),
    }
}

fn hostile(name: &str, mode: &str) -> Value {
    json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
        "metadata": {"name": name, "namespace": "default", "uid": "u-1"},
        "spec": {"mode": mode}})
}

fn podset() -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "web", "namespace": "default", "uid": "u-2"},
        "spec": {"size": 2}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn short_calls_stay_on_the_worker_and_a_long_one_moves_off_it() {
    let podset_plugin = Arc::new(load(&example_plugin("podset")));
    // A podset call takes microseconds against a budget of 10 to 20 ms; a
    // fresh record per try, so one try descheduled that long on a busy
    // machine does not decide the others.
    let mut placements = Vec::new();
    for _ in 0..5 {
        let (answer, placed) = CallPlacement::default()
            .reconcile(&podset_plugin, input(&podset_plugin, podset()), ())
            .await
            .unwrap();
        assert_eq!(answer.unwrap().apply[0].object["spec"]["replicas"], 2);
        placements.push(placed);
    }
    assert!(placements.contains(&Placed::Worker), "{placements:?}");

    let plugin = Arc::new(load(&test_plugin("hostile")));
    let placement = CallPlacement::default();
    let (answer, placed) = placement
        .reconcile(&plugin, input(&plugin, hostile("spin", "loop")), ())
        .await
        .unwrap();
    // The second call had the plugin's whole deadline, and failed on it.
    let err = answer.unwrap_err();
    assert!(matches!(err, CallError::Timeout { .. }), "{err:?}");
    assert!(err.to_string().contains("timed out after 200 ms"), "{err}");
    assert_eq!(placed, Placed::WorkerThenBlocking);

    // Its next calls go straight to a blocking thread, well-behaved ones too.
    for _ in 0..AFTER_RUNNING_LONG {
        let (answer, placed) = placement
            .reconcile(&plugin, input(&plugin, hostile("calm", "ok")), ())
            .await
            .unwrap();
        assert_eq!(answer.unwrap().status.unwrap()["ok"], true);
        assert_eq!(placed, Placed::Blocking);
    }
    // Then the worker is tried again.
    let (_, placed) = placement
        .reconcile(&plugin, input(&plugin, hostile("calm", "ok")), ())
        .await
        .unwrap();
    assert_ne!(placed, Placed::Blocking);
}

#[test]
fn a_call_cut_short_hands_its_input_back_unchanged() {
    let plugin = load(&test_plugin("hostile"));
    let given = input(&plugin, hostile("spin", "loop"));
    let (primary, children) = (
        given.request.primary.clone(),
        given.request.children.clone(),
    );
    match plugin.reconcile_briefly(given) {
        Attempt::RanLong(back) => {
            assert_eq!(back.request.primary, primary);
            assert_eq!(back.request.children, children);
            assert_eq!(back.object, "default/spin");
            assert_eq!(back.primary_namespace.as_deref(), Some("default"));
        }
        Attempt::Done(answer) => panic!("a call that never ends finished: {answer:?}"),
    }
}

#[test]
fn a_call_failing_within_the_brief_budget_is_its_answer_not_a_long_call() {
    let plugin = load(&test_plugin("hostile"));
    // Panics and errors end a call at once: they are its answer.
    for (mode, reason) in [("panic", "Trap"), ("error", "ReconcileError")] {
        match plugin.reconcile_briefly(input(&plugin, hostile(mode, mode))) {
            Attempt::Done(Err(err)) => assert_eq!(err.reason(), reason, "{err}"),
            Attempt::Done(Ok(_)) => panic!("{mode}: answered"),
            Attempt::RanLong(_) => panic!("{mode}: taken for a long call"),
        }
    }
}

/// A call that spins holds the runtime's only worker for the brief budget,
/// not for its deadline: a task spawned after it runs while it still spins.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_spinning_call_does_not_hold_the_only_worker_for_its_deadline() {
    let plugin = Arc::new(load(&test_plugin("hostile")));
    let placement = Arc::new(CallPlacement::default());
    let call_done = Arc::new(AtomicBool::new(false));
    let call = tokio::spawn({
        let (plugin, placement, call_done) = (plugin.clone(), placement.clone(), call_done.clone());
        async move {
            let given = input(&plugin, hostile("spin", "loop"));
            let answer = placement.reconcile(&plugin, given, ()).await;
            call_done.store(true, Ordering::SeqCst);
            answer
        }
    });
    let other = tokio::spawn({
        let call_done = call_done.clone();
        async move { call_done.load(Ordering::SeqCst) }
    });
    assert!(
        !other.await.unwrap(),
        "the other task waited for the spinning call to end"
    );
    let (answer, _) = call.await.unwrap().unwrap();
    assert!(matches!(answer, Err(CallError::Timeout { .. })));
}

/// Every thread's log events, blocking threads' included.
fn recorded() -> &'static LogCapture {
    static RECORDED: OnceLock<LogCapture> = OnceLock::new();
    RECORDED.get_or_init(|| {
        let recorded = LogCapture::default();
        tracing::subscriber::set_global_default(recorded.subscriber())
            .expect("the only subscriber of this test binary");
        recorded
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn what_a_call_cut_short_printed_is_not_logged_twice() {
    let recorded = recorded();
    let plugin = Arc::new(load(&test_plugin("hostile")));
    let (answer, placed) = CallPlacement::default()
        .reconcile(
            &plugin,
            input(&plugin, hostile("printer", "print-then-loop")),
            (),
        )
        .await
        .unwrap();
    assert!(
        matches!(answer, Err(CallError::Timeout { .. })),
        "{answer:?}"
    );
    assert_eq!(placed, Placed::WorkerThenBlocking);
    let lines = recorded.lines();
    let printed: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("starting a call that never ends") && l.contains("default/printer"))
        .collect();
    assert_eq!(printed.len(), 1, "{lines:#?}");
}

/// stdout, stderr, stdin and sockets go through WASI functions that
/// wasmtime-wasi runs by blocking on tokio, which panics on a worker. On a
/// worker they answer at once, as they do on a blocking thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn printing_reading_stdin_and_opening_sockets_work_on_the_worker() {
    let recorded = recorded();
    let plugin = Arc::new(load(&test_plugin("hostile")));
    let mut statuses = Vec::new();
    for placement in [CallPlacement::default(), CallPlacement::default()] {
        let (answer, placed) = placement
            .reconcile(
                &plugin,
                input(&plugin, hostile("io", "stdio-and-sockets")),
                (),
            )
            .await
            .unwrap();
        statuses.push((answer.unwrap().status.unwrap(), placed));
    }
    // Made once more on a blocking thread, for the same answer there.
    let (answer, _) = tokio::task::spawn_blocking({
        let plugin = plugin.clone();
        move || {
            let given = input(&plugin, hostile("io", "stdio-and-sockets"));
            (plugin.reconcile(given), ())
        }
    })
    .await
    .unwrap();
    let on_blocking = answer.unwrap().status.unwrap();
    assert!(
        statuses.iter().any(|(_, placed)| *placed == Placed::Worker),
        "{statuses:?}"
    );
    for (status, _) in &statuses {
        assert_eq!(status, &on_blocking);
    }
    assert_eq!(on_blocking["flushed"], true);
    assert_eq!(on_blocking["stdin"], "Ok(0)", "stdin is empty and closed");
    assert_eq!(on_blocking["udpRefused"], true);
    assert_eq!(on_blocking["tcpRefused"], true);
    let lines = recorded.lines();
    let count = |needle: &str| {
        lines
            .iter()
            .filter(|l| l.contains(needle) && l.contains("default/io"))
            .count()
    };
    assert_eq!(count("a line on stdout"), 3, "{lines:#?}");
    assert_eq!(count("a line on stderr"), 3, "{lines:#?}");
}

/// A host function runs to its end whatever the epoch says, so on the
/// worker a `cache.list` stops at 1 MiB of JSON and the call moves to a
/// blocking thread, where the whole list arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_list_past_a_mebibyte_moves_the_call_to_a_blocking_thread_and_arrives_whole() {
    let plugin = Arc::new(load(&test_plugin("hostile")));
    let cache = pods_with_blobs(30, 100 << 10);
    let (answer, placed) = CallPlacement::default()
        .reconcile(
            &plugin,
            input_over(&plugin, hostile("lister", "list-large"), cache),
            (),
        )
        .await
        .unwrap();
    assert_eq!(answer.unwrap().status.unwrap()["pods"], 30);
    assert_eq!(placed, Placed::WorkerThenBlocking);
}
