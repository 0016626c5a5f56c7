//! `run --sharding` on a real API server, end to end: replicas of the host,
//! each with credentials of its own, share the PodSets of one namespace.
//!
//! 1. Three replicas converge 300 PodSets, each reconciling a share.
//! 2. The ring goes 3 -> 2 (SIGTERM) -> 4 (two new replicas) while PodSets
//!    are being created throughout; none is lost or doubled.
//! 3. One replica is killed with SIGKILL in the middle of a burst: the
//!    others take its keys once its Lease expires, and the burst converges.
//! 4. The API server's audit log (one user per replica) shows that no
//!    object was written by two replicas in overlapping windows: within
//!    each stretch between two of the test's changes of the ring, the
//!    writes of one object by different replicas never interleave.
//!
//! It needs an audit log, so it starts a control plane of its own
//! (`../shared/kube`); skipped (passing, with a SKIPPED line) unless
//! `RECONCILER_E2E=1` and that script are there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use futures::StreamExt as _;
use kube::api::{DynamicObject, ListParams, PostParams};
use reconciler_sdk::KindRef;
use reconciler_sdk::k8s_openapi::jiff::Timestamp;
use reconciler_tests::real_cluster::podset_convergence::{deployments, podsets, problem};
use reconciler_tests::real_cluster::{
    HostProcess, Probe, RealCluster, SeverableLink, Suite, TEST_MANAGER, audit_log_flags,
    kubeconfig,
};
use reconciler_tests::{example_plugin, root};
use serde_json::{Value, json};

const SUITE: Suite = Suite {
    name: "sharding_hosts_real_cluster",
    host_binary: env!("CARGO_BIN_EXE_reconciler-host-under-test"),
};

/// The ring's name, as `--sharding-id`.
const RING: &str = "podsets";
/// The host's Lease timing (run --sharding uses leader election's): a
/// replica killed without a word leaves the ring when its Lease expires.
const LEASE_DURATION: Duration = Duration::from_secs(15);
const RETRY_PERIOD: Duration = Duration::from_secs(2);
/// Reading the Leases, settling, and the test's own polling, on a loaded
/// CI machine.
const MARGIN: Duration = Duration::from_secs(10);
/// Host start (compiles are cached across tests), first lists, and
/// hundreds of reconciles and pods: the margin is for a loaded machine.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(240);
const CREATES_IN_FLIGHT: usize = 8;

fn podset_crd() -> PathBuf {
    root().join("crds/podset.yaml")
}

fn name_of(i: usize) -> String {
    format!("ps-{i:03}")
}

/// The audit policy: every write of the replicas (users `replica-*`) to
/// Deployments and PodSets, at Metadata level; nothing else.
fn audit_flags(dir: &Path, replicas: &[&str]) -> Result<String> {
    let users = replicas.join(", ");
    audit_log_flags(
        dir,
        &format!(
            "- level: Metadata\n  users: [{users}]\n  verbs: [create, update, patch, delete]\n  resources:\n  \
             - group: apps\n    resources: [deployments]\n  \
             - group: example.com\n    resources: [podsets, podsets/status]\n"
        ),
    )
}

/// One write of one object by one replica, from the audit log.
#[derive(Debug)]
struct Write {
    at: Timestamp,
    user: String,
    object: String,
    /// The API server's answer: 2xx landed, 403 was refused (the fence).
    code: u64,
}

