//! `dev`: every plugin against the embedded cluster, on the real clock.
//!
//! The laptop loop: object YAML in a directory is the cluster's desired
//! input (files created, changed or removed become creates, updates and
//! deletes), each reconcile prints one line, and the primary objects with
//! their status are shown as a table whenever things settle.
//!
//! With several clusters (`--clusters`, `--cluster-objects`) the members
//! run in a fleet, as `run` serves them (`clusters.rs`); one cluster has
//! a loop of its own that dispatches a single engine (`one_cluster.rs`).

mod clusters;
mod config;
mod embedded;
mod manifest_dir;
mod one_cluster;
mod plugins;
mod stamp;
mod tables;

use std::io::Write;
use std::sync::Arc;

pub use config::{DevConfig, MemberSeed};
pub use embedded::seed_crds;
pub use manifest_dir::ManifestDir;
pub use tables::{clusters_table, primaries_table};

use crate::plugin::Sandbox;

/// Runs the dev loop until Ctrl-C (or until settled, if asked). Plugins are
/// loaded from `config.plugins_dir` and hot-reloaded from it. Returns how
/// many plugin versions were refused.
pub async fn run(
    sandbox: Arc<Sandbox>,
    mut config: DevConfig,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<u64> {
    match config.members.take() {
        Some(members) => clusters::run(sandbox, config, members, out).await,
        None => one_cluster::run(sandbox, config, out).await,
    }
}
