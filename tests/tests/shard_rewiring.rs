//! A ring change that arrives while a plugin is being added, on the
//! embedded cluster: the replica's watches stay selected by the shard
//! label. Before, the change judged the plugin's kinds by the plugins
//! served so far (the one being added not among them) and watched them
//! again whole, so a sharded replica listed and held every object of its
//! primary kind.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, RwLock};

use reconciler_host::cluster::VirtualClock;
use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::engine::Engine;
use reconciler_host::engine::shard_selection::{Buckets, ShardSelection};
use reconciler_host::engine::work_queue::PrimaryKey;
use reconciler_tests::intercepted::{Call, Hook, Intercepted};
use reconciler_tests::{example_plugin, load};

/// Each watch asked for: its kind and its label selector (`None`: whole).
type Opened = Arc<Mutex<Vec<(String, Option<String>)>>>;

fn buckets(mine: &[&str], others: &[&str]) -> Buckets {
    let set = |b: &[&str]| b.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    Buckets {
        mine: set(mine),
        others: set(others),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ring_change_during_a_plugins_first_list_keeps_its_kinds_selected() {
    let clock = VirtualClock::at(reconciler_sdk::testing::DEFAULT_NOW_MILLIS);
    let opened: Opened = Arc::default();
    let seen = opened.clone();
    let hook: Hook = Box::new(move |call| {
        if let Call::Watch(kind, scope) = call {
            let labels = scope.labels.as_ref().map(ToString::to_string);
            seen.lock().unwrap().push((kind.kind.clone(), labels));
        }
        Ok(())
    });
    let (hold, held) = tokio::sync::watch::channel(true);
    let backend =
        Intercepted::new(EmbeddedCluster::new(Arc::new(clock.clone())), hook).holding_watches(held);
    let ring = Arc::new(RwLock::new(buckets(&["00a"], &["00b", "00c"])));
    let bucket_of = Arc::new(|_: &PrimaryKey| "00a".to_string());
    let engine = Engine::empty(Arc::new(backend), Arc::new(clock.clone()))
        .with_shard_selection(ShardSelection::new(bucket_of, ring.clone()));

    let add = engine.add_plugin(Arc::new(load(&example_plugin("podset"))));
    let change = async {
        // The plugin's first kind is listing (its watch is held)...
        while opened.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        // ...when the ring moves one bucket to this replica.
        *ring.write().unwrap() = buckets(&["00a", "00c"], &["00b"]);
        let reselect = engine.reselect();
        tokio::pin!(reselect);
        // Polled once, so it gets as far as it can without the held list.
        tokio::select! {
            biased;
            result = &mut reselect => result.expect("reselect"),
            () = std::future::ready(()) => {}
        }
        hold.send(false).expect("the backend holds the receiver");
        reselect.await.expect("reselect after the list");
    };
    let (added, ()) = tokio::join!(add, change);
    added.expect("podset loads");

    let opened = opened.lock().unwrap().clone();
    let whole: Vec<&(String, Option<String>)> = opened
        .iter()
        .filter(|(kind, labels)| {
            matches!(kind.as_str(), "PodSet" | "Deployment") && labels.is_none()
        })
        .collect();
    assert!(
        whole.is_empty(),
        "a sharded kind was watched whole: {whole:?} (every watch: {opened:?})"
    );
    // The bucket that arrived during the list is followed: listed by its
    // own selector once the plugin's watches stand.
    assert!(
        opened.iter().any(|(kind, labels)| kind == "PodSet"
            && labels.as_deref() == Some("reconciler-host.io/shard in (00c)")),
        "the arriving bucket was not listed: {opened:?}"
    );
}
