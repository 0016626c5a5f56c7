//! Why a plugin did not load, and why a reconcile call failed.

use std::path::PathBuf;
use std::time::Duration;

use super::contract_version::ContractError;
use super::limits::LimitTooHigh;
use super::metadata_rules::MetadataError;
use super::response_limits::ResponseOverLimit;
use super::response_rules::InvalidResponse;

/// A plugin file that cannot be served. Always names the file.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct LoadError {
    pub path: PathBuf,
    pub reason: LoadFailure,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadFailure {
    #[error("cannot read the file: {0}")]
    Read(#[source] std::io::Error),
    /// A candidate file that cannot run beside its serving file's plugin.
    #[error("{0}")]
    Candidate(String),
    #[error("not a WebAssembly file (it does not start with the \\0asm magic)")]
    NotWasm,
    #[error(
        "a core WebAssembly module, not a component: build the plugin with `cargo build --release --target wasm32-wasip2`"
    )]
    CoreModule,
    #[error("cannot compile the component: {0}")]
    Compile(String),
    #[error(transparent)]
    Contract(#[from] ContractError),
    #[error("cannot link the component: {0}")]
    Link(String),
    #[error(
        "metadata did not return within {} ms, the host's default deadline (--plugin-timeout-ms): it must return the plugin's declarations at once, without waiting",
        limit.as_millis()
    )]
    MetadataTimeout { limit: Duration },
    #[error("calling metadata failed: {0}")]
    MetadataCall(#[source] CallError),
    #[error(
        "loading took longer than {} s (--plugin-load-timeout-secs): the plugin is not served; a smaller component compiles faster",
        limit.as_secs()
    )]
    LoadTimeout { limit: Duration },
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    #[error(transparent)]
    Limits(#[from] LimitTooHigh),
    #[error("calling admission settings failed: {0}")]
    AdmissionSettingsCall(#[source] CallError),
    #[error("calling triggers failed: {0}")]
    TriggersCall(#[source] CallError),
    #[error(transparent)]
    AdmissionSettings(#[from] super::admission_settings::InvalidAdmissionSettings),
    /// Two files of one plugin set hold plugins of the same name; the
    /// later file (by name) is refused.
    #[error("plugin name {name} is already used by {}", first.display())]
    NameTaken { name: String, first: PathBuf },
    /// Two files of one plugin set reconcile the same primary kind.
    #[error(
        "plugin {name} reconciles {kind}, which plugin {first_name} from {} already reconciles: a primary kind has one plugin, whatever version of it each serves",
        first.display()
    )]
    PrimaryTaken {
        name: String,
        /// See `directory::primary_kind_taken`.
        kind: String,
        first_name: String,
        first: PathBuf,
    },
}

/// A reconcile that produced nothing to apply. Each variant tells the user
/// what happened and, for limits, which knob moves it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error("timed out after {} ms (raise the deadline with hints.timeoutMs, up to --plugin-timeout-max-ms)", limit.as_millis())]
    Timeout { limit: Duration },
    #[error(
        "exceeded its memory limit of {} MiB (raise it with hints.memoryLimitMib, up to --plugin-memory-max-mib)",
        limit_bytes / (1024 * 1024)
    )]
    MemoryLimit { limit_bytes: usize },
    /// The host's guest memory budget was spent by calls running at once:
    /// not the plugin's own limit, and not its fault alone.
    #[error(
        "could not grow its memory: the host's budget for the memory of all calls at once, {} MiB, is in use (raise it with --plugin-memory-total-mib)",
        budget_bytes / (1024 * 1024)
    )]
    HostMemoryBudget { budget_bytes: usize },
    #[error("wrote more than {} KiB to stdout or stderr in one call", limit_bytes / 1024)]
    StdioLimit { limit_bytes: usize },
    #[error(
        "response is {bytes} bytes, over the output limit of {limit_bytes} bytes (raise it with hints.maxOutputKib, up to --plugin-output-max-kib)"
    )]
    OutputTooLarge { bytes: usize, limit_bytes: usize },
    /// A Rust guest's panic: where, and the first line of its message.
    #[error("panicked at {location}: {message}")]
    Panic { location: String, message: String },
    #[error("trapped: {message}")]
    Trap { message: String },
    #[error("cannot instantiate: {0}")]
    Instantiate(String),
    #[error("plugin error: {0}")]
    Plugin(String),
    #[error(transparent)]
    InvalidResponse(#[from] InvalidResponse),
    #[error(transparent)]
    OverLimit(#[from] ResponseOverLimit),
}

impl CallError {
    /// A short, stable name for metrics and Event reasons.
    pub fn reason(&self) -> &'static str {
        match self {
            CallError::Timeout { .. } => "Timeout",
            CallError::MemoryLimit { .. } => "MemoryLimit",
            CallError::HostMemoryBudget { .. } => "HostMemoryBudget",
            CallError::StdioLimit { .. } => "StdioLimit",
            CallError::OutputTooLarge { .. } => "OutputTooLarge",
            // A panic is a trap to metrics and Event reasons; its message
            // says it panicked.
            CallError::Panic { .. } | CallError::Trap { .. } => "Trap",
            CallError::Instantiate(_) => "InstantiateFailed",
            CallError::Plugin(_) => "ReconcileError",
            CallError::InvalidResponse(_) => "InvalidResponse",
            CallError::OverLimit(e) => e.reason(),
        }
    }
}
