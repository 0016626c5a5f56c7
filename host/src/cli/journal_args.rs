use std::time::Duration;

use clap::Args;

use crate::engine::journal::{
    DEFAULT_CASES_MIB, DEFAULT_ENTRIES_PER_OBJECT, DEFAULT_MAX_MIB, JournalLimits,
};
use crate::engine::loop_watch::{DEFAULT_REPEATS, LoopRule};
use crate::support::duration_text::parse_duration;

/// The decision journal and loop detection, shared by `run` and `dev`.
#[derive(Debug, Args)]
pub struct JournalArgs {
    /// The decision journal (`reconciler-host explain`, served at /objects/KIND/NAMESPACE/NAME
    /// beside /metrics, or by `dev` on --explain-listen): the most memory its entries may take
    /// over every object, in MiB (the oldest entries anywhere go first). 0 turns it off.
    #[arg(long, default_value_t = DEFAULT_MAX_MIB, value_name = "MIB")]
    pub journal_max_mib: usize,
    /// How many of each object's last reconciles the journal keeps.
    #[arg(long, default_value_t = DEFAULT_ENTRIES_PER_OBJECT, value_name = "N")]
    pub journal_entries: usize,
    /// The most memory the inputs of each object's last reconcile may take over every object, in
    /// MiB (the oldest go first): what `explain --as-case` writes as a golden case, Secret
    /// values redacted. 0 keeps none.
    #[arg(long, default_value_t = DEFAULT_CASES_MIB, value_name = "MIB")]
    pub journal_cases_mib: usize,
    /// A reconcile loop is this many reconciles of one object, within --loop-window, each writing
    /// one field back to the same value (another writer keeps changing it) or sending a value the
    /// API server stores otherwise (it normalizes it). Reported once per window: a Warning Event
    /// ReconcileLoop on the object, reconciler_reconcile_loops_total, and `explain`. 0 turns
    /// loop detection off.
    #[arg(long, default_value_t = DEFAULT_REPEATS, value_name = "N")]
    pub loop_repeats: usize,
    /// The window --loop-repeats counts in (30s, 2m, ...).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "60s")]
    pub loop_window: Duration,
}

impl JournalArgs {
    pub fn limits(&self) -> JournalLimits {
        JournalLimits {
            entries: self.journal_entries,
            max_bytes: self.journal_max_mib.saturating_mul(1 << 20),
            case_bytes: self.journal_cases_mib.saturating_mul(1 << 20),
        }
    }

    pub fn loops(&self) -> LoopRule {
        LoopRule {
            repeats: self.loop_repeats,
            window: self.loop_window,
        }
    }
}
