//! What the host remembers about an object goes when the object does.
//!
//! PodSets are created and deleted in batches on the embedded cluster; the
//! garbage collector takes each one's Deployment with it, so the host never
//! prunes or deletes those itself. After every batch the engine remembers
//! nothing about any of them, and the host's heap after the last batch is
//! where the first batch left it.
//!
//! The batches are an Event TTL apart on the virtual clock: each PodSet's
//! `Created` Event stays in the cluster for that long, as on an API server,
//! and this measures what the host keeps, not the cluster's Events.
//!
//! The heap is measured by this binary's global allocator, which counts the
//! bytes live: every allocation of the engine, its cache, the sandbox and the
//! embedded cluster, in this process (guest memories are mapped, not
//! allocated, and not counted). A dedicated test binary, so no other test
//! allocates meanwhile.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use std::time::Duration;

use reconciler_host::cluster::embedded::EVENT_TTL;
use reconciler_host::engine::Remembered;
use reconciler_tests::example_plugin;
use reconciler_tests::world::{World, key};
use serde_json::{Value, json};

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to the system allocator as it came; the counter
// only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, passed on.
        let block = unsafe { System.alloc(layout) };
        if !block.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        block
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, passed on.
        let block = unsafe { System.alloc_zeroed(layout) };
        if !block.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: a block this allocator handed out, with its layout.
        unsafe { System.dealloc(block, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: a block this allocator handed out, with its layout.
        let moved = unsafe { System.realloc(block, layout, new_size) };
        if !moved.is_null() {
            LIVE.fetch_add(new_size, Ordering::Relaxed);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        moved
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const PODSETS: usize = 20_000;
const BATCHES: usize = 10;
const NS: &str = "default";

fn podset(name: &str) -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": name, "namespace": NS}, "spec": {"size": 1}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podsets_created_and_deleted_in_batches_leave_nothing_behind() {
    let mut world = World::new(&[&example_plugin("podset")]).await;
    let per_batch = PODSETS / BATCHES;
    let mut live_after = Vec::new();
    for batch in 0..BATCHES {
        world.clock.advance(EVENT_TTL + Duration::from_secs(60));
        let names: Vec<String> = (0..per_batch)
            .map(|i| format!("batch-{batch}-{i}"))
            .collect();
        for name in &names {
            world.apply(podset(name));
        }
        world.settle().await;
        let deployment = world
            .get(&key("apps", "v1", "Deployment", NS, &names[0]))
            .await;
        assert!(
            deployment.is_some(),
            "batch {batch}: the PodSets were served"
        );
        assert!(world.engine.remembered().applied >= per_batch);
        for name in &names {
            world.delete(&key("example.com", "v1alpha1", "PodSet", NS, name));
        }
        world.settle().await;
        world.records.clear();
        assert_eq!(
            world
                .get(&key("apps", "v1", "Deployment", NS, &names[0]))
                .await,
            None,
            "batch {batch}: the garbage collector took the Deployments"
        );
        assert_eq!(
            world.engine.remembered(),
            Remembered::default(),
            "batch {batch}: nothing is remembered about deleted objects"
        );
        live_after.push(LIVE.load(Ordering::Relaxed));
    }
    let (first, last) = (live_after[0], live_after[BATCHES - 1]);
    eprintln!("live heap after each batch (bytes): {live_after:?}");
    assert!(
        last <= first + first / 10,
        "the heap after the last batch ({last} bytes) is within 10% of the heap after the first \
         ({first} bytes); after each: {live_after:?}"
    );
}
