//! One host, many clusters: the plugins the host serves, run on every
//! engaged member cluster their `--plugin-clusters` selector admits.
//!
//! The fleet is what the plugins directory serves into (a
//! [`PluginHost`]): it decides what can serve at all (one plugin per name
//! and per primary kind, as [`Standby`] does), and each [`Member`] serves
//! those selected for it with an engine of its own: its own watches,
//! cache, apply, ownership, finalizers, status and Events, so nothing
//! crosses clusters. Members come and go at runtime as their sources say
//! ([`sources`]); engaging never waits on a cluster.

pub mod cache_budget;
pub mod draining;
pub mod kubeconfig_trust;
pub mod member;
pub mod selection;
pub mod sources;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use self::draining::Draining;
use crate::cluster::ClusterBackend;
use crate::plugin::LoadedPlugin;
use crate::plugin::finalizer_report::FinalizerHold;
use crate::plugin::plugin_host::{PluginHost, Refused, Replaced};
use crate::plugin::standby::Standby;

pub use self::member::{Announce, Hooks, Identity, Member, MemberStatus, Probe, Settings};
pub use self::selection::PluginClusters;

/// Which member clusters `run` engages, from its options.
#[derive(Clone, Debug)]
pub struct ClustersConfig {
    /// The cluster the host runs in, as member `local`.
    pub local: bool,
    /// Secrets labelled `reconciler-host.io/cluster` in the host's namespace.
    pub secrets: bool,
    /// Cluster API's `<cluster>-kubeconfig` Secrets in the host's namespace.
    pub cluster_api: bool,
    /// What the Secret sources' kubeconfigs may ask beyond inline
    /// credentials for a verified TLS server.
    pub secrets_allow: std::collections::BTreeSet<kubeconfig_trust::Widening>,
    /// One kubeconfig file per member.
    pub clusters_dir: Option<std::path::PathBuf>,
    /// Where the Secret sources are read (the host's namespace).
    pub secrets_namespace: String,
    pub selection: PluginClusters,
    /// The request deadline of members' clients.
    pub request_timeout: Option<Duration>,
    /// Each member's client's request rate (`local` keeps the host's
    /// client, unlimited); `None`: no limit.
    pub member_rate: Option<crate::cluster::kubernetes::client_rate_limit::RateLimit>,
    /// The most objects each member may cache; `None`: no bound.
    pub cache_budget: Option<cache_budget::CacheBudget>,
}

impl ClustersConfig {
    /// The cluster the host runs in, and nothing else.
    pub fn local_only() -> Self {
        Self {
            local: true,
            secrets: false,
            cluster_api: false,
            secrets_allow: Default::default(),
            clusters_dir: None,
            secrets_namespace: "default".into(),
            selection: PluginClusters::default(),
            request_timeout: None,
            member_rate: None,
            cache_budget: Some(cache_budget::CacheBudget::given(
                cache_budget::DEFAULT_MAX_OBJECTS,
            )),
        }
    }
}

/// The engaged members and the plugins they serve. See the module
/// documentation.
pub struct Fleet<B: ClusterBackend> {
    desired: Arc<Standby>,
    selection: Arc<PluginClusters>,
    settings: Settings,
    members: Mutex<BTreeMap<String, Member<B>>>,
    /// Members stopped or replaced whose reconciles may still run.
    draining: Draining<B>,
}

