//! Events on the source Secrets: the readers of a Secret (`kubectl
//! describe secret`) are the ones who need to know what the host made of
//! it, and they may not read the host's log.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Events on the source Secrets, so `kubectl describe secret` says what the
/// host made of each: engaged, engaged anew, disengaged, refused and why.
#[derive(Clone)]
pub(super) struct Announcer {
    recorder: Recorder,
}

impl Announcer {
    pub(super) fn new(client: kube::Client) -> Self {
        let reporter = Reporter {
            controller: "reconciler-host".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// Publishes beside the engagements: an Event never holds them up, and
    /// one that cannot be written is a debug line.
    pub(super) fn announce(
        &self,
        secret: Option<&ObjectReference>,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        let Some(secret) = secret.cloned() else {
            return;
        };
        let recorder = self.recorder.clone();
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary: None,
        };
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&event, &secret).await {
                tracing::debug!("cannot record an Event on Secret {:?}: {e}", secret.name);
            }
        });
    }
}
