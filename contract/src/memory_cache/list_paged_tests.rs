//! A list in pages over the cache: each page under its own hold of the
//! cache, within the list's bounds.

use std::cell::Cell;
use std::time::Instant;

use serde_json::json;

use super::*;
use crate::list_pages::PAGE_WORK;

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
