//! Field ownership as the store keeps it between calls: one byte string.
//!
//! Why: an [`Ownership`] is a set of paths per manager, each path a boxed
//! slice of segments, each segment a `String`: a Deployment applied by one
//! controller owns some fifteen leaves and costs about five kilobytes in
//! some seventy allocations. The store holds the ownership of every object
//! but reads it only when the object is written, so it keeps it packed
//! (a tenth of that, in one allocation) and unpacks it for the write.
//!
//! The encoding, in the order [`Ownership`] iterates (so packing the same
//! ownership gives the same bytes): for each manager its operation (one
//! byte), its name, its path count, then each path as its segment count and
//! each segment as a tag byte and its string(s). Counts and string lengths
//! are LEB128 varints; strings are UTF-8.

use super::field_set::{FieldPath, FieldSet, Manager, Operation, Ownership, Segment};

/// An [`Ownership`], packed. Only [`PackedOwnership::pack`] makes one, so
/// its bytes always unpack.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PackedOwnership(Box<[u8]>);

const FIELD: u8 = 0;
const ENTRY: u8 = 1;
const ITEM: u8 = 2;

impl PackedOwnership {
    pub fn pack(ownership: &Ownership) -> Self {
        let mut out = Vec::new();
        for (manager, set) in ownership.sets() {
            out.push(operation_tag(manager.operation));
            put_str(&mut out, &manager.name);
            put_len(&mut out, set.len());
            for path in set.iter() {
                let segments = path.segments();
                put_len(&mut out, segments.len());
                for segment in segments {
                    match segment {
                        Segment::Field(name) => {
                            out.push(FIELD);
                            put_str(&mut out, name);
                        }
                        Segment::Entry(entry) => {
                            out.push(ENTRY);
                            put_str(&mut out, entry);
                        }
                        Segment::Item { key, value } => {
                            out.push(ITEM);
                            put_str(&mut out, key);
                            put_str(&mut out, value);
                        }
                    }
                }
            }
        }
        Self(out.into_boxed_slice())
    }

    pub fn unpack(&self) -> Ownership {
        let mut reader = Reader(&self.0);
        let unpacked = reader.ownership();
        debug_assert!(unpacked.is_some(), "packed ownership that does not unpack");
        unpacked.unwrap_or_default()
    }
}

fn operation_tag(operation: Operation) -> u8 {
    match operation {
        Operation::Apply => 0,
        Operation::ApplyStatus => 1,
        Operation::Update => 2,
    }
}

fn put_len(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

/// Reads packed bytes front to back; `None` at the first thing that is not
/// what [`PackedOwnership::pack`] writes.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn ownership(&mut self) -> Option<Ownership> {
        let mut ownership = Ownership::default();
        while !self.0.is_empty() {
            let operation = match self.byte()? {
                0 => Operation::Apply,
                1 => Operation::ApplyStatus,
                2 => Operation::Update,
                _ => return None,
            };
            let manager = Manager {
                name: self.string()?,
                operation,
            };
            let mut set = FieldSet::default();
            for _ in 0..self.len()? {
                let count = self.len()?;
                let mut segments = Vec::with_capacity(count.min(self.0.len()));
                for _ in 0..count {
                    segments.push(self.segment()?);
                }
                set.insert(FieldPath::new(segments));
            }
            ownership.insert_set(manager, set);
        }
        Some(ownership)
    }

    fn segment(&mut self) -> Option<Segment> {
        Some(match self.byte()? {
            FIELD => Segment::Field(self.string()?),
            ENTRY => Segment::Entry(self.string()?),
            ITEM => Segment::Item {
                key: self.string()?,
                value: self.string()?,
            },
            _ => return None,
        })
    }

    fn byte(&mut self) -> Option<u8> {
        let (&first, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(first)
    }

    fn len(&mut self) -> Option<usize> {
        let mut n = 0usize;
        for shift in (0..usize::BITS).step_by(7) {
            let byte = self.byte()?;
            n |= usize::from(byte & 0x7f).checked_shl(shift)?;
            if byte & 0x80 == 0 {
                return Some(n);
            }
        }
        None
    }

    fn string(&mut self) -> Option<String> {
        let len = self.len()?;
        if len > self.0.len() {
            return None;
        }
        let (bytes, rest) = self.0.split_at(len);
        self.0 = rest;
        String::from_utf8(bytes.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ownership_of_every_shape() -> Ownership {
        let deployment = json!({
            "metadata": {
                "labels": {"app.kubernetes.io/name": "web", "ünïcode": "ok"},
                "finalizers": ["example.com/cleanup"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "PodSet", "name": "web",
                    "uid": "0000-1", "controller": true}],
            },
            "spec": {"replicas": 3, "template": {}, "long": "x".repeat(300)},
        });
        let mut ownership = Ownership::default()
            .apply(
                &json!({}),
                &deployment,
                &Manager::new("podset", Operation::Apply),
                false,
            )
            .expect("no other manager to conflict with")
            .ownership;
        ownership.claim(
            Manager::new("kubectl", Operation::Update),
            FieldPath::fields(&["spec", "paused"]),
        );
        ownership.claim(
            Manager::new("podset", Operation::ApplyStatus),
            FieldPath::fields(&["status", "podNames"]),
        );
        ownership
    }

    #[test]
    fn unpacking_gives_back_what_was_packed() {
        let ownership = ownership_of_every_shape();
        let packed = PackedOwnership::pack(&ownership);
        assert_eq!(packed.unpack(), ownership);
        assert_eq!(PackedOwnership::pack(&packed.unpack()), packed);
    }

    #[test]
    fn nobody_owning_anything_packs_to_nothing() {
        let packed = PackedOwnership::pack(&Ownership::default());
        assert!(packed.0.is_empty());
        assert_eq!(packed.unpack(), Ownership::default());
    }

    #[test]
    fn truncated_bytes_never_read_as_the_whole() {
        let ownership = ownership_of_every_shape();
        let packed = PackedOwnership::pack(&ownership);
        for cut in 1..packed.0.len() {
            let mut reader = Reader(&packed.0[..cut]);
            assert_ne!(reader.ownership(), Some(ownership.clone()), "cut at {cut}");
        }
    }
}
