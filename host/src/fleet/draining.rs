//! Members being stopped, until their reconciles in flight are over.
//!
//! A member leaves the fleet's map the moment it is disengaged or replaced,
//! but its engine may still be writing: its reconciles in flight drain for
//! up to the stop's bound. Those still count. The shard ring's settle mark
//! must not be written while a reconcile of a key this replica gave up
//! still runs, and a stop must not report nothing in flight while
//! something is. So a stopping member's engine is kept here until its stop
//! returns, which it does only once every one of its reconciles has ended
//! (drained, or aborted and awaited: [`Dispatcher::drain`]).
//!
//! [`Dispatcher::drain`]: crate::engine::Dispatcher::drain

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::member::{Member, Stopped};
use crate::cluster::ClusterBackend;
use crate::engine::Engine;

/// A stopping member's name and engine, by stop.
type ByStop<B> = BTreeMap<u64, (String, Arc<Engine<B>>)>;

/// The engines of members being stopped.
pub struct Draining<B: ClusterBackend> {
    next: AtomicU64,
    engines: Arc<Mutex<ByStop<B>>>,
}

impl<B: ClusterBackend> Default for Draining<B> {
    fn default() -> Self {
        Self {
            next: AtomicU64::new(0),
            engines: Arc::default(),
        }
    }
}

impl<B: ClusterBackend + 'static> Draining<B> {
    /// Stops `member` (draining up to `within`), counting its engine here
    /// until the stop is over; the future owns what it needs, so it may be
    /// spawned. The receiver turns true when it is over.
    /// The future ends with how many reconciles the stop abandoned.
    pub fn stop(
        &self,
        member: Member<B>,
        within: Duration,
    ) -> (impl Future<Output = usize> + use<B>, Stopped) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let name = member.identity().name.clone();
        lock(&self.engines).insert(id, (name, member.engine()));
        let engines = self.engines.clone();
        let (done, stopped) = watch::channel(false);
        let stopping = async move {
            let abandoned = member.stop(within).await;
            lock(&engines).remove(&id);
            let _ = done.send(true);
            abandoned
        };
        (stopping, stopped)
    }

    /// The engines still draining, with their members' names (a name may
    /// appear twice, and beside an engaged member of the same name).
    pub fn engines(&self) -> Vec<(String, Arc<Engine<B>>)> {
        lock(&self.engines).values().cloned().collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
