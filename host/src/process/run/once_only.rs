//! What one replica does for all: installing the CRDs, and the webhook
//! configurations and Plugin status the duty holder gates. Alone (or as
//! the leader) `run` does them itself; when several replicas shard the
//! work, the one holding the duties' Lease does.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::config::RunConfig;
use crate::cluster::kubernetes::KubernetesBackend;
use crate::process::crd_install::install_crds;
use crate::process::duties::{Duties, contend};
use crate::process::http_server::HostStatus;
use crate::support::duty_holder::DutyHolder;

/// How long `--install-crds` waits for the CRDs to be established.
const CRD_WAIT: Duration = Duration::from_secs(60);

/// Who does the once-only duties: this process always, or, with
/// sharding, whichever replica holds their Lease (installing the CRDs
/// each time it takes it); the task contending for it, if any.
pub(super) fn once_only_duties(
    config: &RunConfig,
    client: &kube::Client,
    backend: &Arc<KubernetesBackend>,
) -> (DutyHolder, Option<Duties>) {
    let Some(sharding) = &config.sharding else {
        return (DutyHolder::always(), None);
    };
    let (backend, dir) = (backend.clone(), config.install_crds.clone());
    let (holder, task) = contend(client.clone(), sharding.duties.clone(), move || {
        let (backend, dir) = (backend.clone(), dir.clone());
        async move {
            if let Some(dir) = dir {
                install_when_holding(&backend, &dir).await;
            }
        }
    });
    (holder, Some(task))
}

/// The duties' holder installs the CRDs; one that cannot leaves the
/// plugins whose kinds are missing waiting, as they would be anyway.
async fn install_when_holding(backend: &KubernetesBackend, dir: &Path) {
    match install_crds(backend, dir, CRD_WAIT).await {
        Ok(names) => tracing::info!("installed {} CRD(s) from {}", names.len(), dir.display()),
        Err(e) => tracing::warn!(
            "cannot install the CRDs of {}: {e:#} (plugins whose kinds are missing wait and are retried)",
            dir.display()
        ),
    }
}

/// `--install-crds` without sharding: installed before any plugin starts,
/// and a failure stops `run`.
pub(super) async fn install_crds_alone(
    config: &RunConfig,
    backend: &KubernetesBackend,
    status: &HostStatus,
    sharded: bool,
) -> anyhow::Result<()> {
    let Some(dir) = config.install_crds.as_ref().filter(|_| !sharded) else {
        return Ok(());
    };
    status.not_ready("installing CRDs");
    let names = install_crds(backend, dir, CRD_WAIT).await?;
    tracing::info!("installed {} CRD(s) from {}", names.len(), dir.display());
    Ok(())
}
