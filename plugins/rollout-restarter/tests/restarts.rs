//! The rollout-restarter logic, natively through the SDK harness.

// The harness is native only; on wasm32 this file compiles to nothing.
#![cfg(not(target_arch = "wasm32"))]

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use reconciler_sdk::EventType;
use reconciler_sdk::testing::{Harness, Outcome};
use rollout_restarter::{
    RESTARTED_AT, RolloutRestarter, RolloutSchedule, RolloutScheduleSpec, RolloutScheduleStatus,
};
use serde_json::{Value, json};

fn ts(text: &str) -> Timestamp {
    text.parse().unwrap()
}

/// A schedule for Deployment `web`, created on 2024-01-01 at 12:00; an
/// enabled one has been enabled since then (its status says so).
fn schedule(cron: &str, enabled: bool) -> RolloutSchedule {
    let mut schedule = new_schedule(cron, enabled);
    if enabled {
        schedule.status = Some(RolloutScheduleStatus {
            enabled_since: Some(ts("2024-01-01T12:00:00Z")),
            ..Default::default()
        });
    }
    schedule
}

/// As [`schedule`], but never reconciled yet: no status at all.
fn new_schedule(cron: &str, enabled: bool) -> RolloutSchedule {
    RolloutSchedule {
        api_version: "example.com/v1alpha1".into(),
        kind: "RolloutSchedule".into(),
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            creation_timestamp: Some(Time(ts("2024-01-01T12:00:00Z"))),
            ..Default::default()
        },
        spec: RolloutScheduleSpec {
            deployment_name: "web".into(),
            schedule: cron.into(),
            enabled,
        },
        status: None,
    }
}

fn deployment() -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn at(now: &str, schedule: &RolloutSchedule) -> Outcome {
    Harness::<RolloutRestarter>::new()
        .with(&deployment())
        .at(ts(now))
        .reconcile(schedule)
        .unwrap()
}

/// The restartedAt value a response applies, if it applies one.
fn restarted_at(outcome: &Outcome) -> Option<String> {
    let applied: Vec<Value> = outcome
        .applied_as(&reconciler_sdk::KindRef::of::<Deployment>())
        .unwrap();
    assert!(applied.len() <= 1, "{applied:?}");
    applied.first().map(|d| {
        d["spec"]["template"]["metadata"]["annotations"][RESTARTED_AT]
            .as_str()
            .unwrap()
            .to_string()
    })
}

fn status(outcome: &Outcome) -> RolloutScheduleStatus {
    outcome.status().unwrap().unwrap()
}

fn ready(outcome: &Outcome) -> (String, String, String) {
    let status = status(outcome);
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

#[test]
fn a_due_restart_applies_only_the_restarted_at_annotation_with_the_scheduled_time() {
    let outcome = at("2024-01-02T03:00:07Z", &schedule("0 3 * * *", true));
    let applied: Vec<Value> = outcome
        .applied_as(&reconciler_sdk::KindRef::of::<Deployment>())
        .unwrap();
    assert_eq!(
        applied,
        [json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"template": {"metadata": {"annotations": {
                "kubectl.kubernetes.io/restartedAt": "2024-01-02T03:00:00Z"
            }}}},
        })]
    );
    let status = status(&outcome);
    assert_eq!(status.last_restart, Some(ts("2024-01-02T03:00:00Z")));
    assert_eq!(status.next_restart, Some(ts("2024-01-03T03:00:00Z")));
    assert_eq!(
        outcome.requeue_after(),
        Some(Duration::from_secs(24 * 3600 - 7))
    );
    let event = &outcome.events()[0];
    assert_eq!(
        (event.event_type, event.reason.as_str()),
        (EventType::Normal, "Restarted")
    );
    assert_eq!(ready(&outcome).0, "True");
}

