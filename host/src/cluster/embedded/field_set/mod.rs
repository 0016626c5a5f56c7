//! Server-side apply field ownership for the embedded cluster.
//!
//! Server-side apply lets several field managers write one object without
//! overwriting each other: each manager owns the fields it set in its last
//! apply. This module keeps that bookkeeping and does the merge, so the store
//! only has to decide *which* object and *which* manager.
//!
//! The contract, as a controller sees it:
//! - the fields an apply sets are merged into the object;
//! - fields the manager set in its previous apply and no longer sets are
//!   removed, unless another manager still owns them (or something below them);
//! - changing a field another manager owns to a different value is a conflict,
//!   unless the apply is forced, which moves ownership to the applier; setting
//!   it to the same value shares ownership;
//! - a container (map) emptied by a removal is removed too, unless a manager
//!   owns it as an empty map.
//!
//! Ownership is a set of leaf paths per manager: maps are recursed into (so
//! `metadata.labels` and `metadata.annotations` are owned key by key), an
//! empty map is a leaf meaning "this map exists", and `null` means "not set".
//!
//! Two lists of every object merge as they do on a real API server:
//! - `metadata.finalizers` is a set: each entry is owned on its own, so
//!   controllers that apply finalizers never drop each other's entries;
//! - `metadata.ownerReferences` is a list keyed by `uid`: each reference is
//!   an item whose fields are owned one by one, so two managers applying a
//!   reference each keep both, and a manager that stops applying its
//!   reference removes only that one. New items are appended in the order
//!   the applier listed them. A manager that stops setting an item's `uid`
//!   (its key) gives up the whole item.
//!
//! Known bounds versus a real API server, which knows each kind's schema:
//! - Every other list is atomic (one leaf). A real server merges some by key,
//!   e.g. `spec.containers` by `name`; with one manager per list the result
//!   is identical, with several the last applier's list wins (or conflicts
//!   without force).
//! - Without a schema there are no defaults, type checks or field validation;
//!   a value replaces whatever was there (a scalar may become a map).

mod field_path;
mod owned_fields;
mod ownership;
mod value_edits;

pub use field_path::{FieldPath, Segment};
pub use owned_fields::FieldSet;
pub use ownership::{FieldConflict, Manager, Merge, Operation, Ownership};
pub use value_edits::resolve;

#[cfg(test)]
mod tests;
