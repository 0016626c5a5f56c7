//! Which replica owns which key: each key falls in one of [`BUCKETS`]
//! buckets, and each bucket goes to a replica by weighted rendezvous
//! (highest random weight) hashing.
//!
//! Why rendezvous and not a ring of virtual nodes: every replica computes
//! the owner of a bucket from the bucket and the member list alone, with no
//! shared state to agree on; a member that joins takes from each other
//! member about `1/N` of its buckets and a member that leaves hands only
//! its own buckets to the others, which is the least any assignment can
//! move.
//!
//! Why buckets and not keys: a bucket is a label value. Each primary and
//! each child carries its primary's bucket (`reconciler-host.io/shard`),
//! so a replica asks the API server for its own buckets alone and neither
//! receives nor decodes the others' objects. A bucket never changes for a
//! key, so nothing is relabelled when replicas come and go; only the
//! replicas' label selectors change. 1,024 buckets keep each of a few
//! replicas' shares within about 5% of even (256 left one of three
//! replicas 19% short), and a selector of them a few kilobytes.
//!
//! Why a bounded-load pass after it: rendezvous alone leaves one of three
//! replicas with up to 39% of the buckets (1,024 buckets, 200 sets of
//! replica names), and the largest share is what sizes every replica's
//! memory limit. [`Scheme::BoundedLoad`] then moves buckets off any replica
//! above [`LOAD_BOUND`] times its fair share, each time the bucket whose
//! owner wins it by the least margin, to the replica it scores next best
//! among those with room. The buckets moved are the near-ties, which stay
//! near-ties whoever joins, so a ring change moves little more than
//! rendezvous alone would (`bounded_load_keeps_shares_and_moves_little`).
//!
//! The hash is SHA-256, not Rust's `DefaultHasher`: replicas of two
//! versions run side by side during a rolling upgrade, and they must agree
//! on every bucket and owner. `assignment_is_stable_across_builds` pins it.
//! For the same reason a ring uses the newest [`Scheme`] every member says
//! it computes: a replica of a version before the bounded-load pass says
//! nothing and computes rendezvous alone, so a ring with one of them in it
//! does too.

use sha2::{Digest, Sha256};

/// What is assigned to one replica: a primary object of one cluster, or
/// a whole (small) member cluster.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ShardKey {
    Object {
        cluster: String,
        namespace: Option<String>,
        name: String,
    },
    Cluster(String),
}

impl ShardKey {
    /// A primary object of `cluster`.
    pub fn object(cluster: &str, namespace: Option<&str>, name: &str) -> Self {
        Self::Object {
            cluster: cluster.to_string(),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        }
    }

    /// The bytes hashed: unambiguous (each part is length-prefixed), so no
    /// two keys share them.
    fn encode(&self, out: &mut Vec<u8>) {
        let mut part = |bytes: &[u8]| {
            out.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
            out.extend_from_slice(bytes);
        };
        match self {
            ShardKey::Object {
                cluster,
                namespace,
                name,
            } => {
                part(b"object");
                part(cluster.as_bytes());
                part(namespace.as_deref().unwrap_or("").as_bytes());
                part(&[u8::from(namespace.is_some())]);
                part(name.as_bytes());
            }
            ShardKey::Cluster(cluster) => {
                part(b"cluster");
                part(cluster.as_bytes());
            }
        }
    }
}

/// How many buckets the keys fall in: the first 10 bits of the key's hash.
pub const BUCKETS: u16 = 1024;

/// One of the [`BUCKETS`]; as a label value, three hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bucket(u16);

impl Bucket {
    pub fn all() -> impl Iterator<Item = Bucket> {
        (0..BUCKETS).map(Bucket)
    }

    /// Its place among [`BUCKETS`].
    pub fn index(self) -> usize {
        usize::from(self.0)
    }

    /// The value of the shard label on the key's objects.
    pub fn label_value(self) -> String {
        format!("{:03x}", self.0)
    }
}

