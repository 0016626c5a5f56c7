//! The endpoints of `run`: the probes, and /metrics with /plugins. They
//! answer from the start, before the Lease and the caches: a host still
//! starting says so at /readyz rather than not answering at all.

use std::sync::Arc;

use super::config::RunConfig;
use crate::process::http_server::{HostStatus, serve};
use crate::process::metrics_server::serve_metrics;

/// Serves the probes and the metrics where `config` asks (the metrics'
/// settings are taken from it); the status they report from.
pub(super) async fn serve_endpoints(
    config: &mut RunConfig,
    client: &kube::Client,
) -> anyhow::Result<Arc<HostStatus>> {
    let status = Arc::new(HostStatus::new());
    status.journal.set_limits(config.journal);
    status.journal.loops.set_rule(config.loops);
    if let Some(addr) = config.http_listen {
        serve(addr, status.clone()).await?;
    }
    if let Some(metrics) = config.metrics.take() {
        serve_metrics(metrics, status.clone(), client.clone()).await?;
    }
    Ok(status)
}
