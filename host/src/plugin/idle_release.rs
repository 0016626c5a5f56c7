//! Handing back the memory a plugin's instance slots hold once it is idle.
//!
//! A slot keeps its plugin's initial memory image mapped between instances
//! (sandbox.rs: only the pages an instance wrote are reset), and every page
//! an instance read stays in that slot's page tables. A burst of concurrent
//! reconciles uses one slot per call running at once, so a Python plugin,
//! whose instances read most of a 13 MiB image, leaves each of them holding
//! megabytes: measured after 1,000 PodSets, 85 MiB of the host's RSS was
//! the same compiled file mapped 39 times.
//!
//! wasmtime releases a module's slots only when the module is dropped. So a
//! plugin that ran calls at once and has then been idle for
//! [`IDLE_BEFORE_RELEASE`] has its compiled component loaded afresh from the
//! compile cache (well under a millisecond) and the old one dropped; its
//! slots' mappings go with it. Calls are unaffected: each call instantiates
//! afresh anyway, a call running meanwhile keeps the old component until it
//! ends, and the next one faults in the pages it reads. A plugin whose calls
//! never overlapped is left alone: its one slot holds what its next call
//! reads. A release costs a few milliseconds and happens at most once per
//! burst, so it is a fraction of a percent of a core however calls come.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wasmtime::Engine;
use wasmtime::component::Linker;

use super::bindings::PluginPre;
use super::call_state::CallState;
use super::compile_cache::CompileCache;

/// How long a plugin goes without a call after a burst before its slots
/// are released: long enough that a burst's calls do not pay for it.
pub const IDLE_BEFORE_RELEASE: Duration = Duration::from_millis(250);

/// A plugin's prepared component, which the releaser may swap for a fresh
/// copy of the same compiled code.
pub(crate) struct Prepared {
    current: Mutex<PluginPre<CallState>>,
    /// Calls running now.
    in_flight: AtomicUsize,
    /// The most calls that ran at once since the last release.
    peak: AtomicUsize,
    /// How to prepare the copy, and who to tell of calls; `None` where the
    /// compiled code is not in a compile cache (nothing to load it from).
    release: Option<Release>,
}

struct Release {
    fresh: Fresh,
    releaser: Arc<ReleaserShared>,
}

/// What loads the same compiled component again.
pub(crate) struct Fresh {
    pub engine: Engine,
    pub linker: Linker<CallState>,
    pub cache: CompileCache,
    pub sha256: String,
    /// Names the plugin in logs.
    pub plugin: String,
}

impl Prepared {
    /// A component that stays as loaded.
    pub fn fixed(pre: PluginPre<CallState>) -> Arc<Self> {
        Self::new(pre, None)
    }

    /// A component that `releaser` reloads from `fresh` once it is idle.
    pub fn releasable(
        pre: PluginPre<CallState>,
        fresh: Fresh,
        releaser: &IdleReleaser,
    ) -> Arc<Self> {
        let releaser = releaser.shared.clone();
        Self::new(pre, Some(Release { fresh, releaser }))
    }

    fn new(pre: PluginPre<CallState>, release: Option<Release>) -> Arc<Self> {
        Arc::new(Self {
            current: Mutex::new(pre),
            in_flight: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            release,
        })
    }

    /// The component to instantiate for a call starting now, held for as
    /// long as the call runs.
    pub fn for_call(self: &Arc<Self>) -> ForCall<'_> {
        let pre = self.lock().clone();
        let running = self.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        self.peak.fetch_max(running, Ordering::AcqRel);
        if let Some(release) = &self.release {
            release.releaser.used(self);
        }
        ForCall {
            pre,
            prepared: self,
        }
    }

    fn lock(&self) -> MutexGuard<'_, PluginPre<CallState>> {
        // Swapped whole under the lock, never left half-written.
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Loads the component afresh and drops the one the slots are affine
    /// to. A failure keeps the current one: only memory stays held.
    fn release(&self) {
        let Some(Release { fresh, .. }) = &self.release else {
            return;
        };
        let reloaded = fresh
            .cache
            .reload(&fresh.engine, &fresh.sha256)
            .and_then(|component| PluginPre::new(fresh.linker.instantiate_pre(&component)?));
        match reloaded {
            Ok(pre) => {
                let old = std::mem::replace(&mut *self.lock(), pre);
                // Dropped outside the lock: dropping the last reference to a
                // module hands its slots back.
                drop(old);
                tracing::debug!(plugin = %fresh.plugin, "idle: instance slots released");
            }
            Err(e) => tracing::debug!(
                plugin = %fresh.plugin,
                "idle: cannot reload the compiled plugin to release its slots: {e:#}"
            ),
        }
    }
}

