//! The Events recorded about an object: what `kubectl describe` shows a
//! user, and so what the tests check a refusal by.
//!
//! The host records events.k8s.io/v1 Events; other controllers may still
//! record core v1 ones. Both APIs serve the same objects, so reading
//! events.k8s.io/v1 sees all of them; core v1 is the fallback for a
//! cluster that does not serve the newer API.

use std::fmt;
use std::time::Duration;

use anyhow::{Context as _, Result};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::Value;

use super::RealCluster;
use super::objects::is_api_error;
use super::poll::Probe;

/// One Event as the tests look at it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenEvent {
    /// `Normal` or `Warning`.
    pub event_type: String,
    pub reason: String,
    /// `note` of events.k8s.io/v1, `message` of core v1.
    pub message: String,
    pub reporting_controller: String,
    /// Which replica of the controller recorded it (the host's `POD_NAME`).
    pub reporting_instance: String,
    /// The kind of the object it is about.
    pub regarding_kind: String,
    pub regarding_uid: Option<String>,
    /// When it was recorded (RFC 3339), for ordering.
    pub at: String,
}

impl fmt::Display for SeenEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} by {}: {}",
            self.event_type, self.reason, self.reporting_controller, self.message
        )
    }
}

fn text(value: &Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn seen_new(event: &Value) -> SeenEvent {
    SeenEvent {
        event_type: text(event, "/type"),
        reason: text(event, "/reason"),
        message: text(event, "/note"),
        reporting_controller: text(event, "/reportingController"),
        reporting_instance: text(event, "/reportingInstance"),
        regarding_kind: text(event, "/regarding/kind"),
        regarding_uid: event
            .pointer("/regarding/uid")
            .and_then(Value::as_str)
            .map(str::to_string),
        at: recorded_at(event, &["/eventTime"]),
    }
}

/// `metadata.creationTimestamp` (whole seconds) refined by the first of
/// `precise` that is set: Events of one second keep their order.
fn recorded_at(event: &Value, precise: &[&str]) -> String {
    let precise = precise
        .iter()
        .map(|p| text(event, p))
        .find(|t| !t.is_empty())
        .unwrap_or_default();
    format!("{} {precise}", text(event, "/metadata/creationTimestamp"))
}

fn seen_core(event: &Value) -> SeenEvent {
    let reporter = match text(event, "/reportingComponent") {
        r if r.is_empty() => text(event, "/source/component"),
        r => r,
    };
    SeenEvent {
        event_type: text(event, "/type"),
        reason: text(event, "/reason"),
        message: text(event, "/message"),
        reporting_controller: reporter,
        reporting_instance: match text(event, "/reportingInstance") {
            i if i.is_empty() => text(event, "/source/host"),
            i => i,
        },
        regarding_kind: text(event, "/involvedObject/kind"),
        regarding_uid: event
            .pointer("/involvedObject/uid")
            .and_then(Value::as_str)
            .map(str::to_string),
        at: recorded_at(event, &["/eventTime", "/lastTimestamp"]),
    }
}

fn events_api(cluster: &RealCluster, group: &str, plural: &str) -> Api<DynamicObject> {
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", "Event"), plural);
    Api::namespaced_with(cluster.client.clone(), &cluster.namespace, &resource)
}

/// How many Events there are and the newest, in one line of bounded length:
/// a failing host can record hundreds of them.
pub fn summary(events: &[SeenEvent]) -> String {
    const SHOWN: usize = 600;
    let Some(last) = events.last() else {
        return "no Events".to_string();
    };
    let mut last = last.to_string();
    if let Some((cut, _)) = last.char_indices().nth(SHOWN) {
        last.truncate(cut);
        last.push_str("...");
    }
    format!("{} Events, the newest: {last}", events.len())
}

impl RealCluster {
    /// Every Event in the test's namespace about the object `kind`/`name`,
    /// oldest first.
    pub async fn events_about(&self, kind: &str, name: &str) -> Result<Vec<SeenEvent>> {
        let new_api = events_api(self, "events.k8s.io", "events");
        let selector = format!("regarding.name={name}");
        let listed = match new_api.list(&ListParams::default().fields(&selector)).await {
            Ok(list) => list
                .items
                .into_iter()
                .map(|e| super::objects::to_json(e).map(|e| seen_new(&e)))
                .collect::<Result<Vec<_>>>()?,
            Err(e) if is_api_error(&e, 404) => {
                let core_api = events_api(self, "", "events");
                let selector = format!("involvedObject.name={name}");
                core_api
                    .list(&ListParams::default().fields(&selector))
                    .await
                    .with_context(|| format!("listing core v1 Events with {selector}"))?
                    .items
                    .into_iter()
                    .map(|e| super::objects::to_json(e).map(|e| seen_core(&e)))
                    .collect::<Result<Vec<_>>>()?
            }
            Err(e) => {
                return Err(e).with_context(|| format!("listing Events with {selector}"));
            }
        };
        let mut about: Vec<SeenEvent> = listed
            .into_iter()
            .filter(|e| e.regarding_kind == kind)
            .collect();
        about.sort_by(|a, b| a.at.cmp(&b.at));
        Ok(about)
    }

    /// Waits for a Warning Event about `kind`/`name` whose message contains
    /// every one of `needles`, and returns it (whatever its reason: the
    /// caller checks that, so a wrong reason fails with the Event shown).
    /// `settled` is checked on every round: a state that shows the host
    /// already did what it should have refused ends the wait at once.
    pub async fn wait_for_warning(
        &self,
        kind: &str,
        name: &str,
        needles: &[&str],
        timeout: Duration,
        settled: impl AsyncFnMut() -> Result<Option<String>>,
    ) -> Result<SeenEvent> {
        let mut settled = settled;
        self.wait_for(
            &format!("a Warning Event about {kind} {name} saying {needles:?}"),
            timeout,
            async || {
                if let Some(wrong) = settled().await? {
                    anyhow::bail!("{wrong}");
                }
                let events = self.events_about(kind, name).await?;
                if let Some(found) = events.iter().find(|e| {
                    e.event_type == "Warning" && needles.iter().all(|n| e.message.contains(n))
                }) {
                    return Ok(Probe::Ready(found.clone()));
                }
                Ok(Probe::Pending(summary(&events)))
            },
        )
        .await
    }
}
