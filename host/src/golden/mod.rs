//! Golden cases: YAML files that pin what a compiled plugin answers for a
//! given primary object and cache. `reconciler-host test` runs them.

pub mod admission_case;
pub mod case;
pub mod change_case;
pub mod outcome;
pub mod record_dir;
pub mod recorder;
pub mod redact;
pub mod runner;

pub use outcome::{CaseOutcome, CaseResult};
pub use runner::{discover, run_case};