impl<B: ClusterBackend + 'static> Fleet<B> {
    pub fn new(selection: PluginClusters, settings: Settings) -> Self {
        Self {
            desired: Arc::new(Standby::new()),
            selection: Arc::new(selection),
            settings,
            members: Mutex::new(BTreeMap::new()),
            draining: Draining::default(),
        }
    }

    /// Starts serving a member, or serves it anew when its source changed
    /// (new credentials or address): the old member's reconciles in flight
    /// finish in the background, bounded by `drain`, and the new member
    /// watches meanwhile but reconciles nothing until they have, so the
    /// two never reconcile the same object at once.
    pub fn engage(&self, identity: Identity, backend: Arc<B>, hooks: Hooks, drain: Duration) {
        let desired = self.desired.clone();
        let selection = self.selection.clone();
        let wanted: member::Wanted = Arc::new(move |labels| {
            desired
                .served()
                .into_iter()
                .filter(|p| selection.runs(p.name(), labels))
                .collect()
        });
        let name = identity.name.clone();
        let mut members = self.lock();
        let after = members.remove(&name).map(|old| {
            tracing::info!(
                "re-engaged cluster {name}: its source changed; the new engine starts once the old one's reconciles in flight are over"
            );
            let (stopping, stopped) = self.draining.stop(old, drain);
            tokio::spawn(async move {
                stopping.await;
            });
            stopped
        });
        let member = Member::engage(identity, backend, &self.settings, wanted, hooks, after);
        members.insert(name, member);
    }

    /// Stops serving a member: its reconciles in flight finish (up to
    /// `drain`), then its watches, caches and queues go with it.
    pub async fn disengage(&self, name: &str, drain: Duration) -> bool {
        let member = self.lock().remove(name);
        match member {
            Some(member) => {
                let cached: usize = member
                    .engine()
                    .cache()
                    .counts_by_kind()
                    .into_iter()
                    .map(|(_, n)| n)
                    .sum();
                self.draining.stop(member, drain).0.await;
                // A member's cache is its largest allocation: give it back
                // to the kernel now, not at the next burst of reconciles.
                crate::support::heap_trim::release_freed_memory();
                tracing::info!(
                    "disengaged cluster {name}: its watches stopped and its {cached} objects cached freed"
                );
                true
            }
            None => false,
        }
    }

    /// Disengages every member, each draining in parallel.
    /// Their reconciles count as in flight (and, for the shard ring, as
    /// still writing) until each member's stop is over. Returns how many
    /// reconciles were abandoned; none of them runs any more.
    pub async fn stop_all(&self, drain: Duration) -> usize {
        let members: Vec<Member<B>> = std::mem::take(&mut *self.lock()).into_values().collect();
        let stops = members
            .into_iter()
            .map(|m| self.draining.stop(m, drain).0)
            .collect::<Vec<_>>();
        futures::future::join_all(stops).await.into_iter().sum()
    }

    /// The engaged members' identities, by name.
    pub fn identities(&self) -> BTreeMap<String, Identity> {
        self.lock()
            .iter()
            .map(|(name, m)| (name.clone(), m.identity().clone()))
            .collect()
    }

    /// Every member as `/clusters` shows it.
    pub fn statuses(&self) -> Vec<MemberStatus> {
        self.lock().values().map(Member::status).collect()
    }

    /// Every member's engine, by member name.
    pub fn engines(&self) -> Vec<(String, Arc<crate::engine::Engine<B>>)> {
        self.lock()
            .iter()
            .map(|(name, m)| (name.clone(), m.engine()))
            .collect()
    }

    /// The engine serving member `name`, for tests and samplers.
    pub fn engine(&self, name: &str) -> Option<Arc<crate::engine::Engine<B>>> {
        self.lock().get(name).map(|m| m.engine())
    }

    /// Waits, up to `within`, until member `name` has brought its plugins
    /// in line once (so a host reports ready with the local member's caches
    /// filled, as before there were members). False if it had not.
    pub async fn wait_aligned(&self, name: &str, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match self.lock().get(name).map(Member::aligned) {
                Some(true) => return true,
                None => return false,
                Some(false) => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Each plugin's queue summed over members, and cached objects by kind
    /// summed over members: what the metrics show of the whole host.
    pub fn queue_and_cache(
        &self,
    ) -> (
        Vec<crate::engine::QueueStats>,
        Vec<(reconciler_contract::KindRef, usize)>,
    ) {
        let mut queues: BTreeMap<String, crate::engine::QueueStats> = BTreeMap::new();
        let mut kinds: BTreeMap<reconciler_contract::KindRef, usize> = BTreeMap::new();
        for member in self.lock().values() {
            for q in member.engine().queue_stats() {
                let sum = queues
                    .entry(q.plugin.clone())
                    .or_insert(crate::engine::QueueStats {
                        plugin: q.plugin.clone(),
                        depth: 0,
                        in_flight: 0,
                        concurrency: 0,
                    });
                sum.depth += q.depth;
                sum.in_flight += q.in_flight;
                sum.concurrency += q.concurrency;
            }
            for (kind, n) in member.engine().cache().counts_by_kind() {
                *kinds.entry(kind).or_default() += n;
            }
        }
        (queues.into_values().collect(), kinds.into_iter().collect())
    }

    /// Reconciles running now, over every member and every member still
    /// draining.
    pub fn in_flight(&self) -> usize {
        self.engines_and_draining()
            .iter()
            .flat_map(|(_, engine)| engine.queue_stats())
            .map(|q| q.in_flight)
            .sum()
    }

    /// The engaged members' engines and those of members still draining:
    /// every engine that may still write.
    pub fn engines_and_draining(&self) -> Vec<(String, Arc<crate::engine::Engine<B>>)> {
        let mut engines = self.engines();
        engines.extend(self.draining.engines());
        engines
    }

    /// The plugins the fleet serves, whichever members run them.
    pub fn plugins(&self) -> Vec<Arc<LoadedPlugin>> {
        self.desired.served()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Member<B>>> {
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn nudge_all(&self) {
        self.lock().values().for_each(Member::nudge);
    }
}

impl<B: ClusterBackend + 'static> PluginHost for Fleet<B> {
    async fn add_plugin(&self, plugin: Arc<LoadedPlugin>) -> Result<(), Refused> {
        self.desired.add_plugin(plugin).await?;
        self.nudge_all();
        Ok(())
    }

    async fn replace_plugin(&self, plugin: Arc<LoadedPlugin>) -> Result<Replaced, Refused> {
        let replaced = self.desired.replace_plugin(plugin).await?;
        self.nudge_all();
        Ok(replaced)
    }

    fn remove_plugin(&self, name: &str) -> Option<Arc<LoadedPlugin>> {
        let removed = self.desired.remove_plugin(name);
        self.nudge_all();
        removed
    }

    fn finalizer_holds(&self, name: &str) -> Vec<FinalizerHold> {
        self.lock()
            .values()
            .flat_map(|m| m.engine().finalizer_holds(name))
            .collect()
    }
}
