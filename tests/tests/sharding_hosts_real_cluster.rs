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

/// Every entry of the audit log in `dir`, with when it was received and by
/// whom.
fn audit_entries(dir: &Path) -> Result<Vec<(Timestamp, String, Value)>> {
    let text = std::fs::read_to_string(dir.join("audit.log")).context("reading the audit log")?;
    let mut entries = Vec::new();
    for line in text.lines() {
        let entry: Value = serde_json::from_str(line)?;
        let at = entry["requestReceivedTimestamp"]
            .as_str()
            .context("an audit entry without requestReceivedTimestamp")?
            .parse()?;
        let user = entry["user"]["username"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        entries.push((at, user, entry));
    }
    Ok(entries)
}

fn audited_writes(dir: &Path) -> Result<Vec<Write>> {
    let mut writes = Vec::new();
    for (at, user, entry) in audit_entries(dir)? {
        let reference = &entry["objectRef"];
        let Some(name) = reference["name"].as_str() else {
            continue;
        };
        writes.push(Write {
            at,
            user,
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
    start_with(cx, name, &minted(cx, name, group)?, extra, &[])
}

/// A kubeconfig of user `name` in `group`, written in the test's directory.
fn minted(cx: &RealCluster, name: &str, group: &str) -> Result<PathBuf> {
    let path = cx.workdir().join(format!("{name}.kubeconfig"));
    std::fs::write(
        &path,
        kubeconfig::minted(cx.own_control_plane()?, name, group)?,
    )?;
    Ok(path)
}

/// Where `replica` serves /metrics and /shards, from its log.
fn reports_address(replica: &HostProcess) -> Result<String> {
    let marker = "serving /metrics and /plugins on http://";
    let line = replica
        .log_lines_with(&[marker])
        .into_iter()
        .next()
        .context("the replica has not said where it serves /metrics")?;
    Ok(line
        .split(marker)
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .context("no address after the marker")?
        .to_string())
}

/// How many objects of `kind` `replica`'s cache holds, from its /metrics.
async fn cached(replica: &HostProcess, kind: &str) -> Result<u64> {
    let response = reconciler_tests::metrics_text(&reports_address(replica)?)?;
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
    each_caches_at_most(cx, replicas, total, total / 2).await
}

/// [`each_caches_its_share`], with none holding more than `most` of either
/// kind.
async fn each_caches_at_most(
    cx: &RealCluster,
    replicas: &[HostProcess],
    total: u64,
    most: u64,
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
            let largest = shares.iter().map(|s| s.0.max(s.1)).max().unwrap_or(0);
            Ok(
                if podsets == total && deployments == total && largest <= most {
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

/// Point 3: a ring change lists nothing but the buckets that arrive, and
/// changes no object. Two replicas hold 60 PodSets; a third joins, then one
/// leaves with SIGTERM, then another is killed with SIGKILL (the survivor
/// takes its buckets once its Lease expires). At each change every replica
/// lists, with an `in`
/// selector, exactly the buckets it gains in the ring (computed with the
/// host's own assignment: on a join the two mostly give buckets away, and
/// the bounded-load pass may hand one of them a few), and nothing more;
/// through all three, no PodSet or Deployment gets a new resourceVersion.
#[test]
fn a_ring_change_lists_only_the_arriving_buckets_and_changes_no_object() {
    let audit = tempfile::tempdir().expect("a temporary directory");
    let users = ["move-a", "move-b", "move-c"];
    let flags = audit_log_flags(
        audit.path(),
        &format!(
            "- level: Metadata\n  users: [{}]\n  verbs: [list, create, update, patch, delete]\n  resources:\n  \
             - group: apps\n    resources: [deployments]\n  \
             - group: example.com\n    resources: [podsets, podsets/status]\n",
            users.join(", ")
        ),
    )
    .expect("the audit policy");
    with_replicas(
        "a_ring_change_lists_only_the_arriving_buckets_and_changes_no_object",
        &[("APISERVER_EXTRA", flags.as_str())],
        async |cx, replicas| moves(cx, audit.path(), replicas).await,
    );
}

/// The resourceVersion of every PodSet and Deployment, by kind and name.
async fn versions(cx: &RealCluster) -> Result<BTreeMap<String, String>> {
    let mut versions = BTreeMap::new();
    for kind in [podsets(), deployments()] {
        for object in cx
            .api(&kind)
            .await?
            .list(&ListParams::default())
            .await?
            .items
        {
            versions.insert(
                format!("{}/{}", kind.kind, object.metadata.name.unwrap_or_default()),
                object.metadata.resource_version.unwrap_or_default(),
            );
        }
    }
    Ok(versions)
}

/// One list request of a replica, from the audit log: when, by whom, of
/// which resource, with which label selector (decoded).
#[derive(Debug)]
struct Listed {
    at: Timestamp,
    user: String,
    resource: String,
    selector: String,
}

fn audited_lists(dir: &Path) -> Result<Vec<Listed>> {
    let mut lists = Vec::new();
    for (at, user, entry) in audit_entries(dir)? {
        if entry["verb"] != "list" {
            continue;
        }
        let uri = entry["requestURI"].as_str().unwrap_or_default();
        let selector = uri
            .split(['?', '&'])
            .find_map(|p| p.strip_prefix("labelSelector="))
            .map(decoded)
            .unwrap_or_default();
        lists.push(Listed {
            at,
            user,
            resource: entry["objectRef"]["resource"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            selector,
        });
    }
    Ok(lists)
}

/// A query parameter's value, percent-decoded.
fn decoded(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 2;
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The buckets an `in` selector of the shard label names; `None` for any
/// other selector.
fn buckets_in(selector: &str) -> Option<usize> {
    let inner = selector
        .strip_prefix("reconciler-host.io/shard in (")?
        .strip_suffix(')')?;
    Some(inner.split(',').count())
}

/// `replica`'s /shards, parsed.
fn shards_of(replica: &HostProcess) -> Result<Value> {
    let response = reconciler_tests::report_text(&reports_address(replica)?, "/shards")?;
    let body = response
        .split("\r\n\r\n")
        .nth(1)
        .context("a response without a body")?;
    Ok(serde_json::from_str(body)?)
}

/// The identity each of `replicas` joined the ring as, from its /shards.
fn identities(replicas: &[&HostProcess]) -> Result<Vec<String>> {
    replicas
        .iter()
        .map(|r| {
            Ok(shards_of(r)?["identity"]
                .as_str()
                .context("an identity")?
                .to_string())
        })
        .collect()
}

/// How many buckets `who` owns in the ring of `after` and not in that of
/// `before`: what it must list when the ring goes from one to the other.
fn gained(who: &str, before: &[String], after: &[String]) -> usize {
    use reconciler_host::sharding::assignment::{Replica, Ring};
    let ring = |ids: &[String]| Ring::new(ids.iter().map(|id| Replica::new(id)));
    let (before, after) = (ring(before), ring(after));
    let had = before.buckets_of(who);
    after
        .buckets_of(who)
        .iter()
        .filter(|b| !had.contains(b))
        .count()
}

/// Every list of podsets and deployments `user` made in `lists` names its
/// arriving buckets alone (an `in` selector), and they add up to `gained`
/// for each resource.
fn listed_only(lists: &[&Listed], user: &str, gained: usize) -> Result<()> {
    for resource in ["podsets", "deployments"] {
        let mut named = 0;
        for list in lists
            .iter()
            .filter(|l| l.user == user && l.resource == resource)
        {
            named += buckets_in(&list.selector).with_context(|| {
                format!(
                    "{user} listed {resource} with more than its arriving buckets: {:.60}...",
                    list.selector
                )
            })?;
        }
        ensure!(
            named == gained,
            "{user} listed {named} buckets of {resource}; it gained {gained}"
        );
    }
    Ok(())
}

async fn moves(cx: &mut RealCluster, audit: &Path, replicas: &mut Vec<HostProcess>) -> Result<()> {
    cx.install_crds(&podset_crd()).await?;
    for name in ["move-a", "move-b"] {
        replicas.push(start(cx, name)?);
    }
    settled_over(cx, &replicas.iter().collect::<Vec<_>>(), &[0, 0], 2).await?;
    create(cx, 0..60).await?;
    converged(cx, 60).await?;
    // Two replicas: each below the whole, not below half.
    each_caches_at_most(cx, replicas, 60, 45).await?;
    let before = versions(cx).await?;

    let joined = Timestamp::now();
    let counts: Vec<usize> = replicas.iter().map(|r| settles(r, 3)).collect();
    replicas.push(start(cx, "move-c")?);
    settled_over(
        cx,
        &replicas.iter().collect::<Vec<_>>(),
        &[counts[0], counts[1], 0],
        3,
    )
    .await?;
    each_caches_its_share(cx, replicas, 60).await?;
    let ids = identities(&replicas.iter().collect::<Vec<_>>())?;
    let (two, three) = (vec![ids[0].clone(), ids[1].clone()], ids.clone());
    let shards = shards_of(&replicas[1])?;
    cx.step(format!(
        "a third replica joined; the ring assigns by {}; on the join move-a gained {} buckets, move-b {}",
        shards["assignment"],
        gained(&ids[0], &two, &three),
        gained(&ids[1], &two, &three)
    ));

    let left = Timestamp::now();
    let counts: Vec<usize> = [&replicas[0], &replicas[2]]
        .iter()
        .map(|r| settles(r, 2))
        .collect();
    let leaving = replicas.remove(1);
    leaving.stop().await?;
    settled_over(cx, &[&replicas[0], &replicas[1]], &counts, 2).await?;
    let moved_in = left.duration_until(Timestamp::now());
    each_caches_at_most(cx, replicas, 60, 45).await?;
    converged(cx, 60).await?;

    let killed = Timestamp::now();
    let count = settles(&replicas[0], 1);
    replicas.remove(1).sigkill()?;
    settled_over(cx, &[&replicas[0]], &[count], 1).await?;
    let taken_in = killed.duration_until(Timestamp::now());
    converged(cx, 60).await?;
    let after = versions(cx).await?;
    let changed: Vec<&String> = before
        .iter()
        .filter(|(name, version)| after.get(*name) != Some(version))
        .map(|(name, _)| name)
        .collect();
    let last = vec![ids[0].clone(), ids[2].clone()];

    let lists = audited_lists(audit)?;
    let on_join: Vec<&Listed> = lists
        .iter()
        .filter(|l| l.at >= joined && l.at < left)
        .collect();
    let on_leave: Vec<&Listed> = lists
        .iter()
        .filter(|l| l.at >= left && l.at < killed)
        .collect();
    let on_kill: Vec<&Listed> = lists.iter().filter(|l| l.at >= killed).collect();
    // Who listed what, and how many buckets an `in` selector named.
    let summary = |lists: &[&Listed]| {
        lists
            .iter()
            .map(|l| match buckets_in(&l.selector) {
                Some(n) => format!("{} {} in {n} buckets", l.user, l.resource),
                None => format!("{} {} {:.40}...", l.user, l.resource, l.selector),
            })
            .collect::<Vec<_>>()
    };
    cx.step(format!(
        "lists on the join: {:?}; on the leave ({} gained by move-a, {} by move-c; settled {:.1} s after SIGTERM): {:?}",
        summary(&on_join),
        gained(&ids[0], &three, &last),
        gained(&ids[2], &three, &last),
        moved_in.as_secs_f64(),
        summary(&on_leave)
    ));
    listed_only(&on_join, "move-a", gained(&ids[0], &two, &three))?;
    listed_only(&on_join, "move-b", gained(&ids[1], &two, &three))?;
    listed_only(&on_leave, "move-a", gained(&ids[0], &three, &last))?;
    listed_only(&on_leave, "move-c", gained(&ids[2], &three, &last))?;
    let alone = vec![ids[0].clone()];
    cx.step(format!(
        "lists on the SIGKILL of move-c ({} gained by move-a; it took them {:.1} s after the kill): {:?}",
        gained(&ids[0], &last, &alone),
        taken_in.as_secs_f64(),
        summary(&on_kill)
    ));
    listed_only(&on_kill, "move-a", gained(&ids[0], &last, &alone))?;
    cx.step(format!(
        "through the join, the leave and the kill, {} of {} PodSets and Deployments got a new resourceVersion",
        changed.len(),
        before.len()
    ));
    ensure!(
        changed.is_empty(),
        "objects changed by the moves: {changed:?}"
    );
    for replica in replicas.iter() {
        replica.stop().await?;
    }
    Ok(())
}

/// A Deployment that is the podset plugin's child and the rollout-schedules
/// plugin's primary would be labelled with its PodSet's bucket by one and
/// with its own by the other, each undoing the other at every reconcile. It
/// carries no shard label: a label its primary role left (a host that
/// served rollout-schedules alone) is taken off, and while both plugins
/// serve, no Deployment is ever seen labelled. Both roles still work: the
/// PodSets converge and an annotated Deployment gets its RolloutSchedule.
#[test]
fn a_kind_that_is_a_child_and_a_primary_carries_no_shard_label() {
    with_replicas(
        "a_kind_that_is_a_child_and_a_primary_carries_no_shard_label",
        &[],
        async |cx, replicas| two_roles(cx, replicas).await,
    );
}

async fn two_roles(cx: &mut RealCluster, replicas: &mut Vec<HostProcess>) -> Result<()> {
    const SHARD: &str = "reconciler-host.io/shard";
    const ENABLED: &str = "rollout-scheduler.io/enabled";
    cx.install_crds(&podset_crd()).await?;
    cx.install_crds(&root().join("crds/rolloutschedule.yaml"))
        .await?;
    let shard_label = |object: &DynamicObject| {
        object
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SHARD))
            .cloned()
    };
    let schedules = example_plugin("rollout_schedules");
    for name in ["roles-a", "roles-b"] {
        let path = minted(cx, name, "system:masters")?;
        replicas.push(start_serving(
            cx,
            name,
            std::slice::from_ref(&schedules),
            &path,
            &[],
            &[],
        )?);
    }
    settled_over(cx, &replicas.iter().collect::<Vec<_>>(), &[0, 0], 2).await?;
    let deployment_api = cx.api(&deployments()).await?;
    let post = PostParams {
        field_manager: Some(TEST_MANAGER.to_string()),
        ..PostParams::default()
    };
    let web: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "annotations": {ENABLED: "true"}},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}))?;
    deployment_api.create(&post, &web).await?;
    let own = cx
        .wait_for(
            "Deployment web, rollout-schedules' primary alone, to carry its shard label",
            CONVERGE_TIMEOUT,
            async || {
                let web = deployment_api.get("web").await?;
                Ok(match shard_label(&web) {
                    Some(label) => Probe::Ready(label),
                    None => Probe::Pending("no shard label yet".into()),
                })
            },
        )
        .await?;
    cx.step(format!(
        "served by rollout-schedules alone, Deployment web carries {SHARD}={own}"
    ));
    for replica in replicas.drain(..) {
        replica.stop().await?;
    }

    let both = [example_plugin("podset"), schedules];
    for name in ["roles-c", "roles-d"] {
        let path = minted(cx, name, "system:masters")?;
        replicas.push(start_serving(cx, name, &both, &path, &[], &[])?);
    }
    settled_over(cx, &replicas.iter().collect::<Vec<_>>(), &[0, 0], 2).await?;
    let schedule_api = cx
        .api(&KindRef::new("example.com", "v1alpha1", "RolloutSchedule"))
        .await?;
    let schedules = async || -> Result<Vec<String>> {
        Ok(schedule_api
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|s| s.metadata.name)
            .collect())
    };
    cx.wait_for(
        "the shard label taken off Deployment web, and its RolloutSchedule",
        CONVERGE_TIMEOUT,
        async || {
            let label = shard_label(&deployment_api.get("web").await?);
            let names = schedules().await?;
            Ok(if label.is_none() && !names.is_empty() {
                Probe::Ready(())
            } else {
                Probe::Pending(format!("label {label:?}; RolloutSchedules {names:?}"))
            })
        },
    )
    .await?;
    cx.step("with both plugins served, web's label is taken off; its RolloutSchedule is there");
    // The PodSets' namespace holds their Deployments alone (`converged`).
    deployment_api
        .delete("web", &kube::api::DeleteParams::default())
        .await?;
    // Every Deployment event from here on, so a label that came and went
    // between two looks is seen too.
    let since = deployment_api
        .list_metadata(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .context("a list's resourceVersion")?;
    let mut events = deployment_api
        .watch(&kube::api::WatchParams::default(), &since)
        .await?
        .boxed();
    create(cx, 0..10).await?;
    converged(cx, 10).await?;
    let annotate = json!({"metadata": {"annotations": {ENABLED: "true"}}});
    deployment_api
        .patch(
            &name_of(0),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&annotate),
        )
        .await?;
    cx.wait_for(
        "a RolloutSchedule for the annotated PodSet's Deployment",
        CONVERGE_TIMEOUT,
        async || {
            let names = schedules().await?;
            Ok(if names.contains(&name_of(0)) {
                Probe::Ready(())
            } else {
                Probe::Pending(format!("RolloutSchedules {names:?}"))
            })
        },
    )
    .await?;
    cx.step(format!(
        "all 10 PodSets converged; {}'s Deployment, annotated, has its RolloutSchedule",
        name_of(0)
    ));
    // Then a while longer: two labellers would keep writing.
    let window = tokio::time::sleep(Duration::from_secs(5));
    tokio::pin!(window);
    let (mut seen, mut labelled) = (0usize, Vec::new());
    loop {
        tokio::select! {
            _ = &mut window => break,
            event = events.next() => match event {
                Some(Ok(kube::api::WatchEvent::Added(d) | kube::api::WatchEvent::Modified(d))) => {
                    seen += 1;
                    let name = d.metadata.name.clone().unwrap_or_default();
                    if let Some(label) = shard_label(&d) {
                        labelled.push(format!("{name}={label}"));
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
                None => break,
            },
        }
    }
    cx.step(format!(
        "{seen} Deployment events since the two plugins served together; labelled in them: {labelled:?}"
    ));
    ensure!(
        labelled.is_empty(),
        "PodSets' Deployments were labelled while a plugin has Deployments as its primary: {labelled:?}"
    );
    let api = cx.api(&podsets()).await?;
    for i in 0..10 {
        let podset = api.get(&name_of(i)).await?;
        ensure!(
            shard_label(&podset).is_some(),
            "PodSet {} has no shard label: PodSets are one plugin's primary alone",
            name_of(i)
        );
    }
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
    cx.wait_for(
        &format!("the fence's map to name {expected:?} alone"),
        LEASE_DURATION * 2 + MARGIN * 2,
        async || {
            let Some(buckets) = fence_map(cx).await? else {
                return Ok(Probe::Pending(format!("no ConfigMap {RING}-writers yet")));
            };
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

/// The replicas the chaos test may start, each as a user of its own.
const CHAOS_USERS: usize = 30;
/// Ring changes the chaos test makes at least.
const CHAOS_CHANGES: usize = 22;
/// The chaos test's first changes, one of each kind: a join through a link,
/// that link cut, a join with the clock ahead, a freeze, a SIGKILL, a
/// SIGTERM, a plain join.
const OPENING: [usize; 7] = [6, 4, 5, 3, 2, 1, 7];
/// libfaketime, for a replica whose wall clock runs ahead (Debian's
/// `faketime` package).
const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

fn chaos_user(i: usize) -> String {
    format!("replica-{i:02}")
}

/// Object writes of the replicas (as `audit_flags`), and their Lease
/// writes with the body: who settled on which ring, and when.
fn chaos_audit_flags(dir: &Path) -> Result<String> {
    let users: Vec<String> = (0..CHAOS_USERS).map(chaos_user).collect();
    let users = users.join(", ");
    audit_log_flags(
        dir,
        &format!(
            "- level: Request\n  users: [{users}]\n  verbs: [create, update, patch, delete]\n  resources:\n  \
             - group: coordination.k8s.io\n    resources: [leases]\n\
             - level: Metadata\n  users: [{users}]\n  verbs: [create, update, patch, delete]\n  resources:\n  \
             - group: apps\n    resources: [deployments]\n  \
             - group: example.com\n    resources: [podsets, podsets/status]\n"
        ),
    )
}

/// A small deterministic generator, so a failing run can be repeated
/// with its seed (`CHAOS_SEED`).
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: usize) -> usize {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
    }
}

/// Randomized ring changes with PodSets created and changed throughout,
/// then the audit log checked against the protocol (`protocol_check`).
#[test]
fn chaos_of_ring_changes_keeps_one_writer_per_object() {
    let audit = tempfile::tempdir().expect("a temporary directory");
    let flags = chaos_audit_flags(audit.path()).expect("the audit policy");
    let flags = format!("{POLICIES} {flags}");
    with_replicas(
        "chaos_of_ring_changes_keeps_one_writer_per_object",
        &[("APISERVER_EXTRA", flags.as_str())],
        async |cx, replicas| chaos(cx, audit.path(), replicas).await,
    );
}

/// One replica of the chaos test.
struct Member {
    user: String,
    /// Its index in the test's list of started replicas.
    process: usize,
    /// The link it reaches the API server through, when it may be cut off.
    link: Option<SeverableLink>,
    /// When it was frozen, until it is thawed.
    frozen: Option<Instant>,
    /// Whether its link was cut.
    cut: bool,
}

async fn chaos(cx: &mut RealCluster, audit: &Path, replicas: &mut Vec<HostProcess>) -> Result<()> {
    cx.install_crds(&podset_crd()).await?;
    let seed = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| Timestamp::now().as_nanosecond() as u64 | 1);
    let mut dice = Dice(seed);
    let skew = Path::new(FAKETIME).is_file();
    cx.step(format!(
        "chaos seed {seed} (CHAOS_SEED repeats it); a clock running 2 s ahead: {}",
        if skew {
            "yes"
        } else {
            "no, libfaketime is not installed"
        }
    ));
    let users: Vec<String> = (0..CHAOS_USERS).map(chaos_user).collect();
    let mut fence_args = vec![
        "rbac".to_string(),
        "--write-fence".into(),
        "--write-fence-api-version".into(),
        "v1beta1".into(),
        "--leader-election-namespace".into(),
        cx.namespace.clone(),
        "--leader-election-id".into(),
        RING.into(),
    ];
    for user in &users {
        fence_args.extend(["--write-fence-user".to_string(), user.clone()]);
    }
    let generated = cx.host_command().args(&fence_args).output()?;
    ensure!(generated.status.success(), "rbac --write-fence failed");
    for document in serde_yaml_ng::Deserializer::from_str(&String::from_utf8(generated.stdout)?) {
        let object = <Value as serde::Deserialize>::deserialize(document)?;
        cx.apply_as(TEST_MANAGER, &object)
            .await?
            .context("applying the fence")?;
    }

    let mut members: Vec<Member> = Vec::new();
    let mut next_user = 0;
    let mut join =
        |cx: &RealCluster, replicas: &mut Vec<HostProcess>, how: &str| -> Result<Member> {
            let user = chaos_user(next_user);
            next_user += 1;
            ensure!(
                next_user <= CHAOS_USERS,
                "more replicas than the audit policy names"
            );
            let mut link = None;
            let path = minted(cx, &user, "system:masters")?;
            let process = match how {
                "through a link" => {
                    let severable =
                        SeverableLink::start(cx.own_control_plane()?.api_server_address()?)?;
                    let through = cx.workdir().join(format!("{user}-link.kubeconfig"));
                    kubeconfig::with_server(Some(&path), &severable.url(), &through)?;
                    link = Some(severable);
                    start_with(cx, &user, &through, &[], &[])?
                }
                "clock ahead" => start_with(
                    cx,
                    &user,
                    &path,
                    &[],
                    &[
                        ("LD_PRELOAD", FAKETIME),
                        ("FAKETIME", "+2s"),
                        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
                    ],
                )?,
                _ => start_with(cx, &user, &path, &[], &[])?,
            };
            replicas.push(process);
            Ok(Member {
                user,
                process: replicas.len() - 1,
                link,
                frozen: None,
                cut: false,
            })
        };
    for _ in 0..3 {
        members.push(join(cx, replicas, "plainly")?);
    }
    settled_over(
        cx,
        &members
            .iter()
            .map(|m| &replicas[m.process])
            .collect::<Vec<_>>(),
        &[0, 0, 0],
        3,
    )
    .await?;
    let mut created = 0;
    create(cx, 0..30).await?;
    created += 30;
    let api = cx.api(&podsets()).await?;
    let mut thaws: Vec<(String, Timestamp)> = Vec::new();
    let mut changes: Vec<String> = Vec::new();
    let mut step = 0;
    while changes.len() < CHAOS_CHANGES {
        // Thaw the replicas frozen past their Lease: once the fence's map
        // names them nowhere (their buckets moved). Each then finds its
        // Lease lost and exits on its own: it leaves the test's hands.
        let named = writers_named(cx).await?;
        let due = |m: &Member| {
            m.frozen
                .is_some_and(|at| at.elapsed() > LEASE_DURATION + RETRY_PERIOD * 2)
                && !named.contains(&m.user)
        };
        for member in members.iter().filter(|m| due(m)) {
            replicas[member.process].thaw()?;
            thaws.push((member.user.clone(), Timestamp::now()));
        }
        members.retain(|m| !due(m));
        members.retain(|m| {
            m.frozen.is_some() || replicas[m.process].exited().ok().flatten().is_none()
        });
        let working = members
            .iter()
            .filter(|m| m.frozen.is_none() && !m.cut)
            .count();
        // The first changes are one of each kind, so every run has them
        // all; then at random.
        let opening = OPENING.get(step).copied();
        step += 1;
        let action = if working < 2 {
            0
        } else if let Some(kind) = opening {
            kind
        } else if working >= 4 {
            1 + dice.below(4)
        } else {
            dice.below(6)
        };
        let pick = |dice: &mut Dice, members: &[Member]| -> Option<usize> {
            let candidates: Vec<usize> = (0..members.len())
                .filter(|&i| members[i].frozen.is_none() && !members[i].cut)
                .collect();
            (!candidates.is_empty()).then(|| candidates[dice.below(candidates.len())])
        };
        let said = match action {
            0 | 5..=7 => {
                let how = match (action, dice.below(3)) {
                    (5, _) if skew => "clock ahead",
                    (6, _) | (0, 0) => "through a link",
                    _ => "plainly",
                };
                let member = join(cx, replicas, how)?;
                let said = format!("{} joins ({how})", member.user);
                members.push(member);
                said
            }
            1 => {
                let Some(i) = pick(&mut dice, &members) else {
                    continue;
                };
                let member = members.remove(i);
                replicas[member.process].stop().await?;
                format!("{} stops (SIGTERM)", member.user)
            }
            2 => {
                let Some(i) = pick(&mut dice, &members) else {
                    continue;
                };
                let member = members.remove(i);
                replicas[member.process].sigkill()?;
                format!("{} is killed (SIGKILL)", member.user)
            }
            3 => {
                let Some(i) = pick(&mut dice, &members) else {
                    continue;
                };
                replicas[members[i].process].freeze()?;
                members[i].frozen = Some(Instant::now());
                format!("{} is frozen past its Lease (SIGSTOP)", members[i].user)
            }
            _ => {
                let Some(i) = (0..members.len()).find(|&i| {
                    members[i].frozen.is_none() && members[i].link.is_some() && !members[i].cut
                }) else {
                    continue;
                };
                if let Some(link) = &members[i].link {
                    link.sever();
                }
                members[i].cut = true;
                format!("{} is cut off from the API server", members[i].user)
            }
        };
        changes.push(said.clone());
        // PodSets created and changed throughout.
        create(cx, created..created + 5).await?;
        created += 5;
        for _ in 0..5 {
            let name = name_of(dice.below(created));
            let size = 1 + dice.below(3) as i64;
            api.patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"spec": {"size": size}})),
            )
            .await?;
        }
        cx.step(format!("change {}: {said}", changes.len()));
        tokio::time::sleep(Duration::from_secs(1 + dice.below(4) as u64)).await;
    }
    let kinds = [
        "(through a link)",
        "cut off",
        if skew { "(clock ahead)" } else { "joins" },
        "frozen",
        "SIGKILL",
        "SIGTERM",
        "(plainly)",
    ];
    for kind in kinds {
        ensure!(
            changes.iter().any(|c| c.contains(kind)),
            "no change of the kind {kind:?} among {changes:?}"
        );
    }
    // The last frozen replicas thawed (they exit on their own), and at
    // least two left working.
    let (frozen, working): (Vec<Member>, Vec<Member>) =
        members.into_iter().partition(|m| m.frozen.is_some());
    members = working;
    for member in frozen {
        while member
            .frozen
            .is_some_and(|at| at.elapsed() <= LEASE_DURATION + RETRY_PERIOD * 2)
            || writers_named(cx).await?.contains(&member.user)
        {
            ensure!(
                member
                    .frozen
                    .is_some_and(|at| at.elapsed() < LEASE_DURATION * 4),
                "the fence's map still names {}, frozen for {:.0} s",
                member.user,
                member
                    .frozen
                    .map(|at| at.elapsed().as_secs_f64())
                    .unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        replicas[member.process].thaw()?;
        thaws.push((member.user.clone(), Timestamp::now()));
    }
    for _ in 0..2 {
        members.push(join(cx, replicas, "plainly")?);
    }
    converged(cx, created).await?;
    cx.step(format!(
        "{} ring changes; every one of the {created} PodSets converged, none lost or doubled",
        changes.len()
    ));
    tokio::time::sleep(RETRY_PERIOD * 2).await;
    for member in &members {
        if replicas[member.process].exited()?.is_none() && !member.cut {
            replicas[member.process].stop().await?;
        }
    }
    let report = protocol_check(audit, &thaws)?;
    cx.step(format!("the audit log against the protocol: {report}"));
    Ok(())
}

/// The fence's map as published now, by bucket (`,w1,w2,`); `None`
/// before its first publication.
async fn fence_map(cx: &RealCluster) -> Result<Option<BTreeMap<String, String>>> {
    let configmaps = cx.api(&KindRef::new("", "v1", "ConfigMap")).await?;
    let Some(map) = configmaps.get_opt(&format!("{RING}-writers")).await? else {
        return Ok(None);
    };
    let data: BTreeMap<String, String> =
        serde_json::from_value(map.data["data"].clone()).unwrap_or_default();
    Ok(Some(
        data.into_iter().filter(|(k, _)| k != "ring").collect(),
    ))
}

/// The writers the fence's map names now.
async fn writers_named(cx: &RealCluster) -> Result<std::collections::BTreeSet<String>> {
    Ok(fence_map(cx)
        .await?
        .unwrap_or_default()
        .into_values()
        .flat_map(|v| {
            v.split(',')
                .filter(|w| !w.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect())
}

/// Starts replica `name` with the kubeconfig at `path`, `extra`
/// arguments and `env`.
fn start_with(
    cx: &RealCluster,
    name: &str,
    path: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Result<HostProcess> {
    start_serving(cx, name, &[example_plugin("podset")], path, extra, env)
}

/// Starts replica `name` serving `plugins`, with the kubeconfig at `path`,
/// `extra` arguments and `env`.
fn start_serving(
    cx: &RealCluster,
    name: &str,
    plugins: &[PathBuf],
    path: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Result<HostProcess> {
    let ns = cx.namespace.clone();
    cx.start_replica_with_env(
        name,
        plugins,
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
        &[
            &[("KUBECONFIG", path.to_str().context("a UTF-8 path")?)],
            env,
        ]
        .concat(),
    )
}

/// What one replica's Lease writes say, from the audit log.
#[derive(Default)]
struct LeaseLife {
    identity: String,
    /// Every renewal the API server took, and the ring version it said
    /// it had settled on then.
    renewals: Vec<(Timestamp, Option<String>)>,
    /// When its Lease was deleted (it left, or another removed it expired).
    deleted: Option<Timestamp>,
}

impl LeaseLife {
    /// Whether the others may still count it live at `at`: renewed within
    /// a Lease duration before, and not deleted since (by the API server's
    /// clock: the others' own clocks only ever see a renewal later).
    fn alive(&self, at: Timestamp) -> bool {
        let last = self.renewals.iter().rev().find(|(t, _)| *t <= at);
        let Some((renewed, _)) = last else {
            return false;
        };
        let deleted = self.deleted.is_some_and(|d| d > *renewed && d <= at);
        !deleted && at.duration_since(*renewed).as_secs_f64() <= LEASE_DURATION.as_secs_f64()
    }
}

/// Checks every write of the run against the handover protocol, read from
/// the audit log alone: a replica writes an object only while the last
/// ring it said it settled on gives it the object's bucket (an old owner
/// writes until its settle mark), and never while another replica that
/// may still count as live has held a claim on that bucket since earlier
/// (a new owner waits for the old one to settle or expire). Rings are
/// named by version; each is found among the sets of replicas live around
/// the time it was declared. Also: no write of a thawed replica landed.
fn protocol_check(audit: &Path, thaws: &[(String, Timestamp)]) -> Result<String> {
    use reconciler_host::sharding::assignment::{Replica, Ring, ShardKey};
    use reconciler_host::sharding::handover::version_of;

    let text = std::fs::read_to_string(audit.join("audit.log"))?;
    let mut leases: BTreeMap<String, LeaseLife> = BTreeMap::new();
    let mut writes: Vec<(Timestamp, String, String, String)> = Vec::new();
    for line in text.lines() {
        let entry: Value = serde_json::from_str(line)?;
        let code = entry["responseStatus"]["code"].as_u64().unwrap_or_default();
        if !(200..300).contains(&code) {
            continue;
        }
        let at: Timestamp = entry["requestReceivedTimestamp"]
            .as_str()
            .context("no timestamp")?
            .parse()?;
        let user = entry["user"]["username"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let reference = &entry["objectRef"];
        let name = reference["name"].as_str().unwrap_or_default();
        if reference["resource"] == "leases" {
            let owner = (0..CHAOS_USERS)
                .map(chaos_user)
                .find(|u| name.starts_with(&format!("{RING}-{u}-")));
            let Some(owner) = owner else { continue };
            let life = leases.entry(owner.clone()).or_default();
            if entry["verb"] == "delete" {
                life.deleted = Some(at);
            } else if owner == user {
                let body = &entry["requestObject"];
                if let Some(identity) = body["spec"]["holderIdentity"].as_str() {
                    life.identity = identity.to_string();
                }
                let settled = body["metadata"]["annotations"]["reconciler-host.io/settled-ring"]
                    .as_str()
                    .map(str::to_string);
                life.renewals.push((at, settled));
            }
        } else {
            let namespace = reference["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            writes.push((at, user, namespace, name.to_string()));
        }
    }
    for life in leases.values_mut() {
        life.renewals.sort_by_key(|(t, _)| *t);
    }
    // Each declared version resolved to its members: a set of the
    // replicas live around the time it was declared, the declarer among
    // them. Only versions are computed while searching (no assignment),
    // so every set of up to MAX_AROUND is tried.
    const MAX_AROUND: usize = 22;
    let mut rings: BTreeMap<String, Ring> = BTreeMap::new();
    let mut resolve = |version: &str, by: &str, at: Timestamp| -> Result<Ring, String> {
        if let Some(found) = rings.get(version) {
            return Ok(found.clone());
        }
        // A replica counts another live for a Lease duration after it
        // first saw its Lease, however old its last renewal: any Lease
        // that still existed then may be in the ring.
        let secs = |t: Timestamp| at.duration_since(t).as_secs_f64();
        let declarer = leases[by].identity.as_str();
        let around: Vec<&str> = leases
            .values()
            .filter(|l| {
                let created = l.renewals.first().is_some_and(|(t, _)| secs(*t) >= -5.0);
                let kept = l.deleted.is_none_or(|d| secs(d) <= 5.0);
                !l.identity.is_empty() && l.identity != declarer && created && kept
            })
            .map(|l| l.identity.as_str())
            .collect();
        if around.len() > MAX_AROUND {
            return Err(format!(
                "ring {version}: {} Leases around then, more than the {MAX_AROUND} this check searches",
                around.len()
            ));
        }
        // The declarer first counted in (a replica's ring holds itself
        // while it is live), then not.
        let members = |mask: u32, itself: bool| {
            around
                .iter()
                .enumerate()
                .filter(move |(i, _)| mask & (1 << i) != 0)
                .map(|(_, id)| Replica::new(id))
                .chain(itself.then(|| Replica::new(declarer)))
        };
        let found = [true, false]
            .into_iter()
            .flat_map(|itself| (0u32..(1 << around.len())).map(move |mask| (mask, itself)))
            .find(|(mask, itself)| version_of(members(*mask, *itself)) == version)
            .map(|(mask, itself)| Ring::new(members(mask, itself)))
            .ok_or_else(|| {
                format!(
                    "ring {version} is no set of the replicas live around then ({declarer} and {around:?})"
                )
            })?;
        rings.insert(version.to_string(), found.clone());
        Ok(found)
    };
    // By user: its declarations in order, each with the ring it names.
    type Declared = Vec<(Timestamp, Result<Ring, String>)>;
    let mut declared: BTreeMap<&str, Declared> = BTreeMap::new();
    for (user, life) in &leases {
        let mut last: Option<&str> = None;
        for (at, settled) in &life.renewals {
            if let Some(version) = settled.as_deref().filter(|v| Some(*v) != last) {
                declared
                    .entry(user)
                    .or_default()
                    .push((*at, resolve(version, user, *at)));
                last = Some(version);
            }
        }
    }
    // Since when `user` has held `bucket` without a break, at `at`.
    let claim = |user: &str, bucket, at: Timestamp| -> Result<Option<Timestamp>, String> {
        let Some(said) = declared.get(user) else {
            return Ok(None);
        };
        let identity = &leases[user].identity;
        let upto = said.iter().take_while(|(t, _)| *t <= at).count();
        let mut since = None;
        for (t, ring) in said[..upto].iter().rev() {
            let ring = ring
                .as_ref()
                .map_err(|e| format!("{user} settled at {t} on an unknown {e}"))?;
            if ring.owner_of(bucket) != Some(identity.as_str()) {
                break;
            }
            since = Some(*t);
        }
        Ok(since)
    };
    let mut violations = Vec::new();
    let mut checked = 0;
    for (at, user, namespace, name) in &writes {
        if !leases.contains_key(user) {
            continue;
        }
        let bucket = ShardKey::object("local", Some(namespace), name).bucket();
        checked += 1;
        let mine = match claim(user, bucket, *at) {
            Ok(Some(since)) => since,
            Ok(None) => {
                violations.push(format!(
                    "{at}: {user} wrote {name}, whose bucket its last settled ring does not give it"
                ));
                continue;
            }
            Err(e) => {
                violations.push(format!("{at}: {user} wrote {name}: {e}"));
                continue;
            }
        };
        for (other, other_life) in &leases {
            if other == user || !other_life.alive(*at) {
                continue;
            }
            if let Ok(Some(since)) = claim(other, bucket, *at)
                && since < mine
            {
                violations.push(format!(
                    "{at}: {user} wrote {name} while {other}, live, held its bucket since {since} (before {user}, since {mine})"
                ));
            }
        }
    }
    for (user, thawed) in thaws {
        let landed = writes
            .iter()
            .filter(|(at, u, _, _)| u == user && at >= thawed)
            .count();
        if landed > 0 {
            violations.push(format!(
                "{landed} write(s) of {user} landed after it was thawed at {thawed}"
            ));
        }
    }
    ensure!(
        violations.is_empty(),
        "{} protocol violation(s), such as:\n{}",
        violations.len(),
        violations
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    ensure!(checked > 0, "no write of a replica in the audit log");
    Ok(format!(
        "{checked} writes by {} replicas checked, {} settle marks read, {} thawed replica(s) landed nothing; no violation",
        leases.len(),
        declared.values().map(Vec::len).sum::<usize>(),
        thaws.len()
    ))
}

#[cfg(test)]
mod protocol_checks {
    use reconciler_host::sharding::assignment::{Replica, Ring, ShardKey};
    use reconciler_host::sharding::handover::ring_version;

    use super::*;

    const A: &str = "replica-00_aaa";
    const B: &str = "replica-01_bbb";

    fn at(second: i64) -> String {
        Timestamp::from_second(1_800_000_000 + second)
            .unwrap()
            .to_string()
    }

    fn renewal(second: i64, user: &str, identity: &str, settled: &Ring) -> String {
        json!({
            "verb": "patch", "user": {"username": user},
            "objectRef": {"resource": "leases", "name": format!("{RING}-{}", identity.replace('_', "-"))},
            "responseStatus": {"code": 200}, "requestReceivedTimestamp": at(second),
            "requestObject": {"spec": {"holderIdentity": identity},
                "metadata": {"annotations": {"reconciler-host.io/settled-ring": ring_version(settled)}}},
        })
        .to_string()
    }

    fn write(second: i64, user: &str, name: &str) -> String {
        json!({
            "verb": "patch", "user": {"username": user},
            "objectRef": {"resource": "deployments", "namespace": "ns", "name": name},
            "responseStatus": {"code": 200}, "requestReceivedTimestamp": at(second),
        })
        .to_string()
    }

    /// The check on a made-up log: `b_writes_at` is when the new owner
    /// writes a key that moved to it; the old owner settles at 10.
    fn check(b_writes_at: i64) -> Result<String> {
        let one = Ring::new([Replica::new(A)]);
        let two = Ring::new([Replica::new(A), Replica::new(B)]);
        let moved = (0..1000)
            .map(|i| format!("ps-{i:03}"))
            .find(|n| {
                let bucket = ShardKey::object("local", Some("ns"), n).bucket();
                one.owner_of(bucket) == Some(A) && two.owner_of(bucket) == Some(B)
            })
            .unwrap();
        let mut lines = vec![
            renewal(0, "replica-00", A, &one),
            write(1, "replica-00", &moved),
        ];
        for second in (2..20).step_by(2) {
            let settled_a = if second >= 10 { &two } else { &one };
            lines.push(renewal(second, "replica-00", A, settled_a));
            lines.push(renewal(second + 1, "replica-01", B, &two));
        }
        lines.push(write(b_writes_at, "replica-01", &moved));
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("audit.log"), lines.join("\n"))?;
        protocol_check(dir.path(), &[])
    }

    #[test]
    fn a_new_owner_writing_before_the_old_one_settled_is_a_violation_and_after_is_not() {
        let early = check(7).unwrap_err().to_string();
        assert!(
            early.contains("replica-01 wrote ps-") && early.contains("while replica-00"),
            "{early}"
        );
        check(13).unwrap();
    }

    #[test]
    fn a_ring_of_many_leases_is_resolved_whoever_declares_it() {
        // Leases of replicas gone without a word stay until a survivor has
        // seen them unrenewed for a Lease duration; a ring declared then
        // may name all of them.
        let users: Vec<String> = (0..14).map(chaos_user).collect();
        let identities: Vec<String> = users.iter().map(|u| format!("{u}_{u}")).collect();
        let all = Ring::new(identities.iter().map(|id| Replica::new(id)));
        let last = &identities[13];
        let owned = (0..1000)
            .map(|i| format!("ps-{i:03}"))
            .find(|n| all.owner_of(ShardKey::object("local", Some("ns"), n).bucket()) == Some(last))
            .unwrap();
        let mut lines: Vec<String> = users
            .iter()
            .zip(&identities)
            .map(|(user, identity)| renewal(0, user, identity, &all))
            .collect();
        lines.push(write(1, &users[13], &owned));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("audit.log"), lines.join("\n")).unwrap();
        let report = protocol_check(dir.path(), &[]).unwrap();
        assert!(report.contains("1 writes by 14 replicas"), "{report}");
    }
}
