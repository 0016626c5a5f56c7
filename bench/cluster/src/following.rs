//! Samples of "a PodSet's spec changed; when did its Deployment follow?":
//! the driver sends a create or a size change, notes it here, and its own
//! watch of the Deployments marks the sample done the moment it sees the
//! Deployment at that size. The time is taken as the watch event arrives,
//! so how often anyone looks does not change it. The moves probe keys and
//! the churn's changes are both measured this way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::runtime::watcher::{self, Event, watcher};

/// One change sent, and when its Deployment followed.
#[derive(Clone, Debug)]
pub struct Sample {
    pub sent: Instant,
    pub name: String,
    pub size: i32,
    /// When the API server answered the request.
    pub acked: Option<Instant>,
    pub done: Option<Instant>,
    /// The request failed: no latency.
    pub failed: bool,
}

#[derive(Default)]
struct Book {
    samples: Vec<Sample>,
    /// The sample each name waits on, by its index.
    pending: HashMap<String, usize>,
}

/// Every sample of a run, shared by the driver and its watch.
#[derive(Default)]
pub struct Samples(Mutex<Book>);

impl Samples {
    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes a change of `name` to `size` sent at `sent`; returns its index.
    /// A newer change of the same name takes over the wait: the older one
    /// stays undone.
    pub fn sent(&self, name: &str, size: i32, sent: Instant) -> usize {
        let mut book = self.lock();
        let i = book.samples.len();
        book.samples.push(Sample {
            sent,
            name: name.to_string(),
            size,
            acked: None,
            done: None,
            failed: false,
        });
        book.pending.insert(name.to_string(), i);
        i
    }

    /// The API server answered sample `i`'s request (or refused it).
    pub fn answered(&self, i: usize, ok: bool) {
        let now = Instant::now();
        let mut book = self.lock();
        let Some(sample) = book.samples.get_mut(i) else {
            return;
        };
        sample.acked = Some(now);
        sample.failed = !ok;
        if !ok {
            let name = sample.name.clone();
            if book.pending.get(&name) == Some(&i) {
                book.pending.remove(&name);
            }
        }
    }

    /// Whether `name` has a change whose Deployment has not followed yet.
    pub fn is_pending(&self, name: &str) -> bool {
        self.lock().pending.contains_key(name)
    }

    /// The watch saw `name`'s Deployment at `replicas` at `at`.
    fn seen(&self, name: &str, replicas: i32, at: Instant) {
        let mut book = self.lock();
        let Some(&i) = book.pending.get(name) else {
            return;
        };
        if book.samples[i].size == replicas {
            book.samples[i].done = Some(at);
            book.pending.remove(name);
        }
    }

    /// The latencies of the samples sent in `[from, to)` whose name `keep`
    /// says yes to, failed requests left out; one never followed counts as
    /// the time to now.
    pub fn latencies(
        &self,
        from: Instant,
        to: Instant,
        keep: impl Fn(&str) -> bool,
    ) -> Vec<Duration> {
        self.of(from, to, keep, |s| s.done)
    }

    /// How long the API server took to answer each request sent in
    /// `[from, to)`; one not answered yet counts as the time to now.
    pub fn answers(&self, from: Instant, to: Instant) -> Vec<Duration> {
        self.of(from, to, |_| true, |s| s.acked)
    }

    fn of(
        &self,
        from: Instant,
        to: Instant,
        keep: impl Fn(&str) -> bool,
        end: impl Fn(&Sample) -> Option<Instant>,
    ) -> Vec<Duration> {
        let now = Instant::now();
        self.lock()
            .samples
            .iter()
            .filter(|s| !s.failed && s.sent >= from && s.sent < to && keep(&s.name))
            .map(|s| end(s).unwrap_or(now).saturating_duration_since(s.sent))
            .collect()
    }

    /// Requests sent in `[from, to)` that failed.
    pub fn failures(&self, from: Instant, to: Instant) -> usize {
        self.lock()
            .samples
            .iter()
            .filter(|s| s.failed && s.sent >= from && s.sent < to)
            .count()
    }
}

/// Marks each sample done when the driver's watch of `namespace`'s
/// Deployments sees its Deployment at its size. Returns once the watch has
/// listed; the task runs until aborted.
pub async fn follow_deployments(
    client: kube::Client,
    namespace: &str,
    samples: Arc<Samples>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let (listed, is_listed) = tokio::sync::oneshot::channel();
    let api = Api::<Deployment>::namespaced(client, namespace);
    let what = format!("the Deployments of {namespace}");
    let task = {
        let what = what.clone();
        tokio::spawn(async move {
            let stream = watcher(api, watcher::Config::default());
            let mut stream = std::pin::pin!(stream);
            let mut listed = Some(listed);
            while let Some(event) = stream.next().await {
                let now = Instant::now();
                match event {
                    Ok(Event::Apply(d)) => {
                        if let (Some(name), Some(replicas)) = (
                            d.metadata.name.as_deref(),
                            d.spec.as_ref().and_then(|s| s.replicas),
                        ) {
                            samples.seen(name, replicas, now);
                        }
                    }
                    Ok(Event::InitDone) => {
                        if let Some(tx) = listed.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(_) => {}
                    Err(e) => eprintln!("bench-cluster: watching {what}: {e}"),
                }
            }
        })
    };
    tokio::time::timeout(Duration::from_secs(60), is_listed)
        .await
        .with_context(|| format!("{what} were not listed within 60 s"))?
        .with_context(|| format!("the watch of {what} ended"))?;
    Ok(task)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_never_followed_counts_until_now_and_others_by_their_key() {
        let samples = Samples::default();
        let start = Instant::now();
        for (i, name) in ["kept", "moved", "lost"].iter().enumerate() {
            let at = start + Duration::from_millis(i as u64);
            samples.sent(name, 1, at);
            if *name != "lost" {
                samples.seen(name, 1, start + Duration::from_millis(50));
            }
        }
        let end = start + Duration::from_secs(1);
        let read_at = Instant::now();
        let kept = samples.latencies(start, end, |k| k != "moved");
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[0], Duration::from_millis(50));
        let lost_sent = start + Duration::from_millis(2);
        assert!(kept[1] >= read_at.saturating_duration_since(lost_sent));
        assert!(samples.latencies(end, end, |_| true).is_empty());
    }

    #[test]
    fn a_deployment_at_another_size_or_a_failed_request_is_no_sample_done() {
        let samples = Samples::default();
        let start = Instant::now();
        let i = samples.sent("web", 2, start);
        samples.seen("web", 1, start + Duration::from_millis(5));
        assert!(samples.is_pending("web"), "still at the old size");
        samples.seen("web", 2, start + Duration::from_millis(9));
        assert!(!samples.is_pending("web"));
        samples.answered(i, true);
        let j = samples.sent("db", 1, start);
        samples.answered(j, false);
        assert!(
            !samples.is_pending("db"),
            "a refused change is not waited on"
        );
        let end = start + Duration::from_secs(1);
        assert_eq!(
            samples.latencies(start, end, |_| true),
            vec![Duration::from_millis(9)]
        );
        assert_eq!(samples.failures(start, end), 1);
    }
}