#[test]
fn enabling_restarts_nothing_until_the_next_scheduled_time() {
    // Enabled at 14:00 (first seen so): the 03:00 that passed while it was
    // disabled is not a missed restart.
    let enabled = new_schedule("0 3 * * *", true);
    let first = at("2024-01-02T14:00:00Z", &enabled);
    assert_eq!(restarted_at(&first), None);
    assert!(first.events().is_empty(), "{:?}", first.events());
    let status = status(&first);
    assert_eq!(status.enabled_since, Some(ts("2024-01-02T14:00:00Z")));
    assert_eq!(status.next_restart, Some(ts("2024-01-03T03:00:00Z")));

    // The next scheduled time is a restart.
    let mut seen = enabled;
    seen.status = Some(status);
    let next = at("2024-01-03T03:00:02Z", &seen);
    assert_eq!(restarted_at(&next).as_deref(), Some("2024-01-03T03:00:00Z"));

    // Disabling forgets when it was enabled.
    let mut disabled = seen;
    disabled.spec.enabled = false;
    assert_eq!(
        self::status(&at("2024-01-03T04:00:00Z", &disabled)).enabled_since,
        None
    );
}

#[test]
fn between_scheduled_times_the_same_value_is_applied_again_and_nothing_else_happens() {
    let mut restarted = schedule("0 3 * * *", true);
    restarted.status = Some(status(&at("2024-01-02T03:00:07Z", &restarted)));

    for now in [
        "2024-01-02T03:00:08Z",
        "2024-01-02T15:30:00Z",
        "2024-01-03T02:59:59Z",
    ] {
        let outcome = at(now, &restarted);
        assert_eq!(
            restarted_at(&outcome).as_deref(),
            Some("2024-01-02T03:00:00Z"),
            "{now}"
        );
        assert!(outcome.events().is_empty(), "{now}: {:?}", outcome.events());
        assert_eq!(
            status(&outcome).last_restart,
            Some(ts("2024-01-02T03:00:00Z"))
        );
    }
}

#[test]
fn a_status_that_lags_behind_gives_the_same_value_not_a_new_restart() {
    // The restart was applied, but the status write is not visible yet.
    let lagging = schedule("0 3 * * *", true);
    let first = at("2024-01-02T03:00:01Z", &lagging);
    let again = at("2024-01-02T03:00:02Z", &lagging);
    assert_eq!(restarted_at(&first), restarted_at(&again));
    assert_eq!(
        restarted_at(&again).as_deref(),
        Some("2024-01-02T03:00:00Z")
    );
}

#[test]
fn a_scheduled_time_before_the_schedule_existed_is_not_a_restart() {
    // Created at 12:00; the 03:00 of the same day came before it.
    let fresh = schedule("0 3 * * *", true);
    let outcome = at("2024-01-01T12:00:05Z", &fresh);
    assert_eq!(restarted_at(&outcome), None, "nothing applied at all");
    assert!(outcome.events().is_empty());
    assert_eq!(
        status(&outcome).next_restart,
        Some(ts("2024-01-02T03:00:00Z"))
    );
    assert_eq!(
        outcome.requeue_after(),
        Some(Duration::from_secs(15 * 3600 - 5))
    );
}

#[test]
fn following_the_requeues_restarts_once_per_scheduled_time() {
    // Every 6 hours; the host reconciles at each requeue (a little late) and
    // at a few unrelated moments in between.
    let mut restarts = schedule("0 */6 * * *", true);
    let mut now = ts("2024-01-01T12:00:00Z") + SignedDuration::from_secs(1);
    let mut applied = Vec::new();
    for step in 0..12 {
        let outcome = at(&now.to_string(), &restarts);
        restarts.status = Some(status(&outcome));
        applied.push(restarted_at(&outcome));
        now = if step % 3 == 2 {
            now + SignedDuration::from_mins(17) // an unrelated change
        } else {
            now + SignedDuration::try_from(outcome.requeue_after().unwrap()).unwrap()
                + SignedDuration::from_millis(40)
        };
    }
    let values: Vec<&str> = applied.iter().flatten().map(String::as_str).collect();
    assert_eq!(applied[0], None, "12:00 is not after the creation at 12:00");
    let mut distinct = values.clone();
    distinct.dedup();
    assert_eq!(
        distinct,
        [
            "2024-01-01T18:00:00Z",
            "2024-01-02T00:00:00Z",
            "2024-01-02T06:00:00Z",
            "2024-01-02T12:00:00Z",
            "2024-01-02T18:00:00Z",
            "2024-01-03T00:00:00Z",
            "2024-01-03T06:00:00Z",
            "2024-01-03T12:00:00Z",
        ]
    );
}

