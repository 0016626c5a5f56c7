//! What a kubeconfig Secret can make the host do, on a real API server.
//!
//! Whoever may write a Secret in the host's namespace must not get the
//! host's process, files or name space of members:
//!
//! - a Secret whose kubeconfig reads the host's token file
//!   (`tokenFile`) and skips TLS verification, aimed at a TLS listener of
//!   the test's: the listener never receives a bearer token;
//! - a Secret whose kubeconfig runs a command (`exec`): the command never
//!   runs (its marker file is not created);
//! - a Secret naming the member a `--clusters-dir` file names: the file's
//!   member keeps the name, and the Secret's server is never contacted;
//! - each is refused by name, with an Event on its Secret.
//!
//! And the operator's opt-in (`--cluster-secrets-allow`), which also
//! proves the listener and the marker would have seen the attack: with
//! `files,insecure,exec` allowed the token reaches the listener and the
//! command runs; a failing credential command is reported by its exit
//! status and stderr, never its environment or stdout.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use reconciler_tests::real_cluster::{Probe, RealCluster, Suite};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const SUITE: Suite = Suite {
    name: "cluster_sources_trust_real_cluster",
    host_binary: env!("CARGO_BIN_EXE_reconciler-host-under-test"),
};

const MANAGER: &str = "cluster-sources-trust-test";
const HOST_TOKEN: &str = "the-hosts-own-service-account-token";
const ENV_SECRET: &str = "value-only-the-credential-command-may-see";

/// A TLS server on loopback that records the head of every request it is
/// sent: what a server named by a hostile kubeconfig would learn.
struct Listener {
    address: std::net::SocketAddr,
    ca_pem: String,
    heads: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Listener {
    async fn start() -> Result<Self> {
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "listener ca");
        ca_params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = rcgen::KeyPair::generate()?;
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let ca = rcgen::Issuer::new(ca_params, ca_key);
        let leaf_key = rcgen::KeyPair::generate()?;
        let leaf_params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])?;
        let leaf = leaf_params.signed_by(&leaf_key, &ca)?;
        let config = rustls::ServerConfig::builder_with_provider(
            rustls::crypto::aws_lc_rs::default_provider().into(),
        )
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
        )?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = socket.local_addr()?;
        let heads = Arc::new(Mutex::new(Vec::new()));
        let seen = heads.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = socket.accept().await {
                let (acceptor, seen) = (acceptor.clone(), seen.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65_536 {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    seen.lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&head).into_owned());
                    let _ = tls
                        .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                        .await;
                });
            }
        });
        Ok(Self {
            address,
            ca_pem: ca_cert.pem(),
            heads,
            task,
        })
    }

    fn server(&self) -> String {
        format!("https://{}", self.address)
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn b64(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// A kubeconfig of one cluster and one user.
fn kubeconfig(cluster: serde_json::Value, user: serde_json::Value) -> String {
    serde_json::to_string(&json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "target", "cluster": cluster}],
        "users": [{"name": "someone", "user": user}],
        "contexts": [{"name": "target", "context": {"cluster": "target", "user": "someone"}}],
        "current-context": "target",
    }))
    .expect("JSON is YAML")
}

/// The kubeconfig that sends the host's token file to `listener` without
/// checking who it is.
fn stealing(listener: &Listener, token_file: &Path) -> String {
    kubeconfig(
        json!({"server": listener.server(), "insecure-skip-tls-verify": true}),
        json!({"tokenFile": token_file}),
    )
}

/// The kubeconfig whose credential command leaves `marker` behind.
fn running(listener: &Listener, marker: &Path) -> String {
    let script = format!(
        "touch {}; echo '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"from-the-command\"}}}}'",
        marker.display()
    );
    kubeconfig(
        json!({"server": listener.server(), "certificate-authority-data": b64(&listener.ca_pem)}),
        json!({"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                        "command": "/bin/sh", "args": ["-c", script]}}),
    )
}

/// The kubeconfig whose credential command fails after printing a secret
/// from its environment to stdout.
fn failing(listener: &Listener) -> String {
    kubeconfig(
        json!({"server": listener.server(), "certificate-authority-data": b64(&listener.ca_pem)}),
        json!({"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                        "command": "/bin/sh",
                        "args": ["-c", "echo \"token: $SECRET_VALUE\"; echo 'the token service said no' >&2; exit 7"],
                        "env": [{"name": "SECRET_VALUE", "value": ENV_SECRET}]}}),
    )
}

async fn member_secret(
    cluster: &RealCluster,
    secret: &str,
    member: &str,
    kubeconfig: &str,
) -> Result<()> {
    let ns = &cluster.namespace;
    let object = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": secret, "namespace": ns,
            "labels": {"reconciler-host.io/cluster": member}},
        "data": {"kubeconfig": b64(kubeconfig)}});
    let api: Api<Secret> = Api::namespaced(cluster.client.clone(), ns);
    api.patch(
        secret,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await
    .with_context(|| format!("applying Secret {secret}"))?;
    Ok(())
}

