//! Failover on a real API server: two replicas of `reconciler-host run`
//! with leader election, one killed with SIGKILL; and a host killed in the
//! middle of a burst of PodSets, then started again. Both with the compiled
//! podset plugin, both judged by what the cluster holds afterwards.
//!
//! Skipped (passing, with a SKIPPED line) unless `RECONCILER_E2E=1` and
//! `KUBECONFIG` are set:
//!
//! ```text
//! scripts/build-plugins
//! eval "$(../shared/kube/kube up)"
//! RECONCILER_E2E=1 cargo test -p reconciler-tests --test real_cluster_failover -- --nocapture
//! ```
//!
//! Each test runs in a namespace of its own (its Lease too), so they run in
//! parallel, also beside other real-cluster suites on the same cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use futures::StreamExt as _;
use kube::api::{DynamicObject, ListParams, PostParams};
use reconciler_sdk::KindRef;
use reconciler_sdk::k8s_openapi::api::coordination::v1::Lease;
use reconciler_sdk::k8s_openapi::jiff::{SignedDuration, Timestamp};
use reconciler_tests::real_cluster::{
    HostProcess, Probe, RealCluster, SeenEvent, Suite, TEST_MANAGER, owner_references, uid_of,
};
use reconciler_tests::{example_plugin, root};
use serde_json::{Value, json};

const SUITE: Suite = Suite {
    name: "real_cluster_failover",
    host_binary: env!("CARGO_BIN_EXE_reconciler-host-under-test"),
};

/// The host's leader-election timing (controller-runtime's, see the
/// Replicas section of docs/cluster.md and host/src/process/leader_election.rs): a standby
/// takes over once the holder has not renewed for the lease duration, and
/// it looks every retry period.
const LEASE_DURATION: Duration = Duration::from_secs(15);
const RETRY_PERIOD: Duration = Duration::from_secs(2);
/// Reading the Lease, applying it, and the test's own polling, on a
/// loaded CI machine.
const TAKEOVER_MARGIN: Duration = Duration::from_secs(5);

/// Host start (the plugin compile is cached across tests), the first lists
/// and reconciles: seconds; the margin is for a loaded CI machine.
const HOST_TIMEOUT: Duration = Duration::from_secs(90);

/// The burst of the restart test.
const BURST: usize = 100;
/// PodSets created at once: a burst, not a flood of 100 connections. The
/// first half arrives while the host runs, the second after it is killed.
const CREATES_IN_FLIGHT: usize = 4;
/// Deployments that must exist before the host is killed: it is in the
/// middle of the burst, past its first reconciles.
const KILL_AFTER_DEPLOYMENTS: usize = 10;
/// A restarted host lists 100 PodSets and reconciles each; their pods
/// must be created and seen too (measured: about 7 s).
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(90);

fn podsets() -> KindRef {
    KindRef::new("example.com", "v1alpha1", "PodSet")
}

fn deployments() -> KindRef {
    KindRef::new("apps", "v1", "Deployment")
}

fn leases() -> KindRef {
    KindRef::new("coordination.k8s.io", "v1", "Lease")
}

fn podset_crd() -> PathBuf {
    root().join("crds/podset.yaml")
}

fn podset(name: &str, size: i64) -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
           "metadata": {"name": name}, "spec": {"size": size}})
}

/// Runs `test` with a list of the replicas it starts; if it fails, their
/// logs are printed (the harness prints only its own host's).
async fn printing_replica_logs(
    test: impl AsyncFnOnce(&mut Vec<HostProcess>) -> Result<()>,
) -> Result<()> {
    let mut replicas = Vec::new();
    let outcome = test(&mut replicas).await;
    if outcome.is_err() {
        for replica in &replicas {
            eprintln!("{}", replica.log_tail());
        }
    }
    outcome
}

/// The Lease as the API server holds it now.
async fn read_lease(cx: &RealCluster, name: &str) -> Result<Lease> {
    let lease = cx.must_get(&leases(), name).await?;
    serde_json::from_value(lease.clone()).with_context(|| format!("not a Lease: {lease}"))
}

fn holder(lease: &Lease) -> &str {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or("")
}

fn renewed_at(lease: &Lease) -> Result<Timestamp> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| t.0)
        .with_context(|| format!("a held Lease without renewTime: {lease:?}"))
}

fn acquired_at(lease: &Lease) -> Result<Timestamp> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.acquire_time.as_ref())
        .map(|t| t.0)
        .with_context(|| format!("a held Lease without acquireTime: {lease:?}"))
}

/// Which replicas recorded the Events about PodSet `name`.
fn instances(events: &[SeenEvent]) -> BTreeSet<&str> {
    events
        .iter()
        .map(|e| e.reporting_instance.as_str())
        .collect()
}

