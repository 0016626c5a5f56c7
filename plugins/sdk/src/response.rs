//! Building a plugin's answer.

use std::time::Duration;

use serde::Serialize;

use crate::error::Error;
use reconciler_contract::{Event, EventType, KindRef, ObjectRef, ReconcileResponse};

/// The desired state for one primary object.
///
/// Return the full set of owned children every time: the host prunes the ones
/// you leave out. Serialising happens here, so a value that cannot be turned
/// into JSON fails the reconcile with a clear error rather than reaching the
/// host half-formed.
#[derive(Debug, Default)]
#[must_use = "a Response does nothing unless returned from reconcile"]
pub struct Response {
    inner: ReconcileResponse,
}

impl Response {
    pub fn new() -> Self {
        Self::default()
    }

    /// An object to create or update: owned (a child) or written (patched).
    /// It must carry apiVersion, kind and metadata.name; k8s-openapi types and
    /// [`crate::Object`] do.
    pub fn apply<T: Serialize>(mut self, object: &T) -> Result<Self, Error> {
        let json = serde_json::to_string(object).map_err(|source| Error::Serialize {
            what: "an object to apply".into(),
            source,
        })?;
        self.inner.apply.push(json);
        Ok(self)
    }

    /// An owned object to delete now.
    pub fn delete(mut self, kind: &KindRef, namespace: Option<&str>, name: &str) -> Self {
        self.inner.delete.push(ObjectRef {
            api_version: kind.api_version(),
            kind: kind.kind.clone(),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        });
        self
    }

    /// The desired `.status` of the primary; must serialise to a JSON object.
    pub fn status<T: Serialize>(mut self, status: &T) -> Result<Self, Error> {
        let json = serde_json::to_string(status).map_err(|source| Error::Serialize {
            what: "the status".into(),
            source,
        })?;
        self.inner.status = Some(json);
        Ok(self)
    }

    /// An Event to record on the primary.
    pub fn event(
        mut self,
        event_type: EventType,
        reason: &str,
        message: impl Into<String>,
    ) -> Self {
        self.inner.events.push(Event {
            event_type,
            reason: reason.to_string(),
            message: message.into(),
        });
        self
    }

    /// Reconcile again after this delay even if nothing changes.
    pub fn requeue_after(mut self, delay: Duration) -> Self {
        self.inner.requeue_after_ms = Some(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// While deleting: cleanup is complete, the host may drop the finalizer.
    pub fn finalized(mut self) -> Self {
        self.inner.finalized = true;
        self
    }

    /// The wire form the host receives.
    pub fn into_wire(self) -> ReconcileResponse {
        self.inner
    }
}
