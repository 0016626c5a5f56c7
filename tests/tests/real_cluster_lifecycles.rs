//! Every example's lifecycle, and hot reload, on a real API server: what a
//! user sees after `reconciler-host run` with the compiled plugins of
//! `plugins/` and the CRDs of `crds/`. The same lifecycles run on the
//! embedded cluster with a virtual clock in `classic_operators.rs`; here the
//! clock is real, the kube-controller-manager creates ReplicaSets and Pods,
//! and the host reloads a plugin file that a user replaces.
//!
//! Skipped (passing, with a SKIPPED line) unless `RECONCILER_E2E=1` and
//! `KUBECONFIG` are set:
//!
//! ```text
//! scripts/build-plugins
//! eval "$(../shared/kube/kube up)"
//! RECONCILER_E2E=1 cargo test -p reconciler-tests --test real_cluster_lifecycles -- --nocapture
//! ```
//!
//! Each test runs in a namespace of its own with a host of its own (see
//! `reconciler_tests::real_cluster`), so they run in parallel, also beside
//! other real-cluster suites on the same cluster. No kubelet runs: Pods stay
//! Pending, and the test plays the Job controller's verdict on a Job.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use reconciler_sdk::KindRef;
use reconciler_sdk::k8s_openapi::jiff::{SignedDuration, Timestamp, tz::TimeZone};
use reconciler_tests::real_cluster::{Probe, RealCluster, Suite, controller_of, uid_of};
use reconciler_tests::{example_plugin, root, test_plugin};
use serde_json::{Value, json};

const SUITE: Suite = Suite {
    name: "real_cluster_lifecycles",
    host_binary: env!("CARGO_BIN_EXE_reconciler-host-under-test"),
};

/// Host start (plugin compiles are cached across tests), a few reconciles,
/// the controller-manager's work: seconds; the margin is for a loaded CI
/// machine.
const HOST_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a state that must not change is watched for changing.
const STEADY_FOR: Duration = Duration::from_secs(4);

fn deployments() -> KindRef {
    KindRef::new("apps", "v1", "Deployment")
}

fn replica_sets() -> KindRef {
    KindRef::new("apps", "v1", "ReplicaSet")
}

fn pods() -> KindRef {
    KindRef::new("", "v1", "Pod")
}

fn jobs() -> KindRef {
    KindRef::new("batch", "v1", "Job")
}

fn config_maps() -> KindRef {
    KindRef::new("", "v1", "ConfigMap")
}

fn crd(file: &str) -> PathBuf {
    root().join("crds").join(file)
}

fn name_of(object: &Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn names(objects: &[Value]) -> Vec<String> {
    objects.iter().map(|o| name_of(o).to_string()).collect()
}

fn generation(object: &Value) -> i64 {
    object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// The condition `type_` of `object`'s status, if it has one.
fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Waits for the Deployment `name`, controlled by the object of uid
/// `owner_uid`, for which `ready` says yes; returns it.
async fn wait_for_deployment(
    cx: &RealCluster,
    name: &str,
    owner_uid: &str,
    what: &str,
    ready: impl Fn(&Value) -> bool,
) -> Result<Value> {
    cx.wait_for(
        &format!("Deployment {name} controlled by uid {owner_uid} with {what}"),
        HOST_TIMEOUT,
        async || {
            let Some(deployment) = cx.get(&deployments(), name).await? else {
                return Ok(Probe::Pending("not found".to_string()));
            };
            match controller_of(&deployment)? {
                Some(c) if c.uid == owner_uid => {}
                other => return Ok(Probe::Pending(format!("controller {other:?}"))),
            }
            Ok(if ready(&deployment) {
                Probe::Ready(deployment)
            } else {
                Probe::Pending(format!(
                    "generation {}, spec {}",
                    generation(&deployment),
                    deployment["spec"]
                ))
            })
        },
    )
    .await
}

// ---------------------------------------------------------------- memcached

fn memcached_kind() -> KindRef {
    KindRef::new("example.com", "v1alpha1", "Memcached")
}

fn memcached(name: &str, size: i64) -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "Memcached",
           "metadata": {"name": name}, "spec": {"size": size}})
}

