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

/// Joins the ring with this replica's Lease; `None` without sharding.
pub(super) async fn join_ring(
    client: &kube::Client,
    sharding: Option<ShardingConfig>,
) -> anyhow::Result<Option<Arc<Coordinator>>> {
    let Some(sharding) = sharding else {
        return Ok(None);
    };
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
/// metrics; dropping the handle stops it.
pub(super) fn follow_ring(
    coordinator: Option<&Arc<Coordinator>>,
    status: &Arc<HostStatus>,
    fleet: &Arc<Fleet<KubernetesBackend>>,
) -> Option<AbortOnDrop> {
    coordinator.map(|c| {
        let shards = c.clone();
        status.set_shards(move || shards.status());
        let metrics_status = status.clone();
        let hook: OnShards = Arc::new(move |s| metrics_status.metrics.shards(s));
        AbortOnDrop(tokio::spawn(c.clone().follow(fleet.clone(), Some(hook))))
    })
}

/// Resolves when this replica's ring renewals lapsed; never without sharding.
pub(super) async fn out_of_ring(coordinator: Option<&Coordinator>) {
    match coordinator {
        Some(coordinator) => coordinator.lost().await,
        None => std::future::pending().await,
    }
}
