//! What `run` asks the sources to follow, apart from the loop that follows
//! them, since the engagements read it too.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use crate::cluster::kubernetes::client_rate_limit::RateLimit;
use crate::cluster::kubernetes::write_fence::WriteFence;
use crate::fleet::kubeconfig_trust::Widening;

/// What the sources follow.
#[derive(Clone, Debug)]
pub struct SourceOptions {
    pub local: bool,
    /// The host's namespace: where kubeconfig Secrets are read.
    pub namespace: String,
    pub secrets: bool,
    pub cluster_api: bool,
    /// What kubeconfigs from Secrets may ask beyond inline credentials for
    /// a verified TLS server (`--cluster-secrets-allow`).
    pub secrets_allow: BTreeSet<Widening>,
    pub clusters_dir: Option<PathBuf>,
    /// The request deadline of members' clients (as `run`'s own client).
    pub request_timeout: Option<Duration>,
    /// Each member's client's own request rate.
    pub member_rate: Option<RateLimit>,
    /// How long a disengaged member's reconciles in flight may finish.
    pub drain: Duration,
    /// What every member's writes are checked by before they leave.
    pub fence: WriteFence,
}
