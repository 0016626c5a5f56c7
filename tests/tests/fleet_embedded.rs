//! The fleet on embedded members: each member reconciles its own objects
//! with its own engine, `--plugin-clusters` keeps a plugin to the members
//! its selector admits, a plugin added or removed reaches every member, and
//! a disengaged member stops, and a write the member does not answer has
//! it probed at once. No API server is involved: what a real cluster adds
//! (sources, a killed API server) is in multi_cluster_real_cluster.rs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::cluster::{BackendError, ClusterBackend, ObjectKey, RealClock};
use reconciler_host::fleet::{Fleet, Hooks, Identity, PluginClusters, Probe, Settings};
use reconciler_host::plugin::plugin_host::PluginHost;
use reconciler_sdk::KindRef;
use reconciler_tests::intercepted::{Call, Hook, Intercepted};
use reconciler_tests::{example_plugin, sandbox};
use serde_json::json;

fn member(name: &str, env: &str) -> Identity {
    Identity {
        name: name.into(),
        labels: BTreeMap::from([
            ("reconciler-host.io/cluster".to_string(), name.to_string()),
            ("env".to_string(), env.to_string()),
        ]),
        source: "test".into(),
        server: format!("embedded {name}"),
    }
}

fn cluster_with_podset(name: &str, size: i64) -> Arc<EmbeddedCluster> {
    let cluster = Arc::new(EmbeddedCluster::new(Arc::new(RealClock)));
    cluster
        .apply_as_user(
            json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"size": size}}),
        )
        .unwrap();
    cluster
}

fn deployment(name: &str) -> ObjectKey {
    ObjectKey::new(
        KindRef::new("apps", "v1", "Deployment"),
        Some("default"),
        name,
    )
}

async fn replicas(cluster: &EmbeddedCluster, name: &str) -> Option<i64> {
    cluster
        .get(&deployment(name))
        .await
        .unwrap()
        .and_then(|d| d["spec"]["replicas"].as_i64())
}

