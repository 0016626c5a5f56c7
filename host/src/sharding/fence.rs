//! The shard fence's half in the host: who may write each bucket, published
//! where the API server can check it.
//!
//! The host checks its own Lease before every write, but a replica frozen
//! between that check and the request (SIGSTOP, a long pause) sends it
//! anyway once thawed. The API server can refuse it: a
//! ValidatingAdmissionPolicy (`reconciler-host rbac --write-fence`,
//! `process/rbac/fence.rs`) lets the host's identities write an object
//! that carries a shard label only if the ConfigMap this module publishes
//! names the writer for that bucket. The replica holding the duties
//! publishes it from its view of the handover
//! ([`Handover::writers_by_bucket`]): a bucket's new owner is named only
//! once its old owner can no longer be writing, so a thawed replica that
//! lost its buckets is refused, and the new owner's writes wait for the
//! publication.
//!
//! The API server knows a replica by its user, and by its pod when its
//! token is bound to one (as the kubelet mounts them); each replica learns
//! that name with a SelfSubjectReview and writes it on its Lease.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

use super::assignment::Bucket;
use super::handover::Handover;
use crate::support::duty_holder::DutyHolder;

/// The extra field of a user bound to a pod (service account tokens the
/// kubelet projects): replicas sharing one service account differ by it.
pub const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
/// The data key naming the ring version the map was made from.
pub const RING_KEY: &str = "ring";
/// How long before its Lease runs out the duties' holder stops publishing,
/// as for any write (`cluster/kubernetes/write_fence.rs`).
const MARGIN: Duration = Duration::from_secs(2);
/// A publication that hangs does not hold up following the ring.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);

/// The name of the ConfigMap of ring `ring`: what the policy's binding
/// names.
pub fn params_name(ring: &str) -> String {
    format!("{ring}-writers")
}

/// How a writer is named in the map and by the policy: the user, and
/// `/<pod>` when the user is bound to a pod.
pub fn writer_name(username: &str, pod: Option<&str>) -> String {
    match pod {
        Some(pod) => format!("{username}/{pod}"),
        None => username.to_string(),
    }
}

/// Who the API server knows `client` as, by a SelfSubjectReview (any
/// authenticated user may ask, from Kubernetes 1.28).
pub async fn writer_of(client: kube::Client) -> Result<String, kube::Error> {
    let api: Api<SelfSubjectReview> = Api::all(client);
    let review = api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await?;
    let user = review.status.and_then(|s| s.user_info).unwrap_or_default();
    let pod = user
        .extra
        .as_ref()
        .and_then(|extra| extra.get(POD_NAME_EXTRA))
        .and_then(|pods| pods.first());
    Ok(writer_name(
        user.username.as_deref().unwrap_or_default(),
        pod.map(String::as_str),
    ))
}

/// The ConfigMap's data: the ring version, and by bucket (its label value)
/// the writers named between commas, `,a,b,`, which the policy looks for
/// as `,<writer>,`. A replica that did not say who it is, or said it with
/// a comma (which would name more than one writer), names nobody: its
/// writes are refused, never someone else's let through.
pub fn params_data(
    handover: &Handover,
    writers: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut data = BTreeMap::from([(RING_KEY.to_string(), handover.version_to_settle())]);
    for (bucket, replicas) in Bucket::all().zip(handover.writers_by_bucket()) {
        let mut value = String::from(",");
        for writer in replicas
            .iter()
            .filter_map(|r| writer_of_replica(writers, r))
        {
            value.push_str(writer);
            value.push(',');
        }
        data.insert(bucket.label_value(), value);
    }
    data
}

/// The writer `replica` says it is, if it is one the map can name.
fn writer_of_replica<'a>(writers: &'a BTreeMap<String, String>, replica: &str) -> Option<&'a str> {
    writers
        .get(replica)
        .map(String::as_str)
        .filter(|w| !w.is_empty() && !w.contains(','))
}

/// What makes the fence weaker than it should be, for a warning: replicas
/// of the ring with no writer on their Lease, and writers two replicas
/// share (the API server cannot tell those apart).
pub fn doubts(handover: &Handover, writers: &BTreeMap<String, String>) -> Vec<String> {
    let mut doubts = Vec::new();
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for replica in handover.ring().replicas() {
        match writer_of_replica(writers, &replica.id) {
            None => doubts.push(format!(
                "replica {} did not say who the API server knows it as (or said it with a comma): the fence refuses its writes",
                replica.id
            )),
            Some(writer) => {
                if let Some(other) = seen.insert(writer, &replica.id) {
                    doubts.push(format!(
                        "replicas {other} and {} both write as {writer}: the fence cannot tell them apart (give each its own credentials, or tokens bound to their pods)",
                        replica.id
                    ));
                }
            }
        }
    }
    doubts
}

/// Publishes the map while this replica holds the duties.
pub struct FencePublisher {
    api: Api<ConfigMap>,
    name: String,
    ring: String,
    duties: DutyHolder,
    /// What was last published or found, so an unchanged map costs nothing.
    last: Option<BTreeMap<String, String>>,
    /// Doubts already said, so each is logged once.
    said: BTreeSet<String>,
}

