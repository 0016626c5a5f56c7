//! The plugin runtime: loading components, sandboxing calls, and checking
//! everything a plugin says before the host acts on it.

pub mod admission_call;
pub mod admission_rules;
pub mod admission_settings;
pub mod background_reload;
mod bindings;
mod bounded_waits;
mod call_clock;
pub mod call_random;
mod call_state;
mod call_traps;
pub mod compile_cache;
mod compiler;
pub mod contract_version;
pub mod directory;
mod epoch_ticker;
pub mod errors;
pub mod finalizer_report;
mod guest_output;
pub mod hot_reload;
pub mod idle_release;
pub mod limits;
mod loaded;
pub mod memory_budget;
pub mod metadata_rules;
pub use reconciler_contract::names;
pub mod object_reader;
pub mod plugin_host;
pub mod process_memory;
pub mod response_limits;
pub use reconciler_contract::response_rules;
pub mod sandbox;
pub mod standby;
mod triggers_call;
mod worker_safe_io;

pub use admission_call::{AdmissionDecision, AdmissionError, AdmissionPhase};
pub use call_random::RandomKey;
pub use compile_cache::{CompileCache, CompileSource};
pub use errors::{CallError, LoadError, LoadFailure};
pub use limits::{HostLimits, SandboxLimits};
pub use loaded::{Attempt, BRIEF_TICKS, LoadedPlugin, ReconcileInput};
pub use memory_budget::MemoryBudget;
pub use object_reader::{GetRequest, ListRequest, ObjectReader};
pub use response_limits::ResponseOverLimit;
pub use response_rules::{DesiredObject, InvalidResponse, ValidResponse, WriteRole};
pub use sandbox::{LoadReport, Sandbox, SandboxConfig};
