//! Deadlines of plugin calls: wasmtime interrupts a call when the engine's
//! epoch passes the call's deadline, so something must advance the epoch.
//! A thread of its own does, and only while a call runs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::Engine;

/// How often the epoch advances: the granularity of deadlines.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Advances the engine's epoch every [`EPOCH_TICK`] while a call runs, and
/// waits without waking while none does: an idle host spends no CPU time on
/// deadlines nobody is under. A store's deadline counts ticks from its
/// creation, and a call holds [`Running`] from before its store is made
/// until it returns, so every tick a deadline counts happens during a call.
pub(crate) struct EpochTicker {
    shared: Arc<TickerShared>,
    thread: Option<JoinHandle<()>>,
}

struct TickerShared {
    state: Mutex<TickerState>,
    wake: Condvar,
    ticks: AtomicU64,
}

#[derive(Default)]
struct TickerState {
    /// Calls under a deadline right now.
    running: usize,
    stop: bool,
}

impl TickerShared {
    fn state(&self) -> MutexGuard<'_, TickerState> {
        // The state is two plain fields, never left half-written.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A call under a deadline: the epoch advances while one is alive.
pub(crate) struct Running<'a>(&'a TickerShared);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.state().running -= 1;
    }
}

impl EpochTicker {
    pub(crate) fn start(engine: Engine) -> Self {
        let shared = Arc::new(TickerShared {
            state: Mutex::new(TickerState::default()),
            wake: Condvar::new(),
            ticks: AtomicU64::new(0),
        });
        let ticker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("epoch-ticker".into())
            .spawn(move || ticker.run(&engine))
            .expect("spawn the epoch ticker thread");
        Self {
            shared,
            thread: Some(thread),
        }
    }

    /// Keeps the epoch advancing until the returned guard is dropped.
    pub(crate) fn running(&self) -> Running<'_> {
        let mut state = self.shared.state();
        state.running += 1;
        if state.running == 1 {
            self.shared.wake.notify_one();
        }
        Running(&self.shared)
    }

    pub(crate) fn ticks(&self) -> u64 {
        self.shared.ticks.load(Ordering::Relaxed)
    }
}

impl TickerShared {
    fn run(&self, engine: &Engine) {
        loop {
            let mut state = self.state();
            while state.running == 0 && !state.stop {
                state = self
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if state.stop {
                return;
            }
            drop(state);
            std::thread::sleep(EPOCH_TICK);
            // Calls that ended during the sleep need no tick; one that
            // started during it has its deadline counted from its start.
            if self.state().running > 0 {
                engine.increment_epoch();
                self.ticks.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.shared.state().stop = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
