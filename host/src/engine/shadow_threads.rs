//! The threads a candidate's shadow calls run on: a pool of their own at
//! the lowest CPU priority, so the scheduler gives a core to a serving
//! call the moment one is runnable.
//!
//! Waiting for a pause in serving calls ([`ShadowBook::pause`]) keeps
//! shadow calls out of a burst, but a call that started in a gap is still
//! running when the next serving work arrives; on equal terms it takes a
//! core from it, which is what pushed the serving path's p99 up with a
//! shadow running (BENCHMARKS.md, "Shadow"). At nice 19 a shadow thread
//! weighs 1/68 of a serving one: it is preempted when serving work wakes
//! and still runs on a machine that is busy otherwise (`SCHED_IDLE` would
//! starve it there, and then the shadow's counts stop moving).
//!
//! [`ShadowBook::pause`]: super::shadow_book::ShadowBook::pause

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;
use std::time::Duration;

/// The nice value of a shadow thread: the lowest priority there is short
/// of `SCHED_IDLE`.
pub const SHADOW_NICE: i32 = 19;

/// A pool of low-priority threads, started on first use (most hosts never
/// run a candidate).
pub struct ShadowThreads {
    threads: usize,
    pool: OnceLock<Result<rayon::ThreadPool, String>>,
}

impl ShadowThreads {
    /// A pool of `threads` threads (one per shadow slot).
    pub fn new(threads: usize) -> Self {
        Self {
            threads: threads.max(1),
            pool: OnceLock::new(),
        }
    }

    /// Runs `call` on a shadow thread; a panic in it is an error naming it,
    /// never a crash of the host. Called from within a tokio runtime.
    ///
    /// Returns the answer with the CPU time the call used: at the lowest
    /// priority a call may wait long for a core, and a deadline counted in
    /// wall-clock time can pass while the call has hardly run. The caller
    /// tells such a call (starved) from one that ran long (slow).
    pub async fn run<T: Send + 'static>(
        &self,
        call: impl FnOnce() -> T + Send + 'static,
    ) -> Result<Ran<T>, String> {
        let pool = self
            .pool
            .get_or_init(|| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(self.threads)
                    .thread_name(|i| format!("shadow-{i}"))
                    .start_handler(|_| lower_this_thread())
                    .build()
                    .map_err(|e| format!("cannot start the shadow threads: {e}"))
            })
            .as_ref()
            .map_err(Clone::clone)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        // Inside the caller's runtime, as on one of its blocking threads:
        // the few WASI functions that block do so on that runtime.
        let runtime = tokio::runtime::Handle::current();
        pool.spawn(move || {
            let _inside = runtime.enter();
            let started = thread_cpu_time();
            let answer = catch_unwind(AssertUnwindSafe(call));
            let _ = tx.send(answer.map(|answer| {
                Ran {
                    answer,
                    cpu: started
                        .zip(thread_cpu_time())
                        .map(|(a, b)| b.saturating_sub(a)),
                }
            }));
        });
        match rx.await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(panic)) => Err(format!(
                "the candidate's call panicked: {}",
                panic_message(&*panic)
            )),
            Err(_) => Err("the shadow thread went away before answering".to_string()),
        }
    }
}

/// A shadow call's answer, and the CPU time it ran for.
#[derive(Debug)]
pub struct Ran<T> {
    pub answer: T,
    /// `None` where the platform does not tell a thread's CPU time.
    pub cpu: Option<Duration>,
}

/// The CPU time the calling thread has used so far, where the platform
/// tells it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn thread_cpu_time() -> Option<Duration> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for clock_gettime to fill.
    let read = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    (read == 0).then(|| Duration::new(now.tv_sec as u64, now.tv_nsec as u32))
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn thread_cpu_time() -> Option<Duration> {
    None
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Lowers the calling thread (not the process) to [`SHADOW_NICE`]. Linux
/// applies a nice value per thread; a failure only costs the priority, so
/// it is logged and the thread runs on.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn lower_this_thread() {
    // SAFETY: gettid and setpriority take no pointers; setpriority on the
    // caller's own thread id changes only that thread's nice value.
    let failed = unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, SHADOW_NICE) != 0
    };
    if failed {
        tracing::warn!(
            "cannot lower a shadow thread's priority: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn lower_this_thread() {}

/// The calling thread's nice value, for the tests.
#[cfg(all(target_os = "linux", target_env = "gnu", test))]
fn nice_of_this_thread() -> i32 {
    // SAFETY: as above; getpriority reads only.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::getpriority(libc::PRIO_PROCESS, tid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[tokio::test]
    async fn a_shadow_call_runs_at_the_lowest_priority_and_the_caller_keeps_its_own() {
        let threads = ShadowThreads::new(2);
        let before = nice_of_this_thread();
        let (nice, name) = threads
            .run(|| {
                (
                    nice_of_this_thread(),
                    std::thread::current().name().map(str::to_string),
                )
            })
            .await
            .unwrap()
            .answer;
        assert_eq!(nice, SHADOW_NICE);
        assert!(name.unwrap_or_default().starts_with("shadow-"));
        assert_eq!(nice_of_this_thread(), before);
    }

    #[tokio::test]
    async fn a_panicking_call_is_an_error_and_the_pool_keeps_serving() {
        let threads = ShadowThreads::new(1);
        let failed = threads
            .run(|| -> u32 { panic!("guest went wrong") })
            .await
            .unwrap_err();
        assert!(failed.contains("guest went wrong"), "{failed}");
        assert_eq!(threads.run(|| 7).await.unwrap().answer, 7);
    }

    /// A call that sleeps used hardly any CPU; one that spins used about
    /// its whole time: what tells a starved call from a slow one.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[tokio::test]
    async fn the_cpu_time_a_call_used_is_told_apart_from_the_time_it_took() {
        let threads = ShadowThreads::new(1);
        let slept = threads
            .run(|| std::thread::sleep(Duration::from_millis(200)))
            .await
            .unwrap();
        assert!(slept.cpu.unwrap() < Duration::from_millis(50), "{slept:?}");
        let spun = threads
            .run(|| {
                let start = std::time::Instant::now();
                while start.elapsed() < Duration::from_millis(200) {
                    std::hint::spin_loop();
                }
            })
            .await
            .unwrap();
        assert!(spun.cpu.unwrap() > slept.cpu.unwrap(), "{spun:?}");
    }
}
