//! One replica's part in the ring: keeps the engines of every member
//! cluster dispatching only the keys this replica may reconcile, and tells
//! the others when it has let go of the keys it gave up.
//!
//! The engines ask [`Coordinator::ownership`] at every dispatch, so a key
//! that moved away is never started here again. When the ring changes,
//! the keys this replica may now reconcile and could not before are queued
//! (they were dropped while another replica owned them), and once no
//! reconcile of a key given up is still in flight, the ring's version is
//! written on this replica's Lease (`handover.rs` says why that is what
//! keeps one writer per key).

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::assignment::{Scheme, ShardKey};
use super::fence::FencePublisher;
use super::handover::Handover;
use super::membership::{Membership, MembershipConfig, MembershipError, RingView};
use crate::cluster::ClusterBackend;
use crate::engine::KeyFilter;
use crate::engine::cause::Cause;
use crate::engine::shard_selection::{Buckets, ShardSelection};
use crate::engine::work_queue::PrimaryKey;
use crate::fleet::Fleet;
use crate::fleet::member::{MemberOwnership, MemberShare};

/// How often in-flight reconciles of given-up keys are looked at while a
/// settle waits for them, and the ring re-read between its changes.
const SETTLE_POLL: Duration = Duration::from_millis(100);

/// What a key is: one primary object, or a whole member cluster (every
/// primary of a small cluster on one replica, as Argo CD shards).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ShardBy {
    Object,
    Cluster,
}

impl ShardBy {
    pub fn key(self, cluster: &str, key: &PrimaryKey) -> ShardKey {
        match self {
            ShardBy::Object => ShardKey::object(cluster, key.namespace.as_deref(), &key.name),
            ShardBy::Cluster => ShardKey::Cluster(cluster.to_string()),
        }
    }

    /// The shard label value of `key` of `cluster`: what its objects carry,
    /// whoever writes it (the owner, or the webhook at creation).
    pub fn label_value(self, cluster: &str, key: &PrimaryKey) -> String {
        self.key(cluster, key).bucket().label_value()
    }
}

/// A replica of the ring, as `/shards` shows it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ShardMember {
    pub identity: String,
    /// The ring version it last said it settled on.
    pub settled: Option<String>,
    /// Who the API server knows it as, as its Lease says: the name the
    /// shard fence's map gives it (`sharding/fence.rs`).
    pub writer: Option<String>,
    /// How many of the ring's buckets it owns.
    pub buckets: usize,
}

/// `/shards`: the ring as this replica sees it, its share, and the moves
/// still waiting on a settle.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ShardsStatus {
    pub ring: String,
    pub identity: String,
    /// Whether this replica's own renewals are current (it counts itself in).
    pub live: bool,
    pub shard_by: Option<ShardBy>,
    pub version: String,
    /// How the ring gives buckets to replicas: the newest way every member
    /// computes (`bounded-load`; `rendezvous` while a replica of an older
    /// version is in it).
    pub assignment: Scheme,
    /// Every live replica has settled on `version`.
    pub settled: bool,
    pub members: Vec<ShardMember>,
    /// Primaries (over every member cluster) this replica reconciles now.
    pub keys_owned: usize,
    /// Primaries it owns in the ring but waits for their old owner to let
    /// go of.
    pub keys_arriving: usize,
    /// Its reconciles still running of keys it gave up.
    pub keys_leaving: usize,
    /// Keys that became this replica's, and that stopped being, since start.
    pub moved_in_total: u64,
    pub moved_out_total: u64,
    pub rebalances_total: u64,
}

/// What one look at the ring found, summed over every member cluster.
#[derive(Default)]
struct Moves {
    /// Keys this replica may reconcile now and could not before (queued).
    arrived: usize,
    /// Keys it gave up.
    left: usize,
    /// Keys it may reconcile now.
    owned: usize,
    /// Keys it owns but waits for their old owner to let go of.
    waiting: usize,
}

/// Told after every rebalance and every settle (metrics).
pub type OnShards = Arc<dyn Fn(&ShardsStatus) + Send + Sync>;

/// See the module documentation.
pub struct Coordinator {
    membership: Mutex<Option<Membership>>,
    config: MembershipConfig,
    by: ShardBy,
    /// `--sharding-pod-labels`.
    pods_follow: bool,
    handover: Arc<RwLock<Handover>>,
    /// This replica's buckets in the ring seen now, which every engine
    /// selects its primaries and children by.
    buckets: Arc<RwLock<Buckets>>,
    status: Mutex<ShardsStatus>,
}

