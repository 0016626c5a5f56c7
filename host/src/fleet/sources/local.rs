//! The cluster the host runs in, as member `local`: served with the
//! host's own client, never from a kubeconfig, and a name no other source
//! may take.

use std::collections::BTreeMap;

use super::described::Described;
use crate::fleet::member::Identity;
use crate::fleet::selection::CLUSTER_LABEL;

/// The name of the member the host runs in.
pub const LOCAL: &str = reconciler_contract::LOCAL_CLUSTER;

/// The member the host runs in, as the local source reports it.
pub(super) fn local_member() -> Described {
    Described {
        identity: Identity {
            name: LOCAL.into(),
            labels: BTreeMap::from([(CLUSTER_LABEL.to_string(), LOCAL.to_string())]),
            source: "local".into(),
            server: "the cluster the host runs in".into(),
        },
        kubeconfig: None,
        secret: None,
        order: String::new(),
    }
}
