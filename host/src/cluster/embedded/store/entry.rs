//! One stored object as the store keeps it: its text, and beside it,
//! parsed once when written, what the store and its garbage collector ask
//! of it on every change.
//!
//! Why a module: what is parsed at write time and what on every read is
//! decided here, in one place.

use reconciler_contract::object_meta::MetadataField;
use std::sync::Arc;

use serde_json::Value;

use crate::cluster::embedded::field_set::Ownership;
use crate::cluster::embedded::gc_tasks::FOREGROUND_FINALIZER;
use crate::cluster::embedded::object_metadata::{finalizers, is_deleting};
use crate::cluster::embedded::packed_ownership::PackedOwnership;

/// One stored object with its field ownership.
///
/// The object is kept as its JSON text and parsed when read: parsed, each
/// map of an object costs a whole B-tree node, so a Deployment takes about
/// eight times the memory of its text, and the store holds every object
/// while a call reads one or two of them. What the garbage collector reads
/// on every change of a dependent (its ownerReferences) is kept parsed.
#[derive(Debug, Clone)]
pub(in crate::cluster::embedded) struct Entry {
    /// Shared with the watch events of this version, and through them with
    /// the engine's cache.
    text: Arc<str>,
    pub(in crate::cluster::embedded) owners: Box<[OwnerRef]>,
    ownership: PackedOwnership,
    /// Marked for deletion: what a create in its namespace (when it is a
    /// Namespace) asks, answered without parsing it.
    pub(in crate::cluster::embedded) deleting: bool,
    /// Deleted in the foreground and held until its blocking dependents are
    /// gone: what garbage collection asks of an owner each time one of its
    /// dependents changes, answered without parsing the owner.
    pub(in crate::cluster::embedded) waits_for_dependents: bool,
}

impl Entry {
    pub(super) fn new(object: &Value, ownership: &Ownership) -> Self {
        Self {
            text: object.to_string().into(),
            owners: owner_refs(object).into_boxed_slice(),
            ownership: PackedOwnership::pack(ownership),
            deleting: is_deleting(object),
            waits_for_dependents: is_deleting(object)
                && finalizers(object).contains(&FOREGROUND_FINALIZER),
        }
    }

    pub(super) fn owner_uids(&self) -> Vec<String> {
        self.owners.iter().map(|r| r.uid.clone()).collect()
    }

    /// Who owns which of the object's fields.
    pub(in crate::cluster::embedded) fn ownership(&self) -> Ownership {
        self.ownership.unpack()
    }

    /// Replaces who owns which of the object's fields.
    pub(super) fn set_ownership(&mut self, ownership: &Ownership) {
        self.ownership = PackedOwnership::pack(ownership);
    }

    /// The stored object, parsed.
    pub(in crate::cluster::embedded) fn object(&self) -> Value {
        parse_stored(&self.text)
    }

    /// The stored object's text.
    pub(super) fn json(&self) -> &Arc<str> {
        &self.text
    }
}

/// Parses text the store wrote from a `Value`. It always parses: the store
/// refuses objects nested past what serde_json reads back
/// ([`super::admission::check_depth`]).
fn parse_stored(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// One ownerReference, as far as garbage collection cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::cluster::embedded) struct OwnerRef {
    pub(in crate::cluster::embedded) uid: String,
    pub(in crate::cluster::embedded) block_owner_deletion: bool,
}

fn owner_refs(object: &Value) -> Vec<OwnerRef> {
    let refs = object
        .metadata_field("ownerReferences")
        .and_then(Value::as_array);
    refs.into_iter()
        .flatten()
        .filter_map(|r| {
            let uid = r.get("uid")?.as_str()?.to_string();
            let block_owner_deletion = r
                .get("blockOwnerDeletion")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            Some(OwnerRef {
                uid,
                block_owner_deletion,
            })
        })
        .collect()
}
