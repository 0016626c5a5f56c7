//! A candidate in a canary rollout against a real API server and a real
//! registry: a Plugin serving the JS podset with `spec.rollout` naming a
//! candidate that asks for twice each size (and fails outright on PodSets
//! labelled `tests.example.com/candidate-fails`).
//!
//! - At 10%, the candidate decides and writes for exactly the PodSets whose
//!   place in the rollout is in the first tenth, about a tenth of them, with
//!   the serving version's field manager; the rest keep the serving size.
//! - Labelling the candidate's PodSets makes it fail on them: the gate
//!   breaks, the rollout rolls back by itself (status, condition
//!   `RolledBack`), and every Deployment returns to the serving size.
//! - With two replicas under leader election, the leader is SIGKILLed at
//!   the second step: the next leader resumes at that step (it never starts
//!   over at the first), then promotes the candidate, which then decides
//!   for every PodSet.
//! - In waves across member clusters: the candidate decides in the member
//!   labelled `env=staging` first, then in every member, then is promoted.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use reconciler_host::plugin::canary_share::{PLACES, place};
use reconciler_sdk::KindRef;
use reconciler_tests::oci_registry::{Mode, Registry, skip};
use reconciler_tests::real_cluster::members::{
    client_of, create_podset, member_secret_labelled, prepare_member, replicas_of,
};
use reconciler_tests::real_cluster::{HostProcess, OwnControlPlane, Probe, RealCluster, Suite};
use serde_json::{Value, json};

const SUITE: Suite = Suite {
    name: "canary_real_cluster",
    host_binary: env!("CARGO_BIN_EXE_reconciler-host-under-test"),
};

const TIMEOUT: Duration = Duration::from_secs(240);
const FAILS: &str = "tests.example.com/candidate-fails";

fn plugins_kind() -> KindRef {
    KindRef::new("reconciler-host.io", "v1alpha1", "Plugin")
}

fn podsets() -> KindRef {
    KindRef::new("example.com", "v1alpha1", "PodSet")
}

fn deployments() -> KindRef {
    KindRef::new("apps", "v1", "Deployment")
}

fn name_of(i: usize) -> String {
    format!("ps-{i:03}")
}

/// `count` PodSets of size 1.
async fn podsets_of_size_one(cx: &RealCluster, count: usize) -> Result<()> {
    for i in 0..count {
        cx.create(
            json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
            "metadata": {"name": name_of(i)}, "spec": {"size": 1}}),
        )
        .await?;
    }
    cx.step(format!("created {count} PodSets of size 1"));
    Ok(())
}

/// The Plugin serving `:1` with `rollout` (the candidate `:2` added).
async fn plugin_with_rollout(
    cx: &RealCluster,
    registry: &Registry,
    rollout: Value,
) -> Result<String> {
    let namespace = &cx.namespace;
    let plugin = format!("{namespace}-podset");
    let mut rollout = rollout;
    rollout["candidate"] = json!(registry.reference("plugins/podset:2"));
    rollout["mode"] = json!("canary");
    cx.create(json!({
        "apiVersion": "reconciler-host.io/v1alpha1", "kind": "Plugin",
        "metadata": {"name": plugin, "labels": {"reconciler-tests/namespace": namespace}},
        "spec": {
            "source": registry.reference("plugins/podset:1"),
            "insecure": true,
            "verification": {"publicKeys": [{"secretRef": {"name": "plugin-keys"}}]},
            "rollout": rollout,
        },
    }))
    .await?;
    cx.step(format!(
        "created Plugin {plugin} with spec.rollout {rollout}"
    ));
    Ok(plugin)
}

/// The arguments a host needs to serve pulled plugins in this test.
fn pulling_args(cx: &RealCluster) -> Vec<String> {
    let cache = cx.workdir().join("registry-cache");
    vec![
        "--registry-cache".into(),
        cache.display().to_string(),
        "--plugin-secrets-namespace".into(),
        cx.namespace.clone(),
    ]
}

/// The PodSets among the first `count` a share of `percent` takes.
fn share_of(cx: &RealCluster, count: usize, percent: u32) -> BTreeSet<String> {
    (0..count)
        .map(name_of)
        .filter(|n| place(Some(&cx.namespace), n) < percent * (PLACES / 100))
        .collect()
}

/// Waits until `status.rollout.canary` satisfies `ready`; returns it.
async fn wait_for_canary(
    cx: &RealCluster,
    plugin: &str,
    what: &str,
    ready: impl Fn(&Value) -> bool,
) -> Result<Value> {
    cx.wait_for(what, TIMEOUT, async || {
        let p = cx.must_get(&plugins_kind(), plugin).await?;
        let canary = &p["status"]["rollout"]["canary"];
        Ok(match ready(canary) {
            true => Probe::Ready(p["status"]["rollout"].clone()),
            false => Probe::Pending(p["status"]["rollout"].to_string()),
        })
    })
    .await
}

