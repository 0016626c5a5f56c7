//! The host's log events as text, for tests that assert what was logged
//! (guest output, notices), each with the event's target.

use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

/// A tracing layer that keeps every event: `(target, "name=value ...")`.
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<(String, String)>>>);

impl LogCapture {
    /// A subscriber that records into this capture.
    pub fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + 'static {
        tracing_subscriber::registry().with(self.clone())
    }

    /// Every event so far, with its target.
    pub fn events(&self) -> Vec<(String, String)> {
        self.0.lock().unwrap().clone()
    }

    /// Every event's fields so far.
    pub fn lines(&self) -> Vec<String> {
        self.events()
            .into_iter()
            .map(|(_, fields)| fields)
            .collect()
    }
}

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={:?} ", field.name(), value));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push_str(&format!("{}={} ", field.name(), value));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for LogCapture {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        let target = event.metadata().target().to_string();
        self.0.lock().unwrap().push((target, fields.0));
    }
}