impl ShardKey {
    /// The bucket `self` falls in: the first 10 bits of its SHA-256.
    pub fn bucket(&self) -> Bucket {
        let mut encoded = Vec::with_capacity(64);
        self.encode(&mut encoded);
        let digest = Sha256::digest(&encoded);
        Bucket(u16::from_be_bytes([digest[0], digest[1]]) >> 6)
    }
}

/// How buckets are given to replicas. Replicas that assign differently
/// would each take a bucket the other also writes, so every replica of a
/// ring must use the same one: the newest all of them compute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scheme {
    /// Weighted rendezvous alone: what replicas that name no scheme compute.
    Rendezvous,
    /// Rendezvous, then the bounded-load pass.
    #[default]
    BoundedLoad,
}

impl Scheme {
    /// The newest scheme this version computes.
    pub const NEWEST: Scheme = Scheme::BoundedLoad;

    /// As a replica's Lease names it: a number, each version computing
    /// every scheme up to its own.
    pub fn number(self) -> u32 {
        match self {
            Scheme::Rendezvous => 1,
            Scheme::BoundedLoad => 2,
        }
    }

    /// The newest scheme a replica computes, from the number it names: one
    /// newer than this version's is one this version cannot compute, but
    /// that replica computes this version's newest too.
    pub fn from_number(number: u32) -> Scheme {
        match number {
            0 | 1 => Scheme::Rendezvous,
            _ => Scheme::NEWEST,
        }
    }
}

/// How far above its fair share (`buckets * weight / total weight`,
/// rounded up) a replica's share may grow under [`Scheme::BoundedLoad`]:
/// at three replicas, 352 of 1,024 buckets (34.4%). A tighter bound moves
/// more buckets at every ring change (1.01: 2.8% more than the fewest on
/// a join to four replicas, against 1.9% at 1.03, averaged over 200 sets
/// of names).
pub const LOAD_BOUND: f64 = 1.03;

/// A live replica: its identity (its Lease's holder), how large a share it
/// takes relative to the others (1 each by default), and the newest way of
/// assigning buckets it computes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replica {
    pub id: String,
    pub weight: u32,
    pub computes: Scheme,
}

impl Replica {
    pub fn new(id: &str) -> Self {
        Self {
            id: id.to_string(),
            weight: 1,
            computes: Scheme::NEWEST,
        }
    }

    /// A replica that computes no scheme newer than `scheme`.
    pub fn computing(mut self, scheme: Scheme) -> Self {
        self.computes = scheme;
        self
    }
}

/// The live replicas, in a canonical order (by id), and the owner of each
/// bucket: two replicas that see the same members assign every key alike,
/// whatever order they listed them in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ring {
    replicas: Vec<Replica>,
    /// The newest scheme every replica computes.
    scheme: Scheme,
    /// Index into `replicas` of each bucket's owner; empty on an empty ring.
    owners: Vec<usize>,
}

impl Ring {
    /// The ring of `replicas`; a replica of weight 0, or listed twice
    /// (the first counts), takes no share.
    pub fn new(replicas: impl IntoIterator<Item = Replica>) -> Self {
        Self::of_members(members(replicas))
    }

    /// The ring of `replicas`, reusing this one's assignment when they
    /// are the same members. Each replica reads the ring at every renewal
    /// and it rarely changes; assigning every bucket anew hashes each of
    /// them once per replica.
    pub fn with_members(&self, replicas: impl IntoIterator<Item = Replica>) -> Self {
        let replicas = members(replicas);
        if replicas == self.replicas {
            self.clone()
        } else {
            Self::of_members(replicas)
        }
    }

    fn of_members(replicas: Vec<Replica>) -> Self {
        let scheme = scheme_of(&replicas);
        let scores: Vec<Vec<f64>> = Bucket::all()
            .map(|bucket| {
                let [high, low] = bucket.0.to_be_bytes();
                let encoded = [b'b', high, low];
                replicas.iter().map(|r| score(r, &encoded)).collect()
            })
            .collect();
        let mut owners: Vec<usize> = if replicas.is_empty() {
            Vec::new()
        } else {
            scores
                .iter()
                .map(|scores| {
                    scores
                        .iter()
                        .enumerate()
                        // Ties (vanishingly rare) go to the smaller id, on
                        // every replica.
                        .max_by(|(a_i, a), (b_i, b)| a.total_cmp(b).then_with(|| b_i.cmp(a_i)))
                        .map_or(0, |(i, _)| i)
                })
                .collect()
        };
        if scheme == Scheme::BoundedLoad {
            bound_loads(&replicas, &scores, &mut owners);
        }
        Self {
            replicas,
            scheme,
            owners,
        }
    }

