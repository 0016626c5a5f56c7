//! `run`'s options for member clusters: where they come from and which
//! plugins run on which.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::fleet::cache_budget::{CacheBudget, Origin};
use crate::fleet::kubeconfig_trust::Widening;
use crate::fleet::{ClustersConfig, PluginClusters};
use crate::plugin::process_memory::MemorySources;

#[derive(Debug, Args)]
#[command(next_help_heading = "Member clusters")]
pub struct ClusterArgs {
    /// Do not serve the cluster the host runs in (member `local`): serve only the members
    /// the other sources name (the host's own cluster is then only where it reads them).
    #[arg(long)]
    pub no_local_cluster: bool,
    /// Serve a member cluster per kubeconfig file in DIR, named by the file's name up to its
    /// first dot; the directory is followed: a new, changed or removed file engages, re-engages
    /// or disengages its member within seconds.
    #[arg(long, value_name = "DIR")]
    pub clusters_dir: Option<PathBuf>,
    /// Serve the clusters Cluster API manages: its `<cluster>-kubeconfig` Secrets (labelled
    /// cluster.x-k8s.io/cluster-name) in the host's namespace. Their kubeconfigs are held to
    /// the same rules as --cluster-secrets'.
    #[arg(long)]
    pub cluster_api: bool,
    /// Serve a member cluster per Secret labelled reconciler-host.io/cluster=<name> in the
    /// host's namespace (its `kubeconfig` key, or `value`). Off by default: whoever may write
    /// such a Secret directs the host's reconciles at a cluster of their choosing. Their
    /// kubeconfigs may hold only inline credentials for an https server the host verifies; see
    /// --cluster-secrets-allow.
    #[arg(long)]
    pub cluster_secrets: bool,
    /// No longer needed: the Secret source is off unless --cluster-secrets.
    #[arg(long, hide = true)]
    pub no_cluster_secrets: bool,
    /// What kubeconfigs from Secrets (--cluster-secrets, --cluster-api) may ask beyond inline
    /// credentials for an https server the host verifies; anything else is refused with an
    /// Event on the Secret. Each widens what a Secret's writer can make the host do (files:
    /// read the host's own service-account token, for one). Files in --clusters-dir may use
    /// all of them. Comma-separated, e.g. `exec,files`.
    #[arg(long, value_name = "WHAT", value_delimiter = ',')]
    pub cluster_secrets_allow: Vec<Widening>,
    /// Where member clusters' kubeconfig Secrets (labelled, and Cluster API's) are read, and
    /// their Events written [default: the host's namespace: POD_NAMESPACE, or the pod's service
    /// account's; `default` outside a pod].
    #[arg(long, value_name = "NS")]
    pub cluster_secrets_namespace: Option<String>,
    /// Run PLUGIN only on the members whose labels match SELECTOR, e.g. `podset:env=prod` or
    /// `podset:reconciler-host.io/cluster in (east,west)`. Members carry their Secret's labels
    /// (files: reconciler-host.io/cluster-file=<file name>) and reconciler-host.io/cluster=<name>.
    /// Plugins not named run on every member. Repeatable.
    #[arg(long, value_name = "PLUGIN:SELECTOR")]
    pub plugin_clusters: Vec<String>,
    /// Requests a second to each member cluster's API server, on average: every member has a
    /// client and a limit of its own, so a member with a flood of work is slowed at its own
    /// limit and spends nothing of another's. 0: no limit. The cluster the host runs in
    /// (`local`) is not limited.
    #[arg(long, value_name = "QPS", default_value_t = 50.0)]
    pub member_qps: f64,
    /// Requests each member cluster's client may send at once before --member-qps applies.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub member_burst: u32,
    /// The most objects the host caches for one member cluster (the local one included): a
    /// member past it pauses (its watches stop and its cache is freed; /clusters, an Event on
    /// its Secret and reconciler_host_cluster_paused say so) and is tried again later, doubling
    /// from 60 s to --kind-retry-secs, so one huge cluster cannot take the process, and every
    /// other member, down with it. 0: no bound.
    ///
    /// Not given, it follows the memory limit of the host's cgroup (a pod's limits.memory): half
    /// of the limit for the host (the other half is the plugins'), less 64 MiB, at 8 KiB an
    /// object, at least 1000 and at most 500000; without a limit, 500000. A bound taken from the
    /// memory limit is logged at start.
    #[arg(long, value_name = "N")]
    pub member_cache_max_objects: Option<usize>,
}

impl ClusterArgs {
    /// `--member-cache-max-objects` as given, or derived from the memory
    /// limit (see `fleet::cache_budget`); `None` for `0`, no bound.
    fn cache_budget(&self) -> Option<CacheBudget> {
        let budget = match self.member_cache_max_objects {
            Some(0) => return None,
            Some(n) => CacheBudget::given(n),
            None => CacheBudget::derived(&MemorySources::of_this_process()),
        };
        if let Origin::MemoryLimit { .. } = budget.origin {
            tracing::info!("each cluster caches at most {budget}");
        }
        Some(budget)
    }

    pub fn config(&self, request_timeout: Option<Duration>) -> anyhow::Result<ClustersConfig> {
        let selection = PluginClusters::parse(&self.plugin_clusters).map_err(anyhow::Error::msg)?;
        if !self.member_qps.is_finite() || self.member_qps < 0.0 {
            anyhow::bail!(
                "--member-qps {} is not a rate: give requests a second, or 0 for no limit",
                self.member_qps
            );
        }
        if let Some(dir) = &self.clusters_dir
            && !dir.is_dir()
        {
            anyhow::bail!(
                "--clusters-dir {} is not a directory: create it (one kubeconfig file per member cluster)",
                dir.display()
            );
        }
        if self.no_cluster_secrets {
            tracing::warn!(
                "--no-cluster-secrets is no longer needed: the Secret source is off unless --cluster-secrets"
            );
        }
        if !self.cluster_secrets_allow.is_empty() && !self.cluster_secrets && !self.cluster_api {
            anyhow::bail!(
                "--cluster-secrets-allow widens what kubeconfig Secrets may ask, but no Secret source is on: add --cluster-secrets or --cluster-api"
            );
        }
        Ok(ClustersConfig {
            local: !self.no_local_cluster,
            secrets: self.cluster_secrets,
            cluster_api: self.cluster_api,
            secrets_allow: self.cluster_secrets_allow.iter().copied().collect(),
            clusters_dir: self.clusters_dir.clone(),
            secrets_namespace: self
                .cluster_secrets_namespace
                .clone()
                .unwrap_or_else(crate::process::leader_election::default_namespace),
            selection,
            request_timeout,
            cache_budget: self.cache_budget(),
            member_rate: crate::cluster::kubernetes::client_rate_limit::RateLimit::new(
                self.member_qps,
                self.member_burst,
            ),
        })
    }
}