fn audited_writes(dir: &Path) -> Result<Vec<Write>> {
    let text = std::fs::read_to_string(dir.join("audit.log")).context("reading the audit log")?;
    let mut writes = Vec::new();
    for line in text.lines() {
        let entry: Value = serde_json::from_str(line)?;
        let reference = &entry["objectRef"];
        let Some(name) = reference["name"].as_str() else {
            continue;
        };
        writes.push(Write {
            at: entry["requestReceivedTimestamp"]
                .as_str()
                .context("an audit entry without requestReceivedTimestamp")?
                .parse()?,
            user: entry["user"]["username"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            // The PodSet and its status are one object to its writer.
            object: format!(
                "{}/{}/{}",
                reference["resource"].as_str().unwrap_or_default(),
                reference["namespace"].as_str().unwrap_or_default(),
                name
            ),
            code: entry["responseStatus"]["code"].as_u64().unwrap_or_default(),
        });
    }
    Ok(writes)
}

/// Objects whose writes by two replicas interleave within one stretch
/// between `boundaries`; and how many objects were written by more than
/// one replica in all (so the check is seen not to be vacuous).
fn overlapping_writers(writes: &[Write], boundaries: &[Timestamp]) -> (Vec<String>, usize) {
    // object -> stretch -> replica -> (first, last)
    type Windows = BTreeMap<usize, BTreeMap<String, (Timestamp, Timestamp)>>;
    let mut objects: BTreeMap<&str, Windows> = BTreeMap::new();
    let mut writers: BTreeMap<&str, std::collections::BTreeSet<&str>> = BTreeMap::new();
    for write in writes {
        let stretch = boundaries.iter().filter(|b| **b <= write.at).count();
        let window = objects
            .entry(&write.object)
            .or_default()
            .entry(stretch)
            .or_default()
            .entry(write.user.clone())
            .or_insert((write.at, write.at));
        window.0 = window.0.min(write.at);
        window.1 = window.1.max(write.at);
        writers
            .entry(&write.object)
            .or_default()
            .insert(&write.user);
    }
    let mut overlaps = Vec::new();
    for (object, stretches) in &objects {
        for (stretch, by_user) in stretches {
            let mut windows: Vec<(&String, &(Timestamp, Timestamp))> = by_user.iter().collect();
            windows.sort_by_key(|(_, (first, _))| *first);
            for pair in windows.windows(2) {
                let ((a, (_, a_last)), (b, (b_first, _))) = (pair[0], pair[1]);
                if b_first <= a_last {
                    overlaps.push(format!(
                        "{object} in stretch {stretch}: {a} wrote until {a_last}, {b} from {b_first}"
                    ));
                }
            }
        }
    }
    let shared = writers.values().filter(|users| users.len() > 1).count();
    (overlaps, shared)
}

/// Runs `body` on a control plane of its own with the replicas it starts;
/// on failure, each replica's last log lines are printed.
fn with_replicas(
    test: &str,
    env: &[(&'static str, &str)],
    body: impl AsyncFnOnce(&mut RealCluster, &mut Vec<HostProcess>) -> Result<()>,
) {
    SUITE.run_on_own_control_plane(test, env, async |cx| {
        let mut replicas: Vec<HostProcess> = Vec::new();
        let outcome = body(cx, &mut replicas).await;
        if let Err(e) = &outcome {
            // What each replica said of the PodSets the failure names,
            // so a rare one can be followed from its log.
            let failure = format!("{e:#}");
            let named: std::collections::BTreeSet<&str> = failure
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .filter(|w| w.starts_with("ps-"))
                .collect();
            for replica in &replicas {
                for name in &named {
                    let about = replica.log_lines_with(&[&format!("/{name}")]);
                    eprintln!(
                        "--- replica pid {}: {} line(s) about {name}, the last 20:",
                        replica.pid(),
                        about.len()
                    );
                    for line in about.iter().rev().take(20).rev() {
                        eprintln!("{line}");
                    }
                }
                eprintln!("{}", replica.log_tail());
            }
        }
        outcome
    });
}

/// Starts replica `name` with credentials of its own (user `name`).
fn start(cx: &RealCluster, name: &str) -> Result<HostProcess> {
    start_in_group(cx, name, "system:masters")
}

/// Starts replica `name` as user `name` in `group`.
fn start_in_group(cx: &RealCluster, name: &str, group: &str) -> Result<HostProcess> {
    start_as(cx, name, group, &[])
}

/// Starts replica `name` as user `name` in `group`, with `extra` arguments.
fn start_as(cx: &RealCluster, name: &str, group: &str, extra: &[&str]) -> Result<HostProcess> {
    let kubeconfig = cx.workdir().join(format!("{name}.kubeconfig"));
    std::fs::write(
        &kubeconfig,
        kubeconfig::minted(cx.own_control_plane()?, name, group)?,
    )?;
    let ns = cx.namespace.clone();
    cx.start_replica_with_env(
        name,
        &[example_plugin("podset")],
        &[
            "--sharding",
            "--sharding-namespace",
            &ns,
            "--sharding-id",
            RING,
            // Port 0: the replicas of a test, and tests in parallel, never
            // fight over one. The address bound is in the log.
            "--metrics-listen",
            "127.0.0.1:0",
            "--metrics-insecure",
        ]
        .iter()
        .chain(extra)
        .copied()
        .collect::<Vec<_>>(),
        &[("KUBECONFIG", kubeconfig.to_str().context("a UTF-8 path")?)],
    )
}

/// How many objects of `kind` `replica`'s cache holds, from its /metrics.
async fn cached(replica: &HostProcess, kind: &str) -> Result<u64> {
    let marker = "serving /metrics and /plugins on http://";
    let line = replica
        .log_lines_with(&[marker])
        .into_iter()
        .next()
        .context("the replica has not said where it serves /metrics")?;
    let address = line
        .split(marker)
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .context("no address after the marker")?
        .to_string();
    let response = reconciler_tests::metrics_text(&address)?;
    let series = format!("kind=\"{kind}\"}}");
    Ok(response
        .lines()
        .filter(|l| l.starts_with("reconciler_host_cache_objects{") && l.contains(&series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum())
}

/// Point 2's server-side selection: once every PodSet carries its shard
/// label, each replica's cache holds its own PodSets and Deployments
/// alone (the API server no longer sends it the others'), and together
/// they hold each exactly once.
async fn each_caches_its_share(
    cx: &RealCluster,
    replicas: &[HostProcess],
    total: u64,
) -> Result<()> {
    cx.wait_for(
        "each replica caching only its share",
        CONVERGE_TIMEOUT,
        async || {
            let mut shares = Vec::new();
            for replica in replicas {
                shares.push((
                    cached(replica, "PodSet").await?,
                    cached(replica, "Deployment").await?,
                ));
            }
            let podsets: u64 = shares.iter().map(|s| s.0).sum();
            let deployments: u64 = shares.iter().map(|s| s.1).sum();
            let most = shares.iter().map(|s| s.0.max(s.1)).max().unwrap_or(0);
            Ok(
                if podsets == total && deployments == total && most <= total / 2 {
                    Probe::Ready(shares)
                } else {
                    Probe::Pending(format!(
                        "(PodSets, Deployments) cached per replica: {shares:?}"
                    ))
                },
            )
        },
    )
    .await
    .map(|shares| {
        cx.step(format!(
            "(PodSets, Deployments) cached per replica: {shares:?}"
        ))
    })
}

fn settled_line(n: usize) -> String {
    format!("every one of the {n} replica(s) of shard ring {RING} settled")
}

/// How many times `replica` has said every one of `n` replicas settled.
fn settles(replica: &HostProcess, n: usize) -> usize {
    replica.log_lines_with(&[&settled_line(n)]).len()
}

/// Waits until each of `replicas` says every one of `n` replicas settled
/// once more than it had said so before (`before`, by replica).
async fn settled_over(
    cx: &RealCluster,
    replicas: &[&HostProcess],
    before: &[usize],
    n: usize,
) -> Result<()> {
    for (replica, before) in replicas.iter().zip(before) {
        cx.wait_for(
            &format!(
                "replica (pid {}) to see {n} replicas settled",
                replica.pid()
            ),
            CONVERGE_TIMEOUT,
            async || {
                replica.ensure_running()?;
                let seen = settles(replica, n);
                Ok(if seen > *before {
                    Probe::Ready(())
                } else {
                    Probe::Pending(format!("{seen} such lines, {before} before"))
                })
            },
        )
        .await?;
    }
    Ok(())
}

/// Creates PodSets `range` (size 1), a few at a time.
async fn create(cx: &RealCluster, range: std::ops::Range<usize>) -> Result<()> {
    let api = cx.api(&podsets()).await?;
    let post = PostParams {
        field_manager: Some(TEST_MANAGER.to_string()),
        ..PostParams::default()
    };
    let results: Vec<Result<()>> = futures::stream::iter(range)
        .map(|i| {
            let (api, post) = (&api, &post);
            async move {
                let name = name_of(i);
                let body: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "example.com/v1alpha1", "kind": "PodSet",
                    "metadata": {"name": name}, "spec": {"size": 1}}))?;
                api.create(post, &body)
                    .await
                    .with_context(|| format!("creating PodSet {name}"))?;
                Ok(())
            }
        })
        .buffer_unordered(CREATES_IN_FLIGHT)
        .collect()
        .await;
    results.into_iter().collect()
}

async fn converged(cx: &RealCluster, expected: usize) -> Result<()> {
    cx.wait_for(
        &format!("each of the {expected} PodSets to have its one Deployment and its pods listed"),
        CONVERGE_TIMEOUT,
        async || {
            Ok(match problem(cx, expected).await? {
                Some(problem) => Probe::Pending(problem),
                None => Probe::Ready(()),
            })
        },
    )
    .await
}

/// Deployments each replica created (wrote first), from the audit log.
fn created_by(writes: &[Write]) -> BTreeMap<String, usize> {
    let mut first_writer: BTreeMap<&str, &str> = BTreeMap::new();
    for write in writes
        .iter()
        .filter(|w| w.object.starts_with("deployments/"))
    {
        first_writer.entry(&write.object).or_insert(&write.user);
    }
    let mut created = BTreeMap::new();
    for user in first_writer.values() {
        *created.entry(user.to_string()).or_default() += 1;
    }
    created
}

#[test]
fn replicas_share_the_podsets_and_no_object_ever_has_two_writers() {
    let audit = tempfile::tempdir().expect("a temporary directory");
    let users = [
        "replica-a",
        "replica-b",
        "replica-c",
        "replica-d",
        "replica-e",
    ];
    let flags = audit_flags(audit.path(), &users).expect("the audit policy");
    with_replicas(
        "replicas_share_the_podsets_and_no_object_ever_has_two_writers",
        &[("APISERVER_EXTRA", flags.as_str())],
        async |cx, replicas| sharded(cx, audit.path(), replicas).await,
    );
}

async fn sharded(
    cx: &mut RealCluster,
    audit: &Path,
    replicas: &mut Vec<HostProcess>,
) -> Result<()> {
    cx.install_crds(&podset_crd()).await?;
    let mut boundaries = Vec::new();

    cx.step("1. three replicas, 300 PodSets");
    for name in ["replica-a", "replica-b", "replica-c"] {
        replicas.push(start(cx, name)?);
    }
    settled_over(cx, &replicas.iter().collect::<Vec<_>>(), &[0, 0, 0], 3).await?;
    let started = Instant::now();
    create(cx, 0..300).await?;
    converged(cx, 300).await?;
    cx.step(format!(
        "three replicas converged 300 PodSets in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    each_caches_its_share(cx, replicas, 300).await?;
    let shares = created_by(&audited_writes(audit)?);
    cx.step(format!("Deployments created per replica: {shares:?}"));
    for name in ["replica-a", "replica-b", "replica-c"] {
        let share = shares.get(name).copied().unwrap_or(0);
        // A third each by the hash: 100 +- 8 (one standard deviation).
        ensure!(
            (50..=150).contains(&share),
            "{name} created {share} of the 300 Deployments, expected about a third: {shares:?}"
        );
    }

    cx.step("2. 3 -> 2: replica-c stops (SIGTERM) while PodSets 300..350 are created");
    boundaries.push(Timestamp::now());
    let before = [settles(&replicas[0], 2), settles(&replicas[1], 2)];
    let stopping = replicas[2].stop();
    let (stopped, created) = tokio::join!(stopping, create(cx, 300..350));
    stopped?;
    created?;
    settled_over(cx, &[&replicas[0], &replicas[1]], &before, 2).await?;
    converged(cx, 350).await?;
    cx.step("two replicas converged 350 PodSets");

    cx.step("3. 2 -> 4: replica-d and replica-e join while PodSets 350..400 are created");
    boundaries.push(Timestamp::now());
    let before = [settles(&replicas[0], 4), settles(&replicas[1], 4), 0, 0];
    replicas.push(start(cx, "replica-d")?);
    replicas.push(start(cx, "replica-e")?);
    create(cx, 350..400).await?;
    settled_over(
        cx,
        &[&replicas[0], &replicas[1], &replicas[3], &replicas[4]],
        &before,
        4,
    )
    .await?;
    converged(cx, 400).await?;
    cx.step("four replicas converged 400 PodSets");

    cx.step("4. SIGKILL of replica-d in the middle of a burst of 100");
    let deployments_api = cx.api(&deployments()).await?;
    let before: Vec<usize> = [0, 1, 4]
        .iter()
        .map(|i| settles(&replicas[*i], 3))
        .collect();
    let burst = create(cx, 400..500);
    let killer = async {
        cx.wait_for(
            "20 Deployments of the burst",
            CONVERGE_TIMEOUT,
            async || {
                let listed = deployments_api
                    .list_metadata(&ListParams::default())
                    .await?;
                Ok(match listed.items.len() {
                    n if n >= 420 => Probe::Ready(n),
                    n => Probe::Pending(format!("{n} Deployments")),
                })
            },
        )
        .await?;
        replicas[3].sigkill()?;
        Ok::<_, anyhow::Error>((Instant::now(), Timestamp::now()))
    };
    let (created, killed) = tokio::join!(burst, killer);
    created?;
    let (killed, killed_at) = killed?;
    boundaries.push(killed_at);
    cx.step("killed replica-d with SIGKILL");
    settled_over(cx, &[&replicas[0], &replicas[1], &replicas[4]], &before, 3).await?;
    let took = killed.elapsed();
    cx.step(format!(
        "the other three settled without replica-d {:.1} s after the kill",
        took.as_secs_f64()
    ));
    // The others drop it a lease duration after they saw its last renewal
    // (up to a retry period after it was made), and notice at their next
    // read of the ring.
    let limit = LEASE_DURATION + RETRY_PERIOD * 2 + MARGIN;
    ensure!(
        took <= limit,
        "the others took replica-d's keys {:.1} s after it was killed; expected within the lease \
         duration ({} s) and a few seconds",
        took.as_secs_f64(),
        LEASE_DURATION.as_secs()
    );
    converged(cx, 500).await?;
    cx.step("three replicas converged all 500 PodSets");

    cx.step("5. the audit log: no object written by two replicas at once");
    let writes = audited_writes(audit)?;
    let (overlaps, shared) = overlapping_writers(&writes, &boundaries);
    cx.step(format!(
        "{} writes audited; {shared} objects were written by more than one replica over the test",
        writes.len()
    ));
    ensure!(
        shared > 0,
        "no object was written by two replicas over the whole test: no key moved while written, \
         so the check below would prove nothing"
    );
    ensure!(
        overlaps.is_empty(),
        "{} object(s) had two writers at once, such as: {:#?}",
        overlaps.len(),
        overlaps.iter().take(5).collect::<Vec<_>>()
    );
    for (i, replica) in replicas.iter().enumerate() {
        if i != 2 && i != 3 {
            replica.stop().await?;
        }
    }
    Ok(())
}

/// Point 4: a replica cut off from the API server stops before its keys
/// can be taken: it exits (non-zero, saying why) once its renewals have
/// failed for the renew deadline, before the other sees its Lease expire
/// and settles without it; the other then converges every PodSet.
#[test]
fn a_partitioned_replica_stops_before_its_keys_are_taken() {
    with_replicas(
        "a_partitioned_replica_stops_before_its_keys_are_taken",
        &[],
        async |cx, replicas| partitioned(cx, replicas).await,
    );
}

async fn partitioned(cx: &mut RealCluster, replicas: &mut Vec<HostProcess>) -> Result<()> {
    cx.install_crds(&podset_crd()).await?;
    let link = SeverableLink::start(cx.own_control_plane()?.api_server_address()?)?;
    let through_link = cx.workdir().join("through-link.kubeconfig");
    kubeconfig::with_server(cx.kubeconfig(), &link.url(), &through_link)?;
    let ns = cx.namespace.clone();
    let args = [
        "--sharding",
        "--sharding-namespace",
        &ns,
        "--sharding-id",
        RING,
    ];
    let plugins = [example_plugin("podset")];
    let direct = cx
        .kubeconfig()
        .context("the control plane's kubeconfig")?
        .to_str()
        .context("a UTF-8 path")?
        .to_string();
    replicas.push(cx.start_replica_with_env(
        "replica-a",
        &plugins,
        &args,
        &[("KUBECONFIG", &direct)],
    )?);
    replicas.push(cx.start_replica_with_env(
        "replica-b",
        &plugins,
        &args,
        &[("KUBECONFIG", through_link.to_str().context("a UTF-8 path")?)],
    )?);
    settled_over(cx, &[&replicas[0], &replicas[1]], &[0, 0], 2).await?;
    create(cx, 0..40).await?;
    converged(cx, 40).await?;
    let b_wrote = replicas[1]
        .log_lines_with(&["podset PodSet", "created Deployment"])
        .len();
    ensure!(b_wrote > 0, "replica-b reconciled none of the 40 PodSets");
    cx.step(format!(
        "two replicas converged 40 PodSets, replica-b created {b_wrote} Deployments"
    ));

    let before = settles(&replicas[0], 1);
    link.sever();
    let severed = Instant::now();
    cx.step("cut replica-b off from the API server");
    // Resized while replica-b is cut off: its keys are converged by
    // replica-a once it has taken them.
    let api = cx.api(&podsets()).await?;
    for i in 0..40 {
        api.patch(
            &name_of(i),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"size": 2}})),
        )
        .await?;
    }
    // Watch both: replica-b's exit and replica-a's settle without it.
    let (mut b_exit, mut a_took) = (None, None);
    let limit = LEASE_DURATION + RETRY_PERIOD + MARGIN * 2;
    while b_exit.is_none() || a_took.is_none() {
        ensure!(
            severed.elapsed() < limit,
            "{:.0} s after the cut: replica-b exited after {b_exit:?}, replica-a settled alone after {a_took:?}",
            severed.elapsed().as_secs_f64()
        );
        if b_exit.is_none() && replicas[1].exited()?.is_some() {
            b_exit = Some(severed.elapsed());
        }
        if a_took.is_none() && settles(&replicas[0], 1) > before {
            a_took = Some(severed.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (b_exit, a_took) = (b_exit.unwrap_or_default(), a_took.unwrap_or_default());
    cx.step(format!(
        "replica-b exited {:.1} s after the cut; replica-a settled alone {:.1} s after it",
        b_exit.as_secs_f64(),
        a_took.as_secs_f64()
    ));
    ensure!(
        b_exit < a_took,
        "replica-b exited {:.1} s after the cut, after replica-a took its keys ({:.1} s)",
        b_exit.as_secs_f64(),
        a_took.as_secs_f64()
    );
    let status = replicas[1].exited()?.context("replica-b exited")?;
    ensure!(
        !status.success(),
        "replica-b exited with {status}, expected a failure"
    );
    let said = replicas[1].log_lines_with(&["was not renewed within the renew deadline"]);
    ensure!(!said.is_empty(), "replica-b did not say why it stopped");
    converged(cx, 40).await?;
    cx.step("replica-a converged the 40 PodSets resized during the cut");
    replicas[0].stop().await?;
    Ok(())
}

#[cfg(test)]
mod overlap_check {
    use super::*;

    fn write(at: i64, user: &str, object: &str) -> Write {
        Write {
            at: Timestamp::from_second(at).unwrap(),
            user: user.to_string(),
            object: object.to_string(),
            code: 200,
        }
    }

    #[test]
    fn interleaved_writers_are_reported_and_a_handover_is_not() {
        let writes = [
            // Handed over from a to b: a stops before b starts.
            write(10, "replica-a", "deployments/ns/x"),
            write(20, "replica-a", "deployments/ns/x"),
            write(30, "replica-b", "deployments/ns/x"),
            // Interleaved: b writes between two writes of c.
            write(10, "replica-c", "deployments/ns/y"),
            write(15, "replica-b", "deployments/ns/y"),
            write(20, "replica-c", "deployments/ns/y"),
            // a, then b, then a again after a change of the ring (at 50).
            write(40, "replica-a", "deployments/ns/z"),
            write(45, "replica-b", "deployments/ns/z"),
            write(60, "replica-a", "deployments/ns/z"),
        ];
        let boundaries = [Timestamp::from_second(50).unwrap()];
        let (overlaps, shared) = overlapping_writers(&writes, &boundaries);
        assert_eq!(shared, 3);
        assert_eq!(overlaps.len(), 1, "{overlaps:?}");
        assert!(overlaps[0].starts_with("deployments/ns/y"), "{overlaps:?}");
    }
}

/// A ClusterRole from before `rbac --sharding` granted `patch` on
/// primaries: the replicas cannot label the PodSets, say so once, and still
/// converge every one with a single writer each; the API server then sends
/// every replica every PodSet, but the Deployments still only to their
/// owner.
#[test]
fn replicas_refused_the_shard_label_still_converge() {
    with_replicas(
        "replicas_refused_the_shard_label_still_converge",
        &[],
        async |cx, replicas| refused_label(cx, replicas).await,
    );
}

const LIMITED_GROUP: &str = "reconciler-limited";

/// Applies the RBAC `rbac --sharding` generates for the podset plugin,
/// less `patch` on PodSets, bound to [`LIMITED_GROUP`].
async fn grant_without_primary_patch(cx: &RealCluster) -> Result<()> {
    let plugins = cx.workdir().join("rbac-plugins");
    std::fs::create_dir_all(&plugins)?;
    std::fs::copy(example_plugin("podset"), plugins.join("podset.wasm"))?;
    let name = format!("limited-{}", cx.namespace);
    let output = cx
        .host_command()
        .args(["rbac", "--plugins-dir"])
        .arg(&plugins)
        .arg("--crds")
        .arg(root().join("crds"))
        .args(["--sharding", "--name", &name])
        .args(["--leader-election-namespace", &cx.namespace])
        .args(["--service-account-namespace", &cx.namespace])
        .output()?;
    ensure!(
        output.status.success(),
        "rbac failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let generated = String::from_utf8(output.stdout)?;
    let with_patch = "resources: [\"podsets\"]\n    verbs: [get, list, patch, watch]";
    ensure!(
        generated.contains(with_patch),
        "rbac --sharding no longer grants patch on PodSets as expected:\n{generated}"
    );
    let service_account = format!(
        "  - kind: ServiceAccount\n    name: reconciler-host\n    namespace: {}",
        cx.namespace
    );
    let group = format!(
        "  - kind: Group\n    apiGroup: rbac.authorization.k8s.io\n    name: {LIMITED_GROUP}"
    );
    let limited = generated
        .replace(
            with_patch,
            "resources: [\"podsets\"]\n    verbs: [get, list, watch]",
        )
        .replace(&service_account, &group);
    let rbac = |kind: &str, plural: &str| {
        kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", kind),
            plural,
        )
    };
    let client = cx.client.clone();
    let apply = kube::api::PatchParams::apply(TEST_MANAGER).force();
    for document in limited.split("\n---\n") {
        let object: Value = serde_yaml_ng::from_str(document)?;
        let Some(kind) = object["kind"].as_str() else {
            continue;
        };
        let name = object["metadata"]["name"].as_str().context("a name")?;
        let api: kube::Api<DynamicObject> = match kind {
            "ClusterRole" => kube::Api::all_with(client.clone(), &rbac(kind, "clusterroles")),
            "Role" | "RoleBinding" => {
                let plural = if kind == "Role" {
                    "roles"
                } else {
                    "rolebindings"
                };
                let namespace = object["metadata"]["namespace"]
                    .as_str()
                    .context("a namespace")?;
                kube::Api::namespaced_with(client.clone(), namespace, &rbac(kind, plural))
            }
            other => anyhow::bail!("unexpected {other} in the generated RBAC"),
        };
        api.patch(name, &apply, &kube::api::Patch::Apply(&object))
            .await
            .with_context(|| format!("applying {kind} {name}"))?;
    }
    let bindings: kube::Api<DynamicObject> = kube::Api::all_with(
        client.clone(),
        &rbac("ClusterRoleBinding", "clusterrolebindings"),
    );
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": LIMITED_GROUP}],
    });
    bindings
        .patch(&name, &apply, &kube::api::Patch::Apply(&binding))
        .await
        .context("binding the ClusterRole")?;
    Ok(())
}

async fn refused_label(cx: &mut RealCluster, replicas: &mut Vec<HostProcess>) -> Result<()> {
    cx.install_crds(&podset_crd()).await?;
    grant_without_primary_patch(cx).await?;
    for name in ["limited-a", "limited-b"] {
        replicas.push(start_in_group(cx, name, LIMITED_GROUP)?);
    }
    settled_over(cx, &replicas.iter().collect::<Vec<_>>(), &[0, 0], 2).await?;
    create(cx, 0..40).await?;
    converged(cx, 40).await?;
    cx.step("two replicas without patch on PodSets converged 40 PodSets");

    for replica in replicas.iter() {
        let said = replica.log_lines_with(&["cannot label", "with its shard"]);
        ensure!(
            said.len() == 1,
            "each replica says once that it cannot label PodSets, {} said it {} times: {said:#?}",
            replica.pid(),
            said.len()
        );
    }
    let labelled = cx
        .api(&podsets())
        .await?
        .list(&ListParams::default().labels("reconciler-host.io/shard"))
        .await?
        .items
        .len();
    ensure!(
        labelled == 0,
        "{labelled} PodSets were labelled though patch was refused"
    );
    cx.wait_for(
        "every PodSet at both replicas, each Deployment at one",
        CONVERGE_TIMEOUT,
        async || {
            let mut shares = Vec::new();
            for replica in replicas.iter() {
                shares.push((
                    cached(replica, "PodSet").await?,
                    cached(replica, "Deployment").await?,
                ));
            }
            let deployments: u64 = shares.iter().map(|s| s.1).sum();
            Ok(
                if shares.iter().all(|s| s.0 == 40 && s.1 < 40) && deployments == 40 {
                    Probe::Ready(shares)
                } else {
                    Probe::Pending(format!("(PodSets, Deployments) cached: {shares:?}"))
                },
            )
        },
    )
    .await
    .map(|shares| {
        cx.step(format!(
            "(PodSets, Deployments) cached per replica: {shares:?}"
        ))
    })?;
    for replica in replicas.iter() {
        replica.stop().await?;
    }
    Ok(())
}

/// Point 5: the once-only duties (here, `--install-crds`) go to one replica
/// at a time, by the Lease `<ring>-duties`; when it stops, it gives the
/// Lease up and another takes the duties over at once, and both keep
/// reconciling their share meanwhile.
#[test]
fn one_replica_at_a_time_holds_the_once_only_duties() {
    with_replicas(
        "one_replica_at_a_time_holds_the_once_only_duties",
        &[],
        async |cx, replicas| duties(cx, replicas).await,
    );
}

const HOLDS_DUTIES: &str = "this replica holds the once-only duties";

async fn duties(cx: &mut RealCluster, replicas: &mut Vec<HostProcess>) -> Result<()> {
    // The CRD is not installed: the duties' holder installs it.
    let crds = cx.workdir().join("duty-crds");
    std::fs::create_dir_all(&crds)?;
    std::fs::copy(podset_crd(), crds.join("podset.yaml"))?;
    let crds = crds.to_str().context("a UTF-8 path")?.to_string();
    let names = ["duty-a", "duty-b"];
    for name in names {
        replicas.push(start_as(
            cx,
            name,
            "system:masters",
            &["--install-crds", &crds],
        )?);
    }
    settled_over(cx, &replicas.iter().collect::<Vec<_>>(), &[0, 0], 2).await?;
    create(cx, 0..20).await?;
    converged(cx, 20).await?;
    let holding: Vec<usize> = (0..replicas.len())
        .filter(|i| !replicas[*i].log_lines_with(&[HOLDS_DUTIES]).is_empty())
        .collect();
    let installed: Vec<usize> = (0..replicas.len())
        .filter(|i| {
            !replicas[*i]
                .log_lines_with(&["installed 1 CRD(s)"])
                .is_empty()
        })
        .collect();
    ensure!(
        holding.len() == 1 && installed == holding,
        "one replica holds the duties and it alone installs the CRDs; holding: {holding:?}, installed: {installed:?}"
    );
    let (holder, other) = (holding[0], 1 - holding[0]);
    let lease_name = format!("{RING}-duties");
    let leases = cx
        .api(&reconciler_sdk::KindRef::new(
            "coordination.k8s.io",
            "v1",
            "Lease",
        ))
        .await?;
    let lease = leases.get(&lease_name).await?;
    let holder_identity = lease.data["spec"]["holderIdentity"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    ensure!(
        holder_identity.contains(names[holder]),
        "the Lease {lease_name} is held by {holder_identity:?}, not by {}",
        names[holder]
    );
    cx.step(format!(
        "{} holds the duties (Lease {lease_name}) and installed the CRD; {} did not",
        names[holder], names[other]
    ));

    cx.step(format!("{} stops (SIGTERM)", names[holder]));
    let stopped = Instant::now();
    replicas[holder].stop().await?;
    cx.wait_for(
        &format!("{} to take over the duties", names[other]),
        LEASE_DURATION + RETRY_PERIOD + MARGIN + MARGIN,
        async || {
            replicas[other].ensure_running()?;
            Ok(
                match replicas[other].log_lines_with(&[HOLDS_DUTIES]).is_empty() {
                    false => Probe::Ready(()),
                    true => Probe::Pending("not yet".to_string()),
                },
            )
        },
    )
    .await?;
    let took = stopped.elapsed();
    cx.step(format!(
        "{} holds the duties {:.1} s after the other stopped",
        names[other],
        took.as_secs_f64()
    ));
    // A clean stop gives the Lease up: the other takes it at its next try,
    // not once the Lease has expired.
    ensure!(
        took < LEASE_DURATION,
        "the duties moved {:.1} s after a clean stop, as if their Lease had been left to expire ({} s)",
        took.as_secs_f64(),
        LEASE_DURATION.as_secs()
    );
    create(cx, 20..30).await?;
    converged(cx, 30).await?;
    cx.step(format!("{} alone converged 30 PodSets", names[other]));
    replicas[other].stop().await?;
    Ok(())
}

/// An attacker's or a copy-paste's primary: created with another object's
/// shard label, it reaches only the replica owning that bucket, not
/// (mostly) its own owner. The replica it reaches gives it its own label,
/// so its owner sees it and every such PodSet converges.
#[test]
fn a_primary_with_another_objects_shard_label_reaches_its_owner() {
    with_replicas(
        "a_primary_with_another_objects_shard_label_reaches_its_owner",
        &[],
        async |cx, replicas| strays(cx, replicas).await,
    );
}

async fn strays(cx: &mut RealCluster, replicas: &mut Vec<HostProcess>) -> Result<()> {
    const SHARD: &str = "reconciler-host.io/shard";
    cx.install_crds(&podset_crd()).await?;
    for name in ["stray-a", "stray-b"] {
        replicas.push(start(cx, name)?);
    }
    settled_over(cx, &replicas.iter().collect::<Vec<_>>(), &[0, 0], 2).await?;
    create(cx, 0..10).await?;
    converged(cx, 10).await?;
    let api = cx.api(&podsets()).await?;
    let original = api.get(&name_of(0)).await?;
    let copied = original
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SHARD))
        .cloned();
    let copied = copied.context("the first PodSet carries its shard label")?;
    cx.step(format!(
        "{} carries {SHARD}={copied}; ten PodSets are created with that label",
        name_of(0)
    ));
    let post = PostParams {
        field_manager: Some(TEST_MANAGER.to_string()),
        ..PostParams::default()
    };
    let copies: Vec<String> = (0..10).map(|i| format!("copy-{i}")).collect();
    for name in &copies {
        let body: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1alpha1", "kind": "PodSet",
            "metadata": {"name": name, "labels": {SHARD: copied}},
            "spec": {"size": 1}}))?;
        api.create(&post, &body).await?;
    }
    converged(cx, 20).await?;
    let mut relabelled = 0;
    for name in &copies {
        let label = api
            .get(name)
            .await?
            .metadata
            .labels
            .and_then(|l| l.get(SHARD).cloned())
            .unwrap_or_default();
        relabelled += usize::from(label != copied);
    }
    cx.step(format!(
        "all 20 converged; {relabelled} of the 10 copies now carry a shard label of their own"
    ));
    ensure!(
        relabelled > 0,
        "every copy's own bucket was the copied one: nothing was proven (a chance of 1 in 2^10)"
    );
    let said: usize = replicas
        .iter()
        .map(|r| r.log_lines_with(&["relabelled", "its label named"]).len())
        .sum();
    cx.step(format!(
        "{said} stray(s) relabelled by the replica they reached"
    ));
    for replica in replicas.iter() {
        replica.stop().await?;
    }
    Ok(())
}

