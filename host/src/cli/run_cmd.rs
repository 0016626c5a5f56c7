use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use super::journal_args::JournalArgs;
use anyhow::Context as _;
use clap::Args;

use super::listen::{Listen, parse_listen};
use super::metrics_args::MetricsArgs;
use super::record_args::RecordArgs;
use super::registry_args::PluginRefArgs;
use super::sandbox_args::SandboxArgs;
use crate::admission::client_ca::ClientCa;
use crate::admission::server::ServerLimits;
use crate::admission::service::{AdmissionConfig, CertSource};
use crate::admission::webhook_configs::WebhookEndpoint;
use crate::cluster::kubernetes::api_client::{DEFAULT_REQUEST_TIMEOUT, connect};
use crate::engine::{PrimarySelectors, ServeScope};
use crate::process::leader_election::{
    DEFAULT_LEASE_NAME, LeaderElectionConfig, default_namespace,
};
use crate::process::run::PulledConfig;
use crate::process::run::{RunConfig, ShardingConfig, run, shutdown_signal};
use crate::registry::signatures::{KeylessIdentity, TrustRootFiles};
use crate::registry::trust::HostPolicy;
use crate::sharding::coordinator::ShardBy;
use crate::sharding::membership::MembershipConfig;
use crate::support::tls_serving::ConnectionLimits;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Directory of compiled plugins (*.wasm), watched for new, changed and removed plugins.
    #[arg(long, default_value = "plugins", value_name = "DIR")]
    pub plugins_dir: PathBuf,
    #[command(flatten)]
    pub clusters: super::cluster_args::ClusterArgs,
    /// Serve only this namespace (repeatable). Every namespaced kind is watched in these
    /// namespaces only, so the host needs RBAC there only; cluster-scoped kinds are watched whole.
    #[arg(long, short = 'n', value_name = "NAMESPACE")]
    pub namespace: Vec<String>,
    /// Reconcile only primaries whose labels match, e.g. `tier=prod` (every plugin) or
    /// `podset:team in (a,b)` (one plugin; overrides the one for all). Repeatable.
    #[arg(long, value_name = "[PLUGIN:]SELECTOR")]
    pub selector: Vec<String>,
    /// Server-side apply the CustomResourceDefinitions in DIR (YAML files) at start and wait
    /// until they are established, before any plugin starts.
    #[arg(long, value_name = "DIR")]
    pub install_crds: Option<PathBuf>,
    /// On SIGTERM or SIGINT, how long reconciles in flight may take to finish.
    #[arg(long, default_value_t = 25, value_name = "SECS")]
    pub shutdown_timeout_secs: u64,
    /// How long a request to the API server may wait for its answer to start before it is
    /// given up and retried; 0 for no limit. A dead connection otherwise stalls a watch or a
    /// reconcile for good. Watches answer at once and then stream, so this does not cut them.
    #[arg(long, default_value_t = DEFAULT_REQUEST_TIMEOUT.as_secs(), value_name = "SECS")]
    pub request_timeout_secs: u64,
    /// How often a plugin whose kinds the cluster does not serve yet (or RBAC forbids) is tried again.
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    pub kind_retry_secs: u64,
    /// Where to serve the probes /healthz and /readyz, to anyone (plain HTTP); `off` for nowhere.
    /// In a pod, listen on all interfaces: `0.0.0.0:8080`. /metrics and /plugins: --metrics-listen.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR", value_parser = parse_listen)]
    pub http_listen: Listen,
    #[command(flatten)]
    pub metrics: MetricsArgs,
    /// Reconcile only while holding a coordination.k8s.io Lease, so that of several replicas
    /// one reconciles at a time and the others wait as standbys. Off by default (one process
    /// on a laptop needs no Lease).
    #[arg(long)]
    pub leader_election: bool,
    /// Namespace of the Lease [default: $POD_NAMESPACE, else the service account's
    /// namespace, else "default"].
    #[arg(long, value_name = "NAMESPACE", requires = "leader_election")]
    pub leader_election_namespace: Option<String>,
    /// Name of the Lease. Replicas that share it take turns; hosts that serve different
    /// plugins or namespaces need different ones.
    #[arg(long, default_value = DEFAULT_LEASE_NAME, value_name = "NAME", requires = "leader_election")]
    pub leader_election_id: String,
    #[command(flatten)]
    pub sharding: ShardingArgs,
    #[command(flatten)]
    pub record: RecordArgs,
    /// How long a change of an owned or read object (a Pod of a PodSet) waits before its primary
    /// is reconciled, so a burst of them (a ReplicaSet creating its Pods) is one reconcile and
    /// one status write. Changes of the primary itself are reconciled at once. 0 reconciles on
    /// every change at once.
    #[arg(long, default_value_t = 100, value_name = "MS")]
    pub coalesce_ms: u64,
    #[command(flatten)]
    pub journal: JournalArgs,
    #[command(flatten)]
    pub admission: Box<AdmissionArgs>,
    #[command(flatten)]
    pub references: PluginRefArgs,
    /// Sigstore trust root for Plugins' keyless identities (spec.verification.keyless): a
    /// directory of Fulcio certificates (*.crt.pem, *.pem) and Rekor public keys (*.pub), as
    /// files, since a cluster may be air-gapped. Without it, a Plugin asking for keyless
    /// verification is refused, never run unchecked.
    #[arg(long, value_name = "DIR")]
    pub sigstore_trust_root: Option<PathBuf>,
    /// Run no plugin from a registry unless a signature on its exact digest verifies against a
    /// --verify-key or a --verify-identity: every Plugin resource and every --plugin, in addition
    /// to what a Plugin's own spec.verification asks (which can narrow this, never widen it).
    /// Without it, a Plugin without spec.verification runs unsigned, and the host says so at start.
    #[arg(long, help_heading = "Registries")]
    pub require_signatures: bool,
    /// A keyless signer --require-signatures accepts: a certificate's subject (email or URI) and
    /// its OIDC issuer, checked against --sigstore-trust-root (repeatable).
    #[arg(
        long,
        value_name = "SUBJECT,ISSUER",
        requires = "require_signatures",
        help_heading = "Registries"
    )]
    pub verify_identity: Vec<String>,
    /// The only registries (HOST[:PORT], comma-separated or repeated) Plugin sources and --plugin
    /// references may name; any other is refused, nothing of it fetched [default: any registry].
    #[arg(
        long,
        value_name = "HOST[,HOST]",
        value_delimiter = ',',
        help_heading = "Registries"
    )]
    pub registry_allow: Vec<String>,
    /// Do not watch Plugin resources (reconciler-host.io/v1alpha1): serve only the plugins
    /// directory and --plugin references.
    #[arg(long)]
    pub no_plugin_resources: bool,
    /// Follow only the Plugin resources with these labels (e.g. `team=a`): for several hosts on
    /// one cluster, each with its own Plugins.
    #[arg(long, value_name = "SELECTOR")]
    pub plugin_selector: Option<String>,
    /// Where Plugins' keys (spec.verification.publicKeys) and pull secrets (spec.pullSecrets) are
    /// read: Plugins are cluster-scoped, and reading them from one namespace keeps whoever may
    /// write Plugins from naming any Secret the host can read [default: the host's namespace].
    #[arg(long, value_name = "NS")]
    pub plugin_secrets_namespace: Option<String>,
}