/// Waits up to 20 s for `cluster`'s Deployment `name` to have `want`
/// replicas (`None`: to be absent still after 3 s, long enough for a
/// reconcile that was going to happen).
async fn eventually(cluster: &EmbeddedCluster, name: &str, want: Option<i64>) {
    let tries = if want.is_some() { 200 } else { 30 };
    for _ in 0..tries {
        if want.is_some() && replicas(cluster, name).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(replicas(cluster, name).await, want, "Deployment {name}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_member_reconciles_its_own_objects_where_its_selector_admits_the_plugin() {
    let selection = PluginClusters::parse(&["podset:env=prod".into()]).unwrap();
    let fleet = Fleet::new(selection, Settings::default());
    let east = cluster_with_podset("east-set", 2);
    let west = cluster_with_podset("west-set", 3);
    let north = cluster_with_podset("north-set", 1);
    fleet.engage(
        member("east", "prod"),
        east.clone(),
        Hooks::default(),
        Duration::ZERO,
    );
    fleet.engage(
        member("west", "dev"),
        west.clone(),
        Hooks::default(),
        Duration::ZERO,
    );
    fleet.engage(
        member("north", "prod"),
        north.clone(),
        Hooks::default(),
        Duration::ZERO,
    );

    let podset = Arc::new(sandbox().load(&example_plugin("podset")).unwrap());
    fleet.add_plugin(podset).await.unwrap();

    eventually(&east, "east-set", Some(2)).await;
    eventually(&north, "north-set", Some(1)).await;
    // west is env=dev: podset does not run there.
    eventually(&west, "west-set", None).await;
    // Each plugin call was told its member: podset names it in the status.
    for (cluster, name, member) in [(&east, "east-set", "east"), (&north, "north-set", "north")] {
        let podset = cluster
            .get(&ObjectKey::new(
                KindRef::new("example.com", "v1alpha1", "PodSet"),
                Some("default"),
                name,
            ))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(podset["status"]["cluster"], member, "{podset}");
    }
    // Nothing crossed clusters.
    assert_eq!(replicas(&east, "north-set").await, None);
    assert_eq!(replicas(&north, "east-set").await, None);

    let statuses = fleet.statuses();
    let east_status = statuses.iter().find(|s| s.name == "east").unwrap();
    assert_eq!(east_status.plugins_running, ["podset"]);
    assert!(
        east_status.ready && east_status.objects_cached > 0,
        "{east_status:?}"
    );
    let west_status = statuses.iter().find(|s| s.name == "west").unwrap();
    assert!(west_status.plugins_running.is_empty(), "{west_status:?}");

    // A disengaged member is served no more: a new PodSet there gets nothing.
    assert!(fleet.disengage("north", Duration::from_secs(5)).await);
    assert!(fleet.engine("north").is_none());
    north
        .apply_as_user(
            json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
            "metadata": {"name": "late", "namespace": "default"}, "spec": {"size": 1}}),
        )
        .unwrap();
    // Meanwhile east still serves, and a plugin removed stops everywhere.
    east.apply_as_user(
        json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "east-set", "namespace": "default"}, "spec": {"size": 4}}),
    )
    .unwrap();
    eventually(&east, "east-set", Some(4)).await;
    eventually(&north, "late", None).await;

    assert!(fleet.remove_plugin("podset").is_some());
    for _ in 0..100 {
        if fleet.engine("east").unwrap().plugins().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(fleet.engine("east").unwrap().plugins().is_empty());
    fleet.stop_all(Duration::from_secs(5)).await;
    assert!(fleet.statuses().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_cluster_does_not_answer_has_it_probed_at_once() {
    let down = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // While `down`, requests fail as those to an API server that stopped
    // answering do; the watches already open stay.
    let flaky = {
        let down = down.clone();
        Arc::new(Intercepted::new(
            EmbeddedCluster::new(Arc::new(RealClock)),
            move |call: Call<'_>| match call.is_request() && down.load(Ordering::SeqCst) {
                true => Err(BackendError::Transient("connection refused".into())),
                false => Ok(()),
            },
        ))
    };
    let probes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let probe: Probe = {
        let (down, probes) = (down.clone(), probes.clone());
        Arc::new(move || {
            probes.fetch_add(1, Ordering::SeqCst);
            let answer = match down.load(Ordering::SeqCst) {
                true => Err("connection refused".to_string()),
                false => Ok(()),
            };
            Box::pin(async move { answer })
        })
    };
    // The periodic probe is an hour away: only a failed request can ask.
    let fleet = Fleet::new(
        PluginClusters::default(),
        Settings {
            probe_every: Duration::from_secs(3600),
            ..Settings::default()
        },
    );
    fleet.engage(
        member("east", "prod"),
        flaky.clone(),
        Hooks {
            probe: Some(probe),
            announce: None,
        },
        Duration::ZERO,
    );
    let podset = Arc::new(sandbox().load(&example_plugin("podset")).unwrap());
    fleet.add_plugin(podset).await.unwrap();
    assert!(fleet.wait_aligned("east", Duration::from_secs(20)).await);
    let first = probes.load(Ordering::SeqCst);

    down.store(true, Ordering::SeqCst);
    flaky
        .cluster
        .apply_as_user(
            json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
            "metadata": {"name": "web", "namespace": "default"}, "spec": {"size": 1}}),
        )
        .unwrap();
    let mut status = None;
    for _ in 0..100 {
        let east = fleet
            .statuses()
            .into_iter()
            .find(|s| s.name == "east")
            .unwrap();
        if !east.ready {
            status = Some(east);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = status.expect("the member was not found unreachable within 5 s");
    assert!(
        status
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("unreachable: connection refused")),
        "{status:?}"
    );
    assert!(probes.load(Ordering::SeqCst) > first);
    fleet.stop_all(Duration::from_secs(5)).await;
}

fn podset(name: &str, size: i64) -> serde_json::Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"size": size}})
}

