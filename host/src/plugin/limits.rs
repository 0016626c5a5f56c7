//! Sandbox limits: one place, each limit named, its default justified.
//!
//! Every reconcile runs under three caps. The host sets a default for each and
//! a ceiling; a plugin may ask for a different value in its metadata `hints`
//! (its author knows it needs more memory, say), and a request above the
//! ceiling makes the host refuse the plugin at load, naming the option that
//! raises the ceiling. So an operator decides how far any plugin may go, and a
//! plugin author decides what one plugin needs within that.

use std::time::Duration;

use reconciler_contract::Hints;

use super::process_memory::MemorySources;

/// Host-wide defaults and ceilings. The CLI maps one option to each field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostLimits {
    /// Linear memory per reconcile. 64 MiB holds a request of thousands of
    /// objects parsed into typed structs with room to spare, while a runaway
    /// allocation fails in milliseconds. (`--plugin-memory-mib`)
    pub memory_mib: u32,
    /// The most a plugin may ask for. Also sizes the pooling allocator's
    /// slots. (`--plugin-memory-max-mib`)
    pub memory_max_mib: u32,
    /// Wall-clock deadline per reconcile. A reconcile decides, it does not
    /// wait on anything, so a typical one takes well under a millisecond; one
    /// second is generous yet keeps a looping plugin from stalling its queue.
    /// (`--plugin-timeout-ms`)
    pub timeout_ms: u32,
    /// (`--plugin-timeout-max-ms`)
    pub timeout_max_ms: u32,
    /// Total JSON text in one response. 1 MiB is the size of the largest
    /// object etcd stores by default, so no honest response needs more per
    /// object, and few need more in total. (`--plugin-output-kib`)
    pub output_kib: u32,
    /// (`--plugin-output-max-kib`)
    pub output_max_kib: u32,
    /// Guest stdout and stderr kept per call; a plugin writing more traps.
    /// 64 KiB is thousands of log lines: anything beyond is a bug. Also the
    /// budget stdout, stderr and `log` entries share in the host log per
    /// call; lines past it are dropped and counted (guest_output.rs).
    pub stdio_kib: u32,
    /// Events one response may carry. Each is a write to the API server;
    /// 25 is the burst the host's per-object Event rate limit allows
    /// (client-go's), so a response with more could not be recorded anyway.
    /// (`--plugin-events`)
    pub events: u32,
    /// (`--plugin-events-max`)
    pub events_max: u32,
    /// Objects one response may apply. Each is a request to the API
    /// server; 500 objects of 2 KiB fill the default output cap, and an
    /// operator managing more children than that from one object is rare
    /// enough to ask for it. (`--plugin-applies`)
    pub applies: u32,
    /// (`--plugin-applies-max`)
    pub applies_max: u32,
    /// Objects one response may delete, for the same reasons as applies.
    /// (`--plugin-deletes`)
    pub deletes: u32,
    /// (`--plugin-deletes-max`)
    pub deletes_max: u32,
    /// Reconciles of one plugin in flight at once, API round trips
    /// included (only the sandbox call itself takes an instance from the
    /// pool, see `engine::call_slots`). 64 keeps a burst of creates from
    /// queueing behind a few slow round trips, as kube-rs (unbounded) and
    /// controller-runtime users tune it, while bounding what one plugin asks
    /// of the API server at once. At most one per object, always.
    /// (`--plugin-concurrency`)
    pub concurrency: u32,
    /// The most a plugin may ask for (`hints.maxConcurrentReconciles`).
    /// (`--plugin-concurrency-max`)
    pub concurrency_max: u32,
    /// How long hot reload waits for a new plugin file to compile and
    /// report its metadata before refusing it. Loading runs beside the loop
    /// that serves the other plugins, so this only bounds how long a file
    /// stays pending; a release build compiles a small plugin in tens of
    /// milliseconds, and two minutes leaves room for components of tens of
    /// MiB (Python, JavaScript) on a small machine.
    /// (`--plugin-load-timeout-secs`)
    pub load_timeout_secs: u32,
    /// Linear memory of all calls at once, every plugin and admission
    /// together (memory_budget.rs). `None` derives it from what the
    /// process may use ([`default_memory_total_bytes`]).
    /// (`--plugin-memory-total-mib`)
    pub memory_total_mib: Option<u32>,
}

