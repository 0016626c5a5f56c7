//! What the cache import reads from.

use std::ops::Deref;

use reconciler_contract::KindRef;
use reconciler_contract::Projection;
use reconciler_contract::memory_cache::{ListBounds, ListJsonError, MemoryCache, list_json_paged};

/// One object a plugin asks for, as which projection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GetRequest<'a> {
    pub kind: &'a KindRef,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    pub projection: Projection,
}

/// One list a plugin asks for: which objects, as which projection. Every
/// reader answers the same question, so it is one value handed down
/// through the readers that wrap one another (the recording one around
/// the cache), not four arguments each of them repeats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListRequest<'a> {
    pub kind: &'a KindRef,
    /// `None`: every namespace.
    pub namespace: Option<&'a str>,
    /// A label selector as the plugin wrote it.
    pub selector: &'a str,
    pub projection: Projection,
}

impl ListRequest<'_> {
    /// This list from a cache held a page at a time (`hold` gives it for
    /// one page), within `bounds`: see `list_json_paged`.
    pub fn paged<C: Deref<Target = MemoryCache>>(
        &self,
        hold: impl FnMut() -> C,
        bounds: ListBounds,
    ) -> Result<Vec<String>, ListJsonError> {
        list_json_paged(
            hold,
            self.kind,
            self.namespace,
            self.selector,
            self.projection,
            bounds,
        )
    }
}

/// The host cache as one reconcile sees it. The runtime enforces that the
/// plugin asks only for kinds it declared (same-namespace read kinds only in
/// the primary's namespace), and picks the projection from its metadata;
/// implementations just answer.
pub trait ObjectReader: Send + Sync {
    /// One object as JSON.
    fn get(&self, request: &GetRequest<'_>) -> Option<String>;
    /// Objects as JSON, ordered by namespace then name; `Err` for a selector
    /// that does not parse.
    fn list(&self, request: &ListRequest<'_>) -> Result<Vec<String>, String>;

    /// [`Self::list`] as the cache import asks for it: within `bounds`
    /// (its JSON text, its work, the call's deadline). An implementation
    /// should list in pages within them ([`ListRequest::paged`]), so one
    /// call can neither make the host allocate more than the plugin could
    /// take nor run past its deadline; this default, for readers that
    /// cannot, builds the list whole and then refuses one past the byte
    /// bound.
    fn list_within(
        &self,
        request: &ListRequest<'_>,
        bounds: ListBounds,
    ) -> Result<Vec<String>, ListJsonError> {
        let listed = self.list(request).map_err(ListJsonError::Selector)?;
        within_bytes(listed, bounds.max_bytes)
    }
}

/// `listed`, if its JSON text stays within `max_bytes`; otherwise how many
/// objects fit. For readers that hold a list whole before bounding it.
pub fn within_bytes(listed: Vec<String>, max_bytes: usize) -> Result<Vec<String>, ListJsonError> {
    let mut bytes = 0usize;
    for (n, text) in listed.iter().enumerate() {
        bytes = bytes.saturating_add(text.len());
        if bytes > max_bytes {
            return Err(ListJsonError::TooLarge {
                listed: n,
                max_bytes,
            });
        }
    }
    Ok(listed)
}

impl ObjectReader for MemoryCache {
    fn get(&self, request: &GetRequest<'_>) -> Option<String> {
        self.get_json(
            request.kind,
            request.namespace,
            request.name,
            request.projection,
        )
    }

    fn list(&self, request: &ListRequest<'_>) -> Result<Vec<String>, String> {
        self.list_json(
            request.kind,
            request.namespace,
            request.selector,
            request.projection,
        )
    }

    fn list_within(
        &self,
        request: &ListRequest<'_>,
        bounds: ListBounds,
    ) -> Result<Vec<String>, ListJsonError> {
        request.paged(|| self, bounds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that only knows how to list everything at once.
    struct Fixed(Vec<String>);

    impl ObjectReader for Fixed {
        fn get(&self, _: &GetRequest<'_>) -> Option<String> {
            None
        }

        fn list(&self, _: &ListRequest<'_>) -> Result<Vec<String>, String> {
            Ok(self.0.clone())
        }
    }

    #[test]
    fn a_reader_without_its_own_bound_still_refuses_a_list_past_the_maximum() {
        let reader = Fixed(vec!["x".repeat(10); 3]);
        let kind = KindRef::new("", "v1", "Pod");
        let request = ListRequest {
            kind: &kind,
            namespace: None,
            selector: "",
            projection: Projection::Full,
        };
        let list = |max| reader.list_within(&request, ListBounds::bytes(max));
        assert_eq!(list(30).unwrap().len(), 3);
        assert_eq!(
            list(25).unwrap_err(),
            ListJsonError::TooLarge {
                listed: 2,
                max_bytes: 25
            }
        );
    }
}
