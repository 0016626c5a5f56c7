//! The Events the embedded cluster recorded, under a lock of their own:
//! an Event touches no stored object, so recording one never waits for an
//! apply that holds the store.

use std::collections::VecDeque;

use super::RecordedEvent;
use crate::cluster::backend::{EventRecord, EventRef, EventSeries};

/// The last [`super::MAX_EVENTS`] Events, oldest first.
#[derive(Debug, Default)]
pub(super) struct EventLog {
    events: VecDeque<RecordedEvent>,
    /// Events recorded so far: the sequence number in each name, and how a
    /// name finds its Event without a scan.
    recorded: u64,
}

impl EventLog {
    /// Keeps `event`, dropping the oldest past `max`, and names it as the
    /// API server does: the object's name, then something unique.
    pub(super) fn record(&mut self, event: EventRecord, at_millis: i64, max: usize) -> EventRef {
        while self.events.len() >= max.max(1) {
            self.events.pop_front();
        }
        self.recorded += 1;
        let name = format!("{}.{:x}", event.regarding.name, self.recorded);
        let namespace = event
            .regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        self.events.push_back(RecordedEvent {
            at_millis,
            record: event,
            name: name.clone(),
            series: None,
        });
        EventRef { namespace, name }
    }

    /// Sets the series of the Event `name`; false when it is no longer
    /// kept (dropped as the oldest, as an API server expires old Events).
    pub(super) fn set_series(&mut self, name: &str, series: EventSeries) -> bool {
        match self.position(name) {
            Some(i) => {
                self.events[i].series = Some(series);
                true
            }
            None => false,
        }
    }

    /// Where the Event `name` sits: its sequence number, read back from the
    /// name, less the sequence number of the oldest kept.
    fn position(&self, name: &str) -> Option<usize> {
        let (_, seq) = name.rsplit_once('.')?;
        let seq = u64::from_str_radix(seq, 16).ok()?;
        let oldest = self.recorded - self.events.len() as u64 + 1;
        let i = usize::try_from(seq.checked_sub(oldest)?).ok()?;
        self.events.get(i).filter(|e| e.name == name).map(|_| i)
    }

    pub(super) fn to_vec(&self) -> Vec<RecordedEvent> {
        self.events.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::backend::ObjectKey;
    use reconciler_contract::{EventType, KindRef};

    fn event(name: &str) -> EventRecord {
        EventRecord {
            regarding: ObjectKey::new(KindRef::new("", "v1", "ConfigMap"), Some("ns"), name),
            regarding_uid: None,
            event_type: EventType::Normal,
            reason: "Seen".into(),
            message: "seen".into(),
            reporting_controller: "reconciler-host/test".into(),
        }
    }

    #[test]
    fn the_oldest_go_first_and_a_dropped_event_takes_no_series() {
        let mut log = EventLog::default();
        let refs: Vec<EventRef> = (0..5)
            .map(|i| log.record(event(&format!("o{i}")), i, 3))
            .collect();
        let kept: Vec<String> = log.to_vec().into_iter().map(|e| e.name).collect();
        assert_eq!(kept, ["o2.3", "o3.4", "o4.5"]);
        let series = EventSeries {
            count: 2,
            last_observed_millis: 9,
        };
        assert!(!log.set_series(&refs[1].name, series));
        assert!(log.set_series(&refs[3].name, series));
        assert_eq!(log.to_vec()[1].series, Some(series));
        assert_eq!(log.to_vec()[0].series, None);
        // A name the log never gave out, or one of another object.
        assert!(!log.set_series("o9.4", series));
        assert!(!log.set_series("nonsense", series));
    }
}