impl Default for HostLimits {
    fn default() -> Self {
        Self {
            memory_mib: 64,
            memory_max_mib: 256,
            timeout_ms: 1_000,
            timeout_max_ms: 10_000,
            output_kib: 1_024,
            output_max_kib: 8_192,
            stdio_kib: 64,
            events: reconciler_contract::response_caps::DEFAULT_MAX_EVENTS,
            events_max: 1_000,
            applies: reconciler_contract::response_caps::DEFAULT_MAX_APPLIES,
            applies_max: 10_000,
            deletes: reconciler_contract::response_caps::DEFAULT_MAX_DELETES,
            deletes_max: 10_000,
            concurrency: 64,
            concurrency_max: 1_024,
            load_timeout_secs: 120,
            memory_total_mib: None,
        }
    }
}

/// The limits one plugin actually runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SandboxLimits {
    pub memory_bytes: usize,
    pub timeout: Duration,
    pub output_bytes: usize,
    pub stdio_bytes: usize,
    /// Per response.
    pub max_events: usize,
    pub max_applies: usize,
    pub max_deletes: usize,
    /// Reconciles of the plugin at once.
    pub concurrency: usize,
}

/// A hint above the host's ceiling.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "hints.{hint} asks for {asked} {unit}, above this host's maximum of {max} {unit} (raise it with {option})"
)]
pub struct LimitTooHigh {
    pub hint: &'static str,
    pub asked: u32,
    pub max: u32,
    pub unit: &'static str,
    pub option: &'static str,
}

impl HostLimits {
    /// The limits for a plugin with these hints.
    pub fn resolve(&self, hints: &Hints) -> Result<SandboxLimits, LimitTooHigh> {
        let pick = |asked: Option<u32>, default: u32, max: u32, hint, unit, option| match asked {
            Some(asked) if asked > max => Err(LimitTooHigh {
                hint,
                asked,
                max,
                unit,
                option,
            }),
            Some(asked) => Ok(asked),
            None => Ok(default.min(max)),
        };
        let memory = pick(
            hints.memory_limit_mib,
            self.memory_mib,
            self.memory_max_mib,
            "memoryLimitMib",
            "MiB",
            "--plugin-memory-max-mib",
        )?;
        let timeout = pick(
            hints.timeout_ms,
            self.timeout_ms,
            self.timeout_max_ms,
            "timeoutMs",
            "ms",
            "--plugin-timeout-max-ms",
        )?;
        let output = pick(
            hints.max_output_kib,
            self.output_kib,
            self.output_max_kib,
            "maxOutputKib",
            "KiB",
            "--plugin-output-max-kib",
        )?;
        let events = pick(
            hints.max_events,
            self.events,
            self.events_max,
            "maxEvents",
            "Events",
            "--plugin-events-max",
        )?;
        let applies = pick(
            hints.max_applies,
            self.applies,
            self.applies_max,
            "maxApplies",
            "objects",
            "--plugin-applies-max",
        )?;
        let deletes = pick(
            hints.max_deletes,
            self.deletes,
            self.deletes_max,
            "maxDeletes",
            "objects",
            "--plugin-deletes-max",
        )?;
        let concurrency = pick(
            hints.max_concurrent_reconciles,
            self.concurrency,
            self.concurrency_max,
            "maxConcurrentReconciles",
            "reconciles",
            "--plugin-concurrency-max",
        )?;
        Ok(SandboxLimits {
            memory_bytes: memory as usize * 1024 * 1024,
            timeout: Duration::from_millis(u64::from(timeout)),
            output_bytes: output as usize * 1024,
            stdio_bytes: self.stdio_kib as usize * 1024,
            max_events: events as usize,
            max_applies: applies as usize,
            max_deletes: deletes as usize,
            concurrency: concurrency.max(1) as usize,
        })
    }

    /// How long hot reload waits for one plugin file to load.
    pub fn load_timeout(&self) -> Duration {
        Duration::from_secs(u64::from(self.load_timeout_secs))
    }

    /// The guest memory budget, in bytes.
    pub fn memory_total_bytes(&self) -> usize {
        match self.memory_total_mib {
            Some(mib) => mib as usize * 1024 * 1024,
            None => default_memory_total_bytes(&MemorySources::of_this_process()),
        }
    }

    /// The limits `metadata` is called under, before any hint is known.
    pub fn defaults(&self) -> SandboxLimits {
        self.resolve(&Hints::default())
            .expect("defaults never exceed ceilings")
    }
}

/// The part of a cgroup memory limit the plugins' guest memory gets when
/// no budget is given; the rest is the host's own (its cache of the
/// cluster's objects, see `fleet::cache_budget`).
pub fn guest_share_of_limit(limit: u64) -> u64 {
    limit / 2
}

