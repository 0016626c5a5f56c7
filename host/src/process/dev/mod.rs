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

/// Where `dev` serves its decision journal unless told otherwise, and
/// where `explain` asks by default.
pub const DEV_EXPLAIN_ADDR: &str = "127.0.0.1:8471";

/// Runs the dev loop until Ctrl-C (or until settled, if asked). Plugins are
/// loaded from `config.plugins_dir` and hot-reloaded from it. Returns how
/// many plugin versions were refused.
pub async fn run(
    sandbox: Arc<Sandbox>,
    mut config: DevConfig,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<u64> {
    if let Some(addr) = config.explain_listen {
        serve_journal(addr, &config.journal, out).await?;
    }
    match config.members.take() {
        Some(members) => clusters::run(sandbox, config, members, out).await,
        None => one_cluster::run(sandbox, config, out).await,
    }
}

/// Serves the journal on `addr` for `explain`. A port already taken (another
/// `dev`) turns only this off: the session itself goes on.
async fn serve_journal(
    addr: std::net::SocketAddr,
    journal: &Arc<crate::engine::journal::Journal>,
    out: &mut (dyn Write + Send),
) -> std::io::Result<()> {
    let mut status = crate::process::http_server::HostStatus::new();
    status.journal = journal.clone();
    let router = crate::process::http_server::journal(Arc::new(status));
    let served = match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => {
            crate::process::http_server::serve_plain(listener, router).map_err(|e| e.to_string())
        }
        Err(e) => Err(e.to_string()),
    };
    match served {
        Ok(bound) => writeln!(
            out,
            "why an object was reconciled: reconciler-host explain KIND/NAMESPACE/NAME{} (the journal is served on http://{bound})",
            if bound.to_string() == DEV_EXPLAIN_ADDR {
                String::new()
            } else {
                format!(" --host http://{bound}")
            }
        ),
        Err(e) => writeln!(
            out,
            "explain is off for this session: cannot listen on {addr} ({e}); choose another --explain-listen"
        ),
    }
}