/// `--sharding-pod-labels`: the Deployments' pod templates carry their
/// PodSet's shard label, so each Pod is born with it, and each replica
/// receives and caches its own PodSets' Pods alone (the plugin still lists
/// them: every PodSet converges with its pod named). When the ring shrinks,
/// the survivor's Pod selector widens with its buckets.
#[test]
fn pods_follow_their_podset_with_sharding_pod_labels() {
    with_replicas(
        "pods_follow_their_podset_with_sharding_pod_labels",
        &[],
        async |cx, replicas| pods_follow(cx, replicas).await,
    );
}

/// Pods cached per replica, once they add up to `total`.
async fn pods_cached(cx: &RealCluster, replicas: &[&HostProcess], total: u64) -> Result<Vec<u64>> {
    cx.wait_for(
        &format!("the replicas' caches to hold the {total} Pods between them"),
        CONVERGE_TIMEOUT,
        async || {
            let mut shares = Vec::new();
            for replica in replicas {
                shares.push(cached(replica, "Pod").await?);
            }
            Ok(if shares.iter().sum::<u64>() == total {
                Probe::Ready(shares)
            } else {
                Probe::Pending(format!("Pods cached per replica: {shares:?}"))
            })
        },
    )
    .await
}

async fn pods_follow(cx: &mut RealCluster, replicas: &mut Vec<HostProcess>) -> Result<()> {
    const SHARD: &str = "reconciler-host.io/shard";
    cx.install_crds(&podset_crd()).await?;
    for name in ["pods-a", "pods-b"] {
        replicas.push(start_as(
            cx,
            name,
            "system:masters",
            &["--sharding-pod-labels"],
        )?);
    }
    settled_over(cx, &replicas.iter().collect::<Vec<_>>(), &[0, 0], 2).await?;
    create(cx, 0..30).await?;
    converged(cx, 30).await?;

    let deployments_api = cx.api(&deployments()).await?;
    for deployment in deployments_api.list(&ListParams::default()).await?.items {
        let name = deployment.metadata.name.clone().unwrap_or_default();
        let own = deployment
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SHARD));
        let template = deployment.data["spec"]["template"]["metadata"]["labels"][SHARD].as_str();
        ensure!(
            own.is_some() && own.map(String::as_str) == template,
            "Deployment {name}: its shard label {own:?}, its pod template's {template:?}"
        );
    }
    let pods_api = cx
        .api(&reconciler_sdk::KindRef::new("", "v1", "Pod"))
        .await?;
    let pods = pods_api.list(&ListParams::default()).await?.items;
    let unlabelled: Vec<String> = pods
        .iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SHARD))
                .is_none()
        })
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    ensure!(
        pods.len() == 30 && unlabelled.is_empty(),
        "{} Pods, unlabelled: {unlabelled:?}",
        pods.len()
    );
    let shares = pods_cached(cx, &replicas.iter().collect::<Vec<_>>(), 30).await?;
    cx.step(format!("Pods cached per replica: {shares:?} of 30"));
    ensure!(
        shares.iter().all(|s| *s < 30),
        "one replica caches every Pod: {shares:?}"
    );

    cx.step("2 -> 1: pods-b stops (SIGTERM); PodSets 30..40 are created");
    let before = [settles(&replicas[0], 1)];
    replicas[1].stop().await?;
    settled_over(cx, &[&replicas[0]], &before, 1).await?;
    create(cx, 30..40).await?;
    converged(cx, 40).await?;
    let alone = pods_cached(cx, &[&replicas[0]], 40).await?;
    cx.step(format!("pods-a alone caches {alone:?} of 40 Pods"));
    replicas[0].stop().await?;
    Ok(())
}

