//! The options of one `run`, as the command line gives them: apart from
//! the steps that use them, so each step takes the options it reads and
//! the command builds them without knowing the steps.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::engine::ServeScope;
use crate::fleet::ClustersConfig;
use crate::golden::recorder::RecordOptions;
use crate::process::leader_election::LeaderElectionConfig;
use crate::process::metrics_server::MetricsServing;
use crate::sharding::coordinator::ShardBy;

/// Options of one `run`.
pub struct RunConfig {
    pub plugins_dir: PathBuf,
    /// Plugins pulled from registries: --plugin and Plugin resources.
    pub pulled: PulledConfig,
    pub scope: ServeScope,
    /// CRDs to apply and wait for before any plugin starts.
    pub install_crds: Option<PathBuf>,
    /// How long in-flight reconciles may take to finish on shutdown.
    pub shutdown_timeout: Duration,
    /// How often plugins whose kinds cannot be watched are tried again.
    pub retry_every: Duration,
    /// Where to serve /healthz and /readyz; `None`: nowhere.
    pub http_listen: Option<SocketAddr>,
    /// Where and to whom to serve /metrics and /plugins; `None`: nowhere.
    pub metrics: Option<MetricsServing>,
    /// Reconcile only while holding this Lease. `None` (the default of
    /// `run`) starts at once: one process on a laptop has nobody to share with.
    pub leader_election: Option<LeaderElectionConfig>,
    /// Write every reconcile as a golden case under this directory.
    pub record: Option<RecordOptions>,
    /// How long a change of a child or read object waits for others before
    /// its primary is reconciled ([`Engine::with_coalescing`]).
    pub coalesce: Duration,
    /// How much the decision journal keeps.
    pub journal: crate::engine::journal::JournalLimits,
    /// When reconciles of one object make a loop.
    pub loops: crate::engine::loop_watch::LoopRule,
    /// Serve admission webhooks for the plugins that declare admission, on
    /// every replica; `None`: no admission.
    pub admission: Option<crate::admission::service::AdmissionConfig>,
    /// The member clusters the plugins run on.
    pub clusters: ClustersConfig,
    /// Share the reconciles with the other replicas; `None`: this process
    /// reconciles everything it serves (alone, or as the leader).
    pub sharding: Option<ShardingConfig>,
}

/// How `run --sharding` shares the work.
pub struct ShardingConfig {
    pub membership: crate::sharding::membership::MembershipConfig,
    pub by: ShardBy,
    /// `--sharding-pod-labels`: Pods carry their primary's bucket too.
    pub pods_follow: bool,
    /// The Lease of the once-only duties.
    pub duties: LeaderElectionConfig,
}

/// Where `run` pulls plugins from, and how.
pub struct PulledConfig {
    pub options: crate::registry::RegistryOptions,
    pub cache: crate::registry::ArtifactCache,
    /// Keeps a process-owned cache directory alive, when there is one.
    pub keep_cache: Option<tempfile::TempDir>,
    /// `--plugin` references, followed like Plugins without status.
    pub references: Vec<crate::registry::PluginReference>,
    /// `--verify-key`: what `--plugin` references must be signed by.
    pub verify_keys: crate::registry::TrustPolicy,
    pub trust_root: Option<crate::registry::signatures::TrustRootFiles>,
    /// `--require-signatures`: what every pulled plugin must be signed by.
    pub required: Option<crate::registry::trust::HostPolicy>,
    /// `--registry-allow`: the only registries sources may name.
    pub allowed_registries: Option<Vec<String>>,
    /// The host's namespace, where Plugins' keys and pull secrets are read.
    pub namespace: String,
    /// Watch Plugin resources.
    pub watch_resources: bool,
    /// Only the Plugins with these labels.
    pub selector: Option<String>,
}

impl PulledConfig {
    /// Nothing pulled: no references, no Plugin resources watched.
    pub fn none() -> Self {
        Self {
            options: crate::registry::RegistryOptions::default(),
            cache: crate::registry::ArtifactCache::new(
                std::env::temp_dir().join("reconciler-host-registry-unused"),
            ),
            keep_cache: None,
            references: Vec::new(),
            verify_keys: crate::registry::TrustPolicy::default(),
            trust_root: None,
            required: None,
            allowed_registries: None,
            namespace: "default".into(),
            watch_resources: false,
            selector: None,
        }
    }
}
