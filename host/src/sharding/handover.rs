//! When a replica may reconcile a key: never while another replica may
//! still write it.
//!
//! The ring a replica sees changes when a replica joins, leaves or expires.
//! A key whose owner stays the same keeps being reconciled throughout. A
//! key that moves is reconciled by its new owner only once every live
//! replica has *settled* on the new ring: it stopped dispatching the keys
//! it no longer owns there and its reconciles of them in flight have
//! finished (or were abandoned, writing nothing more). A replica says so
//! by writing the ring's version on its Lease; a replica that died says
//! nothing, and stops counting once its Lease expires.
//!
//! So at every moment a key has at most one writer: its old owner writes
//! only until it settles, its new owner only after that.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::assignment::{Bucket, Replica, Ring, Scheme, ShardKey, members, scheme_of};

/// A ring's version: a digest of its members, their weights and how it
/// assigns, the same on every replica that sees the same members. A ring
/// of rendezvous alone has the version earlier versions give it, so their
/// replicas and this version's agree on it during an upgrade; the same
/// members assigning otherwise are another ring.
pub fn ring_version(ring: &Ring) -> String {
    digest(ring.replicas(), ring.scheme())
}

/// The version the ring of `replicas` has, without assigning its buckets:
/// cheap enough to try many sets of members (an audit of which ring a
/// version names).
pub fn version_of(replicas: impl IntoIterator<Item = Replica>) -> String {
    let replicas = members(replicas);
    digest(&replicas, scheme_of(&replicas))
}

