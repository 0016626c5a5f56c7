//! Serving `/metrics` and `/plugins` (`--metrics-listen`). They tell
//! anyone who reads them which plugins run, what they reconcile and how
//! often it fails, so by default they are served over HTTPS to clients the
//! API server authorizes (`metrics_auth.rs`), as controller-runtime serves
//! its metrics; plain HTTP to anyone only when asked (`--metrics-insecure`).
//! The probes stay open on their own port (`http_server.rs`): the kubelet
//! sends no token.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use axum::middleware;

use crate::admission::serving_cert::ServingCert;
use crate::process::http_server::{HostStatus, reports, serve_plain};
use crate::process::metrics_auth::{ApiServerAuth, require_token};

/// Where and how the reports are served.
#[derive(Clone)]
pub struct MetricsServing {
    pub listen: SocketAddr,
    pub access: MetricsAccess,
}

#[derive(Clone)]
pub enum MetricsAccess {
    /// HTTPS with this certificate, to clients the API server authorizes.
    Authorized(ServingCert),
    /// Plain HTTP, to anyone who can connect (`--metrics-insecure`).
    Open,
}

impl MetricsAccess {
    /// HTTPS with `tls.crt` and `tls.key` from `cert_dir` (cert-manager's
    /// Secret, mounted), else with a certificate made now for the names
    /// `localhost` and `127.0.0.1` (scrapers in the cluster then skip
    /// verification, as they do for controller-runtime's).
    pub fn authorized(cert_dir: Option<&Path>) -> anyhow::Result<Self> {
        let cert = match cert_dir {
            Some(dir) => ServingCert::from_files(&dir.join("tls.crt"), &dir.join("tls.key"), None)
                .with_context(|| format!("--metrics-cert-dir {}", dir.display()))?,
            None => ServingCert::generate(&["localhost".to_string(), "127.0.0.1".to_string()])
                .context("cannot make a certificate for the metrics endpoint")?,
        };
        Ok(Self::Authorized(cert))
    }
}

/// Listens on `serving.listen` and serves the reports until the process
/// ends; `client` reviews the tokens. Returns the address bound.
pub async fn serve_metrics(
    serving: MetricsServing,
    status: Arc<HostStatus>,
    client: kube::Client,
) -> anyhow::Result<SocketAddr> {
    let addr = serving.listen;
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("cannot listen on {addr} for /metrics and /plugins (choose another with --metrics-listen)")
    })?;
    let bound = match serving.access {
        MetricsAccess::Open => {
            let bound = serve_plain(listener, reports(status))?;
            tracing::warn!(
                "serving /metrics and /plugins on http://{bound} to anyone who can connect (--metrics-insecure)"
            );
            bound
        }
        MetricsAccess::Authorized(cert) => {
            let bound = listener.local_addr()?;
            let router = reports(status).layer(middleware::from_fn_with_state(
                ApiServerAuth::new(client),
                require_token,
            ));
            crate::support::tls_serving::spawn(
                listener,
                cert.server_config()?,
                router,
                crate::support::tls_serving::ConnectionLimits::default(),
                "metrics",
            );
            tracing::info!(
                "serving /metrics and /plugins on https://{bound} to clients the API server authorizes"
            );
            bound
        }
    };
    Ok(bound)
}