/// Waits for a Warning Event with `reason` on Secret `secret` whose note
/// contains every one of `needles`; returns the note.
async fn wait_for_event(
    cluster: &RealCluster,
    secret: &str,
    reason: &str,
    needles: &[&str],
) -> Result<String> {
    cluster
        .wait_for(
            &format!("a {reason} Event on Secret {secret} with {needles:?}"),
            Duration::from_secs(60),
            async || {
                let events = cluster.events_about("Secret", secret).await?;
                let found = events.iter().find(|e| {
                    e.event_type == "Warning"
                        && e.reason == reason
                        && needles.iter().all(|n| e.message.contains(n))
                });
                Ok(match found {
                    Some(event) => Probe::Ready(event.message.clone()),
                    None => {
                        Probe::Pending(reconciler_tests::real_cluster::events::summary(&events))
                    }
                })
            },
        )
        .await
}

/// The kubeconfig of the cluster the test runs on.
fn hub_kubeconfig(cluster: &RealCluster) -> Result<std::path::PathBuf> {
    match cluster.kubeconfig() {
        Some(path) => Ok(path.to_path_buf()),
        None => Ok(std::env::var_os("KUBECONFIG")
            .context("KUBECONFIG is not set")?
            .into()),
    }
}

/// Every Event in the test's namespace about a Secret, as text.
async fn every_secret_event(cluster: &RealCluster, secrets: &[&str]) -> Result<String> {
    let mut all = String::new();
    for secret in secrets {
        for event in cluster.events_about("Secret", secret).await? {
            all.push_str(&event.to_string());
            all.push('\n');
        }
    }
    Ok(all)
}

#[test]
fn a_kubeconfig_secret_cannot_run_commands_read_files_or_take_a_members_name() {
    SUITE.run(
        "a_kubeconfig_secret_cannot_run_commands_read_files_or_take_a_members_name",
        async |cluster| {
            let listener = Listener::start().await?;
            let work = tempfile::tempdir()?;
            let token_file = work.path().join("token");
            std::fs::write(&token_file, HOST_TOKEN)?;
            let marker = work.path().join("the-command-ran");
            // The operator's own member `prod`: the hub itself.
            let clusters_dir = work.path().join("clusters");
            std::fs::create_dir(&clusters_dir)?;
            let hub = hub_kubeconfig(cluster)?;
            std::fs::copy(&hub, clusters_dir.join("prod.yaml"))?;

            cluster.step("Secrets that steal a token, run a command, take the name prod");
            member_secret(cluster, "member-steal", "steal", &stealing(&listener, &token_file)).await?;
            member_secret(cluster, "member-run", "run", &running(&listener, &marker)).await?;
            let takeover = kubeconfig(
                json!({"server": listener.server(), "certificate-authority-data": b64(&listener.ca_pem)}),
                json!({"token": "sent-only-if-the-secret-won-prod"}),
            );
            member_secret(cluster, "member-prod", "prod", &takeover).await?;

            let ns = cluster.namespace.clone();
            let dir = clusters_dir.to_string_lossy().into_owned();
            cluster.start_host_with_kubeconfig_and_args(
                &[],
                &hub,
                &[
                    "--no-local-cluster",
                    "--no-plugin-resources",
                    "--cluster-secrets",
                    "--cluster-secrets-namespace",
                    &ns,
                    "--clusters-dir",
                    &dir,
                ],
            )?;

            cluster.step("each is refused by name, on its Secret");
            let note = wait_for_event(
                cluster,
                "member-steal",
                "Refused",
                &["steal", "users[someone].tokenFile", "insecure-skip-tls-verify", "--cluster-secrets-allow files,insecure"],
            )
            .await?;
            ensure!(!note.contains(HOST_TOKEN), "the Event quotes the token: {note}");
            wait_for_event(cluster, "member-run", "Refused", &["run", "users[someone].exec"]).await?;
            wait_for_event(cluster, "member-prod", "NameTaken", &["prod", "file", "secret member-prod"]).await?;
            cluster
                .wait_for_log(&["member-steal", "tokenFile"], Duration::from_secs(10))
                .await?;
            cluster
                .wait_for_log(&["member-run", "exec"], Duration::from_secs(10))
                .await?;

            cluster.step("nothing reached the listener, and the command never ran");
            // Longer than a member's health probe period (10 s): an engaged
            // member would have been probed by now.
            tokio::time::sleep(Duration::from_secs(12)).await;
            let heads = listener.heads();
            ensure!(
                heads.is_empty(),
                "the host sent {} requests to the server a Secret named: {heads:?}",
                heads.len()
            );
            ensure!(!marker.exists(), "the Secret's credential command ran in the host");
            ensure!(
                !cluster.host()?.log_text().contains(HOST_TOKEN),
                "the host's log holds the token file's contents"
            );
            Ok(())
        },
    );
}

