//! Leader election against a mocked API server that keeps the Lease.
//!
//! tokio's clock is paused: the crate's sleeps and our deadlines pass in
//! virtual time, so no test waits for real seconds; bounds such as "within
//! the lease duration" are in that virtual time and exact.

use std::time::Duration;

use http::Method;
use k8s_openapi::api::coordination::v1::Lease;
use serde_json::json;
use tokio::time::timeout;

use super::testing::{Behaviour, LeaseServer, NAME, NAMESPACE, held_by, released};
use super::*;

const OTHER: &str = "pod-b_00000000000b";

fn config() -> LeaderElectionConfig {
    LeaderElectionConfig {
        identity: "pod-a_00000000000a".to_string(),
        ..LeaderElectionConfig::new(NAMESPACE, NAME)
    }
}

async fn lead(server_lease: Option<serde_json::Value>) -> (Leadership, LeaseServer) {
    let (client, server) = LeaseServer::start(server_lease);
    let leadership = acquire(client, config()).await.expect("acquired");
    (leadership, server)
}

#[tokio::test(start_paused = true)]
async fn a_free_lease_is_created_and_acquired() {
    let (leadership, server) = lead(None).await;

    let writes = server.writes();
    let summary: Vec<_> = writes
        .iter()
        .map(|w| (w.method.clone(), w.is_apply()))
        .collect();
    assert_eq!(
        summary,
        [
            (Method::POST, false),
            (Method::PATCH, true),
            (Method::PATCH, false)
        ],
        "create, apply the holder, count the transition: {writes:#?}"
    );
    let apply = &writes[1];
    assert_eq!(apply.body["spec"]["holderIdentity"], config().identity);
    assert_eq!(apply.body["spec"]["leaseDurationSeconds"], 15);
    assert!(apply.query.contains("fieldManager="), "{}", apply.query);
    assert_eq!(server.holder().as_deref(), Some(config().identity.as_str()));
    assert_eq!(leadership.lease(), "ns/reconciler-host");
    assert_eq!(leadership.check(), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn a_live_holder_is_waited_for_then_taken_over_once_it_stops_renewing() {
    let (client, server) = LeaseServer::start(Some(held_by(OTHER, Duration::ZERO)));
    let mut contender = tokio::spawn(acquire(client, config()));

    // Four lease durations while the holder keeps renewing: we only read.
    for _ in 0..4 {
        server.set_lease(Some(held_by(OTHER, Duration::ZERO)));
        assert!(
            timeout(Duration::from_secs(15), &mut contender)
                .await
                .is_err(),
            "a live holder's lease was taken"
        );
    }
    assert!(server.writes().is_empty(), "{:#?}", server.writes());

    // Its last renewal (stamped 20 s ago) is the last we see: it is taken
    // over a lease duration after we saw it, within a read.
    server.set_lease(Some(held_by(OTHER, Duration::from_secs(20))));
    let leadership = timeout(
        config().lease_duration + config().retry_period * 2,
        contender,
    )
    .await
    .expect("taken over a lease duration after its last renewal was seen")
    .expect("the contender ran")
    .expect("acquired");

    assert_eq!(server.holder().as_deref(), Some(config().identity.as_str()));
    let writes = server.writes();
    assert!(
        writes[0].body["spec"]["holderIdentity"].is_null() && !writes[0].is_apply(),
        "the expired holder is cleared first: {writes:#?}"
    );
    assert!(
        writes
            .iter()
            .any(|w| w.is_apply() && w.body["spec"]["holderIdentity"] == config().identity),
        "{writes:#?}"
    );
    assert_eq!(leadership.check(), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn a_released_lease_is_taken_over_within_a_retry_period() {
    let (client, server) = LeaseServer::start(Some(held_by(OTHER, Duration::ZERO)));
    let mut contender = tokio::spawn(acquire(client, config()));
    assert!(
        timeout(Duration::from_secs(5), &mut contender)
            .await
            .is_err()
    );

    // The holder shuts down and clears the holder; its renewTime would
    // have kept us waiting for most of a lease duration.
    server.set_lease(Some(released()));
    timeout(config().retry_period * 2, contender)
        .await
        .expect("taken over at the next read of the Lease")
        .expect("the contender ran")
        .expect("acquired");
    assert_eq!(server.holder().as_deref(), Some(config().identity.as_str()));
}

#[tokio::test(start_paused = true)]
async fn a_lease_taken_by_another_holder_is_lost_and_not_released() {
    let (mut leadership, server) = lead(None).await;

    server.set_lease(Some(held_by(OTHER, Duration::ZERO)));
    let lost = timeout(config().lease_duration, leadership.lost())
        .await
        .expect("noticed at the next renewal");

    assert_eq!(
        lost,
        LeadershipLost::TakenOver {
            lease: "ns/reconciler-host".to_string(),
            holder: OTHER.to_string()
        }
    );
    assert_eq!(leadership.check(), Err(lost));
    let writes = server.writes().len();
    leadership.release().await.expect("nothing to release");
    assert_eq!(server.writes().len(), writes, "another holder's Lease");
    assert_eq!(server.holder().as_deref(), Some(OTHER));
}

#[tokio::test(start_paused = true)]
async fn renewals_failing_until_the_renew_deadline_lose_leadership_before_the_lease_expires() {
    let (mut leadership, server) = lead(None).await;
    let acquired_with = server.writes().len();

    server.behave(Behaviour::FailWrites);
    let lost = timeout(config().lease_duration, leadership.lost())
        .await
        .expect("lost before a standby may take over");

    assert!(
        matches!(
            &lost,
            LeadershipLost::NotRenewed { last_error: Some(e), .. } if e.contains("etcdserver")
        ),
        "{lost:?}"
    );
    assert!(
        server.writes().len() >= acquired_with + 2,
        "failed renewals are tried again: {:#?}",
        server.writes()
    );
    assert!(leadership.check().is_err());
}

#[tokio::test(start_paused = true)]
async fn a_hung_api_server_loses_leadership_at_the_renew_deadline() {
    let (mut leadership, server) = lead(None).await;

    server.behave(Behaviour::Hang);
    let lost = timeout(config().lease_duration, leadership.lost())
        .await
        .expect("lost although the renewal never returned");

    assert!(
        matches!(lost, LeadershipLost::NotRenewed { .. }),
        "{lost:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn renewals_keep_leadership() {
    let (mut leadership, server) = lead(None).await;
    let acquired_with = server.writes().len();

    assert!(
        timeout(config().lease_duration * 4, leadership.lost())
            .await
            .is_err(),
        "lost while renewing"
    );
    assert!(server.writes().len() > acquired_with + 4);
    assert_eq!(server.holder().as_deref(), Some(config().identity.as_str()));
    assert_eq!(leadership.check(), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn a_deleted_lease_is_lost() {
    let (mut leadership, server) = lead(None).await;

    server.set_lease(None);
    let lost = timeout(config().lease_duration, leadership.lost())
        .await
        .expect("noticed at the next renewal");
    assert_eq!(
        lost,
        LeadershipLost::Deleted {
            lease: "ns/reconciler-host".to_string()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn release_clears_the_holder() {
    let (leadership, server) = lead(None).await;

    leadership.release().await.expect("released");

    let lease: Lease = serde_json::from_value(server.lease().expect("the Lease")).unwrap();
    let spec = lease.spec.unwrap_or_default();
    assert_eq!(spec.holder_identity, None);
    assert_eq!(spec.renew_time, None);
    let last = server.writes().pop().expect("a write");
    assert_eq!(last.body["spec"]["holderIdentity"], json!(null));
}

#[tokio::test(start_paused = true)]
async fn missing_rbac_fails_with_what_to_grant() {
    let (client, server) = LeaseServer::start(None);
    server.behave(Behaviour::Forbid);

    let Err(error) = acquire(client, config()).await else {
        panic!("acquired without RBAC");
    };
    assert!(
        matches!(error, LeaderElectionError::Refused { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("ns/reconciler-host") && message.contains("get, create and patch"),
        "{message}"
    );
}

/// The holder is judged by when we saw its Lease renewed, not by its
/// stamp: even a stamp older than the duration is live when first seen,
/// and expires a duration after, unless it changes.
#[test]
fn the_holder_of_a_lease_is_judged_by_when_we_saw_it_renewed() {
    let lease = |value| serde_json::from_value::<Lease>(value).unwrap();
    let mut sightings = Sightings::default();
    let start = Instant::now();
    let old = held_by(OTHER, Duration::from_secs(16));
    assert_eq!(
        holder_of(&lease(old.clone()), &mut sightings, start),
        Holder::Live(OTHER.to_string())
    );
    let later = start + config().lease_duration;
    assert_eq!(
        holder_of(&lease(old), &mut sightings, later),
        Holder::Expired(OTHER.to_string())
    );
    assert_eq!(
        holder_of(
            &lease(held_by(OTHER, Duration::ZERO)),
            &mut sightings,
            later
        ),
        Holder::Live(OTHER.to_string()),
        "renewed: its stamp changed"
    );
    assert_eq!(
        holder_of(&lease(released()), &mut sightings, later),
        Holder::Free
    );
    let mut without_renewal = held_by(OTHER, Duration::ZERO);
    without_renewal["spec"]["renewTime"] = json!(null);
    assert_eq!(
        holder_of(&lease(without_renewal), &mut sightings, later),
        Holder::Expired(OTHER.to_string())
    );
    assert_eq!(
        holder_of(&lease(held_by("", Duration::ZERO)), &mut sightings, later),
        Holder::Free
    );
}

#[test]
fn identities_name_the_pod_and_differ_per_process() {
    assert_eq!(
        identity_for(Some("web-7d9f"), 0xab),
        "web-7d9f_0000000000ab"
    );
    assert_eq!(
        identity_for(None, 1 << 60 | 1),
        "reconciler-host_000000000001"
    );
    let long = "p".repeat(200);
    assert_eq!(identity_for(Some(&long), 1).len(), 63 + 13);
    assert_ne!(unique_identity(), unique_identity());
}

#[test]
fn the_namespace_comes_from_the_pod_then_the_service_account() {
    let some = |s: &str| Some(s.to_string());
    assert_eq!(namespace_from(some("team-a"), some("sa-ns\n")), "team-a");
    assert_eq!(namespace_from(None, some("sa-ns\n")), "sa-ns");
    assert_eq!(namespace_from(some(" "), some("sa-ns")), "sa-ns");
    assert_eq!(namespace_from(None, None), "default");
}

#[test]
fn timings_are_checked() {
    assert!(config().validate().is_ok());
    let invalid = [
        LeaderElectionConfig {
            renew_deadline: Duration::from_secs(15),
            ..config()
        },
        LeaderElectionConfig {
            retry_period: Duration::from_secs(10),
            ..config()
        },
        LeaderElectionConfig {
            lease_duration: Duration::from_millis(15_500),
            ..config()
        },
        LeaderElectionConfig {
            retry_period: Duration::ZERO,
            ..config()
        },
        LeaderElectionConfig {
            namespace: String::new(),
            ..config()
        },
    ];
    for config in invalid {
        assert!(
            matches!(config.validate(), Err(LeaderElectionError::Settings(_))),
            "{config:?}"
        );
    }
}
