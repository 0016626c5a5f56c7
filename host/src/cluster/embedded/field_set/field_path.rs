//! Where an owned field is: a path of map members, set-list entries and
//! keyed-list items, and which lists of every object merge entry by entry
//! or item by item.
//!
//! Why a module: ownership is kept, compared and shown as these paths, and
//! the lists that merge by entry or by key are named once, here.

use std::borrow::Borrow;
use std::fmt;

/// Lists whose string entries are owned one by one (`listType=set`).
const SET_LISTS: &[[&str; 2]] = &[["metadata", "finalizers"]];

/// Lists of maps merged item by item, each item named by the value of one
/// of its fields (`listType=map`): the list's path and that field.
pub(super) const KEYED_LISTS: &[([&str; 2], &str)] = &[(["metadata", "ownerReferences"], "uid")];

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Segment {
    /// A member of a map.
    Field(String),
    /// A string entry of a set list (`metadata.finalizers`).
    Entry(String),
    /// The item of a keyed list whose field `key` holds `value`
    /// (`metadata.ownerReferences` by `uid`).
    Item { key: String, value: String },
}

/// The path of one owned field, from the object's root. A boxed slice,
/// not a `Vec`: every stored object keeps a path per owned leaf, and a
/// `Vec` grown by one segment keeps room for more.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldPath(Box<[Segment]>);

impl FieldPath {
    pub fn new(segments: Vec<Segment>) -> Self {
        Self(segments.into_boxed_slice())
    }

    /// A path of map members only: `FieldPath::fields(&["spec", "replicas"])`.
    #[cfg(test)]
    pub fn fields(names: &[&str]) -> Self {
        Self(
            names
                .iter()
                .map(|n| Segment::Field((*n).to_string()))
                .collect(),
        )
    }

    pub fn segments(&self) -> &[Segment] {
        &self.0
    }

    pub(super) fn child(&self, segment: Segment) -> Self {
        let mut segments = Vec::with_capacity(self.0.len() + 1);
        segments.extend_from_slice(&self.0);
        segments.push(segment);
        Self(segments.into_boxed_slice())
    }

    pub(super) fn is_set_list(&self) -> bool {
        SET_LISTS.iter().any(|list| self.is_fields(list))
    }

    /// The field naming each item, if this is a keyed list.
    pub(super) fn list_key(&self) -> Option<&'static str> {
        KEYED_LISTS
            .iter()
            .find(|(list, _)| self.is_fields(list))
            .map(|(_, key)| *key)
    }

    fn is_fields(&self, names: &[&str]) -> bool {
        self.0.len() == names.len()
            && self
                .0
                .iter()
                .zip(names)
                .all(|(s, name)| matches!(s, Segment::Field(f) if f == name))
    }
}

impl Borrow<[Segment]> for FieldPath {
    fn borrow(&self) -> &[Segment] {
        &self.0
    }
}

impl fmt::Display for FieldPath {
    /// `spec.replicas`, `metadata.labels["app.kubernetes.io/name"]`,
    /// `metadata.finalizers[="example.com/cleanup"]`,
    /// `metadata.ownerReferences[uid="…"].controller`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Field(name) if is_plain(name) && i == 0 => write!(f, "{name}")?,
                Segment::Field(name) if is_plain(name) => write!(f, ".{name}")?,
                Segment::Field(name) => write!(f, "[{name:?}]")?,
                Segment::Entry(entry) => write!(f, "[={entry:?}]")?,
                Segment::Item { key, value } => write!(f, "[{key}={value:?}]")?,
            }
        }
        Ok(())
    }
}

fn is_plain(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}
