//! /metrics and /plugins against a real API server: only clients whose
//! token it authenticates and whose user it lets `get` the path read them;
//! the probes stay open.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use reconciler_host::admission::serving_cert::ServingCert;
use reconciler_host::process::http_server::{HostStatus, serve};
use reconciler_host::process::metrics_server::{MetricsAccess, MetricsServing, serve_metrics};
use reconciler_sdk::KindRef;
use reconciler_tests::https_client;
use reconciler_tests::real_cluster::{RealCluster, Suite};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const SUITE: Suite = Suite {
    name: "metrics_real_cluster",
    host_binary: env!("CARGO_BIN_EXE_reconciler-host-under-test"),
};

/// How long a new ClusterRoleBinding may take to reach the authorizer.
const RBAC_SETTLES: Duration = Duration::from_secs(30);

#[test]
fn metrics_need_a_token_the_api_server_allows_and_probes_stay_open() {
    SUITE.run(
        "metrics_need_a_token_the_api_server_allows_and_probes_stay_open",
        async |cx| {
            let reader = format!("{}-metrics-reader", cx.namespace);
            let result = metrics_need_a_token(cx, &reader).await;
            for kind in ["ClusterRoleBinding", "ClusterRole"] {
                let kind = KindRef::new("rbac.authorization.k8s.io", "v1", kind);
                cx.delete(&kind, &reader).await?;
            }
            result
        },
    );
}

async fn metrics_need_a_token(cx: &mut RealCluster, reader: &str) -> Result<()> {
    for account in ["scraper", "stranger"] {
        cx.create(json!({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": account}}))
            .await?;
    }
    // What a user grants Prometheus: get on the non-resource URLs.
    cx.create(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": reader},
        "rules": [{"nonResourceURLs": ["/metrics", "/plugins"], "verbs": ["get"]}],
    }))
    .await?;
    cx.create(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": reader},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader},
        "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": cx.namespace}],
    }))
    .await?;
    let scraper = cx.service_account_token("scraper").await?;
    let stranger = cx.service_account_token("stranger").await?;

    let status = Arc::new(HostStatus::new());
    let cert = ServingCert::generate(&["127.0.0.1".to_string()])?;
    let metrics = serve_metrics(
        MetricsServing {
            listen: "127.0.0.1:0".parse()?,
            access: MetricsAccess::Authorized(cert.clone()),
        },
        status.clone(),
        cx.client.clone(),
    )
    .await?;
    let probes = serve("127.0.0.1:0".parse()?, status).await?;

    let (code, _) = https_get(metrics, &cert, "/metrics", None).await?;
    ensure!(code == 401, "no token: {code}, not 401");
    let (code, _) = https_get(metrics, &cert, "/metrics", Some("made-up")).await?;
    ensure!(
        code == 401,
        "a token the API server does not know: {code}, not 401"
    );
    let (code, body) = https_get(metrics, &cert, "/plugins", Some(&stranger)).await?;
    ensure!(
        code == 403 && body.contains("nonResourceURLs"),
        "a service account without the right: {code} {body}"
    );
    cx.step("401 without a valid token, 403 for a user without get on the path");

    let started = Instant::now();
    loop {
        let (code, body) = https_get(metrics, &cert, "/metrics", Some(&scraper)).await?;
        if code == 200 {
            ensure!(body.ends_with("# EOF\n"), "not OpenMetrics text: {body}");
            break;
        }
        ensure!(
            started.elapsed() < RBAC_SETTLES,
            "the scraper, granted get on /metrics, still gets {code}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (code, body) = https_get(metrics, &cert, "/plugins", Some(&scraper)).await?;
    ensure!(
        code == 200 && body == "[]",
        "/plugins for the scraper: {code} {body}"
    );
    cx.step("the scraper reads /metrics and /plugins");

    let (code, _) = plain_get(probes, "/healthz").await?;
    ensure!(code == 200, "/healthz: {code}");
    let (code, _) = plain_get(probes, "/metrics").await?;
    ensure!(code == 404, "the probes' port serves no /metrics: {code}");
    Ok(())
}

/// GETs `path` over HTTPS, trusting only `cert`'s CA, with `token` as the
/// bearer token; the status code and body.
async fn https_get(
    addr: SocketAddr,
    cert: &ServingCert,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String)> {
    let authorization = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{authorization}Connection: close\r\n\r\n"
    );
    https_client::send(addr, &cert.ca_bundle_pem, &request)
        .await
        .context("the metrics endpoint answers over HTTPS")
}

async fn plain_get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    let mut tcp = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).await?;
    Ok(https_client::parse_response(&raw))
}
