//! The Kubernetes client `run` talks through.
//!
//! kube's default client has no time limit on a request: a request sent on
//! a connection that died without a reset (a node or a load balancer gone
//! away) waits forever. For a controller that is the worst failure there is,
//! because it is silent: a watch that is never (re)established or a
//! reconcile stuck in an apply looks, from the outside, like a host with
//! nothing to do. So every request gets a deadline for its response to
//! start. A watch answers at once and then streams, so the deadline does
//! not cut it short; a watch that goes quiet afterwards is kube's watcher's
//! job (it reconnects after its idle timeout). An expired deadline is a
//! transient error, retried with backoff like a 503.

use std::time::Duration;

use anyhow::Context as _;
use kube::client::ClientBuilder;
use tower::timeout::TimeoutLayer;
use tower::util::MapErrLayer;

use super::client_rate_limit::{RateLimit, RateLimitLayer};
use crate::cluster::kubernetes::credential_errors;

/// The default of `run --request-timeout-secs`. The API server ends a
/// request it cannot serve after 60 s itself (its `--request-timeout`), so a
/// client waiting any longer is only waiting on a dead connection.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A client from kube's default configuration (KUBECONFIG or the pod's
/// service account), each request bounded by `request_timeout` (`None`: no
/// bound), checked by asking the server its version.
pub async fn connect(request_timeout: Option<Duration>) -> anyhow::Result<kube::Client> {
    // kube's error repeats its causes; its top line says it all.
    let config = kube::Config::infer().await.map_err(|e| {
        anyhow::anyhow!(
            "cannot configure a Kubernetes client: set KUBECONFIG (or have ~/.kube/config), or run in a pod with a service account: {e}"
        )
    })?;
    let client = client_from_config(config, request_timeout)?;
    let version = client
        .apiserver_version()
        .await
        .context("cannot reach the Kubernetes API server")?;
    tracing::info!(
        "connected to Kubernetes {} ({})",
        version.git_version,
        version.platform
    );
    if !supported_version(&version.major, &version.minor) {
        tracing::warn!(
            "Kubernetes {}.{} is older than 1.28, the oldest version this host supports",
            version.major,
            version.minor
        );
    }
    Ok(client)
}

/// kube's client for `config`, with a deadline on every request's response.
pub fn client_from_config(
    config: kube::Config,
    request_timeout: Option<Duration>,
) -> anyhow::Result<kube::Client> {
    limited_client_from_config(config, request_timeout, None)
}

/// [`client_from_config`], sending at most `rate` requests (a bucket of
/// this client's own; `None`: no limit).
pub fn limited_client_from_config(
    config: kube::Config,
    request_timeout: Option<Duration>,
    rate: Option<RateLimit>,
) -> anyhow::Result<kube::Client> {
    // Building runs a kubeconfig's exec command once: its failure is told
    // without the command's environment or output, as every later one is.
    let builder = ClientBuilder::try_from(config)
        .map_err(|e| anyhow::anyhow!(credential_errors::kube_error_text(&e)))
        .context("cannot build a Kubernetes client")?;
    Ok(builder
        .with_layer(&MapErrLayer::new(credential_errors::hide_credentials))
        .with_layer(&tower::util::option_layer(
            request_timeout.map(TimeoutLayer::new),
        ))
        .with_layer(&tower::util::option_layer(rate.map(RateLimitLayer)))
        .build())
}

/// Whether a server's major.minor is 1.28 or newer. Minor versions may
/// carry a suffix (`28+` on some managed clusters).
fn supported_version(major: &str, minor: &str) -> bool {
    let number = |s: &str| {
        s.trim_end_matches(|c: char| !c.is_ascii_digit())
            .parse::<u32>()
            .ok()
    };
    match (number(major), number(minor)) {
        (Some(major), Some(minor)) => (major, minor) >= (1, 28),
        // An unparseable version is not a reason to warn.
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::AsyncReadExt as _;
    use tokio::net::TcpListener;

    use super::{client_from_config, supported_version};

    #[test]
    fn versions_from_1_28_on_are_supported() {
        assert!(supported_version("1", "28"));
        assert!(supported_version("1", "33+"));
        assert!(!supported_version("1", "27"));
        assert!(supported_version("", ""));
    }

    /// A server that accepts connections and reads requests but never
    /// answers: what a dead connection looks like to the client.
    async fn silent_server() -> (String, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let mut open = Vec::new();
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 4096];
                let _ = socket.read(&mut buf).await;
                open.push(socket);
            }
        });
        (url, server)
    }

    #[tokio::test]
    async fn a_request_without_an_answer_fails_after_the_request_timeout() {
        let (url, server) = silent_server().await;
        let config = kube::Config::new(url.parse().unwrap());
        let client = client_from_config(config, Some(Duration::from_millis(300))).unwrap();

        let result = tokio::time::timeout(Duration::from_secs(20), client.apiserver_version())
            .await
            .expect("the request timeout ends the request, not this test's safety net");
        let err = result.expect_err("nothing answered");
        let kube::Error::Service(inner) = &err else {
            panic!("expected the timeout layer's error, got {err:?}");
        };
        assert!(
            inner.is::<tower::timeout::error::Elapsed>(),
            "expected Elapsed, got {inner:?}"
        );
        server.abort();
    }

    #[tokio::test]
    async fn without_a_request_timeout_a_silent_server_keeps_the_request_waiting() {
        let (url, server) = silent_server().await;
        let config = kube::Config::new(url.parse().unwrap());
        let client = client_from_config(config, None).unwrap();
        let waited =
            tokio::time::timeout(Duration::from_millis(600), client.apiserver_version()).await;
        assert!(waited.is_err(), "the request ended: {waited:?}");
        server.abort();
    }
}