#[test]
fn sub_second_clocks_land_on_whole_scheduled_seconds() {
    let restarts = schedule("30 4 * * *", true);
    let early = at("2024-01-02T04:29:59.750Z", &restarts);
    assert_eq!(restarted_at(&early), None);
    assert_eq!(early.requeue_after(), Some(Duration::from_millis(250)));
    let late = at("2024-01-02T04:30:00.250Z", &restarts);
    assert_eq!(restarted_at(&late).as_deref(), Some("2024-01-02T04:30:00Z"));
}

#[test]
fn invalid_schedules_are_a_condition_not_an_error() {
    for bad in [
        "",
        "every day",
        "* * *",
        "61 * * * *",
        "0 0 * * * *",
        "0 0 30 2 *",
    ] {
        let outcome = at("2024-01-02T03:00:00Z", &schedule(bad, true));
        let (status_, reason, message) = ready(&outcome);
        assert_eq!(
            (status_.as_str(), reason.as_str()),
            ("False", "InvalidSchedule"),
            "{bad:?}"
        );
        assert!(message.contains(&format!("{bad:?}")), "{bad:?}: {message}");
        assert_eq!(restarted_at(&outcome), None, "{bad:?}");
        assert_eq!(outcome.requeue_after(), None, "{bad:?}");
        assert_eq!(status(&outcome).next_restart, None, "{bad:?}");
    }
}

#[test]
fn nicknames_and_named_days_work() {
    let outcome = at("2024-01-02T00:00:30Z", &schedule("@daily", true));
    assert_eq!(
        restarted_at(&outcome).as_deref(),
        Some("2024-01-02T00:00:00Z")
    );
    // 2024-01-05 is a Friday.
    let friday = at("2024-01-03T10:00:00Z", &schedule("15 22 * * FRI", true));
    assert_eq!(
        status(&friday).next_restart,
        Some(ts("2024-01-05T22:15:00Z"))
    );
}

#[test]
fn a_disabled_schedule_restarts_nothing_and_keeps_its_last_restart() {
    let mut off = schedule("0 3 * * *", false);
    off.status = Some(RolloutScheduleStatus {
        last_restart: Some(ts("2024-01-02T03:00:00Z")),
        ..Default::default()
    });
    let outcome = at("2024-01-05T03:00:00Z", &off);
    assert!(outcome.response.apply.is_empty());
    assert_eq!(outcome.requeue_after(), None);
    let status = status(&outcome);
    assert_eq!(status.last_restart, Some(ts("2024-01-02T03:00:00Z")));
    assert_eq!(status.next_restart, None);
    assert_eq!(ready(&outcome).1, "Disabled");
}

#[test]
fn a_missing_deployment_is_not_created_and_is_looked_for_again_at_the_next_time() {
    let outcome = Harness::<RolloutRestarter>::new()
        .at(ts("2024-01-02T03:00:07Z"))
        .reconcile(&schedule("0 3 * * *", true))
        .unwrap();
    assert!(outcome.response.apply.is_empty());
    let (_, reason, message) = ready(&outcome);
    assert_eq!(reason, "DeploymentNotFound");
    assert!(message.contains("web"), "{message}");
    assert_eq!(
        outcome.requeue_after(),
        Some(Duration::from_secs(24 * 3600 - 7))
    );
}

#[test]
fn a_deleting_schedule_asks_for_nothing() {
    let mut gone = schedule("0 3 * * *", true);
    gone.metadata.deletion_timestamp = Some(Time(ts("2024-01-02T03:00:00Z")));
    let outcome = at("2024-01-02T03:00:07Z", &gone);
    assert!(outcome.response.apply.is_empty());
    assert!(outcome.response.status.is_none());
}
