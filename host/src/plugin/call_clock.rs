//! The time one call sees: WASI's monotonic and wall clocks, the host's
//! `clock` import, and the timers a plugin waits on.
//!
//! Every call starts at the host clock's time (the virtual clock in
//! `simulate` and `test`, the real one in `run` and `dev`) and from then on
//! its time moves only when the plugin waits: a sleep of 50 ms returns at
//! once and the clocks read 50 ms later. So what a reconcile sees of time is
//! a function of its inputs, and a `simulate` run that measures an `Instant`
//! prints the same every time. A reconcile decides from what it is shown; it
//! has nothing to wait for, as nothing it can observe changes during a call.
//!
//! Waiting is bounded by the call's deadline: the total a plugin may wait is
//! its timeout, and a wait past it ends the call with
//! [`CallError::Timeout`](super::CallError::Timeout) at once (see
//! `bounded_waits.rs`). Computing is bounded separately, in real time, by
//! epoch interruption.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use wasmtime_wasi::p2::Pollable;

/// Nanoseconds per millisecond.
const NANOS_PER_MILLI: u64 = 1_000_000;

/// A call's clock. Shared (by `Arc`) between WASI's clocks, the timers the
/// plugin creates and the host functions that wait on them; all of them run
/// on the call's one thread, so relaxed atomics are enough.
pub(crate) struct CallClock {
    /// The host clock when the call started, in ms since the Unix epoch.
    start_millis: u64,
    /// Nanoseconds the plugin has waited so far.
    waited: AtomicU64,
    /// The most it may wait in total: the call's deadline.
    budget: u64,
    /// The earliest due time of the timers found pending while polling, or
    /// `u64::MAX`: what a wait would have to advance the clock to.
    wanted: AtomicU64,
}

impl CallClock {
    pub(crate) fn new(now_millis: i64, deadline: Duration) -> Arc<Self> {
        Arc::new(Self {
            start_millis: u64::try_from(now_millis).unwrap_or(0),
            waited: AtomicU64::new(0),
            budget: u64::try_from(deadline.as_nanos()).unwrap_or(u64::MAX),
            wanted: AtomicU64::new(u64::MAX),
        })
    }

    /// WASI monotonic time: nanoseconds, starting at the host clock's time.
    pub(crate) fn monotonic_now(&self) -> u64 {
        self.start_millis
            .saturating_mul(NANOS_PER_MILLI)
            .saturating_add(self.waited.load(Ordering::Relaxed))
    }

    /// Wall-clock time, since the Unix epoch.
    pub(crate) fn wall_now(&self) -> Duration {
        Duration::from_millis(self.start_millis)
            + Duration::from_nanos(self.waited.load(Ordering::Relaxed))
    }

    /// The host `clock` import: milliseconds since the Unix epoch.
    pub(crate) fn now_millis(&self) -> i64 {
        i64::try_from(self.wall_now().as_millis()).unwrap_or(i64::MAX)
    }

    /// A timer due at monotonic time `due`.
    pub(crate) fn timer(self: &Arc<Self>, due: u64) -> Timer {
        Timer {
            clock: self.clone(),
            due,
        }
    }

    /// A timer due `nanos` from now.
    pub(crate) fn timer_after(self: &Arc<Self>, nanos: u64) -> Timer {
        self.timer(self.monotonic_now().saturating_add(nanos))
    }

    /// Starts looking for the earliest pending timer of one poll.
    pub(crate) fn begin_poll(&self) {
        self.wanted.store(u64::MAX, Ordering::Relaxed);
    }

    /// The earliest due time of the timers found pending since
    /// [`Self::begin_poll`].
    pub(crate) fn earliest_pending(&self) -> Option<u64> {
        Some(self.wanted.load(Ordering::Relaxed)).filter(|due| *due != u64::MAX)
    }

    /// Moves time forward to `due`, if the call may wait that long; returns
    /// false, leaving time alone, if that would pass its deadline.
    pub(crate) fn advance_to(&self, due: u64) -> bool {
        let start = self.start_millis.saturating_mul(NANOS_PER_MILLI);
        let waited = due.saturating_sub(start);
        if waited > self.budget {
            return false;
        }
        self.waited.fetch_max(waited, Ordering::Relaxed);
        true
    }

    fn note_pending(&self, due: u64) {
        self.wanted.fetch_min(due, Ordering::Relaxed);
    }
}

/// What `subscribe-duration` and `subscribe-instant` return: ready once the
/// call's clock reaches `due`. Never woken by anything real; only a wait
/// (`bounded_waits.rs`) moves the clock.
pub(crate) struct Timer {
    clock: Arc<CallClock>,
    due: u64,
}

#[wasmtime_wasi::async_trait]
impl Pollable for Timer {
    async fn ready(&mut self) {
        if self.clock.monotonic_now() >= self.due {
            return;
        }
        self.clock.note_pending(self.due);
        std::future::pending::<()>().await
    }
}

/// WASI's monotonic clock for one call.
pub(crate) struct MonotonicClock(pub Arc<CallClock>);

impl wasmtime_wasi::HostMonotonicClock for MonotonicClock {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        self.0.monotonic_now()
    }
}

/// WASI's wall clock for one call: the host clock, so a plugin that reads
/// the time through std still sees the virtual time of a test or simulation.
pub(crate) struct WallClock(pub Arc<CallClock>);

impl wasmtime_wasi::HostWallClock for WallClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }

    fn now(&self) -> Duration {
        self.0.wall_now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_starts_at_the_host_clock_and_moves_only_by_waits() {
        let clock = CallClock::new(1_500, Duration::from_secs(1));
        assert_eq!(clock.monotonic_now(), 1_500 * NANOS_PER_MILLI);
        assert_eq!(clock.now_millis(), 1_500);
        assert!(clock.advance_to(clock.monotonic_now() + 250 * NANOS_PER_MILLI));
        assert_eq!(clock.now_millis(), 1_750);
        assert_eq!(clock.wall_now(), Duration::from_millis(1_750));
    }

    #[test]
    fn a_wait_past_the_deadline_is_refused_and_leaves_time_alone() {
        let clock = CallClock::new(0, Duration::from_millis(100));
        assert!(
            clock.advance_to(100 * NANOS_PER_MILLI),
            "up to the deadline"
        );
        assert!(!clock.advance_to(100 * NANOS_PER_MILLI + 1));
        assert_eq!(clock.now_millis(), 100);
    }

    #[test]
    fn time_never_moves_back() {
        let clock = CallClock::new(0, Duration::from_secs(1));
        assert!(clock.advance_to(50));
        assert!(clock.advance_to(10), "a timer already due");
        assert_eq!(clock.monotonic_now(), 50);
    }

    #[test]
    fn a_poll_finds_the_earliest_pending_timer() {
        let clock = CallClock::new(0, Duration::from_secs(1));
        clock.begin_poll();
        assert_eq!(clock.earliest_pending(), None);
        clock.note_pending(30);
        clock.note_pending(20);
        assert_eq!(clock.earliest_pending(), Some(20));
        clock.begin_poll();
        assert_eq!(clock.earliest_pending(), None);
    }
}
