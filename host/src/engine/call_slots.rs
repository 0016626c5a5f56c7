//! Slots for sandbox calls: the instance pool, shared fairly between
//! plugins.
//!
//! A reconcile spends microseconds in the sandbox and milliseconds waiting
//! on the API server, so the two are bounded apart: a plugin may have many
//! reconciles in flight (its concurrency), while only the calls themselves
//! take an instance from the pool. A reconcile holds a slot from just
//! before its call until the call returns, never across an API round trip.
//!
//! The pool is divided as [`instance_share`](super::instance_share) says:
//! while other plugins have calls waiting, no plugin holds more than its
//! share, so a plugin whose calls run to their deadline cannot keep the
//! others out of the sandbox. A call that cannot start waits here (its
//! deadline starts with the call, not the wait).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use super::instance_share::{PluginLoad, may_start};

#[derive(Debug, Default)]
struct PluginCalls {
    running: usize,
    waiting: usize,
    /// The most calls of this plugin at once: its reconcile concurrency.
    concurrency: usize,
}

#[derive(Debug, Default)]
struct State {
    /// By plugin name: the order every decision sees them in.
    plugins: BTreeMap<String, PluginCalls>,
}

/// The sandbox's instance pool as the engine hands it out.
#[derive(Debug)]
pub struct CallSlots {
    capacity: usize,
    state: Mutex<State>,
    freed: Notify,
    /// Calls started so far.
    started: AtomicU64,
}

/// One call's instance; given back when dropped, whatever the call did.
#[derive(Debug)]
pub struct CallSlot {
    slots: Arc<CallSlots>,
    plugin: String,
}

impl CallSlots {
    /// A pool of `capacity` instances (at least one).
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            capacity: capacity.max(1),
            state: Mutex::default(),
            freed: Notify::new(),
            started: AtomicU64::new(0),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for an instance for one call of `plugin`, which may run at
    /// most `concurrency` calls at once.
    pub async fn acquire(self: &Arc<Self>, plugin: &str, concurrency: usize) -> CallSlot {
        let mut queued = false;
        loop {
            // Registered before deciding, so a slot freed in between wakes
            // this waiter rather than passing it by.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut state = self.state();
                let calls = state.plugins.entry(plugin.to_string()).or_default();
                calls.concurrency = concurrency.max(1);
                if !queued {
                    calls.waiting += 1;
                    queued = true;
                }
                if self.may_start(&state, plugin) {
                    let calls = state.plugins.get_mut(plugin).expect("inserted above");
                    calls.waiting -= 1;
                    calls.running += 1;
                    self.started.fetch_add(1, Ordering::SeqCst);
                    return CallSlot {
                        slots: self.clone(),
                        plugin: plugin.to_string(),
                    };
                }
            }
            // Cancelled while waiting: nothing is held, but the wait
            // count must not stay raised (see `WaitGuard`).
            let guard = WaitGuard {
                slots: self,
                plugin,
            };
            freed.await;
            std::mem::forget(guard);
        }
    }

    fn may_start(&self, state: &State, plugin: &str) -> bool {
        let loads: Vec<PluginLoad> = state
            .plugins
            .values()
            .map(|c| PluginLoad {
                in_flight: c.running,
                concurrency: c.concurrency,
                waiting: c.waiting > 0,
            })
            .collect();
        let Some(index) = state.plugins.keys().position(|name| name == plugin) else {
            return false;
        };
        may_start(&loads, index, self.capacity)
    }

    fn release(&self, plugin: &str) {
        {
            let mut state = self.state();
            if let Some(calls) = state.plugins.get_mut(plugin) {
                calls.running = calls.running.saturating_sub(1);
                if calls.running == 0 && calls.waiting == 0 {
                    state.plugins.remove(plugin);
                }
            }
        }
        // Every waiter decides again: which one may start depends on the
        // shares, not on who waited first.
        self.freed.notify_waiters();
    }

    /// Calls waiting for an instance now, all plugins together.
    pub fn waiting(&self) -> usize {
        self.state().plugins.values().map(|c| c.waiting).sum()
    }

    /// Calls running now, all plugins together.
    pub fn running(&self) -> usize {
        self.state().plugins.values().map(|c| c.running).sum()
    }

    /// Resolves once no call has run or waited for `pause` (once none
    /// runs, for a zero pause). Cancel-safe.
    pub async fn paused_for(&self, pause: Duration) {
        loop {
            self.idle().await;
            if pause.is_zero() {
                return;
            }
            let mark = self.started.load(Ordering::SeqCst);
            tokio::time::sleep(pause).await;
            if self.started.load(Ordering::SeqCst) == mark && self.state().plugins.is_empty() {
                return;
            }
        }
    }

    /// Resolves once no call runs or waits (at once if none does).
    /// Cancel-safe.
    pub async fn idle(&self) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.state().plugins.is_empty() {
                return;
            }
            freed.await;
        }
    }
}