#[test]
fn an_operator_can_allow_what_secrets_ask_and_credential_failures_hide_the_credentials() {
    SUITE.run(
        "an_operator_can_allow_what_secrets_ask_and_credential_failures_hide_the_credentials",
        async |cluster| {
            let listener = Listener::start().await?;
            let work = tempfile::tempdir()?;
            let token_file = work.path().join("token");
            std::fs::write(&token_file, HOST_TOKEN)?;
            let marker = work.path().join("the-command-ran");
            member_secret(
                cluster,
                "member-steal",
                "steal",
                &stealing(&listener, &token_file),
            )
            .await?;
            member_secret(cluster, "member-run", "run", &running(&listener, &marker)).await?;
            member_secret(cluster, "member-fail", "fail", &failing(&listener)).await?;

            let ns = cluster.namespace.clone();
            let hub = hub_kubeconfig(cluster)?;
            cluster.start_host_with_kubeconfig_and_args(
                &[],
                &hub,
                &[
                    "--no-local-cluster",
                    "--no-plugin-resources",
                    "--cluster-secrets",
                    "--cluster-secrets-allow",
                    "files,insecure,exec",
                    "--cluster-secrets-namespace",
                    &ns,
                ],
            )?;

            cluster.step("allowed, the token file reaches the listener and the command runs");
            let bearer = format!("bearer {HOST_TOKEN}");
            cluster
                .wait_for(
                    "the token at the listener",
                    Duration::from_secs(60),
                    async || {
                        let heads = listener.heads();
                        Ok(
                            if heads
                                .iter()
                                .any(|h| h.to_ascii_lowercase().contains(&bearer))
                            {
                                Probe::Ready(())
                            } else {
                                Probe::Pending(format!(
                                    "{} requests, none with the token",
                                    heads.len()
                                ))
                            },
                        )
                    },
                )
                .await?;
            cluster
                .wait_for(
                    "the command's marker",
                    Duration::from_secs(60),
                    async || {
                        Ok(if marker.exists() {
                            Probe::Ready(())
                        } else {
                            Probe::Pending("no marker yet".into())
                        })
                    },
                )
                .await?;

            cluster
                .step("a failing credential command: its status and stderr, not its env or stdout");
            let note = wait_for_event(
                cluster,
                "member-fail",
                "EngageFailed",
                &["fail", "exit status: 7", "the token service said no"],
            )
            .await?;
            ensure!(
                !note.contains(ENV_SECRET),
                "the Event holds the command's secret: {note}"
            );
            let events =
                every_secret_event(cluster, &["member-steal", "member-run", "member-fail"]).await?;
            ensure!(
                !events.contains(ENV_SECRET),
                "an Event holds the command's secret: {events}"
            );
            let log = cluster.host()?.log_text();
            ensure!(
                log.contains("the token service said no"),
                "the log does not say why the command failed"
            );
            ensure!(
                !log.contains(ENV_SECRET),
                "the host's log holds the command's secret: {}",
                log.lines()
                    .filter(|l| l.contains(ENV_SECRET))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            Ok(())
        },
    );
}
