//! Where a plugin's reconcile runs: on the async worker that reached it, or
//! on a blocking thread.
//!
//! A call takes tens of microseconds; handing it to a blocking thread and
//! back costs more than that in wake-ups and task switches (BENCHMARKS.md,
//! "Short calls on the worker"). But a call may also run for its whole
//! timeout, and a worker held that long stalls every watch, timer and
//! reconcile queued behind it. So a call starts on the worker with a brief
//! budget ([`BRIEF_TICKS`](crate::plugin::BRIEF_TICKS), 10 to 20 ms); one
//! that runs past it is made again on a blocking thread under the full
//! deadline, and that plugin's next [`AFTER_RUNNING_LONG`] calls go there
//! directly. A plugin that is slow, or spins on purpose, holds a worker for
//! at most one brief budget per that many calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::task::JoinError;

use crate::plugin::{Attempt, CallError, LoadedPlugin, ReconcileInput, ValidResponse};

/// Calls that go straight to a blocking thread after one ran long.
pub const AFTER_RUNNING_LONG: u32 = 64;

/// One plugin's record of how its calls ran.
#[derive(Debug, Default)]
pub struct CallPlacement {
    /// Calls still to make on a blocking thread before trying the worker.
    blocking_left: AtomicU32,
}

/// Where one call ran, for the tests and the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placed {
    /// Finished within the brief budget on the worker.
    Worker,
    /// Ran long on the worker, then was made again on a blocking thread.
    WorkerThenBlocking,
    /// Went straight to a blocking thread: an earlier call ran long.
    Blocking,
}

impl CallPlacement {
    /// Runs `input` through `plugin`, holding `slot` until the call is done.
    pub async fn reconcile<S: Send + 'static>(
        &self,
        plugin: &Arc<LoadedPlugin>,
        input: ReconcileInput,
        slot: S,
    ) -> Result<(Result<ValidResponse, CallError>, Placed), JoinError> {
        let (input, placed) = if self.take_blocking_turn() {
            (input, Placed::Blocking)
        } else {
            match plugin.reconcile_briefly(input) {
                Attempt::Done(answer) => {
                    drop(slot);
                    return Ok((answer, Placed::Worker));
                }
                Attempt::RanLong(input) => {
                    self.blocking_left
                        .store(AFTER_RUNNING_LONG, Ordering::Relaxed);
                    (input, Placed::WorkerThenBlocking)
                }
            }
        };
        let plugin = plugin.clone();
        tokio::task::spawn_blocking(move || {
            let answer = plugin.reconcile(input);
            drop(slot);
            (answer, placed)
        })
        .await
    }

    /// Whether this call goes straight to a blocking thread, counting it.
    fn take_blocking_turn(&self) -> bool {
        self.blocking_left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(1)
            })
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_go_to_the_worker_until_one_runs_long_then_skip_it_for_a_while() {
        let placement = CallPlacement::default();
        assert!(!placement.take_blocking_turn());
        placement
            .blocking_left
            .store(AFTER_RUNNING_LONG, Ordering::Relaxed);
        let turns = (0..AFTER_RUNNING_LONG + 3)
            .filter(|_| placement.take_blocking_turn())
            .count();
        assert_eq!(turns, AFTER_RUNNING_LONG as usize);
        assert!(!placement.take_blocking_turn());
    }
}