/// A call's component; the call counts as running until this is dropped.
pub(crate) struct ForCall<'a> {
    pre: PluginPre<CallState>,
    prepared: &'a Prepared,
}

impl std::ops::Deref for ForCall<'_> {
    type Target = PluginPre<CallState>;

    fn deref(&self) -> &Self::Target {
        &self.pre
    }
}

impl Drop for ForCall<'_> {
    fn drop(&mut self) {
        self.prepared.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the releaser does with a plugin whose idle time has come.
#[derive(Debug, PartialEq, Eq)]
enum Idle {
    /// A call is still running: look again later.
    Running,
    /// Its calls overlapped since the last release: several slots hold its
    /// pages.
    Release,
    /// Its calls ran one at a time: the one slot keeps what the next reads.
    Keep,
}

impl Prepared {
    fn idle(&self) -> Idle {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return Idle::Running;
        }
        if self.peak.swap(0, Ordering::AcqRel) > 1 {
            Idle::Release
        } else {
            Idle::Keep
        }
    }
}

/// The thread that releases idle plugins' slots. It sleeps without waking
/// while no plugin has been called since its last release.
pub(crate) struct IdleReleaser {
    shared: Arc<ReleaserShared>,
    thread: Option<JoinHandle<()>>,
}

struct ReleaserShared {
    state: Mutex<ReleaserState>,
    wake: Condvar,
    idle_for: Duration,
}

#[derive(Default)]
struct ReleaserState {
    /// Plugins called since their last release, by address, with the start
    /// of their latest call.
    used: HashMap<usize, (Weak<Prepared>, Instant)>,
    stop: bool,
}

impl IdleReleaser {
    pub fn start() -> Self {
        Self::start_after(IDLE_BEFORE_RELEASE)
    }

    fn start_after(idle_for: Duration) -> Self {
        let shared = Arc::new(ReleaserShared {
            state: Mutex::new(ReleaserState::default()),
            wake: Condvar::new(),
            idle_for,
        });
        let releaser = shared.clone();
        let thread = std::thread::Builder::new()
            .name("idle-release".into())
            .spawn(move || releaser.run())
            .expect("spawn the idle release thread");
        Self {
            shared,
            thread: Some(thread),
        }
    }
}

impl ReleaserShared {
    fn state(&self) -> MutexGuard<'_, ReleaserState> {
        // Plain fields, never left half-written.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn used(&self, prepared: &Arc<Prepared>) {
        let key = Arc::as_ptr(prepared) as usize;
        let mut state = self.state();
        let first = state.used.is_empty();
        state
            .used
            .insert(key, (Arc::downgrade(prepared), Instant::now()));
        if first {
            self.wake.notify_one();
        }
    }

    fn run(&self) {
        let mut state = self.state();
        loop {
            if state.stop {
                return;
            }
            let now = Instant::now();
            let Some(next) = state.used.values().map(|(_, at)| *at + self.idle_for).min() else {
                state = self
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            };
            if next > now {
                state = self
                    .wake
                    .wait_timeout(state, next - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
                continue;
            }
            let idle_for = self.idle_for;
            let mut due = Vec::new();
            state.used.retain(|_, (prepared, at)| {
                let Some(prepared) = prepared.upgrade() else {
                    return false;
                };
                if now.duration_since(*at) < idle_for {
                    return true;
                }
                match prepared.idle() {
                    Idle::Running => {
                        *at = now;
                        true
                    }
                    Idle::Release => {
                        due.push(prepared);
                        false
                    }
                    Idle::Keep => false,
                }
            });
            drop(state);
            for prepared in due {
                prepared.release();
            }
            state = self.state();
        }
    }
}

impl Drop for IdleReleaser {
    fn drop(&mut self) {
        self.shared.state().stop = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
