//! What the cache import reads from.

use reconciler_contract::KindRef;
use reconciler_contract::Projection;
use reconciler_contract::memory_cache::{ListBounds, ListJsonError, MemoryCache, list_json_paged};

/// The host cache as one reconcile sees it. The runtime enforces that the
/// plugin asks only for kinds it declared (same-namespace read kinds only in
/// the primary's namespace), and picks the projection from its metadata;
/// implementations just answer.
pub trait ObjectReader: Send + Sync {
    /// One object as JSON.
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
        projection: Projection,
    ) -> Option<String>;
    /// Objects as JSON, ordered by namespace then name; `Err` for a selector
    /// that does not parse.
    fn list(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &str,
        projection: Projection,
    ) -> Result<Vec<String>, String>;

    /// [`Self::list`] as the cache import asks for it: within `bounds`
    /// (its JSON text, its work, the call's deadline). An implementation
    /// should list in pages within them (`list_json_paged`), so one call
    /// can neither make the host allocate more than the plugin could take
    /// nor run past its deadline; this default, for readers that cannot,
    /// builds the list whole and then refuses one past the byte bound.
    fn list_within(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &str,
        projection: Projection,
        bounds: ListBounds,
    ) -> Result<Vec<String>, ListJsonError> {
        let max_bytes = bounds.max_bytes;
        let listed = self
            .list(kind, namespace, selector, projection)
            .map_err(ListJsonError::Selector)?;
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
}

impl ObjectReader for MemoryCache {
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
        projection: Projection,
    ) -> Option<String> {
        self.get_json(kind, namespace, name, projection)
    }

    fn list(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &str,
        projection: Projection,
    ) -> Result<Vec<String>, String> {
        self.list_json(kind, namespace, selector, projection)
    }

    fn list_within(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &str,
        projection: Projection,
        bounds: ListBounds,
    ) -> Result<Vec<String>, ListJsonError> {
        list_json_paged(|| self, kind, namespace, selector, projection, bounds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that only knows how to list everything at once.
    struct Fixed(Vec<String>);

    impl ObjectReader for Fixed {
        fn get(&self, _: &KindRef, _: Option<&str>, _: &str, _: Projection) -> Option<String> {
            None
        }

        fn list(
            &self,
            _: &KindRef,
            _: Option<&str>,
            _: &str,
            _: Projection,
        ) -> Result<Vec<String>, String> {
            Ok(self.0.clone())
        }
    }

    #[test]
    fn a_reader_without_its_own_bound_still_refuses_a_list_past_the_maximum() {
        let reader = Fixed(vec!["x".repeat(10); 3]);
        let kind = KindRef::new("", "v1", "Pod");
        let list =
            |max| reader.list_within(&kind, None, "", Projection::Full, ListBounds::bytes(max));
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