    pub fn replicas(&self) -> &[Replica] {
        &self.replicas
    }

    /// How this ring assigns its buckets.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    pub fn is_empty(&self) -> bool {
        self.replicas.is_empty()
    }

    /// The replica that owns `key`, or none on an empty ring.
    pub fn owner(&self, key: &ShardKey) -> Option<&str> {
        self.owner_of(key.bucket())
    }

    /// The replica that owns `bucket`, or none on an empty ring.
    pub fn owner_of(&self, bucket: Bucket) -> Option<&str> {
        let i = *self.owners.get(bucket.index())?;
        Some(self.replicas[i].id.as_str())
    }

    /// Whether `replica` owns `key`.
    pub fn owns(&self, replica: &str, key: &ShardKey) -> bool {
        self.owner(key) == Some(replica)
    }

    /// The buckets `replica` owns.
    pub fn buckets_of(&self, replica: &str) -> Vec<Bucket> {
        Bucket::all()
            .filter(|b| self.owner_of(*b) == Some(replica))
            .collect()
    }
}

/// The replicas that take a share, in the canonical order: weight above
/// 0, sorted by id, the first of an id listed twice.
/// The scheme a ring of `replicas` assigns by: the newest all of them compute.
pub(super) fn scheme_of(replicas: &[Replica]) -> Scheme {
    replicas
        .iter()
        .map(|r| r.computes)
        .min()
        .unwrap_or(Scheme::NEWEST)
}

/// A ring's members in its canonical order: weighted, by id, each once.
pub(super) fn members(replicas: impl IntoIterator<Item = Replica>) -> Vec<Replica> {
    let mut replicas: Vec<Replica> = replicas.into_iter().filter(|r| r.weight > 0).collect();
    replicas.sort_by(|a, b| a.id.cmp(&b.id));
    replicas.dedup_by(|later, first| later.id == first.id);
    replicas
}

/// The bounded-load pass: while a replica owns more than its cap, moves the
/// bucket it can give up at the least cost to the replica it scores next
/// best among those under their cap. The cost is how much lower that
/// replica's score is (as a ratio), so the buckets moved are the near-ties
/// and the same ones whoever else is in the ring. Ties go to the lower
/// bucket, then the earlier replica: every replica moves the same buckets.
/// Each move brings the total above the caps down by one, and the caps add
/// up to at least every bucket, so it ends.
fn bound_loads(replicas: &[Replica], scores: &[Vec<f64>], owners: &mut [usize]) {
    let total: f64 = replicas.iter().map(|r| f64::from(r.weight)).sum();
    let caps: Vec<usize> = replicas
        .iter()
        .map(|r| {
            let fair = f64::from(BUCKETS) * f64::from(r.weight) / total;
            (fair * LOAD_BOUND).ceil() as usize
        })
        .collect();
    let mut loads = vec![0usize; replicas.len()];
    for &owner in owners.iter() {
        loads[owner] += 1;
    }
    // Scores as logarithms, so a cost is a ratio whatever the weights.
    let logs: Vec<Vec<f64>> = scores
        .iter()
        .map(|s| s.iter().map(|x| x.ln()).collect())
        .collect();
    loop {
        let mut cheapest: Option<(f64, usize, usize)> = None;
        for (bucket, &owner) in owners.iter().enumerate() {
            if loads[owner] <= caps[owner] {
                continue;
            }
            for to in (0..replicas.len()).filter(|&to| loads[to] < caps[to]) {
                let cost = logs[bucket][owner] - logs[bucket][to];
                if cheapest.is_none_or(|(least, _, _)| cost < least) {
                    cheapest = Some((cost, bucket, to));
                }
            }
        }
        let Some((_, bucket, to)) = cheapest else {
            return;
        };
        loads[owners[bucket]] -= 1;
        loads[to] += 1;
        owners[bucket] = to;
    }
}

