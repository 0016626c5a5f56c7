//! Giving memory the allocator holds but nobody uses back to the kernel.
//!
//! Why: glibc's malloc keeps freed memory in its arenas and returns it only
//! from the top of each heap, so a burst of work leaves the process's RSS
//! at its high-water mark long after the memory is free. Two bursts matter
//! to the host: a plugin compile (tens of MiB freed at once) and a wave of
//! reconciles (every reconcile parses, merges and serialises objects). Both
//! call [`release_freed_memory`]; the dispatcher paces its calls with
//! [`TrimPacer`], so a trim (milliseconds on a large heap) happens once
//! after each run of reconciles, seldom within one, and never while the
//! host is idle.
//!
//! Measured on 10,000 PodSets converging on the embedded cluster: without
//! trims, a third of the RSS at the end was free memory malloc kept
//! (BENCHMARKS.md, "The engine on the embedded cluster").

use std::time::{Duration, Instant};

/// Releases free memory to the kernel (glibc only; elsewhere nothing).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_freed_memory() {
    // SAFETY: malloc_trim takes no pointers and may be called at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_freed_memory() {}

/// How long reconciles must pause before the memory they freed is
/// trimmed: a run of them ends there.
pub const QUIET_BEFORE_TRIM: Duration = Duration::from_millis(250);

/// Longest a run of reconciles goes untrimmed when it never pauses that
/// long, so a long burst does not hold its whole high-water mark.
pub const TRIM_DURING_RUN_EVERY: Duration = Duration::from_secs(2);

/// Decides when finished reconciles have freed enough to trim: once after
/// each run of them, and every [`TRIM_DURING_RUN_EVERY`] within a long one.
///
/// Why not at a fixed pace while they finish: memory freed in the middle
/// of a run is taken again by the next reconciles, so a trim then hands
/// the kernel pages the process faults straight back in. The less busy a
/// process, the more of its heap is free at any instant and the more such
/// pages each trim gives up: three sharding replicas, trimming every
/// 250 ms through a burst, spent about 8% of their CPU on it, where the
/// one host doing all their work spent nothing measurable (BENCHMARKS.md,
/// "Replicas sharding the work").
#[derive(Debug, Default)]
pub struct TrimPacer {
    /// The first and the latest reconcile finished since the last trim.
    untrimmed: Option<(Instant, Instant)>,
}

impl TrimPacer {
    /// Told of each finished reconcile; true when a run has gone on for
    /// [`TRIM_DURING_RUN_EVERY`] without a trim.
    pub fn reconcile_finished(&mut self, now: Instant) -> bool {
        let (first, latest) = self.untrimmed.get_or_insert((now, now));
        *latest = now;
        if now.duration_since(*first) < TRIM_DURING_RUN_EVERY {
            return false;
        }
        self.untrimmed = None;
        true
    }

    /// When the run of reconciles ends if no other finishes before: the
    /// dispatcher wakes then. `None` with nothing freed since the last trim.
    pub fn run_ends_at(&self) -> Option<Instant> {
        self.untrimmed.map(|(_, latest)| latest + QUIET_BEFORE_TRIM)
    }

    /// True, once, when the run has ended untrimmed: time to trim.
    pub fn run_ended(&mut self, now: Instant) -> bool {
        if self.run_ends_at().is_none_or(|end| now < end) {
            return false;
        }
        self.untrimmed = None;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn a_run_that_pauses_is_trimmed_once_after_it_ends() {
        let start = Instant::now();
        let mut pacer = TrimPacer::default();
        assert_eq!(pacer.run_ends_at(), None, "nothing freed yet");
        assert!(!pacer.run_ended(at(start, 10_000)));

        // Reconciles 100 ms apart for a second: no trim while they run.
        let during: Vec<bool> = (0..=10)
            .map(|i| pacer.reconcile_finished(at(start, i * 100)))
            .collect();
        assert!(during.iter().all(|trim| !trim), "{during:?}");
        assert_eq!(pacer.run_ends_at(), Some(at(start, 1_000 + 250)));
        assert!(!pacer.run_ended(at(start, 1_249)));
        assert!(pacer.run_ended(at(start, 1_250)));
        // Once: the run's memory is trimmed, and idle time trims nothing.
        assert!(!pacer.run_ended(at(start, 5_000)));
        assert_eq!(pacer.run_ends_at(), None);
    }

    #[test]
    fn a_run_that_never_pauses_is_trimmed_every_two_seconds() {
        let start = Instant::now();
        let mut pacer = TrimPacer::default();
        let trims: Vec<u64> = (0..=500)
            .map(|i| i * 10)
            .filter(|ms| pacer.reconcile_finished(at(start, *ms)))
            .collect();
        assert_eq!(trims, [2_000, 4_010]);
        // And once more after its last reconcile.
        assert!(pacer.run_ended(at(start, 5_000 + 250)));
    }
}
