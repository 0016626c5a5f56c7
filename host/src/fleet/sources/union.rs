//! Which claim on a member's name wins: one rule, the order of trust of
//! the sources and then each source's own order, kept apart from the
//! engagements that act on it so it can be read (and tested) alone.

use std::collections::BTreeMap;

use super::described::{Described, SourceKind};

/// A claim on a member's name that a more trusted (or, within one source,
/// earlier) claim holds.
#[derive(Debug)]
pub(super) struct Clash {
    pub refused: Described,
    /// The source that keeps the name.
    pub kept_by: String,
}

/// The member each name stands for: the most trusted source's, then the
/// earliest within a source; and every other claim on a name.
pub(super) fn union(
    by_source: &BTreeMap<SourceKind, Vec<Described>>,
) -> (BTreeMap<String, (SourceKind, Described)>, Vec<Clash>) {
    let mut union: BTreeMap<String, (SourceKind, Described)> = BTreeMap::new();
    let mut clashes = Vec::new();
    for (kind, members) in by_source {
        for described in members {
            match union.get(&described.identity.name) {
                Some((_, kept)) => clashes.push(Clash {
                    refused: described.clone(),
                    kept_by: kept.identity.source.clone(),
                }),
                None => {
                    union.insert(described.identity.name.clone(), (*kind, described.clone()));
                }
            }
        }
    }
    (union, clashes)
}
