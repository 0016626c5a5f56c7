//! Where member clusters come from, followed at runtime: the cluster the
//! host runs in (`local`), Secrets in the host's namespace labelled
//! `reconciler-host.io/cluster` (the label's value names the member; the
//! kubeconfig under `kubeconfig`, or `value` as Cluster API writes it),
//! Cluster API's `<cluster>-kubeconfig` Secrets (`--cluster-api`), and one
//! kubeconfig file per member in `--clusters-dir`.
//!
//! Every source reports its whole set of members; the engagements keep
//! the fleet equal to their union: a new member is engaged, one whose
//! kubeconfig changed (rotated credentials, a new address) is engaged
//! anew, one no source names any more is disengaged. A kubeconfig that does
//! not make a client is reported and retried when its source changes.
//!
//! Trust: the Secret sources are off unless `run` asks for them, and what
//! they hold is input, not configuration. Their kubeconfigs may not run
//! commands, read files or drop TLS verification unless the operator allows
//! it ([`kubeconfig_trust`](super::kubeconfig_trust)), and a name the
//! operator's own sources give (local, `--clusters-dir`) is never taken
//! over by a Secret: a clash is refused and said on the losing Secret.
//!
//! Each source has its module (`local`, `files`, `secrets`) and reports
//! in the one shape of `described`; `union` decides who keeps a name two
//! sources give, `engagements` brings the fleet in line with the result
//! through `client` (a kubeconfig made a client) and `probe`, saying what
//! became of each member with the `announcer`; `follow` runs the whole as
//! one loop, with the `options` `run` gives.

mod announcer;
mod client;
mod described;
mod engagements;
mod files;
mod follow;
mod local;
mod options;
mod probe;
mod secrets;
mod union;

pub use self::client::{CREDENTIAL_TIMEOUT, EngageError, client_for};
pub use self::described::{Described, SourceKind, valid_member_name};
pub use self::files::read_dir_members;
pub use self::follow::follow;
pub use self::local::LOCAL;
pub use self::options::SourceOptions;
pub use self::secrets::{CAPI_CLUSTER_LABEL, SECRET_LABEL};
