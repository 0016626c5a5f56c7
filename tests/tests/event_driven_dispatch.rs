//! The loop `dev` and `run` share wakes when there is something to do, not
//! on a timer: a change is picked up the moment its watch event arrives.
//!
//! Tokio's clock is paused here, so "at once" is exact: a wake-up that
//! came from a timer would show as time passed.

use std::sync::Arc;
use std::time::Duration;

use reconciler_host::cluster::RealClock;
use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::engine::dispatch::{Dispatcher, Wake};
use reconciler_host::engine::{Engine, Outcome};
use reconciler_tests::{example_plugin, load};
use serde_json::{Value, json};
use tokio::time::Instant;

fn podset(name: &str, size: i64) -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"size": size}})
}

/// An engine serving podset on an empty embedded cluster, and its
/// dispatcher with nothing left to do.
async fn idle() -> (Arc<EmbeddedCluster>, Dispatcher<EmbeddedCluster>) {
    let cluster = Arc::new(EmbeddedCluster::new(Arc::new(RealClock)));
    let engine = Engine::new(
        cluster.clone(),
        Arc::new(RealClock),
        vec![Arc::new(load(&example_plugin("podset")))],
    )
    .await
    .expect("engine starts");
    let mut dispatcher = Dispatcher::new(Arc::new(engine));
    assert_eq!(dispatcher.dispatch(), 0, "an empty cluster");
    assert_eq!(dispatcher.outstanding(), 0);
    (cluster, dispatcher)
}

#[tokio::test(start_paused = true)]
async fn a_change_wakes_the_loop_at_once_and_is_reconciled() {
    let (cluster, mut dispatcher) = idle().await;
    let started = Instant::now();
    // The loop is asleep when the change arrives.
    let (woke, ()) = tokio::join!(dispatcher.wake(), async {
        tokio::task::yield_now().await;
        cluster.apply_as_user(podset("web", 2)).expect("stored");
    });
    assert!(matches!(woke, Wake::Work), "{woke:?}");
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "woken by the watch event, not by a timer"
    );

    assert!(dispatcher.dispatch() > 0, "the event is taken in");
    assert_eq!(dispatcher.outstanding(), 1, "and its reconcile started");
    let record = loop {
        if let Wake::Finished(record) = dispatcher.wake().await {
            break record;
        }
        dispatcher.dispatch();
    };
    assert_eq!(record.object.name, "web");
    assert!(
        matches!(record.outcome, Outcome::Applied { .. }),
        "{record}"
    );
}

#[tokio::test(start_paused = true)]
async fn with_nothing_due_the_loop_sleeps_until_the_next_event_flush() {
    let (_cluster, mut dispatcher) = idle().await;
    let started = Instant::now();
    assert!(matches!(dispatcher.wake().await, Wake::Work));
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(5),
        "no wake-up before the Event counts are due to be flushed"
    );
}
