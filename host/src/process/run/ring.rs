//! The shard ring as `run --sharding` lives it: joined before any engine
//! exists, so nothing is dispatched that another replica may own, then
//! followed as replicas come and go.

use std::sync::Arc;

use anyhow::Context;

use super::abort_on_drop::AbortOnDrop;
use super::config::ShardingConfig;
use crate::cluster::kubernetes::KubernetesBackend;
use crate::fleet::Fleet;
use crate::process::http_server::HostStatus;
use crate::sharding::coordinator::{Coordinator, OnShards};
use crate::sharding::fence::{FencePublisher, writer_of};
use crate::support::duty_holder::DutyHolder;

/// Joins the ring with this replica's Lease; `None` without sharding.
/// The Lease says who the API server knows this replica as, for the
/// shard fence.
pub(super) async fn join_ring(
    client: &kube::Client,
    sharding: Option<ShardingConfig>,
) -> anyhow::Result<Option<Arc<Coordinator>>> {
    let Some(mut sharding) = sharding else {
        return Ok(None);
    };
    match writer_of(client.clone()).await {
        Ok(writer) => {
            tracing::info!(
                "the API server knows this replica as {writer} (the shard fence's name for it)"
            );
            sharding.membership.writer = Some(writer);
        }
        Err(e) => tracing::warn!(
            "cannot ask the API server who this replica is (a SelfSubjectReview): {e}; where the shard fence is installed, it refuses this replica's writes"
        ),
    }
    Ok(Some(
        Coordinator::join(
            client.clone(),
            sharding.membership,
            sharding.by,
            sharding.pods_follow,
        )
        .await
        .context("joining the shard ring")?,
    ))
}

/// Follows the ring's changes into `fleet`'s ownership, /shards and the
/// metrics, and, while this replica holds the duties, into the shard
/// fence's ConfigMap; dropping the handle stops it.
pub(super) fn follow_ring(
    coordinator: Option<&Arc<Coordinator>>,
    status: &Arc<HostStatus>,
    fleet: &Arc<Fleet<KubernetesBackend>>,
    client: &kube::Client,
    duties: &DutyHolder,
) -> Option<AbortOnDrop> {
    coordinator.map(|c| {
        let shards = c.clone();
        status.set_shards(move || shards.status());
        let metrics_status = status.clone();
        let hook: OnShards = Arc::new(move |s| metrics_status.metrics.shards(s));
        let (namespace, ring) = c.ring_name();
        let fence = FencePublisher::new(client.clone(), namespace, ring, duties.clone());
        AbortOnDrop(tokio::spawn(c.clone().follow(
            fleet.clone(),
            Some(hook),
            Some(fence),
        )))
    })
}

/// Resolves when this replica's ring renewals lapsed; never without sharding.
pub(super) async fn out_of_ring(coordinator: Option<&Coordinator>) {
    match coordinator {
        Some(coordinator) => coordinator.lost().await,
        None => std::future::pending().await,
    }
}