/// Waits until Deployment `name` asks for `replicas` and is controlled by
/// the PodSet `owner_uid`.
async fn wait_for_replicas(
    cx: &RealCluster,
    name: &str,
    owner_uid: &str,
    replicas: i64,
    timeout: Duration,
) -> Result<()> {
    cx.wait_for(
        &format!("Deployment {name} with {replicas} replicas, controlled by PodSet {name}"),
        timeout,
        async || {
            let Some(deployment) = cx.get(&deployments(), name).await? else {
                return Ok(Probe::Pending("not found".to_string()));
            };
            let owners = owner_references(&deployment)?;
            ensure!(
                owners
                    .iter()
                    .all(|o| o.uid == owner_uid && o.controller == Some(true))
                    && owners.len() == 1,
                "Deployment {name} has the owners {owners:?}, expected only PodSet {name} ({owner_uid})"
            );
            Ok(match deployment["spec"]["replicas"].as_i64() {
                Some(n) if n == replicas => Probe::Ready(()),
                other => Probe::Pending(format!("spec.replicas {other:?}")),
            })
        },
    )
    .await
}

/// Point 2b: of two replicas only the one holding the Lease installs,
/// watches and writes anything; killed with SIGKILL (no release), it is
/// replaced by the standby once the Lease expires, and the standby
/// converges a change made while nobody led.
#[test]
fn only_the_leader_writes_and_the_standby_takes_over_after_kill_9() {
    SUITE.run(
        "only_the_leader_writes_and_the_standby_takes_over_after_kill_9",
        async |cx| {
            printing_replica_logs(async |replicas| leader_election(cx, replicas).await).await
        },
    );
}

