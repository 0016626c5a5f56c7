//! The Events the embedded cluster recorded, under a lock of their own:
//! an Event touches no stored object, so recording one never waits for an
//! apply that holds the store.

use std::collections::VecDeque;
use std::time::Duration;

use crate::cluster::backend::{EventRecord, EventRef, EventSeries};

/// How many recorded Events are kept (oldest dropped first).
pub const MAX_EVENTS: usize = 10_000;
/// How long an Event is kept after it was last written: kube-apiserver's
/// `--event-ttl` default, so Events about objects long gone go as they do
/// on a real cluster, not only once [`MAX_EVENTS`] newer ones came.
pub const EVENT_TTL: Duration = Duration::from_secs(3600);

/// An Event as the embedded cluster recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedEvent {
    pub at_millis: i64,
    pub record: EventRecord,
    /// Unique among the recorded Events.
    pub name: String,
    /// Set once the Event happened again.
    pub series: Option<EventSeries>,
}

/// The last [`MAX_EVENTS`] Events, oldest first, each until [`EVENT_TTL`]
/// after it was last written.
#[derive(Debug, Default)]
pub(super) struct EventLog {
    events: VecDeque<RecordedEvent>,
    /// Events recorded so far: the sequence number in each name, and how a
    /// name finds its Event without a scan.
    recorded: u64,
}

impl RecordedEvent {
    /// When the Event was created or its series last written.
    fn last_written_millis(&self) -> i64 {
        self.series.map_or(self.at_millis, |s| {
            s.last_observed_millis.max(self.at_millis)
        })
    }
}

impl EventLog {
    /// Keeps `event`, dropping the oldest past `max`, and names it as the
    /// API server does: the object's name, then something unique.
    /// Events last written more than `ttl` before `at_millis` expire first,
    /// from the oldest on (so the log stays in the order of creation: one
    /// written again lately keeps those after it a while longer).
    pub(super) fn record(
        &mut self,
        event: EventRecord,
        at_millis: i64,
        max: usize,
        ttl: Duration,
    ) -> EventRef {
        let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        while self
            .events
            .front()
            .is_some_and(|e| at_millis.saturating_sub(e.last_written_millis()) > ttl)
        {
            self.events.pop_front();
        }
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

    const HOUR: Duration = Duration::from_secs(3600);
    const MINUTE: i64 = 60_000;

    #[test]
    fn events_expire_an_hour_after_they_were_last_written() {
        let mut log = EventLog::default();
        let old = log.record(event("old"), 0, 10, HOUR);
        log.record(event("quiet"), 10 * MINUTE, 10, HOUR);
        log.record(event("fresh"), 50 * MINUTE, 10, HOUR);
        let renewed = EventSeries {
            count: 2,
            last_observed_millis: 55 * MINUTE,
        };
        assert!(log.set_series(&old.name, renewed));
        // "quiet" is past its hour but waits behind "old", written again.
        log.record(event("later"), 80 * MINUTE, 10, HOUR);
        let kept =
            |log: &EventLog| -> Vec<String> { log.to_vec().into_iter().map(|e| e.name).collect() };
        assert_eq!(kept(&log), ["old.1", "quiet.2", "fresh.3", "later.4"]);
        log.record(event("last"), 116 * MINUTE, 10, HOUR);
        assert_eq!(kept(&log), ["later.4", "last.5"]);
        assert!(!log.set_series(&old.name, renewed), "expired");
    }

    #[test]
    fn the_oldest_go_first_and_a_dropped_event_takes_no_series() {
        let mut log = EventLog::default();
        let refs: Vec<EventRef> = (0..5)
            .map(|i| log.record(event(&format!("o{i}")), i, 3, HOUR))
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