/// With admission served, a new PodSet is labelled with its shard by the
/// webhook as it is created: it reaches its owner alone, and no replica
/// writes a label on any PodSet (the audit log shows no write to a
/// PodSet other than to its status).
#[test]
fn new_podsets_are_labelled_at_creation() {
    let audit = tempfile::tempdir().expect("a temporary directory");
    let users = ["label-a", "label-b"];
    let flags = audit_flags(audit.path(), &users).expect("the audit policy");
    with_replicas(
        "new_podsets_are_labelled_at_creation",
        &[("APISERVER_EXTRA", flags.as_str())],
        async |cx, replicas| labelled_at_creation(cx, audit.path(), &users, replicas).await,
    );
}

async fn labelled_at_creation(
    cx: &mut RealCluster,
    audit: &Path,
    users: &[&str],
    replicas: &mut Vec<HostProcess>,
) -> Result<()> {
    const SHARD: &str = "reconciler-host.io/shard";
    cx.install_crds(&podset_crd()).await?;
    let prefix = format!("e2e-{}", cx.namespace);
    let secret = format!("{}/admission-tls", cx.namespace);
    for name in users {
        let port = reconciler_tests::free_loopback_port()?.to_string();
        let (listen, url) = (
            format!("127.0.0.1:{port}"),
            format!("https://127.0.0.1:{port}"),
        );
        replicas.push(start_as(
            cx,
            name,
            "system:masters",
            &[
                "--admission-listen",
                &listen,
                "--admission-url",
                &url,
                "--admission-cert-secret",
                &secret,
                "--admission-webhook-prefix",
                &prefix,
            ],
        )?);
    }
    settled_over(cx, &replicas.iter().collect::<Vec<_>>(), &[0, 0], 2).await?;
    let configuration = format!("{prefix}.shard-labels");
    let configurations = cx
        .api(&reconciler_sdk::KindRef::new(
            "admissionregistration.k8s.io",
            "v1",
            "MutatingWebhookConfiguration",
        ))
        .await?;
    cx.wait_for(
        &format!("the duties' holder to apply {configuration}"),
        CONVERGE_TIMEOUT,
        async || {
            Ok(match configurations.get_opt(&configuration).await? {
                Some(_) => Probe::Ready(()),
                None => Probe::Pending("not yet".into()),
            })
        },
    )
    .await?;
    create(cx, 0..30).await?;
    converged(cx, 30).await?;

    let podsets_api = cx.api(&podsets()).await?;
    let unlabelled: Vec<String> = podsets_api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SHARD))
                .is_none()
        })
        .filter_map(|p| p.metadata.name)
        .collect();
    ensure!(
        unlabelled.is_empty(),
        "PodSets without a shard label: {unlabelled:?}"
    );
    let text = std::fs::read_to_string(audit.join("audit.log")).context("reading the audit log")?;
    let mut label_writes = Vec::new();
    let mut status_writes = 0;
    for line in text.lines() {
        let entry: Value = serde_json::from_str(line)?;
        if entry["objectRef"]["resource"] != "podsets" {
            continue;
        }
        match entry["objectRef"]["subresource"].as_str() {
            Some("status") => status_writes += 1,
            _ => label_writes.push(format!(
                "{} {} {}",
                entry["user"]["username"], entry["verb"], entry["objectRef"]["name"]
            )),
        }
    }
    cx.step(format!(
        "30 PodSets labelled at creation; the replicas wrote {status_writes} statuses and {} PodSets",
        label_writes.len()
    ));
    ensure!(
        status_writes >= 30,
        "the audit log shows {status_writes} status writes: it does not see the replicas"
    );
    ensure!(
        label_writes.is_empty(),
        "replicas wrote PodSets besides their status: {label_writes:?}"
    );
    let mut shares = Vec::new();
    for replica in replicas.iter() {
        shares.push(cached(replica, "PodSet").await?);
    }
    cx.step(format!("PodSets cached per replica: {shares:?}"));
    ensure!(
        shares.iter().sum::<u64>() == 30 && shares.iter().all(|s| *s < 30),
        "each PodSet is cached by its owner alone: {shares:?}"
    );
    for replica in replicas.iter() {
        replica.stop().await?;
    }
    Ok(())
}