/// Weighted rendezvous score of `replica` for an encoded bucket: `-w / ln(u)`
/// with `u` uniform in (0, 1) from the hash, so a replica of twice the
/// weight wins twice as many buckets.
fn score(replica: &Replica, key: &[u8]) -> f64 {
    let mut hasher = Sha256::new();
    hasher.update((replica.id.len() as u64).to_be_bytes());
    hasher.update(replica.id.as_bytes());
    hasher.update(key);
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    // 53 bits, then centred in its bucket: never 0, never 1.
    let u = ((u64::from_be_bytes(first) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    -f64::from(replica.weight) / u.ln()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn keys(n: usize) -> Vec<ShardKey> {
        (0..n)
            .map(|i| {
                ShardKey::object(
                    "local",
                    Some(&format!("ns-{}", i % 7)),
                    &format!("podset-{i}"),
                )
            })
            .collect()
    }

    fn ring(ids: &[&str]) -> Ring {
        Ring::new(ids.iter().map(|id| Replica::new(id)))
    }

    /// The ring of `ids` as versions before the bounded-load pass assign.
    fn rendezvous(ids: &[&str]) -> Ring {
        Ring::new(
            ids.iter()
                .map(|id| Replica::new(id).computing(Scheme::Rendezvous)),
        )
    }

    fn shares(ring: &Ring, keys: &[ShardKey]) -> BTreeMap<String, usize> {
        let mut shares = BTreeMap::new();
        for key in keys {
            *shares
                .entry(ring.owner(key).unwrap().to_string())
                .or_default() += 1;
        }
        shares
    }

    #[test]
    fn every_key_has_one_owner_whatever_order_the_replicas_are_listed_in() {
        let (a, b) = (
            ring(&["r-1", "r-2", "r-3"]),
            ring(&["r-3", "r-1", "r-2", "r-1"]),
        );
        assert_eq!(a, b);
        for key in keys(500) {
            let owner = a.owner(&key).unwrap();
            assert_eq!(b.owner(&key), Some(owner));
            assert_eq!(
                ["r-1", "r-2", "r-3"]
                    .iter()
                    .filter(|r| a.owns(r, &key))
                    .count(),
                1
            );
        }
        assert_eq!(Ring::default().owner(&keys(1)[0]), None);
    }

    #[test]
    fn a_ring_read_again_assigns_as_a_new_one_whether_its_members_changed_or_not() {
        let replicas = |ids: &[&str]| ids.iter().map(|id| Replica::new(id)).collect::<Vec<_>>();
        let seen = ring(&["r-1", "r-2", "r-3"]);
        // The same members, listed otherwise: the same ring.
        assert_eq!(seen.with_members(replicas(&["r-3", "r-2", "r-1"])), seen);
        // Other members: assigned as a ring of them alone would be.
        for ids in [&["r-1", "r-2"][..], &["r-1", "r-2", "r-3", "r-4"], &[]] {
            assert_eq!(seen.with_members(replicas(ids)), ring(ids), "{ids:?}");
        }
        let heavier = [
            Replica::new("r-1"),
            Replica::new("r-2"),
            Replica {
                weight: 2,
                ..Replica::new("r-3")
            },
        ];
        assert_eq!(seen.with_members(heavier.clone()), Ring::new(heavier));
    }

    #[test]
    fn three_replicas_take_about_a_third_each() {
        let keys = keys(3000);
        for (replica, n) in shares(&ring(&["r-1", "r-2", "r-3"]), &keys) {
            assert!((850..=1150).contains(&n), "{replica} owns {n} of 3000");
        }
    }

    #[test]
    fn a_replica_joining_takes_about_its_share_and_nothing_else_moves() {
        let keys = keys(3000);
        let (before, after) = (
            rendezvous(&["r-1", "r-2", "r-3"]),
            rendezvous(&["r-1", "r-2", "r-3", "r-4"]),
        );
        let mut moved = 0;
        for key in &keys {
            let (was, is) = (before.owner(key).unwrap(), after.owner(key).unwrap());
            if was != is {
                assert_eq!(
                    is, "r-4",
                    "{key:?} moved from {was} to {is}, not to the new replica"
                );
                moved += 1;
            }
        }
        assert!(
            (600..=900).contains(&moved),
            "{moved} of 3000 moved, about 750 expected"
        );
    }

    #[test]
    fn a_replica_leaving_hands_over_only_its_own_keys() {
        let keys = keys(3000);
        let (before, after) = (
            rendezvous(&["r-1", "r-2", "r-3"]),
            rendezvous(&["r-1", "r-3"]),
        );
        for key in &keys {
            let (was, is) = (before.owner(key).unwrap(), after.owner(key).unwrap());
            if was != "r-2" {
                assert_eq!(was, is, "{key:?} moved though its owner stayed");
            }
        }
    }

    #[test]
    fn weight_two_takes_about_twice_the_share_and_weight_zero_none() {
        let keys = keys(3000);
        let weighted = Ring::new([
            Replica {
                weight: 2,
                ..Replica::new("big")
            },
            Replica::new("small"),
            Replica {
                weight: 0,
                ..Replica::new("off")
            },
        ]);
        let shares = shares(&weighted, &keys);
        assert!((1850..=2150).contains(&shares["big"]), "{shares:?}");
        assert!(!shares.contains_key("off"), "{shares:?}");
    }

    #[test]
    fn objects_and_clusters_of_the_same_name_are_different_keys() {
        let ring = ring(&["r-1", "r-2", "r-3", "r-4", "r-5", "r-6", "r-7", "r-8"]);
        let differ = (0..50).any(|i| {
            let name = format!("x-{i}");
            ring.owner(&ShardKey::Cluster(name.clone()))
                != ring.owner(&ShardKey::object(&name, None, ""))
        });
        assert!(differ, "the kind of key is part of its hash");
        // A cluster-scoped object is not the namespaced one of an empty namespace.
        let differ = (0..50).any(|i| {
            let name = format!("x-{i}");
            ring.owner(&ShardKey::object("local", None, &name))
                != ring.owner(&ShardKey::object("local", Some(""), &name))
        });
        assert!(differ);
    }

    #[test]
    fn assignment_is_stable_across_builds() {
        // Replicas of two versions must agree during a rolling upgrade: the
        // buckets and owners of these keys are part of the contract between
        // versions, and the buckets are labels on objects in clusters.
        let ring = ring(&["replica-a", "replica-b", "replica-c"]);
        let names = ["web", "api", "db", "cache", "queue", "auth"];
        let key = |name: &str| ShardKey::object("local", Some("default"), name);
        let buckets: Vec<String> = names
            .iter()
            .map(|name| key(name).bucket().label_value())
            .collect();
        let owners: Vec<&str> = names
            .iter()
            .map(|name| ring.owner(&key(name)).unwrap())
            .collect();
        assert_eq!(buckets, PINNED_BUCKETS);
        assert_eq!(owners, PINNED_OWNERS);
        let plain = rendezvous(&["replica-a", "replica-b", "replica-c"]);
        let owners: Vec<&str> = names
            .iter()
            .map(|name| plain.owner(&key(name)).unwrap())
            .collect();
        assert_eq!(owners, PINNED_OWNERS);
        // The bounded-load pass: the shares, and buckets it moved.
        let shares: Vec<usize> = ["replica-a", "replica-b", "replica-c"]
            .iter()
            .map(|r| ring.buckets_of(r).len())
            .collect();
        assert_eq!(shares, [352, 333, 339]);
        for (bucket, from, to) in PINNED_MOVES {
            let bucket = Bucket(u16::from_str_radix(bucket, 16).unwrap());
            assert_eq!(plain.owner_of(bucket), Some(from), "{bucket:?}");
            assert_eq!(ring.owner_of(bucket), Some(to), "{bucket:?}");
        }
    }

    /// Also computed independently (Python): four of the 13 buckets the
    /// bounded-load pass moves off replica-a (365 by rendezvous; cap 352).
    const PINNED_MOVES: [(&str, &str, &str); 4] = [
        ("0e5", "replica-a", "replica-c"),
        ("161", "replica-a", "replica-b"),
        ("1ca", "replica-a", "replica-b"),
        ("274", "replica-a", "replica-c"),
    ];

    /// Computed independently of this code (Python's hashlib and the
    /// encoding above); a change here changes the assignment between
    /// versions and strands every labelled object.
    const PINNED_BUCKETS: [&str; 6] = ["20e", "2f1", "1f5", "1d8", "36a", "126"];
    const PINNED_OWNERS: [&str; 6] = [
        "replica-c",
        "replica-a",
        "replica-b",
        "replica-c",
        "replica-c",
        "replica-c",
    ];

    #[test]
    fn every_bucket_has_one_owner_and_shares_are_near_even() {
        let ring = ring(&["r-1", "r-2", "r-3"]);
        let shares: Vec<usize> = ["r-1", "r-2", "r-3"]
            .iter()
            .map(|r| ring.buckets_of(r).len())
            .collect();
        assert_eq!(shares.iter().sum::<usize>(), usize::from(BUCKETS));
        for n in shares {
            assert!((320..=352).contains(&n), "{n} of 1024 buckets");
        }
        assert!(Ring::default().buckets_of("r-1").is_empty());
    }

    /// Buckets whose owner differs between `a` and `b`.
    fn moved(a: &Ring, b: &Ring) -> usize {
        Bucket::all()
            .filter(|x| a.owner_of(*x) != b.owner_of(*x))
            .count()
    }

    /// Over 100 sets of three replica names: no replica of three holds
    /// more than 34.5% of the buckets (rendezvous alone leaves up to 39%),
    /// and a join to four or a leave to two moves on average at most 5%
    /// more buckets than the fewest that balance the ring (the joiner's
    /// fair share; the leaver's). What one change moves varies more, as it
    /// does with rendezvous alone; `cargo test -p reconciler-host
    /// bounded_load -- --nocapture` prints both.
    #[test]
    fn bounded_load_keeps_shares_and_moves_little() {
        const SETS: usize = 100;
        let fewest_join = f64::from(BUCKETS) / 4.0;
        let fewest_leave = f64::from(BUCKETS) / 3.0;
        let (mut largest, mut largest_plain) = (0usize, 0usize);
        let mut ratios: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for set in 0..SETS {
            let names: Vec<String> = (0..4).map(|i| format!("host-{set}-{i}")).collect();
            let ids: Vec<&str> = names.iter().map(String::as_str).collect();
            let (three, four, two) = (ring(&ids[..3]), ring(&ids), ring(&ids[..2]));
            let plain = [
                rendezvous(&ids[..3]),
                rendezvous(&ids),
                rendezvous(&ids[..2]),
            ];
            for id in &ids[..3] {
                largest = largest.max(three.buckets_of(id).len());
                largest_plain = largest_plain.max(plain[0].buckets_of(id).len());
            }
            let mut record = |what, moved: usize, fewest: f64| {
                ratios.entry(what).or_default().push(moved as f64 / fewest);
            };
            record("join, bounded", moved(&three, &four), fewest_join);
            record("leave, bounded", moved(&three, &two), fewest_leave);
            record("join, rendezvous", moved(&plain[0], &plain[1]), fewest_join);
            record(
                "leave, rendezvous",
                moved(&plain[0], &plain[2]),
                fewest_leave,
            );
        }
        for (what, ratios) in &ratios {
            let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
            let worst = ratios.iter().copied().fold(0.0, f64::max);
            println!("{what}: moved {mean:.3}x the fewest on average, {worst:.3}x at worst");
            if what.ends_with("bounded") {
                assert!(mean <= 1.05, "{what}: {mean:.3}x the fewest");
            }
        }
        let share = |n: usize| n as f64 / f64::from(BUCKETS);
        println!(
            "largest share of three: {:.4} bounded, {:.4} by rendezvous alone",
            share(largest),
            share(largest_plain)
        );
        assert!(share(largest) <= 0.345, "{largest} of {BUCKETS}");
        assert!(largest_plain > largest, "the pass had nothing to do");
    }
}
