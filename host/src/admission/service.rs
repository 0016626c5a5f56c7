//! Admission as part of `run`: the certificate, the HTTPS server and the
//! webhook configurations, started together and kept in step with the
//! plugins the host serves (published by its plugins directory).
//!
//! It runs on every replica, before and regardless of leader election:
//! answering admission needs no cache and no Lease. Each replica also
//! applies the webhook configurations; they are identical, and server-side
//! apply with one field manager makes that harmless.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::cert_secret::CertSecret;
use super::client_ca::ClientCa;
use super::live_cert::LiveCert;
use super::plugin_set::AdmissionPlugins;
use super::server::{ServerLimits, serve_with};
use super::serving_cert::ServingCert;
use super::webhook_configs::{WebhookEndpoint, WebhookSetup, sync_with_shard_labels};
use crate::cluster::RealClock;
use crate::plugin::Sandbox;
use crate::support::duty_holder::DutyHolder;

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
    /// Namespaces the webhooks never reach (the host's own among them).
    pub excluded_namespaces: Vec<String>,
    /// The host's Namespace, which owns the webhook configurations; none
    /// outside a pod.
    pub owner_namespace: Option<String>,
    /// How often configurations are applied again (plugins whose kind was
    /// not served yet, configurations edited by hand) and the generated
    /// certificate's Secret is read again (renewal).
    pub resync_every: Duration,
    /// What the webhook server lets its clients hold at once.
    pub server: ServerLimits,
    /// Serve only clients whose certificate these CAs signed (the API
    /// server's); none: any client.
    pub client_ca: Option<ClientCa>,
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

/// Starts admission for the plugins `plugins` holds: returns once the
/// server listens (with its address), leaving a task that applies the
/// configurations again whenever what serves changes, and every
/// `resync_every`.
pub async fn start(
    sandbox: Arc<Sandbox>,
    client: kube::Client,
    plugins: Arc<AdmissionPlugins>,
    config: AdmissionConfig,
    mut duties: DutyHolder,
) -> anyhow::Result<SocketAddr> {
    let (cert, secret) = match &config.cert {
        CertSource::Files { cert, key, ca } => {
            (ServingCert::from_files(cert, key, ca.as_deref())?, None)
        }
        CertSource::Secret { namespace, name } => {
            // Renewal waits three resyncs for every replica to trust the
            // new CA (cert_secret.rs).
            let secret = CertSecret::new(
                client.clone(),
                namespace,
                name,
                &certificate_names(&config.endpoint),
                config.resync_every * 3,
            );
            (secret.sync().await?, Some(secret))
        }
    };
    let live = LiveCert::new(&cert)?;
    let bound = serve_with(
        config.listen,
        live.clone(),
        plugins.clone(),
        Arc::new(RealClock),
        sandbox.admission_instances(),
        config.server,
        config.client_ca.as_ref(),
    )
    .await?;
    let mut setup = WebhookSetup {
        prefix: config.prefix.clone(),
        endpoint: config.endpoint.clone(),
        ca_bundle_pem: cert.ca_bundle_pem.clone(),
        namespaces: config.namespaces.clone(),
        excluded_namespaces: config.excluded_namespaces.clone(),
        owner_namespace: config.owner_namespace.clone(),
    };
    let manage = config.manage_webhooks;
    if !manage && secret.is_none() {
        return Ok(bound);
    }
    let mut changes = plugins.subscribe();
    changes.mark_unchanged();
    if manage && duties.holds() {
        apply(&client, &plugins, &setup).await;
    }
    // The certificate is renewed at each resync even when the
    // configurations are managed elsewhere.
    tokio::spawn(async move {
        let mut resync = tokio::time::interval(config.resync_every);
        resync.tick().await;
        loop {
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = resync.tick() => {
                    if let Some(secret) = &secret {
                        renew(secret, &live, &mut setup).await;
                    }
                }
                // Gained (or lost) the once-only duties.
                () = duties.changed() => {}
            }
            // Every replica serves; one applies the configurations.
            if manage && duties.holds() {
                apply(&client, &plugins, &setup).await;
            }
        }
    });
    Ok(bound)
}

/// Takes up what the shared Secret holds now: the certificate to serve, and
/// the bundle to put in the configurations (renewing it when due).
async fn renew(secret: &CertSecret, live: &LiveCert, setup: &mut WebhookSetup) {
    let cert = match secret.sync().await {
        Ok(cert) => cert,
        Err(e) => {
            tracing::warn!(
                "admission: cannot renew the serving certificate: {e:#} (retried at the next resync; the current one keeps serving)"
            );
            return;
        }
    };
    match live.replace(&cert) {
        Ok(true) => tracing::info!("admission: serving the certificate now in the shared Secret"),
        Ok(false) => {}
        Err(e) => tracing::warn!(
            "admission: the certificate in the shared Secret does not load: {e:#} (the current one keeps serving)"
        ),
    }
    setup.ca_bundle_pem = cert.ca_bundle_pem;
}

async fn apply(client: &kube::Client, plugins: &AdmissionPlugins, setup: &WebhookSetup) {
    let shard_kinds = plugins
        .shard_labels()
        .map(|labels| labels.kinds())
        .unwrap_or_default();
    let report = sync_with_shard_labels(client, &plugins.all(), &shard_kinds, setup).await;
    for line in report.changes {
        tracing::info!("{line}");
    }
    for error in report.errors {
        tracing::warn!("admission: {error} (retried at the next plugin change or resync)");
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