fn digest(replicas: &[Replica], scheme: Scheme) -> String {
    let mut hasher = Sha256::new();
    for replica in replicas {
        hasher.update((replica.id.len() as u64).to_be_bytes());
        hasher.update(replica.id.as_bytes());
        hasher.update(replica.weight.to_be_bytes());
    }
    if scheme != Scheme::Rendezvous {
        hasher.update(b"scheme");
        hasher.update(scheme.number().to_be_bytes());
    }
    hasher
        .finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// How many rings seen since the last agreement are remembered; past
/// that, nothing is taken to have stayed (the safe side: every key waits
/// for the next agreement).
const MAX_RINGS_SINCE_AGREED: usize = 32;

/// What one replica knows of the handover: the ring it sees now, the rings
/// seen since every replica last settled on one, and which ring each live
/// replica says it settled on.
#[derive(Clone, Debug)]
pub struct Handover {
    me: String,
    current: Ring,
    /// The last ring every live replica had settled on (first), then every
    /// ring seen since. A key this replica owned in all of them never had
    /// another writer since; empty: nothing agreed yet.
    since_agreed: Vec<Ring>,
    /// By replica: the version of the ring it last settled on.
    settled: BTreeMap<String, String>,
    /// Derived from the above at every change, because the engines ask at
    /// every dispatch and the coordinator of every cached key: the
    /// version of `current`, whether every live replica settled on it,
    /// and by bucket whether this replica may dispatch its keys.
    version: String,
    agreed: bool,
    may: Vec<bool>,
}

impl Handover {
    /// A replica that starts alone with `ring`: nothing to hand over yet,
    /// but nothing is agreed either until the others say so.
    pub fn new(me: &str, ring: Ring) -> Self {
        let mut handover = Self {
            me: me.to_string(),
            current: ring,
            since_agreed: Vec::new(),
            settled: BTreeMap::new(),
            version: String::new(),
            agreed: false,
            may: Vec::new(),
        };
        handover.derive();
        handover
    }

    fn derive(&mut self) {
        self.version = ring_version(&self.current);
        self.agreed = !self.current.is_empty()
            && self
                .current
                .replicas()
                .iter()
                .all(|r| self.settled.get(&r.id) == Some(&self.version));
        let mine = |ring: &Ring, bucket| ring.owner_of(bucket) == Some(self.me.as_str());
        self.may = Bucket::all()
            .map(|b| {
                mine(&self.current, b)
                    && (self.agreed
                        || (!self.since_agreed.is_empty()
                            && self.since_agreed.iter().all(|r| mine(r, b))))
            })
            .collect();
    }

    /// The ring seen now, and each live replica's settled version (as read
    /// from their Leases). Once every replica of `ring` settled on it, it
    /// becomes the agreed ring.
    pub fn observe(&mut self, ring: Ring, settled: BTreeMap<String, String>) {
        self.current = ring;
        self.settled = settled;
        self.derive();
        if self.all_settled() {
            self.since_agreed = vec![self.current.clone()];
        } else if !self.since_agreed.is_empty() && self.since_agreed.last() != Some(&self.current) {
            // A ring this replica may have settled on: a key it gave up
            // there may have a new writer, even if a later ring gives it
            // back.
            self.since_agreed.push(self.current.clone());
            if self.since_agreed.len() > MAX_RINGS_SINCE_AGREED {
                self.since_agreed.clear();
            }
        }
        self.derive();
    }

    /// The ring seen now.
    pub fn ring(&self) -> &Ring {
        &self.current
    }

    /// Each live replica's settled version, as last read.
    pub fn settled(&self) -> &BTreeMap<String, String> {
        &self.settled
    }

    /// Whether every live replica has settled on the ring seen now.
    pub fn all_settled(&self) -> bool {
        self.agreed
    }

    /// The version this replica should say it settled on once its
    /// reconciles of the keys it gave up have finished.
    pub fn version_to_settle(&self) -> String {
        self.version.clone()
    }

    /// Whether this replica may dispatch `key` now: it owns it in the ring
    /// seen now, and either owned it in every ring since the last agreed
    /// one (the key never moved) or every replica has settled on the ring
    /// seen now (its old owner stopped).
    pub fn may_reconcile(&self, key: &ShardKey) -> bool {
        self.may_reconcile_bucket(key.bucket())
    }

    /// [`Self::may_reconcile`] for every key of `bucket`.
    pub fn may_reconcile_bucket(&self, bucket: Bucket) -> bool {
        self.may.get(bucket.index()).copied().unwrap_or(false)
    }

    /// Whether a reconcile of `key` this replica has in flight must be
    /// stopped before it settles: it no longer owns the key.
    pub fn gave_up(&self, key: &ShardKey) -> bool {
        !self.owns_bucket(key.bucket())
    }

    /// By bucket, the replicas the API server may let write its objects
    /// (the shard fence, `sharding/fence.rs`): its owner in the ring seen
    /// now once it may reconcile there (by the same rule as this replica's
    /// own [`Self::may_reconcile_bucket`]), and, until every live replica
    /// settled on that ring, each owner it had since the last agreed ring
    /// that has not said it settled (it may still be finishing a
    /// reconcile; one that died never says so). A new owner is therefore
    /// never listed beside an old one that may still write.
    pub fn writers_by_bucket(&self) -> Vec<Vec<&str>> {
        Bucket::all()
            .map(|b| {
                let mut writers: Vec<&str> = Vec::new();
                if let Some(owner) = self.current.owner_of(b) {
                    let kept = !self.since_agreed.is_empty()
                        && self
                            .since_agreed
                            .iter()
                            .all(|r| r.owner_of(b) == Some(owner));
                    if self.agreed || kept {
                        writers.push(owner);
                    }
                }
                if !self.agreed {
                    for ring in self.since_agreed.iter().filter(|r| **r != self.current) {
                        let Some(old) = ring.owner_of(b) else {
                            continue;
                        };
                        let settled = self.settled.get(old) == Some(&self.version);
                        if !settled && !writers.contains(&old) {
                            writers.push(old);
                        }
                    }
                }
                writers
            })
            .collect()
    }

    /// Whether this replica owns `bucket` in the ring seen now.
    pub fn owns_bucket(&self, bucket: Bucket) -> bool {
        self.current.owner_of(bucket) == Some(self.me.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(ids: &[&str]) -> Ring {
        Ring::new(ids.iter().map(|id| Replica::new(id)))
    }

    fn keys() -> Vec<ShardKey> {
        (0..600)
            .map(|i| ShardKey::object("local", Some("default"), &format!("podset-{i}")))
            .collect()
    }

    fn settled(ids: &[&str], on: &Ring) -> BTreeMap<String, String> {
        ids.iter()
            .map(|id| (id.to_string(), ring_version(on)))
            .collect()
    }

    /// The writers of `key` among `replicas`, each deciding by its own view.
    fn writers<'a>(replicas: &'a [Handover], key: &ShardKey) -> Vec<&'a str> {
        replicas
            .iter()
            .filter(|h| h.may_reconcile(key))
            .map(|h| h.me.as_str())
            .collect()
    }

    #[test]
    fn versions_are_the_same_for_the_same_members_and_differ_otherwise() {
        assert_eq!(
            ring_version(&ring(&["a", "b"])),
            ring_version(&ring(&["b", "a"]))
        );
        assert_ne!(
            ring_version(&ring(&["a", "b"])),
            ring_version(&ring(&["a", "b", "c"]))
        );
        assert_ne!(
            ring_version(&ring(&["ab"])),
            ring_version(&ring(&["a", "b"]))
        );
    }

    #[test]
    fn a_version_from_members_alone_is_the_ring_version_of_those_members() {
        let older = || Replica::new("c").computing(Scheme::Rendezvous);
        for members in [
            vec![Replica::new("b"), Replica::new("a")],
            vec![Replica::new("a"), Replica::new("a"), Replica::new("b")],
            vec![Replica::new("a"), older()],
            vec![],
        ] {
            assert_eq!(
                version_of(members.clone()),
                ring_version(&Ring::new(members.clone())),
                "{members:?}"
            );
        }
        assert_ne!(
            version_of([Replica::new("a"), older()]),
            version_of([Replica::new("a"), Replica::new("c")])
        );
    }

    #[test]
    fn nothing_is_reconciled_before_the_first_ring_is_agreed() {
        let two = ring(&["a", "b"]);
        let mut a = Handover::new("a", two.clone());
        assert!(keys().iter().all(|k| !a.may_reconcile(k)));
        a.observe(two.clone(), settled(&["a", "b"], &two));
        assert!(keys().iter().any(|k| a.may_reconcile(k)));
    }

    #[test]
    fn a_joining_replica_takes_its_keys_only_once_the_others_have_settled() {
        let (two, three) = (ring(&["a", "b"]), ring(&["a", "b", "c"]));
        let mut replicas: Vec<Handover> = ["a", "b"]
            .iter()
            .map(|me| {
                let mut h = Handover::new(me, two.clone());
                h.observe(two.clone(), settled(&["a", "b"], &two));
                h
            })
            .collect();
        let mut c = Handover::new("c", three.clone());
        c.observe(three.clone(), settled(&["a", "b"], &two));
        replicas.push(c);
        // a and b see c; c has settled at once (it gave nothing up), a and
        // b not yet: the keys moving to c stay with their old owners.
        let mut acks = settled(&["a", "b"], &two);
        acks.insert("c".into(), ring_version(&three));
        for h in &mut replicas {
            h.observe(three.clone(), acks.clone());
        }
        let moving: Vec<ShardKey> = keys()
            .into_iter()
            .filter(|k| three.owner(k) == Some("c"))
            .collect();
        assert!(!moving.is_empty());
        for key in &moving {
            assert!(
                writers(&replicas, key).is_empty(),
                "{key:?}: nobody while the old owner may be writing"
            );
        }
        // Keys that stay keep their writer throughout.
        for key in keys().iter().filter(|k| three.owner(k) != Some("c")) {
            assert_eq!(writers(&replicas, key), [two.owner(key).unwrap()]);
        }
        // a and b settle: c takes its keys, and each key has one writer.
        let acks = settled(&["a", "b", "c"], &three);
        for h in &mut replicas {
            h.observe(three.clone(), acks.clone());
        }
        for key in keys() {
            assert_eq!(writers(&replicas, &key), [three.owner(&key).unwrap()]);
        }
    }

    #[test]
    fn a_replica_that_died_stops_counting_when_its_lease_expires() {
        let (three, two) = (ring(&["a", "b", "c"]), ring(&["a", "b"]));
        let mut a = Handover::new("a", three.clone());
        a.observe(three.clone(), settled(&["a", "b", "c"], &three));
        // c's Lease expired: it is no longer in the ring, so a and b
        // settling is enough for its keys to move.
        a.observe(two.clone(), settled(&["a"], &two));
        let from_c: Vec<ShardKey> = keys()
            .into_iter()
            .filter(|k| three.owner(k) == Some("c") && two.owner(k) == Some("a"))
            .collect();
        assert!(!from_c.is_empty());
        assert!(
            from_c.iter().all(|k| !a.may_reconcile(k)),
            "b has not settled"
        );
        a.observe(two.clone(), settled(&["a", "b"], &two));
        assert!(from_c.iter().all(|k| a.may_reconcile(k)));
        assert!(from_c.iter().all(|k| !a.gave_up(k)));
    }

    #[test]
    fn a_key_given_up_and_given_back_waits_for_its_interim_owner() {
        let (two, alone) = (ring(&["a", "b"]), ring(&["b"]));
        let key = keys()
            .into_iter()
            .find(|k| two.owner(k) == Some("a"))
            .unwrap();
        let mut a = Handover::new("a", two.clone());
        a.observe(two.clone(), settled(&["a", "b"], &two));
        assert!(a.may_reconcile(&key));
        // a's renewals lapsed: it sees itself out, stops and settles
        // there, so b may take the key (a does not see b settle).
        a.observe(alone.clone(), BTreeMap::new());
        assert!(!a.may_reconcile(&key));
        // a is back before it saw b settle on the ring that gives the key
        // back: b may still be writing it.
        a.observe(two.clone(), settled(&["a", "b"], &alone));
        assert!(!a.may_reconcile(&key), "b may still be writing it");
        a.observe(two.clone(), settled(&["a", "b"], &two));
        assert!(a.may_reconcile(&key));
    }

    #[test]
    fn a_replica_gives_up_at_once_what_it_no_longer_owns() {
        let (two, three) = (ring(&["a", "b"]), ring(&["a", "b", "c"]));
        let mut a = Handover::new("a", two.clone());
        a.observe(two.clone(), settled(&["a", "b"], &two));
        a.observe(three.clone(), settled(&["a", "b"], &two));
        for key in keys()
            .iter()
            .filter(|k| two.owner(k) == Some("a") && three.owner(k) == Some("c"))
        {
            assert!(!a.may_reconcile(key) && a.gave_up(key));
        }
        assert_eq!(a.version_to_settle(), ring_version(&three));
    }

    /// What the fence publishes for `key`, as `h` sees the ring.
    fn fenced<'a>(h: &'a Handover, key: &ShardKey) -> Vec<&'a str> {
        h.writers_by_bucket()[key.bucket().index()].clone()
    }

    #[test]
    fn the_fence_names_the_old_owner_until_the_move_is_agreed_then_the_new_one_alone() {
        let (three, two) = (ring(&["a", "b", "c"]), ring(&["a", "b"]));
        let mut a = Handover::new("a", three.clone());
        assert!(
            keys().iter().all(|k| fenced(&a, k).is_empty()),
            "nobody may write before a ring is agreed"
        );
        a.observe(three.clone(), settled(&["a", "b", "c"], &three));
        for key in keys() {
            assert_eq!(fenced(&a, &key), [three.owner(&key).unwrap()]);
        }
        // c froze and its Lease expired; a settled on the ring without it,
        // b not yet.
        a.observe(two.clone(), settled(&["a"], &two));
        let from_c: Vec<ShardKey> = keys()
            .into_iter()
            .filter(|k| three.owner(k) == Some("c"))
            .collect();
        assert!(!from_c.is_empty());
        for key in &from_c {
            assert_eq!(
                fenced(&a, key),
                ["c"],
                "{key:?}: only the old owner, which may still be writing; its new owner not yet"
            );
        }
        for key in keys().iter().filter(|k| three.owner(k) != Some("c")) {
            assert_eq!(fenced(&a, key), [two.owner(key).unwrap()], "{key:?} stays");
        }
        // Once b settled too, c (frozen, perhaps thawing) is named nowhere.
        a.observe(two.clone(), settled(&["a", "b"], &two));
        for key in keys() {
            assert_eq!(fenced(&a, &key), [two.owner(&key).unwrap()]);
        }
    }
}
