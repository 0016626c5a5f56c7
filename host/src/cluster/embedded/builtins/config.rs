//! How the built-in controllers behave: the delays they play and which
//! Jobs fail.
//!
//! Why a module: `dev`, `simulate` and the tests each set these, and every
//! controller reads them through its round.

use std::time::Duration;

use reconciler_contract::selector::LabelSelector;

/// How the built-in controllers behave.
#[derive(Clone, Debug)]
pub struct BuiltinConfig {
    /// How long a new Pod stays Pending before it runs.
    pub pod_start_delay: Duration,
    /// How long a Job's Pod runs when the Job's annotation does not say.
    pub job_duration: Duration,
    /// Jobs these labels select fail instead of completing, unless the
    /// Job's annotation says otherwise.
    pub failing_jobs: Option<LabelSelector>,
}

impl Default for BuiltinConfig {
    fn default() -> Self {
        Self {
            pod_start_delay: Duration::from_secs(2),
            job_duration: Duration::from_secs(10),
            failing_jobs: None,
        }
    }
}
