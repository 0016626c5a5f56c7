//! One host, several real clusters: `reconciler-host run --no-local-cluster`
//! on a hub (the test's own control plane) that names its members by
//! kubeconfig Secrets: `alpha` (control plane A) and `beta` (control plane
//! B). Checked by what a user sees: each member's PodSets get their
//! Deployments in that member, and nowhere else.
//!
//! - PodSets in both members converge;
//! - B's API server killed: A keeps converging new work and the host stays
//!   up; B back: its changes converge;
//! - beta's Secret rotated to a new client certificate: the member is
//!   engaged anew, without a restart, and converges;
//! - a member whose credentials lack RBAC (`gamma`, user `nobody` on B) is
//!   reported naming what it was refused;
//! - beta's Secret deleted: the member is disengaged, its cache freed, and
//!   B's audit log shows no request from the host after it.
//!
//! And leader election on the hub with members: two replicas, the leader
//! reconciles its own cluster and a member; killed with SIGKILL, the
//! standby takes over both.
//!
//! The control planes are the test's own (`../shared/kube`, one state
//! directory each); skipped, saying so, without it.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use kube::api::{Api, DynamicObject};
use reconciler_sdk::k8s_openapi::jiff::Timestamp;
use reconciler_tests::real_cluster::members::{
    client_of, create_podset, member_secret, podset_resource, prepare_member, replicas_of,
};
use reconciler_tests::real_cluster::{
    HostProcess, OwnControlPlane, Probe, RealCluster, Suite, audit_log_flags,
};
use reconciler_tests::{example_plugin, root};
use serde_json::Value;

const SUITE: Suite = Suite {
    name: "multi_cluster_real_cluster",
    host_binary: env!("CARGO_BIN_EXE_reconciler-host-under-test"),
};

const CONVERGE: Duration = Duration::from_secs(90);

async fn wait_for_deployment(
    cluster: &RealCluster,
    member: &kube::Client,
    which: &str,
    name: &str,
    size: i64,
) -> Result<()> {
    let ns = cluster.namespace.clone();
    cluster
        .wait_for(
            &format!("Deployment {ns}/{name} with {size} replicas in {which}"),
            CONVERGE,
            async || {
                Ok(match replicas_of(member, &ns, name).await? {
                    Some(n) if n == size => Probe::Ready(()),
                    other => Probe::Pending(format!("replicas {other:?}")),
                })
            },
        )
        .await
}

/// Waits until the Events about Secret `secret` include every reason.
async fn wait_for_reasons(cluster: &RealCluster, secret: &str, wanted: &[&str]) -> Result<()> {
    cluster
        .wait_for(
            &format!("Events {wanted:?} on Secret {secret}"),
            Duration::from_secs(30),
            async || {
                let reasons: Vec<String> = cluster
                    .events_about("Secret", secret)
                    .await?
                    .into_iter()
                    .map(|e| e.reason)
                    .collect();
                Ok(if wanted.iter().all(|w| reasons.iter().any(|r| r == w)) {
                    Probe::Ready(())
                } else {
                    Probe::Pending(format!("reasons {reasons:?}"))
                })
            },
        )
        .await
}

/// B's API server writes an audit entry for every request the rotated
/// credentials make (user `rotated-admin`): after beta is disengaged,
/// there must be none.
fn audited_plane(audit: &Path) -> Result<OwnControlPlane> {
    let flags = audit_log_flags(audit, "- level: Metadata\n  users: [rotated-admin]\n")?;
    OwnControlPlane::up(&[("APISERVER_EXTRA", flags.as_str())])
}

/// Requests `user` made of B that reached it after `since`, from B's
/// audit log.
fn requests_after(audit: &Path, user: &str, since: Timestamp) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(audit.join("audit.log")).unwrap_or_default();
    let mut after = Vec::new();
    for line in text.lines() {
        let entry: Value = serde_json::from_str(line)?;
        let received: Timestamp = entry["requestReceivedTimestamp"]
            .as_str()
            .context("an audit entry without requestReceivedTimestamp")?
            .parse()?;
        if entry["user"]["username"] == user && received > since {
            after.push(format!(
                "{} {} {}",
                received, entry["verb"], entry["requestURI"]
            ));
        }
    }
    Ok(after)
}