/// The guest memory budget when none is given: half the cgroup limit,
/// leaving the other half to the host itself (its cache of the cluster's
/// objects grows with the cluster, not with the plugins), or a quarter of
/// physical memory without a limit, as a host shares its machine. Never
/// less than one call at the default cap, or no plugin could run at all.
pub fn default_memory_total_bytes(sources: &MemorySources) -> usize {
    let floor = HostLimits::default().memory_mib as usize * 1024 * 1024;
    let derived = match (sources.cgroup_limit(), sources.physical()) {
        (Some(limit), _) => guest_share_of_limit(limit),
        (None, Some(physical)) => physical / 4,
        // Nothing to go by (not Linux): what a small pod would get.
        (None, None) => 512 << 20,
    };
    usize::try_from(derived).unwrap_or(usize::MAX).max(floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_override_defaults_within_the_ceiling() {
        let host = HostLimits::default();
        let none = host.resolve(&Hints::default()).unwrap();
        assert_eq!(none.memory_bytes, 64 << 20);
        assert_eq!(none.timeout, Duration::from_secs(1));
        let asked = host
            .resolve(&Hints {
                memory_limit_mib: Some(128),
                timeout_ms: Some(50),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(asked.memory_bytes, 128 << 20);
        assert_eq!(asked.timeout, Duration::from_millis(50));
    }

    #[test]
    fn response_caps_and_concurrency_follow_the_same_rules() {
        let host = HostLimits::default();
        let none = host.resolve(&Hints::default()).unwrap();
        assert_eq!(
            (
                none.max_events,
                none.max_applies,
                none.max_deletes,
                none.concurrency
            ),
            (25, 500, 500, 64)
        );
        let asked = host
            .resolve(&Hints {
                max_events: Some(0),
                max_applies: Some(2_000),
                max_deletes: Some(10_000),
                max_concurrent_reconciles: Some(16),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(
            (
                asked.max_events,
                asked.max_applies,
                asked.max_deletes,
                asked.concurrency
            ),
            (0, 2_000, 10_000, 16)
        );
        for (hints, names) in [
            (
                Hints {
                    max_events: Some(1_001),
                    ..Default::default()
                },
                [
                    "hints.maxEvents asks for 1001 Events",
                    "--plugin-events-max",
                ],
            ),
            (
                Hints {
                    max_applies: Some(10_001),
                    ..Default::default()
                },
                [
                    "hints.maxApplies asks for 10001 objects",
                    "--plugin-applies-max",
                ],
            ),
            (
                Hints {
                    max_deletes: Some(10_001),
                    ..Default::default()
                },
                [
                    "hints.maxDeletes asks for 10001 objects",
                    "--plugin-deletes-max",
                ],
            ),
            (
                Hints {
                    max_concurrent_reconciles: Some(1_025),
                    ..Default::default()
                },
                [
                    "hints.maxConcurrentReconciles asks for 1025 reconciles, above this host's maximum of 1024",
                    "--plugin-concurrency-max",
                ],
            ),
        ] {
            let text = host.resolve(&hints).unwrap_err().to_string();
            for name in names {
                assert!(text.contains(name), "{text}");
            }
        }
    }

    #[test]
    fn the_memory_budget_defaults_to_half_the_cgroup_limit_or_a_quarter_of_the_machine() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("memory.max"), "268435456\n").unwrap();
        let sources = MemorySources {
            self_cgroup: "0::/\n".into(),
            cgroup_root: dir.path().to_path_buf(),
            meminfo: "MemTotal: 4194304 kB\n".into(),
        };
        assert_eq!(default_memory_total_bytes(&sources), 128 << 20);
        std::fs::write(dir.path().join("memory.max"), "max\n").unwrap();
        assert_eq!(default_memory_total_bytes(&sources), 1 << 30);
        std::fs::write(dir.path().join("memory.max"), "67108864\n").unwrap();
        assert_eq!(
            default_memory_total_bytes(&sources),
            64 << 20,
            "one call fits"
        );
        let given = HostLimits {
            memory_total_mib: Some(512),
            ..HostLimits::default()
        };
        assert_eq!(given.memory_total_bytes(), 512 << 20);
    }

    #[test]
    fn a_hint_above_the_ceiling_names_the_option_that_raises_it() {
        let host = HostLimits::default();
        let err = host
            .resolve(&Hints {
                timeout_ms: Some(60_000),
                ..Default::default()
            })
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("hints.timeoutMs asks for 60000 ms"), "{text}");
        assert!(text.contains("--plugin-timeout-max-ms"), "{text}");
    }
}