/// Flags for a 1.28 API server that serves ValidatingAdmissionPolicy (beta
/// there, off by default).
const POLICIES: &str = "--feature-gates=ValidatingAdmissionPolicy=true --runtime-config=admissionregistration.k8s.io/v1beta1=true";

/// The API server's own fence (`rbac --write-fence`): with it installed, a
/// replica frozen past its Lease (SIGSTOP) lands nothing once thawed, even
/// a write the host itself would have let through.
#[test]
fn the_api_servers_fence_refuses_a_frozen_replica_the_buckets_it_lost() {
    let audit = tempfile::tempdir().expect("a temporary directory");
    let flags = audit_flags(audit.path(), &["replica-a", "replica-b"]).expect("the audit policy");
    let flags = format!("{POLICIES} {flags}");
    with_replicas(
        "the_api_servers_fence_refuses_a_frozen_replica_the_buckets_it_lost",
        &[("APISERVER_EXTRA", flags.as_str())],
        async |cx, replicas| fenced(cx, audit.path(), replicas).await,
    );
}

/// The published map's buckets, each with the writers it names, once
/// every bucket names exactly one writer and those writers are `expected`.
async fn published(cx: &RealCluster, expected: &[&str]) -> Result<BTreeMap<String, String>> {
    let configmaps = cx.api(&KindRef::new("", "v1", "ConfigMap")).await?;
    let name = format!("{RING}-writers");
    cx.wait_for(
        &format!("the fence's map to name {expected:?} alone"),
        LEASE_DURATION * 2 + MARGIN * 2,
        async || {
            let Some(map) = configmaps.get_opt(&name).await? else {
                return Ok(Probe::Pending(format!("no ConfigMap {name} yet")));
            };
            let data: BTreeMap<String, String> =
                serde_json::from_value(map.data["data"].clone()).unwrap_or_default();
            let buckets: BTreeMap<String, String> =
                data.into_iter().filter(|(k, _)| k != "ring").collect();
            let named: std::collections::BTreeSet<&str> = buckets
                .values()
                .flat_map(|v| v.split(',').filter(|w| !w.is_empty()))
                .collect();
            let single = buckets
                .values()
                .all(|v| v.split(',').filter(|w| !w.is_empty()).count() == 1);
            let wanted: std::collections::BTreeSet<&str> = expected.iter().copied().collect();
            Ok(if buckets.len() == 1024 && single && named == wanted {
                Probe::Ready(buckets.clone())
            } else {
                Probe::Pending(format!(
                    "{} buckets, each with one writer: {single}, writers {named:?}",
                    buckets.len()
                ))
            })
        },
    )
    .await
}

