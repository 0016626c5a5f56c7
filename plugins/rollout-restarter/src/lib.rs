//! The second half of the rollout scheduler: the restarts.
//!
//! A RolloutSchedule names a Deployment and a 5-field cron expression (UTC).
//! While `spec.enabled` is true, the plugin restarts the Deployment at each
//! scheduled time the way `kubectl rollout restart` does: it sets the pod
//! template annotation `kubectl.kubernetes.io/restartedAt`. It applies only
//! that field (plus the object's identity), so the host's apply, made with
//! this plugin's field manager, touches nothing else of the Deployment.
//!
//! The value is the scheduled time itself, never "now". The host re-applies
//! whatever a reconcile returns, and any new value is a new rollout, so
//! every reconcile must land on the same value until the next scheduled
//! time: the latest scheduled time not after now, if it is after the
//! schedule's creation, the moment it was enabled and `status.lastRestart`
//! (a restart is due), or else `status.lastRestart` again (or nothing, if
//! there never was one). A reconcile that runs twice, or sees a status that
//! lags behind, applies the same value and changes nothing.
//!
//! Enabling a schedule restarts nothing until its next scheduled time:
//! `status.enabledSince` records when the plugin first saw it enabled, and
//! times before it were never due (a schedule enabled at 14:00 with
//! `0 3 * * *` restarts at 03:00 the next day, not at once). Disabling
//! clears it. A scheduled time missed while the host was down is caught up
//! once, as soon as the plugin runs again, like a CronJob without a
//! starting deadline.

