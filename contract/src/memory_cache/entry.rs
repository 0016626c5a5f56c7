//! One cached object as the cache keeps it, and the key it is kept under.
//!
//! Why apart from the cache's maps: what is extracted once at insert (the
//! labels, both projections' text, the controller references, the
//! resourceVersion) is what every read answers from, decided here in one
//! place.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::object_fields::OwnerRef;
use crate::types::{KindRef, Projection};

/// Kind, namespace, name: the cache's order and the contract's.
pub(super) type EntryKey = (KindRef, Option<String>, String);

/// An entry's key as borrowed parts: how a read looks an object up without
/// building an owned key (its kind's three strings, its namespace and its
/// name) each time. Ordered as [`EntryKey`] is.
pub(super) trait EntryKeyParts {
    fn parts(&self) -> (&KindRef, Option<&str>, &str);
}

impl EntryKeyParts for EntryKey {
    fn parts(&self) -> (&KindRef, Option<&str>, &str) {
        (&self.0, self.1.as_deref(), &self.2)
    }
}

impl EntryKeyParts for (&KindRef, Option<&str>, &str) {
    fn parts(&self) -> (&KindRef, Option<&str>, &str) {
        *self
    }
}

impl<'a> Borrow<dyn EntryKeyParts + 'a> for EntryKey {
    fn borrow(&self) -> &(dyn EntryKeyParts + 'a) {
        self
    }
}

impl PartialEq for dyn EntryKeyParts + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn EntryKeyParts + '_ {}

impl PartialOrd for dyn EntryKeyParts + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn EntryKeyParts + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.parts().cmp(&other.parts())
    }
}

/// An object checked and made ready to insert ([`MemoryCache::prepare`]).
pub struct PreparedEntry {
    pub(super) key: EntryKey,
    pub(super) entry: Entry,
}

#[derive(Clone, Debug)]
pub(super) struct Entry {
    pub(super) labels: BTreeMap<String, String>,
    pub(super) json: Arc<str>,
    /// The [`Projection::MetadataOnly`] form; the same text as `json` for
    /// objects that are metadata only already. Made at insert, not when
    /// first read: a read happens inside a plugin's call, whose time limit
    /// is the plugin's and must not pay for the host's work.
    pub(super) metadata_json: Arc<str>,
    /// Controller ownerReferences, to find a primary's children unparsed.
    pub(super) controllers: Box<[OwnerRef]>,
    /// `metadata.resourceVersion`, to tell a watch event of the version
    /// already held (the host caches what its own writes return before
    /// their events arrive) without serialising the object again.
    pub(super) resource_version: Option<Box<str>>,
}

impl Entry {
    /// Whether the object held has nothing but apiVersion, kind and
    /// metadata: `insert` then shares one text for both projections.
    pub(super) fn is_metadata_only(&self) -> bool {
        Arc::ptr_eq(&self.json, &self.metadata_json)
    }

    pub(super) fn text(&self, projection: Projection) -> String {
        match projection {
            Projection::Full => self.json.to_string(),
            Projection::MetadataOnly => self.metadata_json.to_string(),
        }
    }

    /// The object, parsed. `insert` keeps only text that parses back, so
    /// `None` never happens; it is not a panic all the same, as the text
    /// came from a plugin or a cluster.
    pub(super) fn value(&self) -> Option<Value> {
        serde_json::from_str(&self.json).ok()
    }

    /// [`super::is_controlled_by`], from what was extracted at insert.
    pub(super) fn is_controlled_by(&self, owner: &Value) -> bool {
        self.controllers.iter().any(|r| r.points_at(owner))
    }
}
