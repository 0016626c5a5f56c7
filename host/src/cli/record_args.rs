use std::path::PathBuf;

use clap::Args;

use crate::golden::recorder::{DEFAULT_RECORD_MAX_MIB, RecordOptions};

/// `--record` and how much of it to keep, shared by `dev`, `simulate` and
/// `run`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Write every reconcile as a golden case under DIR/<plugin>/ (the request, the objects its
    /// cache reads returned, the response), so live traffic becomes tests: replay them with
    /// `reconciler-host test plugins/<plugin>.wasm DIR/<plugin>`. Cases are numbered on from
    /// those already there (never overwritten) and readable by the host's user only.
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,
    /// How much the recorded cases may take together (those of earlier runs included); past it
    /// the oldest are removed.
    #[arg(long, default_value_t = DEFAULT_RECORD_MAX_MIB, value_name = "MIB", requires = "record")]
    pub record_max_mib: u64,
    /// Record the values of Secrets' `data` and `stringData` as the plugin read them. By
    /// default each value is written as "redacted" (base64 in `data`), keys kept.
    #[arg(long, requires = "record")]
    pub record_secret_data: bool,
}

impl RecordArgs {
    pub fn options(&self) -> Option<RecordOptions> {
        self.record.as_ref().map(|dir| RecordOptions {
            dir: dir.clone(),
            max_bytes: self.record_max_mib.saturating_mul(1 << 20),
            secret_data: self.record_secret_data,
        })
    }
}