async fn leader_election(cx: &mut RealCluster, replicas: &mut Vec<HostProcess>) -> Result<()> {
    const LEASE: &str = "podset-failover";
    cx.install_crds(&podset_crd()).await?;
    let ns = cx.namespace.clone();
    let lease = format!("{ns}/{LEASE}");
    let args = [
        "--leader-election",
        "--leader-election-namespace",
        &ns,
        "--leader-election-id",
        LEASE,
    ];
    let plugins = [example_plugin("podset")];

    replicas.push(cx.start_replica("replica-a", &plugins, &args)?);
    let leading = format!("leading: lease {lease} is held by this process (replica-a_");
    cx.wait_for_log_of(&replicas[0], &[&leading], HOST_TIMEOUT)
        .await?;
    replicas.push(cx.start_replica("replica-b", &plugins, &args)?);
    let waiting = format!("waiting for leadership of lease {lease} held by replica-a_");
    cx.wait_for_log_of(&replicas[1], &[&waiting], HOST_TIMEOUT)
        .await?;
    let standing_by = Instant::now();
    let (a, b) = (&replicas[0], &replicas[1]);

    let web = cx.create(podset("web", 2)).await?;
    let web_uid = uid_of(&web)?;
    wait_for_replicas(cx, "web", &web_uid, 2, HOST_TIMEOUT).await?;
    let created = format!("podset PodSet {ns}/web: created Deployment {ns}/web");
    cx.wait_for_log_of(a, &[&created], HOST_TIMEOUT).await?;
    let status = cx
        .wait_for(
            "PodSet web's status to list its 2 pods",
            HOST_TIMEOUT,
            async || {
                let found = cx.must_get(&podsets(), "web").await?;
                let names = found["status"]["podNames"].clone();
                Ok(match names.as_array() {
                    Some(listed) if listed.len() == 2 => Probe::Ready(names),
                    _ => Probe::Pending(format!("status {}", found["status"])),
                })
            },
        )
        .await?;
    cx.step(format!(
        "replica-a converged PodSet web: Deployment of 2, status {status}"
    ));

    // Only the leader wrote: the Lease names it, every Event came from it,
    // and the standby's log shows it never loaded the plugin, let alone
    // reconciled, though it stood by through all of the above and read
    // the Lease at least twice.
    tokio::time::sleep((RETRY_PERIOD * 2).saturating_sub(standing_by.elapsed())).await;
    let held = read_lease(cx, LEASE).await?;
    ensure!(
        holder(&held).starts_with("replica-a_"),
        "Lease {lease} is held by {:?}, expected replica-a",
        holder(&held)
    );
    let events = cx.events_about("PodSet", "web").await?;
    ensure!(
        events.iter().any(|e| e.reason == "Created"),
        "no Created Event about PodSet web: {events:?}"
    );
    ensure!(
        instances(&events) == BTreeSet::from(["replica-a"]),
        "Events about PodSet web came from {:?}, expected only the leader replica-a: {events:?}",
        instances(&events)
    );
    for standby_wrote in ["loaded plugin", "podset PodSet", "installed", "leading:"] {
        let lines = b.log_lines_with(&[standby_wrote]);
        ensure!(
            lines.is_empty(),
            "the standby replica-b logged {lines:?} while replica-a led"
        );
    }

    // SIGKILL: no draining, no release of the Lease. Its last renewal is
    // what the standby must wait out.
    a.sigkill()?;
    let killed = Instant::now();
    cx.step("killed replica-a with SIGKILL");
    cx.merge_patch(&podsets(), "web", json!({"spec": {"size": 3}}))
        .await?;
    cx.step("PodSet web: size 2 -> 3 while nobody leads");
    // SIGKILL leaves the Lease as it was: held by replica-a until it expires.
    let orphaned = read_lease(cx, LEASE).await?;
    ensure!(
        holder(&orphaned).starts_with("replica-a_"),
        "after replica-a was killed, Lease {lease} is held by {:?}, expected still replica-a \
         until it expires (a killed process releases nothing)",
        holder(&orphaned)
    );
    let last_renewal = renewed_at(&orphaned)?;

    let taking_over = format!("leading: lease {lease} is held by this process (replica-b_");
    let limit = LEASE_DURATION + RETRY_PERIOD + TAKEOVER_MARGIN;
    cx.wait_for_log_of(b, &[&taking_over], limit + TAKEOVER_MARGIN)
        .await?;
    let took = killed.elapsed();
    cx.step(format!(
        "replica-b took over {:.1} s after the kill",
        took.as_secs_f64()
    ));
    ensure!(
        took <= limit,
        "replica-b took over {:.1} s after replica-a was killed; expected within the lease \
         duration ({} s) and a retry period ({} s) of replica-a's last renewal, {} s with the margin",
        took.as_secs_f64(),
        LEASE_DURATION.as_secs(),
        RETRY_PERIOD.as_secs(),
        limit.as_secs()
    );
    let taken = read_lease(cx, LEASE).await?;
    ensure!(
        holder(&taken).starts_with("replica-b_"),
        "replica-b says it leads, but Lease {lease} is held by {:?}",
        holder(&taken)
    );
    // Not too early either: a live Lease is never taken.
    let waited = acquired_at(&taken)?.duration_since(last_renewal);
    ensure!(
        waited >= SignedDuration::try_from(LEASE_DURATION)?,
        "replica-b acquired Lease {lease} {waited:#} after replica-a's last renewal, \
         before it expired ({} s)",
        LEASE_DURATION.as_secs()
    );

    // The change made during the gap is converged by the new leader.
    wait_for_replicas(cx, "web", &web_uid, 3, HOST_TIMEOUT).await?;
    let scaled = format!("podset PodSet {ns}/web: updated Deployment {ns}/web");
    cx.wait_for_log_of(b, &[&scaled, "from 2 to 3 replicas"], HOST_TIMEOUT)
        .await?;
    let events = cx.events_about("PodSet", "web").await?;
    let scaled_by: Vec<&SeenEvent> = events
        .iter()
        .filter(|e| e.reason == "Scaled" && e.message.contains("from 2 to 3"))
        .collect();
    ensure!(
        !scaled_by.is_empty()
            && scaled_by
                .iter()
                .all(|e| e.reporting_instance == "replica-b"),
        "expected the Scaled Event (2 to 3) from replica-b, the new leader: {events:?}"
    );

    // A standby that became leader stops like any leader: drained, exit 0.
    replicas[1].stop().await?;
    cx.step("replica-b exited with code 0 after SIGTERM");
    Ok(())
}

/// Point 2f: a host killed with SIGKILL while a burst of PodSets arrives
/// (some Deployments created, some statuses written, the rest not), then
/// started again, converges all of them: one Deployment per PodSet with
/// exactly one controller reference to it, no other Deployment, and each
/// PodSet's status listing its pods.
#[test]
fn a_host_killed_in_a_burst_of_100_podsets_converges_after_a_restart() {
    SUITE.run(
        "a_host_killed_in_a_burst_of_100_podsets_converges_after_a_restart",
        async |cx| {
            printing_replica_logs(async |replicas| killed_in_a_burst(cx, replicas).await).await
        },
    );
}

fn burst_name(i: usize) -> String {
    format!("burst-{i:03}")
}

/// 0, 1 or 2 pods: empty, single and sorted lists in the statuses, and
/// about 100 pods in all, which the controller-manager creates in a few
/// seconds (measured: the restarted host converges in about 7 s).
fn burst_size(i: usize) -> i64 {
    (i % 3) as i64
}