impl Coordinator {
    /// Writes this replica's Lease and starts renewing it. Nothing is
    /// reconciled until every live replica has settled on a ring.
    pub async fn join(
        client: kube::Client,
        config: MembershipConfig,
        by: ShardBy,
        pods_follow: bool,
    ) -> Result<Arc<Self>, MembershipError> {
        let membership = Membership::join(client, config.clone()).await?;
        let handover = Handover::new(&config.identity, membership.ring());
        let buckets = Arc::new(RwLock::new(buckets_of(handover.ring(), &config.identity)));
        let status = ShardsStatus {
            ring: config.ring.clone(),
            identity: config.identity.clone(),
            shard_by: Some(by),
            ..ShardsStatus::default()
        };
        tracing::info!(
            "joined shard ring {} as {} (Lease {}/{}); reconciling once every live replica has settled",
            config.ring,
            config.identity,
            config.namespace,
            config.lease_name()
        );
        Ok(Arc::new(Self {
            membership: Mutex::new(Some(membership)),
            config,
            by,
            pods_follow,
            handover: Arc::new(RwLock::new(handover)),
            buckets,
            status: Mutex::new(status),
        }))
    }

    /// The namespace of the ring's Leases and the ring's name.
    pub fn ring_name(&self) -> (&str, &str) {
        (&self.config.namespace, &self.config.ring)
    }

    /// What the fleet's engines ask before every dispatch.
    pub fn ownership(&self) -> MemberOwnership {
        let (handover, buckets, by) = (self.handover.clone(), self.buckets.clone(), self.by);
        let pods_follow = self.pods_follow;
        Arc::new(move |cluster: &str| {
            let owns = {
                let (handover, cluster) = (handover.clone(), cluster.to_string());
                Arc::new(move |key: &PrimaryKey| {
                    read(&handover).may_reconcile(&by.key(&cluster, key))
                }) as KeyFilter
            };
            let cluster = cluster.to_string();
            let bucket_of = Arc::new(move |key: &PrimaryKey| by.label_value(&cluster, key));
            MemberShare {
                owns,
                selection: ShardSelection::new(bucket_of, buckets.clone())
                    .with_pods_following(pods_follow),
            }
        })
    }

    /// Whether this replica's renewals are current: it may start
    /// reconciles only while they are.
    /// Until when this replica counts itself in the ring unless it renews
    /// before; `None` once it left.
    pub fn held_until(&self) -> Option<tokio::time::Instant> {
        self.lock_membership().as_ref().map(Membership::live_until)
    }

    pub fn is_live(&self) -> bool {
        self.lock_membership()
            .as_ref()
            .is_some_and(Membership::is_live)
    }

    pub fn status(&self) -> ShardsStatus {
        let mut status = self
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        status.live = self.is_live();
        status
    }

    /// Resolves once this replica's renewals have lapsed past the renew
    /// deadline: the others may take its keys a little later, so it must
    /// stop before then.
    pub async fn lost(&self) {
        loop {
            let until = self.lock_membership().as_ref().map(Membership::live_until);
            match until {
                Some(until) if Instant::now() < until => tokio::time::sleep_until(until).await,
                _ => return,
            }
        }
    }

    /// Leaves the ring (deletes this replica's Lease) so the others take
    /// its keys at once rather than when the Lease expires. Call it only
    /// once nothing reconciles here any more.
    pub async fn leave(&self) {
        let membership = self.lock_membership().take();
        if let Some(membership) = membership {
            let lease = self.config.lease_name();
            match membership.leave().await {
                Ok(()) => tracing::info!(
                    "left shard ring {}: Lease {}/{lease} deleted, the others take its keys now",
                    self.config.ring,
                    self.config.namespace
                ),
                Err(e) => tracing::warn!(
                    "cannot delete Lease {}/{lease} on leaving the shard ring (the others take its keys once it expires): {e}",
                    self.config.namespace
                ),
            }
        }
    }

