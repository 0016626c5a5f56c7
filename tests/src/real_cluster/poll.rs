//! Waiting for the cluster to reach a state, with a deadline and a trail.
//!
//! Every wait in the real-cluster tests is a poll: the API server and the
//! host are separate processes, and nothing tells the test when they are
//! done. A wait that times out says what it waited for and what it last saw,
//! which is most of what a failed run has to say.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

/// How often a wait looks again: quick enough that a test does not idle,
/// slow enough to leave the 2 cores of a CI machine to the host.
pub const POLL_INTERVAL: Duration = Duration::from_millis(300);
/// How often a long wait says it is still waiting.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// What one look at the cluster found.
pub enum Probe<T> {
    Ready(T),
    /// Not yet; what was seen instead, for the progress and timeout lines.
    Pending(String),
}

/// Runs `probe` until it is ready, it fails, `alive` fails (the host
/// exited), or `timeout` passes. `progress` gets a line now and then.
pub(crate) async fn poll<T>(
    what: &str,
    timeout: Duration,
    alive: &dyn Fn() -> Result<()>,
    progress: &dyn Fn(String),
    mut probe: impl AsyncFnMut() -> Result<Probe<T>>,
) -> Result<T> {
    let started = Instant::now();
    let deadline = started + timeout;
    let mut next_progress = started + PROGRESS_EVERY;
    loop {
        let seen = match probe()
            .await
            .with_context(|| format!("while waiting for {what}"))?
        {
            Probe::Ready(value) => return Ok(value),
            Probe::Pending(seen) => seen,
        };
        alive().with_context(|| format!("while waiting for {what} (last seen: {seen})"))?;
        let now = Instant::now();
        if now >= deadline {
            bail!(
                "timed out after {} s waiting for {what}; last seen: {seen}",
                timeout.as_secs()
            );
        }
        if now >= next_progress {
            progress(format!(
                "still waiting for {what} ({} s); last seen: {seen}",
                started.elapsed().as_secs()
            ));
            next_progress = now + PROGRESS_EVERY;
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
