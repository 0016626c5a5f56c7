//! The synchronous core of the embedded cluster: objects, versions, field
//! ownership, finalizers and the change log.
//!
//! Why it exists: `dev`, `simulate` and the tests run the engine against an
//! in-memory cluster, so that cluster must behave like a real API server in
//! everything a controller can observe, or behaviour seen locally would not
//! hold in a real cluster. The async wrapper turns this store into a
//! `ClusterBackend`; keeping the store synchronous and free of I/O makes it
//! exact, immediate and testable on its own.
//!
//! Guarantees:
//! - Objects are keyed by kind, namespace and name and kept in a `BTreeMap`,
//!   so lists come sorted by namespace then name.
//! - The server owns `uid`, `resourceVersion`, `generation`,
//!   `creationTimestamp`, `deletionTimestamp`, `deletionGracePeriodSeconds`
//!   and `managedFields`; what a client sends for them is ignored.
//! - `resourceVersion` is one counter for the whole store, bumped on every
//!   change of any object (deletions included). `generation` starts at 1 and
//!   is bumped when anything outside `metadata` and `status` changes, and once
//!   when the object is marked for deletion (as a real server does). A call
//!   that changes nothing changes nothing: no new version, no event. An apply
//!   that only shares or moves ownership of fields, without changing a value,
//!   is not a change either (a real server would bump the version for its
//!   managedFields, which the store does not expose).
//! - Apply is server-side apply (see [`super::field_set`]); `status` sent to
//!   the main resource is ignored, as for kinds with a status subresource.
//!   Ownership stays inside the store: returned objects carry no
//!   `managedFields`.
//! - Deletion honours finalizers and propagation (see
//!   [`super::garbage_collector`]); all of it happens inside the call.
//! - Scope is the kind's, as an API server serves it (see
//!   [`super::kind_scopes`]: built-in kinds, and the CRDs stored here): a
//!   cluster-scoped object is stored without a namespace (one sent with it is
//!   dropped), and an object of a namespaced kind must name its namespace.
//! - Deleting a Namespace object terminates the namespace (see
//!   [`super::namespaces`]): its objects are deleted, nothing new can be
//!   created in it meanwhile, and it goes once it is empty.
//! - An object may have one controller ownerReference at most, and
//!   ownerReferences merge by uid under server-side apply, as the API server
//!   validates and merges them.
//! - Objects are kept as JSON text (see [`Entry`]), so one nested deeper than
//!   serde_json reads back (127 levels) is refused, as the engine's cache
//!   refuses it.
//! - Every change is logged as a [`StoreEvent`] in the order it happened.
//! - Everything is deterministic: uids come from a counter and timestamps from
//!   the caller's clock, so the same calls give byte-identical objects.
//! - Bounded: at most `max_objects` objects ([`StoreError::Full`] past that),
//!   and at most [`EVENT_LOG_LIMIT`] undrained events; older ones are dropped
//!   and counted in [`EmbeddedStore::dropped_events`], so a consumer can tell
//!   it missed changes and relist.
//!
//! Known bounds versus a real API server:
//! - Schemas only from CRDs: a custom resource whose CRD is stored is
//!   checked, pruned, defaulted and validated by its version's schema (see
//!   [`super::crd_schema`]); built-in kinds are not registered, so any
//!   apiVersion/kind is served, versions are not converted (an object
//!   applied as `v1` and `v1beta1` is two objects), built-ins are not
//!   defaulted (but a Namespace's finalizer and phase, see
//!   [`super::namespaces`]), and of them only the metadata the store relies
//!   on is validated (name, namespace, labels, annotations, finalizers,
//!   ownerReferences).
//! - Namespaces need not exist: an object may be created in a namespace
//!   that has no Namespace object.
//! - `resourceVersion` in an apply is ignored rather than used as a
//!   precondition, and there is no admission, quota or RBAC.
//! - An object whose only owners never existed is kept; a real garbage
//!   collector would delete it shortly after it is created.

mod admission;
mod changes;
mod entry;
mod errors;
mod prepared_apply;
mod state;
mod validation;
mod writes;

pub(super) use entry::Entry;
pub use errors::StoreError;
pub use prepared_apply::PreparedApply;
pub use state::{EVENT_LOG_LIMIT, EmbeddedStore, StoreEvent};
pub use writes::{ApplyOutcome, FINALIZER_MANAGER};

#[cfg(test)]
pub(super) mod tests;