async fn killed_in_a_burst(cx: &mut RealCluster, replicas: &mut Vec<HostProcess>) -> Result<()> {
    cx.install_crds(&podset_crd()).await?;
    let plugins = [example_plugin("podset")];
    replicas.push(cx.start_replica("first", &plugins, &[])?);
    let first = &replicas[0];
    cx.wait_for_log_of(first, &["loaded plugin podset"], HOST_TIMEOUT)
        .await?;

    let deployments_api = cx.api(&deployments()).await?;
    let started = Instant::now();
    // Straight through the API rather than `cx.create`, which would log
    // each of the hundred.
    let podsets_api = cx.api(&podsets()).await?;
    let post = PostParams {
        field_manager: Some(TEST_MANAGER.to_string()),
        ..PostParams::default()
    };
    let created_so_far = AtomicUsize::new(0);
    // The second half is created only once the host is dead, so work is
    // left however fast the host got through the first.
    let create = |range: std::ops::Range<usize>| {
        futures::stream::iter(range)
            .map(|i| {
                let (api, post, created_so_far) = (&podsets_api, &post, &created_so_far);
                async move {
                    let name = burst_name(i);
                    let body: DynamicObject = serde_json::from_value(podset(&name, burst_size(i)))?;
                    let created = api
                        .create(post, &body)
                        .await
                        .with_context(|| format!("creating PodSet {name}"))?;
                    created_so_far.fetch_add(1, Ordering::Relaxed);
                    Ok(created)
                }
            })
            .buffer_unordered(CREATES_IN_FLIGHT)
            .collect::<Vec<_>>()
    };
    let creates = create(0..BURST / 2);
    let killer = async {
        let seen = cx
            .wait_for(
                &format!("{KILL_AFTER_DEPLOYMENTS} Deployments of the burst"),
                HOST_TIMEOUT,
                async || {
                    first.ensure_running()?;
                    let listed = deployments_api
                        .list_metadata(&ListParams::default())
                        .await?;
                    Ok(match listed.items.len() {
                        n if n >= KILL_AFTER_DEPLOYMENTS.min(BURST / 2) => Probe::Ready(n),
                        n => Probe::Pending(format!("{n} Deployments")),
                    })
                },
            )
            .await?;
        first.sigkill()?;
        cx.step(format!(
            "killed the host with SIGKILL {:.1} s into the burst, having seen {seen} Deployments \
             with {} of {BURST} PodSets created",
            started.elapsed().as_secs_f64(),
            created_so_far.load(Ordering::Relaxed)
        ));
        Ok::<_, anyhow::Error>(())
    };
    let (mut created, killed) = tokio::join!(creates, killer);
    killed?;
    created.extend(create(BURST / 2..BURST).await);
    let created: Vec<DynamicObject> = created.into_iter().collect::<Result<_>>()?;
    cx.step(format!(
        "created {} PodSets in {:.1} s",
        created.len(),
        started.elapsed().as_secs_f64()
    ));

    // The point of the test: the host died in the middle, with work left.
    let left: BTreeMap<String, String> = deployments_api
        .list_metadata(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|d| Some((d.metadata.name?, d.metadata.uid?)))
        .collect();
    let with_status = count_with_status(cx).await?;
    cx.step(format!(
        "after the kill: {} Deployments, {with_status} PodSets with a status, of {BURST}",
        left.len()
    ));
    ensure!(
        left.len() < BURST,
        "the host created all {BURST} Deployments before it was killed: the test killed it too \
         late to show anything (raise BURST or lower KILL_AFTER_DEPLOYMENTS)"
    );

    cx.start_host(&plugins)?;
    let converged_in = Instant::now();
    cx.wait_for(
        &format!(
            "each of the {BURST} PodSets to have its one Deployment and a status listing its pods"
        ),
        CONVERGE_TIMEOUT,
        async || {
            Ok(
                match reconciler_tests::real_cluster::podset_convergence::problem(cx, BURST).await?
                {
                    Some(problem) => Probe::Pending(problem),
                    None => Probe::Ready(()),
                },
            )
        },
    )
    .await?;
    cx.step(format!(
        "the restarted host converged the burst in {:.1} s",
        converged_in.elapsed().as_secs_f64()
    ));
    // What the killed host created was taken over, not replaced.
    for (name, uid) in &left {
        let now = uid_of(&cx.must_get(&deployments(), name).await?)?;
        ensure!(
            now == *uid,
            "Deployment {name}, created before the kill, was replaced after the restart \
             (uid {uid} is now {now})"
        );
    }
    Ok(())
}

async fn count_with_status(cx: &RealCluster) -> Result<usize> {
    let listed = cx
        .api(&podsets())
        .await?
        .list(&ListParams::default())
        .await?;
    Ok(listed
        .items
        .iter()
        .filter(|p| p.data["status"]["podNames"].is_array())
        .count())
}