impl Drop for CallSlot {
    fn drop(&mut self) {
        self.slots.release(&self.plugin);
    }
}

/// Lowers a plugin's wait count when a wait is dropped before it ends.
struct WaitGuard<'a> {
    slots: &'a CallSlots,
    plugin: &'a str,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.slots.state();
        if let Some(calls) = state.plugins.get_mut(self.plugin) {
            calls.waiting = calls.waiting.saturating_sub(1);
            if calls.running == 0 && calls.waiting == 0 {
                state.plugins.remove(self.plugin);
            }
        }
        drop(state);
        // Its claim on a share is gone: others may now fit.
        self.slots.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Whether `fut` completes without waiting.
    async fn now<F: Future>(fut: F) -> Option<F::Output> {
        tokio::time::timeout(Duration::from_millis(20), fut)
            .await
            .ok()
    }

    #[tokio::test]
    async fn a_plugin_alone_uses_the_pool_up_to_its_concurrency() {
        let slots = CallSlots::new(4);
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(now(slots.acquire("a", 3)).await.expect("free"));
        }
        assert!(
            now(slots.acquire("a", 3)).await.is_none(),
            "its concurrency"
        );
        held.push(now(slots.acquire("b", 3)).await.expect("the pool has one"));
        assert_eq!(slots.running(), 4);
        assert!(
            now(slots.acquire("b", 3)).await.is_none(),
            "the pool is full"
        );
    }

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_plugin_below_its_share() {
        let slots = CallSlots::new(2);
        let first = slots.acquire("greedy", 64).await;
        let second = slots.acquire("greedy", 64).await;
        // Both wait: greedy for a third slot, other for its first.
        let greedy = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire("greedy", 64).await }
        });
        let other = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire("other", 64).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first);
        let other = now(other).await.expect("other starts").unwrap();
        assert!(!greedy.is_finished(), "greedy is at its share of one");
        drop(second);
        let greedy = now(greedy).await.expect("greedy gets the next").unwrap();
        assert_eq!(slots.running(), 2);
        drop((other, greedy));
        assert_eq!(slots.running(), 0);
    }

    #[tokio::test]
    async fn idle_waits_until_the_last_call_is_given_back() {
        let slots = CallSlots::new(2);
        slots.idle().await;
        let (a, b) = (slots.acquire("a", 2).await, slots.acquire("b", 2).await);
        let waiter = tokio::spawn({
            let slots = slots.clone();
            async move { slots.idle().await }
        });
        drop(a);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one call still runs");
        drop(b);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("idle once no call runs")
            .unwrap();
    }

    #[tokio::test]
    async fn an_abandoned_wait_leaves_no_claim_behind() {
        let slots = CallSlots::new(1);
        let held = slots.acquire("a", 4).await;
        assert!(now(slots.acquire("b", 4)).await.is_none());
        drop(held);
        // b gave up waiting: a alone again, with the whole pool.
        assert!(now(slots.acquire("a", 4)).await.is_some());
        assert!(!slots.state().plugins.contains_key("b"));
    }
}