/// Every replica reconciling a share of the objects.
#[derive(Debug, Args)]
#[command(next_help_heading = "Sharding")]
pub struct ShardingArgs {
    /// Share the reconciles among every replica instead of one leading: each replica holds a
    /// Lease of its own (named from --sharding-id and the pod), the live ones form a ring, and
    /// each primary object is reconciled by exactly one of them, chosen by a stable hash. No
    /// replica count to configure: scale the Deployment. An object moves only once its old owner
    /// has stopped reconciling it (or its Lease expired), so no object ever has two writers.
    #[arg(long, conflicts_with = "leader_election")]
    pub sharding: bool,
    /// Namespace of the replicas' Leases [default: $POD_NAMESPACE, else the service account's
    /// namespace, else "default"].
    #[arg(long, value_name = "NAMESPACE", requires = "sharding")]
    pub sharding_namespace: Option<String>,
    /// Name of the ring: replicas that share it share the work. Hosts that serve different
    /// plugins or namespaces need different ones.
    #[arg(long, default_value = DEFAULT_LEASE_NAME, value_name = "NAME", requires = "sharding")]
    pub sharding_id: String,
    /// What is handed to one replica: each primary `object`, or each member `cluster` whole
    /// (many small clusters: every object of a cluster on one replica, one set of watches
    /// reconciling).
    #[arg(long, value_enum, default_value = "object", requires = "sharding")]
    pub shard_by: ShardBy,
    /// Also put the shard label on the pod templates of the workloads plugins apply
    /// (Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs, CronJobs), and select the Pods
    /// a plugin owning workloads reads by it: each replica then receives and caches its own
    /// primaries' Pods alone, not every Pod. Turning it on or off changes each such template
    /// once, which rolls its Pods; and a Pod no labelled template made (one created by hand) is no
    /// longer seen by those plugins.
    #[arg(long, requires = "sharding")]
    pub sharding_pod_labels: bool,
}

