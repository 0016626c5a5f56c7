//! Repeated Events against a real Kubernetes API server: the engine's
//! Event recorder over the Kubernetes backend makes one events.k8s.io/v1
//! Event whose `series.count` grows, and the API server accepts the PATCH
//! that grows it.
//!
//! Skipped (it passes, printing why) unless both `RECONCILER_E2E=1` and
//! `KUBECONFIG` are set. To run it:
//!
//! ```text
//! RECONCILER_E2E=1 KUBECONFIG=~/.kube/config \
//!     cargo test -p reconciler-host --test real_cluster_events -- --nocapture
//! ```
//!
//! It creates a namespace `reconciler-events-<random>` and a ConfigMap in
//! it for the Events to be about, records the same Warning six times, and
//! deletes the namespace at the end (also after a failure). It needs the
//! right to create and delete namespaces, ConfigMaps and Events.

mod common;

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use futures::FutureExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use reconciler_host::cluster::kubernetes::KubernetesBackend;
use reconciler_host::cluster::{EventRecord, ObjectKey};
use reconciler_host::engine::event_recorder::{EventRecorder, Recorded};
use reconciler_sdk::{EventType, KindRef};

#[test]
fn a_repeated_event_is_one_event_with_a_growing_series_on_a_real_cluster() {
    common::run_or_skip(
        "real_cluster_events",
        "a_repeated_event_is_one_event_with_a_growing_series_on_a_real_cluster",
        "To run it: RECONCILER_E2E=1 KUBECONFIG=~/.kube/config cargo test -p reconciler-host --test real_cluster_events -- --nocapture",
        in_a_namespace,
    );
}

async fn in_a_namespace() -> Result<()> {
    let client = Client::try_default()
        .await
        .context("building a Kubernetes client from KUBECONFIG")?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    generate_name: Some("reconciler-events-".into()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            },
        )
        .await
        .context("creating a namespace (is the cluster of KUBECONFIG reachable?)")?;
    let name = namespace.metadata.name.clone().unwrap_or_default();
    let result = std::panic::AssertUnwindSafe(repeated_events(client.clone(), &name))
        .catch_unwind()
        .await;
    let cleanup = namespaces.delete(&name, &DeleteParams::default()).await;
    match result {
        Ok(outcome) => outcome?,
        Err(panic) => std::panic::resume_unwind(panic),
    }
    cleanup.with_context(|| format!("deleting namespace {name}"))?;
    Ok(())
}

async fn repeated_events(client: Client, namespace: &str) -> Result<()> {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let subject = config_maps
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("subject".into()),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            },
        )
        .await
        .context("creating the ConfigMap the Events are about")?;
    let backend = KubernetesBackend::new(client.clone());
    let recorder = EventRecorder::default();
    let event = EventRecord {
        regarding: ObjectKey::new(
            KindRef::new("", "v1", "ConfigMap"),
            Some(namespace),
            "subject",
        ),
        regarding_uid: subject.metadata.uid.clone(),
        event_type: EventType::Warning,
        reason: "ReconcileError".into(),
        message: "plugin error: asked to fail".into(),
        reporting_controller: "reconciler-host/hostile".into(),
    };
    let start = reconciler_sdk::k8s_openapi::jiff::Timestamp::now().as_millisecond();
    let mut outcomes = Vec::new();
    // A failing object's retries: 1 s, 2 s, 4 s, 8 s, 16 s apart.
    for at in [0, 1, 3, 7, 15, 31] {
        let outcome = recorder
            .record(&backend, event.clone(), start + at * 1_000)
            .await
            .with_context(|| format!("recording the occurrence at +{at}s"))?;
        outcomes.push(outcome);
    }
    ensure!(
        outcomes
            == [
                Recorded::Created,
                Recorded::Counted(2),
                Recorded::Deferred(3),
                Recorded::Deferred(4),
                Recorded::Deferred(5),
                Recorded::Counted(6),
            ],
        "the first repeat is written at once, later ones every 30 s: {outcomes:?}"
    );

    let events: Api<Event> = Api::namespaced(client, namespace);
    let listed = tokio::time::timeout(Duration::from_secs(30), events.list(&ListParams::default()))
        .await
        .context("listing Events timed out")?
        .context("listing Events")?;
    let about: Vec<&Event> = listed
        .items
        .iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("subject")
                && e.reason.as_deref() == Some("ReconcileError")
        })
        .collect();
    ensure!(
        about.len() == 1,
        "one Event for six occurrences, found {}: {:#?}",
        about.len(),
        listed.items
    );
    let series = about[0].series.as_ref().context("the Event has a series")?;
    ensure!(
        series.count == 6,
        "series.count is {}, not 6: {:#?}",
        series.count,
        about[0]
    );
    ensure!(
        series.last_observed_time.0.as_millisecond() == start + 31_000,
        "lastObservedTime is the last occurrence: {:#?}",
        about[0]
    );
    ensure!(
        about[0].regarding.as_ref().and_then(|r| r.uid.clone()) == subject.metadata.uid,
        "the Event is about the ConfigMap by uid"
    );
    Ok(())
}
