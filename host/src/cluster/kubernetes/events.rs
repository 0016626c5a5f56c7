//! Recording events.k8s.io/v1 Events about objects.
//!
//! Events are how a controller tells a person what it did (`kubectl
//! describe` shows them). A new Event is one POST; a repeat of it is one
//! PATCH of its `series` (count and last time), as client-go's recorder
//! does. Which occurrences become which request is the engine's
//! `event_recorder`: this module only speaks the API.

use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use reconciler_contract::EventType;

use super::connection::{KubernetesBackend, truncate_at_char};
use super::errors;
use crate::cluster::backend::{BackendError, EventRecord, EventRef, EventSeries};

/// The API limits an Event's note to 1 kB.
const NOTE_LIMIT: usize = 1024;

/// Makes Event names unique within this process even within one nanosecond.
static SEQUENCE: AtomicU64 = AtomicU64::new(0);

fn event_name(object: &str, now: Timestamp) -> String {
    let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    format!("{object}.{:x}{sequence:x}", now.as_nanosecond())
}

pub(crate) fn build(record: &EventRecord, instance: &str, now: Timestamp) -> Event {
    let namespace = record
        .regarding
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let mut note = record.message.clone();
    truncate_at_char(&mut note, NOTE_LIMIT);
    let mut controller = record.reporting_controller.clone();
    truncate_at_char(&mut controller, 128);
    Event {
        metadata: ObjectMeta {
            name: Some(event_name(&record.regarding.name, now)),
            namespace: Some(namespace),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        action: Some(record.reason.clone()),
        reason: Some(record.reason.clone()),
        note: Some(note),
        type_: Some(
            match record.event_type {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .to_string(),
        ),
        reporting_controller: Some(controller),
        reporting_instance: Some(instance.to_string()),
        regarding: Some(ObjectReference {
            api_version: Some(record.regarding.kind.api_version()),
            kind: Some(record.regarding.kind.kind.clone()),
            name: Some(record.regarding.name.clone()),
            namespace: record.regarding.namespace.clone(),
            uid: record.regarding_uid.clone(),
            ..ObjectReference::default()
        }),
        ..Event::default()
    }
}

pub(crate) async fn record(
    backend: &KubernetesBackend,
    record: EventRecord,
) -> Result<EventRef, BackendError> {
    let event = build(&record, &backend.reporting_instance, Timestamp::now());
    let namespace = event.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(backend.client.clone(), &namespace);
    match api.create(&PostParams::default(), &event).await {
        Ok(created) => Ok(EventRef {
            namespace,
            name: created
                .metadata
                .name
                .or(event.metadata.name)
                .unwrap_or_default(),
        }),
        Err(e) => {
            let request = errors::Request {
                verb: "create",
                group: "events.k8s.io",
                resource: "events".into(),
                namespace: Some(&namespace),
                target: format!("Event about {}", record.regarding),
            };
            Err(errors::map(e, &request))
        }
    }
}

/// The merge patch that makes `series` an Event's series.
pub(crate) fn series_patch(series: EventSeries) -> serde_json::Value {
    let last = Timestamp::from_millisecond(series.last_observed_millis).unwrap_or(Timestamp::MIN);
    serde_json::json!({
        "series": {
            "count": series.count,
            "lastObservedTime": MicroTime(last),
        }
    })
}

pub(crate) async fn update_series(
    backend: &KubernetesBackend,
    event: &EventRef,
    series: EventSeries,
) -> Result<(), BackendError> {
    let api: Api<Event> = Api::namespaced(backend.client.clone(), &event.namespace);
    let patch = series_patch(series);
    match api
        .patch(&event.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) => {
            let request = errors::Request {
                verb: "patch",
                group: "events.k8s.io",
                resource: "events".into(),
                namespace: Some(&event.namespace),
                target: format!("Event {}", event.name),
            };
            Err(errors::map(e, &request))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{self, next};
    use crate::cluster::backend::{ClusterBackend, EventRecord, ObjectKey};
    use reconciler_contract::{EventType, KindRef};

    fn record(namespace: Option<&str>) -> EventRecord {
        EventRecord {
            regarding: ObjectKey::new(testing::podset_kind(), namespace, "web"),
            regarding_uid: Some("uid-podset".into()),
            event_type: EventType::Warning,
            reason: "ScaledDown".into(),
            message: "scaled to 1".into(),
            reporting_controller: "reconciler-host/podset".into(),
        }
    }

    #[tokio::test]
    async fn creates_event_in_object_namespace() {
        let (backend, mut api) = testing::backend();
        // The server answers with the Event it was sent.
        let server =
            tokio::spawn(async move { next(&mut api, |seen| (201, seen.body.clone())).await });
        backend
            .record_event(record(Some("team")))
            .await
            .expect("recorded");
        let seen = server.await.unwrap();
        assert_eq!(seen.method, http::Method::POST);
        assert_eq!(seen.path, "/apis/events.k8s.io/v1/namespaces/team/events");
        let body = seen.body;
        assert!(
            body["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("web.")
        );
        assert_eq!(body["reportingController"], "reconciler-host/podset");
        assert_eq!(body["reportingInstance"], "pod-0");
        assert_eq!(body["action"], "ScaledDown");
        assert_eq!(body["reason"], "ScaledDown");
        assert_eq!(body["type"], "Warning");
        assert_eq!(body["note"], "scaled to 1");
        assert_eq!(body["regarding"]["uid"], "uid-podset");
        assert_eq!(body["regarding"]["kind"], "PodSet");
        assert!(body["eventTime"].is_string());
        assert!(body.get("series").is_none());
    }

    #[tokio::test]
    async fn a_repeat_patches_the_series_of_the_event_created_first() {
        let (backend, mut api) = testing::backend();
        let server = tokio::spawn(async move {
            let created = next(&mut api, |seen| (201, seen.body.clone())).await;
            let patched = next(&mut api, |seen| (200, seen.body.clone())).await;
            (created, patched)
        });
        let event = backend
            .record_event(record(Some("team")))
            .await
            .expect("recorded");
        let series = crate::cluster::EventSeries {
            count: 3,
            last_observed_millis: 1_700_000_000_123,
        };
        backend
            .update_event_series(&event, series)
            .await
            .expect("patched");
        let (created, patched) = server.await.unwrap();
        let name = created.body["metadata"]["name"].as_str().unwrap();
        assert_eq!(event.namespace, "team");
        assert_eq!(event.name, name);
        assert_eq!(patched.method, http::Method::PATCH);
        assert_eq!(
            patched.path,
            format!("/apis/events.k8s.io/v1/namespaces/team/events/{name}")
        );
        assert_eq!(
            patched.content_type.as_deref(),
            Some("application/merge-patch+json")
        );
        assert_eq!(
            patched.body,
            serde_json::json!({"series": {"count": 3, "lastObservedTime": "2023-11-14T22:13:20.123000Z"}})
        );
    }

    #[tokio::test]
    async fn a_series_of_an_expired_event_is_not_found() {
        let (backend, mut api) = testing::backend();
        let server = tokio::spawn(async move {
            testing::respond(
                &mut api,
                404,
                testing::failure(404, "NotFound", "events \"web.1\" not found"),
            )
            .await
        });
        let event = crate::cluster::EventRef {
            namespace: "team".into(),
            name: "web.1".into(),
        };
        let series = crate::cluster::EventSeries {
            count: 2,
            last_observed_millis: 0,
        };
        let err = backend
            .update_event_series(&event, series)
            .await
            .unwrap_err();
        server.await.unwrap();
        assert!(
            matches!(err, crate::cluster::BackendError::NotFound { .. }),
            "{err:?}"
        );
    }

    #[test]
    fn cluster_scoped_objects_get_events_in_default_and_unique_names() {
        let mut r = record(None);
        r.regarding = ObjectKey::new(KindRef::new("", "v1", "Namespace"), None, "team");
        let now = k8s_openapi::jiff::Timestamp::now();
        let a = super::build(&r, "pod-0", now);
        let b = super::build(&r, "pod-0", now);
        assert_eq!(a.metadata.namespace.as_deref(), Some("default"));
        assert_ne!(a.metadata.name, b.metadata.name);
        assert_eq!(a.regarding.unwrap().namespace, None);
    }
}