    /// Follows the ring for as long as this replica serves `fleet`: on
    /// every change, queues the keys that arrived and settles once the keys
    /// that left are no longer reconciled here. `on_change` is told after
    /// each; `fence`, when given, publishes who may write each bucket
    /// while this replica holds the duties.
    pub async fn follow<B: ClusterBackend + 'static>(
        self: Arc<Self>,
        fleet: Arc<Fleet<B>>,
        on_change: Option<OnShards>,
        mut fence: Option<FencePublisher>,
    ) {
        let Some(mut changes) = self.lock_membership().as_ref().map(Membership::changes) else {
            return;
        };
        let mut settled_on: Option<String> = None;
        loop {
            let view = changes.borrow_and_update().clone();
            let writers = view.writers.clone();
            let (before, after) = self.observe(view);
            let ring_changed = before.version_to_settle() != after.version_to_settle();
            self.reselect(&fleet).await;
            let moves = self.moves(&fleet, &before, &after, ring_changed);
            let leaving = self.leaving(&fleet, &after);
            let version = after.version_to_settle();
            // Settle once nothing given up is still running here.
            if leaving == 0 && settled_on.as_deref() != Some(version.as_str()) {
                if let Some(membership) = self.lock_membership().as_ref() {
                    membership.settle(&version);
                }
                settled_on = Some(version.clone());
            }
            self.say(&before, &after, &version, ring_changed, &moves, leaving);
            let status = self.record(&after, version, ring_changed, &moves, leaving, &writers);
            if let Some(hook) = &on_change {
                hook(&status);
            }
            // After the ring's own work: a slow publication delays no
            // watch or queue.
            if let Some(fence) = &mut fence {
                fence.publish(&after, &writers, self.held_until()).await;
            }
            // A settle that waits on reconciles in flight looks again soon,
            // at those alone (not every cached key), until they are done or
            // the ring changes again.
            if leaving > 0 {
                while !changes.has_changed().unwrap_or(true) && self.leaving(&fleet, &after) > 0 {
                    tokio::time::sleep(SETTLE_POLL).await;
                }
            } else if tokio::time::timeout(Duration::from_secs(5), changes.changed())
                .await
                .is_ok_and(|r| r.is_err())
            {
                return;
            }
        }
    }

    /// Takes the ring seen now: the handover before and after it, with the
    /// engines' buckets those of the ring seen now.
    fn observe(&self, view: RingView) -> (Handover, Handover) {
        let before = read(&self.handover).clone();
        let mut after = before.clone();
        after.observe(view.ring, view.settled);
        *self.handover.write().unwrap_or_else(|e| e.into_inner()) = after.clone();
        let buckets = buckets_of(after.ring(), &self.config.identity);
        *self.buckets.write().unwrap_or_else(|e| e.into_inner()) = buckets;
        (before, after)
    }

    /// Watch the buckets of the ring seen now: keys arriving are listed
    /// into the cache (they wait there for their old owner to settle), keys
    /// given up leave it.
    async fn reselect<B: ClusterBackend + 'static>(&self, fleet: &Fleet<B>) {
        for (cluster, engine) in fleet.engines() {
            if let Err(e) = engine.reselect().await {
                tracing::warn!(
                    cluster = %cluster,
                    "cannot watch this replica's shard of cluster {cluster} (retried on the next look at the ring): {e}"
                );
            }
        }
    }

    /// Queues the keys that this replica could not reconcile before and may
    /// now (they were dropped from its queues), and counts what moved.
    fn moves<B: ClusterBackend + 'static>(
        &self,
        fleet: &Fleet<B>,
        before: &Handover,
        after: &Handover,
        ring_changed: bool,
    ) -> Moves {
        let mut moves = Moves::default();
        for (cluster, engine) in fleet.engines() {
            let bucket = |k: &PrimaryKey| self.by.key(&cluster, k).bucket();
            moves.arrived += engine.queue_where(
                |k| {
                    let b = bucket(k);
                    after.may_reconcile_bucket(b) && !before.may_reconcile_bucket(b)
                },
                Cause::RingMove,
            );
            if ring_changed {
                moves.left += engine.count_where(|k| {
                    let b = bucket(k);
                    before.owns_bucket(b) && !after.owns_bucket(b)
                });
            }
            moves.owned += engine.count_where(|k| after.may_reconcile_bucket(bucket(k)));
            moves.waiting += engine.count_where(|k| {
                let b = bucket(k);
                after.owns_bucket(b) && !after.may_reconcile_bucket(b)
            });
        }
        moves
    }

    /// Logs a rebalance, and the moment every replica has settled.
    fn say(
        &self,
        before: &Handover,
        after: &Handover,
        version: &str,
        ring_changed: bool,
        moves: &Moves,
        leaving: usize,
    ) {
        let Moves {
            arrived,
            left,
            owned,
            waiting,
        } = moves;
        if ring_changed {
            tracing::info!(
                ring = %self.config.ring,
                version = %version,
                "rebalanced shard ring {} over {} replica(s): {} key(s) owned here now, {} arriving (waiting for their old owner to settle), {} given up ({} still reconciling)",
                self.config.ring,
                after.ring().replicas().len(),
                owned,
                waiting,
                left,
                leaving
            );
        }
        if after.all_settled() && !before.all_settled() {
            tracing::info!(
                ring = %self.config.ring,
                version = %version,
                "every one of the {} replica(s) of shard ring {} settled on version {version}: {owned} key(s) owned here, {arrived} of them arrived now",
                after.ring().replicas().len(),
                self.config.ring
            );
        }
    }

    /// Brings `/shards` up to date with this look at the ring.
    fn record(
        &self,
        after: &Handover,
        version: String,
        ring_changed: bool,
        moves: &Moves,
        leaving: usize,
        writers: &std::collections::BTreeMap<String, String>,
    ) -> ShardsStatus {
        let mut status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        status.version = version;
        status.assignment = after.ring().scheme();
        status.settled = after.all_settled();
        status.members = after
            .ring()
            .replicas()
            .iter()
            .map(|r| ShardMember {
                identity: r.id.clone(),
                settled: after.settled().get(&r.id).cloned(),
                writer: writers.get(&r.id).cloned(),
                buckets: after.ring().buckets_of(&r.id).len(),
            })
            .collect();
        status.keys_owned = moves.owned;
        status.keys_arriving = moves.waiting;
        status.keys_leaving = leaving;
        status.moved_in_total += moves.arrived as u64;
        status.moved_out_total += moves.left as u64;
        status.rebalances_total += u64::from(ring_changed);
        status.live = self.is_live();
        status.clone()
    }

    /// This replica's reconciles still running of keys it gave up,
    /// members being stopped included.
    fn leaving<B: ClusterBackend + 'static>(&self, fleet: &Fleet<B>, handover: &Handover) -> usize {
        fleet
            .engines_and_draining()
            .iter()
            .map(|(cluster, engine)| {
                engine
                    .in_flight_keys()
                    .iter()
                    .filter(|k| handover.gave_up(&self.by.key(cluster, k)))
                    .count()
            })
            .sum()
    }

    fn lock_membership(&self) -> std::sync::MutexGuard<'_, Option<Membership>> {
        self.membership.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `identity`'s buckets in `ring`, and the others', as label values.
