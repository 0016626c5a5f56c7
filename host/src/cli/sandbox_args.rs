//! The sandbox options every command takes. They live apart from the
//! command tree in `mod.rs` because each command's module needs them to
//! build its sandbox, and the tree needs each command's module: kept in
//! `mod.rs`, every command would import from the file that imports it.

use std::path::PathBuf;

use clap::Args;

use crate::plugin::{HostLimits, Sandbox, SandboxConfig};

/// Sandbox limits and compile cache; see `plugin::limits` for why each
/// default is what it is. Every command takes them, so `-h` leaves them
/// out (they would drown each command's own options) and `--help` lists
/// them under their heading.
#[derive(Debug, Args)]
#[command(next_help_heading = "Sandbox")]
pub struct SandboxArgs {
    /// Memory cap of one reconcile, in MiB, for plugins that do not ask for one.
    #[arg(long, global = true, hide_short_help = true, default_value_t = HostLimits::default().memory_mib, value_name = "MIB")]
    pub plugin_memory_mib: u32,
    /// The most memory a plugin may ask for (hints.memoryLimitMib).
    #[arg(long, global = true, hide_short_help = true, default_value_t = HostLimits::default().memory_max_mib, value_name = "MIB")]
    pub plugin_memory_max_mib: u32,
    /// Guest memory of all calls at once (every plugin and admission), in MiB; a call that would
    /// grow past it fails naming this option, and each plugin keeps a share [default: half the
    /// cgroup memory limit, or a quarter of physical memory without one].
    #[arg(long, global = true, hide_short_help = true, value_name = "MIB")]
    pub plugin_memory_total_mib: Option<u32>,
    /// Wall-clock deadline of one reconcile, in milliseconds.
    #[arg(long, global = true, hide_short_help = true, default_value_t = HostLimits::default().timeout_ms, value_name = "MS")]
    pub plugin_timeout_ms: u32,
    /// The longest deadline a plugin may ask for (hints.timeoutMs).
    #[arg(long, global = true, hide_short_help = true, default_value_t = HostLimits::default().timeout_max_ms, value_name = "MS")]
    pub plugin_timeout_max_ms: u32,
    /// Cap on the JSON text of one response, in KiB.
    #[arg(long, global = true, hide_short_help = true, default_value_t = HostLimits::default().output_kib, value_name = "KIB")]
    pub plugin_output_kib: u32,
    /// The largest output cap a plugin may ask for (hints.maxOutputKib).
    #[arg(long, global = true, hide_short_help = true, default_value_t = HostLimits::default().output_max_kib, value_name = "KIB")]
    pub plugin_output_max_kib: u32,
    /// Events one response may carry, for plugins that do not ask (a response with more is refused).
    #[arg(long, global = true, hide_short_help = true, default_value_t = HostLimits::default().events, value_name = "N")]
    pub plugin_events: u32,
    /// The most Events per response a plugin may ask for (hints.maxEvents).
    #[arg(long, global = true, hide_short_help = true, default_value_t = HostLimits::default().events_max, value_name = "N")]
    pub plugin_events_max: u32,
    /// Objects one response may apply, for plugins that do not ask.
    #[arg(long, global = true, hide_short_help = true, default_value_t = HostLimits::default().applies, value_name = "N")]
    pub plugin_applies: u32,
    /// The most objects per response a plugin may ask to apply (hints.maxApplies).
    #[arg(long, global = true, hide_short_help = true, default_value_t = HostLimits::default().applies_max, value_name = "N")]
    pub plugin_applies_max: u32,
    /// Objects one response may delete, for plugins that do not ask.
    #[arg(long, global = true, hide_short_help = true, default_value_t = HostLimits::default().deletes, value_name = "N")]
    pub plugin_deletes: u32,
    /// The most objects per response a plugin may ask to delete (hints.maxDeletes).
    #[arg(long, global = true, hide_short_help = true, default_value_t = HostLimits::default().deletes_max, value_name = "N")]
    pub plugin_deletes_max: u32,
    /// Reconciles of one plugin in flight at once (API round trips included), for plugins that do not ask.
    #[arg(long, global = true, hide_short_help = true, default_value_t = HostLimits::default().concurrency, value_name = "N")]
    pub plugin_concurrency: u32,
    /// The most reconciles at once a plugin may ask for (hints.maxConcurrentReconciles).
    #[arg(long, global = true, hide_short_help = true, default_value_t = HostLimits::default().concurrency_max, value_name = "N")]
    pub plugin_concurrency_max: u32,
    /// Sandbox instances for all plugins' reconciles together: calls running at once, plus one
    /// kept for loading plugins. Shared fairly: while others wait, no plugin holds more than its
    /// share. Admission calls have instances of their own (--admission-instances).
    #[arg(long, global = true, hide_short_help = true, default_value_t = SandboxConfig::default().max_instances, value_name = "N")]
    pub plugin_instances: u32,
    /// Sandbox instances kept for admission calls, on top of --plugin-instances: the admission
    /// requests answered at once (more wait, within their deadline), so busy reconciles never make
    /// an admission call fail. Each reserves address space for the memory ceiling, not memory.
    #[arg(long, global = true, hide_short_help = true, default_value_t = SandboxConfig::default().admission_instances, value_name = "N")]
    pub admission_instances: u32,
    /// How long hot reload waits for a new plugin file to compile and report its metadata, in seconds.
    #[arg(long, global = true, hide_short_help = true, default_value_t = HostLimits::default().load_timeout_secs, value_name = "SECS")]
    pub plugin_load_timeout_secs: u32,
    /// Where compiled plugins are cached [default: $XDG_CACHE_HOME/reconciler-host or ~/.cache/reconciler-host].
    #[arg(
        long,
        global = true,
        hide_short_help = true,
        env = "RECONCILER_HOST_COMPILE_CACHE",
        value_name = "DIR"
    )]
    pub compile_cache: Option<PathBuf>,
    /// How large the compile cache may grow, in MiB: past it, the entries used least recently are removed.
    #[arg(
        long,
        global = true,
        hide_short_help = true,
        env = "RECONCILER_HOST_COMPILE_CACHE_MAX_MIB",
        default_value_t = crate::plugin::compile_cache::DEFAULT_MAX_MIB,
        value_name = "MIB"
    )]
    pub compile_cache_max_mib: u64,
    /// Compile plugins on every load instead of caching the result.
    #[arg(
        long,
        global = true,
        hide_short_help = true,
        conflicts_with = "compile_cache"
    )]
    pub no_compile_cache: bool,
}

