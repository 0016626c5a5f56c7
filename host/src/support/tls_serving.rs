//! Serving a router over HTTPS with the bounds every TLS endpoint of the
//! host keeps (the admission webhooks, the metrics), so that slow, many or
//! hostile clients cannot exhaust the host nor keep a prompt client out:
//! - a client has [`ConnectionLimits::read_timeout`] for each of its TLS
//!   handshake and a request's headers (handlers bound the body with the
//!   same deadline);
//! - at most [`ConnectionLimits::max_connections`] are open at once, and
//!   when all are taken a new connection closes the oldest one not in a
//!   call ([`crate::support::connection_slots`]) instead of waiting behind it.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::support::connection_slots::{ConnectionSlots, SlotHandle};

/// How long a client has, by default, to finish the TLS handshake, and
/// then to send a request's headers.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections open at once per endpoint, by default.
pub const MAX_CONNECTIONS: usize = 256;

/// What one endpoint lets its clients hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub read_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: MAX_CONNECTIONS,
            read_timeout: HANDSHAKE_TIMEOUT,
        }
    }
}

/// The connection a request came on, as a request extension: a handler
/// marks it as in a call (see [`crate::support::connection_slots`]) once it has
/// read the request, so it is not closed to make room while it answers.
#[derive(Clone)]
pub struct ConnectionSlot(pub Arc<SlotHandle>);

/// Serves `router` on `listener` over TLS until the process ends; `what`
/// names the endpoint in logs.
pub fn spawn(
    listener: TcpListener,
    tls: rustls::ServerConfig,
    router: Router,
    limits: ConnectionLimits,
    what: &'static str,
) {
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let slots = ConnectionSlots::new(limits.max_connections);
    let read_timeout = limits.read_timeout;
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "{what}: cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            // Taken (closing an idle or slow connection if need be) before
            // the next accept: with every slot in a call, newcomers wait in
            // the listen backlog.
            let (slot, closed) = slots.take().await;
            let acceptor = acceptor.clone();
            let slot = ConnectionSlot(Arc::new(slot));
            let service = TowerToHyperService::new(router.clone().layer(axum::Extension(slot)));
            tokio::spawn(async move {
                let serving = async {
                    let tls = match tokio::time::timeout(read_timeout, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "{what}: TLS handshake failed");
                            return;
                        }
                        Err(_) => return,
                    };
                    let served = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(read_timeout)
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                    if let Err(e) = served {
                        tracing::debug!(%peer, error = %e, "{what}: connection ended");
                    }
                };
                tokio::select! {
                    () = serving => {}
                    _ = closed => tracing::debug!(%peer, "{what}: connection closed to make room"),
                }
            });
        }
    });
}
