//! Plugins as cluster resources: `kubectl apply` a Plugin
//! (`reconciler-host.io/v1alpha1`, cluster-scoped) and its source serves;
//! edit the source and it is upgraded in place; delete it and its
//! controller stops.
//!
//! Each Plugin has a follower ([`follower::Follower`]) that resolves its
//! source, verifies and pulls the digest, and serves it through a file of
//! [`ServedFiles`](crate::registry::served_files::ServedFiles), so hot reload's rules (validate before swapping, calls
//! in flight finish on the old version, one plugin per primary kind) hold
//! for pulled plugins exactly as for files. The Plugin's status and Events
//! say what serves and why a newer version does not.
//!
//! Keys, keyless identities' trust root and pull secrets are read from the
//! host's own namespace: a Plugin is cluster-scoped, and letting it name
//! Secrets anywhere would let whoever may write Plugins read every Secret
//! the host can.
//!
//! Where each piece lives: [`followers`] starts, changes and stops one
//! [`follower::Follower`] per Plugin and per `--plugin`; [`shared`] holds
//! what they share and reads a spec's registry access; [`conditions`] and
//! [`spec`] are the Plugin's status and spec; [`canary`] steps a canary
//! rollout and judges its gate; [`from_objects`] reads
//! Plugins from `dev`'s and `simulate`'s object files; [`kind`] names the
//! resource itself.

mod api_error;
pub mod canary;
pub mod conditions;
pub mod follower;
pub mod followers;
pub mod from_objects;
pub mod kind;
pub mod rollout_status;
pub mod shared;
pub mod spec;

pub(crate) use self::api_error::api_error_text;
pub use self::followers::follow;
pub use self::kind::{GROUP, KIND, VERSION, api_resource};
pub use self::shared::Shared;
