//! What one `dev` session serves, and from where: the options the command
//! hands over, shared by the one-cluster loop and the several-cluster one.

use std::path::PathBuf;

use reconciler_contract::ClusterInfo;

use crate::cluster::embedded::builtins::BuiltinConfig;
use crate::golden::recorder::RecordOptions;

/// Options of one `dev` session.
pub struct DevConfig {
    pub plugins_dir: PathBuf,
    /// Plugins pulled by reference (`--plugin`), served beside the directory's.
    pub pulled_dir: Option<PathBuf>,
    /// The Plugin objects among the objects, pulled and followed as their
    /// files change.
    pub object_plugins: Option<crate::plugin_resources::from_objects::ObjectPlugins>,
    pub objects_dir: PathBuf,
    /// CustomResourceDefinitions applied before the objects, read once.
    pub crds_dir: Option<PathBuf>,
    /// Stop once nothing is queued (for scripts and smoke tests).
    pub until_settled: bool,
    /// Write every reconcile as a golden case under this directory.
    pub record: Option<RecordOptions>,
    /// Play the built-in controllers with these settings (`None`: off).
    pub builtins: Option<BuiltinConfig>,
    /// Several embedded member clusters instead of one (`--clusters`,
    /// `--cluster-objects`): see `clusters.rs`.
    pub members: Option<Vec<MemberSeed>>,
    /// The decision journal every engine of the session files into.
    pub journal: std::sync::Arc<crate::engine::journal::Journal>,
    /// Where the journal is served for `explain` (loopback, no token).
    pub explain_listen: Option<std::net::SocketAddr>,
}

/// One embedded member cluster of `dev` or `simulate`: who it is, and the
/// directory of its own objects (`--cluster-objects`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberSeed {
    pub info: ClusterInfo,
    pub objects_dir: Option<PathBuf>,
}