fn buckets_of(ring: &super::assignment::Ring, identity: &str) -> Buckets {
    let mut buckets = Buckets::default();
    if ring.is_empty() {
        return buckets;
    }
    for bucket in super::assignment::Bucket::all() {
        let set = if ring.owner_of(bucket) == Some(identity) {
            &mut buckets.mine
        } else {
            &mut buckets.others
        };
        set.insert(bucket.label_value());
    }
    buckets
}

fn read(handover: &RwLock<Handover>) -> std::sync::RwLockReadGuard<'_, Handover> {
    handover.read().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::super::assignment::{Replica, Ring};
    use super::*;

    fn primary(i: usize) -> PrimaryKey {
        PrimaryKey {
            namespace: Some("default".into()),
            name: format!("podset-{i}"),
        }
    }

    fn owners(ring: &Ring, by: ShardBy, cluster: &str) -> BTreeSet<String> {
        (0..50)
            .filter_map(|i| {
                ring.owner(&by.key(cluster, &primary(i)))
                    .map(str::to_string)
            })
            .collect()
    }

    #[test]
    fn by_cluster_a_member_goes_whole_to_one_replica_and_by_object_it_is_spread() {
        let ring = Ring::new(["a", "b", "c"].map(Replica::new));
        let mut whole_on = BTreeSet::new();
        for cluster in (0..12).map(|i| format!("member-{i}")) {
            let by_cluster = owners(&ring, ShardBy::Cluster, &cluster);
            assert_eq!(by_cluster.len(), 1, "{cluster}: {by_cluster:?}");
            whole_on.extend(by_cluster);
            assert_eq!(
                owners(&ring, ShardBy::Object, &cluster).len(),
                3,
                "{cluster}"
            );
        }
        // Twelve clusters are not all on one replica either.
        assert!(whole_on.len() > 1, "{whole_on:?}");
    }
}
