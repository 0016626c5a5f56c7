use std::path::PathBuf;

use clap::Args;

use super::listen::{Listen, parse_listen};
use crate::process::metrics_server::{MetricsAccess, MetricsServing};

/// Where and to whom `run` serves /metrics and /plugins.
#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// Where to serve /metrics (Prometheus) and /plugins (JSON), apart from the probes: over
    /// HTTPS, to clients whose bearer token the API server authenticates (TokenReview) and
    /// authorizes for `get` on the path (SubjectAccessReview), as controller-runtime does; `off`
    /// for nowhere. In a pod: `0.0.0.0:8444`.
    #[arg(long, default_value = "off", value_name = "ADDR", value_parser = parse_listen)]
    pub metrics_listen: Listen,
    /// Serve /metrics and /plugins over plain HTTP to anyone who can connect: no TLS, no token.
    /// Only where the network is trusted.
    #[arg(long)]
    pub metrics_insecure: bool,
    /// A directory with tls.crt and tls.key (cert-manager's Secret, mounted) to serve the metrics
    /// with [default: a self-signed certificate made at start].
    #[arg(long, value_name = "DIR", conflicts_with = "metrics_insecure")]
    pub metrics_cert_dir: Option<PathBuf>,
}

impl MetricsArgs {
    pub fn serving(&self) -> anyhow::Result<Option<MetricsServing>> {
        let Listen::At(listen) = self.metrics_listen else {
            return Ok(None);
        };
        let access = if self.metrics_insecure {
            MetricsAccess::Open
        } else {
            MetricsAccess::authorized(self.metrics_cert_dir.as_deref())?
        };
        Ok(Some(MetricsServing { listen, access }))
    }
}