/// The memcached plugin asks to look again a minute after it creates or
/// resizes the Deployment (`RESIZE_REQUEUE`).
const MEMCACHED_REQUEUE: Duration = Duration::from_secs(60);
/// How long after the create the test resizes a Memcached, so that the
/// resizes' requeues come at least this much later than the create's.
const RESIZE_GAP: Duration = Duration::from_secs(5);
/// How late the create's requeue may come: less than `RESIZE_GAP`.
const REQUEUE_SLACK: Duration = Duration::from_secs(4);
/// Reconciles that change nothing are logged at debug level
/// (`engine::record::log_record`); the requeue is one of them.
const EVERY_RECONCILE_LOGGED: &str = "info,reconciler_host::engine::record=debug";

/// Waits until `status.nodes` of Memcached `name` lists exactly the Pods
/// carrying its labels, `count` of them (the ReplicaSet controller creates
/// them; with no kubelet they stay Pending).
async fn wait_for_nodes(cx: &RealCluster, name: &str, count: usize) -> Result<Vec<String>> {
    let selector = format!("app.kubernetes.io/name=memcached,memcached={name}");
    cx.wait_for(
        &format!("status.nodes of Memcached {name} to list its {count} Pods"),
        HOST_TIMEOUT,
        async || {
            let pods = names(&cx.list(&pods(), &selector).await?);
            let nodes = cx.must_get(&memcached_kind(), name).await?["status"]["nodes"].clone();
            Ok(if pods.len() == count && nodes == json!(pods) {
                Probe::Ready(pods)
            } else {
                Probe::Pending(format!("Pods {pods:?}, status.nodes {nodes}"))
            })
        },
    )
    .await
}

/// The lines of `run`'s log that record a reconcile of Memcached `name`.
fn memcached_reconciles(cx: &RealCluster, name: &str) -> Result<Vec<String>> {
    let object = format!("memcached Memcached {}/{name}: ", cx.namespace);
    Ok(cx.host()?.log_lines_with(&[&object]))
}

/// When the host logged `line`: text logs start with an RFC 3339 time.
fn logged_at(line: &str) -> Result<Timestamp> {
    let first = line.split_whitespace().next().unwrap_or("");
    first
        .parse()
        .with_context(|| format!("a log line that does not start with a time: {line}"))
}