/// Polls the fleet's view of member `name` until `done` says so, up to 20 s.
async fn status_until(
    fleet: &Fleet<EmbeddedCluster>,
    name: &str,
    what: &str,
    done: impl Fn(&reconciler_host::fleet::MemberStatus) -> bool,
) -> reconciler_host::fleet::MemberStatus {
    let mut last = None;
    for _ in 0..400 {
        let status = fleet.statuses().into_iter().find(|s| s.name == name);
        if let Some(status) = &status
            && done(status)
        {
            return status.clone();
        }
        last = status;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("member {name} did not come to {what} within 20 s: {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_past_its_cache_budget_pauses_while_the_others_serve() {
    // Budget: 12 objects a member. `big` lists 20 PodSets at once; `grows`
    // starts within it and passes it by watch events; `small` stays within.
    let fleet = Fleet::new(
        PluginClusters::default(),
        Settings {
            cache_budget: Some(reconciler_host::fleet::cache_budget::CacheBudget::given(12)),
            // Pauses of a second, so the test sees one end.
            max_backoff: Duration::from_secs(1),
            ..Settings::default()
        },
    );
    let big = Arc::new(EmbeddedCluster::new(Arc::new(RealClock)));
    for i in 0..20 {
        big.apply_as_user(podset(&format!("set-{i}"), 0)).unwrap();
    }
    let grows = cluster_with_podset("grows-set", 1);
    let small = cluster_with_podset("small-set", 2);
    let said: Arc<std::sync::Mutex<Vec<(String, String)>>> = Arc::default();
    for (name, cluster) in [("big", &big), ("grows", &grows), ("small", &small)] {
        let said = said.clone();
        let announce: reconciler_host::fleet::Announce = Arc::new(move |_, reason, note| {
            said.lock()
                .unwrap()
                .push((name.to_string(), format!("{reason}: {note}")));
        });
        let hooks = Hooks {
            probe: None,
            announce: Some(announce),
        };
        fleet.engage(member(name, "prod"), cluster.clone(), hooks, Duration::ZERO);
    }
    let podset_plugin = Arc::new(sandbox().load(&example_plugin("podset")).unwrap());
    fleet.add_plugin(podset_plugin).await.unwrap();

    eventually(&small, "small-set", Some(2)).await;
    eventually(&grows, "grows-set", Some(1)).await;
    let paused = status_until(&fleet, "big", "a pause", |s| s.paused.is_some()).await;
    assert!(!paused.ready, "{paused:?}");
    assert!(
        paused
            .paused
            .as_deref()
            .is_some_and(|p| p.contains("--member-cache-max-objects (12)")),
        "{paused:?}"
    );
    // Nothing of big is held: its first list was given up, not cached.
    assert_eq!(paused.objects_cached, 0, "{paused:?}");

    // `grows` passes the budget by its watch: paused, its cache freed.
    for i in 0..20 {
        grows
            .apply_as_user(podset(&format!("more-{i}"), 0))
            .unwrap();
    }
    let paused = status_until(&fleet, "grows", "a pause", |s| s.paused.is_some()).await;
    assert!(paused.objects_cached <= 12, "{paused:?}");
    // Meanwhile small keeps serving.
    small.apply_as_user(podset("small-set", 3)).unwrap();
    eventually(&small, "small-set", Some(3)).await;
    assert!(
        fleet
            .statuses()
            .iter()
            .find(|s| s.name == "small")
            .is_some_and(|s| s.ready && s.paused.is_none())
    );

    // Back within its budget, `grows` serves again after its pause.
    for i in 0..20 {
        grows
            .delete_as_user(&ObjectKey::new(
                KindRef::new("example.com", "v1alpha1", "PodSet"),
                Some("default"),
                &format!("more-{i}"),
            ))
            .unwrap();
    }
    grows.apply_as_user(podset("grows-set", 2)).unwrap();
    eventually(&grows, "grows-set", Some(2)).await;
    status_until(&fleet, "grows", "serving again", |s| {
        s.paused.is_none() && s.ready
    })
    .await;
    let said = said.lock().unwrap().clone();
    for (member, reason) in [("big", "Paused"), ("grows", "Paused"), ("grows", "Resumed")] {
        assert!(
            said.iter()
                .any(|(m, note)| m == member && note.starts_with(reason)),
            "no {reason} said of {member}: {said:?}"
        );
    }
    assert!(!said.iter().any(|(m, _)| m == "small"), "{said:?}");
    fleet.stop_all(Duration::from_secs(5)).await;
}

/// A backend over `cluster` whose writes wait while `held` reads true, and
/// a count of the writes that got past that wait.
fn held_backend(
    cluster: &Arc<EmbeddedCluster>,
    held: tokio::sync::watch::Receiver<bool>,
) -> (Arc<Intercepted<Hook>>, Arc<AtomicUsize>) {
    let writes = Arc::new(AtomicUsize::new(0));
    let counted = writes.clone();
    let hook: Hook = Box::new(move |call| {
        if call.is_write() {
            counted.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    });
    let backend = Intercepted::sharing(cluster.clone(), hook).holding(held);
    (Arc::new(backend), writes)
}

/// Engages member east on `backend` with podset, and waits up to 20 s
/// until a reconcile is in flight.
async fn serve_until_in_flight(fleet: &Fleet<Intercepted<Hook>>, backend: Arc<Intercepted<Hook>>) {
    fleet.engage(
        member("east", "prod"),
        backend,
        Hooks::default(),
        Duration::ZERO,
    );
    let podset = Arc::new(sandbox().load(&example_plugin("podset")).unwrap());
    fleet.add_plugin(podset).await.unwrap();
    for _ in 0..400 {
        if fleet.in_flight() > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no reconcile started");
}

/// A member whose kubeconfig changed is served by a new engine; the old
/// one's reconcile, stuck in a write, is drained, then abandoned, and only
/// then does the new engine reconcile: the two never write the same object
/// at once. The abandoned write never lands, even once it could.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_engaged_member_reconciles_only_once_the_old_engines_reconciles_are_over() {
    let cluster = cluster_with_podset("set", 2);
    let (hold, held) = tokio::sync::watch::channel(true);
    let (old, old_writes) = held_backend(&cluster, held);
    let (_never, open) = tokio::sync::watch::channel(false);
    let (new, new_writes) = held_backend(&cluster, open);
    let fleet = Fleet::new(PluginClusters::default(), Settings::default());
    serve_until_in_flight(&fleet, old).await;

    let mut rotated = member("east", "prod");
    rotated.server = "embedded east, rotated".into();
    let drain = Duration::from_secs(2);
    let replaced_at = std::time::Instant::now();
    fleet.engage(rotated, new, Hooks::default(), drain);
    // While the old engine drains, its reconcile still counts, and the new
    // engine writes nothing.
    tokio::time::sleep(drain / 2).await;
    assert_eq!(fleet.in_flight(), 1);
    assert_eq!(new_writes.load(Ordering::SeqCst), 0);
    // Past the drain the old reconcile is abandoned; the new engine serves.
    eventually(&cluster, "set", Some(2)).await;
    assert!(
        replaced_at.elapsed() >= drain,
        "{:?}",
        replaced_at.elapsed()
    );
    assert!(new_writes.load(Ordering::SeqCst) > 0);
    // The abandoned write, let through now, is not made: it was stopped.
    hold.send_replace(false);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(old_writes.load(Ordering::SeqCst), 0);
    fleet.stop_all(Duration::from_secs(5)).await;
}

/// Stopping every member: a reconcile stuck in a write still counts as in
/// flight while it drains, though its member has left the fleet; past the
/// bound it is abandoned, counted, and stopped, so nothing it would have
/// written lands after the stop returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_counts_the_draining_and_stops_what_it_abandons() {
    let cluster = cluster_with_podset("set", 2);
    let (hold, held) = tokio::sync::watch::channel(true);
    let (backend, writes) = held_backend(&cluster, held);
    let fleet = Arc::new(Fleet::new(PluginClusters::default(), Settings::default()));
    serve_until_in_flight(&fleet, backend).await;

    let stopping = tokio::spawn({
        let fleet = fleet.clone();
        async move { fleet.stop_all(Duration::from_secs(1)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(fleet.statuses().is_empty(), "the member left the fleet");
    assert_eq!(fleet.in_flight(), 1, "its reconcile still counts");
    let abandoned = stopping.await.unwrap();
    assert_eq!(abandoned, 1);
    assert_eq!(fleet.in_flight(), 0);
    hold.send_replace(false);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(writes.load(Ordering::SeqCst), 0);
    assert_eq!(replicas(&cluster, "set").await, None);
}
