//! What every source reports, in one shape: the members it names, each
//! as [`Described`], under its [`SourceKind`], whose place in the order of
//! trust decides who keeps a name two sources give. The sources, the
//! union and the engagements all speak it, and none of them owns it.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ObjectReference;

use crate::fleet::kubeconfig_trust::{KubeconfigTrust, Widening};
use crate::fleet::member::Identity;

/// Which source a member came from, most trusted first: the first in this
/// order keeps a name two sources give, so what the operator wrote (the
/// host's own cluster, `--clusters-dir`) is never taken over by what anyone
/// who may write a Secret wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SourceKind {
    Local,
    Files,
    ClusterApi,
    Secrets,
}

impl SourceKind {
    /// What a kubeconfig from this source may ask of the host.
    pub(super) fn trust(self, secrets_allow: &BTreeSet<Widening>) -> KubeconfigTrust {
        match self {
            SourceKind::Local | SourceKind::Files => KubeconfigTrust::Operator,
            SourceKind::ClusterApi | SourceKind::Secrets => {
                KubeconfigTrust::FromCluster(secrets_allow.clone())
            }
        }
    }
}

/// One member as its source describes it.
#[derive(Clone, Debug)]
pub struct Described {
    pub identity: Identity,
    /// The kubeconfig, or `None` for the local member (the host's client).
    pub kubeconfig: Option<String>,
    /// The Secret it came from, which engagements are announced on.
    pub secret: Option<ObjectReference>,
    /// Within its source, the earlier keeps a name two give: a Secret's
    /// creation time (then its name), a file's name.
    pub order: String,
}

/// A member's name is a label value (selectors name it): 1 to 63
/// characters, alphanumerics, `-`, `_` and `.`, starting and ending
/// alphanumeric.
pub fn valid_member_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err("a cluster name is 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit".into())
    }
}