/// memcached: a Memcached gets a Deployment of `spec.size` replicas, a size
/// change resizes it, `status.nodes` follows the Pods the ReplicaSet
/// controller makes and removes, and the requeue the plugin asks for when
/// it creates the Deployment comes a minute later, with nothing else
/// happening.
#[test]
fn memcached_sizes_its_deployment_lists_its_pods_and_requeues() {
    SUITE.run(
        "memcached_sizes_its_deployment_lists_its_pods_and_requeues",
        async |cx| {
            cx.install_crds(&crd("memcached.yaml")).await?;
            cx.start_host_with_env(
                &[example_plugin("memcached")],
                &[("RUST_LOG", EVERY_RECONCILE_LOGGED)],
            )?;
            let ns = cx.namespace.clone();
            let created_at = Instant::now();
            let cache = cx.create(memcached("cache", 2)).await?;
            let uid = uid_of(&cache)?;

            let deployment = wait_for_deployment(cx, "cache", &uid, "2 replicas", |d| {
                d["spec"]["replicas"] == 2
            })
            .await?;
            let container = &deployment["spec"]["template"]["spec"]["containers"][0];
            ensure!(
                container["image"] == "memcached:1.6-alpine"
                    && container["ports"][0]["containerPort"] == 11211,
                "the Deployment should run memcached:1.6-alpine on port 11211: {container}"
            );
            let created = cx
                .wait_for_log(
                    &[
                        &format!("memcached Memcached {ns}/cache: created Deployment {ns}/cache"),
                        "requeue in 1m",
                    ],
                    HOST_TIMEOUT,
                )
                .await?;
            cx.step(format!("the host logged: {created}"));
            let nodes = wait_for_nodes(cx, "cache", 2).await?;
            cx.step(format!("status.nodes lists {nodes:?}"));
            // The resizes ask for requeues of their own, a minute after
            // each: seconds apart from the create's, they cannot be taken
            // for it below.
            tokio::time::sleep(RESIZE_GAP).await;

            cx.merge_patch(&memcached_kind(), "cache", json!({"spec": {"size": 3}}))
                .await?;
            wait_for_deployment(cx, "cache", &uid, "3 replicas", |d| {
                d["spec"]["replicas"] == 3
            })
            .await?;
            cx.wait_for_log(
                &[
                    &format!("memcached Memcached {ns}/cache: updated Deployment {ns}/cache"),
                    "requeue in 1m",
                ],
                HOST_TIMEOUT,
            )
            .await?;
            let resized = cx.events_about("Memcached", "cache").await?;
            ensure!(
                resized
                    .iter()
                    .any(|e| e.reason == "Resized" && e.message.contains("from 2 to 3 replicas")),
                "an Event Resized should say the Deployment went from 2 to 3 replicas: {resized:?}"
            );
            wait_for_nodes(cx, "cache", 3).await?;

            cx.merge_patch(&memcached_kind(), "cache", json!({"spec": {"size": 1}}))
                .await?;
            wait_for_deployment(cx, "cache", &uid, "1 replica", |d| d["spec"]["replicas"] == 1)
                .await?;
            let nodes = wait_for_nodes(cx, "cache", 1).await?;
            cx.step(format!("scaled to 1: status.nodes lists {nodes:?}"));

            // Nothing changes in the cluster from here on (no kubelet: the
            // Pod stays Pending), so the next reconcile is the requeue the
            // create asked for, a minute after it.
            let quiet_from = created_at + MEMCACHED_REQUEUE - Duration::from_secs(12);
            tokio::time::sleep_until(quiet_from.into()).await;
            let before = memcached_reconciles(cx, "cache")?.len();
            cx.step(format!(
                "{before} reconciles of Memcached cache so far; waiting for the requeue"
            ));
            let requeued = cx
                .wait_for(
                    "a reconcile of Memcached cache with nothing changed: its requeue",
                    Duration::from_secs(40),
                    async || {
                        let lines = memcached_reconciles(cx, "cache")?;
                        Ok(match lines.get(before) {
                            Some(line) => Probe::Ready(line.clone()),
                            None => Probe::Pending(format!("{} reconciles", lines.len())),
                        })
                    },
                )
                .await?;
            cx.step(format!("the host logged: {requeued}"));
            ensure!(
                requeued.ends_with(": in sync"),
                "the requeued reconcile should find everything in sync: {requeued}"
            );
            // By the host's own clock: a minute after the reconcile that
            // asked for it, not earlier (something else woke it) nor much later.
            let waited = logged_at(&created)?.duration_until(logged_at(&requeued)?);
            let expected = SignedDuration::try_from(MEMCACHED_REQUEUE)?;
            ensure!(
                waited >= expected - SignedDuration::from_millis(500)
                    && waited <= expected + SignedDuration::try_from(REQUEUE_SLACK)?,
                "once the cluster had settled, the next reconcile of Memcached cache came {waited:#} after \
                 the create's, not the {} s of the requeue it asked for: {requeued}",
                MEMCACHED_REQUEUE.as_secs()
            );
            Ok(())
        },
    );
}

// -------------------------------------------------------- kubernetescluster

fn kubernetes_cluster_kind() -> KindRef {
    KindRef::new("example.com", "v1alpha1", "KubernetesCluster")
}

const OPERATION: &str = "app.kubernetes.io/operation";
const CLEANUP_FINALIZER: &str = "example.com/cluster-cleanup";

fn kubernetes_cluster(name: &str, operation: &str, workers: i64) -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "KubernetesCluster",
           "metadata": {"name": name, "annotations": {OPERATION: operation}},
           "spec": {"masters": 3, "workers": workers, "version": "1.33", "timeoutSeconds": 600}})
}