impl FencePublisher {
    pub fn new(client: kube::Client, namespace: &str, ring: &str, duties: DutyHolder) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: params_name(ring),
            ring: ring.to_string(),
            duties,
            last: None,
            said: BTreeSet::new(),
        }
    }

    /// Writes the map of `handover` if this replica holds the duties, its
    /// own Lease holds beyond the margin (`held_until`), and the map
    /// changed.
    pub async fn publish(
        &mut self,
        handover: &Handover,
        writers: &BTreeMap<String, String>,
        held_until: Option<tokio::time::Instant>,
    ) {
        if !self.duties.holds() {
            self.last = None;
            return;
        }
        let holds = held_until.is_some_and(|t| t > tokio::time::Instant::now() + MARGIN);
        if !holds {
            return;
        }
        for doubt in doubts(handover, writers) {
            if self.said.insert(doubt.clone()) {
                tracing::warn!("shard fence of ring {}: {doubt}", self.ring);
            }
        }
        let data = params_data(handover, writers);
        if self.last.as_ref() == Some(&data) {
            return;
        }
        match tokio::time::timeout(PUBLISH_TIMEOUT, self.write(&data)).await {
            Ok(Ok(())) => {
                tracing::info!(
                    "shard fence of ring {}: published who may write each bucket of ring {} ({}/{})",
                    self.ring,
                    data[RING_KEY],
                    self.api.namespace().unwrap_or_default(),
                    self.name
                );
                self.last = Some(data);
            }
            Ok(Err(e)) => self.failed(&e.to_string()),
            Err(_) => self.failed("no answer in time"),
        }
    }

    fn failed(&mut self, why: &str) {
        self.last = None;
        tracing::warn!(
            "shard fence of ring {}: cannot write ConfigMap {}: {why} (where the fence policy is installed, the API server keeps refusing writes the old map does not allow; trying again)",
            self.ring,
            self.name
        );
    }

    /// Replaces the ConfigMap as read (a resourceVersion precondition), or
    /// creates it.
    async fn write(&self, data: &BTreeMap<String, String>) -> Result<(), kube::Error> {
        let current = self.api.get_opt(&self.name).await?;
        let fresh = ConfigMap {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some(BTreeMap::from([(
                    super::membership::RING_LABEL.to_string(),
                    self.ring.clone(),
                )])),
                ..ObjectMeta::default()
            },
            data: Some(data.clone()),
            ..ConfigMap::default()
        };
        match current {
            Some(current) if current.data.as_ref() == Some(data) => Ok(()),
            Some(current) => {
                let mut next = fresh;
                next.metadata.resource_version = current.metadata.resource_version;
                self.api
                    .replace(&self.name, &PostParams::default(), &next)
                    .await
                    .map(|_| ())
            }
            None => self
                .api
                .create(&PostParams::default(), &fresh)
                .await
                .map(|_| ()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::assignment::{Replica, Ring};
    use super::super::handover::ring_version;
    use super::*;

    fn agreed(ids: &[&str]) -> Handover {
        let ring = Ring::new(ids.iter().map(|id| Replica::new(id)));
        let mut h = Handover::new(ids[0], ring.clone());
        let settled = ids
            .iter()
            .map(|id| (id.to_string(), ring_version(&ring)))
            .collect();
        h.observe(ring, settled);
        h
    }

    #[test]
    fn each_bucket_names_its_owners_writer_between_commas() {
        let h = agreed(&["a", "b"]);
        let writers = BTreeMap::from([
            (
                "a".to_string(),
                "system:serviceaccount:ns:host/pod-a".to_string(),
            ),
            (
                "b".to_string(),
                "system:serviceaccount:ns:host/pod-b".to_string(),
            ),
        ]);
        let data = params_data(&h, &writers);
        assert_eq!(data.len(), 1025, "the ring and every bucket");
        assert_eq!(data[RING_KEY], h.version_to_settle());
        for bucket in Bucket::all() {
            let owner = h.ring().owner_of(bucket).unwrap();
            assert_eq!(
                data[&bucket.label_value()],
                format!(",{},", writers[owner]),
                "bucket {}",
                bucket.label_value()
            );
        }
        assert!(doubts(&h, &writers).is_empty());
    }

    #[test]
    fn a_replica_without_a_writer_is_named_nowhere_and_shared_writers_are_doubted() {
        let h = agreed(&["a", "b"]);
        let writers = BTreeMap::from([("a".to_string(), "alice".to_string())]);
        let data = params_data(&h, &writers);
        let of_b = Bucket::all()
            .find(|b| h.ring().owner_of(*b) == Some("b"))
            .unwrap();
        assert_eq!(data[&of_b.label_value()], ",");
        assert_eq!(doubts(&h, &writers).len(), 1);
        assert!(doubts(&h, &writers)[0].contains("replica b did not say"));
        // A writer with a comma would name two: it names nobody.
        let forged = BTreeMap::from([
            ("a".to_string(), "alice".to_string()),
            ("b".to_string(), "mallory,alice".to_string()),
        ]);
        assert_eq!(params_data(&h, &forged)[&of_b.label_value()], ",");
        assert!(doubts(&h, &forged)[0].contains("replica b did not say"));
        let shared = BTreeMap::from([
            ("a".to_string(), "alice".to_string()),
            ("b".to_string(), "alice".to_string()),
        ]);
        let said = doubts(&h, &shared);
        assert_eq!(said.len(), 1);
        assert!(said[0].contains("both write as alice"), "{said:?}");
    }

    #[test]
    fn a_writer_is_its_user_and_its_pod() {
        assert_eq!(writer_name("u", None), "u");
        assert_eq!(
            writer_name("system:serviceaccount:n:s", Some("p-1")),
            "system:serviceaccount:n:s/p-1"
        );
    }
}