impl SandboxArgs {
    pub fn config(&self) -> anyhow::Result<SandboxConfig> {
        let limits = HostLimits {
            memory_mib: self.plugin_memory_mib,
            memory_max_mib: self.plugin_memory_max_mib,
            timeout_ms: self.plugin_timeout_ms,
            timeout_max_ms: self.plugin_timeout_max_ms,
            output_kib: self.plugin_output_kib,
            output_max_kib: self.plugin_output_max_kib,
            events: self.plugin_events,
            events_max: self.plugin_events_max,
            applies: self.plugin_applies,
            applies_max: self.plugin_applies_max,
            deletes: self.plugin_deletes,
            deletes_max: self.plugin_deletes_max,
            concurrency: self.plugin_concurrency,
            concurrency_max: self.plugin_concurrency_max,
            load_timeout_secs: self.plugin_load_timeout_secs,
            memory_total_mib: self.plugin_memory_total_mib,
            ..HostLimits::default()
        };
        for (default, max, name) in [
            (
                limits.memory_mib,
                limits.memory_max_mib,
                "--plugin-memory-mib",
            ),
            (
                limits.timeout_ms,
                limits.timeout_max_ms,
                "--plugin-timeout-ms",
            ),
            (
                limits.output_kib,
                limits.output_max_kib,
                "--plugin-output-kib",
            ),
            (limits.events, limits.events_max, "--plugin-events"),
            (limits.applies, limits.applies_max, "--plugin-applies"),
            (limits.deletes, limits.deletes_max, "--plugin-deletes"),
            (
                limits.concurrency,
                limits.concurrency_max,
                "--plugin-concurrency",
            ),
        ] {
            if default == 0 || default > max {
                anyhow::bail!(
                    "{name} is {default}: it must be more than 0 and at most its -max- counterpart ({max})"
                );
            }
        }
        let compile_cache = if self.no_compile_cache {
            None
        } else {
            self.compile_cache
                .clone()
                .or_else(crate::plugin::CompileCache::default_dir)
        };
        if self.compile_cache_max_mib == 0 {
            anyhow::bail!(
                "--compile-cache-max-mib is 0: it must be at least 1 (--no-compile-cache turns the cache off)"
            );
        }
        if self.plugin_instances < 2 {
            anyhow::bail!(
                "--plugin-instances is {}: it must be at least 2 (one reconcile, and one instance for loading plugins)",
                self.plugin_instances
            );
        }
        if self.admission_instances < 1 {
            anyhow::bail!("--admission-instances is 0: it must be at least 1");
        }
        if self.plugin_memory_total_mib == Some(0) {
            anyhow::bail!("--plugin-memory-total-mib is 0: it must be at least 1");
        }
        Ok(SandboxConfig {
            limits,
            compile_cache,
            compile_cache_max_mib: self.compile_cache_max_mib,
            max_instances: self.plugin_instances,
            admission_instances: self.admission_instances,
            ..SandboxConfig::default()
        })
    }

    pub fn sandbox(&self) -> anyhow::Result<Sandbox> {
        Sandbox::new(self.config()?)
    }

    /// [`Self::sandbox`] with random streams keyed by `random_key`.
    pub fn sandbox_with(&self, random_key: crate::plugin::RandomKey) -> anyhow::Result<Sandbox> {
        Sandbox::new(SandboxConfig {
            random_key,
            ..self.config()?
        })
    }
}
