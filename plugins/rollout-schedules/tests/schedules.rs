//! The rollout-schedules logic, natively through the SDK harness.

// The harness is native only; on wasm32 this file compiles to nothing.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use reconciler_sdk::testing::{Harness, Outcome};
use rollout_schedules::{
    DEFAULT_SCHEDULE, ENABLED_ANNOTATION, RolloutSchedules, SCHEDULE_ANNOTATION,
    rollout_schedule_kind,
};
use serde_json::{Value, json};

fn deployment(annotations: &[(&str, &str)]) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some("uid-web".into()),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The RolloutSchedule the host holds once it applied one for `web`.
fn existing_schedule() -> Value {
    json!({
        "apiVersion": "example.com/v1alpha1",
        "kind": "RolloutSchedule",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "ownerReferences": [OwnerReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "web".into(),
                uid: "uid-web".into(),
                controller: Some(true),
                ..Default::default()
            }],
        },
        "spec": {"deploymentName": "web", "schedule": "0 3 * * *", "enabled": true},
    })
}

fn schedules(outcome: &Outcome) -> Vec<Value> {
    outcome.applied_as(&rollout_schedule_kind()).unwrap()
}

#[test]
fn an_enabled_deployment_gets_a_schedule_from_its_annotation() {
    let outcome = Harness::<RolloutSchedules>::new()
        .reconcile(&deployment(&[
            (ENABLED_ANNOTATION, "true"),
            (SCHEDULE_ANNOTATION, "30 2 * * 1-5"),
        ]))
        .unwrap();
    assert_eq!(
        schedules(&outcome),
        [json!({
            "apiVersion": "example.com/v1alpha1",
            "kind": "RolloutSchedule",
            "metadata": {"name": "web"},
            "spec": {"deploymentName": "web", "schedule": "30 2 * * 1-5"},
        })],
        "spec.enabled is left to the CRD's default and to whoever turns it on"
    );
    assert_eq!(outcome.events()[0].reason, "Scheduled");
    assert!(
        outcome.response.status.is_none(),
        "a Deployment's status is not ours"
    );
}

#[test]
fn without_a_schedule_annotation_the_default_is_used() {
    for annotations in [
        &[(ENABLED_ANNOTATION, "true")][..],
        &[(ENABLED_ANNOTATION, "true"), (SCHEDULE_ANNOTATION, "  ")][..],
    ] {
        let outcome = Harness::<RolloutSchedules>::new()
            .reconcile(&deployment(annotations))
            .unwrap();
        assert_eq!(
            schedules(&outcome)[0]["spec"]["schedule"],
            DEFAULT_SCHEDULE,
            "{annotations:?}"
        );
    }
}

#[test]
fn deployments_not_enabled_get_nothing() {
    for annotations in [
        &[][..],
        &[(ENABLED_ANNOTATION, "false")][..],
        &[(ENABLED_ANNOTATION, "yes")][..],
        &[(SCHEDULE_ANNOTATION, "0 3 * * *")][..],
    ] {
        let outcome = Harness::<RolloutSchedules>::new()
            .reconcile(&deployment(annotations))
            .unwrap();
        assert!(outcome.response.apply.is_empty(), "{annotations:?}");
        assert!(outcome.events().is_empty(), "{annotations:?}");
    }
}

#[test]
fn an_existing_schedule_is_kept_quietly_while_the_annotation_stays() {
    let outcome = Harness::<RolloutSchedules>::new()
        .with(&existing_schedule())
        .reconcile(&deployment(&[(ENABLED_ANNOTATION, "true")]))
        .unwrap();
    assert_eq!(schedules(&outcome).len(), 1);
    assert!(outcome.events().is_empty(), "{:?}", outcome.events());
}

#[test]
fn removing_the_annotation_stops_returning_the_schedule_so_it_is_pruned() {
    let outcome = Harness::<RolloutSchedules>::new()
        .with(&existing_schedule())
        .reconcile(&deployment(&[]))
        .unwrap();
    assert!(outcome.response.apply.is_empty());
    assert_eq!(outcome.events()[0].reason, "Unscheduled");
}

#[test]
fn a_deleting_deployment_asks_for_nothing() {
    let mut gone = deployment(&[(ENABLED_ANNOTATION, "true")]);
    gone.metadata.deletion_timestamp = Some(Time("2024-01-01T00:00:00Z".parse().unwrap()));
    let outcome = Harness::<RolloutSchedules>::new()
        .with(&existing_schedule())
        .reconcile(&gone)
        .unwrap();
    assert!(outcome.response.apply.is_empty());
    assert!(outcome.events().is_empty());
}
