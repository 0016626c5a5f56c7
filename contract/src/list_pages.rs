//! Listing the cache a page at a time, within bounds.
//!
//! The host answers a plugin's `cache.list` inside a host function, where
//! epoch interruption does not reach: a list with a long `notin` selector
//! over many objects would otherwise run objects times terms comparisons
//! past any deadline, holding the cache's lock the whole time, so watch
//! events waited behind it. So a list runs in pages of bounded work, each
//! under its own short hold of the cache (writers go between pages), and
//! gives up past its bounds: the JSON text it may build, the comparisons it
//! may make (small where the call may not block), the call's deadline.
//!
//! Between pages the cache may change: a list goes on after the last object
//! it examined, in namespace and name order, so it never returns an object
//! twice and sees each object as it was when its page reached it, as a
//! paginated list of the API server does with a continue token past its
//! snapshot.

use std::ops::Deref;
use std::time::Instant;

use crate::memory_cache::{ListJsonError, MemoryCache};
use crate::selector::LabelSelector;
use crate::types::{KindRef, Projection};

/// Comparisons one page makes under one hold of the cache: tens of
/// microseconds, so a writer waits no longer than that behind a list.
pub const PAGE_WORK: usize = 1 << 14;

/// How far one list may go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListBounds {
    /// JSON text the list may build.
    pub max_bytes: usize,
    /// Comparisons of labels with the selector's terms, all pages together.
    pub max_work: usize,
    /// When the list must have finished.
    pub deadline: Option<Instant>,
}

impl ListBounds {
    /// Only a bound on the text.
    pub fn bytes(max_bytes: usize) -> Self {
        Self {
            max_bytes,
            max_work: usize::MAX,
            deadline: None,
        }
    }
}

/// Where a list goes on from: the last object it examined.
#[derive(Clone, Debug)]
pub(crate) struct ListCursor {
    pub(crate) namespace: Option<String>,
    pub(crate) name: String,
}

/// A list under way.
#[derive(Debug)]
pub(crate) struct ListPage {
    pub(crate) after: Option<ListCursor>,
    /// Objects the next page examines at most.
    pub(crate) examine: usize,
    /// Objects examined so far.
    pub(crate) examined: usize,
    listed: Vec<String>,
    bytes: usize,
    max_bytes: usize,
}

impl ListPage {
    /// Adds one matching object's text, within the byte bound.
    pub(crate) fn add(&mut self, text: &str) -> Result<(), ListJsonError> {
        self.bytes = self.bytes.saturating_add(text.len());
        if self.bytes > self.max_bytes {
            return Err(ListJsonError::TooLarge {
                listed: self.listed.len(),
                max_bytes: self.max_bytes,
            });
        }
        self.listed.push(text.to_string());
        Ok(())
    }
}

/// The objects of `kind` in `namespace` (all when `None`) matching
/// `selector`, as JSON text in namespace and name order, within `bounds`.
/// `hold` gives the cache for one page (a lock guard, say) and is called
/// again for each next page.
pub fn list_json_paged<C: Deref<Target = MemoryCache>>(
    mut hold: impl FnMut() -> C,
    kind: &KindRef,
    namespace: Option<&str>,
    selector: &str,
    projection: Projection,
    bounds: ListBounds,
) -> Result<Vec<String>, ListJsonError> {
    let selector =
        LabelSelector::parse(selector).map_err(|e| ListJsonError::Selector(e.to_string()))?;
    let cost = selector.cost();
    let mut page = ListPage {
        after: None,
        examine: (PAGE_WORK / cost).max(1),
        examined: 0,
        listed: Vec::new(),
        bytes: 0,
        max_bytes: bounds.max_bytes,
    };
    loop {
        let more = hold().list_page(kind, namespace, &selector, projection, &mut page)?;
        if !more {
            return Ok(page.listed);
        }
        let examined = page.examined;
        if examined.saturating_mul(cost) >= bounds.max_work {
            return Err(ListJsonError::TooMuchWork { examined });
        }
        if bounds.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(ListJsonError::PastDeadline { examined });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use serde_json::json;

    use super::*;

    fn pods(n: usize) -> MemoryCache {
        let mut cache = MemoryCache::new();
        for i in 0..n {
            let app = if i % 2 == 0 { "web" } else { "db" };
            cache
                .insert(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
                    "name": format!("p{i:05}"), "namespace": "default",
                    "labels": {"app": app}}}))
                .unwrap();
        }
        cache
    }

    fn pod() -> KindRef {
        KindRef::new("", "v1", "Pod")
    }

    #[test]
    fn a_long_list_takes_the_cache_once_per_page_and_lists_every_match_once() {
        let cache = pods(3 * PAGE_WORK);
        let holds = Cell::new(0);
        let hold = || {
            holds.set(holds.get() + 1);
            &cache
        };
        let listed = list_json_paged(
            hold,
            &pod(),
            None,
            "app!=db",
            Projection::MetadataOnly,
            ListBounds::bytes(usize::MAX),
        )
        .unwrap();
        assert_eq!(listed.len(), 3 * PAGE_WORK / 2);
        let mut names: Vec<&str> = listed
            .iter()
            .map(|t| {
                t.split("\"name\":\"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap()
            })
            .collect();
        names.dedup();
        assert_eq!(names.len(), listed.len(), "no object twice");
        assert!(holds.get() >= 3, "held {} times", holds.get());
        // Through the label index, the same.
        let web = list_json_paged(
            || &cache,
            &pod(),
            Some("default"),
            "app=web",
            Projection::MetadataOnly,
            ListBounds::bytes(usize::MAX),
        )
        .unwrap();
        assert_eq!(web, listed);
    }

    #[test]
    fn a_list_past_its_work_or_its_deadline_gives_up() {
        let cache = pods(4 * PAGE_WORK);
        let values = vec!["x"; 200].join(",");
        let selector = format!("app notin ({values})");
        let list =
            |bounds| list_json_paged(|| &cache, &pod(), None, &selector, Projection::Full, bounds);
        let err = list(ListBounds {
            max_work: 1 << 20,
            ..ListBounds::bytes(usize::MAX)
        })
        .unwrap_err();
        assert!(matches!(err, ListJsonError::TooMuchWork { .. }), "{err:?}");
        let err = list(ListBounds {
            deadline: Some(Instant::now()),
            ..ListBounds::bytes(usize::MAX)
        })
        .unwrap_err();
        assert!(matches!(err, ListJsonError::PastDeadline { .. }), "{err:?}");
        assert_eq!(
            list(ListBounds::bytes(usize::MAX)).unwrap().len(),
            4 * PAGE_WORK
        );
    }
}
