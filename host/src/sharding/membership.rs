//! Who is in the ring: each replica holds a coordination.k8s.io Lease of
//! its own, labelled with the ring's name, and renews it every retry
//! period; the live replicas are those whose Lease was renewed within its
//! duration.
//!
//! Why a Lease per replica and not a replica count: scaling the Deployment
//! is all it takes, and a replica that dies without a word (SIGKILL, a node
//! gone) leaves the ring when its Lease expires, as a leader's does.
//!
//! A replica counts itself in only while its own renewals succeed: once the
//! renew deadline has passed since it sent its last successful renewal it
//! drops itself from its view, before the others may drop it from theirs:
//! a lease duration after they saw that renewal, by their own clocks
//! ([`lease_sightings`](super::lease_sightings)), so no two clocks are
//! compared. A Lease the others saw expire is deleted by them, so the
//! Leases of replicas that are gone do not pile up.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use tokio::sync::{Notify, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::assignment::{Replica, Ring, Scheme};
use super::lease_sightings::Sightings;

/// The label naming the ring a replica's Lease belongs to.
pub const RING_LABEL: &str = "reconciler-host.io/shard-ring";
/// The annotation on a replica's Lease naming the ring version it has
/// settled on (see `handover.rs`).
pub const SETTLED_ANNOTATION: &str = "reconciler-host.io/settled-ring";
/// The annotation on a replica's Lease naming who the API server knows it
/// as (`sharding/fence.rs`): the fence lets it write only its buckets.
pub const WRITER_ANNOTATION: &str = "reconciler-host.io/writer";
/// The annotation on a replica's Lease naming the newest way of assigning
/// buckets it computes ([`Scheme::number`]); a Lease without it is of a
/// version that computes rendezvous alone.
pub const SCHEME_ANNOTATION: &str = "reconciler-host.io/assignment-scheme";
/// Who writes the Leases.
const FIELD_MANAGER: &str = "reconciler-host-sharding";

/// The ring as one replica sees it: the live replicas, and the ring
/// version each says it settled on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RingView {
    pub ring: Ring,
    pub settled: BTreeMap<String, String>,
    /// By replica: who the API server knows it as, as it says on its Lease.
    pub writers: BTreeMap<String, String>,
}

/// Which ring, who we are, and the timing of the Leases (leader
/// election's defaults: 15 s, 10 s, 2 s).
#[derive(Clone, Debug)]
pub struct MembershipConfig {
    pub namespace: String,
    /// The ring's name: every replica of one host deployment shares it.
    pub ring: String,
    /// Unique among the replicas (see `leader_election::unique_identity`).
    pub identity: String,
    /// Whole seconds.
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    /// Who the API server knows this replica as (its user, and its pod
    /// when its token is bound to one), written on its Lease for the
    /// shard fence; `None` when it could not be learned.
    pub writer: Option<String>,
}

