//! Sharding on a real API server: the ring of replicas from their Leases.
//! Three replicas join and each sees all three, then each says it settled
//! on that ring and each sees all settled; one stops renewing (as a
//! replica killed with SIGKILL does) and the others drop it once its Lease
//! expires; one leaves gracefully and is gone from the others' view within
//! a retry period or two.
//!
//! Skipped (passing, with a SKIPPED line) unless `RECONCILER_E2E=1` and
//! `KUBECONFIG` are set.

use std::time::Duration;

use anyhow::Result;
use reconciler_host::sharding::handover::{Handover, ring_version};
use reconciler_host::sharding::membership::{Membership, MembershipConfig, RING_LABEL};
use reconciler_tests::real_cluster::{Probe, RealCluster, Suite};

const SUITE: Suite = Suite {
    name: "sharding_real_cluster",
    host_binary: env!("CARGO_BIN_EXE_reconciler-host-under-test"),
};

/// Short Leases, so expiry is seconds away.
fn config(cx: &RealCluster, identity: &str) -> MembershipConfig {
    MembershipConfig {
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_secs(1),
        ..MembershipConfig::new(&cx.namespace, "hosts", identity)
    }
}

fn ids(member: &Membership) -> Vec<String> {
    member
        .ring()
        .replicas()
        .iter()
        .map(|r| r.id.clone())
        .collect()
}

async fn wait_for_view(cx: &RealCluster, member: &Membership, expected: &[&str]) -> Result<()> {
    cx.wait_for(
        &format!("{} to see {expected:?}", member.identity()),
        Duration::from_secs(30),
        async || {
            let seen = ids(member);
            Ok(if seen == expected {
                Probe::Ready(())
            } else {
                Probe::Pending(format!("sees {seen:?}"))
            })
        },
    )
    .await
}

#[test]
fn replicas_join_the_ring_and_leave_it_by_expiry_or_by_saying_so() {
    SUITE.run(
        "replicas_join_the_ring_and_leave_it_by_expiry_or_by_saying_so",
        async |cx| {
            let a = Membership::join(cx.client.clone(), config(cx, "replica-a")).await?;
            let b = Membership::join(cx.client.clone(), config(cx, "replica-b")).await?;
            let c = Membership::join(cx.client.clone(), config(cx, "replica-c")).await?;
            let all = ["replica-a", "replica-b", "replica-c"];
            for member in [&a, &b, &c] {
                wait_for_view(cx, member, &all).await?;
                anyhow::ensure!(member.is_live(), "{} is not live", member.identity());
            }

            cx.step("each settles on the ring of three; each sees all settled");
            let version = ring_version(&a.ring());
            for member in [&a, &b, &c] {
                member.settle(&version);
            }
            for member in [&a, &b, &c] {
                cx.wait_for(
                    &format!("{} to see every replica settled", member.identity()),
                    Duration::from_secs(30),
                    async || {
                        let view = member.view();
                        let mut handover = Handover::new(member.identity(), view.ring.clone());
                        handover.observe(view.ring, view.settled.clone());
                        Ok(if handover.all_settled() {
                            Probe::Ready(())
                        } else {
                            Probe::Pending(format!("settled {:?}", view.settled))
                        })
                    },
                )
                .await?;
            }

            cx.step("replica-c stops renewing, as a killed replica does");
            let stopped = std::time::Instant::now();
            drop(c);
            for member in [&a, &b] {
                wait_for_view(cx, member, &["replica-a", "replica-b"]).await?;
            }
            let took = stopped.elapsed();
            cx.step(format!("dropped after {:.1} s", took.as_secs_f64()));
            anyhow::ensure!(
                took >= Duration::from_secs(2),
                "replica-c was dropped {took:?} after it stopped renewing: before its Lease expired"
            );

            cx.step("replica-b leaves");
            b.leave().await?;
            wait_for_view(cx, &a, &["replica-a"]).await?;
            a.leave().await?;
            Ok(())
        },
    );
}

/// Replicas of one rollout start moments apart: the first to join must not
/// find itself alone and take every key (it would list the whole cluster,
/// then give most of it away).
#[test]
fn replicas_starting_together_see_each_other_in_their_first_ring() {
    SUITE.run(
        "replicas_starting_together_see_each_other_in_their_first_ring",
        async |cx| {
            let first = Membership::join(cx.client.clone(), config(cx, "replica-a"));
            let second = async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                Membership::join(cx.client.clone(), config(cx, "replica-b")).await
            };
            let (a, b) = tokio::join!(first, second);
            let (a, b) = (a?, b?);
            let both = ["replica-a", "replica-b"];
            for member in [&a, &b] {
                let seen = ids(member);
                cx.step(format!("{} first saw {seen:?}", member.identity()));
                anyhow::ensure!(
                    seen == both,
                    "{} started with the ring {seen:?}, expected {both:?}",
                    member.identity()
                );
            }
            a.leave().await?;
            b.leave().await?;
            Ok(())
        },
    );
}

/// A replica whose clock ran an hour ahead stamped its Lease an hour into
/// the future, then died. Judged by its stamp against our clock, it would
/// stay in the ring, owning keys no one reconciles, for an hour; judged by
/// when it was seen renewed, it leaves after its duration, and its Lease
/// is removed.
#[test]
fn a_lease_stamped_by_a_clock_ahead_expires_when_seen_idle_and_is_removed() {
    SUITE.run(
        "a_lease_stamped_by_a_clock_ahead_expires_when_seen_idle_and_is_removed",
        async |cx| {
            let a = Membership::join(cx.client.clone(), config(cx, "replica-a")).await?;
            let gone = config(cx, "replica-z");
            let ahead = k8s_openapi::jiff::Timestamp::now()
                + k8s_openapi::jiff::SignedDuration::from_secs(3600);
            cx.create(serde_json::json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": gone.lease_name(), "labels": {RING_LABEL: "hosts"}},
                "spec": {"holderIdentity": "replica-z", "leaseDurationSeconds": 4,
                    "renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(ahead)},
            }))
            .await?;
            wait_for_view(cx, &a, &["replica-a", "replica-z"]).await?;
            let seen = std::time::Instant::now();
            cx.step("replica-z, stamped an hour ahead, never renews");
            wait_for_view(cx, &a, &["replica-a"]).await?;
            let took = seen.elapsed();
            cx.step(format!("dropped after {:.1} s", took.as_secs_f64()));
            anyhow::ensure!(
                took < Duration::from_secs(15),
                "replica-z stayed {took:?}, not its 4 s duration after it was last seen renewed"
            );
            let leases = reconciler_sdk::KindRef::new("coordination.k8s.io", "v1", "Lease");
            cx.wait_for(
                "replica-z's Lease to be removed",
                Duration::from_secs(10),
                async || {
                    Ok(match cx.get(&leases, &gone.lease_name()).await? {
                        None => Probe::Ready(()),
                        Some(_) => Probe::Pending("still there".into()),
                    })
                },
            )
            .await?;
            a.leave().await?;
            Ok(())
        },
    );
}