/// Waits until the Deployment of each of the first `count` PodSets has 2
/// replicas when `doubled` names it and 1 otherwise.
async fn wait_for_sizes(cx: &RealCluster, count: usize, doubled: &BTreeSet<String>) -> Result<()> {
    let what = format!(
        "{} of {count} Deployments at size 2, the rest at 1",
        doubled.len()
    );
    wait_for_sizes_by(cx, count, &what, |name| match doubled.contains(name) {
        true => 2,
        false => 1,
    })
    .await
}

/// Waits until the Deployment of each of the first `count` PodSets has the
/// replicas `want` gives for its name.
async fn wait_for_sizes_by(
    cx: &RealCluster,
    count: usize,
    what: &str,
    want: impl Fn(&str) -> i64,
) -> Result<()> {
    cx.wait_for(what, TIMEOUT, async || {
        let found = cx.list(&deployments(), "").await?;
        let mut wrong = Vec::new();
        for i in 0..count {
            let name = name_of(i);
            let want = want(&name);
            let replicas = found
                .iter()
                .find(|d| d["metadata"]["name"] == name.as_str())
                .map(|d| d["spec"]["replicas"].clone());
            if replicas != Some(json!(want)) {
                wrong.push(format!("{name}: {replicas:?}, want {want}"));
            }
        }
        Ok(match wrong.is_empty() {
            true => Probe::Ready(()),
            false => Probe::Pending(format!("{} wrong, first {:?}", wrong.len(), wrong.first())),
        })
    })
    .await
}

#[test]
fn a_ten_percent_canary_decides_for_its_share_and_rolls_back_when_its_gate_breaks() {
    const TEST: &str =
        "a_ten_percent_canary_decides_for_its_share_and_rolls_back_when_its_gate_breaks";
    if skip(SUITE.name, TEST, Mode::Anonymous) {
        return;
    }
    SUITE.run(TEST, async |cx| ten_percent(cx).await);
}

/// Enough PodSets that a tenth of them is a tenth within a few points on
/// any namespace (one standard deviation is 1.7 points).
const MANY: usize = 300;

async fn ten_percent(cx: &mut RealCluster) -> Result<()> {
    let registry = Registry::with_podset_versions(cx).await?;
    podsets_of_size_one(cx, MANY).await?;
    let args = pulling_args(cx);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    cx.start_host_with_args(&[], &args)?;

    cx.step("1. a canary at 10% (the next step an hour away)");
    let plugin =
        plugin_with_rollout(cx, &registry, json!({"steps": [10, 100], "interval": "1h"})).await?;
    let rollout = wait_for_canary(cx, &plugin, "the canary at its first step", |c| {
        c["phase"] == "Progressing" && c["percent"] == 10
    })
    .await?;
    ensure!(
        rollout["summary"] == "canary 10% (step 1 of 2)",
        "summary: {rollout}"
    );
    let share = share_of(cx, MANY, 10);
    let points = share.len() as f64 * 100.0 / MANY as f64;
    cx.step(format!(
        "the share's hash takes {} of {MANY} PodSets ({points:.1}%)",
        share.len()
    ));
    ensure!(
        (points - 10.0).abs() <= 6.0,
        "a 10% share takes {points:.1}% of the PodSets"
    );
    wait_for_sizes(cx, MANY, &share).await?;
    cx.step(format!(
        "exactly those {} Deployments have the candidate's size 2; the other {} keep 1",
        share.len(),
        MANY - share.len()
    ));

    cx.step("2. one field manager: the candidate applies as the serving version does");
    for name in share.iter().take(3) {
        let d = cx.must_get(&deployments(), name).await?;
        let appliers: BTreeSet<&str> = d["metadata"]["managedFields"]
            .as_array()
            .context("managedFields")?
            .iter()
            .filter(|f| f["operation"] == "Apply")
            .filter_map(|f| f["manager"].as_str())
            .collect();
        ensure!(
            appliers == BTreeSet::from(["reconciler-host/podset-js"]),
            "Deployment {name} is applied by {appliers:?}"
        );
    }

    cx.step(
        "3. its PodSets are labelled for the candidate to fail on and resized to 3: \
         the gate breaks and the rollout rolls back",
    );
    let labelled = Instant::now();
    for name in &share {
        cx.merge_patch(
            &podsets(),
            name,
            json!({"metadata": {"labels": {FAILS: "yes"}}, "spec": {"size": 3}}),
        )
        .await?;
    }
    let rollout = wait_for_canary(cx, &plugin, "the rollout rolled back", |c| {
        c["phase"] == "RolledBack"
    })
    .await?;
    let canary = &rollout["canary"];
    ensure!(
        canary["reason"] == "ErrorRate"
            && canary["message"]
                .as_str()
                .is_some_and(|m| m.contains("maxErrorRate")),
        "rolled back for the error rate: {canary}"
    );
    ensure!(
        rollout["conditions"][0]["type"] == "RolledBack"
            && rollout["conditions"][0]["reason"] == "ErrorRate",
        "condition RolledBack: {rollout}"
    );
    cx.wait_for_log(&["rolled back: at step 1 (10%)"], TIMEOUT)
        .await?;
    let serving = "the serving sizes: 3 for the resized PodSets, 1 for the rest";
    wait_for_sizes_by(cx, MANY, serving, |name| match share.contains(name) {
        true => 3,
        false => 1,
    })
    .await?;
    cx.step(format!(
        "every Deployment is at the serving version's size {:.1} s after the candidate began to fail",
        labelled.elapsed().as_secs_f64()
    ));
    Ok(())
}