impl ShardingArgs {
    fn config(&self) -> Option<ShardingConfig> {
        if !self.sharding {
            return None;
        }
        let namespace = self
            .sharding_namespace
            .clone()
            .unwrap_or_else(default_namespace);
        let identity = crate::process::leader_election::unique_identity();
        Some(ShardingConfig {
            membership: MembershipConfig::new(&namespace, &self.sharding_id, &identity),
            by: self.shard_by,
            pods_follow: self.sharding_pod_labels,
            // The same identity as in the ring: the duties' holder is one of its members.
            duties: LeaderElectionConfig {
                identity,
                ..LeaderElectionConfig::new(namespace, format!("{}-duties", self.sharding_id))
            },
        })
    }
}

/// Admission webhooks for plugins that declare admission.
#[derive(Debug, Args)]
#[command(next_help_heading = "Admission")]
pub struct AdmissionArgs {
    /// Serve admission webhooks (HTTPS) here for the plugins that declare admission, on every
    /// replica; `off` (the default) serves none. In a pod: `0.0.0.0:8443`.
    #[arg(long, default_value = "off", value_name = "ADDR", value_parser = parse_listen)]
    pub admission_listen: Listen,
    /// How the API server reaches the webhooks: a Service, NAMESPACE/NAME:PORT (the host as a
    /// pod), given as is to the webhook configurations' clientConfig.
    #[arg(
        long,
        value_name = "NAMESPACE/NAME:PORT",
        conflicts_with = "admission_url"
    )]
    pub admission_service: Option<String>,
    /// How the API server reaches the webhooks: a base URL (`https://127.0.0.1:8443`, for a host
    /// outside the cluster); paths `/admission/<plugin>/{mutate,validate}` are added.
    #[arg(long, value_name = "URL")]
    pub admission_url: Option<String>,
    /// Serve this certificate (PEM), e.g. cert-manager's Secret mounted as files, instead of
    /// generating one.
    #[arg(long, value_name = "FILE", requires = "admission_tls_key")]
    pub admission_tls_cert: Option<PathBuf>,
    /// The key of --admission-tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "admission_tls_cert")]
    pub admission_tls_key: Option<PathBuf>,
    /// The CA bundle put in the webhook configurations' caBundle (cert-manager's ca.crt)
    /// [default: the certificate itself].
    #[arg(long, value_name = "FILE", requires = "admission_tls_cert")]
    pub admission_tls_ca: Option<PathBuf>,
    /// Serve the webhooks only to clients presenting a certificate signed by a CA in this PEM
    /// file: the API server, given a client certificate for the webhooks by its
    /// --admission-control-config-file. Others fail the TLS handshake, so no other pod can hold
    /// the admission calls [default: any client].
    #[arg(long, value_name = "FILE")]
    pub admission_client_ca: Option<PathBuf>,
    /// Without --admission-tls-cert: the Secret NAMESPACE/NAME the generated certificate is kept
    /// in, shared by every replica [default: <the host's namespace>/reconciler-host-admission-tls].
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub admission_cert_secret: Option<String>,
    /// Names the webhook configurations <PREFIX>-<plugin>; hosts sharing a cluster need
    /// different ones.
    #[arg(long, default_value = "reconciler-host", value_name = "PREFIX")]
    pub admission_webhook_prefix: String,
    /// Leave the webhook configurations alone (they are managed elsewhere).
    #[arg(long)]
    pub admission_no_webhook_configs: bool,
    /// Connections the webhook server keeps open at once. When all are taken, a new connection
    /// closes the oldest one that is not in a plugin call, so clients that connect and then send
    /// slowly cannot keep the API server out.
    #[arg(long, default_value_t = 256, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub admission_max_connections: u32,
    /// How long a client has for each of the TLS handshake, a request's headers and its body
    /// (the API server sends each at once).
    #[arg(long, default_value_t = 10, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=300))]
    pub admission_read_timeout_secs: u64,
    /// MiB of request bodies larger than 64 KiB held at once (read, parsed, in a call); more
    /// wait. Bounds the memory hostile clients can make the host hold (at least 4: one body of
    /// the largest size).
    #[arg(long, default_value_t = 16, value_name = "MIB", value_parser = clap::value_parser!(u32).range(4..=4096))]
    pub admission_body_budget_mib: u32,
    /// How often the webhook configurations are applied again and the generated certificate's
    /// Secret is read again (renewal; a renewed certificate is served after three of these).
    #[arg(long, default_value_t = 60, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub admission_resync_secs: u64,
    /// A namespace the webhooks never reach (repeatable), beside kube-system and the host's own
    /// ($POD_NAMESPACE, or the --admission-service namespace), which are never reached.
    #[arg(long, value_name = "NAMESPACE")]
    pub admission_exclude_namespace: Vec<String>,
}

