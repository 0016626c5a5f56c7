//! What the store hands its garbage collector: the tasks a write leaves
//! (queued in the store, run by [`super::garbage_collector`] before the
//! call returns), and the finalizer that holds an owner while a foreground
//! delete waits for its dependents.
//!
//! Why apart from the collector: the store queues this work and tells an
//! owner waiting for its dependents on every write; with these here it does
//! so without depending on the code that does the work.

use crate::cluster::backend::ObjectKey;

/// The finalizer that holds an owner until its blocking dependents are gone.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// Work the garbage collector still has to do within the current call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GcTask {
    /// One of this object's owners went away or started a foreground
    /// deletion: delete it, or drop the references to dead owners.
    Settle(ObjectKey),
    /// The object with this uid may be waiting for dependents that are now
    /// gone: release its `foregroundDeletion` finalizer if so.
    ReleaseForeground(String),
    /// This object was created with, or gained, ownerReferences: if one
    /// points at an owner in foreground deletion, it is collected at once.
    Adopted(ObjectKey),
    /// An object of this namespace went away: if the namespace is
    /// terminating and now empty, it can go too.
    FinishNamespace(String),
}
