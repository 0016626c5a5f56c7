//! The embedded cluster `dev` serves, on the real clock, and the CRDs it
//! starts from: the same for one cluster and for each of several.

use std::path::Path;
use std::sync::Arc;

use super::config::DevConfig;
use crate::cluster::embedded::EmbeddedCluster;
use crate::cluster::{ObjectKey, RealClock};
use crate::process::manifests::read_crds;

/// An embedded cluster on the real clock, with the built-in controllers
/// `config` asks for driven in the background (Pods start and Jobs end on
/// the real clock; the task ends with the runtime).
pub(super) fn start_embedded(config: &DevConfig) -> Arc<EmbeddedCluster> {
    let mut cluster = EmbeddedCluster::new(Arc::new(RealClock));
    if let Some(builtins) = &config.builtins {
        cluster = cluster.with_builtin_controllers(builtins.clone());
    }
    let cluster = Arc::new(cluster);
    tokio::spawn(cluster.clone().drive_builtins());
    cluster
}

/// Applies the CRDs of `dir`, so the cluster knows which custom kinds are
/// cluster-scoped before any object or plugin arrives; a line per CRD or
/// error.
pub fn seed_crds(dir: &Path, cluster: &EmbeddedCluster) -> Vec<String> {
    let crds = match read_crds(dir) {
        Ok(crds) => crds,
        Err(e) => return vec![format!("error: {e:#}")],
    };
    crds.into_iter()
        .map(|crd| {
            let key = ObjectKey::of(&crd)
                .map(|k| k.to_string())
                .unwrap_or_default();
            match cluster.apply_as_user(crd) {
                Ok(_) => format!("created {key} from {}", dir.display()),
                Err(e) => format!("error: cannot apply {key}: {e}"),
            }
        })
        .collect()
}