impl AdmissionArgs {
    /// The admission configuration, or none when admission is off.
    pub fn config(&self) -> anyhow::Result<Option<AdmissionConfig>> {
        let Listen::At(listen) = self.admission_listen else {
            return Ok(None);
        };
        let endpoint = match (&self.admission_service, &self.admission_url) {
            (Some(service), _) => parse_service(service)?,
            (None, Some(url)) => {
                if !url.starts_with("https://") {
                    anyhow::bail!("--admission-url must be an https:// URL, got {url}");
                }
                WebhookEndpoint::Url(url.clone())
            }
            (None, None) => anyhow::bail!(
                "--admission-listen needs --admission-service NAMESPACE/NAME:PORT (in a pod) or --admission-url https://HOST:PORT: the webhook configurations must say how the API server reaches the host"
            ),
        };
        let cert = match (&self.admission_tls_cert, &self.admission_tls_key) {
            (Some(cert), Some(key)) => CertSource::Files {
                cert: cert.clone(),
                key: key.clone(),
                ca: self.admission_tls_ca.clone(),
            },
            _ => {
                let (namespace, name) = match &self.admission_cert_secret {
                    Some(text) => text
                        .split_once('/')
                        .map(|(ns, name)| (ns.to_string(), name.to_string()))
                        .ok_or_else(|| {
                            anyhow::anyhow!(
                                "--admission-cert-secret must be NAMESPACE/NAME, got {text}"
                            )
                        })?,
                    None => (default_namespace(), DEFAULT_CERT_SECRET.to_string()),
                };
                CertSource::Secret { namespace, name }
            }
        };
        let client_ca = self
            .admission_client_ca
            .as_deref()
            .map(ClientCa::from_file)
            .transpose()
            .context("--admission-client-ca")?;
        // The host's own namespace: it is never sent to admission, and its
        // Namespace owns the configurations. Unknown outside a pod.
        let own_namespace = std::env::var("POD_NAMESPACE")
            .ok()
            .filter(|ns| !ns.trim().is_empty())
            .or(match &endpoint {
                WebhookEndpoint::Service { namespace, .. } => Some(namespace.clone()),
                WebhookEndpoint::Url(_) => None,
            });
        let excluded_namespaces = own_namespace
            .iter()
            .chain(&self.admission_exclude_namespace)
            .cloned()
            .collect();
        Ok(Some(AdmissionConfig {
            listen,
            endpoint,
            cert,
            prefix: self.admission_webhook_prefix.clone(),
            manage_webhooks: !self.admission_no_webhook_configs,
            namespaces: Vec::new(),
            resync_every: Duration::from_secs(self.admission_resync_secs),
            server: ServerLimits {
                connections: ConnectionLimits {
                    max_connections: self.admission_max_connections as usize,
                    read_timeout: Duration::from_secs(self.admission_read_timeout_secs),
                },
                large_body_budget: (self.admission_body_budget_mib as usize) << 20,
            },
            excluded_namespaces,
            owner_namespace: own_namespace,
            client_ca,
        }))
    }
}

/// The Secret a generated admission certificate is kept in.
pub const DEFAULT_CERT_SECRET: &str = "reconciler-host-admission-tls";