use std::time::Duration;

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::jiff::tz::TimeZone;
use reconciler_sdk::{
    Change, Context, Error, EventType, KindRef, Object, PartialObject, PluginMetadata, Reconciler,
    Response,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The pod template annotation `kubectl rollout restart` sets.
pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutScheduleSpec {
    /// The Deployment to restart, in the schedule's namespace.
    pub deployment_name: String,
    /// A 5-field cron expression (minute hour day-of-month month
    /// day-of-week), in UTC.
    pub schedule: String,
    #[serde(default)]
    pub enabled: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutScheduleStatus {
    /// The scheduled time of the last restart: the restartedAt value applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_restart: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_restart: Option<Timestamp>,
    /// When the plugin first saw `spec.enabled` true (since it was last
    /// false): scheduled times before it are not restarts that were missed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled_since: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

pub type RolloutSchedule = Object<RolloutScheduleSpec, RolloutScheduleStatus>;

pub struct RolloutRestarter;

impl Reconciler for RolloutRestarter {
    type Primary = RolloutSchedule;

    fn metadata() -> PluginMetadata {
        PluginMetadata::new(
            "rollout-restarter",
            env!("CARGO_PKG_VERSION"),
            KindRef::new("example.com", "v1alpha1", "RolloutSchedule"),
        )
        .writes(KindRef::of::<Deployment>())
        // The schedule's spec is the decision's input; its status is this
        // plugin's own record, and a restart time comes by requeue, so a
        // status write needs no second look.
        .wake_on(
            KindRef::new("example.com", "v1alpha1", "RolloutSchedule"),
            [Change::Generation],
        )
    }

    fn reconcile(schedule: RolloutSchedule, ctx: &Context) -> Result<Response, Error> {
        if ctx.deleting() {
            // Restarts already made stay made; there is nothing to undo.
            return Ok(Response::new());
        }
        let now = ctx.now();
        let spec = &schedule.spec;
        let mut status = schedule.status.clone().unwrap_or_default();

        let cron = match parse_schedule(&spec.schedule, now) {
            Ok(cron) => cron,
            Err(why) => {
                status.next_restart = None;
                set_ready(&mut status, false, "InvalidSchedule", why, now);
                return Response::new().status(&status);
            }
        };
        if !spec.enabled {
            status.next_restart = None;
            status.enabled_since = None;
            let message = "spec.enabled is false: no restarts".to_string();
            set_ready(&mut status, false, "Disabled", message, now);
            return Response::new().status(&status);
        }
        let Some(next) = next_after(&cron, now) else {
            // parse_schedule checked that there is one; stay calm anyway.
            let message = format!("{:?} has no time after {now}", spec.schedule);
            set_ready(&mut status, false, "InvalidSchedule", message, now);
            return Response::new().status(&status);
        };
        status.next_restart = Some(next);
        let enabled_since = *status.enabled_since.get_or_insert(now);
        let requeue =
            Duration::from_millis((next.as_millisecond() - now.as_millisecond()).max(0) as u64);

        let name = &spec.deployment_name;
        let namespace = schedule.namespace();
        let deployment_kind = KindRef::of::<Deployment>();
        if ctx
            .get_as::<PartialObject>(&deployment_kind, namespace, name)?
            .is_none()
        {
            // Applying the restart would try to create a Deployment with
            // nothing but an annotation. Look again at the next time.
            let message = format!("Deployment {name} does not exist");
            set_ready(&mut status, false, "DeploymentNotFound", message, now);
            return Ok(Response::new().status(&status)?.requeue_after(requeue));
        }

        let created = schedule.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let mut response = Response::new();
        let since = created.map(|c| c.max(enabled_since));
        let restarted_at = match due_restart(&cron, now, since, status.last_restart) {
            Some(due) => {
                status.last_restart = Some(due);
                response = response.event(
                    EventType::Normal,
                    "Restarted",
                    format!("Deployment {name} restarted for {due}"),
                );
                Some(due)
            }
            None => status.last_restart,
        };
        if let Some(at) = restarted_at {
            response = response.apply(&restart(name, namespace, at))?;
        }
        let message = format!("restarts Deployment {name} on {:?} (UTC)", spec.schedule);
        set_ready(&mut status, true, "Scheduled", message, now);
        Ok(response.status(&status)?.requeue_after(requeue))
    }
}

reconciler_sdk::export_plugin!(RolloutRestarter);

/// Parses a 5-field cron expression (or a nickname such as `@daily`), and
/// checks that it names at least one future time: `0 0 30 2 *` parses but
/// never comes.
pub fn parse_schedule(schedule: &str, now: Timestamp) -> Result<Cron, String> {
    let parser = CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build();
    let cron = parser.parse(schedule).map_err(|e| {
        format!("spec.schedule {schedule:?} is not a valid 5-field cron expression (minute hour day-of-month month day-of-week): {e}")
    })?;
    if next_after(&cron, now).is_none() {
        return Err(format!(
            "spec.schedule {schedule:?} never comes: no time after {now} matches it"
        ));
    }
    Ok(cron)
}

/// The restart due now, if any: the latest scheduled time not after `now`,
/// when it is after both `active_since` (the later of the schedule's
/// creation and its enabling) and the last restart. A schedule without a
/// creation time is taken to have none due, rather than restarting for a
/// time from before it existed.
pub fn due_restart(
    cron: &Cron,
    now: Timestamp,
    active_since: Option<Timestamp>,
    last_restart: Option<Timestamp>,
) -> Option<Timestamp> {
    let latest = latest_until(cron, now)?;
    let since = active_since.max(last_restart)?;
    (latest > since).then_some(latest)
}

/// The latest scheduled time at or before `now`.
pub fn latest_until(cron: &Cron, now: Timestamp) -> Option<Timestamp> {
    let civil = TimeZone::UTC.to_datetime(now);
    let found = cron.find_previous_occurrence(&civil, true).ok()?;
    TimeZone::UTC.to_timestamp(found).ok()
}

/// The first scheduled time after `now`.
pub fn next_after(cron: &Cron, now: Timestamp) -> Option<Timestamp> {
    let civil = TimeZone::UTC.to_datetime(now);
    let found = cron.find_next_occurrence(&civil, false).ok()?;
    TimeZone::UTC.to_timestamp(found).ok()
}

/// What `kubectl rollout restart` changes, and nothing else.
fn restart(name: &str, namespace: Option<&str>, at: Timestamp) -> serde_json::Value {
    let mut metadata = json!({"name": name});
    if let Some(namespace) = namespace {
        metadata["namespace"] = json!(namespace);
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: at.to_string()}}}},
    })
}

/// Sets the Ready condition; its transition time moves only when its status does.
fn set_ready(
    status: &mut RolloutScheduleStatus,
    ready: bool,
    reason: &str,
    message: String,
    now: Timestamp,
) {
    let value = if ready { "True" } else { "False" };
    match status.conditions.iter_mut().find(|c| c.type_ == "Ready") {
        Some(c) => {
            if c.status != value {
                c.last_transition_time = Time(now);
            }
            c.status = value.into();
            c.reason = reason.into();
            c.message = message;
        }
        None => status.conditions.push(Condition {
            type_: "Ready".into(),
            status: value.into(),
            reason: reason.into(),
            message,
            last_transition_time: Time(now),
            observed_generation: None,
        }),
    }
}