#[test]
fn a_hub_serves_two_members_and_survives_losing_one() {
    SUITE.run_on_own_control_plane(
        "a_hub_serves_two_members_and_survives_losing_one",
        &[],
        async |cluster| {
            let ns = cluster.namespace.clone();
            cluster.step("starting members A and B (B audited)");
            let a = OwnControlPlane::up(&[])?;
            let audit = tempfile::tempdir()?;
            let b = audited_plane(audit.path())?;
            let a_kubeconfig = std::fs::read_to_string(a.kubeconfig())?;
            let b_kubeconfig = std::fs::read_to_string(b.kubeconfig())?;
            let a_client = client_of(&a_kubeconfig).await?;
            let b_client = client_of(&b_kubeconfig).await?;
            prepare_member(&a_client, &ns).await?;
            prepare_member(&b_client, &ns).await?;
            member_secret(cluster, "alpha", &a_kubeconfig).await?;
            member_secret(cluster, "beta", &b_kubeconfig).await?;

            let hub = cluster.own_control_plane()?.kubeconfig().to_path_buf();
            cluster.start_host_with_kubeconfig_and_args(
                &[example_plugin("podset")],
                &hub,
                &[
                    "--no-local-cluster",
                    "--no-plugin-resources",
                    "--cluster-secrets",
                    "--cluster-secrets-namespace",
                    &ns,
                ],
            )?;
            cluster.step("a PodSet in each member converges in that member");
            create_podset(&a_client, &ns, "one", 1).await?;
            create_podset(&b_client, &ns, "two", 2).await?;
            wait_for_deployment(cluster, &a_client, "A", "one", 1).await?;
            wait_for_deployment(cluster, &b_client, "B", "two", 2).await?;
            ensure!(
                replicas_of(&b_client, &ns, "one").await?.is_none()
                    && replicas_of(&a_client, &ns, "two").await?.is_none(),
                "a PodSet's Deployment appeared in the other cluster"
            );
            // The plugin was told its member.
            wait_for_status_cluster(cluster, &b_client, "two", "beta").await?;

            cluster.step("B's API server killed: A keeps converging");
            b.kill("kube-apiserver")?;
            cluster
                .wait_for_log(&["cluster beta does not answer"], Duration::from_secs(60))
                .await?;
            create_podset(&a_client, &ns, "three", 1).await?;
            wait_for_deployment(cluster, &a_client, "A", "three", 1).await?;
            cluster.host()?.ensure_running()?;

            cluster.step("B back: its changes converge");
            b.up_again()?;
            cluster
                .wait_for_log(&["cluster beta answers again"], Duration::from_secs(60))
                .await?;
            create_podset(&b_client, &ns, "two", 3).await?;
            create_podset(&b_client, &ns, "four", 1).await?;
            wait_for_deployment(cluster, &b_client, "B", "two", 3).await?;
            wait_for_deployment(cluster, &b_client, "B", "four", 1).await?;
            wait_for_reasons(cluster, "member-beta", &["Unreachable", "Reachable"]).await?;

            cluster.step("beta's Secret rotated to a new client certificate");
            let rotated = reconciler_tests::real_cluster::kubeconfig::minted(&b, "rotated-admin", "system:masters")?;
            member_secret(cluster, "beta", &rotated).await?;
            cluster
                .wait_for_log(&["re-engaged cluster beta"], Duration::from_secs(30))
                .await?;
            create_podset(&b_client, &ns, "five", 2).await?;
            wait_for_deployment(cluster, &b_client, "B", "five", 2).await?;
            // The source Secret says what became of it.
            wait_for_reasons(cluster, "member-beta", &["Engaged", "Reengaged"]).await?;
            ensure!(
                !requests_after(audit.path(), "rotated-admin", Timestamp::UNIX_EPOCH)?.is_empty(),
                "B's audit log shows no request with the rotated credentials: the check below would prove nothing"
            );

            cluster.step("a member whose credentials lack RBAC is reported naming the refusal");
            let nobody = reconciler_tests::real_cluster::kubeconfig::minted(&b, "nobody", "nobodies")?;
            member_secret(cluster, "gamma", &nobody).await?;
            let line = cluster
                .wait_for_log(&["gamma", "podset", "forbidden"], Duration::from_secs(60))
                .await?;
            ensure!(
                line.contains("nobody") && line.contains("cannot list resource \"podsets\""),
                "the refusal does not name the user and the rule: {line}"
            );

            cluster.step("beta's Secret deleted: the member is disengaged");
            let secrets: Api<k8s_openapi::api::core::v1::Secret> =
                Api::namespaced(cluster.client.clone(), &ns);
            secrets.delete("member-beta", &Default::default()).await?;
            let line = cluster
                .wait_for_log(&["disengaged cluster beta"], Duration::from_secs(30))
                .await?;
            ensure!(
                line.contains("objects cached freed"),
                "the disengage does not say its cache went: {line}"
            );
            // Requests already on the wire may still arrive; none may be
            // made from here on, for longer than a health probe's period.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let quiet_from = Timestamp::now();
            create_podset(&b_client, &ns, "six", 1).await?;
            tokio::time::sleep(Duration::from_secs(15)).await;
            ensure!(
                replicas_of(&b_client, &ns, "six").await?.is_none(),
                "a disengaged member still got a Deployment"
            );
            let late = requests_after(audit.path(), "rotated-admin", quiet_from)?;
            ensure!(
                late.is_empty(),
                "the host still sent requests to the disengaged member B: {late:?}"
            );
            create_podset(&a_client, &ns, "seven", 1).await?;
            wait_for_deployment(cluster, &a_client, "A", "seven", 1).await?;
            drop((a, b));
            Ok(())
        },
    );
}