fn parse_service(text: &str) -> anyhow::Result<WebhookEndpoint> {
    let parsed = text.split_once('/').and_then(|(namespace, rest)| {
        let (name, port) = rest.rsplit_once(':')?;
        Some(WebhookEndpoint::Service {
            namespace: namespace.to_string(),
            name: name.to_string(),
            port: port.parse().ok()?,
        })
    });
    parsed.ok_or_else(|| {
        anyhow::anyhow!("--admission-service must be NAMESPACE/NAME:PORT (reconciler-system/reconciler-host:8443), got {text}")
    })
}

/// How `run` pulls plugins: its --plugin references and Plugin resources.
fn pulled_config(sandbox: &SandboxArgs, args: &RunArgs) -> anyhow::Result<PulledConfig> {
    let compile_cache = sandbox.config()?.compile_cache;
    let mut keep = None;
    let cache = args
        .references
        .access
        .cache(compile_cache.as_deref(), &mut keep)?;
    let trust_root = match &args.sigstore_trust_root {
        None => None,
        Some(dir) => Some(read_trust_root(dir)?),
    };
    // Read now so a typo stops the start, not the first pull.
    let verify_keys = args.references.policy()?;
    let required = host_policy(args, trust_root.as_ref())?;
    let allowed_registries = registry_allow(args)?;
    let pulls = !args.no_plugin_resources || !args.references.plugins.is_empty();
    if required.is_none() && pulls {
        tracing::warn!(
            "unsigned plugins are allowed: a Plugin without spec.verification{} runs whatever its source names; start with --require-signatures and --verify-key to refuse them",
            if args.references.verify_key.is_empty() {
                ", and every --plugin,"
            } else {
                ""
            }
        );
    }
    Ok(PulledConfig {
        options: args.references.access.options()?,
        cache,
        keep_cache: keep,
        references: args.references.plugins.clone(),
        verify_keys,
        trust_root,
        required,
        allowed_registries,
        namespace: args
            .plugin_secrets_namespace
            .clone()
            .unwrap_or_else(default_namespace),
        watch_resources: !args.no_plugin_resources,
        selector: args.plugin_selector.clone(),
    })
}

/// The host-wide trust policy of `--require-signatures`: its key files and
/// identities (read once now, so a typo stops the start), or `None` when
/// unsigned plugins are allowed.
fn host_policy(
    args: &RunArgs,
    trust_root: Option<&TrustRootFiles>,
) -> anyhow::Result<Option<HostPolicy>> {
    if !args.require_signatures {
        return Ok(None);
    }
    let mut keyless = Vec::new();
    for text in &args.verify_identity {
        let Some((subject, issuer)) = text
            .rsplit_once(',')
            .filter(|(s, i)| !s.trim().is_empty() && !i.trim().is_empty())
        else {
            anyhow::bail!(
                "--verify-identity {text:?}: give SUBJECT,ISSUER (e.g. ci@example.com,https://accounts.example.com)"
            );
        };
        keyless.push(KeylessIdentity {
            subject: subject.trim().to_string(),
            issuer: issuer.trim().to_string(),
        });
    }
    if !keyless.is_empty() && trust_root.is_none() {
        anyhow::bail!(
            "--verify-identity needs --sigstore-trust-root (Fulcio certificates and Rekor keys as files) to check keyless signatures against"
        );
    }
    let policy = HostPolicy {
        key_files: args.references.verify_key.clone(),
        keyless,
        trust_root: trust_root.cloned(),
    };
    policy.load()?;
    Ok(Some(policy))
}

/// `--registry-allow`, checked: `None` allows any registry. A `--plugin`
/// outside it is the operator's own contradiction, refused at start.
fn registry_allow(args: &RunArgs) -> anyhow::Result<Option<Vec<String>>> {
    if args.registry_allow.is_empty() {
        return Ok(None);
    }
    let mut allowed = Vec::new();
    for host in &args.registry_allow {
        let host = host.trim();
        if host.is_empty() || host.contains('/') {
            anyhow::bail!(
                "--registry-allow {host:?}: give registries as HOST or HOST:PORT, without a scheme or path"
            );
        }
        allowed.push(host.to_ascii_lowercase());
    }
    for reference in &args.references.plugins {
        if !allowed.contains(&reference.registry().to_ascii_lowercase()) {
            anyhow::bail!(
                "--plugin {reference} is in registry {}, which --registry-allow {} leaves out",
                reference.registry(),
                allowed.join(",")
            );
        }
    }
    Ok(Some(allowed))
}