/// A merge patch of an annotation on PodSet `name`, as the user of
/// `kubeconfig` (a replica's credentials, used directly).
async fn touch_as(
    cx: &RealCluster,
    kubeconfig: &str,
    name: &str,
) -> Result<Result<(), kube::Error>> {
    let text = std::fs::read_to_string(cx.workdir().join(format!("{kubeconfig}.kubeconfig")))?;
    let client = reconciler_tests::real_cluster::members::client_of(&text).await?;
    let api: kube::Api<DynamicObject> = kube::Api::namespaced_with(
        client,
        &cx.namespace,
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("example.com", "v1alpha1", "PodSet"),
            "podsets",
        ),
    );
    let patch = json!({"metadata": {"annotations": {"reconciler-tests/touched-by": kubeconfig}}});
    Ok(api
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .map(drop))
}

/// Whether `answer` is the fence's refusal.
fn refused_by_fence(answer: &Result<(), kube::Error>) -> bool {
    matches!(answer, Err(kube::Error::Api(e))
        if e.code == 403 && e.message.contains("refused by the reconciler-host shard fence"))
}

async fn fenced(cx: &mut RealCluster, audit: &Path, replicas: &mut Vec<HostProcess>) -> Result<()> {
    cx.install_crds(&podset_crd()).await?;
    let ns = cx.namespace.clone();
    let generated = cx
        .host_command()
        .args([
            "rbac",
            "--write-fence",
            "--write-fence-api-version",
            "v1beta1",
            "--write-fence-user",
            "replica-a",
            "--write-fence-user",
            "replica-b",
            "--leader-election-namespace",
            &ns,
            "--leader-election-id",
            RING,
        ])
        .output()?;
    ensure!(
        generated.status.success(),
        "rbac --write-fence: {}",
        String::from_utf8_lossy(&generated.stderr)
    );
    let text = String::from_utf8(generated.stdout)?;
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let object = <Value as serde::Deserialize>::deserialize(document)?;
        cx.apply_as(TEST_MANAGER, &object)
            .await?
            .with_context(|| format!("applying {}", object["kind"]))?;
    }
    cx.step("1. the fence rbac --write-fence generates, applied (v1beta1 on this 1.28 API server)");

    replicas.push(start(cx, "replica-a")?);
    replicas.push(start(cx, "replica-b")?);
    let map = published(cx, &["replica-a", "replica-b"]).await?;
    create(cx, 0..30).await?;
    converged(cx, 30).await?;
    cx.step("2. two replicas published who writes each bucket and converged 30 PodSets through the fence");

    // Each replica's credentials, used directly: the API server refuses
    // replica-a a PodSet of replica-b's bucket, and lets it write its own.
    let listed = cx
        .api(&podsets())
        .await?
        .list(&ListParams::default())
        .await?;
    let owner_of = |p: &DynamicObject| -> String {
        let bucket = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("reconciler-host.io/shard"));
        bucket
            .and_then(|b| map.get(b))
            .map(|w| w.trim_matches(',').to_string())
            .unwrap_or_default()
    };
    let of = |replica: &str| -> Result<String> {
        listed
            .items
            .iter()
            .find(|p| owner_of(p) == replica)
            .and_then(|p| p.metadata.name.clone())
            .with_context(|| format!("no PodSet of {replica}'s buckets among 30"))
    };
    let (of_a, of_b) = (of("replica-a")?, of("replica-b")?);
    let answer = touch_as(cx, "replica-a", &of_b).await?;
    ensure!(
        refused_by_fence(&answer),
        "replica-a wrote PodSet {of_b} of replica-b's bucket: {answer:?}"
    );
    touch_as(cx, "replica-a", &of_a)
        .await?
        .with_context(|| format!("replica-a writing PodSet {of_a} of its own bucket"))?;
    cx.step(format!(
        "3. as replica-a: PodSet {of_b} (replica-b's bucket) refused by the fence, {of_a} (its own) written"
    ));

    replicas[1].freeze()?;
    let frozen = Instant::now();
    let api = cx.api(&podsets()).await?;
    for i in 0..30 {
        api.patch(
            &name_of(i),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"size": 2}})),
        )
        .await?;
    }
    published(cx, &["replica-a"]).await?;
    let fenced_at = Timestamp::now();
    cx.step(format!(
        "4. replica-b frozen (SIGSTOP), 30 PodSets resized; {:.1} s later the map names replica-a alone",
        frozen.elapsed().as_secs_f64()
    ));
    // What a thawed replica-b would send from where it froze.
    let answer = touch_as(cx, "replica-b", &of_b).await?;
    ensure!(
        refused_by_fence(&answer),
        "a write as replica-b to its lost bucket was not refused: {answer:?}"
    );
    converged(cx, 30).await?;
    cx.step("5. replica-b's write to its old bucket refused; replica-a converged every resize");

    replicas[1].thaw()?;
    let thawed = Instant::now();
    while replicas[1].exited()?.is_none() {
        ensure!(
            thawed.elapsed() < MARGIN * 3,
            "replica-b still runs {:.0} s after it was thawed past its Lease",
            thawed.elapsed().as_secs_f64()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    converged(cx, 30).await?;
    replicas[0].stop().await?;
    let writes = audited_writes(audit)?;
    let landed_after: Vec<&Write> = writes
        .iter()
        .filter(|w| w.user == "replica-b" && w.at >= fenced_at && (200..300).contains(&w.code))
        .collect();
    let refused = writes
        .iter()
        .filter(|w| w.user == "replica-b" && w.at >= fenced_at && w.code == 403)
        .count();
    ensure!(
        landed_after.is_empty(),
        "writes of replica-b landed after the fence named replica-a alone: {landed_after:?}"
    );
    cx.step(format!(
        "6. thawed, replica-b exited; the audit log shows none of its writes landed after the fence moved its buckets ({refused} refused)"
    ));
    Ok(())
}