/// Waits until PodSet `name` on `member` says in its status which
/// cluster it is in.
async fn wait_for_status_cluster(
    cluster: &RealCluster,
    member: &kube::Client,
    name: &str,
    expected: &str,
) -> Result<()> {
    let ns = cluster.namespace.clone();
    let api: Api<DynamicObject> = Api::namespaced_with(member.clone(), &ns, &podset_resource());
    cluster
        .wait_for(
            &format!("PodSet {ns}/{name}'s status to name cluster {expected}"),
            CONVERGE,
            async || {
                let status = api.get(name).await?.data["status"].clone();
                Ok(if status["cluster"] == expected {
                    Probe::Ready(())
                } else {
                    Probe::Pending(format!("status {status}"))
                })
            },
        )
        .await
}

#[test]
fn the_standby_replica_takes_over_every_member() {
    SUITE.run_on_own_control_plane(
        "the_standby_replica_takes_over_every_member",
        &[],
        async |cluster| {
            printing_logs(cluster, async |cluster, replicas| {
                standby_takes_over(cluster, replicas).await
            })
            .await
        },
    );
}

/// Runs `body` with the replicas it starts, printing their logs if it
/// fails.
async fn printing_logs(
    cluster: &mut RealCluster,
    body: impl AsyncFnOnce(&mut RealCluster, &mut Vec<HostProcess>) -> Result<()>,
) -> Result<()> {
    let mut replicas = Vec::new();
    let outcome = body(cluster, &mut replicas).await;
    if outcome.is_err() {
        for replica in &replicas {
            eprintln!("--- replica log:\n{}", replica.log_tail());
        }
    }
    for replica in &replicas {
        let _ = replica.sigkill();
    }
    outcome
}

async fn standby_takes_over(
    cluster: &mut RealCluster,
    replicas: &mut Vec<HostProcess>,
) -> Result<()> {
    const LEASE: &str = "fleet-failover";
    let ns = cluster.namespace.clone();
    cluster.step("starting member A");
    let a = OwnControlPlane::up(&[])?;
    let a_kubeconfig = std::fs::read_to_string(a.kubeconfig())?;
    let a_client = client_of(&a_kubeconfig).await?;
    prepare_member(&a_client, &ns).await?;
    cluster
        .install_crds(&root().join("crds/podset.yaml"))
        .await?;
    member_secret(cluster, "alpha", &a_kubeconfig).await?;
    let hub_client = cluster.client.clone();

    let hub = cluster
        .own_control_plane()?
        .kubeconfig()
        .display()
        .to_string();
    let args = [
        "--no-plugin-resources",
        "--cluster-secrets",
        "--cluster-secrets-namespace",
        &ns,
        "--leader-election",
        "--leader-election-namespace",
        &ns,
        "--leader-election-id",
        LEASE,
    ];
    let env = [("KUBECONFIG", hub.as_str())];
    let plugins = [example_plugin("podset")];
    let lease = format!("{ns}/{LEASE}");
    replicas.push(cluster.start_replica_with_env("replica-a", &plugins, &args, &env)?);
    let leading = format!("leading: lease {lease} is held by this process (replica-a_");
    cluster
        .wait_for_log_of(&replicas[0], &[&leading], CONVERGE)
        .await?;
    replicas.push(cluster.start_replica_with_env("replica-b", &plugins, &args, &env)?);
    let waiting = format!("waiting for leadership of lease {lease} held by replica-a_");
    cluster
        .wait_for_log_of(&replicas[1], &[&waiting], CONVERGE)
        .await?;

    cluster.step("the leader serves the hub's own cluster and member alpha");
    create_podset(&hub_client, &ns, "home", 1).await?;
    create_podset(&a_client, &ns, "away", 1).await?;
    wait_for_deployment(cluster, &hub_client, "the hub", "home", 1).await?;
    wait_for_deployment(cluster, &a_client, "A", "away", 1).await?;
    for standby_wrote in ["loaded plugin", "podset PodSet", "engaged cluster"] {
        let lines = replicas[1].log_lines_with(&[standby_wrote]);
        ensure!(
            lines.is_empty(),
            "the standby replica-b logged {lines:?} while replica-a led"
        );
    }

    replicas[0].sigkill()?;
    cluster.step("killed replica-a with SIGKILL; both PodSets scaled meanwhile");
    create_podset(&hub_client, &ns, "home", 2).await?;
    create_podset(&a_client, &ns, "away", 3).await?;
    let taking_over = format!("leading: lease {lease} is held by this process (replica-b_");
    cluster
        .wait_for_log_of(&replicas[1], &[&taking_over], Duration::from_secs(60))
        .await?;
    wait_for_deployment(cluster, &hub_client, "the hub", "home", 2).await?;
    wait_for_deployment(cluster, &a_client, "A", "away", 3).await?;
    cluster.step("replica-b took over and converged both clusters");
    drop(a);
    Ok(())
}