fn read_trust_root(dir: &std::path::Path) -> anyhow::Result<TrustRootFiles> {
    let mut root = TrustRootFiles::default();
    let entries = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("--sigstore-trust-root {}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.starts_with('.') || !path.is_file() {
            continue;
        }
        let bytes = std::fs::read(&path)?;
        if name.ends_with(".pub") {
            root.rekor_pem.push(bytes);
        } else if name.ends_with(".pem") || name.ends_with(".crt") {
            root.fulcio_pem.push(bytes);
        }
    }
    if root.fulcio_pem.is_empty() {
        anyhow::bail!(
            "--sigstore-trust-root {} holds no Fulcio certificate (*.pem or *.crt)",
            dir.display()
        );
    }
    Ok(root)
}

pub fn run_cmd(sandbox: &SandboxArgs, args: RunArgs) -> anyhow::Result<ExitCode> {
    let pulled = pulled_config(sandbox, &args)?;
    if !args.plugins_dir.is_dir() {
        anyhow::bail!(
            "the plugins directory {} does not exist (build the example plugins with scripts/build-plugins, or mount a plugins volume there)",
            args.plugins_dir.display()
        );
    }
    if args.kind_retry_secs == 0 {
        anyhow::bail!("--kind-retry-secs must be at least 1");
    }
    let selectors = PrimarySelectors::parse(args.selector.iter().map(String::as_str))?;
    let namespaces: BTreeSet<String> = args.namespace.into_iter().collect();
    let request_timeout =
        (args.request_timeout_secs > 0).then(|| Duration::from_secs(args.request_timeout_secs));
    let clusters = args.clusters.config(request_timeout)?;
    let sandbox = Arc::new(sandbox.sandbox()?);
    let config = RunConfig {
        plugins_dir: args.plugins_dir,
        pulled,
        scope: ServeScope {
            namespaces: namespaces.clone(),
            selectors,
        },
        install_crds: args.install_crds,
        shutdown_timeout: Duration::from_secs(args.shutdown_timeout_secs),
        retry_every: Duration::from_secs(args.kind_retry_secs),
        coalesce: Duration::from_millis(args.coalesce_ms),
        journal: args.journal.limits(),
        loops: args.journal.loops(),
        http_listen: match args.http_listen {
            Listen::Off => None,
            Listen::At(addr) => Some(addr),
        },
        metrics: args.metrics.serving()?,
        leader_election: args.leader_election.then(|| {
            LeaderElectionConfig::new(
                args.leader_election_namespace
                    .unwrap_or_else(default_namespace),
                args.leader_election_id,
            )
        }),
        record: args.record.options(),
        sharding: args.sharding.config(),
        admission: args.admission.config()?.map(|admission| AdmissionConfig {
            namespaces: namespaces.iter().cloned().collect(),
            ..admission
        }),
        clusters,
    };
    let runtime = tokio::runtime::Runtime::new()?;
    crate::process::main_task::block_on_worker(&runtime, async move {
        // Listening before anything else: a SIGTERM during the start stops
        // the host cleanly instead of killing it.
        let shutdown = shutdown_signal();
        let client = connect(request_timeout).await?;
        run(sandbox, client, config, shutdown).await
    })?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    fn run_args(args: &[&str]) -> Result<super::RunArgs, clap::Error> {
        let cli = Cli::try_parse_from(["reconciler-host", "run"].iter().chain(args))?;
        match cli.command {
            Command::Run(args) => Ok(*args),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn leader_election_is_off_unless_asked_for() {
        let args = run_args(&[]).unwrap();
        assert!(!args.leader_election);
        assert_eq!(args.leader_election_id, "reconciler-host");

        let args = run_args(&[
            "--leader-election",
            "--leader-election-namespace",
            "ops",
            "--leader-election-id",
            "podsets",
        ])
        .unwrap();
        assert!(args.leader_election);
        assert_eq!(args.leader_election_namespace.as_deref(), Some("ops"));
        assert_eq!(args.leader_election_id, "podsets");

        // Naming a Lease without electing would silently do nothing.
        assert!(run_args(&["--leader-election-id", "podsets"]).is_err());
        assert!(run_args(&["--leader-election-namespace", "ops"]).is_err());
    }

    #[test]
    fn admission_is_off_unless_listening_and_then_needs_an_endpoint() {
        use crate::admission::service::CertSource;
        use crate::admission::webhook_configs::WebhookEndpoint;

        assert!(run_args(&[]).unwrap().admission.config().unwrap().is_none());
        let err = run_args(&["--admission-listen", "0.0.0.0:8443"])
            .unwrap()
            .admission
            .config()
            .unwrap_err();
        assert!(err.to_string().contains("--admission-service"), "{err}");

        let config = run_args(&[
            "--admission-listen",
            "0.0.0.0:8443",
            "--admission-service",
            "ops/reconciler-host:8443",
            "--admission-cert-secret",
            "ops/webhook-tls",
        ])
        .unwrap()
        .admission
        .config()
        .unwrap()
        .unwrap();
        assert_eq!(
            config.endpoint,
            WebhookEndpoint::Service {
                namespace: "ops".into(),
                name: "reconciler-host".into(),
                port: 8443
            }
        );
        assert!(
            matches!(&config.cert, CertSource::Secret { namespace, name } if namespace == "ops" && name == "webhook-tls")
        );

        let config = run_args(&[
            "--admission-listen",
            "127.0.0.1:9443",
            "--admission-url",
            "https://127.0.0.1:9443",
            "--admission-tls-cert",
            "tls.crt",
            "--admission-tls-key",
            "tls.key",
        ])
        .unwrap()
        .admission
        .config()
        .unwrap()
        .unwrap();
        assert!(matches!(config.cert, CertSource::Files { .. }));
        assert!(
            run_args(&["--admission-tls-cert", "tls.crt"]).is_err(),
            "a cert needs its key"
        );
    }
}

#[cfg(test)]
mod trust_tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    fn run_args(args: &[&str]) -> super::RunArgs {
        let cli = Cli::try_parse_from(["reconciler-host", "run"].iter().chain(args)).unwrap();
        match cli.command {
            Command::Run(args) => *args,
            other => panic!("{other:?}"),
        }
    }

    fn public_key(dir: &std::path::Path) -> String {
        let (_, public) = crate::registry::signatures::generate_key_pair(b"").unwrap();
        let path = dir.join("host.pub");
        std::fs::write(&path, public).unwrap();
        path.display().to_string()
    }

    #[test]
    fn require_signatures_needs_something_to_verify_against_and_covers_the_keys() {
        let dir = tempfile::tempdir().unwrap();
        let key = public_key(dir.path());
        let policy = |args: &[&str]| super::host_policy(&run_args(args), None);
        assert!(policy(&[]).unwrap().is_none(), "off unless asked for");
        let e = policy(&["--require-signatures"]).unwrap_err();
        assert!(e.to_string().contains("--verify-key"), "{e}");
        let required = policy(&["--require-signatures", "--verify-key", &key])
            .unwrap()
            .unwrap();
        assert_eq!(required.load().unwrap().keys.len(), 1);
        let e = policy(&[
            "--require-signatures",
            "--verify-identity",
            "ci@example.com,https://issuer.example",
        ])
        .unwrap_err();
        assert!(e.to_string().contains("--sigstore-trust-root"), "{e}");
        let e = policy(&["--require-signatures", "--verify-identity", "no-issuer"]).unwrap_err();
        assert!(e.to_string().contains("SUBJECT,ISSUER"), "{e}");
    }

    #[test]
    fn registry_allow_refuses_a_plugin_reference_outside_it() {
        let allowed = |args: &[&str]| super::registry_allow(&run_args(args));
        assert_eq!(allowed(&[]).unwrap(), None);
        assert_eq!(
            allowed(&["--registry-allow", "R.example,127.0.0.1:5000"]).unwrap(),
            Some(vec!["r.example".to_string(), "127.0.0.1:5000".to_string()])
        );
        let e = allowed(&[
            "--registry-allow",
            "r.example",
            "--plugin",
            "oci://evil.example/podset:1",
        ])
        .unwrap_err();
        assert!(e.to_string().contains("evil.example"), "{e}");
        assert!(allowed(&["--registry-allow", "https://r.example"]).is_err());
    }
}