/// Plays the Job controller: no kubelet runs the Job's Pod, so the test
/// writes the verdict the controller would write when it ends.
async fn finish_job(cx: &RealCluster, job: &str, succeeded: bool) -> Result<()> {
    let status = if succeeded {
        json!({"status": {"succeeded": 1,
            "conditions": [{"type": "Complete", "status": "True"}]}})
    } else {
        json!({"status": {"failed": 1,
            "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                            "message": "Job has reached the specified backoff limit"}]}})
    };
    cx.merge_patch_status(&jobs(), job, status).await?;
    cx.step(format!(
        "Job {job} marked {}",
        if succeeded { "Complete" } else { "Failed" }
    ));
    Ok(())
}

/// Waits until KubernetesCluster `name` is in `phase` and `ready` says yes.
async fn wait_for_phase(
    cx: &RealCluster,
    name: &str,
    phase: &str,
    ready: impl Fn(&Value) -> bool,
) -> Result<Value> {
    cx.wait_for(
        &format!("KubernetesCluster {name} in phase {phase:?}"),
        HOST_TIMEOUT,
        async || {
            let cluster = cx.must_get(&kubernetes_cluster_kind(), name).await?;
            Ok(if cluster["status"]["phase"] == phase && ready(&cluster) {
                Probe::Ready(cluster)
            } else {
                Probe::Pending(format!("status {}", cluster["status"]))
            })
        },
    )
    .await
}

/// Waits until the Job `name` exists, controlled by the object of uid
/// `owner_uid`.
async fn wait_for_job(cx: &RealCluster, name: &str, owner_uid: &str) -> Result<Value> {
    cx.wait_for(
        &format!("Job {name} controlled by uid {owner_uid}"),
        HOST_TIMEOUT,
        async || {
            let Some(job) = cx.get(&jobs(), name).await? else {
                let all = names(&cx.list(&jobs(), "").await?);
                return Ok(Probe::Pending(format!("not found; Jobs {all:?}")));
            };
            Ok(match controller_of(&job)? {
                Some(c) if c.uid == owner_uid => Probe::Ready(job),
                other => Probe::Pending(format!("controller {other:?}")),
            })
        },
    )
    .await
}

/// kubernetescluster: operations asked for through the annotation run as
/// Jobs (Creating -> Running when its Job completes), a scaling Job that
/// fails fails the cluster with the Job's reason, and a delete is held by
/// the cleanup finalizer until the cleanup Job completes.
#[test]
fn kubernetescluster_runs_annotated_operations_as_jobs_and_cleans_up_before_it_goes() {
    SUITE.run(
        "kubernetescluster_runs_annotated_operations_as_jobs_and_cleans_up_before_it_goes",
        async |cx| {
            cx.install_crds(&crd("kubernetescluster.yaml")).await?;
            cx.start_host(&[example_plugin("kubernetescluster")])?;
            let prod = cx.create(kubernetes_cluster("prod", "creating", 2)).await?;
            let uid = uid_of(&prod)?;

            let creating = wait_for_phase(cx, "prod", "Creating", |_| true).await?;
            ensure!(
                creating["metadata"]["finalizers"] == json!([CLEANUP_FINALIZER]),
                "the host should have added the cleanup finalizer: {}",
                creating["metadata"]
            );
            let creating_job = "prod-creating-1";
            wait_for_job(cx, creating_job, &uid).await?;
            let record = cx.must_get(&config_maps(), creating_job).await?;
            ensure!(
                record["data"]["operation"] == "creating",
                "ConfigMap {creating_job} should record the creating operation: {}",
                record["data"]
            );

            finish_job(cx, creating_job, true).await?;
            let running = wait_for_phase(cx, "prod", "Running", |c| {
                c["status"]["lastJob"] == creating_job
            })
            .await?;
            ensure!(
                running["status"]["lastOperation"] == "creating"
                    && condition(&running, "Ready").is_some_and(|c| c["status"] == "True"),
                "a Running cluster should record its creating operation and be Ready: {}",
                running["status"]
            );
            tokio::time::sleep(STEADY_FOR).await;
            let listed = names(&cx.list(&jobs(), "example.com/cluster=prod").await?);
            ensure!(
                listed == [creating_job],
                "a finished operation never runs twice: Jobs {listed:?}"
            );

            // The spec change and the annotation in one update.
            let scale = json!({"metadata": {"annotations": {OPERATION: "scaling"}},
                               "spec": {"workers": 5}});
            cx.merge_patch(&kubernetes_cluster_kind(), "prod", scale)
                .await?;
            wait_for_phase(cx, "prod", "Scaling", |_| true).await?;
            let scaling_job = "prod-scaling-2";
            wait_for_job(cx, scaling_job, &uid).await?;
            finish_job(cx, scaling_job, false).await?;
            let failed = wait_for_phase(cx, "prod", "Failed", |c| {
                c["status"]["lastJob"] == scaling_job
            })
            .await?;
            let ready = condition(&failed, "Ready")
                .with_context(|| format!("a Failed cluster without a Ready condition: {failed}"))?;
            ensure!(
                ready["status"] == "False"
                    && ready["reason"] == "JobFailed"
                    && ready["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("Job has reached the specified backoff limit")),
                "Ready should be False, reason JobFailed, with the Job's message: {ready}"
            );
            let events = cx.events_about("KubernetesCluster", "prod").await?;
            ensure!(
                events
                    .iter()
                    .any(|e| e.event_type == "Warning" && e.reason == "OperationFailed"),
                "a Warning Event OperationFailed should say the scaling failed: {events:?}"
            );

            cx.delete(&kubernetes_cluster_kind(), "prod").await?;
            let terminating = wait_for_phase(cx, "prod", "Terminating", |c| {
                c["status"]["running"]["operation"] == "deleting"
            })
            .await?;
            ensure!(
                terminating["metadata"]["deletionTimestamp"].is_string(),
                "the cleanup finalizer should hold the deleted KubernetesCluster: {}",
                terminating["metadata"]
            );
            let cleanup = terminating["status"]["running"]["job"]
                .as_str()
                .context("status.running names no Job")?
                .to_string();
            wait_for_job(cx, &cleanup, &uid).await?;
            tokio::time::sleep(STEADY_FOR).await;
            ensure!(
                cx.get(&kubernetes_cluster_kind(), "prod").await?.is_some(),
                "KubernetesCluster prod went before its cleanup Job {cleanup} completed"
            );

            finish_job(cx, &cleanup, true).await?;
            cx.wait_for(
                "KubernetesCluster prod to be gone once its cleanup completed",
                HOST_TIMEOUT,
                async || {
                    Ok(match cx.get(&kubernetes_cluster_kind(), "prod").await? {
                        None => Probe::Ready(()),
                        Some(c) => Probe::Pending(format!(
                            "finalizers {}, status {}",
                            c["metadata"]["finalizers"], c["status"]
                        )),
                    })
                },
            )
            .await?;
            Ok(())
        },
    );
}

// ---------------------------------------------------- the rollout scheduler

fn rollout_schedule_kind() -> KindRef {
    KindRef::new("example.com", "v1alpha1", "RolloutSchedule")
}

const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";
/// A schedule that does not come during a test.
const NEW_YEAR: &str = "0 0 1 1 *";
/// The least time between now and the scheduled minute the test picks: the
/// schedule must reach the plugins before it.
const SCHEDULE_LEAD: Duration = Duration::from_secs(6);

fn annotated_deployment(name: &str, schedule: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "annotations": {
            "rollout-scheduler.io/enabled": "true",
            "rollout-scheduler.io/schedule": schedule}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}})
}

fn restarted_at(deployment: &Value) -> &Value {
    &deployment["spec"]["template"]["metadata"]["annotations"][RESTARTED_AT]
}

/// The first whole minute at least `lead` from now, UTC.
fn next_minute(lead: Duration) -> Result<Timestamp> {
    let earliest = Timestamp::now().as_second() + i64::try_from(lead.as_secs())?;
    let minute = (earliest + 59).div_euclid(60) * 60;
    Ok(Timestamp::from_second(minute)?)
}

/// Waits until the RolloutSchedule `name` exists, owned by the Deployment
/// of uid `deployment_uid`, and `ready` says yes.
async fn wait_for_schedule(
    cx: &RealCluster,
    name: &str,
    deployment_uid: &str,
    what: &str,
    ready: impl Fn(&Value) -> bool,
) -> Result<Value> {
    cx.wait_for(
        &format!("RolloutSchedule {name} with {what}"),
        HOST_TIMEOUT,
        async || {
            let Some(schedule) = cx.get(&rollout_schedule_kind(), name).await? else {
                return Ok(Probe::Pending("not found".to_string()));
            };
            match controller_of(&schedule)? {
                Some(c) if c.uid == deployment_uid => {}
                other => return Ok(Probe::Pending(format!("controller {other:?}"))),
            }
            Ok(if ready(&schedule) {
                Probe::Ready(schedule)
            } else {
                Probe::Pending(format!(
                    "spec {}, status {}",
                    schedule["spec"], schedule["status"]
                ))
            })
        },
    )
    .await
}

/// Fails if Deployment `name` was restarted: it has a restartedAt.
async fn ensure_not_restarted(cx: &RealCluster, name: &str, when: &str) -> Result<()> {
    let deployment = cx.must_get(&deployments(), name).await?;
    ensure!(
        restarted_at(&deployment).is_null(),
        "Deployment {name} was restarted {when}: restartedAt {}",
        restarted_at(&deployment)
    );
    Ok(())
}

/// Waits until Deployment `name` is restarted, and checks that it was for
/// `due` and not before it.
async fn wait_for_restart(cx: &RealCluster, name: &str, due: Timestamp) -> Result<Value> {
    let due_text = due.to_string();
    let wait = Timestamp::now().duration_until(due).unsigned_abs() + Duration::from_secs(20);
    cx.wait_for(
        &format!("Deployment {name} restarted for {due_text}"),
        wait,
        async || {
            let deployment = cx.must_get(&deployments(), name).await?;
            let value = restarted_at(&deployment);
            if value.is_null() {
                return Ok(Probe::Pending("no restartedAt".to_string()));
            }
            let now = Timestamp::now();
            ensure!(
                *value == due_text.as_str(),
                "Deployment {name} was restarted with restartedAt {value}, not {due_text}"
            );
            ensure!(
                now >= due,
                "Deployment {name} was restarted at {now}, before its time {due_text}"
            );
            Ok(Probe::Ready(deployment))
        },
    )
    .await
}

/// Checks that Deployment `web` was restarted once, for `due`: its spec
/// changed once since `generation_before`, one Event, one new ReplicaSet,
/// and its schedule's status says so.
async fn ensure_restarted_once(
    cx: &RealCluster,
    web_uid: &str,
    due: Timestamp,
    generation_before: i64,
) -> Result<()> {
    let due_text = due.to_string();
    let deployment = cx.must_get(&deployments(), "web").await?;
    ensure!(
        *restarted_at(&deployment) == due_text.as_str()
            && generation(&deployment) == generation_before + 1,
        "Deployment web should have changed once, for {due_text}: generation {} (was \
         {generation_before}), restartedAt {}",
        generation(&deployment),
        restarted_at(&deployment)
    );
    let restarts: Vec<_> = cx
        .events_about("RolloutSchedule", "web")
        .await?
        .into_iter()
        .filter(|e| e.reason == "Restarted")
        .collect();
    ensure!(
        restarts.len() == 1 && restarts[0].message.contains(&due_text),
        "one Event Restarted for {due_text} expected: {restarts:?}"
    );
    let status = cx.must_get(&rollout_schedule_kind(), "web").await?["status"].clone();
    let next = due.checked_add(SignedDuration::from_hours(1))?.to_string();
    ensure!(
        status["lastRestart"] == due_text.as_str() && status["nextRestart"] == next.as_str(),
        "status should say lastRestart {due_text}, nextRestart {next}: {status}"
    );
    let mut owned = Vec::new();
    for rs in cx.list(&replica_sets(), "app=web").await? {
        if controller_of(&rs)?.is_some_and(|c| c.uid == web_uid) {
            owned.push(name_of(&rs).to_string());
        }
    }
    ensure!(
        owned.len() == 2,
        "one restart rolls one new ReplicaSet: Deployment web has {owned:?}"
    );
    Ok(())
}

/// The rollout scheduler pair: an annotated Deployment gets a (disabled)
/// RolloutSchedule; one enabled ahead of a scheduled minute restarts its
/// Deployment at that minute, with that time, exactly once; one enabled
/// just after a scheduled minute passed while it was disabled restarts
/// nothing (it was never due).
#[test]
fn rollout_scheduler_restarts_once_at_the_scheduled_minute_and_not_on_enabling() {
    SUITE.run(
        "rollout_scheduler_restarts_once_at_the_scheduled_minute_and_not_on_enabling",
        async |cx| {
            cx.install_crds(&crd("rolloutschedule.yaml")).await?;
            cx.start_host(&[
                example_plugin("rollout_schedules"),
                example_plugin("rollout_restarter"),
            ])?;
            // web restarts at the scheduled minute; late, disabled until
            // that minute passed, at every minute.
            let web = cx.create(annotated_deployment("web", NEW_YEAR)).await?;
            let web_uid = uid_of(&web)?;
            let late = cx.create(annotated_deployment("late", "* * * * *")).await?;
            let late_uid = uid_of(&late)?;
            let schedule = wait_for_schedule(cx, "web", &web_uid, "its spec", |s| {
                s["spec"]["deploymentName"] == "web" && s["spec"]["schedule"] == NEW_YEAR
            })
            .await?;
            ensure!(
                schedule["spec"]["enabled"] == false,
                "a new RolloutSchedule should start disabled: {}",
                schedule["spec"]
            );
            wait_for_schedule(cx, "late", &late_uid, "Ready False, Disabled", |s| {
                condition(s, "Ready").is_some_and(|c| c["reason"] == "Disabled")
            })
            .await?;

            let enable = json!({"spec": {"enabled": true}});
            cx.merge_patch(&rollout_schedule_kind(), "web", enable.clone())
                .await?;
            wait_for_schedule(cx, "web", &web_uid, "status.enabledSince", |s| {
                s["status"]["enabledSince"].is_string()
                    && condition(s, "Ready").is_some_and(|c| c["status"] == "True")
            })
            .await?;
            ensure_not_restarted(cx, "web", "when its schedule was enabled").await?;

            let due = next_minute(SCHEDULE_LEAD)?;
            let minute = due.to_zoned(TimeZone::UTC).minute();
            let cron = format!("{minute} * * * *");
            // A Deployment's generation counts changes of its annotations
            // too: the one to compare with is this patch's.
            let patch =
                json!({"metadata": {"annotations": {"rollout-scheduler.io/schedule": cron}}});
            let before = generation(&cx.merge_patch(&deployments(), "web", patch).await?);
            cx.step(format!("web's schedule is now {cron:?}: due at {due}"));
            wait_for_schedule(cx, "web", &web_uid, &format!("schedule {cron:?}"), |s| {
                s["spec"]["schedule"] == cron.as_str()
            })
            .await?;

            let restarted = wait_for_restart(cx, "web", due).await?;
            ensure!(
                restarted["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.27",
                "a restart writes only the annotation: {}",
                restarted["spec"]["template"]
            );

            // late's minute has passed while it was disabled: enabling it
            // now must not restart it for that minute.
            let since_due = due.duration_until(Timestamp::now());
            cx.merge_patch(&rollout_schedule_kind(), "late", enable)
                .await?;
            let enabled = wait_for_schedule(cx, "late", &late_uid, "status.enabledSince", |s| {
                s["status"]["enabledSince"].is_string()
            })
            .await?;
            cx.step(format!(
                "late enabled {:.1} s after {due}: status {}",
                since_due.as_secs_f64(),
                enabled["status"]
            ));

            // Exactly once: nothing more moves while the state settles.
            tokio::time::sleep(STEADY_FOR).await;
            let when = format!("when its schedule was enabled after {due} passed");
            ensure_not_restarted(cx, "late", &when).await?;
            let late_status = &cx.must_get(&rollout_schedule_kind(), "late").await?["status"];
            ensure!(
                late_status["lastRestart"].is_null(),
                "RolloutSchedule late recorded a restart: {late_status}"
            );
            ensure_restarted_once(cx, &web_uid, due, before).await
        },
    );
}

// ------------------------------------------------------------- hot reload

fn podset(name: &str) -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
           "metadata": {"name": name}, "spec": {"size": 1}})
}