#[test]
fn a_new_leader_resumes_the_canary_at_the_step_it_reached_and_promotes_it() {
    const TEST: &str = "a_new_leader_resumes_the_canary_at_the_step_it_reached_and_promotes_it";
    if skip(SUITE.name, TEST, Mode::Anonymous) {
        return;
    }
    SUITE.run(TEST, async |cx| {
        let mut replicas = Vec::new();
        let result = new_leader(cx, &mut replicas).await;
        if result.is_err() {
            for r in &replicas {
                eprintln!("--- replica (pid {}) log:\n{}", r.pid(), r.log_text());
            }
        }
        result
    });
}

const FEW: usize = 20;

async fn new_leader(cx: &mut RealCluster, replicas: &mut Vec<HostProcess>) -> Result<()> {
    let registry = Registry::with_podset_versions(cx).await?;
    podsets_of_size_one(cx, FEW).await?;
    let ns = cx.namespace.clone();
    let mut args = vec![
        "--leader-election".to_string(),
        "--leader-election-namespace".into(),
        ns.clone(),
        "--leader-election-id".into(),
        "canary".into(),
    ];
    args.extend(pulling_args(cx));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    replicas.push(cx.start_replica("replica-a", &[], &args)?);
    cx.wait_for_log_of(&replicas[0], &["leading: lease"], TIMEOUT)
        .await?;
    replicas.push(cx.start_replica("replica-b", &[], &args)?);
    cx.wait_for_log_of(&replicas[1], &["waiting for leadership of lease"], TIMEOUT)
        .await?;

    cx.step("1. steps 10, 50, 100 of 30 s each; the leader reaches the second step");
    let plugin = plugin_with_rollout(
        cx,
        &registry,
        json!({"steps": [10, 50, 100], "interval": "30s"}),
    )
    .await?;
    wait_for_canary(cx, &plugin, "the canary at 50%", |c| {
        c["phase"] == "Progressing" && c["step"] == 1
    })
    .await?;
    wait_for_sizes(cx, FEW, &share_of(cx, FEW, 50)).await?;

    cx.step("2. the leader is SIGKILLed at 50%; the next leader resumes there");
    let before = cx.must_get(&plugins_kind(), &plugin).await?;
    let at_kill = before["status"]["rollout"]["canary"].clone();
    ensure!(at_kill["step"] == 1, "still at 50% when killed: {at_kill}");
    let started = at_kill["stepStartedAt"].clone();
    replicas[0].sigkill()?;
    cx.wait_for_log_of(&replicas[1], &["leading: lease"], TIMEOUT)
        .await?;
    // Two of its follower's looks at the rollout (one each 5 s), well
    // within the 30 s it must watch a step before it moves on.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let resumed = cx.must_get(&plugins_kind(), &plugin).await?;
    let canary = &resumed["status"]["rollout"]["canary"];
    ensure!(
        canary["step"] == 1
            && canary["phase"] == "Progressing"
            && canary["stepStartedAt"] == started,
        "the new leader did not resume step 2 as it was (begun at {started}): {canary}"
    );
    let starts = replicas[1].log_lines_with(&["canary rollout started"]);
    ensure!(
        starts.is_empty(),
        "the new leader started the rollout over: {starts:?}"
    );

    cx.step("3. after a whole interval of its own at each step, it promotes the candidate");
    let rollout = wait_for_canary(cx, &plugin, "the candidate promoted", |c| {
        c["phase"] == "Promoted"
    })
    .await?;
    ensure!(
        rollout["summary"]
            .as_str()
            .is_some_and(|s| s.contains("promoted")),
        "{rollout}"
    );
    let steps = replicas[1].log_lines_with(&["step 3 of 3"]);
    ensure!(!steps.is_empty(), "replica-b took the last step itself");
    let all: BTreeSet<String> = (0..FEW).map(name_of).collect();
    wait_for_sizes(cx, FEW, &all).await?;
    cx.step("promoted: every Deployment has the candidate's size");
    for replica in replicas.drain(..) {
        drop(replica);
    }
    Ok(())
}

