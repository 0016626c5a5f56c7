//! The pause between a watch's failed attempts, reset only by progress.
//!
//! kube's own `default_backoff` resets its backoff on every `Ok` item, and
//! the watcher yields `Ok(Init)` before each list it tries. A list that
//! keeps failing (a CRD not installed, RBAC missing) therefore never backs
//! off: the host would list about once a second forever, warning each
//! time. Here only what proves the watch works (a list completed, a change
//! seen) resets the backoff, so failures in a row wait 0.8 s, 1.6 s, ...
//! up to 30 s between attempts.

use std::time::Duration;

use futures::{Stream, StreamExt as _};
use kube::runtime::utils::Backoff as _;
use kube::runtime::watcher::{self, DefaultBackoff, Event};

/// `stream` (a `watcher`), pausing after each error as the module says.
pub fn backed_off<K, S>(stream: S) -> impl Stream<Item = watcher::Result<Event<K>>> + Send
where
    K: Send + 'static,
    S: Stream<Item = watcher::Result<Event<K>>> + Send + 'static,
{
    let state = (stream.boxed(), DefaultBackoff::default(), None::<Duration>);
    futures::stream::unfold(state, |(mut stream, mut backoff, pause)| async move {
        if let Some(pause) = pause {
            tokio::time::sleep(pause).await;
        }
        let item = stream.next().await?;
        let pause = match &item {
            Err(_) => backoff.next(),
            Ok(Event::InitDone | Event::Apply(_) | Event::Delete(_)) => {
                backoff.reset();
                None
            }
            Ok(Event::Init | Event::InitApply(_)) => None,
        };
        Some((item, (stream, backoff, pause)))
    })
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::*;

    /// The pauses before each item after the first, in whole tenths of a
    /// second (the backoff has jitter: each pause is within its step).
    async fn pauses(items: Vec<watcher::Result<Event<()>>>) -> Vec<Duration> {
        tokio::time::pause();
        let stream = backed_off(futures::stream::iter(items));
        futures::pin_mut!(stream);
        let mut last = Instant::now();
        let mut pauses = Vec::new();
        while stream.next().await.is_some() {
            pauses.push(last.elapsed());
            last = Instant::now();
        }
        pauses.remove(0);
        pauses
    }

    fn failed() -> watcher::Result<Event<()>> {
        Err(watcher::Error::NoResourceVersion)
    }

    #[tokio::test]
    async fn lists_failing_in_a_row_wait_longer_each_time_though_each_starts_with_init() {
        let mut items = Vec::new();
        for _ in 0..5 {
            items.extend([Ok(Event::Init), failed()]);
        }
        let pauses = pauses(items).await;
        // After each failure (odd items), the pause doubles: 0.8 s, 1.6 s,
        // 3.2 s, 6.4 s, give or take the jitter; Init itself waits nothing.
        let after_failures: Vec<f64> = pauses
            .iter()
            .skip(1)
            .step_by(2)
            .map(Duration::as_secs_f64)
            .collect();
        assert_eq!(after_failures.len(), 4, "{pauses:?}");
        assert!(after_failures[3] >= 3.2, "{after_failures:?}");
        assert!(
            after_failures.windows(2).all(|w| w[1] > w[0]),
            "{after_failures:?}"
        );
    }

    #[tokio::test]
    async fn a_completed_list_resets_the_pause() {
        let mut items = vec![failed(), failed(), failed()];
        items.extend([
            Ok(Event::Init),
            Ok(Event::InitDone),
            failed(),
            Ok(Event::Init),
        ]);
        let pauses = pauses(items).await;
        let after_reset = pauses.last().unwrap().as_secs_f64();
        assert!(after_reset <= 1.6, "the first step again: {pauses:?}");
        assert!(pauses[1].as_secs_f64() > after_reset, "{pauses:?}");
    }
}