/// The pod template annotation of podset's test-v2 build
/// (plugins/podset/src/lib.rs, `TEST_V2_ANNOTATION`).
const V2_ANNOTATION: &str = "podset.example.com/build";

fn built_by_v2(deployment: &Value) -> bool {
    deployment["spec"]["template"]["metadata"]["annotations"][V2_ANNOTATION] == "test-v2"
}

/// Hot reload under `run`: a new build of podset dropped over the old file
/// (temp name, then rename) is loaded, reported as 0.1.0 -> 0.2.0, and
/// reconciles every PodSet once, changing each Deployment; a corrupt file
/// dropped over it is reported, naming the file, and 0.2.0 keeps serving,
/// new PodSets too.
#[test]
fn a_new_podset_build_reconciles_every_podset_once_and_a_corrupt_file_keeps_it_serving() {
    SUITE.run(
        "a_new_podset_build_reconciles_every_podset_once_and_a_corrupt_file_keeps_it_serving",
        async |cx| {
            cx.install_crds(&crd("podset.yaml")).await?;
            cx.start_host(&[example_plugin("podset")])?;
            let v2 = std::fs::read(test_plugin("podset-v2"))
                .context("reading the test-v2 build of podset")?;
            cx.wait_for_log(&["loaded plugin podset 0.1.0"], HOST_TIMEOUT)
                .await?;

            let mut podsets = Vec::new();
            for name in ["a", "b", "c"] {
                let created = cx.create(podset(name)).await?;
                podsets.push((name, uid_of(&created)?));
            }
            let mut generations = Vec::new();
            for (name, uid) in &podsets {
                let deployment = wait_for_deployment(cx, name, uid, "1 replica", |d| {
                    d["spec"]["replicas"] == 1
                })
                .await?;
                ensure!(
                    !built_by_v2(&deployment),
                    "Deployment {name} carries {V2_ANNOTATION} before the new build came: {}",
                    deployment["spec"]["template"]["metadata"]
                );
                generations.push(generation(&deployment));
            }

            let file = cx.host()?.put_plugin("podset.wasm", &v2)?;
            cx.step(format!("the test-v2 build of podset is now {}", file.display()));
            let reloaded = cx
                .wait_for_log(
                    &["reloaded plugin podset: 0.1.0", "-> 0.2.0", &file.display().to_string()],
                    HOST_TIMEOUT,
                )
                .await?;
            cx.step(format!("the host logged: {reloaded}"));
            for ((name, uid), before) in podsets.iter().zip(&generations) {
                wait_for_deployment(cx, name, uid, &format!("{V2_ANNOTATION}: test-v2"), |d| {
                    built_by_v2(d) && generation(d) == before + 1
                })
                .await?;
            }
            // Once: each Deployment's spec changed once (a Deployment's
            // generation counts its spec and annotation changes), to what
            // only the new version writes, and nothing flips it back.
            tokio::time::sleep(STEADY_FOR).await;
            for ((name, _), before) in podsets.iter().zip(&generations) {
                let deployment = cx.must_get(&deployments(), name).await?;
                ensure!(
                    generation(&deployment) == before + 1 && built_by_v2(&deployment),
                    "Deployment {name} should have been changed once, by podset 0.2.0: generation {} \
                     (was {before}), template {}",
                    generation(&deployment),
                    deployment["spec"]["template"]["metadata"]
                );
            }

            cx.host()?
                .put_plugin("podset.wasm", b"\x00asm? no: these bytes are not a plugin\xff\xfe")?;
            let failed = cx
                .wait_for_log(
                    &[&file.display().to_string(), "keeps serving"],
                    HOST_TIMEOUT,
                )
                .await?;
            cx.step(format!("the host logged: {failed}"));
            ensure!(
                failed.contains("error"),
                "the failed reload should be logged as an error: {failed}"
            );
            let created = cx.create(podset("d")).await?;
            wait_for_deployment(cx, "d", &uid_of(&created)?, "the test-v2 annotation", built_by_v2)
                .await?;
            let unloaded = cx.host()?.log_lines_with(&["unloaded plugin podset"]);
            ensure!(
                unloaded.is_empty(),
                "a corrupt file must not unload the version serving: {unloaded:?}"
            );
            Ok(())
        },
    );
}
