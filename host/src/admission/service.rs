//! Admission as part of `run`: the certificate, the plugin set, the HTTPS
//! server and the webhook configurations, started together and kept in
//! step with the plugins directory.
//!
//! It runs on every replica, before and regardless of leader election:
//! answering admission needs no cache and no Lease. Each replica also
//! applies the webhook configurations; they are identical, and server-side
//! apply with one field manager makes that harmless.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::plugin_set::AdmissionPlugins;
use super::server::serve;
use super::serving_cert::ServingCert;
use super::webhook_configs::{WebhookEndpoint, WebhookSetup, sync};
use crate::cluster::RealClock;
use crate::dir_watch::watch_dir;
use crate::plugin::Sandbox;

/// Where the serving certificate comes from.
#[derive(Clone, Debug)]
pub enum CertSource {
    /// Files, such as cert-manager's Secret mounted into the pod.
    Files {
        cert: PathBuf,
        key: PathBuf,
        ca: Option<PathBuf>,
    },
    /// Generated once and kept in this Secret (`namespace`, `name`).
    Secret { namespace: String, name: String },
}

/// Options of admission under `run`.
#[derive(Clone, Debug)]
pub struct AdmissionConfig {
    pub listen: SocketAddr,
    pub endpoint: WebhookEndpoint,
    pub cert: CertSource,
    /// Names the webhook configurations `<prefix>-<plugin>`.
    pub prefix: String,
    /// Apply and remove the webhook configurations (off when they are
    /// managed elsewhere, e.g. by a GitOps tool).
    pub manage_webhooks: bool,
    /// The namespaces the host serves; empty: all.
    pub namespaces: Vec<String>,
    /// How often configurations are applied again (plugins whose kind was
    /// not served yet, configurations edited by hand).
    pub resync_every: Duration,
}

/// The names a generated certificate must carry for `endpoint`.
pub fn certificate_names(endpoint: &WebhookEndpoint) -> Vec<String> {
    match endpoint {
        WebhookEndpoint::Service {
            namespace, name, ..
        } => vec![
            format!("{name}.{namespace}.svc"),
            format!("{name}.{namespace}.svc.cluster.local"),
        ],
        WebhookEndpoint::Url(url) => {
            let rest = url.trim_start_matches("https://");
            let authority = rest.split('/').next().unwrap_or(rest);
            // `host:port`, `[v6]:port`, or a bare host.
            let host = match authority.rsplit_once(':') {
                Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
                _ => authority,
            };
            vec![
                host.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_string(),
            ]
        }
    }
}

/// Starts admission: returns once the server listens (with its address),
/// leaving a task that reloads plugins and re-applies configurations.
pub async fn start(
    sandbox: Arc<Sandbox>,
    client: kube::Client,
    plugins_dir: PathBuf,
    config: AdmissionConfig,
) -> anyhow::Result<SocketAddr> {
    let cert = match &config.cert {
        CertSource::Files { cert, key, ca } => ServingCert::from_files(cert, key, ca.as_deref())?,
        CertSource::Secret { namespace, name } => {
            ServingCert::from_secret(
                client.clone(),
                namespace,
                name,
                &certificate_names(&config.endpoint),
            )
            .await?
        }
    };
    let plugins = Arc::new(AdmissionPlugins::new());
    plugins.reload(sandbox.clone(), &plugins_dir).await;
    let bound = serve(
        config.listen,
        &cert,
        plugins.clone(),
        Arc::new(RealClock),
        sandbox.admission_instances(),
    )
    .await?;
    let setup = WebhookSetup {
        prefix: config.prefix.clone(),
        endpoint: config.endpoint.clone(),
        ca_bundle_pem: cert.ca_bundle_pem.clone(),
        namespaces: config.namespaces.clone(),
    };
    if config.manage_webhooks {
        apply(&client, &plugins, &setup).await;
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        // The watcher lives as long as this task.
        let _watch = watch_dir(&plugins_dir, tx);
        let mut resync = tokio::time::interval(config.resync_every);
        resync.tick().await;
        loop {
            tokio::select! {
                changed = rx.recv() => {
                    if changed.is_none() {
                        return;
                    }
                    while rx.try_recv().is_ok() {}
                    plugins.reload(sandbox.clone(), &plugins_dir).await;
                }
                _ = resync.tick() => {}
            }
            if config.manage_webhooks {
                apply(&client, &plugins, &setup).await;
            }
        }
    });
    Ok(bound)
}

async fn apply(client: &kube::Client, plugins: &AdmissionPlugins, setup: &WebhookSetup) {
    match sync(client, &plugins.all(), setup).await {
        Ok(lines) => {
            for line in lines {
                tracing::info!("{line}");
            }
        }
        Err(e) => tracing::warn!(
            "admission: cannot apply the webhook configurations: {e:#} (retried at the next plugin change or resync)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_certificate_names_what_the_api_server_calls() {
        let service = WebhookEndpoint::Service {
            namespace: "ops".into(),
            name: "reconciler-host".into(),
            port: 8443,
        };
        assert_eq!(
            certificate_names(&service),
            [
                "reconciler-host.ops.svc",
                "reconciler-host.ops.svc.cluster.local"
            ]
        );
        for (url, host) in [
            ("https://127.0.0.1:9443", "127.0.0.1"),
            ("https://webhooks.example.com/base", "webhooks.example.com"),
            ("https://[::1]:9443", "::1"),
        ] {
            assert_eq!(certificate_names(&WebhookEndpoint::Url(url.into())), [host]);
        }
    }
}