#[test]
fn waves_take_the_candidate_to_the_staging_member_first_then_to_every_member() {
    const TEST: &str = "waves_take_the_candidate_to_the_staging_member_first_then_to_every_member";
    if skip(SUITE.name, TEST, Mode::Anonymous) {
        return;
    }
    SUITE.run_on_own_control_plane(TEST, &[], async |cx| waves(cx).await);
}

/// PodSets per member.
const PER_MEMBER: usize = 4;

/// Waits until every PodSet's Deployment in `member` has `size` replicas.
async fn wait_for_member_sizes(
    cx: &RealCluster,
    member: &kube::Client,
    which: &str,
    size: i64,
) -> Result<()> {
    let ns = cx.namespace.clone();
    let what = format!("every Deployment in {which} at size {size}");
    cx.wait_for(&what, TIMEOUT, async || {
        let mut wrong = Vec::new();
        for i in 0..PER_MEMBER {
            let replicas = replicas_of(member, &ns, &name_of(i)).await?;
            if replicas != Some(size) {
                wrong.push(format!("{}: {replicas:?}", name_of(i)));
            }
        }
        Ok(match wrong.is_empty() {
            true => Probe::Ready(()),
            false => Probe::Pending(wrong.join(", ")),
        })
    })
    .await
}

async fn waves(cx: &mut RealCluster) -> Result<()> {
    let registry = Registry::with_podset_versions(cx).await?;
    let ns = cx.namespace.clone();
    cx.step("members staging (env=staging) and prod (env=prod), each with PodSets of size 1");
    let (staging_plane, prod_plane) = (OwnControlPlane::up(&[])?, OwnControlPlane::up(&[])?);
    let mut members = Vec::new();
    for (name, plane) in [("staging", &staging_plane), ("prod", &prod_plane)] {
        let kubeconfig = std::fs::read_to_string(plane.kubeconfig())?;
        let client = client_of(&kubeconfig).await?;
        prepare_member(&client, &ns).await?;
        member_secret_labelled(cx, name, &kubeconfig, &[("env", name)]).await?;
        for i in 0..PER_MEMBER {
            create_podset(&client, &ns, &name_of(i), 1).await?;
        }
        members.push(client);
    }
    let (staging, prod) = (&members[0], &members[1]);
    let hub = cx.own_control_plane()?.kubeconfig().to_path_buf();
    let mut args = vec![
        "--no-local-cluster".to_string(),
        "--cluster-secrets".into(),
        "--cluster-secrets-namespace".into(),
        ns.clone(),
    ];
    args.extend(pulling_args(cx));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    cx.start_host_with_kubeconfig_and_args(&[], &hub, &args)?;

    cx.step("1. wave 1 selects env=staging: the candidate decides there, and only there");
    let plugin = plugin_with_rollout(
        cx,
        &registry,
        json!({"clusters": [{"matchLabels": {"env": "staging"}}, {}], "interval": "30s"}),
    )
    .await?;
    wait_for_canary(cx, &plugin, "the first wave", |c| {
        c["phase"] == "Progressing" && c["step"] == 0
    })
    .await?;
    wait_for_member_sizes(cx, staging, "staging", 2).await?;
    wait_for_member_sizes(cx, prod, "prod", 1).await?;
    let rollout = cx.must_get(&plugins_kind(), &plugin).await?["status"]["rollout"].clone();
    ensure!(
        rollout["canary"]["step"] == 0 && rollout["summary"] == "canary wave 1 of 2",
        "still the first wave once staging converged: {rollout}"
    );
    for i in 0..PER_MEMBER {
        let replicas = replicas_of(prod, &ns, &name_of(i)).await?;
        ensure!(
            replicas == Some(1),
            "prod's {} has {replicas:?} replicas during the staging wave",
            name_of(i)
        );
    }
    cx.step("staging's Deployments have the candidate's size 2; prod's keep 1");

    cx.step("2. its gate kept, wave 2 (every cluster) brings prod too; then it is promoted");
    wait_for_member_sizes(cx, prod, "prod", 2).await?;
    wait_for_canary(cx, &plugin, "the candidate promoted", |c| {
        c["phase"] == "Promoted"
    })
    .await?;
    wait_for_member_sizes(cx, staging, "staging", 2).await?;
    cx.wait_for_log(&["wave 2 of 2"], TIMEOUT).await?;
    drop(staging_plane);
    drop(prod_plane);
    Ok(())
}