impl MembershipConfig {
    pub fn new(namespace: &str, ring: &str, identity: &str) -> Self {
        Self {
            namespace: namespace.to_string(),
            ring: ring.to_string(),
            identity: identity.to_string(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            writer: None,
        }
    }

    /// This replica's Lease: the ring's name and the identity, as a valid
    /// object name.
    pub fn lease_name(&self) -> String {
        let name: String = format!("{}-{}", self.ring, self.identity)
            .to_ascii_lowercase()
            .chars()
            .map(|c| match c {
                'a'..='z' | '0'..='9' | '-' | '.' => c,
                _ => '-',
            })
            .take(253)
            .collect();
        name.trim_matches(|c| c == '-' || c == '.').to_string()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    #[error("cannot write this replica's Lease {lease}: {source}")]
    Join { lease: String, source: kube::Error },
    #[error("the Lease timing is invalid: {0}")]
    Settings(String),
}

/// This replica's place in the ring, renewed in the background.
pub struct Membership {
    config: MembershipConfig,
    api: Api<Lease>,
    view: watch::Receiver<RingView>,
    last_renewed: Arc<Mutex<Instant>>,
    /// The version this replica says it settled on, written with every
    /// renewal.
    settled: Arc<Mutex<Option<String>>>,
    /// Asks for a renewal now rather than at the next retry period.
    renew_now: Arc<Notify>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Membership {
    /// Writes this replica's Lease, then keeps renewing it and reading the
    /// ring's. Fails when the first write fails (no RBAC, no namespace).
    pub async fn join(
        client: kube::Client,
        config: MembershipConfig,
    ) -> Result<Self, MembershipError> {
        if config.lease_duration.subsec_nanos() != 0
            || config.retry_period.is_zero()
            || config.retry_period >= config.renew_deadline
            || config.renew_deadline >= config.lease_duration
        {
            return Err(MembershipError::Settings(format!(
                "expected a whole-second lease duration > renew deadline > retry period > 0, got {:?}, {:?}, {:?}",
                config.lease_duration, config.renew_deadline, config.retry_period
            )));
        }
        let api: Api<Lease> = Api::namespaced(client, &config.namespace);
        let settled = Arc::new(Mutex::new(None));
        let sent = Instant::now();
        renew(&api, &config, None)
            .await
            .map_err(|source| MembershipError::Join {
                lease: format!("{}/{}", config.namespace, config.lease_name()),
                source,
            })?;
        let last_renewed = Arc::new(Mutex::new(sent));
        // The replicas of one rollout start within moments of each other.
        // Reading the ring at once, the first of them would find itself
        // alone, take every key, list the whole cluster's share of objects
        // and give most of it away a moment later: for a while one replica
        // holds what the ring was meant to split (at 100,000 objects, the
        // memory a limit was sized against, and the traffic). One retry
        // period lets those starting together see each other's Leases.
        tokio::time::sleep(config.retry_period).await;
        let mut sightings = Sightings::default();
        let first = read_ring(&api, &config, true, None, &Ring::default(), &mut sightings)
            .await
            .map(|(view, _)| view)
            .unwrap_or_else(|_| RingView {
                ring: Ring::new([Replica::new(&config.identity)]),
                ..RingView::default()
            });
        let (publish, view) = watch::channel(first);
        let (stop, stopped) = oneshot::channel();
        let renew_now = Arc::new(Notify::new());
        let task = tokio::spawn(keep(
            Kept {
                api: api.clone(),
                config: config.clone(),
                last_renewed: last_renewed.clone(),
                settled: settled.clone(),
                renew_now: renew_now.clone(),
                sightings,
            },
            publish,
            stopped,
        ));
        Ok(Self {
            config,
            api,
            view,
            last_renewed,
            settled,
            renew_now,
            stop: Some(stop),
            task,
        })
    }

    /// The live replicas as this replica last saw them.
    pub fn ring(&self) -> Ring {
        self.view.borrow().ring.clone()
    }

    /// The ring and what each replica settled on, as last seen.
    pub fn view(&self) -> RingView {
        self.view.borrow().clone()
    }

    /// Told of every change of the view.
    pub fn changes(&self) -> watch::Receiver<RingView> {
        self.view.clone()
    }

    /// Says, from the next renewal on, that this replica settled on ring
    /// `version`: it reconciles none of the keys it gave up there.
    pub fn settle(&self, version: &str) {
        *self.settled.lock().unwrap_or_else(|e| e.into_inner()) = Some(version.to_string());
        // The others wait for it to take their new keys: write it now.
        self.renew_now.notify_one();
    }

    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// Whether this replica's own renewals are recent enough that it may
    /// still act as a member.
    pub fn is_live(&self) -> bool {
        is_live(&self.last_renewed, self.config.renew_deadline)
    }

    /// When this replica stops counting as live unless it renews before:
    /// its last renewal plus the renew deadline. A waiter sleeps until then
    /// rather than looking every so often (an idle replica then wakes at
    /// its renewals alone).
    pub fn live_until(&self) -> Instant {
        live_until(&self.last_renewed, self.config.renew_deadline)
    }

    /// Leaves the ring at once: stops renewing and deletes the Lease, so
    /// the others take over within a retry period instead of a lease
    /// duration.
    pub async fn leave(mut self) -> Result<(), kube::Error> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.ok();
        match self
            .api
            .delete(&self.config.lease_name(), &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl Drop for Membership {
    /// Dropped without `leave`: renewals stop and the Lease expires.
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The last renewal plus the renew deadline: until then this replica
/// counts itself in the ring.
fn live_until(last_renewed: &Mutex<Instant>, renew_deadline: Duration) -> Instant {
    *last_renewed.lock().unwrap_or_else(|e| e.into_inner()) + renew_deadline
}

fn is_live(last_renewed: &Mutex<Instant>, renew_deadline: Duration) -> bool {
    Instant::now() < live_until(last_renewed, renew_deadline)
}

/// What the renewing task holds.
struct Kept {
    api: Api<Lease>,
    config: MembershipConfig,
    last_renewed: Arc<Mutex<Instant>>,
    settled: Arc<Mutex<Option<String>>>,
    renew_now: Arc<Notify>,
    sightings: Sightings,
}

/// Renews and reads every retry period until stopped.
async fn keep(
    mut kept: Kept,
    publish: watch::Sender<RingView>,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut tick = tokio::time::interval(kept.config.retry_period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = kept.renew_now.notified() => {}
            _ = &mut stopped => return,
        }
        // Lapsed is final: a replica frozen past its renew deadline (or
        // cut off that long) must not renew on waking, or the others would
        // count it in again while it still acts on the ring it saw before,
        // and its writes would pass its own checks until it exits. `run`
        // exits on the lapse; a restart joins afresh.
        if !is_live(&kept.last_renewed, kept.config.renew_deadline) {
            tracing::warn!(
                "this replica's Lease {}/{} lapsed past the renew deadline: it renews no more",
                kept.config.namespace,
                kept.config.lease_name()
            );
            return;
        }
        let mine = kept
            .settled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        renew_in_time(&kept, mine.as_deref()).await;
        let config = &kept.config;
        let me = is_live(&kept.last_renewed, config.renew_deadline);
        let seen = publish.borrow().ring.clone();
        let read = read_ring(
            &kept.api,
            config,
            me,
            mine.as_deref(),
            &seen,
            &mut kept.sightings,
        );
        match read.await {
            Ok((view, expired)) => {
                if me {
                    remove_expired(&kept.api, config, expired).await;
                }
                publish.send_if_modified(|seen| {
                    if *seen == view {
                        return false;
                    }
                    if seen.ring != view.ring {
                        let ids: Vec<&str> =
                            view.ring.replicas().iter().map(|m| m.id.as_str()).collect();
                        tracing::info!(
                            "shard ring {}: {} replica(s) live: {}",
                            config.ring,
                            ids.len(),
                            ids.join(", ")
                        );
                    }
                    *seen = view;
                    true
                });
            }
            Err(e) => tracing::warn!("cannot read the shard ring {}'s Leases: {e}", config.ring),
        }
    }
}

/// One renewal. Its clock starts before the Lease is stamped, so this
/// replica never counts itself live longer than the others will; and it
/// waits no longer than this replica is live, so a hung request does not
/// hold up reading the ring.
async fn renew_in_time(kept: &Kept, settled: Option<&str>) {
    let config = &kept.config;
    let sent = Instant::now();
    let bound =
        live_until(&kept.last_renewed, config.renew_deadline).saturating_duration_since(sent);
    let failed = match tokio::time::timeout(bound, renew(&kept.api, config, settled)).await {
        Ok(Ok(())) => {
            let mut last = kept.last_renewed.lock().unwrap_or_else(|e| e.into_inner());
            *last = (*last).max(sent);
            return;
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {} ms", bound.as_millis()),
    };
    tracing::warn!(
        "cannot renew this replica's Lease {}/{}: {failed}",
        config.namespace,
        config.lease_name()
    );
}

/// Deletes the Leases of replicas seen to have stopped renewing, each only
/// as it was read (a renewal since keeps it).
async fn remove_expired(api: &Api<Lease>, config: &MembershipConfig, expired: Vec<Expired>) {
    for lease in expired {
        let params = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                resource_version: lease.resource_version,
                uid: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&lease.name, &params).await {
            Ok(_) => tracing::info!(
                "shard ring {}: removed the Lease {} of replica {}: not seen renewed for its duration",
                config.ring,
                lease.name,
                lease.holder
            ),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => tracing::warn!(
                "shard ring {}: cannot remove the expired Lease {}: {e}",
                config.ring,
                lease.name
            ),
        }
    }
}

/// Writes this replica's Lease, renewed now, with the ring version it
/// settled on.
async fn renew(
    api: &Api<Lease>,
    config: &MembershipConfig,
    settled: Option<&str>,
) -> Result<(), kube::Error> {
    let mut metadata = json!({
        "name": config.lease_name(),
        "labels": {RING_LABEL: config.ring},
    });
    let mut annotations = serde_json::Map::new();
    annotations.insert(
        SCHEME_ANNOTATION.into(),
        Scheme::NEWEST.number().to_string().into(),
    );
    if let Some(version) = settled {
        annotations.insert(SETTLED_ANNOTATION.into(), version.into());
    }
    if let Some(writer) = &config.writer {
        annotations.insert(WRITER_ANNOTATION.into(), writer.as_str().into());
    }
    metadata["annotations"] = annotations.into();
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": config.identity,
            "leaseDurationSeconds": config.lease_duration.as_secs(),
            "renewTime": MicroTime(Timestamp::now()),
        },
    });
    api.patch(
        &config.lease_name(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&lease),
    )
    .await
    .map(|_| ())
}

/// The ring's live replicas from their Leases; this replica counts only
/// if `me` (its renewals are recent), as having settled on `mine`. The
/// assignment of `seen` is reused if the members are the same. Also the
/// other replicas' Leases seen expired.
async fn read_ring(
    api: &Api<Lease>,
    config: &MembershipConfig,
    me: bool,
    mine: Option<&str>,
    seen: &Ring,
    sightings: &mut Sightings,
) -> Result<(RingView, Vec<Expired>), kube::Error> {
    let leases = api
        .list(&ListParams::default().labels(&format!("{RING_LABEL}={}", config.ring)))
        .await?;
    let (mut view, expired) = live_ring(&leases.items, config, me, Instant::now(), seen, sightings);
    if let Some(version) = mine.filter(|_| me) {
        view.settled
            .insert(config.identity.clone(), version.to_string());
    }
    if let Some(writer) = config.writer.as_ref().filter(|_| me) {
        view.writers.insert(config.identity.clone(), writer.clone());
    }
    Ok((view, expired))
}

/// A Lease of another replica seen expired, as read.
#[derive(Debug, PartialEq, Eq)]
struct Expired {
    name: String,
    holder: String,
    resource_version: Option<String>,
}

/// The replicas whose Lease was seen renewed within its duration by `now`
/// (see [`Sightings`]), the ring version each says it settled on, and the
/// Leases seen expired.
fn live_ring(
    leases: &[Lease],
    config: &MembershipConfig,
    me: bool,
    now: Instant,
    seen: &Ring,
    sightings: &mut Sightings,
) -> (RingView, Vec<Expired>) {
    let mut live = BTreeMap::new();
    let mut settled = BTreeMap::new();
    let mut writers = BTreeMap::new();
    let mut expired = Vec::new();
    sightings.keep_only(leases.iter().filter_map(|l| l.metadata.name.as_deref()));
    for lease in leases {
        let (Some(spec), Some(name)) = (&lease.spec, lease.metadata.name.as_deref()) else {
            continue;
        };
        let (Some(holder), Some(renewed), Some(seconds)) = (
            spec.holder_identity.as_deref(),
            spec.renew_time.as_ref(),
            spec.lease_duration_seconds,
        ) else {
            continue;
        };
        if holder == config.identity || !named_for(lease, config, holder) {
            continue;
        }
        let duration = Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
        if sightings.expires(name, &renewed.0.to_string(), duration, now) <= now {
            expired.push(Expired {
                name: name.to_string(),
                holder: holder.to_string(),
                resource_version: lease.metadata.resource_version.clone(),
            });
            continue;
        }
        let annotations = lease.metadata.annotations.as_ref();
        let computes = annotations
            .and_then(|a| a.get(SCHEME_ANNOTATION))
            .and_then(|n| n.parse().ok())
            .map_or(Scheme::Rendezvous, Scheme::from_number);
        live.insert(holder.to_string(), Replica::new(holder).computing(computes));
        if let Some(version) = annotations.and_then(|a| a.get(SETTLED_ANNOTATION)) {
            settled.insert(holder.to_string(), version.clone());
        }
        if let Some(writer) = annotations.and_then(|a| a.get(WRITER_ANNOTATION)) {
            writers.insert(holder.to_string(), writer.clone());
        }
    }
    if me {
        live.insert(config.identity.clone(), Replica::new(&config.identity));
    }
    let view = RingView {
        ring: seen.with_members(live.into_values()),
        settled,
        writers,
    };
    (view, expired)
}

/// Whether `lease` is the one its holder writes: only that one counts, so
/// a copy of a replica's Lease under another name (a manifest applied by
/// hand, a leftover of an earlier ring) cannot put it in the ring twice or
/// keep it there after its own Lease expired.
fn named_for(lease: &Lease, config: &MembershipConfig, holder: &str) -> bool {
    let own = MembershipConfig::new(&config.namespace, &config.ring, holder).lease_name();
    lease.metadata.name.as_deref() == Some(own.as_str())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::LeaseSpec;

    use super::*;

    fn lease(holder: &str, renewed: Timestamp, seconds: i32) -> Lease {
        let mut lease = named_lease(holder, renewed, seconds);
        lease.metadata.name = Some(config_for(holder).lease_name());
        lease
    }

    fn named_lease(holder: &str, renewed: Timestamp, seconds: i32) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(renewed)),
                lease_duration_seconds: Some(seconds),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn ids(view: &RingView) -> Vec<String> {
        view.ring.replicas().iter().map(|r| r.id.clone()).collect()
    }

    /// Live is "seen renewed within its duration, by our clock", whatever
    /// the holder's clock wrote: a Lease stamped in the future, from a
    /// clock running ahead, expires as soon as one stamped in the past.
    #[test]
    fn the_ring_is_the_replicas_seen_renewed_within_their_duration() {
        let config = MembershipConfig::new("ns", "hosts", "me");
        let stamp: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let ahead = stamp + k8s_openapi::jiff::SignedDuration::from_secs(3600);
        let mut leases = vec![
            lease("steady", stamp, 15),
            lease("ahead", ahead, 15),
            lease("me", stamp, 15),
        ];
        let mut sightings = Sightings::default();
        let seen = Ring::default();
        // First seen now: both live; our own Lease as read does not count,
        // our renewals do.
        let (view, expired) = live_ring(&leases, &config, true, at(0), &seen, &mut sightings);
        assert_eq!(ids(&view), ["ahead", "me", "steady"]);
        assert!(expired.is_empty());
        let (view, _) = live_ring(&leases, &config, false, at(0), &seen, &mut sightings);
        assert_eq!(ids(&view), ["ahead", "steady"]);
        // `steady` renews at 10 s; `ahead`, an hour ahead, never does.
        leases[0] = lease(
            "steady",
            stamp + k8s_openapi::jiff::SignedDuration::from_secs(10),
            15,
        );
        leases[1].metadata.resource_version = Some("42".into());
        let (view, _) = live_ring(&leases, &config, false, at(10), &seen, &mut sightings);
        assert_eq!(ids(&view), ["ahead", "steady"]);
        let (view, expired) = live_ring(&leases, &config, false, at(15), &seen, &mut sightings);
        assert_eq!(ids(&view), ["steady"]);
        assert_eq!(
            expired,
            [Expired {
                name: config_for("ahead").lease_name(),
                holder: "ahead".into(),
                resource_version: Some("42".into()),
            }]
        );
    }

    fn config_for(holder: &str) -> MembershipConfig {
        MembershipConfig::new("ns", "hosts", holder)
    }

    #[test]
    fn only_the_lease_named_for_its_holder_counts() {
        let config = MembershipConfig::new("ns", "hosts", "me");
        let renewed: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let mut copy = named_lease("other", renewed, 15);
        copy.metadata.name = Some("hosts-someone-else".into());
        let unnamed = named_lease("nameless", renewed, 15);
        let leases = [lease("fresh", renewed, 15), copy, unnamed];
        let mut sightings = Sightings::default();
        let (view, _) = live_ring(
            &leases,
            &config,
            false,
            Instant::now(),
            &Ring::default(),
            &mut sightings,
        );
        assert_eq!(ids(&view), ["fresh"]);
    }

    /// During an upgrade from a version that only computes rendezvous,
    /// whose Leases name no scheme, the ring assigns as that version does;
    /// once every Lease names the bounded-load pass, the ring uses it.
    #[test]
    fn the_ring_assigns_by_the_newest_scheme_every_lease_names() {
        let config = MembershipConfig::new("ns", "hosts", "me");
        let renewed: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let naming = |holder: &str, number: &str| {
            let mut lease = lease(holder, renewed, 15);
            lease.metadata.annotations =
                Some([(SCHEME_ANNOTATION.to_string(), number.to_string())].into());
            lease
        };
        let ring_of = |leases: &[Lease]| {
            let (view, _) = live_ring(
                leases,
                &config,
                true,
                Instant::now(),
                &Ring::default(),
                &mut Sightings::default(),
            );
            view.ring.scheme()
        };
        let old = lease("old", renewed, 15);
        assert_eq!(ring_of(&[naming("new", "2"), old]), Scheme::Rendezvous);
        assert_eq!(ring_of(&[naming("new", "2")]), Scheme::BoundedLoad);
        // A newer version computes ours too; one naming "1" or nonsense
        // computes rendezvous alone.
        assert_eq!(ring_of(&[naming("newer", "9")]), Scheme::BoundedLoad);
        assert_eq!(ring_of(&[naming("one", "1")]), Scheme::Rendezvous);
        assert_eq!(ring_of(&[naming("odd", "two")]), Scheme::Rendezvous);
    }

    #[test]
    fn lease_names_are_valid_object_names() {
        let config = MembershipConfig::new("ns", "Reconciler-Host", "web-7d4b_00a1b2c3d4e5");
        assert_eq!(config.lease_name(), "reconciler-host-web-7d4b-00a1b2c3d4e5");
    }
}
