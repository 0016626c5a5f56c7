//! The options of `dev` and `simulate` for the embedded cluster's built-in
//! controllers.

use std::time::Duration;

use clap::Args;
use reconciler_contract::selector::LabelSelector;

use crate::cluster::embedded::builtins::BuiltinConfig;
use crate::support::duration_text::parse_duration;

#[derive(Debug, Args)]
pub struct BuiltinArgs {
    /// Do not play the built-in controllers (no ReplicaSets, Pods or Job progress): plugins see
    /// only what they and the object files wrote.
    #[arg(long)]
    pub no_builtin_controllers: bool,
    /// How long a Pod the built-in controllers create stays Pending before it runs.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "2s")]
    pub pod_start_delay: Duration,
    /// How long a Job's Pod runs before the Job completes (or fails), unless the Job's annotation
    /// embedded.reconciler-host.io/job-duration says.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10s")]
    pub job_duration: Duration,
    /// Jobs this label selector matches fail instead of completing (e.g.
    /// example.com/operation=scaling), unless the Job's annotation
    /// embedded.reconciler-host.io/job-outcome says Complete.
    #[arg(long, value_name = "SELECTOR", value_parser = parse_selector)]
    pub fail_jobs: Option<LabelSelector>,
}

fn parse_selector(text: &str) -> Result<LabelSelector, String> {
    LabelSelector::parse(text).map_err(|e| format!("{text:?} is not a label selector: {e}"))
}

impl BuiltinArgs {
    /// The built-in controllers' settings, or `None` when switched off.
    pub fn config(&self) -> Option<BuiltinConfig> {
        (!self.no_builtin_controllers).then(|| BuiltinConfig {
            pod_start_delay: self.pod_start_delay,
            job_duration: self.job_duration,
            failing_jobs: self.fail_jobs.clone(),
        })
    }
}
