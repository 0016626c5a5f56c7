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
use reconciler_host::sharding::membership::{Membership, MembershipConfig};
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
