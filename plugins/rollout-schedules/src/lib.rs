//! The first half of the rollout scheduler: who gets a schedule.
//!
//! Every Deployment annotated `rollout-scheduler.io/enabled: "true"` gets an
//! owned RolloutSchedule of the same name, carrying the cron expression of
//! its `rollout-scheduler.io/schedule` annotation (or [`DEFAULT_SCHEDULE`]).
//! The restarts themselves are the `rollout-restarter` plugin's job.
//!
//! The schedule is owned, so the host takes care of its end: removing the
//! annotation stops returning it and the host prunes it; deleting the
//! Deployment garbage-collects it through its ownerReference.
//!
//! `spec.enabled` is deliberately left out of what this plugin applies: the
//! CRD defaults it to false, and whoever turns it on keeps it on, since the
//! host's apply only touches the fields a plugin sets.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use reconciler_sdk::{
    Change, Context, Error, EventType, KindRef, Object, PartialObject, PluginMetadata, Reconciler,
    Response,
};
use serde::{Deserialize, Serialize};

/// `"true"` on a Deployment asks for a RolloutSchedule.
pub const ENABLED_ANNOTATION: &str = "rollout-scheduler.io/enabled";
/// The 5-field cron expression for the schedule.
pub const SCHEDULE_ANNOTATION: &str = "rollout-scheduler.io/schedule";
/// Every day at 03:00 UTC, a quiet hour for most services.
pub const DEFAULT_SCHEDULE: &str = "0 3 * * *";

/// The fields of a RolloutSchedule this plugin sets; `enabled` is not one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleSpec {
    pub deployment_name: String,
    pub schedule: String,
}

pub type RolloutSchedule = Object<ScheduleSpec>;

pub fn rollout_schedule_kind() -> KindRef {
    KindRef::new("example.com", "v1alpha1", "RolloutSchedule")
}

pub struct RolloutSchedules;

impl Reconciler for RolloutSchedules {
    /// Names and annotations are all this plugin needs of a Deployment.
    type Primary = PartialObject;

    fn metadata() -> PluginMetadata {
        PluginMetadata::new(
            "rollout-schedules",
            env!("CARGO_PKG_VERSION"),
            KindRef::of::<Deployment>(),
        )
        .owns(rollout_schedule_kind())
        // The decision reads a Deployment's annotations and whether its
        // schedule exists: a rollout (the restarter's template change, the
        // Deployment controller's status) wakes nothing; an edit of the
        // schedule's spec does, to put it back.
        .wake_on(KindRef::of::<Deployment>(), [Change::Annotations])
        .wake_on(rollout_schedule_kind(), [Change::Generation])
    }

    fn reconcile(deployment: PartialObject, ctx: &Context) -> Result<Response, Error> {
        if ctx.deleting() {
            // The schedule is garbage-collected through its ownerReference.
            return Ok(Response::new());
        }
        let name = deployment.name();
        let annotations = &deployment.metadata.annotations;
        let had_schedule = !ctx
            .children_of_kind::<PartialObject>(&rollout_schedule_kind())?
            .is_empty();
        if annotations.get(ENABLED_ANNOTATION).map(String::as_str) != Some("true") {
            return Ok(if had_schedule {
                // Not returning it has the host prune it.
                Response::new().event(
                    EventType::Normal,
                    "Unscheduled",
                    format!(
                        "{ENABLED_ANNOTATION} is no longer \"true\": RolloutSchedule {name} removed"
                    ),
                )
            } else {
                Response::new()
            });
        }

        let schedule = annotations
            .get(SCHEDULE_ANNOTATION)
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .unwrap_or(DEFAULT_SCHEDULE);
        let rollout_schedule = RolloutSchedule {
            api_version: rollout_schedule_kind().api_version(),
            kind: rollout_schedule_kind().kind,
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            spec: ScheduleSpec {
                deployment_name: name.to_string(),
                schedule: schedule.to_string(),
            },
            status: None,
        };
        let mut response = Response::new().apply(&rollout_schedule)?;
        if !had_schedule {
            response = response.event(
                EventType::Normal,
                "Scheduled",
                format!(
                    "RolloutSchedule {name} ({schedule}); it restarts nothing until its spec.enabled is true"
                ),
            );
        }
        Ok(response)
    }
}

reconciler_sdk::export_plugin!(RolloutSchedules);
