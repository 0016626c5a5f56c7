//! Hot reload beside the loop that serves the plugins.
//!
//! Loading a plugin compiles it (tens of milliseconds in release, seconds
//! for a component of tens of MiB) and calls its `metadata`; starting it
//! waits for its kinds' first lists. Done inside the loop that dispatches
//! reconciles, all of that stalls every plugin already serving, and objects
//! added meanwhile wait with them. So after the first sync (which `dev` and `run` wait for, as
//! nothing serves yet) the plugins directory is synced by a task of its own,
//! each load bounded by `--plugin-load-timeout-secs`; the loop hears what
//! changed through a channel and keeps dispatching meanwhile. The engine
//! takes plugins in and out between reconciles, so the two never race on a
//! plugin.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use tokio::sync::oneshot;

use super::hot_reload::{PluginDirectory, PluginStatus, ReloadEvent};
use super::plugin_host::PluginHost;

/// What one sync changed, and the directory as it stands after it.
#[derive(Debug)]
pub struct ReloadUpdate {
    pub events: Vec<ReloadEvent>,
    pub status: Vec<PluginStatus>,
    /// Versions refused since the host started.
    pub failures: u64,
}

/// The task that keeps an engine in line with its plugins directory.
/// Dropping it stops the task.
pub struct BackgroundReload {
    updates: mpsc::UnboundedReceiver<ReloadUpdate>,
    task: JoinHandle<Option<(PluginDirectory, mpsc::UnboundedReceiver<()>)>>,
    stop: Option<oneshot::Sender<()>>,
}

impl BackgroundReload {
    /// Syncs `plugins` into `engine` whenever `changes` says the directory
    /// changed and, with `retry_every`, retries plugins waiting for their
    /// kinds that often. Stops when `changes` closes.
    pub fn start<H: PluginHost + 'static>(
        mut plugins: PluginDirectory,
        engine: Arc<H>,
        mut changes: mpsc::UnboundedReceiver<()>,
        retry_every: Option<Duration>,
    ) -> Self {
        let (tx, updates) = mpsc::unbounded_channel();
        let (stop, mut stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            // Without retries the timer is never polled; any period does.
            let mut retry = tokio::time::interval(retry_every.unwrap_or(Duration::from_secs(3600)));
            retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            retry.reset();
            loop {
                let events = tokio::select! {
                    _ = &mut stopped => return Some((plugins, changes)),
                    change = changes.recv() => {
                        if change.is_none() {
                            break;
                        }
                        // One sync for a burst of changes.
                        while changes.try_recv().is_ok() {}
                        plugins.sync(&engine).await
                    }
                    _ = retry.tick(), if retry_every.is_some() && plugins.waiting() => {
                        plugins.retry_waiting(&engine).await
                    }
                };
                let update = ReloadUpdate {
                    events,
                    status: plugins.status(),
                    failures: plugins.failures(),
                };
                if tx.send(update).is_err() {
                    break;
                }
            }
            None
        });
        Self {
            updates,
            task,
            stop: Some(stop),
        }
    }

    /// Stops the task between two syncs and hands back the directory and
    /// its change feed, to serve into another host (the engine, once this
    /// replica leads). `None` if the task had ended.
    pub async fn stop(mut self) -> Option<(PluginDirectory, mpsc::UnboundedReceiver<()>)> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.ok().flatten()
    }

    /// The next update. Once the task has stopped this never resolves, so it
    /// can sit in a `select!` beside other work.
    pub async fn next(&mut self) -> ReloadUpdate {
        match self.updates.recv().await {
            Some(update) => update,
            None => std::future::pending().await,
        }
    }
}

impl Drop for BackgroundReload {
    fn drop(&mut self) {
        self.task.abort();
    }
}
