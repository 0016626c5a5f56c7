//! The driver's own watches: when each Deployment was first seen, and when
//! each PodSet's `status.podNames` was first full. Times are taken as the
//! watch event arrives, so how often a waiter looks does not change them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::podset::PodSet;

#[derive(Default)]
struct Seen {
    deployments: HashMap<String, Instant>,
    filled: HashMap<String, Instant>,
    deployments_listed: bool,
    podsets_listed: bool,
}

/// Watches all namespaces until dropped.
pub struct Observer {
    seen: Arc<Mutex<Seen>>,
    changed: Arc<Notify>,
    tasks: Vec<JoinHandle<()>>,
}

pub fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl Observer {
    /// Starts both watches and returns once both have listed what exists.
    pub async fn start(client: Client) -> anyhow::Result<Self> {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let changed = Arc::new(Notify::new());
        let deployments = {
            let (seen, changed) = (seen.clone(), changed.clone());
            let stream = watcher(
                Api::<PartialObjectMeta<Deployment>>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff();
            tokio::spawn(async move {
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    let now = Instant::now();
                    let mut seen = lock(&seen);
                    match event {
                        Ok(Event::Apply(d) | Event::InitApply(d)) => {
                            if let Some(k) = object_key(&d) {
                                seen.deployments.entry(k).or_insert(now);
                            }
                        }
                        Ok(Event::InitDone) => seen.deployments_listed = true,
                        Ok(_) => {}
                        Err(e) => eprintln!("bench-cluster: watching Deployments: {e}"),
                    }
                    drop(seen);
                    changed.notify_waiters();
                }
            })
        };
        let podsets = {
            let (seen, changed) = (seen.clone(), changed.clone());
            let stream =
                watcher(Api::<PodSet>::all(client), watcher::Config::default()).default_backoff();
            tokio::spawn(async move {
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    let now = Instant::now();
                    let mut seen = lock(&seen);
                    match event {
                        Ok(Event::Apply(p) | Event::InitApply(p)) => {
                            let full = p.pod_name_count() == p.spec.size.max(0) as usize;
                            if full
                                && let (Some(ns), Some(name)) =
                                    (&p.metadata.namespace, &p.metadata.name)
                            {
                                seen.filled.entry(key(ns, name)).or_insert(now);
                            }
                        }
                        Ok(Event::InitDone) => seen.podsets_listed = true,
                        Ok(_) => {}
                        Err(e) => eprintln!("bench-cluster: watching PodSets: {e}"),
                    }
                    drop(seen);
                    changed.notify_waiters();
                }
            })
        };
        let observer = Observer {
            seen,
            changed,
            tasks: vec![deployments, podsets],
        };
        observer
            .wait_for(
                "the driver's watches to list",
                Duration::from_secs(60),
                |s| (s.deployments_listed && s.podsets_listed).then_some(()),
                || Ok(()),
            )
            .await?;
        Ok(observer)
    }

    /// When each of `keys` had a Deployment, in their order.
    pub async fn deployments(
        &self,
        keys: &[String],
        timeout: Duration,
        still_ok: impl FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<Vec<Instant>> {
        self.wait_for(
            &format!("{} Deployments", keys.len()),
            timeout,
            |s| keys.iter().map(|k| s.deployments.get(k).copied()).collect(),
            still_ok,
        )
        .await
    }

    /// When each of `keys` had a full `status.podNames`, in their order.
    pub async fn pod_names_filled(
        &self,
        keys: &[String],
        timeout: Duration,
        still_ok: impl FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<Vec<Instant>> {
        self.wait_for(
            &format!("status.podNames of {} PodSets", keys.len()),
            timeout,
            |s| keys.iter().map(|k| s.filled.get(k).copied()).collect(),
            still_ok,
        )
        .await
    }

    /// Waits until `done` says yes, checking `still_ok` (is the controller
    /// still running?) every 100 ms.
    async fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&Seen) -> Option<T>,
        mut still_ok: impl FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<T> {
        let deadline = Instant::now() + timeout;
        loop {
            // Registered before looking, so no change between the look and
            // the wait is missed.
            let changed = self.changed.notified();
            if let Some(result) = done(&lock(&self.seen)) {
                return Ok(result);
            }
            still_ok()?;
            let now = Instant::now();
            if now >= deadline {
                bail!("timed out after {timeout:?} waiting for {what}");
            }
            let _ = tokio::time::timeout((deadline - now).min(Duration::from_millis(100)), changed)
                .await;
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn object_key(d: &PartialObjectMeta<Deployment>) -> Option<String> {
    Some(key(
        d.metadata.namespace.as_deref()?,
        d.metadata.name.as_deref()?,
    ))
}

fn lock(seen: &Mutex<Seen>) -> std::sync::MutexGuard<'_, Seen> {
    seen.lock().unwrap_or_else(|e| e.into_inner())
}
