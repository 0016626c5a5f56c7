//! Serving a router over HTTPS with the bounds every TLS endpoint of the
//! host keeps (the admission webhooks, the metrics): a client must finish
//! its handshake and send its headers within [`HANDSHAKE_TIMEOUT`], and at
//! most [`MAX_CONNECTIONS`] are served at once (more wait in the listen
//! backlog), so slow or many clients cannot exhaust the host.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

/// How long a client has to finish the TLS handshake and send its headers.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once per endpoint.
pub const MAX_CONNECTIONS: usize = 256;

/// Serves `router` on `listener` over TLS until the process ends; `what`
/// names the endpoint in logs.
pub fn spawn(listener: TcpListener, tls: rustls::ServerConfig, router: Router, what: &'static str) {
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let service = TowerToHyperService::new(router);
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    tokio::spawn(async move {
        loop {
            let Ok(permit) = connections.clone().acquire_owned().await else {
                return;
            };
            let (tcp, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "{what}: cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let acceptor = acceptor.clone();
            let service = service.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "{what}: TLS handshake failed");
                        return;
                    }
                    Err(_) => return,
                };
                let served = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HANDSHAKE_TIMEOUT)
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
                if let Err(e) = served {
                    tracing::debug!(%peer, error = %e, "{what}: connection ended");
                }
            });
        }
    });
}
