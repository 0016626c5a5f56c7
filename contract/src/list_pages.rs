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
//!
//! This module knows nothing of how the cache stores objects: the cache
//! examines a page's objects and adds the matches ([`ListPage::add`]); this
//! module sizes the pages, keeps the list within its bounds and stops it.

use std::time::Instant;

/// Comparisons one page makes under one hold of the cache: tens of
/// microseconds, so a writer waits no longer than that behind a list.
pub const PAGE_WORK: usize = 1 << 14;

/// Why a list (`MemoryCache::list_json_within`, `list_json_paged`) returned
/// no list.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ListJsonError {
    /// The label selector does not parse.
    #[error("{0}")]
    Selector(String),
    /// The matching objects' text passes the maximum; `listed` objects fit.
    #[error(
        "the list passes {} MiB of JSON after {listed} objects: list with a narrower label selector or a namespace",
        max_bytes.div_ceil(1024 * 1024)
    )]
    TooLarge { listed: usize, max_bytes: usize },
    /// The list examined as many objects as its bounds allow for its
    /// selector before finishing (`ListBounds::max_work`).
    #[error(
        "the list examined {examined} objects, all its bounds allow: list with a narrower label selector or a namespace"
    )]
    TooMuchWork { examined: usize },
    /// The list did not finish before its deadline.
    #[error(
        "the list did not finish before the call's deadline, after examining {examined} objects: list with a narrower label selector or a namespace"
    )]
    PastDeadline { examined: usize },
}

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

/// Runs a list page after page: `next_page` examines the next objects
/// into `page` (false once none is left), and the list gives up past
/// `bounds`. `cost` is the comparisons examining one object takes (the
/// selector's), which sizes a page to [`PAGE_WORK`].
pub(crate) fn page_through(
    cost: usize,
    bounds: ListBounds,
    mut next_page: impl FnMut(&mut ListPage) -> Result<bool, ListJsonError>,
) -> Result<Vec<String>, ListJsonError> {
    let mut page = ListPage {
        after: None,
        examine: (PAGE_WORK / cost).max(1),
        examined: 0,
        listed: Vec::new(),
        bytes: 0,
        max_bytes: bounds.max_bytes,
    };
    loop {
        let more = next_page(&mut page)?;
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
